package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import com.google.protobuf.ByteString;
import dev.solus.client.Unanswered.Action;
import dev.solus.client.Unanswered.Decision;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/** What a call does while its entity has unanswered earlier calls, and when the waiting ones go out. */
class UnansweredTest {
    private static final ByteString X = ByteString.copyFromUtf8("x");

    private final Unanswered u = new Unanswered();
    private final List<String> sent = new ArrayList<>();

    private static ByteString id(String s) {
        return ByteString.copyFromUtf8(s);
    }

    /** Registers a call of X; a SEND_AFTER call records its name in `sent` when the registry sends it. */
    private Decision call(String name, ByteString recordId, CompletableFuture<Boolean> answer) {
        return u.register("d", 0, X, recordId, answer, () -> sent.add(name));
    }

    @Test
    void theFirstCallIsSent() {
        Decision d = call("a", id("r1"), new CompletableFuture<>());
        assertEquals(Action.SEND, d.action());
        assertNull(d.earlier());
        assertEquals(1, u.size());
    }

    @Test
    void theSameRecordIdSharesTheEarlierAnswer() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        call("a", id("r1"), first);
        Decision d = call("b", id("r1"), new CompletableFuture<>());
        assertEquals(Action.SHARE, d.action());
        assertSame(first, d.earlier());
    }

    @Test
    void noRecordIdIsPresentAfterTheLatestCall() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        call("a", null, first);
        assertEquals(new Decision(Action.PRESENT_AFTER, first), call("b", null, new CompletableFuture<>()));
        CompletableFuture<Boolean> other = new CompletableFuture<>();
        call("c", id("r2"), other);
        assertEquals(new Decision(Action.PRESENT_AFTER, other), call("d", null, new CompletableFuture<>()));
        assertEquals(List.of(), sent, "nothing sent while the first call is unanswered");
    }

    @Test
    void otherRecordIdsGoOutAsOneGroupOnceTheCallsBeforeAreAnswered() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        call("first", id("r1"), first);
        List<CompletableFuture<Boolean>> group = new ArrayList<>();
        for (String r : new String[] {"r2", "r3", "r4"}) {
            CompletableFuture<Boolean> f = new CompletableFuture<>();
            group.add(f);
            assertEquals(Action.SEND_AFTER, call(r, id(r), f).action());
        }
        assertEquals(List.of(), sent, "they wait for the first");
        first.complete(true);
        assertEquals(List.of("r2", "r3", "r4"), sent, "sent together, in call order");
        // The replay of r1 now: it waits for the whole group, not just for r4.
        CompletableFuture<Boolean> replay = new CompletableFuture<>();
        assertEquals(Action.SEND_AFTER, call("r1 again", id("r1"), replay).action());
        group.get(2).complete(false);
        group.get(1).complete(false);
        assertEquals(3, sent.size(), "r2 is unanswered still");
        group.get(0).completeExceptionally(new RuntimeException("a failure counts as answered"));
        assertEquals(List.of("r2", "r3", "r4", "r1 again"), sent);
        assertEquals(1, u.size());
        replay.complete(true);
        assertEquals(0, u.size(), "nothing left behind");
    }

    @Test
    void aGroupWhoseCallsBeforeAreAlreadyAnsweredGoesOutAtOnce() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        CompletableFuture<Boolean> second = new CompletableFuture<>();
        call("first", id("r1"), first);
        call("second", id("r2"), second);
        first.complete(true);
        assertEquals(List.of("second"), sent);
        // Sent but unanswered: the next waits for it.
        call("third", id("r3"), new CompletableFuture<>());
        assertEquals(List.of("second"), sent);
        second.complete(false);
        assertEquals(List.of("second", "third"), sent);
    }

    @Test
    void afterAFailedCallTheHeldGroupGoesOutOneAtATime() {
        CompletableFuture<Boolean> first = new CompletableFuture<>();
        call("first", id("r1"), first);
        List<CompletableFuture<Boolean>> group = new ArrayList<>();
        for (String r : new String[] {"r2", "r3", "r4"}) {
            CompletableFuture<Boolean> f = new CompletableFuture<>();
            group.add(f);
            call(r, id(r), f);
        }
        first.completeExceptionally(new RuntimeException("failed unsent"));
        assertEquals(List.of("r2"), sent, "only the first of the group");
        call("r5", id("r5"), new CompletableFuture<>()); // made meanwhile: after the group, as usual
        group.get(0).complete(true);
        assertEquals(List.of("r2", "r3"), sent);
        group.get(1).completeExceptionally(new RuntimeException("failed too"));
        assertEquals(List.of("r2", "r3", "r4"), sent);
        group.get(2).complete(false);
        assertEquals(List.of("r2", "r3", "r4", "r5"), sent);
    }

    @Test
    void otherDeduperOrTtlIsAnotherEntity() {
        call("a", null, new CompletableFuture<>());
        assertEquals(Action.SEND, u.register("other", 0, X, null, new CompletableFuture<>(), () -> { }).action());
        assertEquals(Action.SEND, u.register("d", 1000, X, null, new CompletableFuture<>(), () -> { }).action());
    }
}
