package dev.solus.pipelines.kafka;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.serialization.StringDeserializer;

/** Reads a whole topic with {@code isolation.level = read_committed} and counts each value. */
final class OutputCount {
    private OutputCount() {
    }

    /**
     * How many times each value is in {@code topic}'s committed records, read from the beginning
     * up to the end offsets taken at the start (no transaction may be open then: stop the
     * producers first). Throws after {@code timeout} without reaching them.
     */
    static Map<String, Integer> read(String bootstrap, Admin admin, String topic, Duration timeout)
            throws InterruptedException, ExecutionException {
        Map<String, Integer> counts = new HashMap<>();
        CommittedRecords.forEach(bootstrap, admin, topic, timeout, new StringDeserializer(), new StringDeserializer(),
                r -> counts.merge(r.value(), 1, Integer::sum));
        return counts;
    }
}
