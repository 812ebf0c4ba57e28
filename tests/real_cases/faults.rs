//! Faults below Solus on real HBase: kill -9 of the Thrift1 server, then of
//! the HBase process itself (master + region server + ZooKeeper in
//! standalone mode), each under a steady stream of adds and restarted on the
//! same DIR. Solus stays up, answers UNAVAILABLE meanwhile, health goes
//! NOT_SERVING then SERVING without restarting Solus, and every acknowledged
//! add is present afterwards. Figures are printed for docs/hbase.md.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use solus::api::pb;
use tokio::sync::watch;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::common::*;

/// What the add stream saw.
#[derive(Default)]
struct Stream {
    acknowledged: Vec<String>,
    failures: BTreeMap<String, usize>,
}

/// Counts a failed call by its code, then pauses 100 ms before the next.
fn failed(failures: &mut BTreeMap<String, usize>, e: &tonic::Status) -> tokio::time::Sleep {
    *failures.entry(format!("{:?}", e.code())).or_default() += 1;
    tokio::time::sleep(Duration::from_millis(100))
}

/// Adds batches of 20 fresh entities until told to stop.
fn add_stream(s: &TestServer, stop: watch::Receiver<bool>) -> (Arc<Mutex<Stream>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Stream::default()));
    let mut data = s.data();
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut batch = 0u64;
        while !*stop.borrow() {
            let items: Vec<String> = (0..20).map(|i| format!("e-{batch}-{i}")).collect();
            batch += 1;
            let mut req = tonic::Request::new(pb::AddRequest {
                client_id: "c".into(),
                deduper: "d".into(),
                entities: ents(&items),
                ..Default::default()
            });
            req.set_timeout(Duration::from_secs(5));
            match data.add(req).await {
                Ok(_) => out.lock().unwrap().acknowledged.extend(items),
                Err(e) => {
                    let pause = failed(&mut out.lock().unwrap().failures, &e);
                    pause.await
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (seen, task)
}

async fn wait_for(s: &TestServer, want: ServingStatus, within: Duration) -> Duration {
    let start = Instant::now();
    while crate::hbase_shared::data_health(s).await != want {
        assert!(start.elapsed() < within, "health not {want:?} after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

/// A server on the real HBase (held for this test alone, `None` where there
/// is none) failing fast (0.5 s connect, 3 s calls, one retry), serving the
/// deduper `create` makes; with the HBase and the backend holding it.
async fn serving_with_deduper(
    create: pb::CreateDeduperRequest,
) -> Option<(TestServer, &'static RealHbase, TestBackend)> {
    let mut b = TestBackend::real_hbase()?;
    let (real, _) = b.real.clone().unwrap();
    let h = &mut b.settings.storage.hbase;
    (h.connect_timeout_ms, h.read_timeout_ms, h.write_timeout_ms, h.retries) = (500, 3_000, 3_000, 1);
    let s = TestServer::start(&b).await;
    s.admin().create_deduper(create).await.unwrap();
    wait_for(&s, ServingStatus::Serving, Duration::from_secs(30)).await;
    Some((s, real, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_thrift_then_of_hbase_under_adds_loses_no_acknowledged_add() {
    let Some((s, real, _held)) = serving_with_deduper(create_np("c", "d", 1_000_000, 0.01, 3600)).await else {
        return;
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let (seen, task) = add_stream(&s, stop_rx);
    tokio::time::sleep(Duration::from_secs(3)).await;

    for process in ["thrift", "master"] {
        let before = seen.lock().unwrap().acknowledged.len();
        let killed = Instant::now();
        real.kill9(process);
        wait_for(&s, ServingStatus::NotServing, Duration::from_secs(60)).await;
        let down = killed.elapsed();
        tokio::task::block_in_place(|| real.restart_stopped());
        let restarted = killed.elapsed();
        wait_for(&s, ServingStatus::Serving, Duration::from_secs(240)).await;
        let up = killed.elapsed();
        // Health probes the table, not every region: after an HBase restart the
        // data regions can take longer to come back than the table's state.
        let acked = seen.lock().unwrap().acknowledged.len();
        while seen.lock().unwrap().acknowledged.len() <= acked + 100 {
            assert!(
                killed.elapsed() < Duration::from_secs(300),
                "adds flow again after the {process} restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let flowing = killed.elapsed();
        eprintln!(
            "kill -9 {process}: health NOT_SERVING {down:.1?} after the kill; {process} restarted and answering \
             {restarted:.1?} after; Solus SERVING {up:.1?} after, adds acknowledged again {flowing:.1?} after \
             (no Solus restart); {before} entities acknowledged before"
        );
    }
    stop_tx.send(true).unwrap();
    task.await.unwrap();

    let stream = std::mem::take(&mut *seen.lock().unwrap());
    for code in stream.failures.keys() {
        assert!(
            [
                format!("{:?}", Code::Unavailable),
                format!("{:?}", Code::DeadlineExceeded),
                // tonic's own grpc-timeout enforcement ("Timeout expired") when
                // Solus's DEADLINE_EXCEEDED, due a margin earlier, is late on
                // a starved 2-core runtime: seen once in 59 failures.
                format!("{:?}", Code::Cancelled)
            ]
            .contains(code),
            "only UNAVAILABLE (or a deadline) while HBase is down: {:?}",
            stream.failures
        );
    }
    let mut data = s.data();
    let answers = absent_all(&mut data, "c", "d", &stream.acknowledged).await;
    let lost: Vec<_> = stream.acknowledged.iter().zip(&answers).filter(|(_, a)| **a).collect();
    eprintln!(
        "{} entities acknowledged, {} lost; failed calls: {:?}",
        stream.acknowledged.len(),
        lost.len(),
        stream.failures
    );
    assert!(
        lost.is_empty(),
        "acknowledged adds lost: {} (first {:?})",
        lost.len(),
        lost.first()
    );
}

/// What the AddIfAbsent streams saw: entities answered (with the answer),
/// failures by code, and when each answer came.
#[derive(Default)]
struct Guarded {
    answered: Vec<(String, bool)>,
    answered_at: Vec<Instant>,
    failures: BTreeMap<String, usize>,
}

/// Issue 45, class 5: under AddIfAbsent load, the Thrift server is killed
/// (-9) and restarted. A request that had claimed its shard rows in the
/// guard cell lost its connection before releasing them; the rows stayed
/// held until another request watched the claim for a whole lease (10 s),
/// which no request with the clients' 10 s deadline ever did: AddIfAbsent
/// did not recover in 100 s. Now the claim is this process's own orphan,
/// released by the next round: AddIfAbsent answers again within 2 s of
/// Thrift's return, and no acknowledged entity is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_if_absent_answers_again_within_2_s_of_a_thrift_restart() {
    let Some((s, real, _held)) = serving_with_deduper(create_np("c", "g", 1_000_000, 0.001, 3600)).await else {
        return;
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let seen = Arc::new(Mutex::new(Guarded::default()));
    let mut streams = Vec::new();
    for stream in 0..4 {
        let (mut data, stop, out) = (s.data(), stop_rx.clone(), seen.clone());
        streams.push(tokio::spawn(async move {
            let mut batch = 0u64;
            while !*stop.borrow() {
                let items: Vec<String> = (0..100).map(|i| format!("g-{stream}-{batch}-{i}")).collect();
                batch += 1;
                // As the clients send it: a request id, their 10 s deadline.
                let mut req = tonic::Request::new(pb::AddIfAbsentRequest {
                    client_id: "c".into(),
                    deduper: "g".into(),
                    entities: ents(&items),
                    request_id: Some(format!("r-{stream}-{batch}").into_bytes().into()),
                    ..Default::default()
                });
                req.set_timeout(Duration::from_secs(10));
                match data.add_if_absent(req).await {
                    Ok(r) => {
                        let mut out = out.lock().unwrap();
                        out.answered.extend(items.into_iter().zip(r.into_inner().absent));
                        out.answered_at.push(Instant::now());
                    }
                    Err(e) => {
                        let pause = failed(&mut out.lock().unwrap().failures, &e);
                        pause.await
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = seen.lock().unwrap().answered.len();
    assert!(before > 0, "AddIfAbsent answered before the restart");
    real.kill9("thrift");
    wait_for(&s, ServingStatus::NotServing, Duration::from_secs(60)).await;
    tokio::task::block_in_place(|| real.restart_stopped());
    let back = Instant::now();
    while !seen.lock().unwrap().answered_at.iter().any(|t| *t > back) {
        assert!(
            back.elapsed() < Duration::from_secs(60),
            "AddIfAbsent did not answer again within 60 s of Thrift's return: {:?}",
            seen.lock().unwrap().failures
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recovered = back.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_tx.send(true).unwrap();
    for t in streams {
        t.await.unwrap();
    }
    let g = std::mem::take(&mut *seen.lock().unwrap());
    let entities: Vec<String> = g.answered.iter().map(|(e, _)| e.clone()).collect();
    let answers = absent_all(&mut s.data(), "c", "g", &entities).await;
    let lost = answers.iter().filter(|a| **a).count();
    let present = g.answered.iter().filter(|(_, a)| !a).count();
    eprintln!(
        "kill -9 thrift under AddIfAbsent: answered again {recovered:.2?} after Thrift's return; {} entities \
         answered ({before} before the kill), {present} of them present (all were new: rows whose release \
         could not land answer present), {lost} lost; failed calls: {:?}",
        g.answered.len(),
        g.failures
    );
    assert!(
        recovered < Duration::from_secs(2),
        "AddIfAbsent answered again after {recovered:?}"
    );
    assert_eq!(lost, 0, "acknowledged AddIfAbsent entities read absent");
}
