package dev.solus.client;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The future of a call of a {@link SolusClient} (and of everything derived from it with
 * {@code thenApply}, {@code thenCompose}, ...): a {@link CompletableFuture} whose blocking waits
 * ({@link #get()}, {@link #get(long, TimeUnit)}, {@link #join()}) fail at once with an
 * {@link IllegalStateException} when made, unanswered, inside a completion callback that the same
 * client runs while it delivers answers. Such a wait would hold the thread that delivers the
 * answer it waits for (the rest of the batch, the repeats waiting for it) and hang until its
 * timeout, or forever (as {@code KafkaProducer.flush()} in a send callback did before
 * KAFKA-10790).
 */
final class Answer<T> extends CompletableFuture<T> {
    /** The client delivering answers on this thread now, or null. */
    private static final ThreadLocal<SolusClient> DELIVERING = new ThreadLocal<>();

    private final SolusClient owner;

    Answer(SolusClient owner) {
        this.owner = owner;
    }

    /** Marks this thread as delivering answers of {@code client} until {@link CallingBack#close}. */
    static CallingBack callingBack(SolusClient client) {
        SolusClient before = DELIVERING.get();
        DELIVERING.set(client);
        return () -> {
            if (before == null) {
                DELIVERING.remove();
            } else {
                DELIVERING.set(before);
            }
        };
    }

    /** Ends a {@link #callingBack} mark. */
    interface CallingBack extends AutoCloseable {
        @Override
        void close();
    }

    @Override
    public <U> CompletableFuture<U> newIncompleteFuture() {
        return new Answer<>(owner);
    }

    @Override
    public T get() throws InterruptedException, ExecutionException {
        refuseWaitInCallback("get()");
        return super.get();
    }

    @Override
    public T get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
        refuseWaitInCallback("get(timeout)");
        return super.get(timeout, unit);
    }

    @Override
    public T join() {
        refuseWaitInCallback("join()");
        return super.join();
    }

    private void refuseWaitInCallback(String how) {
        if (!isDone() && DELIVERING.get() == owner) {
            throw new IllegalStateException("a blocking " + how + " on an unanswered future of this Solus client "
                    + "inside a completion callback that the client runs (on the thread delivering its answers, "
                    + thread() + ") would wait for itself: the answer it waits for is delivered by this same thread "
                    + "after the callback returns. Chain the work instead (thenCompose, thenAccept) or move it to "
                    + "another thread (the *Async methods of CompletableFuture with your own executor)");
        }
    }

    private static String thread() {
        return "'" + Thread.currentThread().getName() + "'";
    }
}
