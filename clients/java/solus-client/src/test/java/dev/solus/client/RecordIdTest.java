package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.HexFormat;
import org.junit.jupiter.api.Test;

/** {@link RecordId}: the documented bytes, and ids that differ wherever positions differ. */
class RecordIdTest {
    @Test
    void aSourcePositionEncodesToTheDocumentedBytes() {
        byte[] id = RecordId.ofSourcePosition("orders", 1, 100);
        assertEquals("6f7264657273" + "00" + "00000001" + "0000000000000064", HexFormat.of().formatHex(id));
        assertArrayEquals(id, RecordId.ofSourcePosition("orders", 1, 100, 0), "index 0 adds nothing");
        assertEquals("0000000000000064" + "00000002",
                HexFormat.of().formatHex(Arrays.copyOfRange(RecordId.ofSourcePosition("orders", 1, 100, 2), 11, 23)));
    }

    /** The example that used the offset alone gave partition 0 and 1's offset 100 one id. */
    @Test
    void theSameOffsetInAnotherPartitionOrTopicIsAnotherId() {
        byte[] a = RecordId.ofSourcePosition("orders", 0, 100);
        assertFalse(Arrays.equals(a, RecordId.ofSourcePosition("orders", 1, 100)));
        assertFalse(Arrays.equals(a, RecordId.ofSourcePosition("orders-eu", 0, 100)));
        assertFalse(Arrays.equals(a, RecordId.ofSourcePosition("orders", 0, 101)));
        // No topic/partition split makes two positions one id: the 0x00 ends the topic.
        assertFalse(Arrays.equals(RecordId.ofSourcePosition("a", 0x62_00_00_00, 0),
                RecordId.ofSourcePosition("ab", 0, 0)));
    }

    @Test
    void idsOverTheServersLimitAreRefusedNamingIt() {
        // 111 topic bytes fit with an index too; 116 do not fit even without one.
        assertEquals(RecordId.MAX_BYTES, RecordId.ofSourcePosition("t".repeat(111), 0, 0, 1).length);
        assertEquals(RecordId.MAX_BYTES, RecordId.ofSourcePosition("t".repeat(115), 0, 0).length);
        assertThrows(IllegalArgumentException.class, () -> RecordId.ofSourcePosition("t".repeat(112), 0, 0, 1));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> RecordId.ofSourcePosition("t".repeat(116), 0, 0));
        assertTrue(e.getMessage().contains("128-byte limit"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> RecordId.ofSourcePosition("t", 0, 0, -1));
        assertThrows(NullPointerException.class, () -> RecordId.ofSourcePosition(null, 0, 0));
    }
}
