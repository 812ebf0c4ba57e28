package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.Map;
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
}
