//! Crash safety of an online resize, on the embedded store, the HBase
//! emulator and real HBase (`tests/common/real_hbase.rs`; skipped with one
//! line where none can be had): `kill -9` the server at each step of a
//! resize (successor recorded, first writes to it, retirement of the older
//! generation) under a stream of acknowledged Adds, restart it, and find
//! every acknowledged entity still within its TTL present, and the resize
//! completed after the restarts. Also (embedded): the start-up removes page
//! files of generations no config names.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use common::ports::free_port;
use common::{TestBackend, absent_all, connect_when_healthy as connect, create_np, ents};

/// The deduper's expiry, in s: short, so the test reaches the retirement
/// soon; 12 s on HBase, whose restarts and reads are slower, so enough
/// acknowledged entities are still within their TTL at each check.
fn expiry_s(storage: &Storage) -> u64 {
    match storage {
        Storage::Embedded(_) => 4,
        Storage::Hbase(_) => 12,
    }
}

/// Where the spawned servers keep their data.
#[derive(Clone)]
enum Storage {
    Embedded(std::path::PathBuf),
    /// An HBase (emulator or real) at this Thrift1 address.
    Hbase(std::net::SocketAddr),
}

fn spawn_server(port: u16, storage: &Storage) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_solus"));
    cmd.arg("serve")
        .env("SOLUS__SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("SOLUS__METRICS__LISTEN", "");
    match storage {
        Storage::Embedded(data) => cmd
            .env("SOLUS__STORAGE__EMBEDDED__PATH", data)
            .env("SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS", "50"),
        // No clock bound, as in the other HBase tests (tests/common): the
        // grace is then the same 3 s as on the embedded store.
        Storage::Hbase(thrift) => cmd
            .env("SOLUS__STORAGE__BACKEND", "hbase")
            .env("SOLUS__STORAGE__HBASE__ADDRESSES", thrift.to_string())
            .env("SOLUS__STORAGE__HBASE__MAX_CLOCK_OFFSET_MS", "0"),
    };
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning solus serve")
}

/// Acknowledged batches with the time (ms since the Unix epoch) each was sent.
type Acked = Arc<Mutex<Vec<(i64, Vec<String>)>>>;

