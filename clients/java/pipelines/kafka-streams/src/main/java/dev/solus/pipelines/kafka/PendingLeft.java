package dev.solus.pipelines.kafka;

import java.time.Duration;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.Bytes;

/**
 * How many records the pending-record stores hold, as their changelog says (read_committed, the
 * last value per key, tombstones deleting): what a next owner would restore and ask about again.
 */
final class PendingLeft {
    private PendingLeft() {
    }

    static long count(String bootstrap, Admin admin, String changelog, Duration timeout)
            throws InterruptedException, ExecutionException {
        Set<String> live = new HashSet<>();
        CommittedRecords.forEach(bootstrap, admin, changelog, timeout, new ByteArrayDeserializer(),
                new ByteArrayDeserializer(), r -> {
                    String k = r.partition() + ":" + Bytes.wrap(r.key());
                    if (r.value() == null) {
                        live.remove(k);
                    } else {
                        live.add(k);
                    }
                });
        return live.size();
    }
}
