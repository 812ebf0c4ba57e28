package dev.solus.pipelines.flink;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.flink.api.common.functions.MapFunction;

/**
 * The injected failure: throws once, at record {@code atIndex}, and never again (a marker file
 * remembers it across the restart, which rebuilds this function from its serialized form).
 */
public class FailOnce implements MapFunction<Event, Event> {
    private static final long serialVersionUID = 1L;

    private final long atIndex;
    private final String marker;

    public FailOnce(long atIndex, Path marker) {
        this.atIndex = atIndex;
        this.marker = marker.toString();
    }

    @Override
    public Event map(Event e) {
        if (e.index == atIndex && claim()) {
            throw new IllegalStateException("injected failure at record " + atIndex + " (once, by the pipeline)");
        }
        return e;
    }

    private boolean claim() {
        try {
            Files.createFile(Path.of(marker));
            return true;
        } catch (java.nio.file.FileAlreadyExistsException already) {
            return false;
        } catch (IOException ioe) {
            throw new UncheckedIOException("creating " + marker, ioe);
        }
    }
}
