package dev.solus.pipelines.flink;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Collection;

/** Commits a pending file by moving it to committed/ (atomic, idempotent across restores). */
final class MoveCommitter implements org.apache.flink.api.connector.sink2.Committer<String> {
    private final Path pending;
    private final Path committed;

    MoveCommitter(Path pending, Path committed) {
        this.pending = pending;
        this.committed = committed;
    }

    @Override
    public void commit(Collection<CommitRequest<String>> requests) throws IOException {
        for (CommitRequest<String> r : requests) {
            Path from = pending.resolve(r.getCommittable());
            Path to = committed.resolve(r.getCommittable());
            if (Files.exists(from)) {
                Files.move(from, to, StandardCopyOption.ATOMIC_MOVE);
            } else if (Files.exists(to)) {
                r.signalAlreadyCommitted(); // a commit retried after a restore
            } else {
                r.signalFailedWithKnownReason(new IOException("committable " + r.getCommittable()
                        + " is neither in " + pending + " nor in " + committed + ": its records are lost"));
            }
        }
    }

    @Override
    public void close() {
    }
}
