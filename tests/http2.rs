//! The server's HTTP/2 layer against clients that misbehave on the wire:
//! answers nobody reads (a flow-control window of 0, issue 45 class 4), a
//! client resetting the streams of a stall all at once when the server
//! resumes (issue 46 class 4), and rapid reset (CVE-2023-44487).
//!
//! `slow_reader_attack` (ignored) is the measurement: the attack as found,
//! against a running `solus serve`, with a concurrent client's latency and
//! the server's RSS (see docs/operations.md, "HTTP/2 limits").

mod common;

use std::time::{Duration, Instant};

use prost::Message;
use solus::api::pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;

use common::{TestBackend, TestServer, create_geom};

const LIST: &str = "/solus.v1.DeduperAdminService/ListDedupers";
const HEALTH: &str = "/grpc.health.v1.Health/Check";

/// A gRPC message frame: the 5-byte prefix and the protobuf bytes.
fn grpc_frame(message: &[u8]) -> prost::bytes::Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

fn list_request(client_id: &str) -> prost::bytes::Bytes {
    grpc_frame(
        &pb::ListDedupersRequest {
            client_id: client_id.into(),
            ..Default::default()
        }
        .encode_to_vec(),
    )
}

/// A raw h2 client connection that never reads answer bodies: its streams'
/// windows are 0, so the server cannot send a byte of any answer's body.
async fn slow_reader(addr: std::net::SocketAddr) -> h2::client::SendRequest<prost::bytes::Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, prost::bytes::Bytes>(tcp)
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// Sends one unary call on `send` and waits for the answer's headers (not
/// its body): `Ok(response)` when the answer is an OK that waits to be
/// read (its body, held), or the gRPC code of a trailers-only refusal.
async fn call_unread(
    send: &mut h2::client::SendRequest<prost::bytes::Bytes>,
    path: &str,
    body: prost::bytes::Bytes,
) -> Result<http::Response<h2::RecvStream>, Code> {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut ready = send.clone().ready().await.expect("connection ready");
    let (answer, mut stream) = ready.send_request(request, false).expect("send_request");
    // A refusal may come (and end the stream) before the message is sent.
    let _ = stream.send_data(body, true);
    *send = ready;
    let response = answer.await.expect("answer headers");
    match response.headers().get("grpc-status") {
        Some(code) => Err(Code::from_i32(code.to_str().unwrap().parse().unwrap())),
        None => Ok(response),
    }
}

