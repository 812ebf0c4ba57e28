package dev.solus.kafka;

import dev.solus.client.RecordId;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.streams.errors.StreamsException;
import org.apache.kafka.streams.processor.api.RecordMetadata;

/**
 * The Solus record id of a Kafka record: its source position, the same every time Kafka Streams
 * reprocesses it.
 *
 * <p>Encoding ({@link RecordId#ofSourcePosition(String, int, long, int)}): the topic's UTF-8
 * bytes, one {@code 0x00} byte, the partition as 4 bytes big-endian, the offset as 8 bytes
 * big-endian; then, only for the second and later record that one input record produced upstream (a {@code flatMap} before the processor), the record's
 * index among them as 4 bytes big-endian (1, 2, ...). The server takes record ids of at most 128
 * bytes: topic names of up to 111 UTF-8 bytes always fit; an id over the limit is refused with a
 * {@link StreamsException}. The byte order sorts the ids of one partition by offset, the order in
 * which the pending-record store returns them.
 */
final class RecordIds {
    /**
     * Source positions remembered with the records seen from them so far. Bounded (least recently
     * used out): a position comes back only while the records one input record produced upstream are
     * still arriving.
     */
    static final int POSITIONS = 65_536;

    private record Position(String topic, int partition, long offset) {}

    private final Map<Position, Integer> seen = new LinkedHashMap<>(1024, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Position, Integer> eldest) {
            return size() > POSITIONS;
        }
    };

    /**
     * The id of the record now being processed at {@code position}: the position's {@code i}-th
     * record (0 = the first) gets index {@code i}, also when records of other positions came in
     * between (a cache flush or {@code suppress} upstream forwards one input record's results
     * apart). Found in review: only a record right after one of the same position got the next
     * index, so positions A, B, A gave both A records one id - the second took the first's memory
     * on the server and its entry in the pending-record store.
     *
     * @throws StreamsException when the record has no source position (it was forwarded by a
     *     punctuator upstream) or its topic name makes the id longer than {@link RecordId#MAX_BYTES}
     */
    byte[] next(RecordMetadata position) {
        if (position == null || position.topic() == null || position.offset() < 0) {
            throw new StreamsException("SolusDedupProcessor needs each record's source position (topic, partition,"
                    + " offset) as its record id, but this record has none (was it forwarded by a punctuator?)");
        }
        Position at = new Position(position.topic(), position.partition(), position.offset());
        int index = seen.merge(at, 0, (before, zero) -> before + 1);
        return of(position.topic(), position.partition(), position.offset(), index);
    }

    /** The id of the {@code index}-th record (0 = the first) produced from one input record. */
    static byte[] of(String topic, int partition, long offset, int index) {
        try {
            return RecordId.ofSourcePosition(topic, partition, offset, index);
        } catch (IllegalArgumentException e) {
            throw new StreamsException(e.getMessage(), e);
        }
    }
}
