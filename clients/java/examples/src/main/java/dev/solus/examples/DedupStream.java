package dev.solus.examples;

import dev.solus.client.SolusClient;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.BitSet;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;

/**
 * Deduplicates a stream of records with repeats through the batching client and checks the
 * answers: every repeat must be dropped (0 false negatives); first occurrences dropped are false
 * positives, expected within the deduper's rate p.
 *
 * <pre>
 * mvn -q -B install -DskipTests
 * mvn -q -B -pl examples exec:java -Dexec.mainClass=dev.solus.examples.DedupStream \
 *     -Dexec.args="--addr 127.0.0.1:50051 --records 1000000 --duplicates 0.3 --batch 1000"
 * </pre>
 */
public final class DedupStream {
    public static void main(String[] args) {
        String addr = "127.0.0.1:50051";
        long records = 1_000_000;
        double dupShare = 0.3;
        int batch = 1000;
        int inFlight = 8;
        double p = 0.01;
        for (int i = 0; i < args.length; i += 2) {
            String v = i + 1 < args.length ? args[i + 1] : "";
            switch (args[i]) {
                case "--addr" -> addr = v;
                case "--records" -> records = Long.parseLong(v);
                case "--duplicates" -> dupShare = Double.parseDouble(v);
                case "--batch" -> batch = Integer.parseInt(v);
                case "--in-flight" -> inFlight = Integer.parseInt(v);
                case "--fpr" -> p = Double.parseDouble(v);
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (known: --addr --records --duplicates --batch --in-flight --fpr)");
            }
        }
        long distinctExpected = Math.round(records * (1 - dupShare));
        String deduper = "stream-" + System.currentTimeMillis();
        try (SolusClient client = SolusClient.builder().address(addr).clientId("examples")
                .maxBatch(batch).maxInFlight(inFlight).build()) {
            client.createDeduper(deduper, distinctExpected, p, Duration.ofHours(1));
            SplittableRandom rnd = new SplittableRandom(7);
            BitSet seen = new BitSet();
            long nextId = 0;
            long repeats = 0;
            long falseNegatives = 0;
            long falsePositives = 0;
            long kept = 0;
            // Answers are read in order, a window behind the submissions.
            ArrayDeque<Object[]> window = new ArrayDeque<>();
            long start = System.nanoTime();
            for (long i = 0; i < records; i++) {
                long id = nextId > 0 && rnd.nextDouble() < dupShare ? rnd.nextLong(nextId) : nextId++;
                boolean repeat = seen.get((int) id);
                seen.set((int) id);
                if (repeat) {
                    repeats++;
                }
                window.add(new Object[] {client.addIfAbsent(deduper, "record-" + id), repeat});
                while (window.size() > 2 * batch * inFlight || (!window.isEmpty() && done(window.peek()))) {
                    Object[] w = window.poll();
                    boolean isNew = ((CompletableFuture<?>) w[0]).join() == Boolean.TRUE;
                    boolean wasRepeat = (Boolean) w[1];
                    kept += isNew ? 1 : 0;
                    falseNegatives += isNew && wasRepeat ? 1 : 0;
                    falsePositives += !isNew && !wasRepeat ? 1 : 0;
                }
            }
            client.flush();
            for (Object[] w : window) {
                boolean isNew = ((CompletableFuture<?>) w[0]).join() == Boolean.TRUE;
                boolean wasRepeat = (Boolean) w[1];
                kept += isNew ? 1 : 0;
                falseNegatives += isNew && wasRepeat ? 1 : 0;
                falsePositives += !isNew && !wasRepeat ? 1 : 0;
            }
            double secs = (System.nanoTime() - start) / 1e9;
            long firsts = records - repeats;
            System.out.printf("records %d (first occurrences %d, repeats %d) in %.1f s: %.0f records/s%n",
                    records, firsts, repeats, secs, records / secs);
            System.out.printf("kept %d; false negatives (repeats kept) %d; false positives (first occurrences dropped) %d = %.4f%% (deduper p = %.2f%%)%n",
                    kept, falseNegatives, falsePositives, 100.0 * falsePositives / firsts, 100 * p);
            System.out.printf("batch %d, %d requests in flight, deduper %s (n = %d)%n", batch, inFlight, deduper, distinctExpected);
            if (falseNegatives != 0) {
                System.exit(1);
            }
        }
    }

    private static boolean done(Object[] w) {
        return ((CompletableFuture<?>) w[0]).isDone();
    }
}
