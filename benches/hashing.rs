//! Hashing hot path: one entity -> shard + k bit positions, against the cost
//! of the digests alone (Murmur3 x64-128 once, MD5 ceil(k/4) times).
//!
//! Run: `cargo bench --bench hashing` (`-- positions_of_a_batch` for the batch path alone)

use divan::{Bencher, black_box};
use md5::{Digest, Md5};
use solus::contract::hashing;

fn main() {
    divan::main();
}

const KS: [usize; 3] = [3, 7, 14];
const SIZES: [usize; 2] = [16, 256];

fn entity(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i * 31 + 7) as u8).collect()
}

/// The contract's full work for one entity: shard and k positions.
#[divan::bench(consts = KS, args = SIZES)]
fn shard_and_bits<const K: usize>(b: Bencher, size: usize) {
    let e = entity(size);
    let mut bits = [0u32; K];
    b.bench_local(|| {
        let shard = hashing::shard_of(black_box(&e), black_box(1372));
        hashing::bit_positions(black_box(&e), black_box(1_047_930), &mut bits);
        black_box((shard, bits))
    });
}

/// The digests alone: the floor the hashing path is measured against.
#[divan::bench(consts = KS, args = SIZES)]
fn digests_only<const K: usize>(b: Bencher, size: usize) {
    let e = entity(size);
    b.bench_local(|| {
        let h = hashing::murmur3_x64_128(black_box(&e[..]));
        let mut acc = u64::from(h[0]);
        for salt in 0..K.div_ceil(4) {
            let mut md5 = Md5::new();
            md5.update([salt as u8]);
            md5.update(black_box(&e));
            acc ^= u64::from(md5.finalize()[0]);
        }
        black_box(acc)
    });
}

/// A request's worth: the k positions of 1,000 entities shaped like
/// `solus bench`'s keys (`key:<12 digits>`), hashed together
/// (`bit_positions_many`, the engine's batch path).
#[divan::bench(consts = KS)]
fn positions_of_a_batch<const K: usize>(b: Bencher) {
    let entities: Vec<Vec<u8>> = (0..1000u64)
        .map(|i| format!("key:{:012}", i * 7_919).into_bytes())
        .collect();
    let mut out = Vec::with_capacity(entities.len() * K);
    b.counter(divan::counter::ItemsCount::new(entities.len()))
        .bench_local(|| {
            out.clear();
            hashing::bit_positions_many(black_box(&entities), black_box(1_047_930), K, &mut out);
            black_box(out.len())
        });
}
