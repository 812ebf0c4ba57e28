package dev.solus.flink;

import dev.solus.client.SolusClient;
import io.grpc.ClientInterceptor;
import java.io.Serializable;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import java.util.function.Supplier;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;
import org.apache.flink.util.InstantiationUtil;

/**
 * Flink async I/O function that emits an element only when its entity is new to a Solus deduper
 * ({@code AddIfAbsent} answered "absent"), and nothing for a repeat.
 *
 * <pre>{@code
 * SolusClient.Builder settings = SolusClient.builder().address("solus:50051").clientId("shop")
 *     .deadline(Duration.ofSeconds(2)).maxAttempts(8).backoff(Duration.ofMillis(50), Duration.ofSeconds(1));
 * DataStream<Order> unique = AsyncDataStream.orderedWait(orders,
 *     new SolusDedupFunction<>(settings, "orders",
 *         (SerializableFunction<Order, byte[]>) o -> o.id().getBytes(UTF_8),                 // entity
 *         o -> RecordId.ofSourcePosition(o.topic(), o.partition(), o.offset())),            // record id
 *     30, TimeUnit.SECONDS, 10_000);   // above the client's budget, 8 x (2 s + 1 s) = 24 s
 * }</pre>
 *
 * <p><b>Record id.</b> The second extractor gives each element a record id (0 to 128 bytes;
 * {@code null} or empty = none) that must be <em>stable across replays</em>: the same element
 * must give the same id every time Flink processes it, e.g. its source position
 * ({@link dev.solus.client.RecordId#ofSourcePosition(String, int, long)}: topic, partition and
 * offset; the index of a sequence source) or an event id the producer assigned. Never a random
 * number, a processing time or a counter of this function, and never an offset alone: ids must be
 * unique across every source of the deduper (a duplicate under the first record's id is taken for
 * its replay and passes as new). The server remembers a record id answered "absent" for {@code
 * limits.record_id_window_seconds} (3,600 s by default) from its latest attempt and answers
 * "absent" again when that id comes back with the same entity, whatever request it is in. So an
 * element replayed after a restart (from the source since the last checkpoint, or from the async
 * operator's own checkpointed queue) gets the answer of its first attempt, and, with an
 * exactly-once sink, comes out once. Without record ids such a replay reads its own earlier
 * attempt's write as "present" and is dropped.
 *
 * <p><b>Timeouts.</b> Give {@code AsyncDataStream} a timeout above the client's retry budget,
 * about {@code maxAttempts x (deadline + maxBackoff)} of its builder (client defaults:
 * 10 x (10 s + 5 s) = 150 s; e.g. {@code deadline(2 s)}, {@code maxAttempts(8)},
 * {@code backoff(50 ms, 1 s)} = 24 s under a 30 s Flink timeout), so that a Solus outage ends in
 * the client's own error, which names the status and the attempts. Either way the element fails
 * and with it the task, which Flink's restart strategy restarts from the last checkpoint. When
 * Flink's timeout comes first anyway, {@link #timeout} closes this subtask's client at once:
 * no attempt of it is still running after Flink gave up (the other elements it was answering
 * fail too and are replayed with the task), and the replay's record id gets the first answer.
 *
 * <p>Each subtask builds one batching {@link SolusClient} in {@code open} from a copy of the
 * settings (Java-serialized, as Flink ships them: interceptors and an explicit channel set on the
 * builder are not kept; give interceptors with {@link #withInterceptor}). The async operator's
 * capacity is what lets many elements share a request: give it at least the client's
 * {@code maxBatch}. Do not combine with Flink's {@code AsyncRetryStrategy}: the client retries.
 *
 * <p>Errors, each failing the element and so the task: {@code SolusException} (the client's retry
 * budget spent, or a status it does not retry: its {@code code()} and {@code attempts()}),
 * {@link TimeoutException} (Flink's timeout, above), {@link IllegalStateException} (an element
 * asked after a timeout closed the client), {@link IllegalArgumentException} (an entity or record
 * id the client refuses: empty or too long entity, record id over 128 bytes).
 */
public class SolusDedupFunction<T> extends RichAsyncFunction<T, T> {
    private static final long serialVersionUID = 2L;

    /** A {@link Function} Flink can ship to its workers. */
    @FunctionalInterface
    public interface SerializableFunction<A, B> extends Function<A, B>, Serializable {
    }

    /** A {@link Supplier} Flink can ship to its workers, called once per subtask. */
    @FunctionalInterface
    public interface SerializableSupplier<A> extends Supplier<A>, Serializable {
    }

