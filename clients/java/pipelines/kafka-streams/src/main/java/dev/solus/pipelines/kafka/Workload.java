package dev.solus.pipelines.kafka;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The pipeline's input, a pure function of (names file, records, repeat fraction, seed): record
 * {@code i} is a repeat of a uniformly drawn earlier record with probability {@code repeats},
 * otherwise a new id, a package name drawn in proportion to its monthly downloads (a name drawn
 * again gets a {@code #k} suffix, so every new id is distinct). The same rule and hash as the
 * Flink pipeline's workload (clients/java/pipelines/flink), so both pipelines see the same ids
 * for the same seed.
 */
public final class Workload {
    private static final Map<String, Workload> CACHE = new HashMap<>();

    private final String[] ids;
    private final boolean[] first;
    private final int distinct;

    private Workload(List<String> names, long[] cumulative, int records, double repeats, long seed) {
        ids = new String[records];
        first = new boolean[records];
        Map<String, Integer> drawn = new HashMap<>();
        int newIds = 0;
        long total = cumulative[cumulative.length - 1];
        for (int i = 0; i < records; i++) {
            long h = mix(seed, i);
            if (i > 0 && unit(h) < repeats) {
                ids[i] = ids[(int) Long.remainderUnsigned(mix(seed + 1, i), i)];
                continue;
            }
            long w = Long.remainderUnsigned(mix(seed + 2, i), total);
            int at = Arrays.binarySearch(cumulative, w + 1);
            String name = names.get(at >= 0 ? at : -at - 1);
            int k = drawn.merge(name, 1, Integer::sum);
            ids[i] = k == 1 ? name : name + "#" + k;
            first[i] = true;
            newIds++;
        }
        distinct = newIds;
    }

    /** The workload of these parameters, built once per JVM. */
    public static synchronized Workload of(String namesFile, int records, double repeats, long seed) {
        String key = namesFile + "|" + records + "|" + repeats + "|" + seed;
        Workload w = CACHE.get(key);
        if (w == null) {
            List<String> names = new ArrayList<>();
            List<Long> weights = new ArrayList<>();
            read(Path.of(namesFile), names, weights);
            long[] cumulative = new long[names.size()];
            long sum = 0;
            for (int i = 0; i < cumulative.length; i++) {
                sum += Math.max(1, weights.get(i)); // a name with 0 downloads can still be drawn
                cumulative[i] = sum;
            }
            w = new Workload(names, cumulative, records, repeats, seed);
            CACHE.put(key, w);
        }
        return w;
    }

    /** The id of record {@code index}. */
    public String id(long index) {
        return ids[(int) index];
    }

    /** Whether record {@code index} is its id's first occurrence. */
    public boolean isFirst(long index) {
        return first[(int) index];
    }

    /** How many records there are. */
    public int records() {
        return ids.length;
    }

    /** How many distinct ids (first occurrences) there are. */
    public int distinct() {
        return distinct;
    }

    private static void read(Path file, List<String> names, List<Long> weights) {
        try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line = r.readLine(); // header: name<TAB>downloads_a_month
            int lineNo = 1;
            while ((line = r.readLine()) != null) {
                lineNo++;
                int tab = line.indexOf('\t');
                if (tab <= 0) {
                    throw new IllegalArgumentException(file + " line " + lineNo + ": expected name<TAB>downloads");
                }
                names.add(line.substring(0, tab));
                weights.add(Long.parseLong(line.substring(tab + 1).trim()));
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading the names file " + file, e);
        }
        if (names.isEmpty()) {
            throw new IllegalArgumentException(file + " has no names");
        }
    }

    /** SplitMix64 of (seed, i): a fixed, well-spread hash, the same on every run. */
    private static long mix(long seed, long i) {
        long z = seed * 0x9E3779B97F4A7C15L + i * 0xBF58476D1CE4E5B9L + 0x94D049BB133111EBL;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    private static double unit(long h) {
        return (h >>> 11) * 0x1.0p-53;
    }
}
