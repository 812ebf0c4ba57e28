package dev.solus.client;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The heap one waiting call of a hot entity takes while the server is stalled (issue 46, class
 * 1): what maxPendingRecords bounds. Prints the figures the README gives.
 */
class WaitingCallMemoryTest {
    @RegisterExtension
    static final SharedServer SERVER = new SharedServer("java-memory");

    private static final int CALLS = 100_000;

    @Test
    void bytesPerWaitingCall() throws Exception {
        try (SolusServer own = SolusServer.start()) {
            SolusClient c = SERVER.client(own).maxPendingRecords(3 * CALLS + 10).linger(Duration.ofMillis(1))
                    .deadline(Duration.ofSeconds(60)).build();
            String d = SERVER.deduper(c);
            byte[] hot = "hot-entity-0001".getBytes(UTF_8);
            List<CompletableFuture<Boolean>> all = new ArrayList<>();
            own.pause();
            long noId;
            long sameId;
            long otherIds;
            try {
                all.add(c.addIfAbsent(d, hot, "r-first".getBytes(UTF_8)));
                noId = measure(all, i -> c.addIfAbsent(d, hot));
                sameId = measure(all, i -> c.addIfAbsent(d, hot, "r-first".getBytes(UTF_8)));
                // Other records: each is sent once the calls before are answered (held meanwhile).
                otherIds = measure(all, i -> c.addIfAbsent(d, hot, ("topic/0/" + (1_000_000 + i)).getBytes(UTF_8)));
            } finally {
                own.resume();
            }
            System.out.printf("bytes per waiting call of a hot entity (%,d calls each, server stalled): "
                    + "no record id %d, the same record id %d, other record ids %d%n", CALLS, noId, sameId, otherIds);
            int absent = 0;
            for (CompletableFuture<Boolean> f : all) {
                absent += f.get(120, TimeUnit.SECONDS) ? 1 : 0;
            }
            // The first call and the calls with its record id (the same record, sharing its answer) are new.
            assertEquals(1 + CALLS, absent);
            for (long b : new long[] {noId, sameId, otherIds}) {
                assertTrue(b > 16 && b < 2_000, "bytes per waiting call " + b);
            }
            c.close();
        }
    }

    /** Heap bytes per call of {@code CALLS} calls made by {@code call}, their futures kept in {@code keep}. */
    private static long measure(List<CompletableFuture<Boolean>> keep, IntFunction<CompletableFuture<Boolean>> call) {
        List<CompletableFuture<Boolean>> made = new ArrayList<>(CALLS);
        long before = usedAfterGc();
        for (int i = 0; i < CALLS; i++) {
            made.add(call.apply(i));
        }
        long after = usedAfterGc();
        keep.addAll(made);
        return (after - before) / CALLS;
    }

    private static long usedAfterGc() {
        Runtime rt = Runtime.getRuntime();
        long used = Long.MAX_VALUE;
        for (int i = 0; i < 5; i++) {
            System.gc();
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            used = Math.min(used, rt.totalMemory() - rt.freeMemory());
        }
        return used;
    }
}
