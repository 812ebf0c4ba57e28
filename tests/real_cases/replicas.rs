//! Three Solus replicas on one real HBase: an add through one is seen
//! through the others at once, a deduper created on one is usable on the
//! others (and an update reaches them within the config cache's 2 s), and
//! the cross-replica AddIfAbsent race: many clients adding the same fresh
//! entities through different replicas at once. With the guard
//! (`storage.hbase.add_if_absent_guard`, default) no entity is answered
//! "absent" twice; without it the race is measured and printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use solus::api::pb;
use tonic::Code;

use crate::common::*;

/// Entities answered "absent" more than once, when `clients` clients each
/// send every one of `entities` fresh entities by AddIfAbsent, in batches of
/// `batch`, client i through replica i mod 3, all at once. Also the wall time.
async fn race(
    replicas: &[TestServer],
    deduper: &str,
    entities: usize,
    clients: usize,
    batch: usize,
) -> (usize, Duration) {
    let items: Vec<String> = (0..entities).map(|i| format!("{deduper}-e{i}")).collect();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut data = replicas[c % replicas.len()].data();
        // Every client sends the same batches in the same order: as close a
        // race as the network allows.
        let mine = items.clone();
        let deduper = deduper.to_string();
        tasks.push(tokio::spawn(async move {
            let mut firsts = Vec::new();
            for chunk in mine.chunks(batch) {
                let req = pb::AddIfAbsentRequest {
                    record_ids: Vec::new(),
                    client_id: "c".into(),
                    deduper: deduper.clone(),
                    entities: ents(chunk),
                    ..Default::default()
                };
                let absent = data.add_if_absent(req).await.expect("AddIfAbsent").into_inner().absent;
                firsts.extend(chunk.iter().zip(absent).filter(|(_, a)| *a).map(|(e, _)| e.clone()));
            }
            firsts
        }));
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        for e in t.await.unwrap() {
            *counts.entry(e).or_default() += 1;
        }
    }
    let elapsed = start.elapsed();
    assert!(counts.len() <= entities);
    (counts.values().filter(|&&n| n > 1).count(), elapsed)
}

async fn replicas_of(b: &TestBackend) -> Vec<TestServer> {
    let mut out = Vec::new();
    for _ in 0..3 {
        out.push(TestServer::start(b).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_one_hbase_and_the_add_if_absent_guard_closes_the_race() {
    let Some(mut b) = TestBackend::real_hbase() else { return };
    let r = replicas_of(&b).await;
    r[0].admin()
        .create_deduper(create_np("c", "shared", 100_000, 0.001, 3600))
        .await
        .unwrap();
    // Created on one, used on the others at once (a missing deduper is never cached).
    assert_eq!(add(&r[1], "c", "shared", &["a", "b"], 0).await, 2);
    assert_eq!(
        absent(&r[2], "c", "shared", &["a", "b", "z"]).await,
        [false, false, true]
    );
    assert_eq!(add_if_absent(&r[0], "c", "shared", &["b", "y"], 0).await, [false, true]);
    assert_eq!(absent(&r[1], "c", "shared", &["y"]).await, [false]);
    // Switched off on one: the others refuse within the config cache's 2 s.
    r[0].admin()
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: "c".into(),
            name: "shared".into(),
            active: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    for replica in &r {
        let err = replica
            .data()
            .check_absence(pb::CheckAbsenceRequest {
                record_ids: Vec::new(),
                client_id: "c".into(),
                deduper: "shared".into(),
                entities: ents(&["a"]),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    }

    // The race, guard on (the default): no entity "absent" twice.
    for (name, guard) in [("guarded", true), ("unguarded", false)] {
        b.settings.storage.hbase.add_if_absent_guard = guard;
        let r = replicas_of(&b).await;
        let (mut doubles, mut took) = (0, Duration::ZERO);
        for round in 0..3 {
            // A fresh deduper, so every entity is new.
            let deduper = format!("{name}{round}");
            r[0].admin()
                .create_deduper(create_np("c", &deduper, 1_000_000, 0.001, 3600))
                .await
                .unwrap();
            let (d, t) = race(&r, &deduper, 600, 6, 20).await;
            doubles += d;
            took += t;
        }
        eprintln!(
            "AddIfAbsent race, guard {guard}: 3 rounds of 6 clients x 600 entities over 3 replicas: \
             {doubles} entities answered absent twice; {took:.1?} in all"
        );
        if guard {
            assert_eq!(doubles, 0, "the guard lets no entity be answered absent twice");
        }
    }
}