/// Two writers adding batches of 50 until the server goes away.
fn writers(channel: &Channel, round: usize, acked: &Acked) -> Vec<JoinHandle<()>> {
    (0..2)
        .map(|w| {
            let (mut client, acked) = (DeduperServiceClient::new(channel.clone()), acked.clone());
            tokio::spawn(async move {
                for batch in 0.. {
                    let items: Vec<String> = (0..50).map(|i| format!("r{round}-w{w}-b{batch}-i{i}")).collect();
                    let sent = solus::clock::now_ms();
                    let req = pb::AddRequest {
                        request_id: None,
                        client_id: "c".into(),
                        deduper: "d".into(),
                        entities: ents(&items),
                        ttl_ms: 0,
                    };
                    match client.add(req).await {
                        Ok(_) => acked.lock().unwrap().push((sent, items)),
                        Err(e) => {
                            eprintln!("writer r{round}-w{w} stopped at batch {batch}: {e}");
                            return;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect()
}

async fn get(channel: &Channel) -> pb::Deduper {
    DeduperAdminServiceClient::new(channel.clone())
        .get_deduper(pb::GetDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn sleep_until(at_ms: i64) {
    let wait = at_ms - solus::clock::now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// Kills the server, restarts it, and checks that every acknowledged entity
/// whose TTL has not run out is present. Returns the new server.
async fn kill_and_check(child: &mut Child, port: u16, storage: &Storage, acked: &Acked, step: &str) -> Channel {
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    *child = spawn_server(port, storage);
    let channel = connect(port).await;
    let batches = std::mem::take(&mut *acked.lock().unwrap());
    let mut client = DeduperServiceClient::new(channel.clone());
    let all: Vec<(i64, String)> = batches
        .into_iter()
        .flat_map(|(sent, items)| items.into_iter().map(move |i| (sent, i)))
        .collect();
    let items: Vec<&String> = all.iter().map(|(_, i)| i).collect();
    let absent = absent_all(&mut client, "c", "d", &items).await;
    let checked_by = solus::clock::now_ms();
    // An entity's expiry is at least its send time plus the TTL.
    let live = |sent: i64| sent + (expiry_s(storage) * 1000) as i64 > checked_by + 100;
    let lost = all
        .iter()
        .zip(&absent)
        .filter(|((sent, _), a)| live(*sent) && **a)
        .count();
    let held = all.iter().filter(|(sent, _)| live(*sent)).count();
    assert!(
        held > 100,
        "{step}: too few entities within their TTL to check ({held})"
    );
    assert_eq!(
        lost, 0,
        "{step}: {lost} of {held} acknowledged live entities lost after kill -9"
    );
    channel
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_each_step_of_a_resize_loses_no_acknowledged_add_and_the_resize_completes() {
    let dir = tempfile::tempdir().unwrap();
    kill_9_at_each_step(Storage::Embedded(dir.path().join("data"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_hbase_kill_9_at_each_step_of_a_resize_loses_no_acknowledged_add_and_the_resize_completes() {
    // The emulator lives in this process: it outlives every killed server.
    let b = TestBackend::hbase();
    kill_9_at_each_step(Storage::Hbase(b.thrift_addr())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_hbase_kill_9_at_each_step_of_a_resize_loses_no_acknowledged_add_and_the_resize_completes() {
    let Some(b) = TestBackend::real_hbase() else { return };
    kill_9_at_each_step(Storage::Hbase(b.thrift_addr())).await;
}

async fn kill_9_at_each_step(storage: Storage) {
    let port = free_port();
    let mut child = spawn_server(port, &storage);
    let channel = connect(port).await;
    DeduperAdminServiceClient::new(channel.clone())
        .create_deduper(create_np("c", "d", 2000, 0.01, expiry_s(&storage)))
        .await
        .unwrap();
    let acked: Acked = Arc::default();
    let w = writers(&channel, 0, &acked);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let d = DeduperAdminServiceClient::new(channel.clone())
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
            expected_insertions: Some(20_000),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (writes_from, retire_at) = (d.generations[1].writes_from_ms, d.generations[0].retire_at_ms.unwrap());

    // 1. Successor recorded, writes still going to generation 0.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let channel = kill_and_check(&mut child, port, &storage, &acked, "recorded").await;
    drop(w);
    let timing = |d: &pb::Deduper| -> Vec<_> {
        d.generations
            .iter()
            .map(|g| (g.id, g.writes_from_ms, g.retire_at_ms))
            .collect()
    };
    assert_eq!(timing(&get(&channel).await), timing(&d), "the recorded resize survives");
    let w = writers(&channel, 1, &acked);

    // 2. After the switch: the first writes to generation 1.
    sleep_until(writes_from + 700).await;
    let channel = kill_and_check(&mut child, port, &storage, &acked, "first writes").await;
    drop(w);
    let w = writers(&channel, 2, &acked);

    // 3. Around the retirement of generation 0.
    sleep_until(retire_at + 300).await;
    let channel = kill_and_check(&mut child, port, &storage, &acked, "retirement").await;
    drop(w);
    let _w = writers(&channel, 3, &acked);
    // The restarted server completes the retirement (the check above
    // looked the deduper up, so its pass knows it).
    let mut retired = false;
    for _ in 0..100 {
        let d = get(&channel).await;
        if d.generations.iter().map(|g| g.id).collect::<Vec<_>>() == [1] {
            retired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(retired, "generation 0 retired after the restart");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let channel = kill_and_check(&mut child, port, &storage, &acked, "after retirement").await;
    assert_eq!(get(&channel).await.generations.len(), 1);
    if let Storage::Embedded(data) = &storage {
        let filters = data.join("filters").join("c");
        assert!(!filters.join("d.bits").exists(), "generation 0's page file is gone");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_removes_page_files_of_generations_no_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let storage = Storage::Embedded(data.clone());
    let port = free_port();
    let mut child = spawn_server(port, &storage);
    let channel = connect(port).await;
    DeduperAdminServiceClient::new(channel.clone())
        .create_deduper(create_np("c", "d", 2000, 0.01, 60))
        .await
        .unwrap();
    DeduperServiceClient::new(channel.clone())
        .add(pb::AddRequest {
            request_id: None,
            client_id: "c".into(),
            deduper: "d".into(),
            entities: ents(&["kept"]),
            ttl_ms: 0,
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().unwrap();
    child.wait().unwrap();
    // As a crash after a retirement was recorded, before its file went.
    let filters = data.join("filters").join("c");
    std::fs::create_dir_all(&filters).unwrap();
    std::fs::write(filters.join("d~g7.bits"), b"junk").unwrap();
    std::fs::write(filters.join("other~g1.bits"), b"junk").unwrap();
    std::fs::write(filters.join("unrelated.bits"), b"junk").unwrap();
    let mut child = spawn_server(port, &storage);
    let channel = connect(port).await;
    assert!(!filters.join("d~g7.bits").exists());
    assert!(!filters.join("other~g1.bits").exists());
    assert!(
        filters.join("unrelated.bits").exists(),
        "only generations' files are touched"
    );
    let mut client = DeduperServiceClient::new(channel);
    assert_eq!(absent_all(&mut client, "c", "d", &["kept"]).await, [false]);
    child.kill().unwrap();
    child.wait().unwrap();
}
