//! Thrift calls per gRPC request, counted by the emulator: CheckAbsence is
//! one `getRowsWithColumns`, Add one `mutateRowsTs`, AddIfAbsent one of each
//! plus, with the guard (default), one `checkAndPut` per touched shard row,
//! whatever the batch size up to the read budget; past it reads split.

use hbase_emulator::{Emulator, Protocol, Transport};

use crate::common::*;

/// Thrift calls of the data path only: the health watcher's
/// `isTableEnabled`, its clock probe (`mutateRow` + `getRow`) and config
/// lookups run beside requests and are left out.
fn data_calls(b: &TestBackend) -> (u64, u64) {
    let (reads, writes, swaps) = data_calls_and_swaps(b);
    assert_eq!(swaps, 0, "guard swaps outside AddIfAbsent");
    (reads, writes)
}

/// (getRowsWithColumns, mutateRowsTs, checkAndPut) of the data path.
fn data_calls_and_swaps(b: &TestBackend) -> (u64, u64, u64) {
    let e = b.emulator();
    let counts = e.call_counts();
    let other: Vec<_> = counts
        .keys()
        .filter(|k| {
            ![
                "getRowsWithColumns",
                "mutateRowsTs",
                "checkAndPut",
                "isTableEnabled",
                "mutateRow",
                "getRow",
                "getRowWithColumns",
            ]
            .contains(&k.as_str())
        })
        .collect();
    assert!(other.is_empty(), "unexpected calls {counts:?}");
    (
        e.calls("getRowsWithColumns"),
        e.calls("mutateRowsTs"),
        e.calls("checkAndPut"),
    )
}

/// Distinct shard rows of `items` in a deduper of `shards` shards.
fn rows_touched(items: &[&str], shards: u32) -> u64 {
    let rows: std::collections::BTreeSet<u32> = items
        .iter()
        .map(|i| solus::contract::hashing::shard_of(i.as_bytes(), shards))
        .collect();
    rows.len() as u64
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_read_and_one_write_call_per_request() {
    for guard in [true, false] {
        let mut b = TestBackend::hbase();
        b.settings.storage.hbase.add_if_absent_guard = guard;
        calls_per_request(&b, guard).await;
    }
}

async fn calls_per_request(b: &TestBackend, guard: bool) {
    let s = TestServer::start(b).await;
    // n = 1e6, p = 0.01: k 7 over 10 shards, so a batch touches every shard row.
    let d = s
        .admin()
        .create_deduper(create_np("c", "d", 1_000_000, 0.01, 3600))
        .await
        .unwrap()
        .into_inner();
    for batch in [1usize, 10, 200] {
        let items = names(&format!("b{batch}"), batch);
        let refs: Vec<&str> = items.iter().map(String::as_str).collect();
        absent(&s, "c", "d", &["warm-up"]).await; // deduper config cached

        b.emulator().reset_counts();
        absent(&s, "c", "d", &refs).await;
        assert_eq!(data_calls(b), (1, 0), "CheckAbsence of {batch}");

        b.emulator().reset_counts();
        add(&s, "c", "d", &refs, 0).await;
        assert_eq!(data_calls(b), (0, 1), "Add of {batch}");

        b.emulator().reset_counts();
        let more = names(&format!("c{batch}"), batch);
        let more: Vec<&str> = more.iter().map(String::as_str).collect();
        add_if_absent(&s, "c", "d", &more, 0).await;
        let swaps = if guard { rows_touched(&more, d.shards) } else { 0 };
        assert_eq!(
            data_calls_and_swaps(b),
            (1, 1, swaps),
            "AddIfAbsent of {batch}, guard {guard}"
        );
    }
}

/// Past `max_cells_per_read` (rows x union columns) the read is split into
/// parallel calls; the answers are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_reads_split_past_the_budget() {
    let mut b = TestBackend::hbase();
    b.settings.storage.hbase.max_cells_per_read = 20_000;
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 1_000_000, 0.01, 3600))
        .await
        .unwrap();
    let items = names("x", 1000);
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    add(&s, "c", "d", &refs[..500], 0).await;
    b.emulator().reset_counts();
    let answer = absent(&s, "c", "d", &refs).await;
    // ~700 bits per row, 2 columns each: 3 rows ask 3 x 4,200 pairs, 4 rows
    // 4 x 5,600 > 20,000; so 10 rows read as 3 + 3 + 3 + 1.
    let (reads, writes) = data_calls(&b);
    assert_eq!((reads, writes), (4, 0));
    assert!(answer[..500].iter().all(|a| !a), "no false negatives");
    assert!(
        answer[500..].iter().filter(|a| **a).count() > 480,
        "few false positives"
    );
}

/// Framed transport (HBase drops frames over 2 MB) with either protocol: a
/// 10,000-entity Add is split under `max_request_bytes` instead of failing,
/// and everything added is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framed_transport_and_requests_over_the_frame_limit() {
    for protocol in [Protocol::Binary, Protocol::Compact] {
        let emulator = Emulator::builder()
            .transport(Transport::Framed)
            .protocol(protocol)
            .start("127.0.0.1:0")
            .unwrap();
        let mut b = TestBackend::hbase_on(emulator);
        b.settings.storage.hbase.transport = solus::storage::hbase::Transport::Framed;
        b.settings.storage.hbase.protocol = match protocol {
            Protocol::Binary => solus::storage::hbase::Protocol::Binary,
            Protocol::Compact => solus::storage::hbase::Protocol::Compact,
        };
        let s = TestServer::start(&b).await;
        s.admin()
            .create_deduper(create_np("c", "d", 1_000_000, 0.01, 3600))
            .await
            .unwrap();
        let items = names("big", 10_000);
        let refs: Vec<&str> = items.iter().map(String::as_str).collect();
        absent(&s, "c", "d", &["warm-up"]).await;
        b.emulator().reset_counts();
        add(&s, "c", "d", &refs, 0).await;
        // 70,000 cells at most 47 bytes each: over 3 MB, so 4 calls of at most 1 MiB.
        let (_, writes) = data_calls(&b);
        assert!((4..=5).contains(&writes), "{protocol:?}: {writes} mutateRowsTs calls");
        assert!(absent(&s, "c", "d", &refs).await.iter().all(|a| !a), "{protocol:?}");
    }
}
