//! Issue 9, reproductions 1 and 3, with a real I/O fault under the embedded
//! store: its data directory on a 16 MiB tmpfs that is filled up, then freed.
//!
//! A write that fails with "No space left on device" must leave none of its
//! entities present; readiness turns NOT_SERVING while writes fail; once
//! space is freed, writes (and CreateDeduper) succeed again without a
//! restart, and health returns to SERVING. Mounting needs root
//! (CAP_SYS_ADMIN): elsewhere the test says so and does nothing.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use solus::api::pb;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// A mounted tmpfs, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes a ballast file until the filesystem is full; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("ballast");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0xAB; 64 << 10];
    while f.write_all(&chunk).and_then(|_| f.flush()).is_ok() {}
    // Byte by byte into the last partial page.
    while f.write_all(&[0]).is_ok() {}
    path
}

async fn health(s: &TestServer) -> ServingStatus {
    let req = HealthCheckRequest {
        service: "solus.v1.DeduperService".into(),
    };
    match HealthClient::new(s.channel.clone()).check(req).await {
        Ok(r) => ServingStatus::try_from(r.get_ref().status).unwrap_or(ServingStatus::Unknown),
        Err(_) => ServingStatus::Unknown,
    }
}

async fn wait_health(s: &TestServer, want: ServingStatus) {
    let start = Instant::now();
    while health(s).await != want {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "health never became {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn aia(items: &[String]) -> pb::AddIfAbsentRequest {
    pb::AddIfAbsentRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: "full".into(),
        entities: ents(items),
        ttl_ms: 0,
        request_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_leaves_no_trace_and_heals_without_restart() {
    let mut backend = TestBackend::embedded();
    let mnt = backend.data_path().with_file_name("mnt");
    let Some(fs) = Tmpfs::mount(&mnt, "16m") else {
        common::skipped(
            "a_full_disk_leaves_no_trace_and_heals_without_restart",
            "mounting a tmpfs needs root (CAP_SYS_ADMIN)",
        );
        return;
    };
    backend.settings.storage.embedded.path = fs.0.join("data");
    let s = TestServer::start(&backend).await;
    s.admin()
        .create_deduper(create_np("c", "full", 100_000, 0.001, 3600))
        .await
        .unwrap();
    add(&s, "c", "full", &["good-1", "good-2"], 0).await;

    let ballast = fill(&fs.0);
    let bad: Vec<String> = (1..=1000).map(|i| format!("bad-{i}")).collect();
    let err = s.data().add_if_absent(aia(&bad)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    assert_eq!(
        absent(&s, "c", "full", &["bad-1", "bad-500", "bad-1000"]).await,
        [true, true, true],
        "a failed write leaves none of its entities present"
    );
    wait_health(&s, ServingStatus::NotServing).await;

    std::fs::remove_file(ballast).unwrap();
    wait_health(&s, ServingStatus::Serving).await;
    let retried = s.data().add_if_absent(aia(&bad)).await.unwrap().into_inner().absent;
    assert!(
        retried.iter().all(|&a| a),
        "the retry reports every first occurrence absent"
    );
    s.admin()
        .create_deduper(create_np("c", "other", 1000, 0.01, 60))
        .await
        .unwrap();
    add(&s, "c", "other", &["after"], 0).await;
    s.stop().await;

    let s = TestServer::start(&backend).await;
    assert_eq!(
        absent(&s, "c", "full", &["good-1", "bad-1", "bad-1000", "never"]).await,
        [false, false, false, true]
    );
    assert_eq!(absent(&s, "c", "other", &["after"]).await, [false]);
    s.stop().await;
    drop(fs);
}
