package dev.solus.pipelines.flink;

import dev.solus.client.SolusClient;
import dev.solus.flink.SolusDedupFunction;
import dev.solus.pipelines.common.FalsePositives;
import dev.solus.pipelines.common.Workload;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.runtime.executiongraph.AccessExecutionGraph;
import org.apache.flink.runtime.executiongraph.AccessExecutionVertex;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import solus.v1.DeduperOuterClass.Deduper;

/**
 * The Flink half of issue 18's end-to-end run: a checkpointed job (exactly-once, every
 * {@code --checkpoint-ms}) on Flink's own MiniCluster reads {@code --records} records
 * (NumberSequenceSource indexes mapped to ids by {@link Workload}), deduplicates them through
 * {@link SolusDedupFunction} (record id = the source index) and writes the new ones to
 * {@link CommittedFileSink}. During the run the job fails twice: {@link FailOnce} throws at one
 * record, and {@link RequestSolusRestart} has run.sh kill -9 and restart Solus. Then the committed
 * output is counted; prints the figures and {@code N passed, N failed}; exits 1 on a failure.
 */
public final class FlinkPipeline {
    private FlinkPipeline() {
    }

    public static void main(String[] argv) throws Exception {
        Args a = Args.parse(argv);
        Path work = Path.of(a.work).toAbsolutePath();
        Path out = work.resolve("out");
        Files.createDirectories(out);

        long t0 = System.nanoTime();
        Workload w = a.workload.workload();
        System.out.printf(Locale.ROOT, "workload: %,d records, %,d distinct ids, %,d repeats (built in %.1f s)%n",
                w.records(), w.distinct(), w.records() - w.distinct(), (System.nanoTime() - t0) / 1e9);

        SolusClient.Builder settings = SolusClient.builder().address(a.addr).clientId(a.client)
                .maxBatch(a.batch).maxInFlight(4).linger(Duration.ofMillis(5))
                .deadline(Duration.ofSeconds(2)).maxAttempts(8).backoff(Duration.ofMillis(50), Duration.ofSeconds(1));
        Deduper d;
        try (SolusClient admin = settings.build()) {
            d = admin.getDeduper(a.deduper);
        }
        double m = (double) d.getShards() * d.getBitsPerShard();
        double expectedFp = FalsePositives.expected(w.distinct(), d.getHashFunctions(), m);
        System.out.printf(Locale.ROOT, "deduper %s: k = %d, m = %,.0f bits (n = %,d, p = %s): expected false positives %.2f%n",
                a.deduper, d.getHashFunctions(), m, d.getExpectedInsertions(), d.getFalsePositiveRate(), expectedFp);

        Configuration conf = new Configuration();
        conf.set(TaskManagerOptions.NUM_TASK_SLOTS, a.parallelism);
        conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.parse("32m"));
        conf.set(TaskManagerOptions.NETWORK_MEMORY_MIN, MemorySize.parse("32m"));
        conf.set(TaskManagerOptions.NETWORK_MEMORY_MAX, MemorySize.parse("32m"));
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        conf.set(JobManagerOptions.EXECUTION_FAILOVER_STRATEGY, "full");
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
        // Every restart while Solus is down fails again (9 in one run): room for many.
        conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 60);
        conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofSeconds(1));
        conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(a.checkpointMs));
        conf.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, work.resolve("checkpoints").toUri().toString());

        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(a.parallelism, conf);
        DataStream<Event> events = env
                .fromSource(new NumberSequenceSource(0, a.workload.records - 1), WatermarkStrategy.noWatermarks(), "indexes")
                .map(new ToEvent(a.workload.names, a.workload.records, a.workload.repeats, a.workload.seed)).name("index to id")
                .map(new FailOnce(a.failAt, work.resolve("injected-failure"))).name("fail once")
                .map(new RequestSolusRestart(a.restartFrom, work.resolve("injected-failure"),
                        work.resolve("solus-restart.request"))).name("ask for a Solus restart");
        SolusDedupFunction<Event> dedup = new SolusDedupFunction<>(settings, a.deduper,
                e -> e.id.getBytes(StandardCharsets.UTF_8),
                recordId(a.recordIds));
        // Flink's timeout (30 s) above the client's retry budget, 8 x (2 s + 1 s) = 24 s.
        AsyncDataStream.orderedWait(events, dedup, 30, TimeUnit.SECONDS, a.capacity).name("solus dedup")
                .sinkTo(new CommittedFileSink(out)).name("committed files");

        MiniClusterConfiguration mc = new MiniClusterConfiguration.Builder().setConfiguration(conf)
                .setNumTaskManagers(1).setNumSlotsPerTaskManager(a.parallelism).build();
        try (MiniCluster cluster = new MiniCluster(mc)) {
            cluster.start();
            long start = System.nanoTime();
            JobID job = cluster.submitJob(env.getStreamGraph()).get().getJobID();
            JobResult result = await(cluster, job, CommittedFileSink.committed(out), start, a.maxSeconds);
            double seconds = (System.nanoTime() - start) / 1e9;
            int restarts = restarts(cluster, job);
            report(a, w, work, out, result, seconds, restarts, expectedFp);
        }
    }

    /** The source index as record id (stable across replays), or none. */
    private static SolusDedupFunction.SerializableFunction<Event, byte[]> recordId(boolean on) {
        if (on) {
            return e -> ByteBuffer.allocate(Long.BYTES).putLong(e.index).array();
        }
        return e -> null;
    }

    private static JobResult await(MiniCluster cluster, JobID job, Path committed, long start, int maxSeconds)
            throws Exception {
        long lastReport = 0;
        while (true) {
            JobStatus st = cluster.getJobStatus(job).get();
            if (st.isGloballyTerminalState()) {
                return cluster.requestJobResult(job).get();
            }
            long elapsed = (System.nanoTime() - start) / 1_000_000_000L;
            if (elapsed >= maxSeconds) {
                cluster.cancelJob(job).get();
                throw new IllegalStateException("the job did not finish within --max-seconds " + maxSeconds + " s");
            }
            if (elapsed - lastReport >= 10) {
                lastReport = elapsed;
                System.out.printf(Locale.ROOT, "progress: %3d s, %s, %,d records committed, %d restarts%n",
                        elapsed, st, OutputCheck.countLines(committed), restarts(cluster, job));
            }
            Thread.sleep(500);
        }
    }

    /** Restarts so far: with full failover every restart gives every task a new attempt number. */
    private static int restarts(MiniCluster cluster, JobID job) throws Exception {
        AccessExecutionGraph g = cluster.getExecutionGraph(job).get();
        int max = 0;
        for (AccessExecutionVertex v : g.getAllExecutionVertices()) {
            max = Math.max(max, v.getCurrentExecutionAttempt().getAttemptNumber());
        }
        return max;
    }

    private static void report(Args a, Workload w, Path work, Path out, JobResult result, double seconds,
            int restarts, double expectedFp) {
        OutputCheck c = OutputCheck.of(CommittedFileSink.committed(out), w);
        long bound = FalsePositives.bound(expectedFp);
        boolean restarted = Files.exists(work.resolve("solus-restart.done"));
        System.out.println("record ids: " + (a.recordIds ? "on (the source index)" : "off"));
        System.out.printf(Locale.ROOT, "job: %s in %.1f s, %,.0f records/s (input records / wall time, restarts included)%n",
                result.getApplicationStatus(), seconds, w.records() / seconds);
        System.out.printf(Locale.ROOT, "restarts: %d (injected exception: %s, Solus kill -9 and restart: %s)%n", restarts,
                Files.exists(work.resolve("injected-failure")) ? "thrown" : "NOT thrown", restarted ? "done" : "NOT done");
        System.out.printf(Locale.ROOT, "output: %,d committed records for %,d distinct input ids%n", c.lines(), w.distinct());
        System.out.printf(Locale.ROOT, "lost: %,d (expected false positives %.2f, pass bound %d)%s%n", c.lost(), expectedFp,
                bound, c.lost() > 0 ? ", e.g. " + String.join(" ", c.lostSample()) : "");
        System.out.printf(Locale.ROOT, "duplicated: %,d, unexpected: %,d%n", c.duplicated(), c.unexpected());

        List<String> failed = new ArrayList<>();
        int passed = 0;
        passed += check(failed, result.isSuccess(), "the job finished: " + result.getApplicationStatus());
        passed += check(failed, Files.exists(work.resolve("injected-failure")), "the injected exception was thrown");
        passed += check(failed, restarted, "Solus was killed (-9) and restarted during the run");
        passed += check(failed, restarts >= 2, "the job failed and restarted at least twice (" + restarts + " restarts)");
        passed += check(failed, c.duplicated() == 0, "no id emitted twice (" + c.duplicated() + ")");
        passed += check(failed, c.unexpected() == 0, "no id that is not in the input (" + c.unexpected() + ")");
        passed += check(failed, c.lost() <= bound, "lost " + c.lost() + " <= " + bound
                + " (expected false positives + 4 sqrt + 1)");
        for (String f : failed) {
            System.out.println("FAILED: " + f);
        }
        System.out.println(passed + " passed, " + failed.size() + " failed");
        if (!failed.isEmpty()) {
            System.exit(1);
        }
    }

    private static int check(List<String> failed, boolean ok, String what) {
        if (!ok) {
            failed.add(what);
            return 0;
        }
        return 1;
    }
}
