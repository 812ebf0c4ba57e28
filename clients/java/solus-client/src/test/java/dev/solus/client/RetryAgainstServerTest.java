package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** What a real server's refusals make the client do: retry the transient ones only. */
class RetryAgainstServerTest {
    @Test
    void aCreateBeyondTheMemoryBudgetFailsAfterOneAttemptAndAtOnce() {
        // 1 MiB for all dedupers' bits (one byte per bit); n = 10^7 at 1% needs ~92 MiB.
        try (SolusServer s = SolusServer.start(Map.of("SOLUS__STORAGE__EMBEDDED__MAX_MEMORY_MIB", "1"));
                SolusClient c = SolusClient.builder().address(s.address()).clientId("java-retry").maxAttempts(10)
                        .backoff(Duration.ofMillis(200), Duration.ofSeconds(2)).build()) {
            long t0 = System.nanoTime();
            SolusException e = assertThrows(SolusException.class,
                    () -> c.createDeduper("big", 10_000_000, 0.01, Duration.ofHours(1)));
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertEquals(Status.Code.RESOURCE_EXHAUSTED, e.code(), e.getMessage());
            assertEquals(1, e.attempts(), "a budget refusal is not retried: " + e.getMessage());
            assertTrue(ms < 1_000, "failed in " + ms + " ms, without any backoff");
            assertEquals(1, s.requests("CreateDeduper", "RESOURCE_EXHAUSTED"), "one request reached the server");
        }
    }

    @Test
    void theConcurrencyLimitIsRetriedWithBackoffUntilEveryCallSucceeds() throws Exception {
        try (SolusServer s = SolusServer.start(Map.of("SOLUS__LIMITS__MAX_CONCURRENT_REQUESTS", "1"));
                SolusClient c = SolusClient.builder().address(s.address()).clientId("java-retry").maxBatch(500)
                        .maxInFlight(8).maxAttempts(100).backoff(Duration.ofMillis(5), Duration.ofMillis(100)).build()) {
            c.createDeduper("busy", 100_000, 0.01, Duration.ofHours(1));
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 20_000; i++) {
                fs.add(c.addIfAbsent("busy", "k" + i));
            }
            // Admin calls from other threads meanwhile meet the same limit.
            ExecutorService pool = Executors.newFixedThreadPool(4);
            List<Future<Long>> gets = new ArrayList<>();
            for (int i = 0; i < 40; i++) {
                gets.add(pool.submit(() -> c.getDeduper("busy").getExpectedInsertions()));
            }
            c.flush();
            for (CompletableFuture<Boolean> f : fs) {
                assertTrue(f.get(60, TimeUnit.SECONDS), "distinct keys are all new");
            }
            for (Future<Long> g : gets) {
                assertEquals(100_000L, g.get(60, TimeUnit.SECONDS));
            }
            pool.shutdown();
            long refused = s.requests("AddIfAbsent", "RESOURCE_EXHAUSTED") + s.requests("GetDeduper", "RESOURCE_EXHAUSTED");
            assertTrue(refused > 0, "the limit of 1 refused some of 8 concurrent requests (so some took > 1 attempt)");
        }
    }

    @Test
    void addIfAbsentBeyondTheRecordIdBudgetFailsAfterOneAttempt() {
        // 1 MiB of record ids at 48 bytes each: about 21,800 remembered records.
        try (SolusServer s = SolusServer.start(Map.of("SOLUS__STORAGE__EMBEDDED__MAX_RECORD_MEMORY_MIB", "1"));
                SolusClient c = SolusClient.builder().address(s.address()).clientId("java-retry").maxBatch(1000)
                        .maxAttempts(10).backoff(Duration.ofMillis(200), Duration.ofSeconds(2)).build()) {
            c.createDeduper("ids", 100_000, 0.01, Duration.ofHours(1));
            long t0 = System.nanoTime();
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 40_000; i++) {
                fs.add(c.addIfAbsent("ids", ("k" + i).getBytes(), ("src/0/" + i).getBytes()));
            }
            c.flush();
            int answered = 0;
            int refused = 0;
            for (CompletableFuture<Boolean> f : fs) {
                try {
                    assertTrue(f.join());
                    answered++;
                } catch (java.util.concurrent.CompletionException e) {
                    SolusException se = (SolusException) e.getCause();
                    assertEquals(Status.Code.RESOURCE_EXHAUSTED, se.code(), se.getMessage());
                    assertEquals(1, se.attempts(), "a budget refusal is not retried: " + se.getMessage());
                    refused++;
                }
            }
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(answered >= 15_000 && answered <= 25_000, answered + " records fit the 1 MiB budget");
            assertEquals(40_000, answered + refused);
            assertTrue(ms < 15_000, "took " + ms + " ms");
        }
    }
}
