//! Deduper lifecycle and visibility: DeleteDeduper, and the live figures
//! (fill, estimated live entities, estimated false-positive rate) against
//! the truth at 1x, 2x and 5x the sized n, and after the TTL.

use std::time::Duration;

use solus::api::pb;
use tonic::Code;

use crate::common::*;

fn is_hbase(b: &TestBackend) -> bool {
    b.emulator.is_some() || b.real.is_some()
}

fn get_req(client: &str, name: &str) -> pb::GetDeduperRequest {
    pb::GetDeduperRequest {
        client_id: client.into(),
        name: name.into(),
    }
}

pub async fn delete_deduper_refuses_active_then_removes_everything(b: &TestBackend) {
    let s = TestServer::start(b).await;
    let mut admin = s.admin();
    admin
        .create_deduper(create_np("c", "old", 10_000, 0.01, 60))
        .await
        .unwrap();
    admin
        .create_deduper(create_np("c", "kept", 10_000, 0.01, 60))
        .await
        .unwrap();
    add(&s, "c", "old", &["a", "b"], 0).await;
    add(&s, "c", "kept", &["a"], 0).await;

    let e = admin.delete_deduper(delete_req("c", "old", false)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains("force"), "{}", e.message());
    assert_eq!(
        absent(&s, "c", "old", &["a"]).await,
        [false],
        "a refused delete changes nothing"
    );

    let deleted = admin
        .delete_deduper(delete_req("c", "old", true))
        .await
        .unwrap()
        .into_inner()
        .deleted
        .unwrap();
    assert_eq!(
        (deleted.name.as_str(), deleted.expected_insertions),
        ("old", Some(10_000))
    );
    let again = admin.delete_deduper(delete_req("c", "old", true)).await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound, "{}", again.message());
    assert_eq!(
        admin.get_deduper(get_req("c", "old")).await.unwrap_err().code(),
        Code::NotFound
    );
    let names: Vec<String> = admin
        .list_dedupers(pb::ListDedupersRequest {
            client_id: "c".into(),
            active_only: false,
        })
        .await
        .unwrap()
        .into_inner()
        .dedupers
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["kept"]);
    // The engine's config cache forgot it: data calls are NOT_FOUND at once.
    let data = s
        .data()
        .check_absence(pb::CheckAbsenceRequest {
            record_ids: Vec::new(),
            client_id: "c".into(),
            deduper: "old".into(),
            entities: ents(&["a"]),
        })
        .await
        .unwrap_err();
    assert_eq!(data.code(), Code::NotFound, "{}", data.message());
    assert_eq!(
        absent(&s, "c", "kept", &["a"]).await,
        [false],
        "other dedupers keep their bits"
    );

    // Deactivated first, no force is needed.
    admin.update_deduper(deactivate("c", "kept")).await.unwrap();
    admin.delete_deduper(delete_req("c", "kept", false)).await.unwrap();

    let recreated = admin.create_deduper(create_np("c", "old", 10_000, 0.01, 60)).await;
    if is_hbase(b) {
        // HBase keeps the delete markers that hide the old bits until they
        // expire; a namesake's bits would be hidden too until then.
        let e = recreated.unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
        assert!(e.message().contains("another name"), "{}", e.message());
    } else {
        recreated.unwrap();
        assert_eq!(
            absent(&s, "c", "old", &["a", "b"]).await,
            [true, true],
            "a namesake starts empty"
        );
    }
    let bad = admin
        .delete_deduper(delete_req("c", "no such/name", true))
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument, "{}", bad.message());
}

