package dev.solus.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.MethodDescriptor;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/** Records every request message the client sends (each attempt), in sending order. */
public final class CaptureRequests implements ClientInterceptor {
    private final List<Object> sent = new CopyOnWriteArrayList<>();

    /** The messages sent so far of type {@code type}. */
    public <T> List<T> of(Class<T> type) {
        return sent.stream().filter(type::isInstance).map(type::cast).toList();
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
            @Override
            public void sendMessage(Q message) {
                sent.add(message);
                super.sendMessage(message);
            }
        };
    }
}
