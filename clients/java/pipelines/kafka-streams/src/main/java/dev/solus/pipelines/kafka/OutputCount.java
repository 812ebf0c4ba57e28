package dev.solus.pipelines.kafka;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
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
        Map<TopicPartition, Long> end = Progress.endOffsets(admin, topic);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5_000);
        Map<String, Integer> counts = new HashMap<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.assign(end.keySet());
            c.seekToBeginning(end.keySet());
            while (!reached(c, end)) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("reading " + topic + " did not reach its end offsets " + end
                            + " within " + timeout + " (an open transaction?)");
                }
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    counts.merge(r.value(), 1, Integer::sum);
                }
            }
        }
        return counts;
    }

    private static boolean reached(KafkaConsumer<?, ?> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }
}
