package dev.solus.pipelines.flink;

import dev.solus.pipelines.common.WorkloadOptions;

/** FlinkPipeline's command line: {@code --name value} pairs, each with a default. */
final class Args {
    String addr = "127.0.0.1:50051";
    String client = "pipeline";
    String deduper = "flink";
    final WorkloadOptions workload = new WorkloadOptions();
    String work = "target/pipeline-work";
    int parallelism = 2;
    long checkpointMs = 1000;
    int batch = 500;
    int capacity = 2000;
    long failAt = -1;
    long restartFrom = -1;
    int maxSeconds = 420;
    /** Off: no record ids sent, to show what they prevent (replays dropped). */
    boolean recordIds = true;

    static Args parse(String[] argv) {
        Args a = new Args();
        a.workload.parse(argv, (name, v) -> {
            switch (name) {
                case "--addr" -> a.addr = v;
                case "--client" -> a.client = v;
                case "--deduper" -> a.deduper = v;
                case "--work" -> a.work = v;
                case "--parallelism" -> a.parallelism = Integer.parseInt(v);
                case "--checkpoint-ms" -> a.checkpointMs = Long.parseLong(v);
                case "--batch" -> a.batch = Integer.parseInt(v);
                case "--capacity" -> a.capacity = Integer.parseInt(v);
                case "--fail-at" -> a.failAt = Long.parseLong(v);
                case "--restart-from" -> a.restartFrom = Long.parseLong(v);
                case "--max-seconds" -> a.maxSeconds = Integer.parseInt(v);
                case "--record-ids" -> a.recordIds = switch (v) {
                    case "on" -> true;
                    case "off" -> false;
                    default -> throw new IllegalArgumentException("--record-ids is on or off, got " + v);
                };
                default -> throw new IllegalArgumentException("unknown option " + name
                        + " (known: --addr --client --deduper --names --work --records --repeats --seed --parallelism"
                        + " --checkpoint-ms --batch --capacity --fail-at --restart-from --max-seconds --record-ids)");
            }
        });
        if (a.failAt < 0) {
            a.failAt = a.workload.records / 4;
        }
        if (a.restartFrom < 0) {
            a.restartFrom = a.workload.records * 4L / 5;
        }
        return a;
    }
}
