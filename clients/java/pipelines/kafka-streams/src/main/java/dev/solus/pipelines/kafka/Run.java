package dev.solus.pipelines.kafka;

import dev.solus.client.SolusClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import solus.v1.DeduperOuterClass.Deduper;

/**
 * Issue 18's Kafka Streams pipeline against a running broker and Solus server: creates the
 * deduper and topics, produces the workload, runs the application ({@link DedupApp}, child
 * JVMs) and disturbs it: kill -9 at 20% and at 45% of the input committed, each followed by a
 * restart on the same state directory, and a second instance started at 65% (a rebalance, then
 * both run to the end). Then stops both (SIGTERM), reads the output read_committed and checks it:
 * every distinct input id exactly once, up to the false-positive bound. Prints the figures and
 * {@code N passed, N failed}; exit code 1 when a check fails.
 */
public final class Run {
    private static final String DEDUPER = "kafka-streams";
    private static final String APP_ID = "solus-pipeline";
    private static final String INPUT = "solus-input";
    private static final String OUTPUT = "solus-output";
    /** The pending-record store's changelog topic (Kafka Streams' name for it). */
    private static final String CHANGELOG = APP_ID + "-solus-pending-" + DEDUPER + "-changelog";

    private Run() {
    }

    public static void main(String[] argv) throws Exception {
        Args a = Args.parse(argv);
        Path work = Path.of(a.work);
        Files.createDirectories(work);
        long t0 = System.nanoTime();
        Workload w = Workload.of(a.names, a.records, a.repeats, a.seed);
        System.out.printf(Locale.ROOT, "workload: %,d records, %,d distinct ids, %,d repeats, seed %d%n",
                w.records(), w.distinct(), w.records() - w.distinct(), a.seed);

        Deduper d;
        try (SolusClient solus = SolusClient.builder().address(a.solus).clientId("pipeline").build()) {
            d = solus.createDeduper(DEDUPER, a.n, a.p, Duration.ofHours(1));
        }
        double m = (double) d.getShards() * d.getBitsPerShard();
        double expectedFp = FalsePositives.expected(w.distinct(), d.getHashFunctions(), m);
        System.out.printf(Locale.ROOT, "deduper pipeline/%s: n = %,d, p = %s, k = %d, m = %,.0f bits;"
                + " expected false positives over %,d new ids: %.1f%n",
                DEDUPER, a.n, a.p, d.getHashFunctions(), m, w.distinct(), expectedFp);

        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, a.bootstrap);
        List<String> failures = new ArrayList<>();
        int checks = 0;
        try (Admin admin = Admin.create(ap)) {
            Input.createTopics(admin, INPUT, OUTPUT, a.partitions);
            long tp = System.nanoTime();
            Input.produce(a.bootstrap, INPUT, w);
            double produceS = (System.nanoTime() - tp) / 1e9;
            long total = Input.endOffsets(admin, INPUT);
            System.out.printf(Locale.ROOT, "produced %,d records to %s (%d partitions) in %.1f s%n",
                    total, INPUT, a.partitions, produceS);

            Disturbance run;
            try (Instances apps = new Instances(work,
                    List.of(a.bootstrap, a.solus, DEDUPER, APP_ID, INPUT, OUTPUT), a.heap)) {
                run = Disturbance.run(apps, admin, APP_ID, INPUT, total, Duration.ofSeconds(a.timeoutSeconds),
                        List.of(OUTPUT, CHANGELOG));
            } // SIGTERM to both instances: no transaction stays open for the read below
            double rate = total / run.seconds();
            System.out.printf(Locale.ROOT, "processed %,d records in %.1f s (%,.0f records/s, through %d kills,"
                    + " %d restarts and %s)%n", total, run.seconds(), rate, run.kills(), run.restarts(),
                    run.rebalanced() ? "a rebalance to 2 instances" : "NO rebalance seen");

            // The pending-record store's changelog: what the store cost in Kafka writes (its offsets
            // also count one transaction marker per commit and partition).
            long changelog = Input.endOffsets(admin, CHANGELOG);
            System.out.printf(Locale.ROOT, "pending-record changelog: %,d offsets (records and transaction markers)"
                    + " for %,d input records%n", changelog, total);

            long left = PendingLeft.count(a.bootstrap, admin, CHANGELOG, Duration.ofMinutes(2));
            System.out.printf(Locale.ROOT, "records left waiting in the pending-record stores: %,d%n", left);

            long tr = System.nanoTime();
            Map<String, Integer> out = OutputCount.read(a.bootstrap, admin, OUTPUT, Duration.ofMinutes(2));
            Set<String> distinct = new HashSet<>();
            for (int i = 0; i < w.records(); i++) {
                if (w.isFirst(i)) {
                    distinct.add(w.id(i));
                }
            }
            long lost = distinct.stream().filter(id -> !out.containsKey(id)).count();
            long duplicated = out.values().stream().mapToLong(c -> c - 1).sum();
            long foreign = out.keySet().stream().filter(id -> !distinct.contains(id)).count();
            long outRecords = out.values().stream().mapToLong(Integer::longValue).sum();
            long bound = FalsePositives.bound(expectedFp);
            System.out.printf(Locale.ROOT, "output (read_committed, %.1f s): %,d records, %,d distinct ids%n",
                    (System.nanoTime() - tr) / 1e9, outRecords, out.size());
            System.out.printf(Locale.ROOT, "lost: %,d (expected false positives %.1f, bound %d); duplicated: %,d;"
                    + " not in the input's distinct set: %,d%n", lost, expectedFp, bound, duplicated, foreign);

            if (lost > bound) {
                Set<String> lostIds = new HashSet<>();
                distinct.stream().filter(id -> !out.containsKey(id)).forEach(lostIds::add);
                LostReport.print(a.bootstrap, admin, INPUT, lostIds);
            }

            checks = 7;
            check(failures, run.consumedAll(), "all input committed by the application");
            check(failures, left == 0, "no record left waiting in the pending-record stores (" + left + ")");
            check(failures, run.kills() == 2 && run.restarts() == 2, "two kill -9 and two restarts");
            check(failures, run.rebalanced(), "a second instance joined (rebalance)");
            check(failures, lost <= bound, "lost " + lost + " <= false-positive bound " + bound);
            check(failures, duplicated == 0, "duplicated " + duplicated + " == 0");
            check(failures, foreign == 0, "no output id outside the input");
        }
        System.out.printf(Locale.ROOT, "total time %.1f s%n", (System.nanoTime() - t0) / 1e9);
        System.out.println((checks - failures.size()) + " passed, " + failures.size() + " failed");
        if (!failures.isEmpty()) {
            System.exit(1);
        }
    }

    private static void check(List<String> failures, boolean ok, String what) {
        System.out.println((ok ? "ok: " : "FAILED: ") + what);
        if (!ok) {
            failures.add(what);
        }
    }
}