/// Issue 45, class 4, as found but small enough for a debug build: slow
/// readers fill the server with answers they never read. Each unread
/// answer now keeps its request's permit, so at most
/// `limits.max_concurrent_requests` answers wait (before: every one sent,
/// each held in memory until the connection closed); no connection holds
/// as many as are left free, so another client is served meanwhile; the
/// permits come back when the readers go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_answers_hold_their_permits_and_leave_room_for_others() {
    const PERMITS: usize = 64;
    const READERS: usize = 4;
    const CALLS: usize = 40;
    let mut settings = TestBackend::embedded().settings;
    let dir = tempfile::tempdir().unwrap();
    settings.storage.embedded.path = dir.path().join("data");
    settings.limits.max_concurrent_requests = PERMITS;
    let s = TestServer::start_with(settings).await;
    for i in 0..20 {
        s.admin()
            .create_deduper(create_geom("slow", &format!("d{i}"), 1, 1, 64, 600))
            .await
            .unwrap();
    }
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(slow_reader(s.addr).await);
    }
    // Every reader sends its calls one after another, never reading a body.
    let (mut waiting, mut refused) = (Vec::new(), 0);
    for _ in 0..CALLS {
        for send in readers.iter_mut() {
            match call_unread(send, LIST, list_request("slow")).await {
                Ok(held) => waiting.push(held),
                Err(code) => {
                    assert_eq!(code, Code::ResourceExhausted);
                    refused += 1;
                }
            }
        }
    }
    assert!(
        waiting.len() <= PERMITS,
        "{} answers wait unread with limits.max_concurrent_requests = {PERMITS} ({refused} refused): \
         an answer's permit was given back before the answer was sent",
        waiting.len()
    );
    assert_eq!(waiting.len() + refused, READERS * CALLS);
    // Another client is served meanwhile, promptly (a debug build on 2
    // shared cores: a wide margin).
    let mut admin = s.admin();
    for _ in 0..20 {
        let start = Instant::now();
        let listed = admin
            .list_dedupers(pb::ListDedupersRequest {
                client_id: "slow".into(),
                ..Default::default()
            })
            .await
            .expect("another client is served while slow readers hold answers");
        assert_eq!(listed.into_inner().dedupers.len(), 20);
        assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    }
    // The readers go: their answers and permits are freed; a new reader
    // gets as many waiting answers again.
    drop(waiting);
    drop(readers);
    let mut again = slow_reader(s.addr).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut held = Vec::new();
    while held.len() < PERMITS / 4 {
        match call_unread(&mut again, LIST, list_request("slow")).await {
            Ok(answer) => held.push(answer),
            Err(code) => {
                assert_eq!(code, Code::ResourceExhausted);
                assert!(
                    Instant::now() < deadline,
                    "permits not given back after the readers left"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    // Read answers give their permits back: a reader that reads is never refused.
    let mut reading = slow_reader(s.addr).await;
    for _ in 0..(2 * PERMITS) {
        let answer = call_unread(&mut reading, HEALTH, grpc_frame(&[])).await;
        assert!(answer.is_ok());
    }
    drop(held);
    s.stop().await;
}

// ----- raw frames: a burst of streams reset before the server takes them up

/// An HTTP/2 frame header and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// HPACK request headers of a gRPC call to `path`, without Huffman or the
/// dynamic table: indexed `:method POST` and `:scheme http`, literal
/// `:path`, `:authority`, `content-type` and `te`.
fn request_headers(path: &str) -> Vec<u8> {
    let literal = |out: &mut Vec<u8>, value: &str| {
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    };
    let mut h = vec![0x83, 0x86];
    h.push(0x04); // :path, literal without indexing, name index 4
    literal(&mut h, path);
    h.push(0x01); // :authority, name index 1
    literal(&mut h, "localhost");
    h.extend_from_slice(&[0x0f, 0x10]); // content-type, name index 31
    literal(&mut h, "application/grpc");
    h.push(0x00); // te: new name
    literal(&mut h, "te");
    literal(&mut h, "trailers");
    h
}

/// One call's frames: HEADERS, its message in a DATA frame ending the
/// stream, and - when `reset` - RST_STREAM(CANCEL), as a client sends it
/// when the call's deadline passes.
fn call_frames(stream: u32, path: &str, reset: bool) -> Vec<u8> {
    let mut out = frame(0x1, 0x4, stream, &request_headers(path));
    out.extend(frame(0x0, 0x1, stream, &grpc_frame(&[])));
    if reset {
        out.extend(frame(0x3, 0x0, stream, &8u32.to_be_bytes()));
    }
    out
}

/// What the server sent on a raw connection, until it closed or `wait` passed.
#[derive(Debug, Default)]
struct Seen {
    /// The error code of a GOAWAY, if one came.
    goaway: Option<u32>,
    /// Streams the server answered (HEADERS frames).
    answered: Vec<u32>,
}

/// Opens a raw connection and writes the preface and an empty SETTINGS;
/// the server's frames are read by a task that returns what it saw, at a
/// GOAWAY, at a frame of stream `until_answered`, or after `wait`.
async fn raw_connection(
    addr: std::net::SocketAddr,
    wait: Duration,
    until_answered: Option<u32>,
) -> (tokio::net::tcp::OwnedWriteHalf, tokio::task::JoinHandle<Seen>) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).unwrap();
    let (mut read, mut write) = tcp.into_split();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(0x4, 0x0, 0, &[]));
    write.write_all(&hello).await.unwrap();
    let reader = tokio::spawn(async move {
        let mut seen = Seen::default();
        let until = Instant::now() + wait;
        let mut head = [0u8; 9];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, read.read_exact(&mut head)).await {
                Ok(Ok(_)) => {}
                _ => return seen,
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            if read.read_exact(&mut payload).await.is_err() {
                return seen;
            }
            match head[3] {
                0x1 => seen.answered.push(stream),
                0x7 if payload.len() >= 8 => {
                    seen.goaway = Some(u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]));
                    return seen;
                }
                _ => {}
            }
            if until_answered == Some(stream) {
                return seen;
            }
        }
    });
    (write, reader)
}

