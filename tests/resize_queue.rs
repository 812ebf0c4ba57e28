//! Issue 45, class 1, as found: AddIfAbsent requests of new entities queue
//! in one deduper's lane (one storage task per deduper here), the deduper
//! is resized while they wait, and they are served after the older
//! generation's last write time. Before the fix they wrote the older
//! generation (the config they looked up on arrival named it alone), and
//! once it retired their acknowledged entities read absent while their TTL
//! still ran: a false negative. The wait is made with the Solus clock
//! (stepped past the older generation's last write time while they queue),
//! so this binary holds this test alone. Embedded store and HBase emulator.

mod common;

use std::time::Duration;

use common::*;
use solus::api::pb;

const REQUESTS: usize = 20;
const ENTITIES: usize = 1500;
const EXPIRY_S: u64 = 4;

async fn queued_writes_survive_a_resize(b: &TestBackend) {
    solus::clock::shift_ms(0);
    let mut settings = b.settings.clone();
    settings.limits.max_storage_tasks_per_deduper = 1;
    let s = TestServer::start_with(settings).await;
    s.admin()
        .create_deduper(create_np("c", "d", 100_000, 1e-6, EXPIRY_S))
        .await
        .unwrap();
    // Queue the requests; each looks its config up on arrival.
    let mut queued = Vec::new();
    for r in 0..REQUESTS {
        let mut data = s.data();
        let entities: Vec<String> = (0..ENTITIES).map(|i| format!("q{r}-{i}")).collect();
        queued.push(tokio::spawn(async move {
            let mut req = tonic::Request::new(pb::AddIfAbsentRequest {
                client_id: "c".into(),
                deduper: "d".into(),
                entities: ents(&entities),
                ttl_ms: 0,
                request_id: Some(format!("r{r}").into_bytes().into()),
                record_ids: Vec::new(),
            });
            req.set_timeout(Duration::from_secs(60));
            let answer = data.add_if_absent(req).await.expect("AddIfAbsent").into_inner().absent;
            (entities, answer, solus::clock::now_ms(), std::time::Instant::now())
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resized = s
        .admin()
        .update_deduper(pb::UpdateDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
            expected_insertions: Some(200_000),
            ..Default::default()
        })
        .await
        .expect("resize")
        .into_inner();
    let retire_at = resized.generations[0]
        .retire_at_ms
        .expect("the older generation retires");
    let writes_until = retire_at - EXPIRY_S as i64 * 1000;
    // The requests still queued are served 8 s past the older generation's
    // last write time (their TTL then runs 8 s past its retirement: room
    // for the checks below, on the emulator on a loaded host too).
    let stepped = writes_until + 8000 - solus::clock::now_ms();
    solus::clock::shift_ms(stepped);
    let step = std::time::Instant::now();
    let mut late = Vec::new();
    for q in queued {
        let (entities, answer, acked, done) = q.await.unwrap();
        assert!(answer.iter().all(|a| *a), "{}: new entities answered new", b.name);
        // Answered well after the step: served after it, not in flight
        // across it.
        if done > step + Duration::from_millis(400) {
            late.push((entities, acked));
        }
    }
    assert!(
        late.len() >= REQUESTS / 4,
        "{}: only {} requests were served late",
        b.name,
        late.len()
    );
    // Past the older generation's retirement (and the retirement pass's run),
    // within the late requests' TTL: every entity they wrote is present.
    solus::clock::shift_ms(stepped + retire_at + 300 - solus::clock::now_ms());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (entities, acked) in &late {
        let absent = absent_all(&mut s.data(), "c", "d", entities).await;
        let now = solus::clock::now_ms();
        assert!(
            now < acked + EXPIRY_S as i64 * 1000,
            "{}: the check ran past the TTL",
            b.name
        );
        let lost = absent.iter().filter(|a| **a).count();
        assert_eq!(
            lost,
            0,
            "{}: {lost} of {} acknowledged entities read absent {} ms after their ack, past the older \
             generation's retirement",
            b.name,
            entities.len(),
            now - acked
        );
    }
    s.stop().await;
    solus::clock::shift_ms(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_queued_across_a_resize_are_not_lost_when_the_older_generation_retires() {
    queued_writes_survive_a_resize(&TestBackend::embedded()).await;
    queued_writes_survive_a_resize(&TestBackend::hbase()).await;
}
