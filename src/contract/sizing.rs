//! Bloom filter sizing from expected insertions `n` and false-positive rate
//! `p` (Bloom 1970; the optimal-`k` formulas as in Broder & Mitzenmacher,
//! "Network Applications of Bloom Filters", 2004):
//!
//! - `m = ceil(-n ln p / (ln 2)^2)` bits
//! - `k = max(1, round(m / n * ln 2))`
//! - `shards = max(1, ceil(m / max_bits_per_shard))`
//! - `bits_per_shard = ceil(m / shards)`

use super::{MAX_BITS_PER_SHARD, MAX_HASH_FUNCTIONS};

/// A deduper's filter geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Geometry {
    /// `k`, bit positions per entity.
    pub hash_functions: u32,
    pub shards: u32,
    pub bits_per_shard: u32,
}

impl Geometry {
    /// Total bits `m = shards * bits_per_shard`.
    pub fn total_bits(&self) -> u64 {
        u64::from(self.shards) * u64::from(self.bits_per_shard)
    }
}

/// Why a sizing request was refused; the message says what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizingError {
    #[error("expected_insertions must be at least 1")]
    ZeroInsertions,
    #[error("false_positive_rate must be strictly between 0 and 1, got {0}")]
    RateOutOfRange(f64),
    #[error("max_bits_per_shard must be between 1 and {MAX_BITS_PER_SHARD}, got {0}")]
    BadMaxBitsPerShard(u64),
    #[error(
        "this sizing needs {needed} shards of at most {max_bits_per_shard} bits, above the limit of {max_shards} shards; lower expected_insertions or raise false_positive_rate"
    )]
    TooManyShards {
        needed: u64,
        max_bits_per_shard: u64,
        max_shards: u32,
    },
    #[error(
        "this sizing needs k = {0} hash functions, above the limit of {MAX_HASH_FUNCTIONS}; raise false_positive_rate"
    )]
    TooManyHashFunctions(u64),
}

/// Sizes a filter for `n` expected insertions at false-positive rate `p`.
///
/// Errors: `n == 0`, `p` outside (0, 1), `max_bits_per_shard` outside
/// `1..=2^31-1`, or a result needing more than `max_shards` shards or more
/// than 64 hash functions.
pub fn size_for(n: u64, p: f64, max_bits_per_shard: u64, max_shards: u32) -> Result<Geometry, SizingError> {
    if n == 0 {
        return Err(SizingError::ZeroInsertions);
    }
    if !(p > 0.0 && p < 1.0) {
        return Err(SizingError::RateOutOfRange(p));
    }
    if max_bits_per_shard == 0 || max_bits_per_shard > u64::from(MAX_BITS_PER_SHARD) {
        return Err(SizingError::BadMaxBitsPerShard(max_bits_per_shard));
    }
    let ln2 = std::f64::consts::LN_2;
    let m = (-(n as f64) * p.ln() / (ln2 * ln2)).ceil();
    // m / n * ln 2 = -ln p / ln 2, bounded for any p in (0, 1) that is not subnormal.
    let k = ((m / n as f64) * ln2).round().max(1.0);
    if k > f64::from(MAX_HASH_FUNCTIONS) {
        return Err(SizingError::TooManyHashFunctions(k as u64));
    }
    let shards = (m / max_bits_per_shard as f64).ceil().max(1.0);
    if shards > f64::from(max_shards) {
        return Err(SizingError::TooManyShards {
            needed: shards.min(u64::MAX as f64) as u64,
            max_bits_per_shard,
            max_shards,
        });
    }
    let m = m as u64;
    let shards = shards as u64;
    Ok(Geometry {
        hash_functions: k as u32,
        shards: shards as u32,
        bits_per_shard: m.div_ceil(shards) as u32,
    })
}

/// Expected false-positive rate of a filter of `m` bits, `k` hash functions
/// after `n` insertions: `(1 - e^(-k n / m))^k` (Bloom 1970).
pub fn expected_fp_rate(geometry: &Geometry, n: u64) -> f64 {
    let k = f64::from(geometry.hash_functions);
    let m = geometry.total_bits() as f64;
    (1.0 - (-k * n as f64 / m).exp()).powf(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::test_vectors::sizing_cases;

    #[test]
    fn sizing_matches_reference_vectors() {
        for case in sizing_cases() {
            let n = case["expected_insertions"].as_u64().unwrap();
            let p = case["false_positive_rate"].as_f64().unwrap();
            let max = case["max_bits_per_shard"].as_u64().unwrap();
            let g = size_for(n, p, max, 65_536).unwrap();
            assert_eq!(
                u64::from(g.hash_functions),
                case["hash_functions"].as_u64().unwrap(),
                "k for n={n} p={p}"
            );
            assert_eq!(
                u64::from(g.shards),
                case["shards"].as_u64().unwrap(),
                "shards for n={n} p={p}"
            );
            assert_eq!(
                u64::from(g.bits_per_shard),
                case["bits_per_shard"].as_u64().unwrap(),
                "bps for n={n} p={p}"
            );
            // total_bits in the vectors is m before rounding up to whole shards.
            let m = case["total_bits"].as_u64().unwrap();
            assert!(g.total_bits() >= m && g.total_bits() < m + u64::from(g.shards));
        }
    }

    #[test]
    fn refuses_out_of_range_inputs() {
        assert_eq!(size_for(0, 0.01, 1 << 20, 65_536), Err(SizingError::ZeroInsertions));
        for p in [0.0, 1.0, -0.5, 2.0, f64::NAN] {
            assert!(
                matches!(size_for(10, p, 1 << 20, 65_536), Err(SizingError::RateOutOfRange(_))),
                "p={p}"
            );
        }
        assert!(matches!(
            size_for(u64::MAX, 0.01, 1 << 20, 65_536),
            Err(SizingError::TooManyShards { .. })
        ));
        assert!(matches!(
            size_for(10, 1e-30, 1 << 20, 65_536),
            Err(SizingError::TooManyHashFunctions(_))
        ));
        assert!(matches!(
            size_for(10, 0.1, 0, 65_536),
            Err(SizingError::BadMaxBitsPerShard(0))
        ));
    }

    #[test]
    fn expected_rate_at_design_load_is_close_to_p() {
        let g = size_for(1_000_000, 0.01, 1 << 20, 65_536).unwrap();
        let fp = expected_fp_rate(&g, 1_000_000);
        assert!((0.009..0.0105).contains(&fp), "{fp}");
    }
}
