//! Issue 21, class 4, as found: 100 acknowledged adds, `kill -9`, one
//! flipped byte in the middle of the journal file, restart. The old code
//! replayed up to the damage and dropped every record after it, silently
//! (50 of 100 gone, only `journal_records=50` in the log), and the next
//! checkpoint deleted the damaged file. Now the start is refused with a
//! message naming the file, the offset, the records and the setting; with
//! the setting, every readable record is back, the damage is logged, in
//! `/metrics`, in health and in `solus health`, and the file is kept.

mod common;
mod process;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;

use common::{absent_all, create_np, ents};
use process::{SolusProcess, metric};

fn journal_files(data: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(data.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_journal_record_is_reported_not_silently_dropped_with_those_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let path_env = ("SOLUS__STORAGE__EMBEDDED__PATH", data.display().to_string());
    // No checkpoint before the kill: every add is only in the journal.
    let no_checkpoint = (
        "SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS",
        "3600000".to_string(),
    );
    let server = SolusProcess::start(&[path_env.clone(), no_checkpoint.clone()]).await;
    let ch = server.channel().await;
    DeduperAdminServiceClient::new(ch.clone())
        .create_deduper(create_np("c", "d", 10_000, 0.001, 3600))
        .await
        .unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("entity-{i:03}")).collect();
    let mut data_client = DeduperServiceClient::new(ch);
    for key in &keys {
        data_client
            .add(pb::AddRequest {
                client_id: "c".into(),
                deduper: "d".into(),
                entities: ents(&[key]),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    server.signal("KILL");
    drop(server);

    let file = journal_files(&data)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    assert!(
        bytes.len() > 1000,
        "100 records in {}: {} bytes",
        file.display(),
        bytes.len()
    );
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&file, &bytes).unwrap();

    // Refused by default, naming what and how to start anyway.
    let log = dir.path().join("refused.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_solus"))
        .arg("serve")
        .env_remove("RUST_LOG")
        .env(
            "SOLUS__SERVER__LISTEN",
            format!("127.0.0.1:{}", common::ports::free_port()),
        )
        .env("SOLUS__METRICS__LISTEN", "")
        .env(path_env.0, &path_env.1)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..300 {
        exited = child.try_wait().unwrap();
        if exited.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let message = std::fs::read_to_string(&log).unwrap();
    let exited = exited.unwrap_or_else(|| panic!("started on a damaged journal (still up after 30 s): {message}"));
    assert!(!exited.success(), "exited 0 on a damaged journal: {message}");
    let name = file.file_name().unwrap().to_str().unwrap();
    for part in [
        name,
        "byte offset",
        "1 record(s)",
        "storage.embedded.start_with_damaged_journal",
    ] {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "refused: the file is untouched");

    // Started anyway: 99 of 100 back (the damaged record alone is lost).
    let server = SolusProcess::start(&[
        path_env.clone(),
        ("SOLUS__STORAGE__EMBEDDED__START_WITH_DAMAGED_JOURNAL", "true".into()),
        ("SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS", "100".into()),
    ])
    .await;
    let mut data_client = DeduperServiceClient::new(server.channel().await);
    let absent = absent_all(&mut data_client, "c", "d", &keys).await;
    assert_eq!(absent.iter().filter(|a| **a).count(), 1, "{absent:?}");
    let log = server.stderr();
    assert!(
        log.contains("journal damage") && log.contains(name) && log.contains("offset"),
        "{log}"
    );
    let page = server.metrics().await;
    assert_eq!(
        metric(&page, "solus_journal_unreadable_records", &[]),
        Some(1.0),
        "{page}"
    );
    let cli = Command::new(env!("CARGO_BIN_EXE_solus"))
        .args(["health", "--addr", &format!("127.0.0.1:{}", server.port)])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&cli.stdout);
    assert!(!cli.status.success(), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.contains("solus.v1.Journal") && l.contains("NOT_SERVING")),
        "{shown}"
    );
    // Checkpoints run (100 ms) and keep the damaged file.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let kept = data.join("journal").join(format!("{name}.damaged"));
    assert_eq!(std::fs::read(&kept).unwrap(), bytes, "kept as found");
    server.signal("TERM");
    drop(server);

    // The next start is clean and keeps the 99.
    let server = SolusProcess::start(&[path_env]).await;
    let mut data_client = DeduperServiceClient::new(server.channel().await);
    let absent = absent_all(&mut data_client, "c", "d", &keys).await;
    assert_eq!(absent.iter().filter(|a| **a).count(), 1);
    assert!(kept.exists());
}
