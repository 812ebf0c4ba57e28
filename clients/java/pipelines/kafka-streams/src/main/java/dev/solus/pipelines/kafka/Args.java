package dev.solus.pipelines.kafka;

/** {@link Run}'s options: {@code --name value} pairs, defaults as in issue 18 item 5. */
final class Args {
    String bootstrap = "127.0.0.1:9092";
    String solus = "127.0.0.1:50051";
    String names = "../shared/data/npm-downloads.tsv";
    String work = "/tmp/solus-kafka-pipeline";
    int records = 1_000_000;
    double repeats = 0.3;
    long seed = 18;
    int partitions = 4;
    long n = 1_000_000;
    double p = 0.001;
    String heap = "384m";
    int timeoutSeconds = 360;

    static Args parse(String[] argv) {
        Args a = new Args();
        for (int i = 0; i < argv.length; i += 2) {
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException("option " + argv[i] + " needs a value");
            }
            String v = argv[i + 1];
            switch (argv[i]) {
                case "--bootstrap" -> a.bootstrap = v;
                case "--solus" -> a.solus = v;
                case "--names" -> a.names = v;
                case "--work" -> a.work = v;
                case "--records" -> a.records = Integer.parseInt(v);
                case "--repeats" -> a.repeats = Double.parseDouble(v);
                case "--seed" -> a.seed = Long.parseLong(v);
                case "--partitions" -> a.partitions = Integer.parseInt(v);
                case "--n" -> a.n = Long.parseLong(v);
                case "--p" -> a.p = Double.parseDouble(v);
                case "--heap" -> a.heap = v;
                case "--timeout-seconds" -> a.timeoutSeconds = Integer.parseInt(v);
                default -> throw new IllegalArgumentException("unknown option " + argv[i] + " (known: --bootstrap --solus"
                        + " --names --work --records --repeats --seed --partitions --n --p --heap --timeout-seconds)");
            }
        }
        if (a.records < 1 || a.repeats < 0 || a.repeats >= 1 || a.partitions < 1) {
            throw new IllegalArgumentException("need --records >= 1, 0 <= --repeats < 1, --partitions >= 1");
        }
        return a;
    }
}
