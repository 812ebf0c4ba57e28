//! Issue 51: the promises checked over histories. Concurrent clients
//! record every data call against a real server while a nemesis resizes,
//! changes the expiry and steps the clock; `solus-promises` checks the
//! history (no false negative, at most one new, replays, retries).
//!
//! The fast run (part of `cargo test`): seeds 1 and 2 for 8 s each on the
//! embedded store, seed 1 on the HBase emulator (two replicas). The long
//! run, one command (docs/operations.md, "How the promises are checked"):
//!
//! ```sh
//! bash bench/promises.sh embedded 30     # or real-hbase, emulator; minutes
//! ```
//!
//! `PROMISES_SEEDS` (comma-separated), `PROMISES_SECONDS` (per seed,
//! default 8) and `PROMISES_BACKEND` (`embedded`, `emulator`,
//! `real-hbase`; default the two fast ones) choose the run;
//! `PROMISES_MINUTES` runs seeds from the first one on, one after another,
//! until that many minutes have passed (each seed a fresh server and store,
//! so a history stays small enough to check), with a summary of them all;
//! `PROMISES_CLOCK_STEP_MS` sets the nemesis's largest clock step (default
//! 400 on the embedded store, 0 on HBase, which judges cell TTLs on its own
//! clock); `PROMISES_STORAGE_RESTARTS` (a chance per 100 ms step, e.g.
//! 0.005) adds `kill -9` and restarts of the real HBase's Thrift server.

mod common;
mod history;

use std::time::Duration;

use common::{TestBackend, TestServer};

/// The seeds asked for, or `default`.
fn seeds(default: &str) -> Vec<u64> {
    std::env::var("PROMISES_SEEDS")
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().parse().expect("PROMISES_SEEDS: comma-separated integers"))
        .collect()
}

/// Figures added up over a run's seeds.
#[derive(Default)]
struct Totals {
    seeds: u32,
    ops: usize,
    acknowledged: usize,
    unknown: usize,
    refused: usize,
    violations: usize,
    false_positives: usize,
    cold_reads: usize,
    resizes: u32,
    bursts: u32,
    expiry_changes: u32,
    storage_restarts: u32,
    clock_steps: u32,
    failed: Vec<String>,
}

impl Totals {
    fn add(&mut self, backend: &str, seed: u64, o: &history::Outcome) {
        let r = &o.report;
        self.seeds += 1;
        self.ops += r.ops;
        self.acknowledged += r.acknowledged;
        self.unknown += r.unknown;
        self.refused += r.refused;
        self.violations += r.violations.len();
        self.false_positives += r.false_positives;
        self.cold_reads += r.cold_reads;
        self.resizes += o.faults.resizes;
        self.bursts += o.faults.bursts;
        self.expiry_changes += o.faults.expiry_changes;
        self.storage_restarts += o.faults.storage_restarts;
        self.clock_steps += o.faults.clock_steps;
        if !r.violations.is_empty() {
            self.failed
                .push(format!("{backend} seed {seed}: {} violations", r.violations.len()));
        }
    }

    fn print(&self, what: &str, took: Duration) {
        eprintln!(
            "promises summary, {what}: {} seeds in {:.1} min; {} ops ({} acknowledged, {} unknown, {} refused); \
             faults: {} resizes, {} bursts, {} expiry changes, {} storage restarts, {} clock steps; {} violations; \
             false positives {} of \
             {} cold reads ({:.2e})",
            self.seeds,
            took.as_secs_f64() / 60.0,
            self.ops,
            self.acknowledged,
            self.unknown,
            self.refused,
            self.resizes,
            self.bursts,
            self.expiry_changes,
            self.storage_restarts,
            self.clock_steps,
            self.violations,
            self.false_positives,
            self.cold_reads,
            if self.cold_reads == 0 {
                0.0
            } else {
                self.false_positives as f64 / self.cold_reads as f64
            }
        );
    }
}

/// Seconds per seed: 8 in the fast run, 60 in a timed one.
fn seconds() -> u64 {
    let default = if std::env::var_os("PROMISES_MINUTES").is_some() {
        60
    } else {
        8
    };
    std::env::var("PROMISES_SECONDS").map_or(default, |s| s.parse().expect("PROMISES_SECONDS: an integer"))
}

