package dev.solus.pipelines.kafka;

import java.time.Duration;
import java.util.HashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
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
        Map<TopicPartition, Long> end = Progress.endOffsets(admin, changelog);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5_000);
        Set<String> live = new HashSet<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            c.assign(end.keySet());
            c.seekToBeginning(end.keySet());
            while (end.entrySet().stream().anyMatch(e -> c.position(e.getKey()) < e.getValue())) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("reading " + changelog + " did not reach its end within " + timeout);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    String k = r.partition() + ":" + Bytes.wrap(r.key());
                    if (r.value() == null) {
                        live.remove(k);
                    } else {
                        live.add(k);
                    }
                }
            }
        }
        return live.size();
    }
}
