package dev.solus.pipelines.kafka;

import dev.solus.pipelines.common.WorkloadOptions;

/** {@link Run}'s options: {@code --name value} pairs, defaults as in issue 18 item 5. */
final class Args {
    String bootstrap = "127.0.0.1:9092";
    String solus = "127.0.0.1:50051";
    final WorkloadOptions workload = new WorkloadOptions();
    String work = "/tmp/solus-kafka-pipeline";
    int partitions = 4;
    long n = 1_000_000;
    double p = 0.001;
    String heap = "384m";
    int timeoutSeconds = 360;

    static Args parse(String[] argv) {
        Args a = new Args();
        a.workload.parse(argv, (name, v) -> {
            switch (name) {
                case "--bootstrap" -> a.bootstrap = v;
                case "--solus" -> a.solus = v;
                case "--work" -> a.work = v;
                case "--partitions" -> a.partitions = Integer.parseInt(v);
                case "--n" -> a.n = Long.parseLong(v);
                case "--p" -> a.p = Double.parseDouble(v);
                case "--heap" -> a.heap = v;
                case "--timeout-seconds" -> a.timeoutSeconds = Integer.parseInt(v);
                default -> throw new IllegalArgumentException("unknown option " + name + " (known: --bootstrap --solus"
                        + " --names --work --records --repeats --seed --partitions --n --p --heap --timeout-seconds)");
            }
        });
        if (a.workload.records < 1 || a.workload.repeats < 0 || a.workload.repeats >= 1 || a.partitions < 1) {
            throw new IllegalArgumentException("need --records >= 1, 0 <= --repeats < 1, --partitions >= 1");
        }
        return a;
    }
}
