//! Observability and lifecycle of the real binary: `/metrics` moving during
//! a replay, one log line per failed request (no entity contents), SIGTERM
//! under load (in-flight requests finish, new ones are refused, storage is
//! flushed, exit 0), and the drain timeout bounding a stuck shutdown.

mod common;
mod process;

use std::time::{Duration, Instant};

use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use common::{create_geom, create_np, ents};
use process::{SolusProcess, metric};

const SECRET: &str = "secret-entity-content-7f3a";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_during_a_replay_and_failures_log_one_line() {
    let mut server = SolusProcess::start(&[("SOLUS__LOG__JSON", "true".into())]).await;
    let ch = server.channel().await;
    let mut admin = DeduperAdminServiceClient::new(ch.clone());
    let mut data = DeduperServiceClient::new(ch.clone());
    admin
        .create_deduper(create_np("c", "d", 10_000, 0.01, 600))
        .await
        .unwrap();
    for i in 0..3 {
        let items = [format!("a{i}"), format!("b{i}")];
        let add = pb::AddRequest {
            request_id: None,
            client_id: "c".into(),
            deduper: "d".into(),
            entities: ents(&items),
            ttl_ms: 0,
        };
        data.add(add).await.unwrap();
    }
    let missing = pb::CheckAbsenceRequest {
        record_ids: Vec::new(),
        client_id: "c".into(),
        deduper: "no-such-deduper".into(),
        entities: ents(&[SECRET]),
    };
    assert_eq!(data.check_absence(missing).await.unwrap_err().code(), Code::NotFound);

    let page = server.metrics().await;
    let m = |name: &str, labels: &[(&str, &str)]| metric(&page, name, labels);
    assert_eq!(
        m("solus_requests_total", &[("rpc", "Add"), ("code", "OK")]),
        Some(3.0),
        "{page}"
    );
    assert_eq!(
        m("solus_requests_total", &[("rpc", "CreateDeduper"), ("code", "OK")]),
        Some(1.0)
    );
    assert_eq!(
        m(
            "solus_requests_total",
            &[("rpc", "CheckAbsence"), ("code", "NOT_FOUND")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m("solus_request_duration_seconds_count", &[("rpc", "Add")]),
        Some(3.0),
        "{page}"
    );
    assert!(
        m(
            "solus_request_duration_seconds_bucket",
            &[("rpc", "Add"), ("le", "0.005")]
        )
        .is_some(),
        "{page}"
    );
    assert_eq!(m("solus_request_entities_count", &[("rpc", "Add")]), Some(3.0));
    assert_eq!(m("solus_request_entities_sum", &[("rpc", "Add")]), Some(6.0));
    assert_eq!(m("solus_storage_calls_total", &[("op", "write_bits")]), Some(3.0));
    assert_eq!(
        m("solus_storage_call_duration_seconds_count", &[("op", "write_bits")]),
        Some(3.0)
    );
    assert!(
        m("solus_storage_calls_total", &[("op", "get_deduper")]).unwrap() >= 2.0,
        "{page}"
    );
    assert_eq!(m("solus_requests_in_flight", &[]), Some(0.0));
    assert_eq!(m("solus_dedupers", &[]), Some(1.0));
    // Error series exist from the start, at zero, for alerts to match.
    assert_eq!(
        m("solus_storage_errors_total", &[("op", "write_bits")]),
        Some(0.0),
        "{page}"
    );
    // OpenMetrics names a counter's family without `_total`.
    assert!(page.contains("# HELP solus_requests Solus RPCs answered"), "{page}");
    let before = m("solus_requests_total", &[("rpc", "AddIfAbsent"), ("code", "OK")]).unwrap_or(0.0);

    // A replay of 300 requests: the AddIfAbsent counter is seen moving while it runs.
    // Its key file is written here (skewed weights), so the test needs no data set.
    let keys = tempfile::NamedTempFile::new().unwrap();
    let lines: String = (1..=5_000).map(|i| format!("key-{i}\t{}\n", 100_000 / i)).collect();
    std::fs::write(keys.path(), format!("key\tweight\n{lines}")).unwrap();
    let mut replay = tokio::process::Command::new(env!("CARGO_BIN_EXE_solus"))
        .args(["replay", "--addr", &server.url(), "--events", "30000", "--batch", "100"])
        .args(["--expected-insertions", "30000", "--json"])
        .arg("--input")
        .arg(keys.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("running solus replay");
    let mut seen = vec![before];
    let status = loop {
        tokio::select! {
            s = replay.wait() => break s.unwrap(),
            _ = tokio::time::sleep(Duration::from_millis(40)) => {
                let page = server.metrics().await;
                let v = metric(&page, "solus_requests_total", &[("rpc", "AddIfAbsent"), ("code", "OK")]);
                seen.push(v.unwrap_or(0.0));
            }
        }
    };
    assert!(status.success(), "replay failed");
    let page = server.metrics().await;
    let after = metric(&page, "solus_requests_total", &[("rpc", "AddIfAbsent"), ("code", "OK")]).unwrap();
    assert_eq!(after - before, 300.0, "one count per replay request");
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "a counter never goes down: {seen:?}"
    );
    let during = seen.iter().filter(|v| **v > before && **v < after).count();
    assert!(during >= 1, "no scrape saw the counter between start and end: {seen:?}");
    assert_eq!(
        metric(&page, "solus_request_entities_sum", &[("rpc", "AddIfAbsent")]),
        Some(30_000.0)
    );

    server.signal("TERM");
    let exit = server.wait_exit(Duration::from_secs(30)).await.expect("exited");
    assert!(exit.success(), "{exit:?}");
    let log = server.stderr();
    assert!(!log.contains(SECRET), "entity contents reached the log:\n{log}");
    let failures: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            matches!(
                v["fields"]["message"].as_str(),
                Some("request failed" | "request refused")
            )
        })
        .collect();
    assert_eq!(failures.len(), 1, "one line per failed request: {failures:?}");
    let f = &failures[0]["fields"];
    assert_eq!(
        (f["rpc"].as_str(), f["code"].as_str()),
        (Some("CheckAbsence"), Some("NOT_FOUND")),
        "{f}"
    );
    assert!(f["detail"].as_str().unwrap().contains("no-such-deduper"), "{f}");
}

