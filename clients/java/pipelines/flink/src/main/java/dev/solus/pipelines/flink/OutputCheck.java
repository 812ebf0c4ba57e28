package dev.solus.pipelines.flink;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * Counts the committed output against the workload: each distinct input id should come out
 * exactly once. {@code lost} = distinct ids not in the output, {@code duplicated} = output lines
 * beyond the first of their id, {@code unexpected} = ids that are not in the input.
 */
public record OutputCheck(long lines, long lost, long duplicated, long unexpected, List<String> lostSample) {

    /** Reads every committed file under {@code committedDir}. */
    public static OutputCheck of(Path committedDir, Workload w) {
        Map<String, Integer> seen = new HashMap<>(w.distinct() * 2);
        long lines = 0;
        long duplicated = 0;
        long unexpected = 0;
        Map<String, Boolean> input = new HashMap<>(w.distinct() * 2);
        for (int i = 0; i < w.records(); i++) {
            if (w.isFirst(i)) {
                input.put(w.id(i), Boolean.TRUE);
            }
        }
        try (Stream<Path> files = Files.list(committedDir)) {
            for (Path f : (Iterable<Path>) files.sorted()::iterator) {
                try (BufferedReader r = Files.newBufferedReader(f, StandardCharsets.UTF_8)) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        lines++;
                        String id = line.substring(line.indexOf('\t') + 1);
                        if (seen.merge(id, 1, Integer::sum) > 1) {
                            duplicated++;
                        }
                        if (!input.containsKey(id)) {
                            unexpected++;
                        }
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading the committed output in " + committedDir, e);
        }
        long lost = 0;
        List<String> sample = new java.util.ArrayList<>();
        for (int i = 0; i < w.records(); i++) {
            if (w.isFirst(i) && !seen.containsKey(w.id(i))) {
                lost++;
                if (sample.size() < 5) {
                    sample.add(i + ":" + w.id(i));
                }
            }
        }
        return new OutputCheck(lines, lost, duplicated, unexpected, sample);
    }

    /** Lines in the committed files so far (progress), without parsing them. */
    public static long countLines(Path committedDir) {
        if (!Files.isDirectory(committedDir)) {
            return 0;
        }
        long n = 0;
        try (Stream<Path> files = Files.list(committedDir)) {
            for (Path f : (Iterable<Path>) files::iterator) {
                try (Stream<String> l = Files.lines(f, StandardCharsets.UTF_8)) {
                    n += l.count();
                }
            }
        } catch (IOException | UncheckedIOException e) {
            return -1; // a file moved in meanwhile: the next report counts it
        }
        return n;
    }
}
