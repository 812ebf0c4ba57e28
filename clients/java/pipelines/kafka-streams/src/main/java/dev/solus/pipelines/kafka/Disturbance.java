package dev.solus.pipelines.kafka;

import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;

/**
 * Runs the application through the pipeline's faults, driven by the input offsets the consumer
 * group has committed: instance a-1 starts; at 20% it is killed with -9 and a-2 starts on the
 * same state directory; at 45% a-2 is killed and a-3 starts; at 65% instance b starts on its own
 * state directory (a rebalance moves tasks to it, and those that stay are restored on a-3's
 * side as needed). It returns when every input record is committed and the output is quiet, or
 * after the timeout.
 *
 * @param seconds from the first start to the last input record committed
 * @param rebalanced whether instance b was seen in the group beside a-3
 */
record Disturbance(double seconds, int kills, int restarts, boolean rebalanced, boolean consumedAll) {

    /**
     * Runs the faults, then, once every input offset is committed, waits until the records still
     * in the windows are acted on: {@code quietTopics} (the output and the pending-record
     * changelog) unchanged for 5 s.
     */
    static Disturbance run(Instances apps, Admin admin, String group, String input, long total, Duration timeout,
            List<String> quietTopics) throws Exception {
        long start = System.nanoTime();
        long deadline = start + timeout.toNanos();
        apps.start("a-1", "a");
        System.out.println("started instance a-1");
        int kills = 0;
        int restarts = 0;
        boolean rebalanced = false;
        boolean second = false;
        long lastReport = 0;
        long committed = 0;
        while (committed < total) {
            if (System.nanoTime() > deadline) {
                System.out.printf(Locale.ROOT, "FAILED: only %,d of %,d input records committed after %s%n",
                        committed, total, timeout);
                break;
            }
            String exited = apps.exited();
            if (exited != null) {
                throw new IllegalStateException("instance " + exited + " exited by itself");
            }
            Thread.sleep(250);
            committed = Progress.committed(admin, group, input);
            double done = committed / (double) total;
            if (kills == 0 && done >= 0.20 || kills == 1 && done >= 0.45) {
                String victim = "a-" + (kills + 1);
                apps.kill(victim);
                kills++;
                System.out.printf(Locale.ROOT, "kill -9 of instance %s at %,d committed (%.0f%%): %s%n",
                        victim, committed, 100 * done, Progress.committedByPartition(admin, group, input));
                apps.start("a-" + (kills + 1), "a");
                restarts++;
                System.out.println("restarted as instance a-" + (kills + 1) + " on the same state directory");
            }
            if (!second && done >= 0.65) {
                apps.start("b", "b");
                second = true;
                System.out.printf(Locale.ROOT, "started a second instance b at %,d committed (%.0f%%): rebalance; %s%n",
                        committed, 100 * done, Progress.committedByPartition(admin, group, input));
            }
            if (second && !rebalanced) {
                Set<String> members = Progress.members(admin, group);
                rebalanced = members.stream().anyMatch(c -> c.startsWith("b-"))
                        && members.stream().anyMatch(c -> c.startsWith("a-3-"));
                if (rebalanced) {
                    System.out.println("group members: " + members);
                }
            }
            if (System.nanoTime() - lastReport > 5e9) {
                lastReport = System.nanoTime();
                System.out.printf(Locale.ROOT, "progress: %,d / %,d input records committed (%.0f%%), %.0f s%n",
                        committed, total, 100 * done, (lastReport - start) / 1e9);
            }
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        if (committed >= total) {
            awaitQuiet(admin, quietTopics, deadline);
        }
        return new Disturbance(seconds, kills, restarts, rebalanced, committed >= total);
    }

    /** Waits until the end offsets of {@code topics} stay the same for 5 s (or the deadline passes). */
    private static void awaitQuiet(Admin admin, List<String> topics, long deadline) throws Exception {
        long t0 = System.nanoTime();
        long last = -1;
        int quiet = 0;
        while (quiet < 5 && System.nanoTime() < deadline) {
            long now = 0;
            for (String t : topics) {
                now += Input.endOffsets(admin, t);
            }
            quiet = now == last ? quiet + 1 : 0;
            last = now;
            Thread.sleep(1_000);
        }
        System.out.printf(Locale.ROOT, "windows drained: output and changelog quiet for 5 s, %.1f s after the last"
                + " input offset was committed%n", (System.nanoTime() - t0) / 1e9);
    }
}
