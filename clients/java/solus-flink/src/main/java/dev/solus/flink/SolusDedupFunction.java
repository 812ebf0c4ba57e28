package dev.solus.flink;

import dev.solus.client.SolusClient;
import java.io.Serializable;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.function.Function;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.async.RichAsyncFunction;

/**
 * Flink async I/O function that emits an element only when its id is new to a Solus deduper
 * ({@code AddIfAbsent} answered "absent"), and nothing for a repeat.
 *
 * <p>Each subtask builds one batching {@link SolusClient} in {@code open}; the async operator's
 * capacity is what lets many ids share a request, so give it at least the client's
 * {@code maxBatch}:
 *
 * <pre>{@code
 * DataStream<Order> unique = AsyncDataStream.orderedWait(orders,
 *     new SolusDedupFunction<>(SolusClient.builder().address("solus:50051").clientId("shop"),
 *         "orders", (SerializableFunction<Order, byte[]>) o -> o.id().getBytes(UTF_8)),
 *     30, TimeUnit.SECONDS, 10_000);
 * }</pre>
 *
 * A Solus failure that outlived the client's retry budget fails the element's future, which fails
 * the job (restarted from its last checkpoint by Flink's restart strategy).
 */
public class SolusDedupFunction<T> extends RichAsyncFunction<T, T> {
    private static final long serialVersionUID = 1L;

    /** A {@link Function} Flink can ship to its workers. */
    @FunctionalInterface
    public interface SerializableFunction<A, B> extends Function<A, B>, Serializable {
    }

    private final SolusClient.Builder settings;
    private final String deduper;
    private final SerializableFunction<T, byte[]> id;
    private transient SolusClient client;

    public SolusDedupFunction(SolusClient.Builder settings, String deduper, SerializableFunction<T, byte[]> id) {
        this.settings = Objects.requireNonNull(settings, "settings");
        this.deduper = Objects.requireNonNull(deduper, "deduper");
        this.id = Objects.requireNonNull(id, "id");
    }

    @Override
    public void open(OpenContext openContext) throws Exception {
        client = settings.build();
    }

    @Override
    public void asyncInvoke(T input, ResultFuture<T> resultFuture) {
        client.addIfAbsent(deduper, id.apply(input)).whenComplete((isNew, error) -> {
            if (error != null) {
                resultFuture.completeExceptionally(error.getCause() != null ? error.getCause() : error);
            } else {
                resultFuture.complete(isNew ? List.of(input) : Collections.emptyList());
            }
        });
    }

    @Override
    public void close() throws Exception {
        if (client != null) {
            client.close();
            client = null;
        }
    }
}
