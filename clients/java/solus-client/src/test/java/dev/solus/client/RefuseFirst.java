package dev.solus.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.StatusRuntimeException;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Answers the first {@code count} calls of every RPC with {@code refusal} (its status and its
 * trailers, e.g. a RetryInfo) without reaching the server, as a server refusing them would; records
 * when each call started (nanoTime), refused or not.
 */
public final class RefuseFirst implements ClientInterceptor {
    private final StatusRuntimeException refusal;
    private final AtomicInteger left;
    private final List<Long> starts = new CopyOnWriteArrayList<>();

    public RefuseFirst(StatusRuntimeException refusal, int count) {
        this.refusal = refusal;
        this.left = new AtomicInteger(count);
    }

    /** System.nanoTime() at the start of each call, in order. */
    public List<Long> starts() {
        return starts;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        if (left.getAndDecrement() <= 0) {
            starts.add(System.nanoTime());
            return next.newCall(method, options);
        }
        return new ClientCall<>() {
            @Override
            public void start(Listener<R> listener, Metadata headers) {
                starts.add(System.nanoTime());
                Metadata trailers = refusal.getTrailers() == null ? new Metadata() : refusal.getTrailers();
                listener.onClose(refusal.getStatus(), trailers);
            }

            @Override
            public void request(int numMessages) {
            }

            @Override
            public void cancel(String message, Throwable cause) {
            }

            @Override
            public void halfClose() {
            }

            @Override
            public void sendMessage(Q message) {
            }
        };
    }
}
