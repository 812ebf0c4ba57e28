package dev.solus.pipelines.common;

import java.util.function.BiConsumer;

/**
 * The pipelines' command lines, {@code --name value} pairs, and the {@link Workload} options both
 * take, with the same defaults: {@code --names}, {@code --records}, {@code --repeats},
 * {@code --seed}.
 */
public final class WorkloadOptions {
    public String names = "../shared/data/npm-downloads.tsv";
    public int records = 1_000_000;
    public double repeats = 0.3;
    public long seed = 18;

    /**
     * Reads the {@code --name value} pairs of {@code argv} in order: the workload options here,
     * every other pair through {@code other} (which throws for a name it does not know). An
     * option without a value is an {@link IllegalArgumentException}.
     */
    public void parse(String[] argv, BiConsumer<String, String> other) {
        for (int i = 0; i < argv.length; i += 2) {
            if (i + 1 >= argv.length) {
                throw new IllegalArgumentException("option " + argv[i] + " needs a value");
            }
            String name = argv[i];
            String value = argv[i + 1];
            switch (name) {
                case "--names" -> names = value;
                case "--records" -> records = Integer.parseInt(value);
                case "--repeats" -> repeats = Double.parseDouble(value);
                case "--seed" -> seed = Long.parseLong(value);
                default -> other.accept(name, value);
            }
        }
    }

    /** The workload of these options ({@link Workload#of}: built once per JVM). */
    public Workload workload() {
        return Workload.of(names, records, repeats, seed);
    }
}
