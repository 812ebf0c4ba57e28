package dev.solus.pipelines.flink;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;

/** Maps a source index to its record, from the {@link Workload} (built in open, once per JVM). */
public class ToEvent extends RichMapFunction<Long, Event> {
    private static final long serialVersionUID = 1L;

    private final String namesFile;
    private final int records;
    private final double repeats;
    private final long seed;
    private transient Workload workload;

    public ToEvent(String namesFile, int records, double repeats, long seed) {
        this.namesFile = namesFile;
        this.records = records;
        this.repeats = repeats;
        this.seed = seed;
    }

    @Override
    public void open(OpenContext ctx) {
        workload = Workload.of(namesFile, records, repeats, seed);
    }

    @Override
    public Event map(Long index) {
        return new Event(index, workload.id(index));
    }
}
