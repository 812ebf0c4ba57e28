//! What rounding expiries up to whole ticks costs in false positives.
//!
//! The embedded store keeps one-byte stamps in ticks of `expiry_seconds /
//! 127` (29 s for an hour), rounded up, so a bit may outlive its TTL by
//! under one tick. This test streams entities through the engine (a batch
//! every 5 simulated seconds, so arrivals are close to continuous) over two
//! simulated hours (the process clock is shifted, so it runs in its own
//! test binary), with the live set at the deduper's `n`, and mirrors every
//! bit with its exact expiry in ms (the contract's hashing, as HBase would
//! store it). At each check it queries never-added entities against both:
//!
//! - no false negative: every entity added within its TTL reads present;
//! - the embedded false positives include every exact one (rounding only
//!   lengthens lives), and exceed them by at most 10% of the exact count
//!   plus a 99.9% binomial allowance (expected: about 0.4% more live
//!   entries, so a few percent more false positives).
//!
//! The measured figures are printed for docs/benchmarks.md.

use std::collections::HashMap;
use std::sync::Arc;

use solus::contract::hashing::{bit_positions, shard_of};
use solus::deduper::Level;
use solus::engine::{CreateSpec, Engine, Limits};
use solus::storage::embedded::{EmbeddedConfig, EmbeddedStore};

const N: usize = 20_000;
const EXPIRY_S: u64 = 3600;
/// Simulated step between batches, ms.
const STEP_MS: i64 = 5_000;
const STEPS: usize = 1440;

fn entity(tag: u8, i: usize) -> Vec<u8> {
    let mut e = vec![tag];
    e.extend_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounding_up_to_ticks_costs_few_false_positives_and_no_false_negative() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedConfig {
        path: dir.path().to_path_buf(),
        ..EmbeddedConfig::default()
    })
    .unwrap();
    let engine = Engine::new(Arc::new(store), Limits::default());
    let d = engine
        .create_deduper(CreateSpec {
            client_id: "r".into(),
            name: "round".into(),
            expected_insertions: N as u64,
            false_positive_rate: 0.01,
            expiry_seconds: EXPIRY_S,
            level: Level::Global,
            ..CreateSpec::default()
        })
        .await
        .unwrap();
    let g = d.geometry;
    let k = g.hash_functions as usize;
    // Exact mirror: (shard, bit) -> expiry ms.
    let mut exact: HashMap<(u32, u32), i64> = HashMap::new();
    let exact_present = |exact: &HashMap<(u32, u32), i64>, e: &[u8], now: i64| {
        let shard = shard_of(e, g.shards);
        let mut bits = vec![0u32; k];
        bit_positions(e, g.bits_per_shard, &mut bits);
        bits.iter().all(|b| exact.get(&(shard, *b)).is_some_and(|x| *x >= now))
    };
    let per_step = N * STEP_MS as usize / (EXPIRY_S as usize * 1000);
    let (mut fp_exact, mut fp_rounded, mut queries) = (0u64, 0u64, 0u64);
    let mut added: Vec<(Vec<u8>, i64)> = Vec::new();
    for step in 0..STEPS {
        solus::clock::shift_ms(step as i64 * STEP_MS);
        let now = solus::clock::now_ms();
        let batch: Vec<Vec<u8>> = (0..per_step).map(|i| entity(0, step * per_step + i)).collect();
        engine.add("r", "round", batch.clone(), 0).await.unwrap();
        let expire = now + EXPIRY_S as i64 * 1000;
        for e in batch {
            let shard = shard_of(&e, g.shards);
            let mut bits = vec![0u32; k];
            bit_positions(&e, g.bits_per_shard, &mut bits);
            for b in bits {
                let x = exact.entry((shard, b)).or_insert(0);
                *x = (*x).max(expire);
            }
            added.push((e, expire));
        }
        // Once the live set is at n (after one expiry), measure every 10 steps.
        if step >= 720 && step % 120 == 0 {
            let live: Vec<Vec<u8>> = added
                .iter()
                .filter(|(_, x)| *x >= now)
                .map(|(e, _)| e.clone())
                .collect();
            for chunk in live.chunks(10_000) {
                let absent = engine.check_absence("r", "round", chunk.to_vec()).await.unwrap();
                assert!(absent.iter().all(|a| !a), "false negative at step {step}");
            }
            let probes: Vec<Vec<u8>> = (0..20_000).map(|i| entity(1, step * 20_000 + i)).collect();
            let mut absent = Vec::with_capacity(probes.len());
            for chunk in probes.chunks(10_000) {
                absent.extend(engine.check_absence("r", "round", chunk.to_vec()).await.unwrap());
            }
            for (p, a) in probes.iter().zip(absent) {
                let ex = exact_present(&exact, p, now);
                assert!(
                    !ex || !a,
                    "exact false positive reported absent (rounding shortened a life)"
                );
                fp_exact += u64::from(ex);
                fp_rounded += u64::from(!a);
                queries += 1;
            }
        }
    }
    solus::clock::shift_ms(0);
    let (re, rr) = (fp_exact as f64 / queries as f64, fp_rounded as f64 / queries as f64);
    println!(
        "rounding cost: {queries} probes, false-positive rate exact {re:.5} ({fp_exact}), rounded to {} s ticks {rr:.5} ({fp_rounded}): {:+.1}%",
        solus::storage::embedded::filter::tick_ms_for(EXPIRY_S) / 1000,
        (rr / re - 1.0) * 100.0
    );
    let extra = (fp_rounded - fp_exact) as f64;
    let allowance = 3.09 * (fp_exact as f64).sqrt();
    assert!(
        extra <= 0.10 * fp_exact as f64 + allowance,
        "rounding added {extra} false positives to {fp_exact}"
    );
    assert!(fp_exact > 100, "too few false positives to compare: {fp_exact}");
}
