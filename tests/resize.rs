//! Online resize by generations (issue 22), on the embedded store, through
//! the real server: no false negative across a resize, writes moving to the
//! successor at `writes_from_ms`, the older generation retired on time with
//! its memory and page file gone, the false-positive rate of never-added
//! probes, `request_id` and record-id retries across a resize, one
//! transition at a time, and shrinking.

mod common;

use std::time::Duration;

use common::*;
use solus::api::pb;
use tonic::Code;

const C: &str = "client-r";

fn backend() -> TestBackend {
    let mut b = TestBackend::embedded();
    b.settings.stats.refresh_interval_ms = 100;
    b.settings.storage.embedded.checkpoint_interval_ms = 100;
    b
}

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

fn count(v: &[bool], value: bool) -> usize {
    v.iter().filter(|&&b| b == value).count()
}

#[tokio::test]
async fn a_grown_deduper_loses_nothing_moves_its_writes_and_retires_the_old_generation_on_time() {
    let b = backend();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "grow", 1000, 0.01, 3))
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
    // Grace: the 1 s margin alone on the embedded store (no other process
    // shares it, so no config cache to wait out, and no clock bound).
    assert_eq!(g1.writes_from_ms, g1.created_ms + 1000);
    // The last write may reach generation 0 one grace after that, and it
    // holds 3 s of expiry.
    assert_eq!(g0.retire_at_ms, Some(g1.writes_from_ms + 1000 + 3000));
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
    let dir = b.data_path().join("filters").join(C);
    assert!(dir.join("grow.bits").exists(), "generation 0's pages were saved");
    sleep_until(retire_at + 1500).await;
    let d = get(&s, "grow").await;
    assert_eq!(d.generations.iter().map(|g| g.id).collect::<Vec<_>>(), [1]);
    assert_eq!(d.generations[0].retire_at_ms, None);
    // Still serving from generation 1: a fresh add is present.
    let last = keys("last", 100);
    add_if_absent_all(&s, "grow", &last).await;
    assert_eq!(count(&absent_of(&s, "grow", &last).await, true), 0);
    s.stop().await;
    // Its page file is gone, generation 1's is there, and a restart serves
    // what generation 1 holds.
    assert!(!dir.join("grow.bits").exists(), "generation 0's page file is deleted");
    assert!(dir.join("grow~g1.bits").exists());
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

#[tokio::test]
async fn a_second_resize_is_refused_while_the_older_generation_is_live() {
    // The backend owns the data directory: kept to the end.
    let b = backend();
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

#[tokio::test]
async fn a_shrink_gives_its_memory_back_once_the_older_generation_retires() {
    let mut b = backend();
    b.settings.storage.embedded.max_memory_mib = 1;
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "big", 60_000, 0.01, 2))
        .await
        .unwrap();
    let items = keys("s", 3000);
    add_if_absent_all(&s, "big", &items).await;
    let d = resize(&s, "big", Some(20_000), None).await.expect("shrink");
    let bits = |g: &pb::Generation| u64::from(g.shards) * u64::from(g.bits_per_shard);
    assert!(
        bits(&d.generations[1]) * 2 < bits(&d.generations[0]),
        "{:?}",
        d.generations
    );
    assert_eq!(count(&absent_of(&s, "big", &items).await, true), 0);
    // Both generations hold memory: another deduper of the old size does not fit.
    let other = s.admin().create_deduper(create_np(C, "other", 60_000, 0.01, 2)).await;
    assert_eq!(other.unwrap_err().code(), Code::ResourceExhausted);
    sleep_until(d.generations[0].retire_at_ms.unwrap() + 1500).await;
    assert_eq!(get(&s, "big").await.generations.len(), 1);
    s.admin()
        .create_deduper(create_np(C, "other", 60_000, 0.01, 2))
        .await
        .expect("fits once the older generation is freed");
}

#[tokio::test]
async fn never_added_probes_stay_within_twice_p_across_a_resize_and_climb_without_one() {
    // The backend owns the data directory: kept to the end.
    let b = backend();
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

#[tokio::test]
async fn request_id_and_record_id_retries_keep_working_across_a_resize() {
    // The backend owns the data directory: kept to the end.
    let b = backend();
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

#[tokio::test]
async fn a_store_that_keeps_no_generations_refuses_a_resize_and_changes_nothing() {
    // HBase (here its emulator) does not record generations yet.
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "h", 1000, 0.01, 60))
        .await
        .unwrap();
    let e = resize(&s, "h", Some(10_000), None).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(
        e.message().contains("not supported on the hbase store"),
        "{}",
        e.message()
    );
    let d = get(&s, "h").await;
    assert_eq!((d.expected_insertions, d.generations.len()), (Some(1000), 0));
}

#[tokio::test]
async fn a_restarted_server_retires_the_older_generation_on_time_unasked() {
    let b = backend();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np(C, "resume", 1000, 0.01, 2))
        .await
        .unwrap();
    add_if_absent_all(&s, "resume", &keys("k", 500)).await;
    let d = resize(&s, "resume", Some(5000), None).await.unwrap();
    s.stop().await;
    let file = b.data_path().join("filters").join(C).join("resume.bits");
    assert!(file.exists(), "generation 0's pages are saved at shutdown");
    // No call names the deduper after the restart.
    let s = TestServer::start(&b).await;
    sleep_until(d.generations[0].retire_at_ms.unwrap() + 1500).await;
    s.stop().await;
    assert!(!file.exists(), "retired by the restarted server");
    let s = TestServer::start(&b).await;
    assert_eq!(get(&s, "resume").await.generations.len(), 1);
}

#[tokio::test]
async fn the_automatic_policy_resizes_a_deduper_whose_load_stays_high() {
    let mut b = backend();
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
    let mut d = get(&s, "auto").await;
    for _ in 0..200 {
        if d.generations.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        d = get(&s, "auto").await;
    }
    assert_eq!(d.generations.len(), 2, "resized by the policy");
    // Sized for 4 x the estimate of about 1,500 live entities.
    let n = d.generations[1].expected_insertions.unwrap();
    assert!((5000..=7000).contains(&n), "{n}");
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

#[tokio::test]
async fn deleting_a_deduper_mid_resize_deletes_every_generation() {
    let mut b = backend();
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
    let dir = b.data_path().join("filters").join(C);
    assert!(!dir.join("del.bits").exists() && !dir.join("del~g1.bits").exists());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_resizes_and_prints_the_generations() {
    let b = backend();
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