const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Issue 46, class 4, server side: a client whose calls timed out while
/// the server was stopped (SIGSTOP) resets them all, and the server reads
/// those resets at once when it resumes. 1,500 streams opened and reset
/// before the server took any up (15 deadlines' worth of a connection's
/// 100 streams) must not be taken for an attack: the call after them is
/// answered, with no GOAWAY (before: GOAWAY ENHANCE_YOUR_CALM
/// "too_many_resets" past h2's default of 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_read_after_a_stall_are_not_taken_for_an_attack() {
    let backend = TestBackend::embedded();
    let s = TestServer::start(&backend).await;
    let last = 2 * 1_500 + 1;
    let (mut write, reader) = raw_connection(s.addr, Duration::from_secs(10), Some(last)).await;
    let mut burst = Vec::new();
    for i in 0..1_500u32 {
        burst.extend(call_frames(2 * i + 1, HEALTH, true));
    }
    burst.extend(call_frames(last, HEALTH, false));
    write.write_all(&burst).await.unwrap();
    let seen = reader.await.unwrap();
    assert_eq!(seen.goaway, None, "{seen:?}");
    assert!(seen.answered.contains(&last), "{seen:?}");
    s.stop().await;
}

/// Rapid reset (CVE-2023-44487) is still cut: a connection that opens and
/// resets streams as fast as it can write them gets GOAWAY
/// ENHANCE_YOUR_CALM, and another client is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_is_still_cut() {
    let backend = TestBackend::embedded();
    let s = TestServer::start(&backend).await;
    let (mut write, reader) = raw_connection(s.addr, Duration::from_secs(20), None).await;
    let mut stream = 1u32;
    for _ in 0..20 {
        let mut burst = Vec::new();
        for _ in 0..5_000 {
            burst.extend(call_frames(stream, HEALTH, true));
            stream += 2;
        }
        if write.write_all(&burst).await.is_err() {
            break;
        }
    }
    let seen = reader.await.unwrap();
    assert_eq!(seen.goaway, Some(ENHANCE_YOUR_CALM), "{seen:?}");
    let listed = s
        .admin()
        .list_dedupers(pb::ListDedupersRequest {
            client_id: "other".into(),
            ..Default::default()
        })
        .await;
    assert!(listed.is_ok(), "{listed:?}");
    s.stop().await;
}

// ----- the measurement

