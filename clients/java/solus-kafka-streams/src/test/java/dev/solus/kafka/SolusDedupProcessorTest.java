package dev.solus.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.solus.client.SolusClient;
import dev.solus.client.SolusServer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Properties;
import java.util.Random;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Record;
import org.junit.jupiter.api.Test;

class SolusDedupProcessorTest {
    @Test
    void onlyFirstOccurrencesComeOutThroughASolusRestart() {
        try (SolusServer server = SolusServer.start()) {
            SolusClient.Builder settings = SolusClient.builder().address(server.address()).clientId("kafka-test")
                    .maxBatch(200).maxPendingRecords(20_000).maxAttempts(100).backoff(Duration.ofMillis(20), Duration.ofMillis(300));
            try (SolusClient admin = settings.build()) {
                admin.createDeduper("events", 100_000, 0.01, Duration.ofHours(1));
            }

            StreamsBuilder builder = new StreamsBuilder();
            builder.stream("events", Consumed.with(Serdes.String(), Serdes.String()))
                    .process(SolusDedupProcessor.supplier(settings, "events",
                            (Record<String, String> r) -> r.value().getBytes(StandardCharsets.UTF_8),
                            50_000, Duration.ofMillis(10)))
                    .to("unique", Produced.with(Serdes.String(), Serdes.String()));
            Properties props = new Properties();
            props.put(StreamsConfig.APPLICATION_ID_CONFIG, "solus-dedup-test");
            props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");

            // 10,000 records, 30% of them repeats of an earlier id.
            Random rnd = new Random(42);
            List<String> input = new ArrayList<>();
            for (int i = 0; i < 10_000; i++) {
                input.add(i > 0 && rnd.nextDouble() < 0.3 ? input.get(rnd.nextInt(i)) : "event-" + i);
            }
            List<String> firsts = new ArrayList<>(new LinkedHashSet<>(input));

            try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(), props)) {
                TestInputTopic<String, String> in = driver.createInputTopic("events",
                        new StringSerializer(), new StringSerializer());
                TestOutputTopic<String, String> out = driver.createOutputTopic("unique",
                        new StringDeserializer(), new StringDeserializer());
                List<String> got = new ArrayList<>();
                in.pipeValueList(input.subList(0, 5_000));
                driver.advanceWallClockTime(Duration.ofMillis(10));
                got.addAll(out.readValuesToList());

                server.stop();
                in.pipeValueList(input.subList(5_000, 10_000)); // answered once Solus is back
                server.startAgain();
                driver.advanceWallClockTime(Duration.ofMillis(10));
                got.addAll(out.readValuesToList());

                // Exactly the first occurrences, in order: no repeat let through, no id lost (the ids
                // are few against the deduper's n, so a false positive is unlikely).
                assertEquals(firsts, got);
            }
        }
    }
}
