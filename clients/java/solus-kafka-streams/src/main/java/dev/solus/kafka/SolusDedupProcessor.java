package dev.solus.kafka;

import dev.solus.client.SolusClient;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Function;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.errors.StreamsException;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Forwards only the records whose id is new to a Solus deduper ({@code AddIfAbsent} answered
 * "absent"), in input order, losing none across task closes, crashes and rebalances.
 *
 * <pre>{@code
 * builder.stream("orders", Consumed.with(Serdes.String(), Serdes.String()))
 *     .process(SolusDedupProcessor.supplier(settings, "orders",
 *         (Record<String, String> r) -> r.key().getBytes(UTF_8), Serdes.String(), Serdes.String()))
 *     .to("orders-unique");
 * }</pre>
 *
 * <p><b>How.</b> Each record is asked about at once through the shared batching
 * {@link SolusClient}, with its source position as its record id ({@link RecordIds}: topic,
 * partition, offset), and waits in an in-order window until its answer is in. Kafka Streams
 * commits a task's input offsets at its own times, also when the task closes, while records may
 * still be waiting; so each record is also written to a changelogged key-value store (key: its
 * record id; value: entity, timestamp, key, value, headers) in {@link #process}, and deleted when
 * its answer has been acted on (forwarded if new, dropped if not). At every commit the store's
 * changelog therefore holds exactly the records whose offsets are committed but whose outcome is
 * not yet in the output. A new owner of the task (after a close, crash or rebalance) gets the
 * store back from the changelog, and {@link #init} asks again about every record in it, in offset
 * order and with its stored record id and entity, before the first new record. The server
 * remembers a record id answered "absent" (for {@code limits.record_id_window_seconds}, 3,600 s by
 * default) and answers it "absent" again; a record answered "present" is present again by itself.
 * So a record's replay gets its first answer whether it comes back from the store or from a
 * reprocessed offset, and a record answered but not yet committed is forwarded again.
 *
 * <p><b>Guarantee.</b> With {@code processing.guarantee = exactly_once_v2}, the store's changelog,
 * the forwarded records and the input offsets commit in one transaction: every record whose id
 * is new comes out exactly once (a new id is dropped only as a Bloom filter false positive, at
 * most the deduper's rate), through any number of closes, crashes and rebalances that each
 * replay within the record-id window. With {@code at_least_once}, none is lost through closes,
 * crashes and rebalances, and a record forwarded before a crash and not committed comes out again;
 * but a commit whose output write fails while its changelog write (the records' deletions) lands
 * loses the records forwarded in that interval, as the two topics are written without a
 * transaction: use {@code exactly_once_v2} when no record may be lost. Records forwarded by this
 * processor are the records it received, unchanged.
 *
 * <p><b>Cost.</b> One store write and one delete per record (in memory by default; the store's
 * cache merges them when both fall in one commit interval, and the changelog then gets only the
 * tombstone), the changelog's restore at each new owner (see {@link SolusDedupSupplier}), and one
 * record id (17 bytes + the topic name) per entity sent.
 *
 * <p><b>Limits.</b> The processor must receive records with a source position (not records
 * forwarded by an upstream punctuator: {@link StreamsException}); several records from one input
 * record (a {@code flatMap} upstream, or a cache flush that forwards them apart) get distinct ids
 * by their index at that position, which is stable only if the upstream is deterministic. Records are forwarded on the stream thread only: the answered
 * head of the window on every {@code process} call and every {@code drainInterval} of wall-clock
 * time (which also sends a partly filled batch at once), and the whole window, waiting for its
 * answers, when {@code maxPending} records wait (backpressure). Nothing waits for answers at a
 * commit: the store carries the window across it. A Solus failure that outlived the client's
 * retry budget throws a {@link StreamsException}, which stops the task; its records are in the
 * store, and the next owner asks again.
 */
public final class SolusDedupProcessor<K, V> implements Processor<K, V, K, V> {
    private final SharedClient shared;
    private final String deduper;
    private final Function<Record<K, V>, byte[]> id;
    private final PendingCodec<K, V> codec;
    private final String storeName;
    private final int maxPending;
    private final Duration drainInterval;
    private RecordIds recordIds = new RecordIds();
    private final ArrayDeque<Pending<K, V>> window = new ArrayDeque<>();
    private ProcessorContext<K, V> context;
    private KeyValueStore<Bytes, byte[]> store;
    private SolusClient client;

    private record Pending<K, V>(Bytes recordId, Record<K, V> record, CompletableFuture<Boolean> isNew) {
    }

    SolusDedupProcessor(SharedClient shared, String deduper, Function<Record<K, V>, byte[]> id,
            PendingCodec<K, V> codec, String storeName, int maxPending, Duration drainInterval) {
        this.shared = shared;
        this.deduper = deduper;
        this.id = id;
        this.codec = codec;
        this.storeName = storeName;
        this.maxPending = maxPending;
        this.drainInterval = drainInterval;
    }

    /**
     * A supplier whose processors share one client built from {@code settings} (closed when the
     * last processor closes) and keep their waiting records in a store of its own (see
     * {@link SolusDedupSupplier} for the defaults and the {@code with*} options).
     *
     * @param deduper the deduper's name (it must exist)
     * @param id the entity of a record: 1 to the client's {@code maxEntityBytes} bytes
     * @param keySerde serde of the records' keys, to keep waiting records in the store
     * @param valueSerde serde of the records' values, likewise
     */
    public static <K, V> SolusDedupSupplier<K, V> supplier(SolusClient.Builder settings, String deduper,
            Function<Record<K, V>, byte[]> id, Serde<K> keySerde, Serde<V> valueSerde) {
        Objects.requireNonNull(deduper, "deduper");
        return new SolusDedupSupplier<>(new SharedClient(settings), deduper, id, keySerde, valueSerde,
                10_000, Duration.ofMillis(10), null);
    }

    @Override
    public void init(ProcessorContext<K, V> context) {
        // Kafka Streams calls init again on the same processor when it resumes or revives a task
        // (after close): start from the store alone, and from no earlier source position.
        this.context = context;
        this.window.clear();
        this.recordIds = new RecordIds();
        this.store = context.getStateStore(storeName);
        if (store == null) {
            throw new StreamsException("SolusDedupProcessor: no state store '" + storeName + "' is connected: add the"
                    + " processor with KStream.process(supplier) or connect supplier.stores() yourself");
        }
        this.client = shared.acquire();
        // What the last commit left waiting (the store restored from its changelog), asked about
        // again with the record ids it was first asked with, before any new record.
        try (KeyValueIterator<Bytes, byte[]> it = store.all()) {
            while (it.hasNext()) {
                KeyValue<Bytes, byte[]> kv = it.next();
                PendingCodec.Decoded<K, V> d = codec.decode(kv.value);
                window.addLast(new Pending<>(kv.key, d.record(), ask(d.entity(), kv.key.get())));
            }
        }
        context.schedule(drainInterval, PunctuationType.WALL_CLOCK_TIME, ts -> {
            client.flush();
            drain(false);
        });
    }

    @Override
    public void process(Record<K, V> record) {
        byte[] recordId = recordIds.next(context.recordMetadata().orElse(null));
        byte[] entity = id.apply(record);
        Bytes key = Bytes.wrap(recordId);
        store.put(key, codec.encode(entity, record));
        window.addLast(new Pending<>(key, record, ask(entity, recordId)));
        drain(window.size() >= maxPending);
    }

    private CompletableFuture<Boolean> ask(byte[] entity, byte[] recordId) {
        return client.addIfAbsent(deduper, entity, recordId);
    }

    /** Acts on the answered head of the window; with {@code all}, waits for every answer. */
    private void drain(boolean all) {
        if (all && !window.isEmpty()) {
            client.flush();
        }
        while (!window.isEmpty() && (all || window.peekFirst().isNew().isDone())) {
            Pending<K, V> p = window.peekFirst();
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
            store.delete(p.recordId());
            window.pollFirst();
        }
    }

    @Override
    public void close() {
        // The records still waiting are in the store (as of the commit that came before this close):
        // the task's next owner asks about them again.
        window.clear();
        if (client != null) {
            client = null;
            shared.release();
        }
    }
}
