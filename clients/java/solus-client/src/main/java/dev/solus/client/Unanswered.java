package dev.solus.client;

import com.google.protobuf.ByteString;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * The {@code AddIfAbsent} calls of one client not answered yet, by (deduper, TTL, entity), and
 * what a new call of the same entity must do meanwhile.
 *
 * <p>Without this, two calls of one entity could travel in concurrent requests and the server
 * could see the later one first, answering the later call "new". Record ids refine it: the same
 * record id is the same record (a replay), another one is another record, and a record never
 * takes over the answer of another record whose answer could differ from its own (a replayed new
 * record would be dropped).
 *
 * <p>Calls of one entity with other record ids go out in groups: every such call made while the
 * calls sent before are unanswered waits, and once those are all answered the whole group is sent
 * at once, in call order (so mostly in one request, where the server takes them in order). A hot
 * entity thus costs one round trip per group, not one per record. When one of the calls the group
 * waited for failed (it may not have reached storage: an outage past the retry budget, a GOAWAY,
 * close), that group goes out one record at a time instead, in call order, each after the one
 * before is answered or failed: at most one of its records can then be answered new.
 */
final class Unanswered {
    /** What a new call does about unanswered earlier calls of its entity. */
    enum Action {
        /** No earlier call: send this one now. */
        SEND,
        /**
         * The same record id as the latest earlier call: the same record, so not sent again; it
         * gets that call's answer (or failure). The server would answer a replay the same.
         */
        SHARE,
        /**
         * No record id: not sent; answered "present" once the latest earlier call is answered
         * (the earlier calls add the entity), or failed with its error. Without an id there is no
         * replay memory that could make the server answer "absent".
         */
        PRESENT_AFTER,
        /**
         * Another record id: another record, sent (by the registry, through the given
         * {@code send}) once every call of the entity sent before is answered or failed, so the
         * server sees them in call order. Not answered "present" blindly: if it is a replay of a
         * record answered "absent" before, the server answers it "absent" again.
         */
        SEND_AFTER
    }

    /** A decision: the action and, for SHARE and PRESENT_AFTER, the answer it follows. */
    record Decision(Action action, CompletableFuture<Boolean> earlier) {
    }

    private record Key(String deduper, long ttlMs, ByteString entity) {
    }

    /** The unanswered calls of one entity. */
    private static final class Entity {
        /** Record id (null = none) and answer of the latest call registered to be sent. */
        ByteString lastId;
        CompletableFuture<Boolean> last;
        /** Completes once every call sent so far is answered: the next group waits for it. */
        CompletableFuture<?> sent;
        /** The next group: calls waiting for {@link #sent}, in call order; null when none. */
        List<Waiting> next;
        /** Calls registered (sent or waiting) and not answered yet. */
        int open;
        /**
         * How many of the first calls of {@link #next} still go out one at a time: those held
         * when a call they waited for failed.
         */
        int oneByOne;
    }

    /** A call waiting for its turn: how to send it, and its answer. */
    private record Waiting(Runnable send, CompletableFuture<Boolean> answer) {
    }

    private final Map<Key, Entity> entities = new HashMap<>();

    /**
     * Registers a new call of {@code entity} whose answer is {@code answer}, unless an earlier
     * unanswered call makes sending it unnecessary, and tells what to do. For
     * {@link Action#SEND_AFTER} the registry runs {@code send} itself when the call's turn comes
     * (on the thread answering the last earlier call). {@code recordId} null = none.
     */
    Decision register(String deduper, long ttlMs, ByteString entity, ByteString recordId,
            CompletableFuture<Boolean> answer, Runnable send) {
        Key key = new Key(deduper, ttlMs, entity);
        CompletableFuture<?> waitFor = null;
        Decision d;
        synchronized (this) {
            Entity e = entities.get(key);
            if (e == null) {
                e = new Entity();
                entities.put(key, e);
                e.sent = answer;
                d = new Decision(Action.SEND, null);
            } else if (recordId == null) {
                return new Decision(Action.PRESENT_AFTER, e.last);
            } else if (recordId.equals(e.lastId)) {
                return new Decision(Action.SHARE, e.last);
            } else {
                if (e.next == null) {
                    e.next = new ArrayList<>();
                    waitFor = e.sent;
                }
                e.next.add(new Waiting(send, answer));
                d = new Decision(Action.SEND_AFTER, null);
            }
            e.lastId = recordId;
            e.last = answer;
            e.open++;
        }
        answer.whenComplete((x, err) -> answered(key));
        if (waitFor != null) {
            // Outside the lock: an already answered group releases the next one right here.
            waitFor.whenComplete((x, err) -> release(key, err != null));
        }
        return d;
    }

    /**
     * Sends the waiting group of {@code key}; the group after it waits for this one's answers.
     * When one of the calls it waited for failed ({@code failed}), that call may never have
     * reached storage, and the group's records would all read the entity absent if sent together
     * (in one request, or in concurrent ones): the group then goes out one record at a time, in
     * call order, each once the one before is answered or failed; calls made meanwhile wait for
     * the whole group and go out together after it, as usual.
     */
    private void release(Key key, boolean failed) {
        while (true) {
            List<Waiting> group;
            Waiting one = null;
            synchronized (this) {
                Entity e = entities.get(key);
                group = e.next;
                if (failed) {
                    e.oneByOne = group.size(); // every call held now, the earlier ones of the group included
                }
                if (e.oneByOne > 0 && group.size() > 1) {
                    e.oneByOne--;
                    one = group.get(0);
                    e.next = new ArrayList<>(group.subList(1, group.size()));
                    e.sent = one.answer();
                } else {
                    e.oneByOne = 0;
                    e.next = null;
                    // Set before any send: a send may complete (and fail) at once, e.g. after close.
                    e.sent = CompletableFuture.allOf(group.stream().map(Waiting::answer).toArray(CompletableFuture[]::new));
                }
            }
            if (one == null) {
                for (Waiting w : group) {
                    w.send().run();
                }
                return;
            }
            one.send().run();
            CompletableFuture<Boolean> a = one.answer();
            if (!a.isDone()) {
                a.whenComplete((x, err) -> release(key, err != null));
                return;
            }
            // Answered (or failed, e.g. after close) during its send: the next one in this loop,
            // not in a nested callback (no deep recursion through a long group).
            failed = a.isCompletedExceptionally();
        }
    }

    private synchronized void answered(Key key) {
        Entity e = entities.get(key);
        if (--e.open == 0) {
            entities.remove(key);
        }
    }

    /** How many entities have unanswered calls (tests: nothing is left behind). */
    synchronized int size() {
        return entities.size();
    }
}
