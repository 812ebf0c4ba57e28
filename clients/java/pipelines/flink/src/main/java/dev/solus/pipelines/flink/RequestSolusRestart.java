package dev.solus.pipelines.flink;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.api.common.functions.MapFunction;

/**
 * Asks run.sh (which owns the Solus process) to kill -9 and restart Solus, once: at the first
 * record at or past {@code fromIndex} seen after the injected failure happened, so the two
 * failures fall apart in time. run.sh polls for the request file.
 */
public class RequestSolusRestart implements MapFunction<Event, Event> {
    private static final long serialVersionUID = 1L;

    private final long fromIndex;
    private final String after;
    private final String request;
    private transient boolean asked;

    public RequestSolusRestart(long fromIndex, Path afterMarker, Path requestFile) {
        this.fromIndex = fromIndex;
        this.after = afterMarker.toString();
        this.request = requestFile.toString();
    }

    @Override
    public Event map(Event e) {
        if (!asked && e.index >= fromIndex && e.index % 100 == 0 && Files.exists(Path.of(after))) {
            asked = true;
            try {
                Files.createFile(Path.of(request));
            } catch (FileAlreadyExistsException already) {
                // asked before this task attempt
            } catch (IOException ioe) {
                throw new UncheckedIOException("creating " + request, ioe);
            }
        }
        return e;
    }
}
