package dev.solus.pipelines.flink;

/** FlinkPipeline's command line: {@code --name value} pairs, each with a default. */
final class Args {
    String addr = "127.0.0.1:50051";
    String client = "pipeline";
    String deduper = "flink";
    String names = "../shared/data/npm-downloads.tsv";
    String work = "target/pipeline-work";
    int records = 1_000_000;
    double repeats = 0.3;
    long seed = 18;
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
        for (int i = 0; i < argv.length; i += 2) {
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException(argv[i] + " needs a value");
            }
            String v = argv[i + 1];
            switch (argv[i]) {
                case "--addr" -> a.addr = v;
                case "--client" -> a.client = v;
                case "--deduper" -> a.deduper = v;
                case "--names" -> a.names = v;
                case "--work" -> a.work = v;
                case "--records" -> a.records = Integer.parseInt(v);
                case "--repeats" -> a.repeats = Double.parseDouble(v);
                case "--seed" -> a.seed = Long.parseLong(v);
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
                default -> throw new IllegalArgumentException("unknown option " + argv[i]
                        + " (known: --addr --client --deduper --names --work --records --repeats --seed --parallelism"
                        + " --checkpoint-ms --batch --capacity --fail-at --restart-from --max-seconds --record-ids)");
            }
        }
        if (a.failAt < 0) {
            a.failAt = a.records / 4;
        }
        if (a.restartFrom < 0) {
            a.restartFrom = a.records * 4L / 5;
        }
        return a;
    }
}
