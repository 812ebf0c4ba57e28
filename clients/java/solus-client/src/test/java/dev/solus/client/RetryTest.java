package dev.solus.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.protobuf.Any;
import com.google.protobuf.Duration;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import org.junit.jupiter.api.Test;

/** Which failures are retried, as the server marks them (status details) or the transport fails. */
class RetryTest {
    private static StatusRuntimeException withDetails(Status.Code code, Any... details) {
        com.google.rpc.Status.Builder st = com.google.rpc.Status.newBuilder().setCode(code.value()).setMessage("m");
        for (Any a : details) {
            st.addDetails(a);
        }
        return StatusProto.toStatusRuntimeException(st.build());
    }

    private static Any retryAfter(long seconds, int nanos) {
        return Any.pack(RetryInfo.newBuilder().setRetryDelay(Duration.newBuilder().setSeconds(seconds).setNanos(nanos)).build());
    }

    @Test
    void retryInfoMakesAnyCodeRetryableAfterItsDelay() {
        assertEquals(250, Retry.serverDelayMillis(withDetails(Status.Code.RESOURCE_EXHAUSTED, retryAfter(0, 250_000_000))));
        assertEquals(2_000, Retry.serverDelayMillis(withDetails(Status.Code.UNAVAILABLE, retryAfter(2, 0))));
        assertEquals(0, Retry.serverDelayMillis(withDetails(Status.Code.UNAVAILABLE, retryAfter(0, 0))));
        assertEquals(86_400_000L, Retry.serverDelayMillis(withDetails(Status.Code.UNAVAILABLE, retryAfter(Long.MAX_VALUE / 2, 0))),
                "capped at a day");
    }

    @Test
    void resourceExhaustedWithoutRetryInfoIsNotRetried() {
        // The memory budget: freed only by a delete.
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(Status.RESOURCE_EXHAUSTED.withDescription("budget").asRuntimeException()));
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(withDetails(Status.Code.RESOURCE_EXHAUSTED)));
    }

    @Test
    void unavailableOrDeadlineWithoutDetailsIsATransportFailureAndRetried() {
        assertEquals(0, Retry.serverDelayMillis(Status.UNAVAILABLE.withDescription("connection refused").asRuntimeException()));
        assertEquals(0, Retry.serverDelayMillis(Status.DEADLINE_EXCEEDED.asRuntimeException()));
        assertEquals(0, Retry.serverDelayMillis(Status.CANCELLED.asRuntimeException()), "a request that raced a GOAWAY");
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(withDetails(Status.Code.CANCELLED)));
        // The server answered and said nothing about retrying: not retried.
        Any info = Any.pack(ErrorInfo.newBuilder().setReason("DRAINED").build());
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(withDetails(Status.Code.UNAVAILABLE, info)));
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(withDetails(Status.Code.UNAVAILABLE)), "a details trailer with no details");
        assertEquals(Retry.NEVER, Retry.serverDelayMillis(withDetails(Status.Code.DEADLINE_EXCEEDED)));
    }

    @Test
    void otherCodesAreNotRetried() {
        for (Status s : new Status[] {Status.INVALID_ARGUMENT, Status.NOT_FOUND,
                Status.FAILED_PRECONDITION, Status.ALREADY_EXISTS, Status.PERMISSION_DENIED, Status.INTERNAL}) {
            assertEquals(Retry.NEVER, Retry.serverDelayMillis(s.asRuntimeException()), s.getCode().toString());
        }
    }
}
