package dev.solus.flink;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/** Collects what each task attempt emitted (static: the MiniCluster runs in the test's JVM). */
final class AttemptSink implements Sink<String> {
    private static final long serialVersionUID = 1L;

    static final Map<Integer, List<String>> BY_ATTEMPT = new ConcurrentHashMap<>();

    @Override
    public SinkWriter<String> createWriter(WriterInitContext context) {
        List<String> out = BY_ATTEMPT.computeIfAbsent(context.getTaskInfo().getAttemptNumber(),
                a -> new CopyOnWriteArrayList<>());
        return new SinkWriter<>() {
            @Override
            public void write(String element, Context ctx) {
                out.add(element);
            }

            @Override
            public void flush(boolean endOfInput) {
            }

            @Override
            public void close() {
            }
        };
    }
}
