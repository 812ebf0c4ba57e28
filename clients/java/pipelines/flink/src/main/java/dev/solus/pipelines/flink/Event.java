package dev.solus.pipelines.flink;

/** One input record: its source index (the record id) and its id (the entity). A Flink POJO. */
public class Event {
    public long index;
    public String id;

    public Event() {
    }

    public Event(long index, String id) {
        this.index = index;
        this.id = id;
    }

    @Override
    public String toString() {
        return index + "\t" + id;
    }
}