/// 10,000 distinct 256-byte entities: with k = 64, about a second of
/// hashing per request in a debug build, so a request is surely in flight.
fn heavy_entities(tag: usize) -> Vec<String> {
    (0..10_000)
        .map(|i| format!("{tag:02}-{i:06}-{}", "x".repeat(246)))
        .collect()
}

fn heavy_request(tag: usize) -> pb::AddIfAbsentRequest {
    let items = heavy_entities(tag);
    pb::AddIfAbsentRequest {
        record_ids: Vec::new(),
        request_id: None,
        client_id: "c".into(),
        deduper: "heavy".into(),
        entities: ents(&items),
        ttl_ms: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_finishes_in_flight_requests_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = (
        "SOLUS__STORAGE__EMBEDDED__PATH",
        dir.path().join("data").display().to_string(),
    );
    let mut server = SolusProcess::start(std::slice::from_ref(&data_dir)).await;
    let ch = server.channel().await;
    DeduperAdminServiceClient::new(ch.clone())
        .create_deduper(create_geom("c", "heavy", 64, 4, 1 << 16, 3600))
        .await
        .unwrap();
    let mut health = HealthClient::new(ch.clone());
    let mut watch = health
        .watch(HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );

    const IN_FLIGHT: usize = 4;
    let requests: Vec<_> = (0..IN_FLIGHT)
        .map(|tag| {
            let mut client = DeduperServiceClient::new(ch.clone());
            tokio::spawn(async move { client.add_if_absent(heavy_request(tag)).await })
        })
        .collect();
    // SIGTERM once every request is being served.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = server.metrics().await;
        if metric(&page, "solus_requests_in_flight", &[]).unwrap_or(0.0) >= IN_FLIGHT as f64 {
            break;
        }
        assert!(Instant::now() < deadline, "requests never all in flight:\n{page}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.signal("TERM");

    // Health turns NOT_SERVING for those watching.
    let flipped = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
    let status = flipped
        .expect("health update")
        .expect("health stream")
        .expect("a message")
        .status;
    assert_eq!(status, ServingStatus::NotServing as i32);
    // New requests are refused (the listener is closed).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = tonic::transport::Channel::from_shared(server.url())
        .unwrap()
        .connect()
        .await;
    assert!(fresh.is_err(), "a new connection was accepted while draining");
    // Every request in flight at SIGTERM completes.
    for r in requests {
        let absent = r
            .await
            .unwrap()
            .expect("in-flight request finished")
            .into_inner()
            .absent;
        assert_eq!(absent.len(), 10_000);
    }
    drop(watch);
    let exit = server
        .wait_exit(Duration::from_secs(30))
        .await
        .expect("exited within the drain timeout");
    assert!(exit.success(), "{exit:?}");
    let log = server.stderr();
    assert!(
        log.contains("solus stopped") && !log.contains("drain timeout reached"),
        "{log}"
    );

    // The drained writes are on disk: a new server finds them.
    let server = SolusProcess::start(&[data_dir, ("SOLUS__METRICS__LISTEN", String::new())]).await;
    let mut data = DeduperServiceClient::new(server.channel().await);
    for tag in 0..IN_FLIGHT {
        let sample: Vec<String> = heavy_entities(tag).into_iter().step_by(20).collect();
        let check = pb::CheckAbsenceRequest {
            record_ids: Vec::new(),
            client_id: "c".into(),
            deduper: "heavy".into(),
            entities: ents(&sample),
        };
        let absent = data.check_absence(check).await.unwrap().into_inner().absent;
        assert!(
            absent.iter().all(|a| !a),
            "request {tag}: entities lost after a drained shutdown"
        );
    }
}

/// Issue 21, class 3, as found: a health `Watch` open at SIGTERM held the
/// graceful stop for the whole drain timeout (8 s of 8 s). Now the watcher
/// gets NOT_SERVING, its stream ends, and the server exits at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_health_watch_does_not_hold_a_graceful_stop() {
    let mut server = SolusProcess::start(&[
        ("SOLUS__METRICS__LISTEN", String::new()),
        ("SOLUS__SERVER__DRAIN_TIMEOUT_MS", "8000".into()),
    ])
    .await;
    let mut health = HealthClient::new(server.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    let start = Instant::now();
    server.signal("TERM");
    let last = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
    assert_eq!(
        last.expect("a health update").expect("the stream").map(|m| m.status),
        Some(ServingStatus::NotServing as i32)
    );
    let end = tokio::time::timeout(Duration::from_secs(10), watch.message()).await;
    assert!(matches!(end, Ok(Ok(None))), "the watch ends after NOT_SERVING: {end:?}");
    let exit = server.wait_exit(Duration::from_secs(10)).await.expect("exited");
    assert!(exit.success(), "{exit:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "stopping with a health watch open took {:?} (drain timeout 8 s)",
        start.elapsed()
    );
    assert!(
        !server.stderr().contains("drain timeout reached"),
        "{}",
        server.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_timeout_bounds_a_stuck_shutdown() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};
    // A reflection stream whose client never closes its side never ends by
    // itself, so it holds a graceful shutdown until the drain timeout
    // closes it. Returned with the sender that keeps it open.
    async fn stream_then_term(
        server: &SolusProcess,
    ) -> (
        tokio::sync::mpsc::Sender<ServerReflectionRequest>,
        tonic::Streaming<ServerReflectionResponse>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let list = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        tx.send(list).await.unwrap();
        let mut reflection = ServerReflectionClient::new(server.channel().await);
        let mut stream = reflection
            .server_reflection_info(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        assert!(stream.message().await.unwrap().is_some(), "the list of services");
        server.signal("TERM");
        (tx, stream)
    }
    let off = ("SOLUS__METRICS__LISTEN", String::new());

    let mut bounded = SolusProcess::start(&[off.clone(), ("SOLUS__SERVER__DRAIN_TIMEOUT_MS", "300".into())]).await;
    let _stream = stream_then_term(&bounded).await;
    let start = Instant::now();
    let exit = bounded.wait_exit(Duration::from_secs(10)).await.expect("exited");
    assert!(exit.success(), "{exit:?}");
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    assert!(
        bounded.stderr().contains("drain timeout reached"),
        "{}",
        bounded.stderr()
    );

    // The premise: with a long drain timeout the same stream keeps the server up.
    let mut patient = SolusProcess::start(&[off, ("SOLUS__SERVER__DRAIN_TIMEOUT_MS", "60000".into())]).await;
    let _stream = stream_then_term(&patient).await;
    assert!(
        patient.wait_exit(Duration::from_secs(2)).await.is_none(),
        "the server did not wait for the open stream"
    );
}
