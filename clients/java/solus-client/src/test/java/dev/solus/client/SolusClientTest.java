package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import solus.v1.DeduperOuterClass.Deduper;

class SolusClientTest {
    private static final String CLIENT = "java-test";
    @RegisterExtension
    static final SharedServer SERVER = new SharedServer(CLIENT, "d");

    private static List<Boolean> joinAll(List<CompletableFuture<Boolean>> fs) {
        List<Boolean> out = new ArrayList<>(fs.size());
        for (CompletableFuture<Boolean> f : fs) {
            out.add(f.join());
        }
        return out;
    }

    @Test
    void recordsAreCoalescedIntoFullBatches() {
        // A linger far longer than the test: only a full batch is ever sent.
        try (SolusClient c = SERVER.client().maxBatch(100).linger(Duration.ofHours(1)).build()) {
            String d = SERVER.deduper(c);
            long before = SERVER.server().requests("AddIfAbsent", "OK");
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 1000; i++) {
                fs.add(c.addIfAbsent(d, "batch-" + i));
            }
            assertTrue(joinAll(fs).stream().allMatch(b -> b), "1,000 distinct entities are all new");
            assertEquals(10, SERVER.server().requests("AddIfAbsent", "OK") - before, "1,000 entities in batches of 100");
        }
    }

    @Test
    void lingerSendsAPartialBatch() {
        try (SolusClient c = SERVER.client().maxBatch(1000).linger(Duration.ofMillis(20)).build()) {
            String d = SERVER.deduper(c);
            long before = SERVER.server().requests("CheckAbsence", "OK");
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 7; i++) {
                fs.add(c.checkAbsence(d, "linger-" + i));
            }
            assertEquals(List.of(true, true, true, true, true, true, true), joinAll(fs));
            assertEquals(1, SERVER.server().requests("CheckAbsence", "OK") - before, "7 entities, one request");
        }
    }

    @Test
    void answersKeepTheOrderOfCallsAndInBatchDuplicatesArePresent() {
        try (SolusClient c = SERVER.client().maxBatch(4).maxInFlight(4).linger(Duration.ofMillis(2)).build()) {
            String d = SERVER.deduper(c);
            String[] keys = {"a", "b", "a", "c", "b", "d", "a", "e", "f", "c"};
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (String k : keys) {
                fs.add(c.addIfAbsent(d, k));
            }
            assertEquals(List.of(true, true, false, true, false, true, false, true, true, false), joinAll(fs));
            // Everything is now remembered; something never added is absent.
            List<CompletableFuture<Boolean>> check = new ArrayList<>();
            for (String k : new String[] {"f", "a", "never", "e"}) {
                check.add(c.checkAbsence(d, k));
            }
            assertEquals(List.of(false, false, true, false), joinAll(check));
        }
    }

    @Test
    void repeatsSpreadOverConcurrentBatchesAreNewOnlyTheFirstTime() {
        // Batches of 7 over 8 requests in flight: the repeats of a key would land in different
        // requests racing each other; the first call of each key is the one answered new.
        try (SolusClient c = SERVER.client().maxBatch(7).maxInFlight(8).linger(Duration.ofMillis(1)).build()) {
            String d = SERVER.deduper(c);
            int keys = 500;
            int copies = 4;
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int r = 0; r < copies; r++) {
                for (int k = 0; k < keys; k++) {
                    fs.add(c.addIfAbsent(d, "race-" + k));
                }
            }
            List<Boolean> got = joinAll(fs);
            for (int k = 0; k < keys; k++) {
                for (int r = 0; r < copies; r++) {
                    assertEquals(r == 0, got.get(r * keys + k), "copy " + r + " of key race-" + k);
                }
            }
        }
    }

    @Test
    void addThenCheckAbsence() {
        try (SolusClient c = SERVER.client().build()) {
            String d = SERVER.deduper(c);
            List<CompletableFuture<Void>> adds = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                adds.add(c.add(d, "added-" + i));
            }
            adds.forEach(CompletableFuture::join);
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                fs.add(c.checkAbsence(d, "added-" + i));
                fs.add(c.checkAbsence(d, "other-" + i));
            }
            List<Boolean> got = joinAll(fs);
            for (int i = 0; i < 50; i++) {
                assertFalse(got.get(2 * i), "added-" + i + " is present");
            }
            // Other keys may be false positives, at most 1% of them in expectation: allow a few.
            long fp = java.util.stream.IntStream.range(0, 50).filter(i -> !got.get(2 * i + 1)).count();
            assertTrue(fp <= 3, fp + " of 50 never-added keys read present");
        }
    }

    @Test
    void backpressureWithOneRequestInFlightAndFewPendingRecords() {
        try (SolusClient c = SERVER.client().maxBatch(10).maxInFlight(1).maxPendingRecords(25)
                .linger(Duration.ofMillis(1)).build()) {
            String d = SERVER.deduper(c);
            long before = SERVER.server().requests("AddIfAbsent", "OK");
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 2000; i++) {
                fs.add(c.addIfAbsent(d, "bp-" + (i % 1000)));
            }
            List<Boolean> got = joinAll(fs);
            for (int i = 0; i < 2000; i++) {
                assertEquals(i < 1000, got.get(i), "entity " + i);
            }
            assertTrue(SERVER.server().requests("AddIfAbsent", "OK") - before >= 200, "batches of at most 10");
        }
    }

    @Test
    void adminCalls() {
        try (SolusClient c = SERVER.client().build()) {
            String d = SERVER.deduper(c);
            Deduper got = c.getDeduper(d);
            assertEquals(100_000, got.getExpectedInsertions());
            assertEquals(0.01, got.getFalsePositiveRate());
            assertEquals(3600, got.getExpirySeconds());
            assertTrue(got.getActive());
            assertTrue(c.listDedupers(false).stream().anyMatch(x -> x.getName().equals(d)));

            Deduper off = c.updateDeduper(d, false, Duration.ofMinutes(30));
            assertFalse(off.getActive());
            assertEquals(1800, off.getExpirySeconds());
            assertTrue(c.listDedupers(true).stream().noneMatch(x -> x.getName().equals(d)));
            SolusException e = failure(c.addIfAbsent(d, "x"));
            assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
            assertEquals(1, e.attempts(), "not retried");

            assertTrue(c.updateDeduper(d, true, null).getActive());
            assertTrue(c.addIfAbsent(d, "x").join());

            SolusException exists = assertThrows(SolusException.class,
                    () -> c.createDeduper(d, 10, 0.01, Duration.ofHours(1)));
            assertEquals(Status.Code.ALREADY_EXISTS, exists.code());
            SolusException missing = assertThrows(SolusException.class, () -> c.getDeduper("no-such"));
            assertEquals(Status.Code.NOT_FOUND, missing.code());
        }
    }

    @Test
    void refusedCallsFailAtOnce() {
        try (SolusClient c = SERVER.client().build()) {
            assertEquals(Status.Code.NOT_FOUND, failure(c.addIfAbsent("no-such-deduper", "x")).code());
            assertEquals(Status.Code.INVALID_ARGUMENT, failure(c.addIfAbsent("d", new byte[0])).code());
            assertEquals(Status.Code.INVALID_ARGUMENT, failure(c.checkAbsence("d", new byte[5000])).code());
        }
    }

    @Test
    void aDroppedAnswerIsRetriedWithTheSameRequestIdAndStillSaysNew() {
        DropResponses drop = new DropResponses("solus.v1.DeduperService/AddIfAbsent", 1);
        try (SolusClient c = SERVER.client().intercept(drop).linger(Duration.ofHours(1)).backoff(Duration.ofMillis(10), Duration.ofMillis(50)).build()) {
            String d;
            try (SolusClient admin = SERVER.client().build()) {
                d = SERVER.deduper(admin);
            }
            long before = SERVER.server().requests("AddIfAbsent", "OK");
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                fs.add(c.addIfAbsent(d, "lost-" + i));
            }
            c.flush();
            assertTrue(joinAll(fs).stream().allMatch(b -> b), "every entity is new despite the lost answer");
            assertEquals(1, drop.dropped(), "one answer was lost");
            assertEquals(2, SERVER.server().requests("AddIfAbsent", "OK") - before,
                    "the server executed the first attempt and answered the retry");
            // The entities really were written by the first attempt: a fresh request sees them.
            CompletableFuture<Boolean> again = c.addIfAbsent(d, "lost-3");
            c.flush();
            assertFalse(again.join());
        }
    }

    @Test
    void theRetryBudgetEndsInAFailure() {
        SolusServer down = SolusServer.start();
        String address = down.address();
        down.close();
        try (SolusClient c = SolusClient.builder().address(address).clientId(CLIENT).maxAttempts(3)
                .backoff(Duration.ofMillis(5), Duration.ofMillis(20)).build()) {
            SolusException e = failure(c.addIfAbsent("d", "x"));
            assertEquals(Status.Code.UNAVAILABLE, e.code());
            assertEquals(3, e.attempts());
            assertTrue(e.getMessage().contains("AddIfAbsent failed with UNAVAILABLE"), e.getMessage());
        }
    }

    @Test
    void retriesAcrossAServerRestartNeverTurnNewIntoPresent() {
        try (SolusServer own = SolusServer.start();
                SolusClient c = SERVER.client(own).maxBatch(100)
                        .maxPendingRecords(10_000).maxAttempts(100).backoff(Duration.ofMillis(20), Duration.ofMillis(300)).build()) {
            String d = SERVER.deduper(c);
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 3000; i++) {
                fs.add(c.addIfAbsent(d, "restart-" + i));
            }
            c.flush();
            own.stop();
            // Sent while the server is down: retried until it is back.
            for (int i = 3000; i < 6000; i++) {
                fs.add(c.addIfAbsent(d, "restart-" + i));
            }
            c.flush();
            own.startAgain();
            List<Boolean> first;
            try {
                first = joinAll(fs);
            } catch (CompletionException e) {
                throw new AssertionError("server log:\n" + own.log(), e);
            }
            long present = first.stream().filter(b -> !b).count();
            assertEquals(0, present, "distinct entities answered present across the restart");
            // Every one survived the restart: no false negative.
            List<CompletableFuture<Boolean>> again = new ArrayList<>();
            for (int i = 0; i < 6000; i++) {
                again.add(c.addIfAbsent(d, "restart-" + i));
            }
            assertTrue(joinAll(again).stream().noneMatch(b -> b), "a repeat answered new");
        }
    }

    private static SolusException failure(CompletableFuture<?> f) {
        CompletionException e = assertThrows(CompletionException.class, f::join);
        return assertInstanceOf(SolusException.class, e.getCause());
    }
}
