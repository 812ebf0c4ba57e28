package dev.solus.pipelines.kafka;

import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/** Creates the pipeline's topics and writes the workload to the input topic. */
final class Input {
    private Input() {
    }

    /** Creates {@code input} and {@code output} with {@code partitions} partitions each, one replica. */
    static void createTopics(Admin admin, String input, String output, int partitions)
            throws InterruptedException, ExecutionException {
        admin.createTopics(List.of(new NewTopic(input, partitions, (short) 1),
                new NewTopic(output, partitions, (short) 1))).all().get();
    }

    /**
     * Writes every record of {@code w} to {@code topic}, key = value = id (so every occurrence of
     * an id lands in the same partition), idempotent and acks = all; returns once all are
     * acknowledged, or throws the first send error.
     */
    static void produce(String bootstrap, String topic, Workload w) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 20);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < w.records() && failed.get() == null; i++) {
                String id = w.id(i);
                producer.send(new ProducerRecord<>(topic, id, id), (md, e) -> {
                    if (e != null) {
                        failed.compareAndSet(null, e);
                    }
                });
            }
            producer.flush();
        }
        if (failed.get() != null) {
            throw new IllegalStateException("producing the input to " + topic + " failed: " + failed.get(), failed.get());
        }
    }

    /** Sum of the end offsets of {@code topic}'s partitions. */
    static long endOffsets(Admin admin, String topic) throws InterruptedException, ExecutionException {
        return Progress.sum(Progress.endOffsets(admin, topic));
    }
}
