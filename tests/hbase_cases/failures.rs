//! Issue 9 on HBase: faults between the read and the write of an
//! AddIfAbsent and between the split write calls of one request, concurrent
//! updates through several replicas, a changed `storage.table`, and slow
//! storage with callers that give up.

use std::time::{Duration, Instant};

use solus::api::pb;
use tonic::Code;

use crate::common::*;

fn aia(deduper: &str, items: &[String], id: &[u8]) -> pb::AddIfAbsentRequest {
    pb::AddIfAbsentRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: deduper.into(),
        entities: ents(items),
        ttl_ms: 0,
        request_id: Some(prost::bytes::Bytes::copy_from_slice(id)),
    }
}

/// The read succeeds, the write fails: the retry with the same request_id
/// answers "absent" for every entity (the first answer), never "present".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_a_fault_between_read_and_write_reports_first_occurrences() {
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 100_000, 0.001, 600))
        .await
        .unwrap();
    let items: Vec<String> = (0..300).map(|i| format!("fresh-{i}")).collect();
    // The write fails on each attempt the pool makes (retries included).
    b.emulator().fail_calls("mutateRowsTs", 10);
    let err = s.data().add_if_absent(aia("d", &items, b"r-1")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    // Storage being unavailable is transient: google.rpc.RetryInfo tells clients to retry.
    assert!(solus::api::is_transient(&err), "storage failure without RetryInfo");
    b.emulator().fail_calls("mutateRowsTs", 0);
    let retry = s
        .data()
        .add_if_absent(aia("d", &items, b"r-1"))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert!(
        retry.iter().all(|&a| a),
        "first occurrences are reported absent on retry"
    );
    assert!(
        absent(&s, "c", "d", &items.iter().map(String::as_str).collect::<Vec<_>>())
            .await
            .iter()
            .all(|&a| !a)
    );
}

/// One request split into several `mutateRowsTs` calls (small
/// `max_request_bytes`), one of which fails: some bits are written, some
/// not. The retry still answers every first occurrence as absent - on this
/// replica or another one - and completes the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_a_half_written_request_on_another_replica() {
    let mut b = TestBackend::hbase();
    b.settings.storage.hbase.max_request_bytes = 4096;
    b.settings.storage.hbase.retries = 0;
    let s1 = TestServer::start(&b).await;
    let s2 = TestServer::start(&b).await;
    s1.admin()
        .create_deduper(create_np("c", "d", 100_000, 0.001, 600))
        .await
        .unwrap();
    let items: Vec<String> = (0..400).map(|i| format!("split-{i}")).collect();
    b.emulator().reset_counts();
    b.emulator().fail_calls("mutateRowsTs", 1);
    let err = s1.data().add_if_absent(aia("d", &items, b"r-2")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    assert!(
        b.emulator().calls("mutateRowsTs") > 1,
        "the request was split into several writes"
    );
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    let partial = absent(&s2, "c", "d", &refs).await;
    assert!(
        partial.iter().any(|&a| !a),
        "half written: some entities already look present"
    );
    let retry = s2
        .data()
        .add_if_absent(aia("d", &items, b"r-2"))
        .await
        .unwrap()
        .into_inner()
        .absent;
    assert!(
        retry.iter().all(|&a| a),
        "the retry on another replica answers the first answer"
    );
    assert!(
        absent(&s1, "c", "d", &refs).await.iter().all(|&a| !a),
        "and completed the writes"
    );
}

/// Reproduction 2 through replicas: concurrent updaters on three servers
/// sharing one HBase; every acknowledged change is in the stored config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_through_replicas_lose_nothing() {
    let b = TestBackend::hbase();
    let replicas = [
        TestServer::start(&b).await,
        TestServer::start(&b).await,
        TestServer::start(&b).await,
    ];
    replicas[0]
        .admin()
        .create_deduper(create_np("c", "u", 1000, 0.01, 100))
        .await
        .unwrap();
    let upd = |active, expiry| pb::UpdateDeduperRequest {
        client_id: "c".into(),
        name: "u".into(),
        active,
        expiry_seconds: expiry,
        expected_insertions: None,
        false_positive_rate: None,
    };
    for round in 0..20u64 {
        replicas[0]
            .admin()
            .update_deduper(upd(Some(true), Some(100)))
            .await
            .unwrap();
        let (mut a, mut e, mut f) = (replicas[0].admin(), replicas[1].admin(), replicas[2].admin());
        let (r1, r2, r3) = tokio::join!(
            a.update_deduper(upd(Some(false), None)),
            e.update_deduper(upd(None, Some(300 + round))),
            f.update_deduper(upd(None, Some(300 + round))),
        );
        r1.unwrap();
        r2.unwrap();
        r3.unwrap();
        let got = replicas[(round % 3) as usize]
            .admin()
            .get_deduper(pb::GetDeduperRequest {
                client_id: "c".into(),
                name: "u".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !got.active && got.expiry_seconds == 300 + round,
            "round {round}: {got:?}"
        );
    }
}

