package dev.solus.client;

import io.grpc.Status;

/**
 * A Solus call that failed for good: either a failure that retrying cannot fix (no
 * {@code google.rpc.RetryInfo} from the server: {@code INVALID_ARGUMENT}, {@code NOT_FOUND},
 * {@code FAILED_PRECONDITION}, {@code RESOURCE_EXHAUSTED} of a budget, ...; then
 * {@link #attempts()} is 1) or a retryable one ({@code UNAVAILABLE}, the concurrency limit's
 * {@code RESOURCE_EXHAUSTED}, {@code DEADLINE_EXCEEDED}) after the retry budget
 * ({@link SolusClient.Builder#maxAttempts(int)}) was spent; or {@code CANCELLED} when the client
 * was closed before an answer came or the call was interrupted while waiting for a slot.
 */
public final class SolusException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final Status.Code code;
    private final int attempts;

    SolusException(String rpc, Status status, int attempts) {
        super(rpc + " failed with " + status.getCode()
                + (status.getDescription() == null ? "" : ": " + status.getDescription())
                + " (after " + attempts + (attempts == 1 ? " attempt)" : " attempts)"), status.getCause());
        this.code = status.getCode();
        this.attempts = attempts;
    }

    SolusException(String message, Status.Code code) {
        super(message);
        this.code = code;
        this.attempts = 0;
    }

    /** The gRPC status code of the last attempt. */
    public Status.Code code() {
        return code;
    }

    /** How many attempts were made (0 when the call was refused before being sent). */
    public int attempts() {
        return attempts;
    }
}
