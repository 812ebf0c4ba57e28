package dev.solus.pipelines.kafka;

import java.time.Duration;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Where the lost ids were in the input: each one's first (partition, offset), printed as counts
 * per partition and 25,000-offset bucket and the first few, to compare with the kill points.
 */
final class LostReport {
    private LostReport() {
    }

    static void print(String bootstrap, Admin admin, String input, Set<String> lost)
            throws InterruptedException, ExecutionException {
        Map<TopicPartition, Long> end = Progress.endOffsets(admin, input);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5_000);
        Map<String, String> where = new HashMap<>();
        Map<String, Integer> buckets = new TreeMap<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer())) {
            c.assign(end.keySet());
            c.seekToBeginning(end.keySet());
            long deadline = System.nanoTime() + Duration.ofMinutes(2).toNanos();
            while (end.entrySet().stream().anyMatch(e -> c.position(e.getKey()) < e.getValue())
                    && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (lost.contains(r.value()) && !where.containsKey(r.value())) {
                        where.put(r.value(), r.partition() + "@" + r.offset());
                        String b = String.format(Locale.ROOT, "p%d %,7d-", r.partition(), r.offset() / 25_000 * 25_000);
                        buckets.merge(b, 1, Integer::sum);
                    }
                }
            }
        }
        System.out.println("lost ids by first position (partition, offset bucket): " + buckets);
        where.entrySet().stream().limit(10).forEach(e -> System.out.println("  lost " + e.getKey() + " first at " + e.getValue()));
    }
}
