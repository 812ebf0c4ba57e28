package dev.solus.flink;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.MethodDescriptor;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;

/**
 * Records when each call of one client starts (nanoTime) under that client's generation: one
 * generation per built client, i.e. per task attempt of the function. Static, because Flink
 * builds the interceptors on its workers, in this JVM when on a MiniCluster.
 */
final class CallLog implements ClientInterceptor {
    record Call(int generation, long startNanos) {
    }

    static final Queue<Call> CALLS = new ConcurrentLinkedQueue<>();

    private final int generation;

    CallLog(int generation) {
        this.generation = generation;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        CALLS.add(new Call(generation, System.nanoTime()));
        return next.newCall(method, options);
    }
}
