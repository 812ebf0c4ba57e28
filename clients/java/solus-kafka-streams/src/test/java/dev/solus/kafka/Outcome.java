package dev.solus.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** Compares what came out with the expected new ids, with a short message (counts, first few). */
final class Outcome {
    private Outcome() {
    }

    /** {@code got} must be exactly {@code expected}, in order: none missing, none twice, none extra. */
    static void assertExactly(List<String> expected, List<String> got) {
        Map<String, Integer> counts = new HashMap<>();
        got.forEach(v -> counts.merge(v, 1, Integer::sum));
        List<String> missing = new ArrayList<>();
        for (String e : expected) {
            if (!counts.containsKey(e)) {
                missing.add(e);
            }
        }
        long twice = counts.values().stream().filter(c -> c > 1).count();
        Set<String> wanted = new HashSet<>(expected);
        long extra = counts.keySet().stream().filter(v -> !wanted.contains(v)).count();
        String summary = "missing " + missing.size() + " of " + expected.size() + " new ids"
                + (missing.isEmpty() ? "" : " (first: " + missing.subList(0, Math.min(5, missing.size())) + ")")
                + ", " + twice + " out more than once, " + extra + " not new";
        assertEquals("missing 0 of " + expected.size() + " new ids, 0 out more than once, 0 not new", summary);
        assertEquals(expected, got, "order");
    }
}
