//! Online resize by generations (issue 22), through the real server, on
//! every backend: the embedded store, the HBase emulator and real HBase
//! (`tests/common/real_hbase.rs`: skipped with one line where none can be
//! had). No false negative across a resize, writes moving to the successor
//! at `writes_from_ms`, the older generation retired on time with its data
//! gone (embedded: memory and page file; HBase: every cell of its rows), the
//! false-positive rate of never-added probes, `request_id` and record-id
//! retries across a resize, one transition at a time, and shrinking. HBase
//! only: the generations in `C:ver` and an older replica refusing them, an
//! interrupted retirement, and delete markers.

mod common;

use std::time::Duration;

use common::*;
use hbase_thrift::hbase::THbaseSyncClient;
use solus::api::pb;
use tonic::Code;

const C: &str = "client-r";

/// `b` with statistics every 100 ms (embedded: checkpoints too).
fn tuned(mut b: TestBackend) -> TestBackend {
    b.settings.stats.refresh_interval_ms = 100;
    b.settings.storage.embedded.checkpoint_interval_ms = 100;
    b
}

fn is_hbase(b: &TestBackend) -> bool {
    b.name != "embedded"
}

/// Whether the filter `filter` (a generation's, `shards` shards) holds
/// data: embedded, its page file (saved by a checkpoint) exists; HBase, any
/// of its shard rows has a cell, to an independent Thrift client.
fn holds_data(b: &TestBackend, filter: &str, shards: u32) -> bool {
    if !is_hbase(b) {
        return b
            .data_path()
            .join("filters")
            .join(C)
            .join(format!("{filter}.bits"))
            .exists();
    }
    let mut raw = b.raw_thrift();
    let table = b.settings.storage.table.clone().into_bytes();
    (0..shards).any(|shard| {
        let row = solus::contract::layout::data_row_key(shard, C, filter);
        raw.get_row(table.clone(), row, Default::default())
            .unwrap()
            .iter()
            .any(|r| r.columns.as_ref().is_some_and(|c| !c.is_empty()))
    })
}

/// One `#[tokio::test]` per resize case and backend, in modules `embedded`,
/// `hbase` (the emulator) and `real_hbase` (`None`: passes without running).
macro_rules! resize_cases {
    ($module:ident, $backend:expr; $($name:ident),* $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(b) = $backend else { return };
                    super::$name(super::tuned(b)).await;
                }
            )*
        }
    };
    ($($module:ident => $backend:expr),* $(,)?) => {
        $(
            resize_cases!($module, $backend;
                a_grown_deduper_loses_nothing_moves_its_writes_and_retires_the_old_generation_on_time,
                a_second_resize_is_refused_while_the_older_generation_is_live,
                a_shrink_gives_its_data_back_once_the_older_generation_retires,
                never_added_probes_stay_within_twice_p_across_a_resize_and_climb_without_one,
                request_id_and_record_id_retries_keep_working_across_a_resize,
                a_restarted_server_retires_the_older_generation_on_time_unasked,
                the_automatic_policy_resizes_a_deduper_whose_load_stays_high,
                deleting_a_deduper_mid_resize_deletes_every_generation,
                the_cli_resizes_and_prints_the_generations,
            );
        )*
    };
}

resize_cases!(
    embedded => Some(crate::common::TestBackend::embedded()),
    hbase => Some(crate::common::TestBackend::hbase()),
    real_hbase => crate::common::TestBackend::real_hbase(),
);

fn now_ms() -> i64 {
    solus::clock::now_ms()
}

