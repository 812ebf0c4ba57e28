package dev.solus.flink;

import java.util.Collection;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.flink.streaming.api.functions.async.ResultFuture;

/**
 * Completes a Flink {@link ResultFuture} at most once. Flink's contract is "exactly one call":
 * a second one (the client's late answer after {@code timeout()} already failed the element)
 * would corrupt the operator's queue.
 */
final class OnceResult<T> {
    private final ResultFuture<T> target;
    private final AtomicBoolean done = new AtomicBoolean();
    /** When the element was asked, {@link System#nanoTime()}. */
    final long askedNanos = System.nanoTime();

    OnceResult(ResultFuture<T> target) {
        this.target = target;
    }

    /** Emits {@code out}; false (and nothing done) when the element was already completed. */
    boolean complete(Collection<T> out) {
        if (!done.compareAndSet(false, true)) {
            return false;
        }
        target.complete(out);
        return true;
    }

    /** Fails the element; false (and nothing done) when it was already completed. */
    boolean fail(Throwable error) {
        if (!done.compareAndSet(false, true)) {
            return false;
        }
        target.completeExceptionally(error);
        return true;
    }
}
