//! HBase read planning: each shard row read for its own columns, in slices
//! of at most `storage.hbase.max_cells_per_read` columns (unlimited, 65,536
//! and the default 4,096). Times one CheckAbsence of 10 to 10,000 entities
//! on a half-full 10-shard deduper (n = 10^6, p = 1%), against the
//! in-process HBase emulator, without gRPC; "calls" counts read calls. Only
//! the trend is meaningful: real HBase figures are in docs/hbase.md.
//!
//! Run: `cargo bench --bench hbase_read_budget`

use std::sync::Arc;
use std::time::Instant;

use solus::config::{Backend, Settings};
use solus::engine::{CreateSpec, Engine};

fn names(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("{prefix}-{i}").into_bytes()).collect()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes every bench binary
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{:>22} {:>7} {:>6} {:>12}",
        "max_cells_per_read", "batch", "calls", "ms/request"
    );
    for budget in [u64::MAX, 65_536, 4_096] {
        let emulator = hbase_emulator::Emulator::start("127.0.0.1:0").expect("starting the HBase emulator");
        let mut settings = Settings::default();
        settings.storage.backend = Backend::Hbase;
        settings.storage.hbase.addresses = vec![emulator.addr().to_string()];
        settings.storage.hbase.max_cells_per_read = budget;
        let store = solus::server::open_store(&settings).expect("opening the HBase store");
        let engine = Arc::new(Engine::new(store, settings.limits.engine_limits()));
        rt.block_on(async {
            engine
                .create_deduper(CreateSpec {
                    client_id: "c".into(),
                    name: "d".into(),
                    expected_insertions: 1_000_000,
                    false_positive_rate: 0.01,
                    expiry_seconds: 3600,
                    ..Default::default()
                })
                .await
                .unwrap();
            for chunk in names("fill", 500_000).chunks(10_000) {
                engine.add("c", "d", chunk.to_vec(), 0).await.unwrap();
            }
            for batch in [10usize, 100, 1000, 10_000] {
                let items = names(&format!("q{batch}"), batch);
                engine.check_absence("c", "d", items.clone()).await.unwrap();
                emulator.reset_counts();
                let start = Instant::now();
                for _ in 0..5 {
                    engine.check_absence("c", "d", items.clone()).await.unwrap();
                }
                let ms = start.elapsed().as_secs_f64() * 1000.0 / 5.0;
                let calls = (emulator.calls("getRowsWithColumns") + emulator.calls("getRowWithColumns")) / 5;
                let label = if budget == u64::MAX {
                    "unlimited".to_string()
                } else {
                    budget.to_string()
                };
                println!("{label:>22} {batch:>7} {calls:>6} {ms:>12.1}");
            }
        });
    }
}
