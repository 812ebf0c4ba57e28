//! The embedded store's read and write paths without gRPC: the engine's
//! batch logic (hash, group, one store call) over a real on-disk store.
//! Batches of 1,000 entities, k = 7 (n = 10^6, p = 1%).
//!
//! Run: `cargo bench --bench embedded_store` (throughput is shown per entity).

use std::sync::Arc;

use divan::{Bencher, counter::ItemsCount};
use solus::engine::{CreateSpec, Engine, Limits};
use solus::storage::embedded::{EmbeddedConfig, EmbeddedStore};

fn main() {
    divan::main();
}

const BATCH: usize = 1000;

struct Fixture {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig {
        path: dir.path().join("data"),
        ..Default::default()
    };
    let store = Arc::new(EmbeddedStore::open(config).unwrap());
    let engine = Engine::new(store, Limits::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(engine.create_deduper(CreateSpec {
        client_id: "bench".into(),
        name: "d".into(),
        expected_insertions: 1_000_000,
        false_positive_rate: 0.01,
        expiry_seconds: 3600,
        ..Default::default()
    }))
    .unwrap();
    Fixture { rt, engine, _dir: dir }
}

fn batch(round: usize) -> Vec<Vec<u8>> {
    (0..BATCH).map(|i| format!("entity-{round}-{i}").into_bytes()).collect()
}

#[divan::bench(sample_count = 30, sample_size = 3)]
fn add(b: Bencher) {
    let f = fixture();
    let mut round = 0;
    b.counter(ItemsCount::new(BATCH))
        .with_inputs(|| {
            round += 1;
            batch(round)
        })
        .bench_local_values(|entities| f.rt.block_on(f.engine.add("bench", "d", entities, 0)).unwrap());
}

#[divan::bench(sample_count = 30, sample_size = 3)]
fn check_absence(b: Bencher) {
    let f = fixture();
    for round in 0..100 {
        f.rt.block_on(f.engine.add("bench", "d", batch(round), 0)).unwrap();
    }
    let mut round = 0;
    b.counter(ItemsCount::new(BATCH))
        .with_inputs(|| {
            round = (round + 1) % 200; // half present, half absent
            batch(round)
        })
        .bench_local_values(|entities| f.rt.block_on(f.engine.check_absence("bench", "d", entities)).unwrap());
}

#[divan::bench(sample_count = 30, sample_size = 3)]
fn add_if_absent(b: Bencher) {
    let f = fixture();
    let mut round = 0;
    b.counter(ItemsCount::new(BATCH))
        .with_inputs(|| {
            round += 1;
            batch(round / 2) // every batch twice: first absent, then present
        })
        .bench_local_values(|entities| {
            f.rt.block_on(f.engine.add_if_absent("bench", "d", entities, 0))
                .unwrap()
        });
}
