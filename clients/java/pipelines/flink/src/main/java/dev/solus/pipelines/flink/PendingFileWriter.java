package dev.solus.pipelines.flink;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.UUID;
import org.apache.flink.api.connector.sink2.CommittingSinkWriter;

/**
 * Buffers the records of the current checkpoint in memory; at the barrier writes them to one
 * new pending file (index TAB id per line) and returns its name for the committer.
 */
final class PendingFileWriter implements CommittingSinkWriter<Event, String> {
    private final Path pending;
    private final int subtask;
    private final List<Event> buffer = new ArrayList<>();

    PendingFileWriter(Path pending, int subtask) {
        this.pending = pending;
        this.subtask = subtask;
    }

    @Override
    public void write(Event e, Context context) {
        buffer.add(e);
    }

    @Override
    public void flush(boolean endOfInput) {
        // Nothing: records go to disk in prepareCommit, at the barrier.
    }

    @Override
    public Collection<String> prepareCommit() throws IOException {
        if (buffer.isEmpty()) {
            return List.of();
        }
        // A fresh name per file: a restarted attempt can never overwrite a committable of a
        // completed checkpoint that is still waiting for its commit.
        String name = "part-" + subtask + "-" + UUID.randomUUID() + ".tsv";
        Path tmp = pending.resolve(name + ".tmp");
        try (BufferedWriter w = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
            for (Event e : buffer) {
                w.write(Long.toString(e.index));
                w.write('\t');
                w.write(e.id);
                w.write('\n');
            }
        }
        Files.move(tmp, pending.resolve(name), java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        buffer.clear();
        return List.of(name);
    }

    @Override
    public void close() {
        buffer.clear();
    }
}
