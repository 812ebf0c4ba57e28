package dev.solus.client;

import static java.nio.charset.StandardCharsets.UTF_8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import solus.v1.DeduperOuterClass.AddIfAbsentRequest;
import solus.v1.DeduperOuterClass.CheckAbsenceRequest;

/** Record ids through the client: what is sent, and what a call does while its entity is unanswered. */
class RecordIdsTest {
    private static final AtomicInteger NAMES = new AtomicInteger();
    private static SolusServer server;

    @BeforeAll
    static void startServer() {
        server = SolusServer.start();
    }

    @AfterAll
    static void stopServer() {
        if (server != null) {
            server.close();
        }
    }

    private static SolusClient.Builder client() {
        return SolusClient.builder().address(server.address()).clientId("java-record-ids");
    }

    private static String deduper(SolusClient c) {
        String name = "r" + NAMES.incrementAndGet();
        c.createDeduper(name, 100_000, 0.01, Duration.ofHours(1));
        return name;
    }

    private static byte[] b(String s) {
        return s.getBytes(UTF_8);
    }

    @Test
    void aBatchCarriesOneRecordIdPerEntityOrNone() {
        CaptureRequests capture = new CaptureRequests();
        try (SolusClient c = client().intercept(capture).maxBatch(3).linger(Duration.ofHours(1)).build()) {
            String d = deduper(c);
            List<CompletableFuture<Boolean>> withIds = List.of(
                    c.addIfAbsent(d, b("a"), b("src/0/1")), c.addIfAbsent(d, b("b")), c.addIfAbsent(d, b("c"), b("src/0/3")));
            List<CompletableFuture<Boolean>> without = List.of(
                    c.addIfAbsent(d, b("e")), c.addIfAbsent(d, b("f"), (byte[]) null), c.addIfAbsent(d, b("g"), new byte[0]));
            withIds.forEach(f -> assertTrue(f.join()));
            without.forEach(f -> assertTrue(f.join()));
            List<AddIfAbsentRequest> sent = capture.of(AddIfAbsentRequest.class);
            assertEquals(2, sent.size(), "two full batches of 3");
            assertEquals(List.of(ByteString.copyFromUtf8("src/0/1"), ByteString.EMPTY, ByteString.copyFromUtf8("src/0/3")),
                    sent.get(0).getRecordIdsList());
            assertEquals(List.of(), sent.get(1).getRecordIdsList(), "no record of the batch has an id: none sent");

            List<CompletableFuture<Boolean>> checks = List.of(
                    c.checkAbsence(d, b("a"), b("src/0/1")), c.checkAbsence(d, b("never")), c.checkAbsence(d, b("x"), b("src/0/9")));
            assertEquals(List.of(true), List.of(checks.get(1).join()));
            List<CheckAbsenceRequest> checked = capture.of(CheckAbsenceRequest.class);
            assertEquals(1, checked.size());
            assertEquals(List.of(ByteString.copyFromUtf8("src/0/1"), ByteString.EMPTY, ByteString.copyFromUtf8("src/0/9")),
                    checked.get(0).getRecordIdsList());
        }
    }