    private final SolusClient.Builder settings;
    private final String deduper;
    private final SerializableFunction<T, byte[]> entity;
    private final SerializableFunction<T, byte[]> recordId;
    private final List<SerializableSupplier<? extends ClientInterceptor>> interceptors = new ArrayList<>();
    private transient volatile SolusClient client;
    /** Elements asked and not answered yet, by the ResultFuture Flink gave (its identity). */
    private transient Map<ResultFuture<T>, OnceResult<T>> outstanding;

    /**
     * @param settings the client's settings (copied in {@code open})
     * @param deduper  name of an existing deduper of the settings' client id
     * @param entity   the entity to deduplicate on, 1 to {@code maxEntityBytes} bytes
     * @param recordId the element's record id, stable across replays (see the class comment);
     *                 returning {@code null} sends none
     */
    public SolusDedupFunction(SolusClient.Builder settings, String deduper,
            SerializableFunction<T, byte[]> entity, SerializableFunction<T, byte[]> recordId) {
        this.settings = Objects.requireNonNull(settings, "settings");
        this.deduper = Objects.requireNonNull(deduper, "deduper");
        this.entity = Objects.requireNonNull(entity, "entity");
        this.recordId = Objects.requireNonNull(recordId, "recordId");
    }

    /** Adds a gRPC interceptor built on each worker (tracing, headers); outermost first. */
    public SolusDedupFunction<T> withInterceptor(SerializableSupplier<? extends ClientInterceptor> factory) {
        interceptors.add(Objects.requireNonNull(factory, "factory"));
        return this;
    }

    @Override
    public void open(OpenContext openContext) throws Exception {
        SolusClient.Builder b = InstantiationUtil.clone(settings, getClass().getClassLoader());
        for (SerializableSupplier<? extends ClientInterceptor> f : interceptors) {
            b.intercept(f.get());
        }
        outstanding = new ConcurrentHashMap<>();
        client = b.build();
    }

    @Override
    public void asyncInvoke(T input, ResultFuture<T> resultFuture) {
        OnceResult<T> result = new OnceResult<>(resultFuture);
        SolusClient c = client;
        if (c == null) {
            result.fail(new IllegalStateException("the Solus client of this subtask was closed after an element "
                    + "timed out; the task fails and restarts from its last checkpoint"));
            return;
        }
        CompletableFuture<Boolean> answer;
        try {
            outstanding.put(resultFuture, result);
            answer = c.addIfAbsent(deduper, entity.apply(input), recordId.apply(input));
        } catch (RuntimeException e) {
            outstanding.remove(resultFuture);
            result.fail(e);
            return;
        }
        answer.whenComplete((isNew, error) -> {
            outstanding.remove(resultFuture);
            if (error != null) {
                result.fail(error.getCause() != null ? error.getCause() : error);
            } else {
                result.complete(isNew ? List.of(input) : Collections.emptyList());
            }
        });
    }

    /**
     * Flink gave up on {@code input}: fails it with a {@link TimeoutException} that says how long
     * it waited and which settings to change, then closes this subtask's client at once, so that
     * no attempt of it runs on after Flink gave up. The task fails and restarts from its last
     * checkpoint; the record id makes the replay's answer the first attempt's.
     */
    @Override
    public void timeout(T input, ResultFuture<T> resultFuture) {
        OnceResult<T> result = outstanding.remove(resultFuture);
        long waitedMs = result == null ? -1 : (System.nanoTime() - result.askedNanos) / 1_000_000;
        TimeoutException error = new TimeoutException("Flink's async timeout expired after " + waitedMs
                + " ms before Solus answered: give AsyncDataStream a timeout above the client's retry budget, "
                + "maxAttempts x (deadline + maxBackoff), so that the client's own error comes first. This "
                + "subtask's Solus client is closed now; the task restarts from its last checkpoint and the "
                + "element's record id gives its replay the first attempt's answer");
        if (result != null) {
            result.fail(error); // the client's late answer, if any, is then ignored
        } else {
            // Answered meanwhile (Flink ignores a second completion) or not one of ours.
            resultFuture.completeExceptionally(error);
        }
        closeClient();
    }

    @Override
    public void close() throws Exception {
        closeClient();
    }

    /**
     * Closes the client without waiting: by now every element was answered (end of input: the
     * operator waits for them first) or the task is failing, and the elements still unanswered
     * are replayed from the checkpoint, their record ids giving them their first answers.
     */
    private synchronized void closeClient() {
        SolusClient c = client;
        client = null;
        if (c != null) {
            c.close(Duration.ZERO);
        }
    }
}
