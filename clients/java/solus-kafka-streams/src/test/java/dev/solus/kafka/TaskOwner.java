package dev.solus.kafka;

import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.api.MockProcessorContext;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * One owner of a Kafka Streams task, driven by hand: a processor from the supplier on a
 * {@link MockProcessorContext}, over a fresh in-memory pending-record store filled with what its
 * changelog held at the last commit ({@link #committed()} of the previous owner, taken when
 * Kafka Streams would commit): that is how Kafka Streams restores it for the next owner.
 */
final class TaskOwner {
    static final String TOPIC = "events";

    private final MockProcessorContext<String, String> context = new MockProcessorContext<>();
    private final Processor<String, String, String, String> processor;

    private final KeyValueStore<Bytes, byte[]> store = Stores
            .keyValueStoreBuilder(Stores.inMemoryKeyValueStore("p"), Serdes.Bytes(), Serdes.ByteArray())
            .withLoggingDisabled().build();

    /** A new owner whose store is restored from {@code changelog}; the supplier's store must be named "p". */
    TaskOwner(SolusDedupSupplier<String, String> supplier, List<KeyValue<Bytes, byte[]>> changelog) {
        store.init(context.getStateStoreContext(), store);
        store.putAll(changelog);
        context.addStateStore(store);
        processor = supplier.get();
        processor.init(context);
    }

    /** The store's content now: what its changelog holds after a commit at this point. */
    List<KeyValue<Bytes, byte[]>> committed() {
        List<KeyValue<Bytes, byte[]>> all = new ArrayList<>();
        try (KeyValueIterator<Bytes, byte[]> it = store.all()) {
            it.forEachRemaining(all::add);
        }
        return all;
    }

    /** Processes {@code values.get(i)} as the record at offset {@code firstOffset + i} of partition 0. */
    void process(List<String> values, long firstOffset) {
        for (int i = 0; i < values.size(); i++) {
            context.setRecordMetadata(TOPIC, 0, firstOffset + i);
            processor.process(new Record<>(null, values.get(i), 0L));
        }
    }

    /**
     * Runs the wall-clock punctuator until every waiting record was acted on (forwarded if new,
     * dropped if not: the store is empty), for at most 30 s.
     */
    void drain() {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (store.approximateNumEntries() > 0) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError(store.approximateNumEntries() + " records still waiting after 30 s");
            }
            context.scheduledPunctuators().forEach(p -> p.getPunctuator().punctuate(0L));
            Thread.onSpinWait();
        }
    }

    /** The values forwarded so far, in order. */
    List<String> forwarded() {
        List<String> out = new ArrayList<>();
        context.forwarded().forEach(f -> out.add(f.record().value()));
        return out;
    }

    void close() {
        processor.close();
    }
}
