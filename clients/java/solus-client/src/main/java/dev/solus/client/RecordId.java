package dev.solus.client;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * Record ids built from a record's source position, the same every time a stream job re-reads the
 * record: for {@link SolusClient#addIfAbsent(String, byte[], byte[])} and the stream adapters'
 * record-id extractors.
 *
 * <p>A record id must be unique among all records that reach one deduper within the server's
 * {@code limits.record_id_window_seconds}. A Kafka offset alone is not: every partition (and topic)
 * has its own offset 100, and a duplicate arriving under the id of the record it duplicates is
 * taken for that record's replay and passes as new. The topic, the partition and the offset
 * together are unique.
 *
 * <p>Encoding (shared with {@code solus-kafka-streams}): the topic's UTF-8 bytes, one {@code 0x00}
 * byte, the partition as 4 bytes big-endian, the offset as 8 bytes big-endian (and an index, 4
 * bytes, when one source record gave several). Topic names of up to 111 UTF-8 bytes always fit the
 * server's 128-byte limit.
 */
public final class RecordId {
    /** Longest record id the server takes, in bytes (proto: "each 0 to 128 bytes"). */
    public static final int MAX_BYTES = 128;

    private RecordId() {}

    /**
     * The record id of the record at {@code offset} of {@code partition} of {@code topic}.
     *
     * @throws NullPointerException when {@code topic} is null
     * @throws IllegalArgumentException when the id would exceed {@link #MAX_BYTES} (a topic name over
     *     111 UTF-8 bytes)
     */
    public static byte[] ofSourcePosition(String topic, int partition, long offset) {
        return ofSourcePosition(topic, partition, offset, 0);
    }

    /**
     * The record id of the {@code index}-th record (0 = the first) that one source record produced
     * (a {@code flatMap} before deduplication): {@link #ofSourcePosition(String, int, long)} for
     * index 0, followed by the index as 4 bytes big-endian for the others.
     *
     * @throws NullPointerException when {@code topic} is null
     * @throws IllegalArgumentException when {@code index} is negative or the id would exceed
     *     {@link #MAX_BYTES}
     */
    public static byte[] ofSourcePosition(String topic, int partition, long offset, int index) {
        byte[] name = Objects.requireNonNull(topic, "topic").getBytes(StandardCharsets.UTF_8);
        if (index < 0) {
            throw new IllegalArgumentException("index must be 0 or more, got " + index);
        }
        int length = name.length + 1 + 4 + 8 + (index > 0 ? 4 : 0);
        if (length > MAX_BYTES) {
            throw new IllegalArgumentException("the record id of topic '" + topic + "' would be " + length
                    + " bytes, over Solus's " + MAX_BYTES + "-byte limit: use a topic name of at most "
                    + (MAX_BYTES - 17) + " UTF-8 bytes");
        }
        ByteBuffer b = ByteBuffer.allocate(length).put(name).put((byte) 0).putInt(partition).putLong(offset);
        if (index > 0) {
            b.putInt(index);
        }
        return b.array();
    }
}