    @Test
    void aRecordIdOver128BytesIsRefusedAtTheCall() {
        try (SolusClient c = client().build()) {
            String d = deduper(c);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> c.addIfAbsent(d, b("k"), new byte[129]));
            assertEquals("record id of 129 bytes refused: record ids are 0 to 128 bytes", e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> c.checkAbsence(d, b("k"), new byte[129]));
            assertTrue(c.addIfAbsent(d, b("k"), new byte[128]).join(), "128 bytes is the limit, accepted");
        }
    }

    @Test
    void aCallWhoseEntityIsUnansweredSharesSendsLaterOrIsPresent() {
        CaptureRequests capture = new CaptureRequests();
        try (SolusClient c = client().intercept(capture).linger(Duration.ofMillis(200)).build()) {
            String d = deduper(c);
            CompletableFuture<Boolean> first = c.addIfAbsent(d, b("X"), b("src/0/1"));
            CompletableFuture<Boolean> sameRecord = c.addIfAbsent(d, b("X"), b("src/0/1"));
            CompletableFuture<Boolean> noId = c.addIfAbsent(d, b("X"));
            CompletableFuture<Boolean> otherRecord = c.addIfAbsent(d, b("X"), b("src/0/2"));
            assertTrue(first.join());
            assertTrue(sameRecord.join(), "the same record: the first call's answer");
            assertFalse(noId.join(), "no id: present once the first call added X");
            assertFalse(otherRecord.join(), "another record of X, asked after the first was answered");
            List<AddIfAbsentRequest> sent = capture.of(AddIfAbsentRequest.class);
            assertEquals(2, sent.size(), "the other record went in its own request, after the first");
            assertEquals(List.of(ByteString.copyFromUtf8("X")), sent.get(0).getEntitiesList(), "X sent once in the first");
            assertEquals(List.of(ByteString.copyFromUtf8("src/0/2")), sent.get(1).getRecordIdsList());
        }
    }

    @Test
    void aReplayedRecordIsAnsweredNewAgain() {
        try (SolusClient c = client().build()) {
            String d = deduper(c);
            assertTrue(c.addIfAbsent(d, b("X"), b("src/0/1")).join(), "first occurrence");
            assertTrue(c.addIfAbsent(d, b("X"), b("src/0/1")).join(), "its replay: new again");
            assertFalse(c.addIfAbsent(d, b("X"), b("src/0/2")).join(), "another record of X: present");
            assertFalse(c.addIfAbsent(d, b("X")).join(), "no record id: present");
            assertTrue(c.checkAbsence(d, b("X"), b("src/0/1")).join(), "the record that was new checks absent");
            assertFalse(c.checkAbsence(d, b("X"), b("src/0/2")).join());
            assertFalse(c.checkAbsence(d, b("X")).join());
        }
    }

    @Test
    void aReplayBehindAnUnansweredOtherRecordOfItsEntityIsNotDropped() {
        String d;
        try (SolusClient first = client().build()) {
            d = deduper(first);
            assertTrue(first.addIfAbsent(d, b("X"), b("src/0/1")).join(), "answered new, then the task died");
        }
        // The next owner: a later record of X is still unanswered when the replay of src/0/1 comes.
        try (SolusClient next = client().linger(Duration.ofMillis(100)).build()) {
            CompletableFuture<Boolean> later = next.addIfAbsent(d, b("X"), b("src/0/2"));
            CompletableFuture<Boolean> replay = next.addIfAbsent(d, b("X"), b("src/0/1"));
            assertFalse(later.join(), "src/0/2 is a duplicate of X");
            assertTrue(replay.join(), "the replay of the new record src/0/1 must come out again, not read present");
        }
    }

    @Test
    void aHotEntityWithManyRecordIdsCostsAFewRequestsNotOneEach() {
        // 1,000 records of one entity (a popular id), each with its own record id, made at once:
        // they must not go out one request (one round trip) after another.
        // Each group waits one linger (50 ms) plus a round trip: a slow machine making the calls
        // over a few hundred ms gets a few groups more, never one request per record.
        CaptureRequests capture = new CaptureRequests();
        try (SolusClient c = client().intercept(capture).linger(Duration.ofMillis(50)).build()) {
            String d = deduper(c);
            List<CompletableFuture<Boolean>> fs = new java.util.ArrayList<>();
            for (int i = 0; i < 1000; i++) {
                fs.add(c.addIfAbsent(d, b("hot"), b("src/0/" + i)));
            }
            assertTrue(fs.get(0).join(), "the first record is new");
            for (int i = 1; i < 1000; i++) {
                assertFalse(fs.get(i).join(), "record " + i + " repeats it");
            }
            int requests = capture.of(AddIfAbsentRequest.class).size();
            assertTrue(requests <= 10, requests + " requests for 1,000 records of one entity");
        }
    }
}
