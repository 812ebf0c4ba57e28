package dev.solus.client;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Issue 46, classes 1 and 4, as they were found: a real {@code solus serve} stalled with SIGSTOP
 * while calls keep coming (a hot entity repeated) or are in flight (then a GOAWAY on resume).
 */
class StallTest {
    @RegisterExtension
    static final SharedServer SERVER = new SharedServer("java-stall");

    /**
     * Class 1: with the server stalled, a hot entity repeated by one producer. Each repeat of the
     * unanswered entity holds a maxPendingRecords slot until its answer, so the producer blocks
     * after 50 calls (before: every repeat returned at once and waited, unbounded: 2,000,000 calls
     * in 2-4.6 s, +381 MiB).
     */
    @Test
    void repeatsOfAnUnansweredEntityCountAgainstThePendingBound() throws Exception {
        try (SolusServer own = SolusServer.start()) {
            SolusClient c = SERVER.client(own).maxPendingRecords(50).linger(Duration.ofMillis(1))
                    .deadline(Duration.ofSeconds(30)).build();
            String d = SERVER.deduper(c);
            List<CompletableFuture<Boolean>> fs = java.util.Collections.synchronizedList(new ArrayList<>());
            AtomicInteger returned = new AtomicInteger();
            own.pause();
            Thread producer;
            try {
                producer = new Thread(() -> {
                    for (int i = 0; i < 2_000; i++) {
                        // Without a record id (answered "present" after the first) and with the
                        // first call's record id (the same record): both kinds of repeat.
                        fs.add(i % 2 == 0 ? c.addIfAbsent(d, "hot")
                                : c.addIfAbsent(d, "hot".getBytes(UTF_8), "r0".getBytes(UTF_8)));
                        returned.incrementAndGet();
                    }
                });
                producer.start();
                Thread.sleep(2_000);
                int n = returned.get();
                List<String> done = new ArrayList<>();
                synchronized (fs) {
                    for (int i = 0; i < fs.size(); i++) {
                        if (fs.get(i).isDone()) {
                            done.add(i + ": " + fs.get(i));
                        }
                    }
                }
                assertEquals(50, n, "calls that returned while the server was stalled (maxPendingRecords 50); done: " + done);
                assertTrue(producer.isAlive(), "the producer is blocked");
            } finally {
                own.resume();
            }
            producer.join(60_000);
            assertFalse(producer.isAlive(), "the producer finished once the server answered");
            int absent = 0;
            for (CompletableFuture<Boolean> f : fs) {
                absent += f.get(30, TimeUnit.SECONDS) ? 1 : 0;
            }
            assertEquals(2_000, fs.size());
            // The first call (no record id) is the new one; records "r0" are other records of a present entity.
            assertEquals(1, absent, "one call answered new");
            c.close();
        }
    }

    /**
     * Class 4: a server with h2's old reset-stream limit (20) stalled 6 s while 1,000 calls are in
     * flight with a 500 ms deadline: the timed-out attempts reset their streams, and on resume the
     * server reads them all at once and closes the connection with GOAWAY ENHANCE_YOUR_CALM
     * "too_many_resets", which grpc-java reports as RESOURCE_EXHAUSTED without trailers. The
     * client retries it like a connection failure: every call is answered (before: 87-100 of 1,000
     * failed with RESOURCE_EXHAUSTED "Abrupt GOAWAY closed sent stream ... too_many_resets", at attempts 4-9 of 60).
     */
    @Test
    void aGoAwayAfterAStallIsRetried() throws Exception {
        try (SolusServer own = SolusServer.start(Map.of("SOLUS__SERVER__MAX_PENDING_ACCEPT_RESET_STREAMS", "20"))) {
            SolusClient c = SERVER.client(own).maxBatch(1).maxInFlight(200).maxPendingRecords(1_000)
                    .linger(Duration.ofMillis(1)).deadline(Duration.ofMillis(500)).maxAttempts(60)
                    .backoff(Duration.ofMillis(50), Duration.ofMillis(200)).build();
            String d = SERVER.deduper(c);
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            own.pause();
            try {
                for (int i = 0; i < 1_000; i++) {
                    fs.add(c.addIfAbsent(d, "e" + i));
                }
                Thread.sleep(6_000);
            } finally {
                own.resume();
            }
            Map<String, Integer> failures = new TreeMap<>();
            int absent = 0;
            for (CompletableFuture<Boolean> f : fs) {
                try {
                    absent += f.get(60, TimeUnit.SECONDS) ? 1 : 0;
                } catch (ExecutionException e) {
                    SolusException se = assertInstanceOf(SolusException.class, e.getCause());
                    failures.merge(se.code() + " " + se.getMessage().replace('\n', ' '), 1, Integer::sum);
                }
            }
            assertEquals(Map.of(), failures, "failed calls by error");
            assertEquals(1_000, absent, "every call answered new");
            c.close();
        }
    }

    /** The status grpc-java makes of a received GOAWAY is retried; the server's own refusal is not. */
    @Test
    void whatIsAGoAway() {
        // As grpc-java 1.85 reports it (seen in aGoAwayAfterAStallIsRetried before the fix), and as older versions did.
        Status goAway = Status.RESOURCE_EXHAUSTED.withDescription("Abrupt GOAWAY closed sent stream. HTTP/2 error code: "
                + "ENHANCE_YOUR_CALM (Bandwidth exhausted), debug data: too_many_resets");
        assertEquals(0, Retry.serverDelayMillis(goAway.asRuntimeException()));
        assertEquals(0, Retry.serverDelayMillis(Status.RESOURCE_EXHAUSTED.withDescription(
                "Bandwidth exhausted\nHTTP/2 error code: ENHANCE_YOUR_CALM\nReceived Goaway\ntoo_many_resets").asRuntimeException()));
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(
                Status.RESOURCE_EXHAUSTED.withDescription("max_record_memory_mib reached").asRuntimeException()));
    }
}
