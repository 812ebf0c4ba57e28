package dev.solus.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.solus.client.SolusClient;
import dev.solus.client.SolusServer;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.api.common.functions.DefaultOpenContext;
import org.apache.flink.streaming.api.functions.async.CollectionSupplier;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.junit.jupiter.api.Test;

/**
 * The function as Flink runs it: serialized to the worker, opened, then asyncInvoke per element
 * with many elements outstanding (the async operator's capacity), against a real Solus.
 */
class SolusDedupFunctionTest {
    private static final class Collect implements ResultFuture<String> {
        final CompletableFuture<Collection<String>> out = new CompletableFuture<>();

        @Override
        public void complete(Collection<String> result) {
            out.complete(result);
        }

        @Override
        public void completeExceptionally(Throwable error) {
            out.completeExceptionally(error);
        }

        @Override
        public void complete(CollectionSupplier<String> supplier) {
            try {
                out.complete(supplier.get());
            } catch (Exception e) {
                out.completeExceptionally(e);
            }
        }
    }

    @SuppressWarnings("unchecked")
    private static <T> T roundTrip(T o) throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
            out.writeObject(o);
        }
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
            return (T) in.readObject();
        }
    }

    private static List<String> run(SolusDedupFunction<String> fn, List<String> input) {
        List<Collect> results = new ArrayList<>();
        for (String s : input) {
            Collect c = new Collect();
            fn.asyncInvoke(s, c);
            results.add(c);
        }
        List<String> out = new ArrayList<>();
        for (Collect c : results) {
            out.addAll(c.out.join());
        }
        return out;
    }

    @Test
    void emitsOnlyNewIdsThroughASolusRestart() throws Exception {
        try (SolusServer server = SolusServer.start()) {
            SolusClient.Builder settings = SolusClient.builder().address(server.address()).clientId("flink-test")
                    .maxBatch(100).maxInFlight(1).maxPendingRecords(5_000).maxAttempts(100)
                    .backoff(Duration.ofMillis(20), Duration.ofMillis(300));
            try (SolusClient admin = settings.build()) {
                admin.createDeduper("events", 100_000, 0.01, Duration.ofHours(1));
            }
            // id@payload: the id is the entity, the whole element its record id.
            SolusDedupFunction<String> fn = roundTrip(new SolusDedupFunction<>(settings, "events",
                    s -> s.substring(0, s.indexOf('@')).getBytes(StandardCharsets.UTF_8),
                    s -> s.getBytes(StandardCharsets.UTF_8)));
            fn.open(DefaultOpenContext.INSTANCE);
            try {
                // id@payload: the id decides, the payload rides along.
                List<String> first = new ArrayList<>();
                List<String> want = new ArrayList<>();
                for (int i = 0; i < 2000; i++) {
                    first.add("id-" + (i % 1000) + "@" + i);
                    if (i < 1000) {
                        want.add("id-" + i + "@" + i);
                    }
                }
                assertEquals(want, run(fn, first));

                server.stop();
                List<String> second = new ArrayList<>();
                for (int i = 0; i < 1000; i++) {
                    second.add("id-" + (500 + i) + "@late");
                }
                List<String> want2 = new ArrayList<>();
                for (int i = 1000; i < 1500; i++) {
                    want2.add("id-" + i + "@late");
                }
                CompletableFuture<List<String>> out = CompletableFuture.supplyAsync(() -> run(fn, second));
                server.startAgain();
                assertEquals(want2, out.join());
            } finally {
                fn.close();
            }
        }
    }
}
