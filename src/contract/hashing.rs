//! Entity -> shard and entity -> `k` bit positions.
//!
//! - Shard: Murmur3 x64-128 (Austin Appleby's MurmurHash3, seed 0); `h1` is
//!   the first 8 bytes of the canonical 16-byte output, little-endian; shard
//!   = `h1 mod shards` with `h1` read as a *signed* `i64` and a floored
//!   (never negative) modulo, i.e. Java's `Math.floorMod(h1, shards)` or
//!   Python's `h1 % shards`. The reference vectors require the signed
//!   reading: an unsigned `u64` modulo gives other shards whenever `h1 < 0`
//!   and `shards` is not a power of two (e.g. entity `a`, 3 shards: 2, not 0).
//! - Bits: for salt = 0, 1, 2, ... the MD5 (RFC 1321) digest of
//!   `[salt] ++ entity` is split into four big-endian `i32`s, taken in order
//!   until `k` are collected; bit = `|v % bits_per_shard|` with a truncated
//!   (Java/Rust) remainder.
//!
//! Both run without allocating, so the request path can hash into reusable
//! buffers.

use md5::{Digest, Md5};

/// Bit positions one MD5 digest gives: its four big-endian `i32` words.
/// Bits `0..4` come from salt 0, `4..8` from salt 1, and so on.
const BITS_PER_DIGEST: usize = 4;

/// Murmur3 x64-128 with seed 0, as the 16-byte canonical output
/// (`h1` little-endian, then `h2` little-endian).
pub fn murmur3_x64_128(entity: &[u8]) -> [u8; 16] {
    murmur3_x64_128_seeded(entity, 0).to_le_bytes()
}

/// Murmur3 x64-128 of `data` with a 32-bit `seed` (the reference's seed
/// type), as a `u128` whose low 64 bits are `h1`. The one Murmur3 of the
/// service: `fastmurmur3` hashes the slice in place, where `murmur3` 0.5
/// reads it through `io::Read` at several times the cost on short entities
/// (5% of the embedded store's check CPU in a profile, issue 20). The tests
/// hold it to the `murmur3` crate at every length.
pub fn murmur3_x64_128_seeded(data: &[u8], seed: u32) -> u128 {
    fastmurmur3::murmur3_x64_128(data, u64::from(seed))
}

/// The shard (`0..shards`) that holds `entity`'s bits.
///
/// `shards` must be at least 1 (deduper validation guarantees it).
pub fn shard_of(entity: &[u8], shards: u32) -> u32 {
    debug_assert!(shards > 0);
    let h1 = murmur3_x64_128_seeded(entity, 0) as u64 as i64;
    h1.rem_euclid(i64::from(shards)) as u32
}

/// Writes the `out.len()` (= `k`) bit positions of `entity` inside its shard,
/// each in `0..bits_per_shard`, in contract order (duplicates are kept).
///
/// `bits_per_shard` must be in `1..=i32::MAX` and `out.len() <= 64`
/// (deduper validation guarantees both).
pub fn bit_positions(entity: &[u8], bits_per_shard: u32, out: &mut [u32]) {
    debug_assert!(bits_per_shard >= 1 && bits_per_shard <= i32::MAX as u32);
    debug_assert!(out.len() <= 64);
    for (salt, chunk) in out.chunks_mut(BITS_PER_DIGEST).enumerate() {
        positions_from_digest(&md5_salted(salt as u8, entity), bits_per_shard, chunk);
    }
}

/// [`bit_positions`] of every entity, appended to `out`: entity `i`'s `k`
/// positions at `out[start + i*k..start + (i+1)*k]`, where `start` is
/// `out`'s length before the call. The same values, with every digest of the
/// batch computed together in SIMD lanes (`md5-many`), which hashes many
/// short messages about four times as fast as one at a time.
///
/// `bits_per_shard` must be in `1..=i32::MAX` and `k` in `1..=64` (deduper
/// validation guarantees both).
pub fn bit_positions_many(entities: &[impl AsRef<[u8]>], bits_per_shard: u32, k: usize, out: &mut Vec<u32>) {
    static ENGINE: std::sync::OnceLock<md5_many::Md5Many> = std::sync::OnceLock::new();
    let start = out.len();
    if k == 0 {
        return;
    }
    let salts = k.div_ceil(BITS_PER_DIGEST);
    // Message `i * salts + salt` is `[salt] ++ entities[i]`, all in one buffer.
    // Sized up front: growing it by doubling copied the batch's bytes again.
    let bytes: usize = entities.iter().map(|e| e.as_ref().len() + 1).sum();
    let mut salted = Vec::with_capacity(bytes * salts);
    let mut ends = Vec::with_capacity(entities.len() * salts);
    for e in entities {
        for salt in 0..salts {
            salted.push(salt as u8);
            salted.extend_from_slice(e.as_ref());
            ends.push(salted.len());
        }
    }
    let mut from = 0;
    let messages: Vec<&[u8]> = ends
        .iter()
        .map(|&end| {
            let m = &salted[from..end];
            from = end;
            m
        })
        .collect();
    let mut digests = vec![[0u8; 16]; messages.len()];
    ENGINE
        .get_or_init(md5_many::Md5Many::new)
        .hash_many(&messages, &mut digests);
    out.resize(start + entities.len() * k, 0);
    for (positions, digests) in out[start..].chunks_exact_mut(k).zip(digests.chunks_exact(salts)) {
        for (chunk, digest) in positions.chunks_mut(BITS_PER_DIGEST).zip(digests) {
            positions_from_digest(digest, bits_per_shard, chunk);
        }
    }
}

