package dev.solus.kafka;

import dev.solus.client.SolusClient;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;
import org.apache.kafka.streams.errors.StreamsException;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;

/**
 * Forwards only the records whose id is new to a Solus deduper ({@code AddIfAbsent} answered
 * "absent"), in input order.
 *
 * <p>Each record's id goes to the batching {@link SolusClient} at once; the record waits in an
 * in-order window until its answer is in. Answered records at the head of the window are
 * forwarded on every {@code process} call, and the whole window is drained (waiting for its
 * answers) every {@code drainInterval} of wall-clock time and whenever it holds
 * {@code maxPending} records. A Solus failure that outlived the client's retry budget throws a
 * {@link StreamsException}, which stops the task (Kafka Streams then reprocesses from the last
 * commit).
 *
 * <pre>{@code
 * builder.stream("orders", Consumed.with(Serdes.String(), Serdes.String()))
 *     .process(SolusDedupProcessor.supplier(clientSettings, "orders",
 *         (Record<String, String> r) -> r.key().getBytes(UTF_8)))
 *     .to("orders-unique");
 * }</pre>
 */
public final class SolusDedupProcessor<K, V> implements Processor<K, V, K, V> {
    private final Shared shared;
    private final String deduper;
    private final Function<Record<K, V>, byte[]> id;
    private final int maxPending;
    private final Duration drainInterval;
    private final ArrayDeque<Pending<K, V>> window = new ArrayDeque<>();
    private ProcessorContext<K, V> context;
    private SolusClient client;

    private record Pending<K, V>(Record<K, V> record, CompletableFuture<Boolean> isNew) {
    }

    private SolusDedupProcessor(Shared shared, String deduper, Function<Record<K, V>, byte[]> id,
            int maxPending, Duration drainInterval) {
        this.shared = shared;
        this.deduper = deduper;
        this.id = id;
        this.maxPending = maxPending;
        this.drainInterval = drainInterval;
    }

    /**
     * A supplier whose processors share one client built from {@code settings}: 10,000 records
     * in the window at most, drained every 10 ms.
     */
    public static <K, V> ProcessorSupplier<K, V, K, V> supplier(SolusClient.Builder settings, String deduper,
            Function<Record<K, V>, byte[]> id) {
        return supplier(settings, deduper, id, 10_000, Duration.ofMillis(10));
    }

    /**
     * A supplier whose processors share one client built from {@code settings} (closed when the
     * last processor closes).
     *
     * @param maxPending most records waiting for their answer per processor
     * @param drainInterval wall-clock period of the full drain (forwarding latency bound)
     */
    public static <K, V> ProcessorSupplier<K, V, K, V> supplier(SolusClient.Builder settings, String deduper,
            Function<Record<K, V>, byte[]> id, int maxPending, Duration drainInterval) {
        Objects.requireNonNull(deduper, "deduper");
        Objects.requireNonNull(id, "id");
        if (maxPending < 1) {
            throw new IllegalArgumentException("maxPending must be at least 1, got " + maxPending);
        }
        if (drainInterval.isNegative() || drainInterval.isZero()) {
            throw new IllegalArgumentException("drainInterval must be positive, got " + drainInterval);
        }
        Shared shared = new Shared(settings);
        return () -> new SolusDedupProcessor<>(shared, deduper, id, maxPending, drainInterval);
    }

    @Override
    public void init(ProcessorContext<K, V> context) {
        this.context = context;
        this.client = shared.acquire();
        context.schedule(drainInterval, PunctuationType.WALL_CLOCK_TIME, ts -> drain(true));
    }

    @Override
    public void process(Record<K, V> record) {
        byte[] key = id.apply(record);
        window.addLast(new Pending<>(record, client.addIfAbsent(deduper, key)));
        if (window.size() >= maxPending) {
            client.flush();
            drain(true);
        } else {
            drain(false);
        }
    }

    /** Forwards the answered head of the window; with {@code all}, waits for every answer. */
    private void drain(boolean all) {
        if (all && !window.isEmpty()) {
            client.flush();
        }
        while (!window.isEmpty() && (all || window.peekFirst().isNew().isDone())) {
            Pending<K, V> p = window.pollFirst();
            boolean isNew;
            try {
                isNew = p.isNew().join();
            } catch (CompletionException e) {
                throw new StreamsException("Solus AddIfAbsent on deduper " + deduper + " failed: "
                        + e.getCause().getMessage(), e.getCause());
            }
            if (isNew) {
                context.forward(p.record());
            }
        }
    }

    @Override
    public void close() {
        // Unforwarded records are not committed: they are processed again after a restart.
        window.clear();
        shared.release();
    }

    /** One client for all the processors of a supplier. */
    private static final class Shared {
        private final SolusClient.Builder settings;
        private SolusClient client;
        private int users;

        Shared(SolusClient.Builder settings) {
            this.settings = Objects.requireNonNull(settings, "settings");
        }

        synchronized SolusClient acquire() {
            if (client == null) {
                client = settings.build();
            }
            users++;
            return client;
        }

        synchronized void release() {
            if (--users == 0) {
                client.close();
                client = null;
            }
        }
    }
}