/// Sleeps until `at_ms` (ms since the Unix epoch) has passed.
async fn sleep_until(at_ms: i64) {
    let wait = at_ms - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

async fn resize(s: &TestServer, name: &str, n: Option<u64>, p: Option<f64>) -> Result<pb::Deduper, tonic::Status> {
    s.admin()
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: C.into(),
            name: name.into(),
            expected_insertions: n,
            false_positive_rate: p,
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

async fn get(s: &TestServer, name: &str) -> pb::Deduper {
    s.admin()
        .get_deduper(pb::GetDeduperRequest {
            client_id: C.into(),
            name: name.into(),
        })
        .await
        .expect("GetDeduper")
        .into_inner()
}

/// GetDeduper once `name` lists `want` generations, or the last answer
/// after about 5 s (the caller asserts).
async fn with_generations(s: &TestServer, name: &str, want: usize) -> pb::Deduper {
    let mut d = get(s, name).await;
    for _ in 0..200 {
        if d.generations.len() == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        d = get(s, name).await;
    }
    d
}

/// GetDeduper once its generations' figures are computed after `after_ms`.
async fn figures_after(s: &TestServer, name: &str, after_ms: i64) -> pb::Deduper {
    for _ in 0..200 {
        let d = get(s, name).await;
        let fresh = |st: &Option<pb::DeduperStats>| st.as_ref().is_some_and(|st| st.computed_at_ms > after_ms);
        if !d.generations.is_empty() && d.generations.iter().all(|g| fresh(&g.stats)) {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no figures of {name}'s generations after {after_ms}");
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

async fn absent_of(s: &TestServer, name: &str, items: &[String]) -> Vec<bool> {
    absent_all(&mut s.data(), C, name, items).await
}

async fn add_if_absent_all(s: &TestServer, name: &str, items: &[String]) -> Vec<bool> {
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for chunk in refs.chunks(5000) {
        out.extend(add_if_absent(s, C, name, chunk, 0).await);
    }
    out
}

/// The expiry, in s, of a deduper whose retired generation's data a test
/// checks is gone: `short` on the embedded store; on HBase 10 s, because
/// HBase itself drops a cell `expiry` after it expired (its cell TTL is
/// counted from the cell timestamp, the expiry time), and the last write
/// to an older generation comes about 3 s (the grace) before the switch
/// and 6 s before `retire_at_ms - expiry`: with 10 s, a generation's last
/// cells are still there for about 5 s after it retires, so "its rows are
/// empty" shows the delete, not HBase's own expiry.
fn data_checked_expiry(b: &TestBackend, short: u64) -> u64 {
    if is_hbase(b) { 10 } else { short }
}

fn count(v: &[bool], value: bool) -> usize {
    v.iter().filter(|&&b| b == value).count()
}

async fn a_grown_deduper_loses_nothing_moves_its_writes_and_retires_the_old_generation_on_time(b: TestBackend) {
    let expiry = data_checked_expiry(&b, 3);
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "grow", 1000, 0.01, expiry))
        .await
        .unwrap();
    // Over capacity: 1,500 in a deduper sized for 1,000.
    let a = keys("a", 1500);
    add_if_absent_all(&s, "grow", &a).await;
    let before = now_ms();
    let d = resize(&s, "grow", Some(10_000), None).await.expect("resize");
    let after = now_ms();
    assert_eq!(d.expected_insertions, Some(10_000));
    assert_eq!(d.false_positive_rate, Some(0.01));
    let g: Vec<_> = d.generations.iter().map(|g| (g.id, g.filter_name.as_str())).collect();
    assert_eq!(g, [(0, "grow"), (1, "grow~g1")]);
    let (g0, g1) = (&d.generations[0], &d.generations[1]);
    let m = |n| solus::contract::sizing::size_for(n, 0.01, 1 << 20, 65_536).unwrap();
    let bits = |g: &pb::Generation| u64::from(g.shards) * u64::from(g.bits_per_shard);
    assert_eq!((g0.expected_insertions, bits(g0)), (Some(1000), m(1000).total_bits()));
    assert_eq!(
        (g1.expected_insertions, bits(g1)),
        (Some(10_000), m(10_000).total_bits())
    );
    assert_eq!(
        (d.hash_functions, d.shards, d.bits_per_shard),
        (g1.hash_functions, g1.shards, g1.bits_per_shard)
    );
    assert!((before..=after).contains(&g1.created_ms));
    // Grace: the 1 s margin, no clock bound here, and on HBase the 2 s
    // config cache of other replicas (the embedded store has none to wait
    // out: no other process shares it).
    let grace: i64 = if is_hbase(&b) { 3000 } else { 1000 };
    assert_eq!(g1.writes_from_ms, g1.created_ms + grace);
    // The last write may reach generation 0 one grace after that, and it
    // holds `expiry` s of expiry.
    assert_eq!(g0.retire_at_ms, Some(g1.writes_from_ms + grace + expiry as i64 * 1000));
    assert_eq!(g1.retire_at_ms, None);

    // Every entity added before the resize is still present.
    assert_eq!(count(&absent_of(&s, "grow", &a).await, true), 0);
    // Before writes_from, adds still go to generation 0.
    let early = keys("early", 200);
    add_if_absent_all(&s, "grow", &early).await;
    let figures = figures_after(&s, "grow", now_ms()).await;
    assert_eq!(figures.generations[1].stats.as_ref().unwrap().set_bits, 0);
    assert!(figures.generations[0].stats.as_ref().unwrap().set_bits > 0);
    // While both are live, the deduper's rate is the union of theirs.
    let union = figures.stats.as_ref().unwrap().estimated_false_positive_rate;
    let r0 = figures.generations[0]
        .stats
        .as_ref()
        .unwrap()
        .estimated_false_positive_rate;
    assert!((union - r0).abs() < 1e-12, "{union} vs {r0} (generation 1 is empty)");

    // Just before the switch: added to generation 0, read after it.
    sleep_until(g1.writes_from_ms - 300).await;
    let edge = keys("edge", 200);
    add_if_absent_all(&s, "grow", &edge).await;
    sleep_until(g1.writes_from_ms + 50).await;
    assert_eq!(
        count(&absent_of(&s, "grow", &edge).await, true),
        0,
        "no false negative at the switch"
    );
    // AddIfAbsent reads generation 0 too: what it holds is present.
    assert_eq!(count(&add_if_absent_all(&s, "grow", &edge).await, true), 0);
    // New entities now go to generation 1 (a few read present: generation
    // 0, over capacity, is still read).
    let late = keys("late", 500);
    assert!(count(&add_if_absent_all(&s, "grow", &late).await, true) >= 400);
    let figures = figures_after(&s, "grow", now_ms()).await;
    assert!(figures.generations[1].stats.as_ref().unwrap().set_bits > 0);
    assert_eq!(count(&absent_of(&s, "grow", &late).await, true), 0);

    // Retired on time: at retire_at (plus a pass), the config names only generation 1.
    let retire_at = g0.retire_at_ms.unwrap();
    sleep_until(retire_at - 500).await;
    assert_eq!(get(&s, "grow").await.generations.len(), 2, "not before its time");
    assert!(holds_data(&b, "grow", g0.shards), "generation 0's bits are there");
    sleep_until(retire_at + 1500).await;
    let d = get(&s, "grow").await;
    assert_eq!(d.generations.iter().map(|g| g.id).collect::<Vec<_>>(), [1]);
    assert_eq!(d.generations[0].retire_at_ms, None);
    // Still serving from generation 1: a fresh add is present.
    let last = keys("last", 100);
    add_if_absent_all(&s, "grow", &last).await;
    assert_eq!(count(&absent_of(&s, "grow", &last).await, true), 0);
    s.stop().await;
    // Its data is gone (embedded: the page file; HBase: every cell of its
    // rows), generation 1's is there, and a restart serves what generation
    // 1 holds.
    assert!(!holds_data(&b, "grow", g0.shards), "generation 0's data is deleted");
    assert!(holds_data(&b, "grow~g1", g1.shards));
    let s = TestServer::start(&b).await;
    assert_eq!(get(&s, "grow").await.generations.len(), 1);
    assert_eq!(count(&absent_of(&s, "grow", &last).await, true), 0);
    // ListDedupers shows the deduper once, never a generation's filter.
    let list = s
        .admin()
        .list_dedupers(pb::ListDedupersRequest {
            client_id: C.into(),
            active_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        list.dedupers.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["grow"]
    );
}

async fn a_second_resize_is_refused_while_the_older_generation_is_live(b: TestBackend) {
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "twice", 1000, 0.01, 60))
        .await
        .unwrap();
    let d = resize(&s, "twice", Some(4000), None).await.unwrap();
    let retire_at = d.generations[0].retire_at_ms.unwrap();
    let refused = resize(&s, "twice", Some(8000), Some(0.001)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused.message().contains(&format!("retires at {retire_at} ms")) && refused.message().contains("in 6"),
        "{}",
        refused.message()
    );
    // The same sizing again changes nothing.
    let same = resize(&s, "twice", Some(4000), None).await.unwrap();
    assert_eq!(same.generations, d.generations);
    // Explicit geometry: both n and p are needed.
    s.admin()
        .create_deduper(create_geom(C, "explicit", 3, 1, 1000, 60))
        .await
        .unwrap();
    let e = resize(&s, "explicit", Some(100), None).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(resize(&s, "explicit", Some(100), Some(0.01)).await.is_ok());
}

async fn a_shrink_gives_its_data_back_once_the_older_generation_retires(mut b: TestBackend) {
    b.settings.storage.embedded.max_memory_mib = 1;
    let expiry = data_checked_expiry(&b, 2);
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "big", 60_000, 0.01, expiry))
        .await
        .unwrap();
    let items = keys("s", 3000);
    add_if_absent_all(&s, "big", &items).await;
    let d = resize(&s, "big", Some(20_000), None).await.expect("shrink");
    let (g0, g1) = (&d.generations[0], &d.generations[1]);
    let bits = |g: &pb::Generation| u64::from(g.shards) * u64::from(g.bits_per_shard);
    assert!(bits(g1) * 2 < bits(g0), "{:?}", d.generations);
    assert_eq!(count(&absent_of(&s, "big", &items).await, true), 0);
    if !is_hbase(&b) {
        // Both generations hold memory: another deduper of the old size does not fit.
        let other = s.admin().create_deduper(create_np(C, "other", 60_000, 0.01, 2)).await;
        assert_eq!(other.unwrap_err().code(), Code::ResourceExhausted);
    }
    // The last writes to generation 0, just before the switch.
    sleep_until(g1.writes_from_ms - 500).await;
    add_if_absent_all(&s, "big", &keys("last-old", 200)).await;
    sleep_until(g0.retire_at_ms.unwrap() - 300).await;
    assert!(holds_data(&b, "big", g0.shards) || !is_hbase(&b));
    sleep_until(g0.retire_at_ms.unwrap() + 1500).await;
    assert_eq!(get(&s, "big").await.generations.len(), 1);
    if is_hbase(&b) {
        assert!(!holds_data(&b, "big", g0.shards), "generation 0's rows are empty");
    } else {
        s.admin()
            .create_deduper(create_np(C, "other", 60_000, 0.01, 2))
            .await
            .expect("fits once the older generation is freed");
    }
    // The smaller generation serves alone.
    let fresh = keys("fresh", 1000);
    add_if_absent_all(&s, "big", &fresh).await;
    assert_eq!(count(&absent_of(&s, "big", &fresh).await, true), 0);
    if is_hbase(&b) {
        assert!(holds_data(&b, "big~g1", g1.shards));
    }
}