/// The slow-reader attack of issue 45 (class 4) against a running server:
/// `SOLUS_ADDR` (host:port) and `SOLUS_PID` (its process, for VmRSS). 40
/// connections with stream windows of 0 send 20,000 ListDedupers of client
/// `atk` (which should have dedupers: the test creates 200 small ones
/// when it has none) in waves and never read an answer, while another
/// connection calls ListDedupers in a closed loop; prints the server's
/// peak VmRSS and that client's latency percentiles.
///
/// ```sh
/// cargo build && target/debug/solus serve &
/// SOLUS_ADDR=127.0.0.1:50051 SOLUS_PID=$! cargo test --test http2 -- --ignored --nocapture slow_reader_attack
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement against a running server: SOLUS_ADDR, SOLUS_PID"]
async fn slow_reader_attack() {
    use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
    const CONNECTIONS: usize = 40;
    const CALLS: usize = 20_000;
    const WAVE: usize = 20;
    let addr: std::net::SocketAddr = std::env::var("SOLUS_ADDR").expect("SOLUS_ADDR").parse().unwrap();
    let pid: u32 = std::env::var("SOLUS_PID").expect("SOLUS_PID").parse().unwrap();
    let rss = move || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    };
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut admin = DeduperAdminServiceClient::new(channel);
    let list = pb::ListDedupersRequest {
        client_id: "atk".into(),
        ..Default::default()
    };
    if admin
        .list_dedupers(list.clone())
        .await
        .unwrap()
        .into_inner()
        .dedupers
        .is_empty()
    {
        for i in 0..200 {
            admin
                .create_deduper(create_geom("atk", &format!("deduper-{i:03}"), 1, 1, 64, 3600))
                .await
                .unwrap();
        }
    }
    let answer_bytes = admin
        .list_dedupers(list.clone())
        .await
        .unwrap()
        .into_inner()
        .encoded_len();
    let before = rss();
    println!(
        "server VmRSS before: {} MiB; one answer: {answer_bytes} bytes",
        before / 1024
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // The other client runs on a thread and runtime of its own, so the
    // attack's tasks in this process do not delay it here.
    let victim = {
        let (stop, list) = (stop.clone(), list.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
                    .unwrap()
                    .connect()
                    .await
                    .unwrap();
                let mut admin = DeduperAdminServiceClient::new(channel);
                let (mut latencies, mut failed) = (Vec::new(), 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let start = Instant::now();
                    match admin.list_dedupers(list.clone()).await {
                        Ok(_) => latencies.push(start.elapsed()),
                        Err(_) => failed += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (latencies, failed)
            })
        })
    };
    let started = Instant::now();
    let mut attackers = Vec::new();
    for _ in 0..CONNECTIONS {
        let (body, stop) = (list_request("atk"), stop.clone());
        attackers.push(tokio::spawn(async move {
            let mut send = slow_reader(addr).await;
            let (mut held, mut refused) = (Vec::new(), 0usize);
            let (mut sent, mut full) = (0, 0usize);
            'waves: while sent < CALLS / CONNECTIONS && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..WAVE {
                    match tokio::time::timeout(Duration::from_secs(2), call_unread(&mut send, LIST, body.clone())).await
                    {
                        Ok(Ok(answer)) => held.push(answer),
                        Ok(Err(_)) => refused += 1,
                        // No stream free on this connection (MAX_CONCURRENT_STREAMS):
                        // the rest of its calls could not even be sent.
                        Err(_) => {
                            full = CALLS / CONNECTIONS - sent;
                            break 'waves;
                        }
                    }
                    sent += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (held, refused, send, full)
        }));
    }
    let mut results = Vec::new();
    for a in attackers {
        results.push(a.await.unwrap());
    }
    let sent_in = started.elapsed();
    // Hold the unread answers a while longer, as the attacker did.
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut latencies, failed) = victim.join().unwrap();
    sampler.await.unwrap();
    let held: usize = results.iter().map(|r| r.0.len()).sum();
    let refused: usize = results.iter().map(|r| r.1).sum();
    let unsent: usize = results.iter().map(|r| r.3).sum();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "attack: {CONNECTIONS} connections, {CALLS} ListDedupers in {:.1} s; answers waiting unread: {held}, \
         refused RESOURCE_EXHAUSTED: {refused}; not sent (no stream free): {unsent}",
        sent_in.as_secs_f64()
    );
    println!(
        "server VmRSS peak: {} MiB (before {} MiB)",
        peak.load(std::sync::atomic::Ordering::Relaxed) / 1024,
        before / 1024
    );
    println!(
        "other client: {} calls ok, {failed} failed; p50 {:?} p99 {:?} max {:?}",
        latencies.len(),
        pct(0.50),
        pct(0.99),
        latencies.last().unwrap()
    );
    drop(results);
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!("server VmRSS after the readers left: {} MiB", rss() / 1024);
}
