package dev.solus.pipelines.flink;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.api.connector.sink2.Committer;
import org.apache.flink.api.connector.sink2.CommitterInitContext;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.SupportsCommitter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.core.io.SimpleVersionedSerializer;

/**
 * An exactly-once file sink, two-phase: the writer puts each checkpoint's records in a new file
 * under {@code pending/} at the checkpoint's barrier and hands its name on as the committable;
 * the committer moves it to {@code committed/} once that checkpoint completed. A record is thus
 * committed only with the checkpoint that covers the source position and async-operator state it
 * came from; records after the last completed checkpoint stay in pending files that no completed
 * checkpoint names, and are emitted again by the replay. A commit retried after a restore finds
 * the file already moved and counts it as done, so no file is committed twice.
 */
public class CommittedFileSink implements Sink<Event>, SupportsCommitter<String> {
    private static final long serialVersionUID = 1L;

    private final String dir;

    public CommittedFileSink(Path dir) {
        this.dir = dir.toString();
    }

    /** Where the committed files are: the pipeline's output. */
    public static Path committed(Path dir) {
        return dir.resolve("committed");
    }

    static Path pending(Path dir) {
        return dir.resolve("pending");
    }

    @Override
    public SinkWriter<Event> createWriter(WriterInitContext context) throws IOException {
        Files.createDirectories(pending(Path.of(dir)));
        return new PendingFileWriter(pending(Path.of(dir)), context.getTaskInfo().getIndexOfThisSubtask());
    }

    @Override
    public Committer<String> createCommitter(CommitterInitContext context) throws IOException {
        Files.createDirectories(committed(Path.of(dir)));
        return new MoveCommitter(pending(Path.of(dir)), committed(Path.of(dir)));
    }

    @Override
    public SimpleVersionedSerializer<String> getCommittableSerializer() {
        return new FileNameSerializer();
    }
}
