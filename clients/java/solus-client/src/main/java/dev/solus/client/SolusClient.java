package dev.solus.client;

import com.google.protobuf.ByteString;
import io.grpc.Channel;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import solus.v1.DeduperAdminServiceGrpc;
import solus.v1.DeduperOuterClass.AddIfAbsentRequest;
import solus.v1.DeduperOuterClass.AddIfAbsentResponse;
import solus.v1.DeduperOuterClass.AddRequest;
import solus.v1.DeduperOuterClass.AddResponse;
import solus.v1.DeduperOuterClass.CheckAbsenceRequest;
import solus.v1.DeduperOuterClass.CheckAbsenceResponse;
import solus.v1.DeduperOuterClass.CreateDeduperRequest;
import solus.v1.DeduperOuterClass.Deduper;
import solus.v1.DeduperOuterClass.GetDeduperRequest;
import solus.v1.DeduperOuterClass.ListDedupersRequest;
import solus.v1.DeduperOuterClass.UpdateDeduperRequest;
import solus.v1.DeduperServiceGrpc;

/**
 * Client of a Solus server, one record at a time, batched under the hood.
 *
 * <p>Each call ({@link #addIfAbsent}, {@link #checkAbsence}, {@link #add}) queues one entity and
 * returns a future. Entities of the same RPC, deduper and TTL are coalesced into one request of
 * up to {@code maxBatch} entities, sent when full or {@code linger} after its first entity,
 * whichever comes first. At most {@code maxInFlight} requests are in flight; at most
 * {@code maxPendingRecords} calls may wait for their answer (repeats of an unanswered entity,
 * which are not sent, included), beyond which calls block (backpressure) until answers come back.
 *
 * <p>A request is retried only when a retry can help: when the server attached
 * {@code google.rpc.RetryInfo} to its refusal (the concurrency limit, storage unavailable, a
 * draining server; the next attempt waits at least its {@code retry_delay}), or on
 * {@code UNAVAILABLE} or {@code DEADLINE_EXCEEDED} without a status-details trailer (no server answered, or
 * the attempt's deadline passed). Waits grow exponentially with jitter, up to {@code maxAttempts}
 * attempts; {@code Add} and {@code AddIfAbsent} are retried with the same {@code request_id}, so
 * the server answers a retry with what the first attempt computed: a retry never turns a new
 * entity into a duplicate. Once the budget is spent, or at once on any other failure (the memory
 * budget, a bad request, a missing deduper, ...), every future of the request fails with a
 * {@link SolusException}.
 *
 * <p>Answers of {@code addIfAbsent} follow call order: a repeat of an entity whose
 * {@code addIfAbsent} is still unanswered is not sent again but answered "present" once the first
 * call is answered (it fails with the first call's error if that one fails), so of several calls
 * with one entity through one client, the first one made is the one answered new. Across clients
 * and processes, the server's order decides. With record ids
 * ({@link #addIfAbsent(String, byte[], byte[])}) a repeat with the same record id is the same
 * record and gets the first call's answer; those with other record ids are sent, together, once
 * the calls before are answered, so that a replayed record is answered as its first occurrence
 * was (one at a time, in call order, when one of the calls before failed).
 *
 * <p>Futures: cancelling one affects only it (the record is still sent; its batch and the repeats
 * waiting for it complete as usual). A batch gives its {@code maxPendingRecords} slots back before
 * completing its futures, so a callback may call this client again without deadlocking; a callback
 * that throws affects only its own dependent future. {@link #close(Duration)} completes every
 * outstanding future, with its answer or a {@link SolusException}.
 *
 * <p>Thread-safe; one instance per process is enough. Futures complete on gRPC's threads: keep
 * callbacks short or move work elsewhere with the {@code *Async} methods of
 * {@link CompletableFuture}. A blocking wait ({@code get}, {@code join}) on an unanswered future of
 * this client inside a callback the client runs throws {@link IllegalStateException} at once: the
 * answer it waits for may be delivered by that same thread once the callback returns.
 */
public final class SolusClient implements AutoCloseable {
    /** The default gRPC port of {@code solus serve}. */
    public static final int DEFAULT_PORT = 50051;

    private static final SecureRandom RANDOM = new SecureRandom();
    /** The server's limit on one record id, in bytes. */
    static final int MAX_RECORD_ID_BYTES = 128;

    private final Builder cfg;
    private final ManagedChannel ownedChannel;
    private final ManagedChannel managed;
    private final DeduperServiceGrpc.DeduperServiceStub data;
    private final DeduperAdminServiceGrpc.DeduperAdminServiceBlockingStub admin;
    private final ScheduledExecutorService timer;
    private final Semaphore inFlight;
    private final Semaphore pendingRecords;
    private final Map<Key, Pending> pending = new ConcurrentHashMap<>();
    private final ConcurrentLinkedDeque<Batch> ready = new ConcurrentLinkedDeque<>();
    private final Set<Batch> live = ConcurrentHashMap.newKeySet();
    /** AddIfAbsent calls not answered yet, by entity: a repeat meanwhile waits for the first. */
    private final Unanswered unanswered = new Unanswered();
    /** No new calls: set when close begins. */
    private volatile boolean closed;
    /** Set when close stops waiting: what is still unanswered then fails, nothing new is sent. */
    private volatile boolean terminated;

