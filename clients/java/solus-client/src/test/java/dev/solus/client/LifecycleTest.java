package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The life of a future: cancellation, callbacks that throw or call the client again, an
 * interrupted wait for a slot, and close with answers outstanding. Each test is the shape in
 * which the fault was found.
 */
class LifecycleTest {
    private static final AtomicInteger NAMES = new AtomicInteger();
    private static SolusServer server;

    @BeforeAll
    static void startServer() {
        server = SolusServer.start();
    }

    @AfterAll
    static void stopServer() {
        if (server != null) {
            server.close();
        }
    }

    private static SolusClient.Builder client(SolusServer s) {
        return SolusClient.builder().address(s.address()).clientId("java-lifecycle");
    }

    private static String deduper(SolusClient c) {
        String name = "l" + NAMES.incrementAndGet();
        c.createDeduper(name, 100_000, 0.01, Duration.ofHours(1));
        return name;
    }

    private static <T> T get(CompletableFuture<T> f) throws Exception {
        return f.get(10, TimeUnit.SECONDS);
    }

    @Test
    void cancellingOneFutureLeavesTheRestOfItsBatch() throws Exception {
        try (SolusClient c = client(server).maxBatch(10).maxPendingRecords(10).linger(Duration.ofHours(1)).build()) {
            String d = deduper(c);
            List<CompletableFuture<Boolean>> fs = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                fs.add(c.addIfAbsent(d, "k" + i));
            }
            assertTrue(fs.get(3).cancel(true));
            for (int i = 0; i < 10; i++) {
                if (i != 3) {
                    assertTrue(get(fs.get(i)), "k" + i + " is new");
                }
            }
            // All 10 slots came back, the cancelled call's too: 10 more calls do not block.
            assertTimeoutPreemptively(Duration.ofSeconds(10), () -> {
                List<CompletableFuture<Boolean>> more = new ArrayList<>();
                for (int i = 0; i < 10; i++) {
                    more.add(c.checkAbsence(d, "k" + i));
                }
                c.flush();
                for (CompletableFuture<Boolean> f : more) {
                    assertFalse(get(f), "cancelling a future does not withdraw its record: every k was added");
                }
            });
        }
    }

    @Test
    void cancellingTheFirstCallOfAnEntityDoesNotFailItsRepeat() throws Exception {
        try (SolusClient c = client(server).linger(Duration.ofHours(1)).build()) {
            String d = deduper(c);
            CompletableFuture<Boolean> first = c.addIfAbsent(d, "x");
            CompletableFuture<Boolean> repeat = c.addIfAbsent(d, "x");
            CompletableFuture<Boolean> sameRecord1 = c.addIfAbsent(d, "y".getBytes(), "src/0/7".getBytes());
            CompletableFuture<Boolean> sameRecord2 = c.addIfAbsent(d, "y".getBytes(), "src/0/7".getBytes());
            first.cancel(true);
            sameRecord1.cancel(true);
            c.flush();
            assertFalse(get(repeat), "the cancelled first call was still sent and added x");
            assertTrue(get(sameRecord2), "the same record: the first call's answer, new");
        }
    }

    @Test
    void aCallbackThatCallsTheClientDoesNotDeadlock() throws Exception {
        // One slot, one request in flight: the callback's call needs the slot of the call it follows.
        SolusClient c = client(server).maxBatch(1).maxInFlight(1).maxPendingRecords(1).build();
        try {
            String d = deduper(c);
            CompletableFuture<Boolean> second = c.addIfAbsent(d, "a").thenCompose(x -> c.addIfAbsent(d, "b"));
            CompletableFuture<Boolean> third = second.thenCompose(x -> c.checkAbsence(d, "a"));
            assertTrue(get(second), "b is new");
            assertFalse(get(third), "a was added");
        } finally {
            c.close(Duration.ofSeconds(1));
        }
    }

    @Test
    void aCallbackThatThrowsReturnsItsSlot() throws Exception {
        try (SolusClient c = client(server).maxBatch(1).maxPendingRecords(1).build()) {
            String d = deduper(c);
            assertTimeoutPreemptively(Duration.ofSeconds(20), () -> {
                // Each call needs the slot of the one before, whose callback threw.
                for (int i = 0; i < 20; i++) {
                    c.addIfAbsent(d, "t" + i).thenAccept(x -> {
                        throw new IllegalStateException("a callback that throws");
                    });
                }
                assertFalse(get(c.addIfAbsent(d, "t19")), "every call went through");
            });
        }
    }

    @Test
    void anInterruptWhileWaitingForASlotFailsOnlyThatCall() throws Exception {
        // One slot, held by a call whose batch waits (linger 1 h): the next calls wait for it.
        try (SolusClient c = client(server).maxBatch(2).maxPendingRecords(1).linger(Duration.ofHours(1)).build()) {
            String d = deduper(c);
            CompletableFuture<Boolean> hold = c.addIfAbsent(d, "hold");
            AtomicReference<CompletableFuture<Boolean>> interrupted = new AtomicReference<>();
            AtomicReference<Boolean> flagKept = new AtomicReference<>();
            Thread t1 = new Thread(() -> {
                interrupted.set(c.addIfAbsent(d, "x"));
                flagKept.set(Thread.currentThread().isInterrupted());
            });
            t1.start();
            waitUntilWaiting(t1);
            AtomicReference<CompletableFuture<Boolean>> repeat = new AtomicReference<>();
            Thread t2 = new Thread(() -> repeat.set(c.addIfAbsent(d, "x")));
            t2.start();
            waitUntilWaitingOrDone(t2);
            t1.interrupt();
            t1.join(5000);
            c.flush();
            assertTrue(get(hold));
            t2.join(5000);
            assertFalse(t2.isAlive(), "the repeat got the slot");
            c.flush();
            assertTrue(get(repeat.get()), "x is new: the interrupted call sent nothing and left nothing behind");
            SolusException e = assertInstanceOf(SolusException.class,
                    assertThrows(ExecutionException.class, () -> get(interrupted.get())).getCause());
            assertEquals(io.grpc.Status.Code.CANCELLED, e.code());
            assertTrue(e.getMessage().contains("interrupted while waiting"), e.getMessage());
            assertTrue(flagKept.get(), "the interrupt flag is kept");
        }
    }

    @Test
    void closeCompletesEveryFutureWhileTheServerIsPaused() throws Exception {
        try (SolusServer own = SolusServer.start()) {
            // Deadlines far beyond the test: only close can complete the futures.
            SolusClient c = client(own).maxBatch(5).maxInFlight(1).maxPendingRecords(10)
                    .linger(Duration.ofMillis(1)).deadline(Duration.ofSeconds(60)).build();
            String d = deduper(c);
            own.pause();
            try {
                List<CompletableFuture<Boolean>> fs = new ArrayList<>();
                for (int i = 0; i < 9; i++) {
                    fs.add(c.addIfAbsent(d, "p" + i));
                }
                // Another record of p1: waits for p1's answer before it is sent.
                fs.add(c.addIfAbsent(d, "p1".getBytes(), "another record".getBytes()));
                // Waits for a slot: all 10 are taken by calls the paused server will not answer.
                List<CompletableFuture<Boolean>> late = new ArrayList<>();
                List<Throwable> refused = new ArrayList<>();
                Thread waiter = new Thread(() -> {
                    for (String k : new String[] {"p10", "p11", "p12"}) {
                        try {
                            late.add(c.addIfAbsent(d, k));
                        } catch (IllegalStateException closed) {
                            refused.add(closed);
                        }
                    }
                });
                waiter.start();
                waitUntilWaiting(waiter);
                long t0 = System.nanoTime();
                c.close(Duration.ofSeconds(1));
                waiter.join(2000);
                assertFalse(waiter.isAlive(), "the caller waiting for a slot returned");
                fs.addAll(late);
                for (CompletableFuture<Boolean> f : fs) {
                    long left = TimeUnit.SECONDS.toNanos(2) - (System.nanoTime() - t0);
                    ExecutionException e = assertThrows(ExecutionException.class,
                            () -> f.get(Math.max(0, left), TimeUnit.NANOSECONDS), "every future is done within 2 s");
                    SolusException se = assertInstanceOf(SolusException.class, e.getCause());
                    assertTrue(se.getMessage().contains("client was closed"), se.getMessage());
                }
                assertEquals(1, late.size(), "the call waiting for a slot got a (failed) future");
                assertEquals(2, refused.size(), "the calls made after close were refused");
            } finally {
                own.resume();
            }
        }
    }

    private static void waitUntilWaiting(Thread t) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (t.getState() != Thread.State.WAITING && t.getState() != Thread.State.TIMED_WAITING) {
            assertTrue(System.nanoTime() < until && t.isAlive(), "the thread never blocked: " + t.getState());
            Thread.sleep(5);
        }
    }

    private static void waitUntilWaitingOrDone(Thread t) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (t.isAlive() && t.getState() != Thread.State.WAITING && t.getState() != Thread.State.TIMED_WAITING) {
            assertTrue(System.nanoTime() < until, "the thread neither blocked nor finished");
            Thread.sleep(5);
        }
    }
}
