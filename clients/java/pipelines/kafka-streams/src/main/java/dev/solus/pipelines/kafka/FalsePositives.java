package dev.solus.pipelines.kafka;

/**
 * Expected false positives of a run: the sum, over the checks of new ids, of the Bloom filter's
 * false-positive rate at that moment, (1 - e^(-k j / m))^k with j ids already in the filter
 * (k hash functions, m = shards x bits_per_shard bits). Each false positive drops a new id, so
 * the lost ids should be about this many; the pass bound allows 4 standard deviations.
 */
final class FalsePositives {
    private FalsePositives() {
    }

    /** Expected false positives over {@code newIds} first occurrences. */
    static double expected(long newIds, int k, double m) {
        double sum = 0;
        for (long j = 0; j < newIds; j++) {
            sum += Math.pow(1 - Math.exp(-k * (double) j / m), k);
        }
        return sum;
    }

    /** The largest lost count that passes: expected + 4 sqrt(expected) + 1. */
    static long bound(double expected) {
        return (long) Math.floor(expected + 4 * Math.sqrt(expected) + 1);
    }
}