async fn never_added_probes_stay_within_twice_p_across_a_resize_and_climb_without_one(b: TestBackend) {
    let s = TestServer::start(&b).await;
    for name in ["resized", "fixed"] {
        s.admin()
            .create_deduper(create_np(C, name, 2000, 0.01, 60))
            .await
            .unwrap();
        add_if_absent_all(&s, name, &keys("first", 2000)).await;
    }
    let d = resize(&s, "resized", Some(20_000), None).await.unwrap();
    sleep_until(d.generations[1].writes_from_ms + 50).await;
    for name in ["resized", "fixed"] {
        add_if_absent_all(&s, name, &keys("second", 4000)).await;
    }
    let probes = keys("never-added", 50_000);
    let resized = count(&absent_of(&s, "resized", &probes).await, false) as f64 / probes.len() as f64;
    let fixed = count(&absent_of(&s, "fixed", &probes).await, false) as f64 / probes.len() as f64;
    // Generation 0 at load 1 (about p) plus generation 1 at load 0.2.
    assert!(resized <= 0.02, "resized: {resized}");
    assert!(resized >= 0.005, "resized: {resized} (generation 0 is still read)");
    // At load 3, the same deduper without a resize: far above.
    assert!(fixed >= 0.15, "fixed: {fixed}");
    // Nothing added is absent in either.
    for name in ["resized", "fixed"] {
        assert_eq!(count(&absent_of(&s, name, &keys("first", 2000)).await, true), 0);
        assert_eq!(count(&absent_of(&s, name, &keys("second", 4000)).await, true), 0);
    }
}