/// Reproduction 7: restarting with another `storage.table` must not serve
/// the dedupers empty; their data calls name the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_data_table_refuses_the_deduper_instead_of_serving_it_empty() {
    let mut b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 1000, 0.01, 600))
        .await
        .unwrap();
    add(&s, "c", "d", &["seen"], 0).await;
    s.stop().await;
    b.settings.storage.table = "other_table".into();
    let s = TestServer::start(&b).await;
    let err = s
        .data()
        .check_absence(pb::CheckAbsenceRequest {
            record_ids: Vec::new(),
            client_id: "c".into(),
            deduper: "d".into(),
            entities: ents(&["seen"]),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(
        err.message().contains("storage.table") && err.message().contains("solus_deduper"),
        "{}",
        err.message()
    );
    // Health shows it too, per deduper; the replica itself stays ready.
    let service = solus::server::misplaced_health_service("c", "d");
    let mut health = tonic_health::pb::health_client::HealthClient::new(s.channel.clone());
    let status = |r: tonic_health::pb::HealthCheckResponse| r.status;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let req = tonic_health::pb::HealthCheckRequest {
            service: service.clone(),
        };
        if let Ok(r) = health.check(req).await
            && status(r.into_inner()) == tonic_health::pb::health_check_response::ServingStatus::NotServing as i32
        {
            break;
        }
        assert!(Instant::now() < deadline, "{service} never reported NOT_SERVING");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        crate::hbase_shared::data_health(&s).await,
        tonic_health::pb::health_check_response::ServingStatus::Serving,
        "the other dedupers are still served"
    );
    s.stop().await;
    b.settings.storage.table = "solus_deduper".into();
    let s = TestServer::start(&b).await;
    assert_eq!(
        absent(&s, "c", "d", &["seen"]).await,
        [false],
        "back with the right setting"
    );
}

/// Reproduction 6: HBase answering in 1 s, 4 callers sending Adds with a
/// 50 ms deadline for 3 s; the next fresh CheckAbsence with a 5 s deadline
/// is served at the normal latency of the slow HBase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_requests_do_not_starve_the_next_one() {
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("c", "d", 100_000, 0.01, 600))
        .await
        .unwrap();
    b.emulator().set_latency(Duration::from_millis(1000));
    let until = Instant::now() + Duration::from_secs(3);
    let burst: Vec<_> = (0..4)
        .map(|t| {
            let mut data = s.data();
            tokio::spawn(async move {
                let mut i = 0;
                while Instant::now() < until {
                    let mut req = tonic::Request::new(pb::AddRequest {
                        client_id: "c".into(),
                        deduper: "d".into(),
                        entities: ents(&[format!("burst-{t}-{i}")]),
                        ttl_ms: 0,
                        request_id: None,
                    });
                    req.set_timeout(Duration::from_millis(50));
                    let _ = data.add(req).await;
                    i += 1;
                }
            })
        })
        .collect();
    for t in burst {
        t.await.unwrap();
    }
    // Every caller of the burst has gone: no Thrift call may start for them
    // any more (calls already inside the emulator were counted before).
    b.emulator().reset_counts();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = b.emulator().calls("mutateRowsTs") + b.emulator().calls("getRowWithColumns");
    assert!(
        late <= 1,
        "{late} storage calls made for callers long gone: {:?}",
        b.emulator().call_counts()
    );
    let start = Instant::now();
    let mut req = tonic::Request::new(pb::CheckAbsenceRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: "d".into(),
        entities: ents(&["fresh"]),
    });
    req.set_timeout(Duration::from_secs(5));
    let answer = s.data().check_absence(req).await;
    assert!(
        answer.is_ok(),
        "fresh request after the burst: {answer:?} after {:?}",
        start.elapsed()
    );
    b.emulator().set_latency(Duration::ZERO);
}

/// A create that races a delete of its namesake on another replica: the
/// delete runs between the create's tombstone check and its claim (here the
/// claim's `checkAndPut` is held back 1.5 s). Found in an adversarial review:
/// the create succeeded on the emptied row, and every bit of the new deduper
/// was hidden by the delete's markers - acknowledged adds read absent. Now
/// the create finds the tombstone once it holds the claim and refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_racing_a_delete_of_its_namesake_refuses_instead_of_hiding_its_bits() {
    let b = TestBackend::hbase();
    let (x, y) = (TestServer::start(&b).await, TestServer::start(&b).await);
    x.admin()
        .create_deduper(create_np("c", "d", 10_000, 0.01, 600))
        .await
        .unwrap();
    x.admin().update_deduper(deactivate("c", "d")).await.unwrap();
    b.emulator().delay_calls("checkAndPut", 1, Duration::from_millis(1500));
    let mut y_admin = y.admin();
    let create = tokio::spawn(async move { y_admin.create_deduper(create_np("c", "d", 10_000, 0.01, 60)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    x.admin().delete_deduper(delete_req("c", "d", false)).await.unwrap();
    match create.await.unwrap() {
        Err(e) => {
            assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
            assert!(e.message().contains("deleted recently"), "{}", e.message());
        }
        Ok(_) => {
            // Had it been created, its adds must be found.
            let items = vec!["after-create".to_string()];
            y.data().add_if_absent(aia("d", &items, b"r-race")).await.unwrap();
            assert_eq!(
                absent(&y, "c", "d", &["after-create"]).await,
                [false],
                "an acknowledged add reads absent: its bits are hidden by the delete's markers"
            );
        }
    }
}
