//! Crash safety of the embedded store: `kill -9` the server in the middle of
//! a stream of acknowledged Adds, restart it, and find every acknowledged
//! entity present.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;

use common::ports::free_port;
use common::{absent_all, connect_when_healthy as connect, create_np, ents};

fn spawn_server(port: u16, data: &std::path::Path, fsync: bool) -> Child {
    Command::new(env!("CARGO_BIN_EXE_solus"))
        .arg("serve")
        .env("SOLUS__SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("SOLUS__STORAGE__EMBEDDED__PATH", data)
        .env("SOLUS__STORAGE__EMBEDDED__FSYNC", fsync.to_string())
        // Two tests run at once: neither takes the default /metrics port.
        .env("SOLUS__METRICS__LISTEN", "")
        // Checkpoint often so the kill also lands during checkpoints.
        .env("SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS", "50")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning solus serve")
}

/// `n`: the deduper's expected insertions. A small deduper checkpoints its
/// page file many times before the kill (the journal soon outweighs its
/// few pages); a large one mostly replays the journal.
async fn kill_during_adds(fsync: bool, n: u64) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let mut child = spawn_server(port, &data, fsync);
    let channel = connect(port).await;
    DeduperAdminServiceClient::new(channel.clone())
        .create_deduper(create_np("c", "d", n, 0.001, 3600))
        .await
        .unwrap();

    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        let (mut client, acked) = (DeduperServiceClient::new(channel.clone()), acked.clone());
        writers.push(tokio::spawn(async move {
            for batch in 0.. {
                let items: Vec<String> = (0..100).map(|i| format!("w{w}-b{batch}-i{i}")).collect();
                let req = pb::AddRequest {
                    request_id: None,
                    client_id: "c".into(),
                    deduper: "d".into(),
                    entities: ents(&items),
                    ttl_ms: 0,
                };
                match client.add(req).await {
                    Ok(_) => acked.lock().unwrap().extend(items),
                    Err(_) => return, // the server is gone
                }
            }
        }));
    }
    // Let a few thousand adds through (and a few checkpoints), then kill -9.
    while acked.lock().unwrap().len() < 20_000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let page_file = data.join("filters").join("c").join("d.bits");
    let saved_before_kill = page_file.exists();
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    if n <= 20_000 {
        assert!(
            saved_before_kill,
            "no checkpoint wrote {} before the kill",
            page_file.display()
        );
    }
    for w in writers {
        w.await.unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());

    let mut child = spawn_server(port, &data, fsync);
    let channel = connect(port).await;
    let mut client = DeduperServiceClient::new(channel);
    let missing = absent_all(&mut client, "c", "d", &acked)
        .await
        .iter()
        .filter(|a| **a)
        .count();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged entities lost after kill -9",
        acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_add() {
    kill_during_adds(false, 1_000_000).await;
}

/// The kill lands while page files are being rewritten in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_page_file_checkpoints_loses_no_acknowledged_add() {
    kill_during_adds(false, 20_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_add_with_fsync() {
    kill_during_adds(true, 1_000_000).await;
}
