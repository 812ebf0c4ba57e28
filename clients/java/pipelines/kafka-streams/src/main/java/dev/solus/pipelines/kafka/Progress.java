package dev.solus.pipelines.kafka;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/** How far the application's consumer group has committed through the input topic. */
final class Progress {
    private Progress() {
    }

    /** End offset of every partition of {@code topic}. */
    static Map<TopicPartition, Long> endOffsets(Admin admin, String topic) throws InterruptedException, ExecutionException {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        Map<TopicPartition, OffsetSpec> ask = new HashMap<>();
        d.partitions().forEach(p -> ask.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest()));
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e
                : admin.listOffsets(ask).all().get().entrySet()) {
            out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    /** Input offsets committed by {@code group} (0 where none yet), summed over {@code topic}'s partitions. */
    static long committed(Admin admin, String group, String topic) throws InterruptedException, ExecutionException {
        Map<TopicPartition, OffsetAndMetadata> offsets =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        long sum = 0;
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            if (e.getKey().topic().equals(topic) && e.getValue() != null) {
                sum += e.getValue().offset();
            }
        }
        return sum;
    }

    /** Committed input offset per partition, for the log ("p0=123 p1=..."). */
    static String committedByPartition(Admin admin, String group, String topic)
            throws InterruptedException, ExecutionException {
        Map<Integer, Long> by = new java.util.TreeMap<>();
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().forEach((tp, om) -> {
            if (tp.topic().equals(topic) && om != null) {
                by.put(tp.partition(), om.offset());
            }
        });
        StringBuilder b = new StringBuilder();
        by.forEach((part, off) -> b.append(b.length() == 0 ? "" : " ").append("p").append(part).append('=').append(off));
        return b.toString();
    }

    /** Client ids of {@code group}'s members now (a killed member stays until its session times out). */
    static Set<String> members(Admin admin, String group) throws InterruptedException, ExecutionException {
        // Kafka Streams 4.1 joins with the classic group protocol by default: a consumer group.
        Set<String> ids = new TreeSet<>();
        admin.describeConsumerGroups(List.of(group)).all().get().get(group).members()
                .forEach(mbr -> ids.add(mbr.clientId()));
        return ids;
    }

    static long sum(Map<?, Long> m) {
        return m.values().stream().mapToLong(Long::longValue).sum();
    }
}