/// Waits until the server's figures of `name` were computed after `after_ms`.
pub async fn fresh_stats(s: &TestServer, client: &str, name: &str, after_ms: i64) -> pb::DeduperStats {
    for _ in 0..1200 {
        let d = s.admin().get_deduper(get_req(client, name)).await.unwrap().into_inner();
        if let Some(st) = d.stats
            && st.computed_at_ms > after_ms
        {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no statistics of {client}/{name} computed after {after_ms} within 60 s");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Fraction of `probes` never-added entities (fixed names) reported present.
async fn measured_fpr(s: &TestServer, name: &str, probes: usize) -> f64 {
    let mut present = 0usize;
    let mut data = s.data();
    for start in (0..probes).step_by(10_000) {
        let batch: Vec<String> = (start..(start + 10_000).min(probes))
            .map(|i| format!("probe-{i}"))
            .collect();
        present += absent_all(&mut data, "c", name, &batch)
            .await
            .iter()
            .filter(|a| !**a)
            .count();
    }
    present as f64 / probes as f64
}

async fn add_range(s: &TestServer, name: &str, from: usize, to: usize, ttl_ms: u64) {
    for start in (from..to).step_by(10_000) {
        let batch: Vec<String> = (start..(start + 10_000).min(to))
            .map(|i| format!("entity-{i}"))
            .collect();
        s.data()
            .add(pb::AddRequest {
                client_id: "c".into(),
                deduper: name.into(),
                entities: ents(&batch),
                ttl_ms,
                request_id: None,
            })
            .await
            .unwrap();
    }
}

/// The live figures at 1x, 2x and 5x the sized n = 20,000 (p = 1%), with
/// fixed entity names: estimated live entities within 5% of the truth
/// (embedded: exact count; HBase: a sample of 65,536 of the 191,702 bits,
/// within 4 reported standard errors plus 1% more), estimated
/// false-positive rate within 10% of the rate measured on 200,000
/// never-added entities.
pub async fn stats_estimate_live_entities_and_fpr(b: &TestBackend) {
    let mut settings = b.settings.clone();
    settings.stats.refresh_interval_ms = 100;
    let s = TestServer::start_with(settings).await;
    let n = 20_000usize;
    let d = s
        .admin()
        .create_deduper(create_np("c", "load", n as u64, 0.01, 3600))
        .await
        .unwrap()
        .into_inner();
    let m = u64::from(d.shards) * u64::from(d.bits_per_shard);
    let empty = fresh_stats(&s, "c", "load", 0).await;
    assert_eq!(
        (
            empty.set_bits,
            empty.estimated_entities,
            empty.estimated_false_positive_rate
        ),
        (0, 0.0, 0.0)
    );
    let mut loaded = 0;
    for factor in [1usize, 2, 5] {
        add_range(&s, "load", loaded, factor * n, 0).await;
        loaded = factor * n;
        let st = fresh_stats(&s, "c", "load", now_ms()).await;
        let truth = loaded as f64;
        let error = (st.estimated_entities - truth) / truth;
        let bound = if is_hbase(b) {
            assert_eq!(st.sampled_bits, 65_536.min(m));
            (4.0 * st.estimated_entities_relative_error + 0.01).min(0.05)
        } else {
            assert_eq!((st.sampled_bits, st.estimated_entities_relative_error), (m, 0.0));
            0.05
        };
        let measured = measured_fpr(&s, "load", 200_000).await;
        let fpr_error = (st.estimated_false_positive_rate - measured) / measured;
        eprintln!(
            "{} {factor}x: fill {:.4}, n* {:.0} vs {loaded} ({:+.2}%, bound {:.2}%, sampled {} of {m} bits, \
             reported sigma {:.3}%), load {:.3}; FPR estimated {:.5} vs measured {measured:.5} ({:+.2}%)",
            b.name,
            st.fill_ratio,
            st.estimated_entities,
            error * 100.0,
            bound * 100.0,
            st.sampled_bits,
            st.estimated_entities_relative_error * 100.0,
            st.load.unwrap(),
            st.estimated_false_positive_rate,
            fpr_error * 100.0
        );
        assert!(
            error.abs() <= bound,
            "{factor}x: n* {} vs {loaded}",
            st.estimated_entities
        );
        assert!((st.load.unwrap() - st.estimated_entities / n as f64).abs() < 1e-9);
        assert!(
            fpr_error.abs() <= 0.10,
            "{factor}x: FPR {} vs measured {measured}",
            st.estimated_false_positive_rate
        );
        assert!((st.fill_ratio - st.set_bits as f64 / st.sampled_bits as f64).abs() < 1e-12);
    }
}

/// Once the TTL of every entity has passed, fill, estimated entities and
/// estimated false-positive rate read zero.
pub async fn stats_fall_to_zero_after_the_ttl(b: &TestBackend) {
    let mut settings = b.settings.clone();
    settings.stats.refresh_interval_ms = 100;
    let s = TestServer::start_with(settings).await;
    s.admin()
        .create_deduper(create_np("c", "short", 2_000, 0.01, 60))
        .await
        .unwrap();
    // 5 s: room for a statistics pass on a slow real HBase before expiry.
    add_range(&s, "short", 0, 2_000, 5_000).await;
    let added = now_ms();
    let live = fresh_stats(&s, "c", "short", added).await;
    assert!(
        live.set_bits > 0 && live.estimated_entities > 1_500.0,
        "figures while live: {live:?}"
    );
    // Expiry is rounded up to the second by the embedded store.
    tokio::time::sleep(Duration::from_millis(6_200).saturating_sub(Duration::from_millis((now_ms() - added) as u64)))
        .await;
    let gone = fresh_stats(&s, "c", "short", now_ms()).await;
    assert_eq!(
        (
            gone.set_bits,
            gone.fill_ratio,
            gone.estimated_entities,
            gone.estimated_false_positive_rate
        ),
        (0, 0.0, 0.0, 0.0),
        "{gone:?}"
    );
    assert_eq!(gone.load, Some(0.0));
}
