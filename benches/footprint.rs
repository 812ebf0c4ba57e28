//! Stored bytes per remembered entity for the embedded store, and bulk
//! throughput on one client thread without gRPC: fills a deduper sized for
//! n = 1,000,000 at p = 1% with n distinct real-looking keys through the
//! engine, checkpoints, and reports disk and memory per entity.
//!
//! Run: `cargo bench --bench footprint` (set FOOTPRINT_N to change n).

use std::sync::Arc;
use std::time::Instant;

use solus::engine::{CreateSpec, Engine, Limits};
use solus::storage::embedded::filter::PAGE_BITS;
use solus::storage::embedded::{EmbeddedConfig, EmbeddedStore};

fn dir_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => dir_size(&e.path()),
                    // Allocated blocks, not apparent length: fjall preallocates its
                    // write-ahead file, and page files are sparse.
                    _ => e
                        .metadata()
                        .map_or(0, |m| std::os::unix::fs::MetadataExt::blocks(&m) * 512),
                })
                .sum()
        })
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes every bench binary
    }
    let n: u64 = std::env::var("FOOTPRINT_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let p = 0.01;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let store = Arc::new(
        EmbeddedStore::open(EmbeddedConfig {
            path: path.clone(),
            ..Default::default()
        })
        .unwrap(),
    );
    let engine = Engine::new(store.clone(), Limits::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let d = rt
        .block_on(engine.create_deduper(CreateSpec {
            client_id: "bench".into(),
            name: "footprint".into(),
            expected_insertions: n,
            false_positive_rate: p,
            expiry_seconds: 86_400,
            ..Default::default()
        }))
        .unwrap();
    let batches: Vec<Vec<Vec<u8>>> = (0..n)
        .collect::<Vec<_>>()
        .chunks(1000)
        .map(|c| {
            c.iter()
                .map(|i| format!("pkg-{i:x}/event-{}", i * 7919).into_bytes())
                .collect()
        })
        .collect();

    let start = Instant::now();
    for b in batches.clone() {
        rt.block_on(engine.add("bench", "footprint", b, 0)).unwrap();
    }
    let add_secs = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for b in batches {
        let absent = rt.block_on(engine.check_absence("bench", "footprint", b)).unwrap();
        assert!(absent.iter().all(|a| !a), "false negative");
    }
    let check_secs = start.elapsed().as_secs_f64();

    store.compact().unwrap();
    let disk = dir_size(&path);
    let pages = store.pages_disk_space();
    let bits = d.geometry.total_bits();
    let memory = bits.div_ceil(u64::from(PAGE_BITS)) * u64::from(PAGE_BITS);
    println!(
        "deduper: n = {n}, p = {p}, k = {}, m = {bits} bits in {} shards",
        d.geometry.hash_functions, d.geometry.shards
    );
    println!(
        "add:            {:>10.0} entities/s (batches of 1000, one client thread, no gRPC)",
        n as f64 / add_secs
    );
    println!("check_absence:  {:>10.0} entities/s", n as f64 / check_secs);
    println!(
        "disk (allocated) after compaction: {disk} bytes = {:.1} bytes per entity",
        disk as f64 / n as f64
    );
    println!(
        "  of which page files: {pages} bytes = {:.1} bytes per entity (the rest: fjall metadata)",
        pages as f64 / n as f64
    );
    println!(
        "memory (stamp pages):  {memory} bytes = {:.1} bytes per entity",
        memory as f64 / n as f64
    );
}
