package dev.solus.kafka;

import dev.solus.client.SolusClient;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.Function;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

/**
 * Builds {@link SolusDedupProcessor}s and declares their pending-record store, so that
 * {@code KStream.process(supplier)} connects the store by itself. Made by
 * {@link SolusDedupProcessor#supplier}; the {@code with*} methods return a changed copy.
 *
 * <p>Defaults: 10,000 records waiting at most per task, answered records forwarded (and partly
 * filled batches sent) every 10 ms of wall-clock time, an in-memory store named {@code solus-pending-<deduper>} (it holds at most
 * {@code maxPending} records per task, so memory is bounded; no RocksDB files or flushes at each
 * commit) whose changelog rolls a segment every minute and is compacted soon after
 * (segment.ms = 60000, min.cleanable.dirty.ratio = 0.1), keeping tombstones 5 minutes
 * (delete.retention.ms = 300000): a restore reads the records pending at the last commit plus
 * the tombstones of the last few minutes, and must finish within those 5 minutes (a restore that
 * took longer could miss a tombstone and forward that record again).
 */
public final class SolusDedupSupplier<K, V> implements ProcessorSupplier<K, V, K, V> {
    static final Map<String, String> CHANGELOG_CONFIG = Map.of(
            "segment.ms", "60000",
            "min.cleanable.dirty.ratio", "0.1",
            "delete.retention.ms", "300000");

    private final SharedClient client;
    private final String deduper;
    private final Function<Record<K, V>, byte[]> id;
    private final Serde<K> keySerde;
    private final Serde<V> valueSerde;
    private final int maxPending;
    private final Duration drainInterval;
    private final KeyValueBytesStoreSupplier store;

    SolusDedupSupplier(SharedClient client, String deduper, Function<Record<K, V>, byte[]> id,
            Serde<K> keySerde, Serde<V> valueSerde, int maxPending, Duration drainInterval,
            KeyValueBytesStoreSupplier store) {
        this.client = Objects.requireNonNull(client, "client");
        this.deduper = Objects.requireNonNull(deduper, "deduper");
        this.id = Objects.requireNonNull(id, "id");
        this.keySerde = Objects.requireNonNull(keySerde, "keySerde");
        this.valueSerde = Objects.requireNonNull(valueSerde, "valueSerde");
        if (maxPending < 1) {
            throw new IllegalArgumentException("maxPending must be at least 1, got " + maxPending);
        }
        if (drainInterval.isNegative() || drainInterval.isZero()) {
            throw new IllegalArgumentException("drainInterval must be positive, got " + drainInterval);
        }
        this.maxPending = maxPending;
        this.drainInterval = drainInterval;
        this.store = store != null ? store : Stores.inMemoryKeyValueStore("solus-pending-" + deduper);
    }

    /** At most {@code maxPending} records per task wait for their answer; then the task waits. */
    public SolusDedupSupplier<K, V> withMaxPending(int maxPending) {
        return new SolusDedupSupplier<>(client, deduper, id, keySerde, valueSerde, maxPending, drainInterval, store);
    }

    /**
     * Every {@code interval} of wall-clock time the task sends its partly filled batch and forwards
     * what is answered, also when no record arrives (latency bound).
     */
    public SolusDedupSupplier<K, V> withDrainInterval(Duration interval) {
        return new SolusDedupSupplier<>(client, deduper, id, keySerde, valueSerde, maxPending, interval, store);
    }

    /**
     * The pending-record store's kind and name, e.g. {@code Stores.persistentKeyValueStore("p")}
     * (RocksDB: after a clean close the next owner on the same machine restores only the changelog's
     * tail) or a name of your own when two processors use one deduper in one topology. Logging
     * stays on: the changelog is what makes the processor safe.
     */
    public SolusDedupSupplier<K, V> withStore(KeyValueBytesStoreSupplier store) {
        return new SolusDedupSupplier<>(client, deduper, id, keySerde, valueSerde, maxPending, drainInterval,
                Objects.requireNonNull(store, "store"));
    }

    /** The pending-record store's name. */
    public String storeName() {
        return store.name();
    }

    @Override
    public Processor<K, V, K, V> get() {
        return new SolusDedupProcessor<>(client, deduper, id,
                new PendingCodec<>(store.name(), keySerde, valueSerde), store.name(), maxPending, drainInterval);
    }

    @Override
    public Set<StoreBuilder<?>> stores() {
        StoreBuilder<KeyValueStore<Bytes, byte[]>> b = Stores
                .keyValueStoreBuilder(store, Serdes.Bytes(), Serdes.ByteArray())
                .withLoggingEnabled(CHANGELOG_CONFIG)
                // The cache keeps a record's last state until the commit: one answered within the
                // commit interval it entered reaches the changelog as a tombstone only.
                .withCachingEnabled();
        return Set.of(b);
    }
}
