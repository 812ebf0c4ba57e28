package dev.solus.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ForwardingClientCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Lets the first {@code count} calls of one RPC reach the server and be executed, then throws
 * their answer away and reports {@code UNAVAILABLE} instead: an answer lost on the way back.
 */
public final class DropResponses implements ClientInterceptor {
    private final String fullMethod;
    private final AtomicInteger left;
    private final AtomicInteger dropped = new AtomicInteger();

    public DropResponses(String fullMethod, int count) {
        this.fullMethod = fullMethod;
        this.left = new AtomicInteger(count);
    }

    /** How many answers were thrown away. */
    public int dropped() {
        return dropped.get();
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        ClientCall<Q, R> call = next.newCall(method, options);
        if (!method.getFullMethodName().equals(fullMethod) || left.getAndDecrement() <= 0) {
            return call;
        }
        return new ForwardingClientCall.SimpleForwardingClientCall<>(call) {
            @Override
            public void start(Listener<R> listener, Metadata headers) {
                super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<>(listener) {
                    private boolean answered;

                    @Override
                    public void onMessage(R message) {
                        answered = true; // executed by the server: drop the answer
                    }

                    @Override
                    public void onClose(Status status, Metadata trailers) {
                        if (status.isOk() && answered) {
                            dropped.incrementAndGet();
                            super.onClose(Status.UNAVAILABLE.withDescription("answer dropped on purpose by the test"),
                                    new Metadata());
                        } else {
                            super.onClose(status, trailers);
                        }
                    }
                }, headers);
            }
        };
    }
}
