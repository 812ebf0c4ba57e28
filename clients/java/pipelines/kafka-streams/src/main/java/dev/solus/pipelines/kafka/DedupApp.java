package dev.solus.pipelines.kafka;

import dev.solus.client.SolusClient;
import dev.solus.kafka.SolusDedupProcessor;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Record;

/**
 * One instance of the pipeline's Kafka Streams application: input topic (key = value = id)
 * through {@link SolusDedupProcessor} to the output topic, with
 * {@code processing.guarantee = exactly_once_v2}. Runs until SIGTERM (a clean close) or SIGKILL
 * (the pipeline's crash). Started as a child process by {@link Run}.
 *
 * <pre>
 * DedupApp BOOTSTRAP SOLUS_ADDR DEDUPER APPLICATION_ID STATE_DIR INPUT OUTPUT CLIENT_ID
 * </pre>
 */
public final class DedupApp {
    private DedupApp() {
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 8) {
            throw new IllegalArgumentException("usage: DedupApp BOOTSTRAP SOLUS_ADDR DEDUPER APPLICATION_ID STATE_DIR"
                    + " INPUT OUTPUT CLIENT_ID (got " + args.length + " arguments)");
        }
        String bootstrap = args[0];
        String solus = args[1];
        String deduper = args[2];
        SolusClient.Builder settings = SolusClient.builder().address(solus).clientId("pipeline")
                .maxBatch(1_000).maxInFlight(8).maxAttempts(20)
                .backoff(Duration.ofMillis(50), Duration.ofSeconds(1));

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[5], Consumed.with(Serdes.String(), Serdes.String()))
                .process(SolusDedupProcessor.supplier(settings, deduper,
                        (Record<String, String> r) -> r.value().getBytes(StandardCharsets.UTF_8),
                        Serdes.String(), Serdes.String()))
                .to(args[6], Produced.with(Serdes.String(), Serdes.String()));

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        // The group's member ids start with it: the pipeline sees which instances are in the group.
        p.put(StreamsConfig.CLIENT_ID_CONFIG, args[7]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        // A killed instance's tasks move on after this (default 45 s; the broker's minimum is 6 s).
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6_000);
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1_500);

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.err.println("DedupApp " + args[4] + ": " + before + " -> " + now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }
}