    private SolusClient(Builder b) {
        this.cfg = b.copy();
        ManagedChannel ch = b.channel;
        if (ch == null) {
            ch = Channels.open(b.address, b.caCertFile, b.clientCertFile, b.clientKeyFile, b.tlsAuthority);
            this.ownedChannel = ch;
        } else {
            this.ownedChannel = null;
        }
        this.managed = ch;
        List<ClientInterceptor> interceptors = new ArrayList<>(b.interceptors);
        if (b.bearerToken != null) {
            interceptors.add(Channels.bearer(b.bearerToken));
        }
        Channel intercepted = ClientInterceptors.intercept(ch, interceptors);
        this.data = DeduperServiceGrpc.newStub(intercepted);
        this.admin = DeduperAdminServiceGrpc.newBlockingStub(intercepted);
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "solus-client-timer");
            t.setDaemon(true);
            return t;
        });
        this.inFlight = new Semaphore(cfg.maxInFlight);
        this.pendingRecords = new Semaphore(cfg.maxPendingRecords);
    }

    /** A new builder; {@link Builder#address} and {@link Builder#clientId} are required. */
    public static Builder builder() {
        return new Builder();
    }

    // ---------------------------------------------------------------- data path

    /**
     * Remembers {@code entity} in {@code deduper} for the builder's TTL and tells whether it was
     * absent just before: {@code true} = new (definitely never added, or expired), {@code false} =
     * probably seen (wrong for a fraction of new entities up to the deduper's false-positive rate).
     * Within one batch a later duplicate sees the earlier one ({@code false}).
     *
     * <p>Blocks while {@code maxPendingRecords} entities already wait for their answer.
     */
    public CompletableFuture<Boolean> addIfAbsent(String deduper, byte[] entity) {
        return submit(Op.ADD_IF_ABSENT, deduper, entity, null, cfg.ttlMs());
    }

    /** {@link #addIfAbsent(String, byte[])} with an explicit TTL (at most the deduper's expiry). */
    public CompletableFuture<Boolean> addIfAbsent(String deduper, byte[] entity, Duration ttl) {
        return submit(Op.ADD_IF_ABSENT, deduper, entity, null, ttlMs(ttl));
    }

    /**
     * {@link #addIfAbsent(String, byte[])} of one record identified by {@code recordId}: a stable
     * id of the record (not of its entity), such as its source position (topic, partition,
     * offset). When a record whose entity was answered {@code true} comes again with the same
     * entity and record id (a replay after a restart, a rebalance, a retry after a timeout),
     * within the server's {@code limits.record_id_window_seconds}, in any batch and through any
     * client, it is answered {@code true} again instead of "present": replaying a new record
     * never drops it. Another record of the same entity is answered "present" as usual.
     *
     * <p>Through one client, a call of an entity whose earlier {@code addIfAbsent} is still
     * unanswered gets, with the same record id, the earlier call's answer (it is the same record,
     * not sent twice); with another record id it is sent once the earlier calls are answered
     * (with the other calls that waited meanwhile, mostly in one request), so the server sees
     * them in call order and answers a replayed record as its first occurrence; without a record
     * id it is answered {@code false} once the earlier call is answered.
     *
     * <p>The future fails with a {@link SolusException} as for the plain call, and with
     * {@code RESOURCE_EXHAUSTED} (not retried) when the server cannot remember more record ids
     * ({@code storage.embedded.max_record_memory_mib}).
     *
     * @param recordId 0 to 128 bytes; {@code null} or empty = no record id (the call then
     *     behaves as {@link #addIfAbsent(String, byte[])}; write {@code (byte[]) null}, as a bare
     *     {@code null} also fits the {@code Duration} overload)
     * @throws IllegalArgumentException when {@code recordId} is longer than 128 bytes
     */
    public CompletableFuture<Boolean> addIfAbsent(String deduper, byte[] entity, byte[] recordId) {
        return submit(Op.ADD_IF_ABSENT, deduper, entity, recordId, cfg.ttlMs());
    }

    /** {@link #addIfAbsent(String, byte[], byte[])} with an explicit TTL (at most the deduper's expiry). */
    public CompletableFuture<Boolean> addIfAbsent(String deduper, byte[] entity, byte[] recordId, Duration ttl) {
        return submit(Op.ADD_IF_ABSENT, deduper, entity, recordId, ttlMs(ttl));
    }

    /** {@link #addIfAbsent(String, byte[])} of the UTF-8 bytes of {@code entity}. */
    public CompletableFuture<Boolean> addIfAbsent(String deduper, String entity) {
        return addIfAbsent(deduper, entity.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * Whether {@code entity} is absent from {@code deduper}: {@code true} = definitely never added
     * (or its TTL passed), {@code false} = probably present. Changes nothing.
     */
    public CompletableFuture<Boolean> checkAbsence(String deduper, byte[] entity) {
        return submit(Op.CHECK_ABSENCE, deduper, entity, null, 0);
    }

    /**
     * {@link #checkAbsence(String, byte[])} of one record identified by {@code recordId} (see
     * {@link #addIfAbsent(String, byte[], byte[])}): {@code true} also when an earlier
     * {@code addIfAbsent} of this entity and record id was answered {@code true} within the
     * server's {@code limits.record_id_window_seconds}, i.e. this record is the one that is new.
     *
     * @param recordId 0 to 128 bytes; {@code null} or empty = no record id
     * @throws IllegalArgumentException when {@code recordId} is longer than 128 bytes
     */
    public CompletableFuture<Boolean> checkAbsence(String deduper, byte[] entity, byte[] recordId) {
        return submit(Op.CHECK_ABSENCE, deduper, entity, recordId, 0);
    }

    /** {@link #checkAbsence(String, byte[])} of the UTF-8 bytes of {@code entity}. */
    public CompletableFuture<Boolean> checkAbsence(String deduper, String entity) {
        return checkAbsence(deduper, entity.getBytes(StandardCharsets.UTF_8));
    }

    /** Remembers {@code entity} for the builder's TTL; completes once the server acknowledged it. */
    public CompletableFuture<Void> add(String deduper, byte[] entity) {
        return submit(Op.ADD, deduper, entity, null, cfg.ttlMs()).thenApply(x -> null);
    }

    /** {@link #add(String, byte[])} with an explicit TTL (at most the deduper's expiry). */
    public CompletableFuture<Void> add(String deduper, byte[] entity, Duration ttl) {
        return submit(Op.ADD, deduper, entity, null, ttlMs(ttl)).thenApply(x -> null);
    }

    /** {@link #add(String, byte[])} of the UTF-8 bytes of {@code entity}. */
    public CompletableFuture<Void> add(String deduper, String entity) {
        return add(deduper, entity.getBytes(StandardCharsets.UTF_8));
    }

    /** Sends every partly filled batch now instead of after its linger time. Does not wait. */
    public void flush() {
        for (Pending p : pending.values()) {
            Batch b = p.take();
            if (b != null) {
                enqueue(b);
            }
        }
    }

    /**
     * Sends what is queued, waits up to {@code timeout} for every answer (retries included), then
     * closes the channel (when the client opened it). Every future of a call made before
     * {@code close} is complete when it returns: with its answer, or failed with a
     * {@link SolusException} ({@code CANCELLED}, "the Solus client was closed before an answer
     * came") if none came in time; a call still waiting for a slot then gets such a failed future.
     * Calls made after {@code close} began throw {@link IllegalStateException}. Takes about
     * {@code timeout}, plus up to 5 s for the channel to shut down.
     */
    public void close(Duration timeout) {
        closed = true;
        flush();
        try {
            // Every unanswered record holds a slot: all slots free = all answered.
            if (pendingRecords.tryAcquire(cfg.maxPendingRecords, timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                pendingRecords.release(cfg.maxPendingRecords);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        terminated = true;
        timer.shutdownNow();
        // After `terminated`, an offer fails instead of queueing, so one pass over the pending
        // batches and the live ones reaches everything left (calls waiting for an earlier
        // call fail as that one fails).
        for (Pending p : pending.values()) {
            Batch b = p.take();
            if (b != null) {
                b.fail(closedError(b.op, 0)); // never sent
            }
        }
        for (Batch b : live) {
            b.fail(closedError(b.op, b.attempts));
        }
        if (ownedChannel != null) {
            ownedChannel.shutdownNow();
            try {
                ownedChannel.awaitTermination(5, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static SolusException closedError(Op op, int attempts) {
        return new SolusException(op.rpc, Status.CANCELLED.withDescription(
                "the Solus client was closed before an answer came"), attempts);
    }

    /** {@link #close(Duration)} with a timeout of {@code maxAttempts} deadlines. */
    @Override
    public void close() {
        close(cfg.deadline.multipliedBy(cfg.maxAttempts));
    }

    private CompletableFuture<Boolean> submit(Op op, String deduper, byte[] entity, byte[] recordId, long ttlMs) {
        Objects.requireNonNull(deduper, "deduper");
        Objects.requireNonNull(entity, "entity");
        ByteString rid = recordId(recordId);
        if (closed) {
            throw new IllegalStateException("the Solus client is closed");
        }
        if (deduper.isEmpty()) {
            return CompletableFuture.failedFuture(new SolusException(
                    "the deduper name is empty: give the name of a deduper of client " + cfg.clientId,
                    Status.Code.INVALID_ARGUMENT));
        }
        if (entity.length == 0 || entity.length > cfg.maxEntityBytes) {
            // Refused here: one bad entity would otherwise fail its whole batch.
            return CompletableFuture.failedFuture(new SolusException("entity of " + entity.length
                    + " bytes refused: entities are 1 to maxEntityBytes = " + cfg.maxEntityBytes
                    + " bytes (the server's limits.max_entity_bytes)", Status.Code.INVALID_ARGUMENT));
        }
        // The permit first: a call that waits here has registered nothing yet.
        try {
            pendingRecords.acquire();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return CompletableFuture.failedFuture(new SolusException(op.rpc + " interrupted while waiting for one of the "
                    + cfg.maxPendingRecords + " maxPendingRecords slots; nothing was sent", Status.Code.CANCELLED));
        }
        if (terminated) {
            // Called before close, but its slot came only after close stopped waiting.
            pendingRecords.release();
            return CompletableFuture.failedFuture(closedError(op, 0));
        }
        Key key = new Key(op, deduper, ttlMs);
        Rec rec = new Rec(ByteString.copyFrom(entity), rid, new CompletableFuture<>());
        if (op == Op.ADD_IF_ABSENT) {
            Unanswered.Decision d = unanswered.register(deduper, ttlMs, rec.entity, rid, rec.answer,
                    () -> offer(key, rec));
            switch (d.action()) {
                // A repeat keeps its slot until its answer: a hot entity repeated while the server
                // stalls blocks its callers at maxPendingRecords like distinct entities do, instead
                // of piling up waiting calls without bound.
                case SHARE -> {
                    return follow(d.earlier(), null, true);
                }
                case PRESENT_AFTER -> {
                    return follow(d.earlier(), Boolean.FALSE, true);
                }
                case SEND_AFTER -> {
                    // Keeps its slot while it waits; sent (by the registry) whatever the earlier calls' outcome.
                    return follow(rec.answer, null, false);
                }
                case SEND -> {
                }
            }
        }
        offer(key, rec);
        return follow(rec.answer, null, false);
    }

    /**
     * The caller's future of an internal answer: completes as {@code answer} does (with
     * {@code value} instead of the answer when not null), while cancelling or completing it
     * touches nothing of the client's (the batch, repeats waiting for this call). With
     * {@code ownSlot} (a repeat not sent itself) it gives its {@code maxPendingRecords} slot back
     * first, before it completes, as a batch does.
     */
    private CompletableFuture<Boolean> follow(CompletableFuture<Boolean> answer, Boolean value, boolean ownSlot) {
        CompletableFuture<Boolean> f = new Answer<>(this);
        answer.whenComplete((x, e) -> {
            if (ownSlot) {
                pendingRecords.release();
            }
            if (e != null) {
                f.completeExceptionally(e);
            } else {
                f.complete(value != null ? value : x);
            }
        });
        return f;
    }

    /** A record id as sent (null = none), checked against the server's 128-byte limit. */
    private static ByteString recordId(byte[] recordId) {
        if (recordId == null || recordId.length == 0) {
            return null;
        }
        if (recordId.length > MAX_RECORD_ID_BYTES) {
            throw new IllegalArgumentException("record id of " + recordId.length + " bytes refused: record ids are 0 to "
                    + MAX_RECORD_ID_BYTES + " bytes");
        }
        return ByteString.copyFrom(recordId);
    }

    private void offer(Key key, Rec rec) {
        Pending p = pending.computeIfAbsent(key, Pending::new);
        List<Batch> sealed = p.offer(rec);
        if (sealed == null) {
            pendingRecords.release();
            rec.answer.completeExceptionally(closedError(key.op, 0));
            return;
        }
        for (Batch b : sealed) {
            enqueue(b);
        }
    }

    private void enqueue(Batch b) {
        ready.addLast(b);
        dispatch();
    }

    private void dispatch() {
        while (!ready.isEmpty() && inFlight.tryAcquire()) {
            Batch b = ready.pollFirst();
            if (b == null || !live.contains(b)) {
                inFlight.release(); // nothing, or a batch close already failed
                continue;
            }
            send(b);
        }
    }

    private void send(Batch b) {
        b.attempts++;
        ResponseObserver<?> obs = new ResponseObserver<>(b);
        DeduperServiceGrpc.DeduperServiceStub stub =
                data.withDeadlineAfter(cfg.deadline.toMillis(), TimeUnit.MILLISECONDS);
        try {
            switch (b.op) {
                case ADD -> stub.add((AddRequest) b.request, castObserver(obs));
                case CHECK_ABSENCE -> stub.checkAbsence((CheckAbsenceRequest) b.request, castObserver(obs));
                case ADD_IF_ABSENT -> stub.addIfAbsent((AddIfAbsentRequest) b.request, castObserver(obs));
                default -> throw new IllegalStateException(b.op.toString());
            }
        } catch (RuntimeException e) {
            obs.onError(e);
        }
    }

    @SuppressWarnings("unchecked")
    private static <T> StreamObserver<T> castObserver(ResponseObserver<?> o) {
        return (StreamObserver<T>) o;
    }

    private final class ResponseObserver<T> implements StreamObserver<T> {
        private final Batch batch;
        private T response;

        ResponseObserver(Batch batch) {
            this.batch = batch;
        }

        @Override
        public void onNext(T value) {
            response = value;
        }

        @Override
        public void onError(Throwable t) {
            inFlight.release();
            Status st = Status.fromThrowable(t);
            long serverDelay = Retry.serverDelayMillis(t);
            if (terminated) {
                batch.fail(closedError(batch.op, batch.attempts)); // the channel's shutdown, not the server's answer
            } else if (serverDelay != Retry.NEVER && batch.attempts < cfg.maxAttempts) {
                if (st.getCode() == Status.Code.UNAVAILABLE || Retry.goAway(t)) {
                    // Reconnect at once when the retry comes instead of after gRPC's own backoff.
                    managed.resetConnectBackoff();
                }
                long delay = serverDelay + backoffMillis(batch.attempts);
                try {
                    timer.schedule(() -> {
                        ready.addFirst(batch);
                        dispatch();
                    }, delay, TimeUnit.MILLISECONDS);
                } catch (RuntimeException rejected) {
                    batch.fail(closedError(batch.op, batch.attempts)); // the timer stops only in close
                }
            } else {
                batch.fail(new SolusException(batch.op.rpc, st, batch.attempts));
            }
            dispatch();
        }

        @Override
        public void onCompleted() {
            inFlight.release();
            int n = batch.futures.size();
            List<Boolean> answers;
            Object r = response;
            if (r instanceof AddIfAbsentResponse a) {
                answers = a.getAbsentList();
            } else if (r instanceof CheckAbsenceResponse c) {
                answers = c.getAbsentList();
            } else if (r instanceof AddResponse) {
                answers = Collections.nCopies(n, Boolean.TRUE);
            } else {
                answers = null;
            }
            if (answers == null || answers.size() != n) {
                batch.fail(new SolusException(batch.op.rpc, Status.INTERNAL.withDescription(
                        "the server answered " + (answers == null ? "nothing" : answers.size() + " values")
                                + " for " + n + " entities"), batch.attempts));
            } else {
                batch.complete(answers);
            }
            dispatch();
        }
    }

    /** Exponential backoff with equal jitter: half the step fixed, half random. */
    private long backoffMillis(int attemptsMade) {
        double step = cfg.initialBackoff.toMillis() * Math.pow(2, Math.min(30, attemptsMade - 1));
        long capped = (long) Math.min(step, cfg.maxBackoff.toMillis());
        return capped / 2 + ThreadLocalRandom.current().nextLong(capped / 2 + 1);
    }

    private long ttlMs(Duration ttl) {
        Objects.requireNonNull(ttl, "ttl");
        if (ttl.isNegative()) {
            throw new IllegalArgumentException("ttl must not be negative: " + ttl);
        }
        return ttl.toMillis();
    }

    private record Key(Op op, String deduper, long ttlMs) {
    }

    /** One call waiting in a batch: its entity, record id (null = none) and answer. */
    private record Rec(ByteString entity, ByteString recordId, CompletableFuture<Boolean> answer) {
    }

    /** The partly filled batch of one key. */
    private final class Pending {
        private final Key key;
        private List<Rec> recs = new ArrayList<>();
        private long bytes;
        private long generation;
        private ScheduledFuture<?> linger;

        Pending(Key key) {
            this.key = key;
        }

        /** The batches this record sealed (to send), or null when the client is terminated. */
        synchronized List<Batch> offer(Rec rec) {
            List<Batch> out = new ArrayList<>(1);
            if (terminated) {
                // Checked under the lock close's flush takes: nothing is queued after that flush.
                return null;
            }
            long size = rec.entity.size() + (rec.recordId == null ? 0 : rec.recordId.size()) + 8L;
            if (!recs.isEmpty() && bytes + size > cfg.maxBatchBytes) {
                out.add(takeLocked());
            }
            recs.add(rec);
            bytes += size;
            if (recs.size() >= cfg.maxBatch) {
                out.add(takeLocked());
            } else if (recs.size() == 1) {
                long gen = generation;
                try {
                    linger = timer.schedule(() -> lingerExpired(gen), cfg.linger.toNanos(), TimeUnit.NANOSECONDS);
                } catch (RuntimeException closing) {
                    out.add(takeLocked());
                }
            }
            return out;
        }

        private void lingerExpired(long gen) {
            Batch b;
            synchronized (this) {
                b = generation == gen ? takeLocked() : null;
            }
            if (b != null) {
                enqueue(b);
            }
        }

        synchronized Batch take() {
            return takeLocked();
        }

        private Batch takeLocked() {
            if (recs.isEmpty()) {
                return null;
            }
            generation++;
            if (linger != null) {
                linger.cancel(false);
                linger = null;
            }
            Batch b = new Batch(key, recs);
            recs = new ArrayList<>();
            bytes = 0;
            return b;
        }
    }

    /** One request: its entities, their futures, and (for writes) its request_id. */
    private final class Batch {
        final Op op;
        final Object request;
        final List<CompletableFuture<Boolean>> futures;
        int attempts;

        Batch(Key key, List<Rec> recs) {
            this.op = key.op;
            List<ByteString> entities = new ArrayList<>(recs.size());
            List<CompletableFuture<Boolean>> fs = new ArrayList<>(recs.size());
            boolean anyId = false;
            for (Rec r : recs) {
                entities.add(r.entity);
                fs.add(r.answer);
                anyId |= r.recordId != null;
            }
            this.futures = fs;
            // record_ids: one per entity (empty = none), or none at all when no record has one.
            List<ByteString> recordIds = new ArrayList<>(anyId ? recs.size() : 0);
            if (anyId) {
                for (Rec r : recs) {
                    recordIds.add(r.recordId == null ? ByteString.EMPTY : r.recordId);
                }
            }
            byte[] id = new byte[16];
            RANDOM.nextBytes(id);
            ByteString requestId = ByteString.copyFrom(id);
            this.request = switch (key.op) {
                case ADD -> AddRequest.newBuilder().setClientId(cfg.clientId).setDeduper(key.deduper)
                        .addAllEntities(entities).setTtlMs(key.ttlMs).setRequestId(requestId).build();
                case CHECK_ABSENCE -> CheckAbsenceRequest.newBuilder().setClientId(cfg.clientId)
                        .setDeduper(key.deduper).addAllEntities(entities).addAllRecordIds(recordIds).build();
                case ADD_IF_ABSENT -> AddIfAbsentRequest.newBuilder().setClientId(cfg.clientId)
                        .setDeduper(key.deduper).addAllEntities(entities).setTtlMs(key.ttlMs)
                        .setRequestId(requestId).addAllRecordIds(recordIds).build();
            };
            live.add(this);
        }

        // Slots are given back before any future completes: a callback that calls the client
        // again finds the slots of the batch that called it back free (no deadlock with few slots).

        void complete(List<Boolean> answers) {
            if (live.remove(this)) {
                pendingRecords.release(futures.size());
                Answer.CallingBack mark = Answer.callingBack(SolusClient.this);
                try {
                    for (int i = 0; i < futures.size(); i++) {
                        futures.get(i).complete(answers.get(i));
                    }
                } finally {
                    mark.close();
                }
            }
        }

        void fail(Throwable t) {
            if (live.remove(this)) {
                pendingRecords.release(futures.size());
                Answer.CallingBack mark = Answer.callingBack(SolusClient.this);
                try {
                    for (CompletableFuture<Boolean> f : futures) {
                        f.completeExceptionally(t);
                    }
                } finally {
                    mark.close();
                }
            }
        }
    }

    // ---------------------------------------------------------------- admin

    /**
     * Creates a deduper sized for {@code expectedInsertions} distinct entities alive within one
     * {@code expiry} window at false-positive rate {@code falsePositiveRate} (in (0, 1)).
     * {@code ALREADY_EXISTS} when the name is taken (also after a retried call whose first answer
     * was lost).
     */
    public Deduper createDeduper(String name, long expectedInsertions, double falsePositiveRate, Duration expiry) {
        return createDeduper(CreateDeduperRequest.newBuilder().setName(name)
                .setExpectedInsertions(expectedInsertions).setFalsePositiveRate(falsePositiveRate)
                .setExpirySeconds(expiry.toSeconds()).build());
    }

    /** Creates a deduper from a full request; an empty {@code client_id} is the builder's. */
    public Deduper createDeduper(CreateDeduperRequest request) {
        CreateDeduperRequest r = request.getClientId().isEmpty()
                ? request.toBuilder().setClientId(cfg.clientId).build() : request;
        return adminCall("CreateDeduper", () -> stub().createDeduper(r));
    }

    /** The deduper {@code name} of this client; {@code NOT_FOUND} when there is none. */
    public Deduper getDeduper(String name) {
        GetDeduperRequest r = GetDeduperRequest.newBuilder().setClientId(cfg.clientId).setName(name).build();
        return adminCall("GetDeduper", () -> stub().getDeduper(r));
    }

    /** This client's dedupers, sorted by name; only the active ones when {@code activeOnly}. */
    public List<Deduper> listDedupers(boolean activeOnly) {
        ListDedupersRequest r = ListDedupersRequest.newBuilder().setClientId(cfg.clientId)
                .setActiveOnly(activeOnly).build();
        return adminCall("ListDedupers", () -> stub().listDedupers(r).getDedupersList());
    }

    /**
     * Changes a deduper's active flag and/or expiry; {@code null} leaves that one as it is. The
     * geometry never changes after creation.
     */
    public Deduper updateDeduper(String name, Boolean active, Duration expiry) {
        UpdateDeduperRequest.Builder r = UpdateDeduperRequest.newBuilder().setClientId(cfg.clientId).setName(name);
        if (active != null) {
            r.setActive(active);
        }
        if (expiry != null) {
            r.setExpirySeconds(expiry.toSeconds());
        }
        UpdateDeduperRequest req = r.build();
        return adminCall("UpdateDeduper", () -> stub().updateDeduper(req));
    }

    private DeduperAdminServiceGrpc.DeduperAdminServiceBlockingStub stub() {
        return admin.withDeadlineAfter(cfg.deadline.toMillis(), TimeUnit.MILLISECONDS);
    }

    private <T> T adminCall(String rpc, Supplier<T> call) {
        if (closed) {
            throw new IllegalStateException("the Solus client is closed");
        }
        for (int attempt = 1; ; attempt++) {
            try {
                return call.get();
            } catch (StatusRuntimeException e) {
                Status st = e.getStatus();
                long serverDelay = Retry.serverDelayMillis(e);
                if (terminated) {
                    // The channel was shut down under this call by close: not the server's answer.
                    throw new SolusException(rpc, Status.CANCELLED.withDescription(
                            "the Solus client was closed before an answer came"), attempt);
                }
                if (serverDelay == Retry.NEVER || attempt >= cfg.maxAttempts) {
                    throw new SolusException(rpc, st, attempt);
                }
                if (st.getCode() == Status.Code.UNAVAILABLE || Retry.goAway(e)) {
                    managed.resetConnectBackoff();
                }
                try {
                    Thread.sleep(serverDelay + backoffMillis(attempt));
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw new SolusException(rpc, st, attempt);
                }
            }
        }
    }

    // ---------------------------------------------------------------- builder

    /**
     * Settings of a {@link SolusClient}. Serializable (file paths are strings) so stream
     * processors can ship it to their workers and build the client there; interceptors and an
     * explicit channel are not serialized.
     */
    public static final class Builder implements Serializable {
        private static final long serialVersionUID = 1L;

        private String address = "127.0.0.1:" + DEFAULT_PORT;
        private String clientId;
        private String bearerToken;
        private String caCertFile;
        private String clientCertFile;
        private String clientKeyFile;
        private String tlsAuthority;
        private Duration deadline = Duration.ofSeconds(10);
        private int maxBatch = 1000;
        private long maxBatchBytes = 4L * 1024 * 1024;
        private Duration linger = Duration.ofMillis(5);
        private int maxInFlight = 8;
        private int maxPendingRecords = -1;
        private int maxAttempts = 10;
        private Duration initialBackoff = Duration.ofMillis(50);
        private Duration maxBackoff = Duration.ofSeconds(5);
        private Duration ttl = Duration.ZERO;
        private int maxEntityBytes = 4096;
        private transient List<ClientInterceptor> interceptors = new ArrayList<>();
        private transient ManagedChannel channel;

        private Builder() {
        }

        /** Server address: {@code host:port}, {@code host} (port 50051), {@code http://} or {@code https://host:port}. Default {@code 127.0.0.1:50051}. */
        public Builder address(String address) {
            this.address = Objects.requireNonNull(address, "address");
            return this;
        }

        /** The client id every request names (the owner of the dedupers). Required. */
        public Builder clientId(String clientId) {
            this.clientId = Objects.requireNonNull(clientId, "clientId");
            return this;
        }

        /** Sent as {@code authorization: Bearer <token>} (servers with {@code auth.enabled}). */
        public Builder bearerToken(String token) {
            this.bearerToken = token;
            return this;
        }

        /** PEM file of the CA certificates to verify the server with; switches to TLS. */
        public Builder caCertificate(String pemFile) {
            this.caCertFile = pemFile;
            return this;
        }

        /** Client certificate chain and its PKCS#8 private key (PEM files), for mutual TLS. */
        public Builder clientCertificate(String certPemFile, String keyPemFile) {
            this.clientCertFile = Objects.requireNonNull(certPemFile, "certPemFile");
            this.clientKeyFile = Objects.requireNonNull(keyPemFile, "keyPemFile");
            return this;
        }

        /** Server name to verify in its certificate (default: the host of the address). */
        public Builder tlsAuthority(String authority) {
            this.tlsAuthority = authority;
            return this;
        }

        /** Deadline of each attempt of each call. Default 10 s. */
        public Builder deadline(Duration deadline) {
            this.deadline = positive(deadline, "deadline");
            return this;
        }

        /** Most entities in one request (at most the server's limits.max_entities_per_request, 10,000 by default). Default 1,000. */
        public Builder maxBatch(int maxBatch) {
            this.maxBatch = range(maxBatch, 1, 10_000, "maxBatch");
            return this;
        }

        /** Most entity bytes in one request (below the server's limits.max_message_bytes, 16 MiB by default). Default 4 MiB. */
        public Builder maxBatchBytes(long maxBatchBytes) {
            if (maxBatchBytes < 1) {
                throw new IllegalArgumentException("maxBatchBytes must be at least 1, got " + maxBatchBytes);
            }
            this.maxBatchBytes = maxBatchBytes;
            return this;
        }

        /** How long a partly filled batch waits for more entities before it is sent. Default 5 ms. */
        public Builder linger(Duration linger) {
            Objects.requireNonNull(linger, "linger");
            if (linger.isNegative()) {
                throw new IllegalArgumentException("linger must not be negative: " + linger);
            }
            this.linger = linger;
            return this;
        }

        /** Most requests in flight at once. Default 8. */
        public Builder maxInFlight(int maxInFlight) {
            this.maxInFlight = range(maxInFlight, 1, 1024, "maxInFlight");
            return this;
        }

        /**
         * Most calls waiting for their answer (queued, in flight or retrying, and repeats of an
         * unanswered entity waiting for its answer); beyond it the data calls block until answers
         * come back. Default {@code 2 * maxBatch * maxInFlight}.
         */
        public Builder maxPendingRecords(int maxPendingRecords) {
            this.maxPendingRecords = range(maxPendingRecords, 1, Integer.MAX_VALUE, "maxPendingRecords");
            return this;
        }

        /**
         * Attempts per request, the first included, on retryable statuses. Keep the whole budget
         * (about {@code maxAttempts * (deadline + maxBackoff)}) below the server's
         * limits.request_id_window_seconds (300 s by default). Default 10.
         */
        public Builder maxAttempts(int maxAttempts) {
            this.maxAttempts = range(maxAttempts, 1, 1000, "maxAttempts");
            return this;
        }

        /** Backoff before the first retry; doubles each retry up to {@code maxBackoff}, with jitter. Defaults 50 ms and 5 s. */
        public Builder backoff(Duration initial, Duration max) {
            this.initialBackoff = positive(initial, "initial backoff");
            this.maxBackoff = positive(max, "max backoff");
            if (max.compareTo(initial) < 0) {
                throw new IllegalArgumentException("max backoff " + max + " is below the initial backoff " + initial);
            }
            return this;
        }

        /** TTL of add and addIfAbsent; {@link Duration#ZERO} (default) = the deduper's expiry_seconds. */
        public Builder ttl(Duration ttl) {
            Objects.requireNonNull(ttl, "ttl");
            if (ttl.isNegative()) {
                throw new IllegalArgumentException("ttl must not be negative: " + ttl);
            }
            this.ttl = ttl;
            return this;
        }

        /** Largest entity accepted, in bytes: the server's limits.max_entity_bytes. Default 4,096. */
        public Builder maxEntityBytes(int maxEntityBytes) {
            this.maxEntityBytes = range(maxEntityBytes, 1, 16 * 1024 * 1024, "maxEntityBytes");
            return this;
        }

        /** gRPC interceptors, outermost first (tracing, extra headers, tests). */
        public Builder intercept(ClientInterceptor... interceptors) {
            this.interceptors.addAll(List.of(interceptors));
            return this;
        }

        /** Use this channel instead of opening one (address and TLS settings are then ignored; close does not close it). */
        public Builder channel(ManagedChannel channel) {
            this.channel = channel;
            return this;
        }

        /** Opens the channel (lazily: nothing connects before the first call). */
        public SolusClient build() {
            if (clientId == null || clientId.isEmpty()) {
                throw new IllegalArgumentException("clientId is required: the client id that owns the dedupers");
            }
            if ((clientCertFile == null) != (clientKeyFile == null)) {
                throw new IllegalArgumentException("clientCertificate needs both the certificate and its key");
            }
            return new SolusClient(this);
        }

        long ttlMs() {
            return ttl.toMillis();
        }

        Builder copy() {
            Builder b = new Builder();
            b.address = address;
            b.clientId = clientId;
            b.bearerToken = bearerToken;
            b.caCertFile = caCertFile;
            b.clientCertFile = clientCertFile;
            b.clientKeyFile = clientKeyFile;
            b.tlsAuthority = tlsAuthority;
            b.deadline = deadline;
            b.maxBatch = maxBatch;
            b.maxBatchBytes = maxBatchBytes;
            b.linger = linger;
            b.maxInFlight = maxInFlight;
            b.maxPendingRecords = maxPendingRecords > 0 ? maxPendingRecords
                    : (int) Math.min(Integer.MAX_VALUE, 2L * maxBatch * maxInFlight);
            b.maxAttempts = maxAttempts;
            b.initialBackoff = initialBackoff;
            b.maxBackoff = maxBackoff;
            b.ttl = ttl;
            b.maxEntityBytes = maxEntityBytes;
            b.interceptors = new ArrayList<>(interceptors == null ? List.of() : interceptors);
            b.channel = channel;
            return b;
        }

        private void readObject(java.io.ObjectInputStream in) throws IOException, ClassNotFoundException {
            in.defaultReadObject();
            interceptors = new ArrayList<>();
        }

        private static Duration positive(Duration d, String what) {
            Objects.requireNonNull(d, what);
            if (d.isNegative() || d.isZero()) {
                throw new IllegalArgumentException(what + " must be positive, got " + d);
            }
            return d;
        }

        private static int range(int v, int min, int max, String what) {
            if (v < min || v > max) {
                throw new IllegalArgumentException(what + " must be in " + min + ".." + max + ", got " + v);
            }
            return v;
        }
    }
}