async fn request_id_and_record_id_retries_keep_working_across_a_resize(b: TestBackend) {
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "retry", 1000, 0.01, 60))
        .await
        .unwrap();
    let req = |entities: &[&str], request_id: Option<&[u8]>, record_ids: Vec<&str>| pb::AddIfAbsentRequest {
        client_id: C.into(),
        deduper: "retry".into(),
        entities: ents(entities),
        ttl_ms: 0,
        request_id: request_id.map(|r| r.to_vec().into()),
        record_ids: record_ids.into_iter().map(|r| r.as_bytes().to_vec().into()).collect(),
    };
    let first = s
        .data()
        .add_if_absent(req(&["x", "y"], Some(b"req-1"), vec![]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.absent, [true, true]);
    let with_records = s
        .data()
        .add_if_absent(req(&["r1", "r2"], None, vec!["rec-1", "rec-2"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(with_records.absent, [true, true]);
    let d = resize(&s, "retry", Some(10_000), None).await.unwrap();
    sleep_until(d.generations[1].writes_from_ms + 50).await;
    // The retry answers what the first attempt did, though its bits are
    // now present (in generation 0) and writes go to generation 1.
    let retry = s
        .data()
        .add_if_absent(req(&["x", "y"], Some(b"req-1"), vec![]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(retry.absent, [true, true]);
    // A replay of the same records is absent again; another record of the
    // same entity is a duplicate.
    let replay = s
        .data()
        .add_if_absent(req(&["r1", "r2"], None, vec!["rec-1", "rec-9"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(replay.absent, [true, false]);
    // Without an id: present.
    assert_eq!(
        add_if_absent(&s, C, "retry", &["x", "y", "z"], 0).await,
        [false, false, true]
    );
}

async fn a_restarted_server_retires_the_older_generation_on_time_unasked(b: TestBackend) {
    let expiry = data_checked_expiry(&b, 2);
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "resume", 1000, 0.01, expiry))
        .await
        .unwrap();
    add_if_absent_all(&s, "resume", &keys("k", 500)).await;
    let d = resize(&s, "resume", Some(5000), None).await.unwrap();
    // The last writes to generation 0, just before the switch.
    sleep_until(d.generations[1].writes_from_ms - 500).await;
    add_if_absent_all(&s, "resume", &keys("late", 200)).await;
    s.stop().await;
    let shards = d.generations[0].shards;
    assert!(
        holds_data(&b, "resume", shards),
        "generation 0's bits are kept at shutdown"
    );
    // No call names the deduper after the restart.
    let s = TestServer::start(&b).await;
    sleep_until(d.generations[0].retire_at_ms.unwrap() + 1500).await;
    s.stop().await;
    assert!(!holds_data(&b, "resume", shards), "retired by the restarted server");
    let s = TestServer::start(&b).await;
    assert_eq!(get(&s, "resume").await.generations.len(), 1);
}

async fn the_automatic_policy_resizes_a_deduper_whose_load_stays_high(mut b: TestBackend) {
    b.settings.resize.auto = true;
    b.settings.resize.passes = 2;
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "auto", 1000, 0.01, 60))
        .await
        .unwrap();
    s.admin()
        .create_deduper(create_np(C, "calm", 1000, 0.01, 60))
        .await
        .unwrap();
    let hot = keys("hot", 1500);
    add_if_absent_all(&s, "auto", &hot).await;
    add_if_absent_all(&s, "calm", &keys("calm", 500)).await;
    let d = with_generations(&s, "auto", 2).await;
    assert_eq!(d.generations.len(), 2, "resized by the policy");
    // Sized for 4 x the estimate of about 1,500 live entities, plus at
    // most as much again when the passes saw the load still rising.
    let n = d.generations[1].expected_insertions.unwrap();
    assert!((5000..=14_000).contains(&n), "{n}");
    assert_eq!(count(&absent_of(&s, "auto", &hot).await, true), 0);
    // At load 0.5, the other is left alone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(get(&s, "calm").await.generations.is_empty());
}

#[test]
fn explain_shows_where_a_later_generations_bits_are() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_solus"))
        .args([
            "explain",
            "--shards",
            "3",
            "--hash-functions",
            "4",
            "--bits-per-shard",
            "1000",
        ])
        .args(["--client", "shop", "--deduper", "orders", "--generation", "2", "e-1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["filter"], "orders~g2");
    assert_eq!(got["embedded_page_file"], "filters/shop/orders~g2.bits");
    let shard = solus::contract::hashing::shard_of(b"e-1", 3);
    let row: String = solus::contract::layout::data_row_key(shard, "shop", "orders~g2")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        (got["shard"].as_u64(), got["row_key_hex"].as_str()),
        (Some(u64::from(shard)), Some(row.as_str()))
    );
}

async fn deleting_a_deduper_mid_resize_deletes_every_generation(mut b: TestBackend) {
    b.settings.storage.embedded.max_memory_mib = 1;
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "del", 40_000, 0.01, 60))
        .await
        .unwrap();
    add_if_absent_all(&s, "del", &keys("old", 1000)).await;
    let d = resize(&s, "del", Some(40_001), None).await.unwrap();
    sleep_until(d.generations[1].writes_from_ms + 50).await;
    add_if_absent_all(&s, "del", &keys("new", 1000)).await;
    s.admin()
        .delete_deduper(pb::DeleteDeduperRequest {
            client_id: C.into(),
            name: "del".into(),
            force: true,
        })
        .await
        .unwrap();
    let (g0, g1) = (&d.generations[0], &d.generations[1]);
    assert!(!holds_data(&b, "del", g0.shards) && !holds_data(&b, "del~g1", g1.shards));
    if is_hbase(&b) {
        // The namesake waits for the tombstone: past every delete marker of
        // either generation, whose "until" it names.
        let e = s
            .admin()
            .create_deduper(create_np(C, "del", 40_000, 0.01, 60))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
        let until: i64 = e
            .message()
            .split("until ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let slack = solus::storage::hbase::DELETE_SLACK_MS;
        assert!(until >= g0.retire_at_ms.unwrap() + 2 * slack, "{}", e.message());
        assert!(until >= now_ms() + 60_000 + 2 * slack - 5_000, "{}", e.message());
        return;
    }
    // Both generations' memory is free: two of that size fit again, and a
    // namesake starts empty, without generations.
    s.admin()
        .create_deduper(create_np(C, "del", 40_000, 0.01, 60))
        .await
        .unwrap();
    s.admin()
        .create_deduper(create_np(C, "other", 40_000, 0.01, 60))
        .await
        .unwrap();
    assert!(get(&s, "del").await.generations.is_empty());
    assert_eq!(count(&absent_of(&s, "del", &keys("old", 1000)).await, true), 1000);
    assert_eq!(count(&absent_of(&s, "del", &keys("new", 1000)).await, true), 1000);
}

/// Runs the `solus` CLI against `s`; its stdout, after checking it succeeded.
fn cli(s: &TestServer, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_solus"))
        .args(args)
        .args(["--addr", &s.addr.to_string()])
        .env_remove("SOLUS_ADDR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn the_cli_resizes_and_prints_the_generations(b: TestBackend) {
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "cli", 1000, 0.01, 60))
        .await
        .unwrap();
    let update = ["deduper", "update", "--client", C, "--name", "cli"];
    let out = cli(
        &s,
        &[
            &update[..],
            &["--expected-insertions", "8000", "--false-positive-rate", "0.001"],
        ]
        .concat(),
    );
    let d: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (d["expected_insertions"].as_u64(), d["false_positive_rate"].as_f64()),
        (Some(8000), Some(0.001))
    );
    let gens = d["generations"].as_array().unwrap();
    assert_eq!(gens.len(), 2);
    assert_eq!(
        (gens[0]["filter_name"].as_str(), gens[1]["filter_name"].as_str()),
        (Some("cli"), Some("cli~g1"))
    );
    assert!(gens[0]["retire_at_ms"].as_i64().is_some() && gens[1]["retire_at_ms"].is_null());
    // `deduper stats` gives each generation's figures once a pass counted them.
    figures_after(&s, "cli", now_ms()).await;
    let stats: serde_json::Value =
        serde_json::from_str(cli(&s, &["deduper", "stats", "--client", C, "--name", "cli"]).trim()).unwrap();
    let gens = stats["generations"].as_array().unwrap();
    assert_eq!(gens.len(), 2);
    assert!(
        gens.iter().all(|g| g["stats"]["sampled_bits"].as_u64().is_some()),
        "{stats}"
    );
}

resize_cases!(hbase_only, Some(crate::common::TestBackend::hbase());
    the_generations_are_in_c_ver_and_a_replica_before_them_refuses_the_deduper,
    a_retirement_waits_while_the_deduper_is_inactive,
    a_retirement_interrupted_after_deleting_the_rows_completes_on_the_next_pass,
);
resize_cases!(real_hbase_only, crate::common::TestBackend::real_hbase();
    the_generations_are_in_c_ver_and_a_replica_before_them_refuses_the_deduper,
    a_retirement_waits_while_the_deduper_is_inactive,
);

/// The `C:ver` cell of `name`'s meta row, to an independent Thrift client.
fn raw_version_cell(b: &TestBackend, name: &str) -> Vec<u8> {
    let row = solus::contract::layout::meta_row_key(C, name);
    let table = solus::contract::layout::meta_table(C).into_bytes();
    let rows = b.raw_thrift().get_row(table, row, Default::default()).unwrap();
    rows[0].columns.as_ref().unwrap()[&b"C:ver".to_vec()]
        .value
        .clone()
        .unwrap()
}

/// How every Solus before generations decodes `C:ver` (commit 13b65fc,
/// `codec::decode_version` and its caller's error, verbatim): exactly 17
/// bytes, else the config is refused naming the column.
fn decode_version_before_generations(v: &[u8]) -> Result<(i64, bool, u64), String> {
    if v.len() != 17 {
        return Err(format!(
            "deduper config of {C:?}: column C:ver holds {} bytes, expected 17",
            v.len()
        ));
    }
    let utime = i64::from_be_bytes(v[0..8].try_into().unwrap());
    let expiry = i64::from_be_bytes(v[9..17].try_into().unwrap());
    Ok((utime, v[8] != 0, expiry as u64))
}

/// Mixed-version replicas on HBase: the generations go into `C:ver` after
/// its 17 bytes, which a replica from before generations refuses, naming
/// the column, instead of reading only generation 0; a deduper never
/// resized keeps the 17-byte cell it always had.
async fn the_generations_are_in_c_ver_and_a_replica_before_them_refuses_the_deduper(b: TestBackend) {
    let s = TestServer::start(&b).await;
    for name in ["plain", "resized"] {
        s.admin()
            .create_deduper(create_np(C, name, 1000, 0.01, 60))
            .await
            .unwrap();
    }
    s.admin()
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: C.into(),
            name: "plain".into(),
            expiry_seconds: Some(120),
            ..Default::default()
        })
        .await
        .unwrap();
    let plain = raw_version_cell(&b, "plain");
    assert_eq!(plain.len(), 17, "never resized: the cell as before generations");
    assert_eq!(decode_version_before_generations(&plain).unwrap().2, 120);
    let d = resize(&s, "resized", Some(10_000), None).await.unwrap();
    let ver = raw_version_cell(&b, "resized");
    assert!(ver.len() > 18, "{} bytes", ver.len());
    assert_eq!(ver[17], solus::storage::hbase::GENERATIONS_V1);
    let gens: serde_json::Value = serde_json::from_slice(&ver[18..]).unwrap();
    let ids: Vec<u64> = gens
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [0, 1]);
    assert_eq!(
        gens[1]["writes_from_ms"].as_i64(),
        Some(d.generations[1].writes_from_ms)
    );
    assert_eq!(
        gens[1]["geometry"]["bits_per_shard"].as_u64(),
        Some(u64::from(d.generations[1].bits_per_shard))
    );
    let refused = decode_version_before_generations(&ver).unwrap_err();
    assert!(refused.contains("C:ver"), "{refused}");
    // This version reads it back whole, from a fresh server (no cache).
    s.stop().await;
    let s = TestServer::start(&b).await;
    let back = get(&s, "resized").await;
    assert_eq!(back.generations, d.generations);
    assert_eq!(back.bits_per_shard, d.generations[1].bits_per_shard);
}

