package dev.solus.kafka;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import org.apache.kafka.streams.errors.StreamsException;
import org.apache.kafka.streams.processor.api.RecordMetadata;

/**
 * The Solus record id of a Kafka record: its source position, the same every time Kafka Streams
 * reprocesses it.
 *
 * <p>Encoding: the topic's UTF-8 bytes, one {@code 0x00} byte, the partition as 4 bytes
 * big-endian, the offset as 8 bytes big-endian; then, only for the second and later record that
 * one input record produced upstream (a {@code flatMap} before the processor), the record's
 * index among them as 4 bytes big-endian (1, 2, ...). The server takes record ids of at most 128
 * bytes: topic names of up to 111 UTF-8 bytes always fit; an id over the limit is refused with a
 * {@link StreamsException}. The byte order sorts the ids of one partition by offset, the order in
 * which the pending-record store returns them.
 */
final class RecordIds {
    /** Longest record id the server takes (proto: "each 0 to 128 bytes"). */
    static final int MAX_BYTES = 128;

    private String lastTopic;
    private int lastPartition;
    private long lastOffset = -1;
    private int index;

    /**
     * The id of the record now being processed at {@code position}; a record at the same position
     * as the one before gets the next index.
     *
     * @throws StreamsException when the record has no source position (it was forwarded by a
     *     punctuator upstream) or its topic name makes the id longer than {@link #MAX_BYTES}
     */
    byte[] next(RecordMetadata position) {
        if (position == null || position.topic() == null || position.offset() < 0) {
            throw new StreamsException("SolusDedupProcessor needs each record's source position (topic, partition,"
                    + " offset) as its record id, but this record has none (was it forwarded by a punctuator?)");
        }
        if (position.offset() == lastOffset && position.partition() == lastPartition
                && position.topic().equals(lastTopic)) {
            index++;
        } else {
            lastTopic = position.topic();
            lastPartition = position.partition();
            lastOffset = position.offset();
            index = 0;
        }
        return of(position.topic(), position.partition(), position.offset(), index);
    }

    /** The id of the {@code index}-th record (0 = the first) produced from one input record. */
    static byte[] of(String topic, int partition, long offset, int index) {
        byte[] name = Objects.requireNonNull(topic, "topic").getBytes(StandardCharsets.UTF_8);
        int length = name.length + 1 + 4 + 8 + (index > 0 ? 4 : 0);
        if (length > MAX_BYTES) {
            throw new StreamsException("the record id of topic '" + topic + "' would be " + length
                    + " bytes, over Solus's " + MAX_BYTES + "-byte limit: use a topic name of at most "
                    + (MAX_BYTES - 17) + " bytes");
        }
        ByteBuffer b = ByteBuffer.allocate(length).put(name).put((byte) 0).putInt(partition).putLong(offset);
        if (index > 0) {
            b.putInt(index);
        }
        return b.array();
    }
}
