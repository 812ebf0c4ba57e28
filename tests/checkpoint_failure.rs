//! Issue 45, class 7, as found: with the journal directory read-only,
//! checkpoints failed every ~200 ms for as long as it lasted, the journal
//! grew, and health stayed SERVING; only the log showed it. Now the failure
//! is counted (`solus_checkpoint_consecutive_failures`), turns the
//! `solus.v1.Journal` health service NOT_SERVING once persistent (readiness
//! stays SERVING: writes still reach the journal), backs off instead of
//! retrying every 200 ms, and all of it clears when checkpoints succeed
//! again. The read-only directory is a read-only bind mount (root ignores
//! permissions); elsewhere the test says so and does nothing.
//!
//! One test in its own binary: the metrics are process-wide.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// `dir` bind-mounted read-only over itself; unmounted when dropped.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn mount(dir: &Path) -> Option<ReadOnly> {
        let run = |args: &[&str]| {
            Command::new("mount")
                .args(args)
                .arg(dir)
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !run(&["--bind"]) {
            return None;
        }
        let ro = ReadOnly(dir.to_path_buf());
        run(&["-o", "remount,bind,ro"]).then_some(ro)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

async fn health(s: &TestServer, service: &str) -> ServingStatus {
    let req = HealthCheckRequest {
        service: service.into(),
    };
    match HealthClient::new(s.channel.clone()).check(req).await {
        Ok(r) => ServingStatus::try_from(r.get_ref().status).unwrap_or(ServingStatus::Unknown),
        Err(_) => ServingStatus::Unknown,
    }
}

fn gauge(name: &str) -> Option<f64> {
    solus::metrics::render()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

const JOURNAL: &str = "solus.v1.Journal";
const DATA: &str = "solus.v1.DeduperService";

/// Adds entities (a journal record each call) until `done` or `limit`.
async fn write_until(s: &TestServer, limit: Duration, round: &mut usize, mut done: impl AsyncFnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        let e: Vec<String> = (0..50).map(|i| format!("e-{round}-{i}")).collect();
        let refs: Vec<&str> = e.iter().map(String::as_str).collect();
        add(s, "c", "j", &refs, 0).await;
        *round += 1;
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_checkpoint_is_counted_in_health_and_backs_off() {
    let mut backend = TestBackend::embedded();
    // As found: a checkpoint considered every 200 ms.
    backend.settings.storage.embedded.checkpoint_interval_ms = 200;
    let data = backend.settings.storage.embedded.path.clone();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let s = TestServer::start(&backend).await;
    // Small (a few pages), so a few adds make a checkpoint due.
    s.admin()
        .create_deduper(create_np("c", "j", 2_000, 0.01, 3600))
        .await
        .unwrap();
    let mut round = 0;
    // A second of writes, checkpointed as usual.
    write_until(&s, Duration::from_secs(1), &mut round, async || false).await;
    assert_eq!(health(&s, JOURNAL).await, ServingStatus::Serving);

    let Some(ro) = ReadOnly::mount(&data.join("journal")) else {
        skipped(
            "a_failing_checkpoint_is_counted_in_health_and_backs_off",
            "a read-only bind mount needs root (CAP_SYS_ADMIN)",
        );
        return;
    };
    // Writes go on (the open journal file still takes appends); each
    // checkpoint fails to start a new journal file.
    let failing = Instant::now();
    let visible = write_until(&s, Duration::from_secs(20), &mut round, async || {
        health(&s, JOURNAL).await == ServingStatus::NotServing
    })
    .await;
    assert!(
        visible,
        "20 s of failing checkpoints and solus.v1.Journal still SERVING"
    );
    let seen_after = failing.elapsed();
    assert!(gauge("solus_checkpoint_consecutive_failures").is_some_and(|n| n >= 3.0));
    assert_eq!(health(&s, DATA).await, ServingStatus::Serving, "readiness is untouched");
    // Backoff: 8 s of failing at a 200 ms interval was about 40 attempts;
    // now 1 s, 2 s, 4 s apart: 4, or 5 with the timing's slack.
    write_until(
        &s,
        Duration::from_secs(8).saturating_sub(failing.elapsed()),
        &mut round,
        async || false,
    )
    .await;
    let attempts = gauge("solus_checkpoint_consecutive_failures").unwrap();
    eprintln!(
        "visible after {seen_after:?}; {attempts} attempts in {:?}",
        failing.elapsed()
    );
    assert!((3.0..=5.0).contains(&attempts), "{attempts} attempts in 8 s");

    // Writable again: the next attempt (at most 16 s later) succeeds, and
    // everything clears.
    drop(ro);
    let healed = Instant::now();
    assert!(
        write_until(&s, Duration::from_secs(25), &mut round, async || {
            health(&s, JOURNAL).await == ServingStatus::Serving
        })
        .await,
        "checkpoints never recovered"
    );
    eprintln!("recovered {:?} after the mount went", healed.elapsed());
    assert_eq!(gauge("solus_checkpoint_consecutive_failures"), Some(0.0));
    let last_success = gauge("solus_checkpoint_last_success_timestamp_seconds").unwrap();
    assert!(
        last_success >= started.floor() + 8.0,
        "{last_success}: not after the recovery"
    );
    let written: Vec<String> = (0..50).map(|i| format!("e-{}-{i}", round - 1)).collect();
    s.stop().await;
    let s = TestServer::start(&backend).await;
    let refs: Vec<&str> = written.iter().map(String::as_str).collect();
    assert_eq!(absent(&s, "c", "j", &refs).await, vec![false; 50], "writes survive");
    s.stop().await;
}