async fn set_active(s: &TestServer, name: &str, active: bool) {
    s.admin()
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: C.into(),
            name: name.into(),
            active: Some(active),
            ..Default::default()
        })
        .await
        .unwrap();
}

/// An inactive deduper's older generation is not retired on HBase (what
/// keeps a retirement's delete markers below the tombstone of a delete
/// that follows the deactivation, `lifecycle.rs`); it is retired once the
/// deduper is active again. Nothing in it is read after `retire_at_ms`.
async fn a_retirement_waits_while_the_deduper_is_inactive(b: TestBackend) {
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "idle", 1000, 0.01, data_checked_expiry(&b, 2)))
        .await
        .unwrap();
    let d = resize(&s, "idle", Some(5000), None).await.unwrap();
    // The last writes to generation 0, just before the switch.
    sleep_until(d.generations[1].writes_from_ms - 500).await;
    add_if_absent_all(&s, "idle", &keys("k", 300)).await;
    set_active(&s, "idle", false).await;
    let retire_at = d.generations[0].retire_at_ms.unwrap();
    sleep_until(retire_at + 1500).await;
    assert_eq!(get(&s, "idle").await.generations.len(), 2, "not retired while inactive");
    assert!(holds_data(&b, "idle", d.generations[0].shards));
    set_active(&s, "idle", true).await;
    let gens = with_generations(&s, "idle", 1).await.generations.len();
    assert_eq!(gens, 1, "retired once active");
    assert!(!holds_data(&b, "idle", d.generations[0].shards));
}

