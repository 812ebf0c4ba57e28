package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import com.google.protobuf.ByteString;
import dev.solus.client.Unanswered.Action;
import dev.solus.client.Unanswered.Decision;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/** The decision table of a call whose entity has an unanswered earlier call. */
class UnansweredTest {
    private static final ByteString X = ByteString.copyFromUtf8("x");
    private static final ByteString R1 = ByteString.copyFromUtf8("topic/0/1");
    private static final ByteString R2 = ByteString.copyFromUtf8("topic/0/2");

    private final Unanswered u = new Unanswered();

    private Decision call(ByteString entity, ByteString recordId, CompletableFuture<Boolean> answer) {
        return u.register("d", 0, entity, recordId, answer);
    }

    @Test
    void theFirstCallIsSent() {
        Decision d = call(X, R1, new CompletableFuture<>());
        assertEquals(Action.SEND, d.action());
        assertNull(d.earlier());
        assertEquals(1, u.size());
    }

    @Test
    void theSameRecordIdSharesTheEarlierAnswer() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        call(X, R1, first);
        Decision d = call(X, R1, new CompletableFuture<>());
        assertEquals(Action.SHARE, d.action());
        assertSame(first, d.earlier());
    }

    @Test
    void noRecordIdIsPresentAfterTheEarlierCall() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        call(X, R1, first);
        assertEquals(new Decision(Action.PRESENT_AFTER, first), call(X, null, new CompletableFuture<>()));
        CompletableFuture<Boolean> noId = new CompletableFuture<>();
        call(ByteString.copyFromUtf8("y"), null, noId);
        assertEquals(new Decision(Action.PRESENT_AFTER, noId), call(ByteString.copyFromUtf8("y"), null, new CompletableFuture<>()));
    }

    @Test
    void anotherRecordIdIsSentAfterTheLatestEarlierCall() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        CompletableFuture<Boolean> second = new CompletableFuture<>();
        CompletableFuture<Boolean> third = new CompletableFuture<>();
        call(X, null, first);
        assertEquals(new Decision(Action.SEND_AFTER, first), call(X, R1, second));
        // The third waits for the second (the latest), so the three reach the server in call order.
        assertEquals(new Decision(Action.SEND_AFTER, second), call(X, R2, third));
        // R1 again while the third is the latest: sent after it (the server answers R1's replay).
        assertEquals(Action.SEND_AFTER, call(X, R1, new CompletableFuture<>()).action());
    }

    @Test
    void answeredCallsLeaveTheRegistry() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        CompletableFuture<Boolean> second = new CompletableFuture<>();
        call(X, R1, first);
        call(X, R2, second);
        first.complete(true);
        assertEquals(1, u.size(), "the second is still unanswered");
        second.completeExceptionally(new RuntimeException("failed"));
        assertEquals(0, u.size());
        assertEquals(Action.SEND, call(X, R1, new CompletableFuture<>()).action());
    }

    @Test
    void otherDeduperOrTtlIsAnotherEntity() {
        call(X, null, new CompletableFuture<>());
        assertEquals(Action.SEND, u.register("other", 0, X, null, new CompletableFuture<>()).action());
        assertEquals(Action.SEND, u.register("d", 1000, X, null, new CompletableFuture<>()).action());
    }
}
