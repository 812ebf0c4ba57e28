//! Issue 45, class 3, as found: with `storage.embedded.max_record_memory_mib`
//! full, replaying 500 records that are already remembered (same record
//! ids, same entities: nothing new to hold) was refused with
//! `RESOURCE_EXHAUSTED` (no RetryInfo, so both clients fail at once and a
//! restarting job cannot progress until records expire); every replay
//! wrote its records to disk again; and `solus_records_held` read 0 after a
//! restart until the next write. Now replays of held records take no room
//! and are not written again, new ids beyond the budget are still refused
//! (not retryable), and the gauge is right from the start.
//!
//! One test in its own binary: the gauge is process-wide.

mod common;

use std::path::Path;

use common::*;
use prost::bytes::Bytes;
use solus::api::pb;
use tonic::Code;

/// Records a 1 MiB budget holds, at 48 bytes each.
const BUDGET_RECORDS: usize = (1 << 20) / 48;

fn request(entities: &[String], ids: &[String]) -> pb::AddIfAbsentRequest {
    pb::AddIfAbsentRequest {
        client_id: "c".into(),
        deduper: "r".into(),
        entities: ents(entities),
        ttl_ms: 0,
        request_id: None,
        record_ids: ids.iter().map(|i| Bytes::copy_from_slice(i.as_bytes())).collect(),
    }
}

/// Entities and record ids `i` of `range`.
fn records(range: std::ops::Range<usize>) -> (Vec<String>, Vec<String>) {
    (
        range.clone().map(|i| format!("event-{i}")).collect(),
        range.map(|i| format!("topic/0/{i}")).collect(),
    )
}

/// Bytes allocated on disk by fjall (the `records` keyspace lives there):
/// every file under `data` but the bit journal and the page files.
fn fjall_bytes(data: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut dirs = vec![data.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                let name = e.file_name();
                if dir != data || (name != "journal" && name != "filters") {
                    dirs.push(path);
                }
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

fn records_held() -> Option<f64> {
    solus::metrics::render()
        .lines()
        .find_map(|l| l.strip_prefix("solus_records_held "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pure_replay_at_a_full_record_budget_is_answered_and_not_written_again() {
    let mut backend = TestBackend::embedded();
    backend.settings.storage.embedded.max_record_memory_mib = 1;
    let data = backend.settings.storage.embedded.path.clone();
    let s = TestServer::start(&backend).await;
    s.admin()
        .create_deduper(create_np("c", "r", 100_000, 0.001, 3600))
        .await
        .unwrap();
    // Fill the budget exactly with new records.
    for start in (0..BUDGET_RECORDS).step_by(5000) {
        let (e, i) = records(start..(start + 5000).min(BUDGET_RECORDS));
        let absent = s
            .data()
            .add_if_absent(request(&e, &i))
            .await
            .unwrap()
            .into_inner()
            .absent;
        assert_eq!(absent, vec![true; e.len()], "new records from {start}");
    }
    // Full: one new record id more is refused, naming the setting; it is not
    // retryable (room comes back only as records expire, up to a window).
    let (e, i) = records(BUDGET_RECORDS..BUDGET_RECORDS + 1);
    let full = s.data().add_if_absent(request(&e, &i)).await.unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted, "{}", full.message());
    assert!(full.message().contains("max_record_memory_mib"), "{}", full.message());
    assert!(!solus::api::is_transient(&full), "a budget refusal marked retryable");

    // The replay as found: 500 records already remembered, same ids, same
    // entities - a job restarting from its last checkpoint, again and again.
    let (e, i) = records(1000..1500);
    let before = fjall_bytes(&data);
    for round in 0..20 {
        let absent = match s.data().add_if_absent(request(&e, &i)).await {
            Ok(r) => r.into_inner().absent,
            Err(st) => panic!("replay {round} refused: {:?} {}", st.code(), st.message()),
        };
        assert_eq!(
            absent,
            vec![true; 500],
            "replay {round}: every record answered as at first"
        );
    }
    let grown = fjall_bytes(&data).saturating_sub(before);
    eprintln!("fjall grew {grown} bytes over 20 replays of 500 records");
    // Before: 20 x 500 records x 24 bytes (plus keys and fjall's framing)
    // written again. Now nothing; less than one replay's worth allowed for
    // fjall's own bookkeeping.
    assert!(
        grown < 12_000,
        "20 replays of 500 held records grew fjall by {grown} bytes"
    );
    // A replay mixed with new ids still needs room for the new ones.
    let (mut e2, mut i2) = records(0..10);
    let (ne, ni) = records(BUDGET_RECORDS + 5..BUDGET_RECORDS + 6);
    e2.extend(ne);
    i2.extend(ni);
    let mixed = s.data().add_if_absent(request(&e2, &i2)).await.unwrap_err();
    assert_eq!(mixed.code(), Code::ResourceExhausted);
    assert!(
        mixed.message().contains("1 more do not fit"),
        "only the new one counts: {}",
        mixed.message()
    );
    s.stop().await;

    // After a restart the gauge reads what is held before any write, and
    // the replays are still recalled (the disk held them all along).
    let s = TestServer::start(&backend).await;
    assert_eq!(
        records_held(),
        Some(BUDGET_RECORDS as f64),
        "solus_records_held right after a restart"
    );
    let absent = s
        .data()
        .add_if_absent(request(&e, &i))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert_eq!(absent, vec![true; 500], "replay after a restart");
    assert_eq!(records_held(), Some(BUDGET_RECORDS as f64));
    s.stop().await;
}