/// A retirement deletes the generation's rows first, then stores the
/// config without it: interrupted in between (here every compare-and-set
/// fails), the generation stays in the config with its rows empty, reads
/// stay correct (it is past `retire_at_ms`, so no longer read), and the
/// next pass after HBase answers again deletes the rows again and drops it.
async fn a_retirement_interrupted_after_deleting_the_rows_completes_on_the_next_pass(b: TestBackend) {
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "cut", 1000, 0.01, data_checked_expiry(&b, 2)))
        .await
        .unwrap();
    let d = resize(&s, "cut", Some(5000), None).await.unwrap();
    let (g0, g1) = (&d.generations[0], &d.generations[1]);
    sleep_until(g1.writes_from_ms - 500).await;
    let old = keys("old", 300);
    add(&s, C, "cut", &old.iter().map(String::as_str).collect::<Vec<_>>(), 0).await;
    sleep_until(g1.writes_from_ms + 50).await;
    let new = keys("new", 300);
    add(&s, C, "cut", &new.iter().map(String::as_str).collect::<Vec<_>>(), 0).await;
    sleep_until(g0.retire_at_ms.unwrap() - 300).await;
    assert!(holds_data(&b, "cut", g0.shards));
    // Add takes no compare-and-set: only the retirement's fails.
    b.emulator().fail_calls("checkAndPut", 1_000_000);
    sleep_until(g0.retire_at_ms.unwrap() + 1500).await;
    assert!(!holds_data(&b, "cut", g0.shards), "rows deleted first");
    let stuck = get(&s, "cut").await;
    assert_eq!(
        stuck.generations.len(),
        2,
        "config not stored: the generation is still listed"
    );
    let fresh = keys("fresh", 100);
    add(&s, C, "cut", &fresh.iter().map(String::as_str).collect::<Vec<_>>(), 0).await;
    assert_eq!(count(&absent_of(&s, "cut", &fresh).await, true), 0);
    b.emulator().fail_calls("checkAndPut", 0);
    let gens = with_generations(&s, "cut", 1).await.generations.len();
    assert_eq!(gens, 1, "the next pass completes the retirement");
    assert!(holds_data(&b, "cut~g1", g1.shards));
    assert_eq!(count(&absent_of(&s, "cut", &fresh).await, true), 0);
}

