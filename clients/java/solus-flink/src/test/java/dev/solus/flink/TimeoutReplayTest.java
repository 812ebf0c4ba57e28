package dev.solus.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.solus.client.DropResponses;
import dev.solus.client.SolusClient;
import dev.solus.client.SolusServer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.junit.jupiter.api.Test;

/**
 * The fault as it was found, on a real MiniCluster against a real Solus: Flink's async timeout
 * (500 ms) shorter than the client's retry budget. The first AddIfAbsent is executed by the
 * server (the entities are added) but its answer is lost; the client's retry is due only after
 * Flink gave up. Flink fails the task and restarts the job, which replays the elements. Before
 * the fix the old client's retry still ran after Flink gave up, and the replay (a new batch, a
 * new request_id) read the elements' own earlier write as "present": nothing came out. Now
 * timeout() closes the client (no attempt after Flink gave up) and the record id gives the
 * replay its first answer: every element comes out.
 */
class TimeoutReplayTest {
    private static final AtomicInteger GENERATION = new AtomicInteger();
    private static final long FLINK_TIMEOUT_MS = 500;

    @Test
    void anElementTimedOutByFlinkComesOutOfTheReplay() throws Exception {
        try (SolusServer server = SolusServer.start()) {
            // Budget far above Flink's 500 ms: the retry is due 2-4 s after the lost answer, late
            // enough that a Flink timer running late on a loaded machine still fires first.
            SolusClient.Builder settings = SolusClient.builder().address(server.address()).clientId("flink-timeout")
                    .deadline(Duration.ofSeconds(5)).maxAttempts(5)
                    .backoff(Duration.ofSeconds(4), Duration.ofSeconds(8))
                    .linger(Duration.ofMillis(300)); // the three orders in one request: one first attempt
            try (SolusClient admin = settings.build()) {
                admin.createDeduper("orders", 10_000, 0.001, Duration.ofHours(1));
            }
            SolusDedupFunction<String> fn = new SolusDedupFunction<String>(settings, "orders",
                    s -> s.getBytes(StandardCharsets.UTF_8), s -> ("record:" + s).getBytes(StandardCharsets.UTF_8))
                    .withInterceptor(() -> new CallLog(GENERATION.get()))
                    // The first client (task attempt 0) loses its first answer; later ones lose none.
                    .withInterceptor(() -> new DropResponses("solus.v1.DeduperService/AddIfAbsent",
                            GENERATION.getAndIncrement() == 0 ? 1 : 0));

            Configuration conf = new Configuration();
            conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
            conf.set(RestOptions.BIND_PORT, "0");
            conf.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 3);
            conf.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(200));
            StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1, conf);
            List<String> orders = List.of("order-1", "order-2", "order-3");
            DataStream<String> in = env.fromData(orders);
            AsyncDataStream.orderedWait(in, fn, FLINK_TIMEOUT_MS, TimeUnit.MILLISECONDS, 100).sinkTo(new AttemptSink());

            JobResult result;
            try (MiniCluster cluster = new MiniCluster(new MiniClusterConfiguration.Builder().setConfiguration(conf)
                    .setNumTaskManagers(1).setNumSlotsPerTaskManager(1).build())) {
                cluster.start();
                result = cluster.requestJobResult(cluster.submitJob(env.getStreamGraph()).get().getJobID())
                        .get(120, TimeUnit.SECONDS);
            }
            assertTrue(result.isSuccess(), "the job finished after its restart: " + result.getSerializedThrowable());
            int last = AttemptSink.BY_ATTEMPT.keySet().stream().max(Integer::compare).orElseThrow();
            assertTrue(last >= 1, "Flink's timeout failed the first attempt and the job restarted");
            // The first task's client made its one attempt and nothing after Flink gave up (the
            // old code's retry came 2-4 s later, after Flink's timeout and while the job restarted).
            List<CallLog.Call> first = CallLog.CALLS.stream().filter(c -> c.generation() == 0).toList();
            long t0 = first.get(0).startNanos();
            List<Long> startsMs = first.stream().map(c -> TimeUnit.NANOSECONDS.toMillis(c.startNanos() - t0)).toList();
            assertEquals(1, first.size(), "attempts of the first task's client, ms after its first: " + startsMs
                    + "; Flink gave up at " + FLINK_TIMEOUT_MS + " ms");
            assertEquals(orders, AttemptSink.BY_ATTEMPT.get(last),
                    "the replay answers as the first attempt did: every new order comes out");
        }
    }
}