/// MD5 (RFC 1321) of `[salt] ++ entity`.
fn md5_salted(salt: u8, entity: &[u8]) -> [u8; 16] {
    let mut md5 = Md5::new();
    md5.update([salt]);
    md5.update(entity);
    md5.finalize().into()
}

/// Up to four positions from one digest: its big-endian `i32` words in
/// order, each `|v % bits_per_shard|` with a truncated remainder.
fn positions_from_digest(digest: &[u8; 16], bits_per_shard: u32, out: &mut [u32]) {
    let modulus = bits_per_shard as i32;
    for (slot, w) in out.iter_mut().zip(digest.chunks_exact(4)) {
        let v = i32::from_be_bytes([w[0], w[1], w[2], w[3]]);
        *slot = (v % modulus).unsigned_abs();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::test_vectors::{cases, hex};

    #[test]
    fn one_block_md5_matches_an_independent_md5_at_every_length() {
        // Lengths around the one-block limit (54/55 bytes of entity) and
        // beyond, against the `md5` crate (not the `md-5` the code uses).
        for len in 0..=130usize {
            let entity: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
            for salt in [0u8, 1, 2, 15] {
                let mut input = vec![salt];
                input.extend_from_slice(&entity);
                let want = md5_independent::compute(&input).0;
                let got: Vec<u8> = md5_salted(salt, &entity).iter().flat_map(|w| w.to_le_bytes()).collect();
                assert_eq!(got, want, "salt {salt}, {len} bytes");
            }
        }
    }

    #[test]
    fn batch_positions_match_one_at_a_time() {
        // Varied lengths (0 to 200 bytes, across MD5's block boundaries),
        // chunk boundaries (600 entities) and every salt count.
        let entities: Vec<Vec<u8>> = (0..600usize)
            .map(|i| (0..(i * 7) % 201).map(|j| (i * 131 + j * 17) as u8).collect())
            .collect();
        for k in [1usize, 3, 4, 5, 7, 8, 14, 64] {
            for bps in [1u32, 1_000, 958_506, i32::MAX as u32] {
                let mut many = vec![42];
                bit_positions_many(&entities, bps, k, &mut many);
                assert_eq!(many.len(), 1 + entities.len() * k);
                assert_eq!(many[0], 42, "appends after what is there");
                for (i, e) in entities.iter().enumerate() {
                    let mut one = vec![0u32; k];
                    bit_positions(e, bps, &mut one);
                    assert_eq!(
                        &many[1 + i * k..1 + (i + 1) * k],
                        &one[..],
                        "entity {i}, k {k}, bps {bps}"
                    );
                }
            }
        }
    }

    #[test]
    fn shard_hash_agrees_with_murmur3_at_every_length() {
        for len in 0..=200usize {
            for seed in 0..4usize {
                let entity: Vec<u8> = (0..len).map(|i| (i * 131 + seed * 7 + len) as u8).collect();
                // The `murmur3` crate, an implementation the service does not use.
                let slow = murmur3::murmur3_x64_128(&mut &entity[..], 0).unwrap();
                assert_eq!(
                    u128::from_le_bytes(murmur3_x64_128(&entity)),
                    slow,
                    "{len} bytes, seed {seed}"
                );
                // Seeds the records use (0 and 0x5245434f) and the top of the range.
                for s in [0u32, 0x5245_434f, u32::MAX] {
                    let want = murmur3::murmur3_x64_128(&mut &entity[..], s).unwrap();
                    assert_eq!(murmur3_x64_128_seeded(&entity, s), want, "{len} bytes, seed {s:#x}");
                }
                for shards in [1u32, 3, 10, 1_000_003] {
                    let h1 = slow as u64 as i64;
                    assert_eq!(shard_of(&entity, shards), h1.rem_euclid(i64::from(shards)) as u32);
                }
            }
        }
    }

    #[test]
    fn murmur3_matches_reference_vectors() {
        for case in cases() {
            let entity = hex(&case["entity_hex"]);
            let expected = case["murmur3_x64_128_seed0_hex"].as_str().unwrap();
            let got: String = murmur3_x64_128(&entity).iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, expected, "entity {}", case["entity_hex"]);
        }
    }

    #[test]
    fn shard_and_bits_match_reference_vectors() {
        for case in cases() {
            let entity = hex(&case["entity_hex"]);
            let shards = case["shards"].as_u64().unwrap() as u32;
            let k = case["hash_functions"].as_u64().unwrap() as usize;
            let bps = case["bits_per_shard"].as_u64().unwrap() as u32;
            assert_eq!(
                u64::from(shard_of(&entity, shards)),
                case["shard"].as_u64().unwrap(),
                "shard of {}",
                case["entity_hex"]
            );
            let mut bits = vec![0u32; k];
            bit_positions(&entity, bps, &mut bits);
            let expected: Vec<u32> = case["bits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(bits, expected, "bits of {}", case["entity_hex"]);
            let mut many = Vec::new();
            bit_positions_many(&[&entity, &entity], bps, k, &mut many);
            assert_eq!(many[..k], expected[..], "batch bits of {}", case["entity_hex"]);
            assert_eq!(many[k..], expected[..], "batch bits of {}", case["entity_hex"]);
        }
    }

    #[test]
    fn bits_stay_inside_the_shard_for_extreme_values() {
        // i32::MIN % m must not overflow and abs must stay below m.
        let mut bits = [0u32; 64];
        for entity in [&b""[..], b"x", b"\xff\xff\xff\xff"] {
            for m in [1u32, 2, 3, 1 << 20, i32::MAX as u32] {
                bit_positions(entity, m, &mut bits);
                assert!(bits.iter().all(|&b| b < m), "m={m}: {bits:?}");
            }
        }
    }
}