resize_cases!(embedded_only, Some(crate::common::TestBackend::embedded());
    the_union_estimate_matches_the_measured_false_positive_rate_in_a_transition,
);

/// Issue 22, "Visibility": during a transition the deduper's estimated
/// false-positive rate is that of a read of both generations, `1 - (1 -
/// r0)(1 - r1)`, and a measurement agrees with it: generation 0 over its n
/// (load 1.5), generation 1 at its n, 40,000 never-added probes. Their
/// present fraction is within 4 standard errors of the estimate (binomial,
/// sqrt(r (1 - r) / 40,000)), and clearly above either generation's own rate.
async fn the_union_estimate_matches_the_measured_false_positive_rate_in_a_transition(b: TestBackend) {
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "union", 2000, 0.01, 3600))
        .await
        .unwrap();
    add_if_absent_all(&s, "union", &keys("old", 3000)).await;
    let d = resize(&s, "union", Some(3000), None).await.expect("resize");
    sleep_until(d.generations[1].writes_from_ms + 50).await;
    add_if_absent_all(&s, "union", &keys("new", 3000)).await;
    let f = figures_after(&s, "union", now_ms()).await;
    let rate = |g: &pb::Generation| g.stats.as_ref().unwrap().estimated_false_positive_rate;
    let (r0, r1) = (rate(&f.generations[0]), rate(&f.generations[1]));
    let union = f.stats.as_ref().unwrap().estimated_false_positive_rate;
    assert!(
        (union - (1.0 - (1.0 - r0) * (1.0 - r1))).abs() < 1e-12,
        "{union} vs {r0}, {r1}"
    );
    assert!(r0 > 0.03 && r1 > 0.005, "both generations carry weight: {r0}, {r1}");
    let probes = keys("never", 40_000);
    let present = count(&absent_of(&s, "union", &probes).await, false) as f64 / probes.len() as f64;
    let sigma = (union * (1.0 - union) / probes.len() as f64).sqrt();
    println!("generations {r0:.4}, {r1:.4}: estimated union {union:.4}, measured {present:.4} (sigma {sigma:.4})");
    assert!(
        (present - union).abs() <= 4.0 * sigma,
        "measured {present:.4} vs estimated union {union:.4} (sigma {sigma:.4}; generations {r0:.4}, {r1:.4})"
    );
    assert!(
        present > r0.max(r1) + 4.0 * sigma,
        "the union, not one generation: {present:.4}"
    );
}
