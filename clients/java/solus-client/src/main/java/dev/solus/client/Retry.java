package dev.solus.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;

/**
 * Whether a failed attempt is worth another one, told by the server: it attaches
 * {@code google.rpc.RetryInfo} (in the {@code grpc-status-details-bin} trailer) to refusals that
 * pass by themselves (the concurrency limit, storage unavailable, a draining server) and nothing
 * to those a retry cannot fix (the memory or record-id budget, a bad request, a missing or
 * inactive deduper). Without a status-details trailer, {@code UNAVAILABLE} (no server answered:
 * the connection failed), {@code DEADLINE_EXCEEDED} (the attempt's own deadline) and
 * {@code CANCELLED} (a request that raced a shutting-down server's GOAWAY, not run) are retried
 * too, and so is any status grpc-java made from a GOAWAY the connection received (its description
 * names the GOAWAY; ENHANCE_YOUR_CALM comes as {@code RESOURCE_EXHAUSTED}).
 */
final class Retry {
    /** Returned by {@link #serverDelayMillis} for a failure that must not be retried. */
    static final long NEVER = -1;
    /** A server's retry_delay above this is taken as this (a day): no overflow, no absurd waits. */
    private static final long MAX_SERVER_DELAY_MS = 86_400_000L;
    private static final Metadata.Key<byte[]> STATUS_DETAILS =
            Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

    private Retry() {
    }

    /**
     * {@link #NEVER} when {@code failure} must not be retried; otherwise the least wait the server
     * asked for before the next attempt, in milliseconds (0 when it asked for none).
     */
    static long serverDelayMillis(Throwable failure) {
        com.google.rpc.Status details = StatusProto.fromThrowable(failure);
        if (details != null) {
            for (Any a : details.getDetailsList()) {
                if (a.is(RetryInfo.class)) {
                    return delayMillis(a);
                }
            }
        }
        // No status-details trailer at all: no server answered (a trailer, even with no details
        // in it, is a server's answer that chose not to say "retry"). StatusProto makes up a
        // Status when there is no trailer, so the trailer itself is looked at.
        Metadata trailers = Status.trailersFromThrowable(failure);
        boolean answered = trailers != null && trailers.containsKey(STATUS_DETAILS);
        Status.Code code = Status.fromThrowable(failure).getCode();
        // A bare CANCELLED is a request that raced a shutting-down server's GOAWAY: not run. (The
        // client's own cancellations happen only in close, which retries nothing.)
        if (!answered && (code == Status.Code.UNAVAILABLE || code == Status.Code.DEADLINE_EXCEEDED
                || code == Status.Code.CANCELLED || goAway(failure))) {
            return 0;
        }
        return NEVER;
    }

    /**
     * Whether the attempt failed because its connection received an HTTP/2 GOAWAY: a transport
     * event, not a gRPC answer (it comes without trailers). grpc-java turns the GOAWAY's HTTP/2
     * error code into the status and says so in the description. After a stall, the client's
     * timed-out attempts have reset many streams at once and hyper closes the connection with
     * ENHANCE_YOUR_CALM "too_many_resets", which grpc-java (1.85) reports on the streams it had
     * sent as {@code RESOURCE_EXHAUSTED: Abrupt GOAWAY closed sent stream. HTTP/2 error code:
     * ENHANCE_YOUR_CALM (Bandwidth exhausted), debug data: too_many_resets} (other versions and
     * paths say "Received Goaway"): no refusal of the server's, the next connection is answered.
     */
    static boolean goAway(Throwable failure) {
        String d = Status.fromThrowable(failure).getDescription();
        return d != null && d.toLowerCase(java.util.Locale.ROOT).contains("goaway");
    }

    private static long delayMillis(Any retryInfo) {
        try {
            com.google.protobuf.Duration d = retryInfo.unpack(RetryInfo.class).getRetryDelay();
            if (d.getSeconds() < 0 || d.getNanos() < 0) {
                return 0;
            }
            long ms = Math.min(d.getSeconds(), MAX_SERVER_DELAY_MS / 1000) * 1000 + d.getNanos() / 1_000_000;
            return Math.min(ms, MAX_SERVER_DELAY_MS);
        } catch (InvalidProtocolBufferException e) {
            return 0; // a RetryInfo we cannot read still says "retryable"; our own backoff applies
        }
    }
}
