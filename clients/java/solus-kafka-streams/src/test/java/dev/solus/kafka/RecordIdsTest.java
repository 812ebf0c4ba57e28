package dev.solus.kafka;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.solus.client.RecordId;
import org.apache.kafka.streams.errors.StreamsException;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.junit.jupiter.api.Test;

/** {@link RecordIds}: one id per record, the index counting the records of one source position. */
class RecordIdsTest {
    private static RecordMetadata at(String topic, int partition, long offset) {
        return new RecordMetadata() {
            @Override
            public String topic() {
                return topic;
            }

            @Override
            public int partition() {
                return partition;
            }

            @Override
            public long offset() {
                return offset;
            }
        };
    }

    @Test
    void recordsOfOnePositionGetIndexesInOrder() {
        RecordIds ids = new RecordIds();
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 7), ids.next(at("t", 0, 7)));
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 7, 1), ids.next(at("t", 0, 7)));
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 8), ids.next(at("t", 0, 8)));
        assertArrayEquals(RecordId.ofSourcePosition("t", 1, 8), ids.next(at("t", 1, 8)));
    }

    /** Found in review: positions A, B, A gave both A records the same id. */
    @Test
    void aPositionThatComesBackAfterAnotherGetsTheNextIndex() {
        RecordIds ids = new RecordIds();
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 7), ids.next(at("t", 0, 7)));
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 9), ids.next(at("t", 0, 9)));
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 7, 1), ids.next(at("t", 0, 7)));
        assertArrayEquals(RecordId.ofSourcePosition("t", 0, 9, 1), ids.next(at("t", 0, 9)));
    }

    @Test
    void aRecordWithoutAPositionOrWithALongTopicIsRefused() {
        RecordIds ids = new RecordIds();
        assertThrows(StreamsException.class, () -> ids.next(null));
        assertThrows(StreamsException.class, () -> ids.next(at("t".repeat(116), 0, 0)));
    }
}
