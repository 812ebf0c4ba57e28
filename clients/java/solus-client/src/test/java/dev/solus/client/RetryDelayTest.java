package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.protobuf.Duration;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client waits at least the server's retry_delay, and retries nothing the server did not mark. */
class RetryDelayTest {
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

    private static StatusRuntimeException refusal(Status.Code code, Long retryDelayMs) {
        com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("refused by the test");
        if (retryDelayMs != null) {
            st.addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(Duration.newBuilder()
                    .setNanos((int) TimeUnit.MILLISECONDS.toNanos(retryDelayMs))).build()));
        }
        return StatusProto.toStatusRuntimeException(st.build());
    }

    @Test
    void aRetryWaitsAtLeastTheServersRetryDelayPlusBackoff() {
        RefuseFirst refuse = new RefuseFirst(refusal(Status.Code.RESOURCE_EXHAUSTED, 300L), 3);
        try (SolusClient c = SolusClient.builder().address(server.address()).clientId("java-delay").intercept(refuse)
                .backoff(java.time.Duration.ofMillis(20), java.time.Duration.ofMillis(40)).build()) {
            // Admin and data calls alike: the first three attempts (of all calls) are refused.
            assertEquals("delayed", c.createDeduper("delayed", 1000, 0.01, java.time.Duration.ofHours(1)).getName());
            List<Long> starts = refuse.starts();
            assertEquals(4, starts.size(), "three refused attempts, then the one that got through");
            for (int i = 1; i < 4; i++) {
                long gapMs = TimeUnit.NANOSECONDS.toMillis(starts.get(i) - starts.get(i - 1));
                // 300 ms from the server, plus 10-20, 20-40, 20-40 ms of jittered backoff.
                assertTrue(gapMs >= 310 && gapMs < 2_000, "attempt " + (i + 1) + " came " + gapMs + " ms after the one before");
            }
        }
    }

    @Test
    void aDataCallRefusedWithoutRetryInfoFailsAfterOneAttempt() {
        RefuseFirst refuse = new RefuseFirst(refusal(Status.Code.UNAVAILABLE, null), 1);
        try (SolusClient c = SolusClient.builder().address(server.address()).clientId("java-delay").intercept(refuse).build()) {
            CompletionException e = assertThrows(CompletionException.class, () -> c.addIfAbsent("any", "x").join());
            SolusException se = assertInstanceOf(SolusException.class, e.getCause());
            assertEquals(Status.Code.UNAVAILABLE, se.code());
            assertEquals(1, se.attempts(), "a status with details but no RetryInfo is final: " + se.getMessage());
            assertEquals(1, refuse.starts().size());
        }
    }

    @Test
    void aDataCallRefusedWithRetryInfoIsRetriedWithTheSameRequest() {
        RefuseFirst refuse = new RefuseFirst(refusal(Status.Code.UNAVAILABLE, 50L), 2);
        CaptureRequests capture = new CaptureRequests();
        try (SolusClient c = SolusClient.builder().address(server.address()).clientId("java-delay").intercept(capture, refuse)
                .backoff(java.time.Duration.ofMillis(5), java.time.Duration.ofMillis(10)).build()) {
            try (SolusClient admin = SolusClient.builder().address(server.address()).clientId("java-delay").build()) {
                admin.createDeduper("retried", 1000, 0.01, java.time.Duration.ofHours(1));
            }
            assertTrue(c.addIfAbsent("retried", "x".getBytes(), "src/0/1".getBytes()).join());
            var sent = capture.of(solus.v1.DeduperOuterClass.AddIfAbsentRequest.class);
            assertEquals(1, sent.size(), "only the attempt that got through sent its message");
            assertEquals(3, refuse.starts().size(), "two refused attempts, then the answered one");
        }
    }

    @Test
    void aBareCancelledFromAServerShuttingDownIsRetried() {
        RefuseFirst refuse = new RefuseFirst(Status.CANCELLED.withDescription("raced a GOAWAY").asRuntimeException(), 1);
        try (SolusClient c = SolusClient.builder().address(server.address()).clientId("java-delay").intercept(refuse)
                .backoff(java.time.Duration.ofMillis(5), java.time.Duration.ofMillis(10)).build()) {
            assertEquals("goaway", c.createDeduper("goaway", 1000, 0.01, java.time.Duration.ofHours(1)).getName());
            assertEquals(2, refuse.starts().size(), "retried once");
        }
    }
}
