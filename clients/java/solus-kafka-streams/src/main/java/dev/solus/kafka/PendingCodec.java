package dev.solus.kafka;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.streams.processor.api.Record;

/**
 * Bytes of a record waiting for its Solus answer, as kept in the pending-record store, and back.
 *
 * <p>Layout (all lengths 4 bytes big-endian, -1 = null): entity length, entity; timestamp
 * (8 bytes); key length, key (the key serde's bytes); value length, value (the value serde's
 * bytes); header count, then per header: name length, UTF-8 name, value length, value. The
 * entity is kept, not recomputed, so that a re-issue sends exactly the entity its record id was
 * first sent with (the server treats the same id with another entity as another record).
 */
final class PendingCodec<K, V> {
    private final String topic;
    private final Serde<K> keySerde;
    private final Serde<V> valueSerde;

    /** A record decoded from the store: the entity to send and the record to forward. */
    record Decoded<K, V>(byte[] entity, Record<K, V> record) {
    }

    /** {@code topic} is only the serdes' context (the store's changelog topic name). */
    PendingCodec(String topic, Serde<K> keySerde, Serde<V> valueSerde) {
        this.topic = topic;
        this.keySerde = Objects.requireNonNull(keySerde, "keySerde");
        this.valueSerde = Objects.requireNonNull(valueSerde, "valueSerde");
    }

    byte[] encode(byte[] entity, Record<K, V> r) {
        byte[] key = r.key() == null ? null : keySerde.serializer().serialize(topic, r.key());
        byte[] value = r.value() == null ? null : valueSerde.serializer().serialize(topic, r.value());
        Header[] headers = r.headers().toArray();
        int size = 4 + entity.length + 8 + 4 + len(key) + 4 + len(value) + 4;
        byte[][] names = new byte[headers.length][];
        for (int i = 0; i < headers.length; i++) {
            names[i] = headers[i].key().getBytes(StandardCharsets.UTF_8);
            size += 4 + names[i].length + 4 + len(headers[i].value());
        }
        ByteBuffer b = ByteBuffer.allocate(size);
        put(b, entity);
        b.putLong(r.timestamp());
        put(b, key);
        put(b, value);
        b.putInt(headers.length);
        for (int i = 0; i < headers.length; i++) {
            put(b, names[i]);
            put(b, headers[i].value());
        }
        return b.array();
    }

    Decoded<K, V> decode(byte[] bytes) {
        ByteBuffer b = ByteBuffer.wrap(bytes);
        byte[] entity = get(b);
        long timestamp = b.getLong();
        byte[] key = get(b);
        byte[] value = get(b);
        RecordHeaders headers = new RecordHeaders();
        for (int n = b.getInt(); n > 0; n--) {
            String name = new String(get(b), StandardCharsets.UTF_8);
            headers.add(name, get(b));
        }
        K k = key == null ? null : keySerde.deserializer().deserialize(topic, key);
        V v = value == null ? null : valueSerde.deserializer().deserialize(topic, value);
        return new Decoded<>(entity, new Record<>(k, v, timestamp, headers));
    }

    private static int len(byte[] a) {
        return a == null ? 0 : a.length;
    }

    private static void put(ByteBuffer b, byte[] a) {
        if (a == null) {
            b.putInt(-1);
        } else {
            b.putInt(a.length).put(a);
        }
    }

    private static byte[] get(ByteBuffer b) {
        int n = b.getInt();
        if (n < 0) {
            return null;
        }
        byte[] a = new byte[n];
        b.get(a);
        return a;
    }
}
