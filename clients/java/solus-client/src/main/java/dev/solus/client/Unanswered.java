package dev.solus.client;

import com.google.protobuf.ByteString;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The {@code AddIfAbsent} calls of one client not answered yet, by (deduper, TTL, entity), and
 * what a new call of the same entity must do meanwhile.
 *
 * <p>Without this, two calls of one entity could travel in concurrent requests and the server
 * could see the later one first, answering the later call "new". Record ids refine it: the same
 * record id is the same record (a replay), another one is another record, and a record never
 * takes over the answer of another record whose answer could differ from its own (a replayed new
 * record would be dropped).
 */
final class Unanswered {
    /** What a new call does about an unanswered earlier call of its entity. */
    enum Action {
        /** No earlier call: send this one. */
        SEND,
        /**
         * The same record id as the earlier call: the same record, so not sent again; it gets the
         * earlier call's answer (or failure). The server would answer a replay the same.
         */
        SHARE,
        /**
         * No record id: not sent; answered "present" once the earlier call is answered (the
         * earlier call adds the entity), or failed with its error. Without an id there is no
         * replay memory that could make the server answer "absent".
         */
        PRESENT_AFTER,
        /**
         * Another record id than the earlier call's: another record, sent once the earlier call
         * is answered (or failed), so the server sees the two in call order. Not answered
         * "present" blindly: if it is a replay of a record answered "absent" before, the server
         * answers it "absent" again.
         */
        SEND_AFTER
    }

    /** A decision: the action and the earlier call's answer it depends on (null for SEND). */
    record Decision(Action action, CompletableFuture<Boolean> earlier) {
    }

    private record Key(String deduper, long ttlMs, ByteString entity) {
    }

    /** An unanswered call: its record id (null = none) and its answer. */
    private record Call(ByteString recordId, CompletableFuture<Boolean> answer) {
    }

    private final Map<Key, Call> calls = new ConcurrentHashMap<>();

    /**
     * Registers a new call of {@code entity} whose answer is {@code answer}, unless an earlier
     * unanswered call makes it unnecessary to send, and tells what to do. A registered call
     * leaves the registry when {@code answer} completes. {@code recordId} null = none.
     */
    Decision register(String deduper, long ttlMs, ByteString entity, ByteString recordId,
            CompletableFuture<Boolean> answer) {
        Key key = new Key(deduper, ttlMs, entity);
        Call call = new Call(recordId, answer);
        Decision[] out = new Decision[1];
        calls.compute(key, (k, earlier) -> {
            if (earlier == null) {
                out[0] = new Decision(Action.SEND, null);
                return call;
            }
            if (recordId == null) {
                out[0] = new Decision(Action.PRESENT_AFTER, earlier.answer);
                return earlier;
            }
            if (Objects.equals(recordId, earlier.recordId)) {
                out[0] = new Decision(Action.SHARE, earlier.answer);
                return earlier;
            }
            // The latest call is the one the next repeat waits for: calls go out in call order.
            out[0] = new Decision(Action.SEND_AFTER, earlier.answer);
            return call;
        });
        Action a = out[0].action();
        if (a == Action.SEND || a == Action.SEND_AFTER) {
            answer.whenComplete((x, e) -> calls.remove(key, call));
        }
        return out[0];
    }

    /** How many calls are registered (tests: nothing is left behind). */
    int size() {
        return calls.size();
    }
}
