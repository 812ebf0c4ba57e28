package dev.solus.client;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import solus.v1.DeduperOuterClass.AddIfAbsentRequest;

/** Issue 46, classes 5 and 6, against a real {@code solus serve}. */
class HeldGroupAndCallbackTest {
    @RegisterExtension
    static final SharedServer SERVER = new SharedServer("java-held");

    /**
     * Class 5: the first call of an entity fails without reaching the server (refused before it
     * is sent, not retried), while four other records of the entity wait for it. They then go out
     * one request each, in call order, and only the first of them is answered new (before: the
     * four went out in one request).
     */
    @Test
    void aHeldGroupAfterAFailedFirstCallGoesOutOneRecordAtATime() throws Exception {
        String d;
        try (SolusClient admin = SERVER.client().build()) {
            d = SERVER.deduper(admin);
        }
        RefuseFirst refuse = new RefuseFirst(Status.UNAVAILABLE.withDescription("refused by the test, unsent").asRuntimeException(), 1);
        CaptureRequests capture = new CaptureRequests();
        try (SolusClient c = SERVER.client().intercept(capture, refuse).maxAttempts(1)
                .linger(Duration.ofMillis(300)).build()) {
            CompletableFuture<Boolean> first = c.addIfAbsent(d, "x".getBytes(UTF_8), "r1".getBytes(UTF_8));
            List<CompletableFuture<Boolean>> held = new ArrayList<>();
            for (String r : new String[] {"r2", "r3", "r4", "r5"}) {
                held.add(c.addIfAbsent(d, "x".getBytes(UTF_8), r.getBytes(UTF_8)));
            }
            ExecutionException e = assertThrows(ExecutionException.class, () -> first.get(10, TimeUnit.SECONDS));
            assertEquals(Status.Code.UNAVAILABLE, assertInstanceOf(SolusException.class, e.getCause()).code());
            List<Boolean> answers = new ArrayList<>();
            for (CompletableFuture<Boolean> f : held) {
                answers.add(f.get(10, TimeUnit.SECONDS));
            }
            List<List<String>> requests = new ArrayList<>();
            for (AddIfAbsentRequest r : capture.of(AddIfAbsentRequest.class)) {
                requests.add(r.getRecordIdsList().stream().map(ByteString::toStringUtf8).toList());
            }
            assertEquals(List.of(List.of("r2"), List.of("r3"), List.of("r4"), List.of("r5")), requests,
                    "record ids of each request sent");
            assertEquals(List.of(true, false, false, false), answers, "only the first held record is new");
        }
    }

    /**
     * Class 6: a callback of one answer that blocks on another answer of the same client still
     * unanswered, on the thread delivering them (both in one batch: the second is delivered only
     * after the callback returns). It fails at once with an error saying why (before: it hung
     * until its own timeout).
     */
    @Test
    void aBlockingWaitInACallbackFailsAtOnce() throws Exception {
        try (SolusClient c = SERVER.client().linger(Duration.ofMillis(100)).build()) {
            String d = SERVER.deduper(c);
            CompletableFuture<Boolean> a = c.addIfAbsent(d, "a");
            CompletableFuture<Boolean> b = c.addIfAbsent(d, "b");
            CompletableFuture<Throwable> getError = new CompletableFuture<>();
            CompletableFuture<Throwable> joinError = new CompletableFuture<>();
            CompletableFuture<Boolean> done = new CompletableFuture<>();
            a.thenAccept(x -> {
                long t0 = System.nanoTime();
                try {
                    b.get(3, TimeUnit.SECONDS);
                    getError.complete(null);
                } catch (Throwable t) {
                    getError.complete(t);
                }
                try {
                    b.thenApply(y -> y).join();
                    joinError.complete(null);
                } catch (Throwable t) {
                    joinError.complete(t);
                }
                done.complete(System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(500));
            });
            assertTrue(a.get(10, TimeUnit.SECONDS));
            assertTrue(b.get(10, TimeUnit.SECONDS));
            IllegalStateException ge = assertInstanceOf(IllegalStateException.class, getError.get(10, TimeUnit.SECONDS));
            assertTrue(ge.getMessage().contains("inside a completion callback"), ge.getMessage());
            IllegalStateException je = assertInstanceOf(IllegalStateException.class, joinError.get(10, TimeUnit.SECONDS));
            assertTrue(je.getMessage().startsWith("a blocking join()"), je.getMessage());
            assertTrue(done.get(10, TimeUnit.SECONDS), "both failed within 500 ms");
            // Outside callbacks, and on answered futures inside them, waiting is as usual.
            CompletableFuture<Boolean> later = c.addIfAbsent(d, "c");
            CompletableFuture<Boolean> inside = later.thenApply(x -> a.join() && x);
            assertTrue(inside.get(10, TimeUnit.SECONDS));
        }
    }
}