fn backends() -> Vec<String> {
    match std::env::var("PROMISES_BACKEND") {
        Ok(b) => vec![b],
        Err(_) => vec!["embedded".into(), "emulator".into()],
    }
}

async fn run_on(backend: &str, seed: u64, totals: &mut Totals) {
    let b = match backend {
        "embedded" => TestBackend::embedded(),
        "emulator" => TestBackend::hbase(),
        "real-hbase" => match TestBackend::real_hbase() {
            Some(b) => b,
            None => {
                common::skipped("promises", "no real HBase (set SOLUS_REAL_HBASE_DIR)");
                return;
            }
        },
        other => panic!("PROMISES_BACKEND: {other:?} is not embedded, emulator or real-hbase"),
    };
    let mut settings = b.settings.clone();
    // One storage task per deduper: requests queue in its lane, the wait
    // the resize fault of issue 45 needed.
    settings.limits.max_storage_tasks_per_deduper = 1;
    let clock_bound = settings.storage.hbase.max_clock_offset_ms as i64 * 2;
    let clock_bound = if backend == "embedded" { 0 } else { clock_bound };
    solus::clock::shift_ms(0);
    // Two replicas on one HBase (the embedded store is one process's).
    let replicas = if backend == "embedded" { 1 } else { 2 };
    let mut servers = Vec::new();
    for _ in 0..replicas {
        servers.push(TestServer::start_with(settings.clone()).await);
    }
    let mut plan = history::Plan::fast(seed, Duration::from_secs(seconds()));
    if backend != "embedded" {
        // HBase judges cell TTLs on its own clock: a Solus clock stepped away
        // from it is a clock offset past `storage.hbase.max_clock_offset_ms`
        // (off in these settings), not a fault the promises cover. Requests
        // wait in the lane in real time instead, and batches are smaller
        // (the emulator is slower than the embedded store).
        plan.nemesis.max_clock_step_ms = 0;
        plan.clients = 16;
        plan.large_batch = 2_000;
        plan.large_share = 0.3;
    }
    if let Ok(chance) = std::env::var("PROMISES_STORAGE_RESTARTS") {
        plan.nemesis.storage_restart = chance.parse().expect("PROMISES_STORAGE_RESTARTS: a chance per step");
    }
    if let Ok(step) = std::env::var("PROMISES_CLOCK_STEP_MS") {
        plan.nemesis.max_clock_step_ms = step.parse().expect("PROMISES_CLOCK_STEP_MS: ms");
    }
    // On real HBase the nemesis also kills HBase's Thrift server (-9) and
    // starts it again on the same data.
    let restart: Option<history::nemesis::Restart> = b.real.clone().map(|(real, _)| {
        let restart: history::nemesis::Restart = std::sync::Arc::new(move || {
            real.kill9("thrift");
            real.restart_stopped();
        });
        restart
    });
    let channels: Vec<_> = servers.iter().map(|s| s.channel.clone()).collect();
    let outcome = history::run(&plan, &channels, clock_bound, restart).await;
    history::print(&plan, &format!("{backend} ({replicas} replica(s))"), &outcome);
    for s in servers {
        s.stop().await;
    }
    solus::clock::shift_ms(0);
    totals.add(backend, seed, &outcome);
}

/// Every seed on every backend: no violation. The clock is process-wide,
/// so the runs go one after another in this one test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_promises_hold_over_random_histories() {
    let mut totals = Totals::default();
    let started = std::time::Instant::now();
    let minutes: Option<f64> = std::env::var("PROMISES_MINUTES")
        .ok()
        .map(|m| m.parse().expect("PROMISES_MINUTES: a number"));
    for backend in backends() {
        let default = match (minutes, backend.as_str()) {
            (Some(_), _) => "1",
            (None, "embedded") => "1,2",
            (None, _) => "1",
        };
        let list = seeds(default);
        match minutes {
            Some(m) => {
                let until = started + Duration::from_secs_f64(m * 60.0);
                let mut seed = list[0];
                while std::time::Instant::now() < until {
                    run_on(&backend, seed, &mut totals).await;
                    seed += 1;
                }
            }
            None => {
                for seed in list {
                    run_on(&backend, seed, &mut totals).await;
                }
            }
        }
    }
    totals.print(&backends().join(" + "), started.elapsed());
    assert!(
        totals.failed.is_empty(),
        "promises broken: {}",
        totals.failed.join("; ")
    );
}
