package dev.solus.client;

import io.grpc.Status;

/**
 * A Solus call that failed for good: either a status that retrying cannot fix
 * ({@code INVALID_ARGUMENT}, {@code NOT_FOUND}, {@code FAILED_PRECONDITION}, ...) or a
 * retryable one ({@code UNAVAILABLE}, {@code RESOURCE_EXHAUSTED}, ...) after the retry budget
 * ({@link SolusClient.Builder#maxAttempts(int)}) was spent.
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
