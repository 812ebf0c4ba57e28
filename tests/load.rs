//! Bounded load test on loopback: 2,000 concurrent callers over 8
//! connections against the real binary for about 30 s of load. No call may
//! fail except by the configured concurrency limit, and the server's idle
//! resident memory must not grow with the calls made.

mod common;
mod process;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use tokio::sync::Mutex;
use tonic::Code;

use common::{create_np, ents};
use process::{SolusProcess, metric};

const CONNECTIONS: usize = 8;
const CALLERS_PER_CONNECTION: usize = 250;
const MAX_CONCURRENT: usize = 512;
const WARM_UP: Duration = Duration::from_secs(10);
const ROUNDS: usize = 2;
const ROUND: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    limited: AtomicU64,
    other: Mutex<Vec<(Code, String)>>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_concurrent_calls_keep_memory_flat() {
    let mut server = SolusProcess::start(&[
        ("SOLUS__LIMITS__MAX_CONCURRENT_REQUESTS", MAX_CONCURRENT.to_string()),
        ("SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS", "2000".into()),
    ])
    .await;
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        channels.push(server.channel().await);
    }
    // 100,000 expected entities at 1%: about 1 Mbit, all of it touched
    // during the warm-up, so the stamps themselves stop growing.
    DeduperAdminServiceClient::new(channels[0].clone())
        .create_deduper(create_np("load", "d", 100_000, 0.01, 3600))
        .await
        .unwrap();

    let tally = Arc::new(Tally::default());
    let (stop, paused) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let mut callers = Vec::new();
    for (c, ch) in channels.iter().enumerate() {
        for i in 0..CALLERS_PER_CONNECTION {
            let (mut data, tally, stop, paused) = (
                DeduperServiceClient::new(ch.clone()),
                tally.clone(),
                stop.clone(),
                paused.clone(),
            );
            let caller = (c * CALLERS_PER_CONNECTION + i) as u64;
            callers.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if paused.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    n += 1;
                    // 20 entities from a window of 200,000 distinct values: many repeats.
                    let items: Vec<String> = (0..20)
                        .map(|j| format!("e{}", (caller * 7919 + n * 104_729 + j * 15_485_863) % 200_000))
                        .collect();
                    let r = match n % 3 {
                        0 => data
                            .add(pb::AddRequest {
                                request_id: None,
                                client_id: "load".into(),
                                deduper: "d".into(),
                                entities: ents(&items),
                                ttl_ms: 0,
                            })
                            .await
                            .map(drop),
                        1 => data
                            .check_absence(pb::CheckAbsenceRequest {
                                record_ids: Vec::new(),
                                client_id: "load".into(),
                                deduper: "d".into(),
                                entities: ents(&items),
                            })
                            .await
                            .map(drop),
                        _ => data
                            .add_if_absent(pb::AddIfAbsentRequest {
                                record_ids: Vec::new(),
                                request_id: None,
                                client_id: "load".into(),
                                deduper: "d".into(),
                                entities: ents(&items),
                                ttl_ms: 60_000,
                            })
                            .await
                            .map(drop),
                    };
                    match r {
                        Ok(()) => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(s) if s.code() == Code::ResourceExhausted => {
                            tally.limited.fetch_add(1, Ordering::Relaxed);
                            // A well-behaved client backs off.
                            tokio::time::sleep(Duration::from_millis(20 + caller % 30)).await;
                        }
                        Err(s) => tally.other.lock().await.push((s.code(), s.message().to_string())),
                    }
                }
            }));
        }
    }

    // A leak is memory that stays taken once the load is gone, in
    // proportion to the calls made. So the server's anonymous resident
    // memory (heap, stacks; not the pages of its binary) is sampled idle -
    // in-flight work drained, the heap trimmer (`heap::TRIM_EVERY`) run -
    // after the warm-up and after each of two measured rounds of load, and
    // the test fails when it grew in both rounds. One round's growth alone
    // is the allocator reaching a new high-water mark, not a leak: with up
    // to 64 blocking-pool threads, glibc's per-thread arenas and its cache
    // of exited threads' stacks step idle memory once by up to 10 MiB
    // (48,176 -> 58,784 KiB with both cores busy elsewhere, then flat).
    // Found by CI: total RSS (`VmRSS`) sampled under load jumped 16-20 MiB
    // and fell again (p90 77,428 -> 94,108 KiB); about 26 MiB of it are the
    // debug binary's file pages, which the kernel evicts and faults in again.
    tokio::time::sleep(WARM_UP).await;
    let mut idle = vec![idle_rss(&server, &paused).await];
    let mut calls = Vec::new();
    let (mut peak_rss, mut peak_in_flight) = (0u64, 0.0f64);
    let made = || tally.ok.load(Ordering::Relaxed) + tally.limited.load(Ordering::Relaxed);
    for _ in 0..ROUNDS {
        let calls_before = made();
        let start = Instant::now();
        while start.elapsed() < ROUND {
            peak_rss = peak_rss.max(server.anon_rss_kib());
            let page = server.metrics().await;
            peak_in_flight = peak_in_flight.max(metric(&page, "solus_requests_in_flight", &[]).unwrap_or(0.0));
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        idle.push(idle_rss(&server, &paused).await);
        calls.push(made() - calls_before);
    }
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.unwrap();
    }

    let (ok, limited) = (tally.ok.load(Ordering::Relaxed), tally.limited.load(Ordering::Relaxed));
    let other = tally.other.lock().await;
    eprintln!(
        "load: {ok} ok, {limited} over the limit, {} other; calls per measured round {calls:?}; peak in flight \
         {peak_in_flight}; idle anonymous RSS KiB {idle:?}, peak under load {peak_rss}",
        other.len()
    );
    assert!(
        other.is_empty(),
        "failures other than the configured limit: {:?}",
        &other[..other.len().min(5)]
    );
    assert!(ok >= 5_000, "only {ok} calls succeeded");
    assert!(
        peak_in_flight >= 100.0,
        "the load never got concurrent: {peak_in_flight}"
    );
    assert!(
        peak_in_flight <= MAX_CONCURRENT as f64,
        "limit exceeded: {peak_in_flight}"
    );
    // Flat: in at least one round, idle memory after it within 4 MiB of
    // idle memory before it. Each round makes 10,000 calls or more (22,500-
    // 26,000 measured with both cores busy elsewhere, 26,000-41,000 quiet), so
    // a leak of 420 bytes per call or more fails.
    assert!(calls.iter().all(|&c| c >= 10_000), "too few calls measured: {calls:?}");
    let grown: Vec<u64> = idle.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    assert!(
        grown.iter().any(|&g| g <= 4 * 1024),
        "memory grew in every round: idle anonymous RSS {idle:?} KiB over {calls:?} calls"
    );
    // Bounded: the limit of 512 requests in flight holds the working set.
    assert!(
        peak_rss <= idle[0] + 128 * 1024,
        "memory under load: {peak_rss} KiB, idle {} KiB",
        idle[0]
    );

    // The server is still healthy and drains cleanly.
    let page = server.metrics().await;
    assert_eq!(
        metric(&page, "solus_requests_in_flight", &[]),
        Some(0.0),
        "requests left in flight"
    );
    server.signal("TERM");
    let exit = server.wait_exit(Duration::from_secs(30)).await.expect("exited");
    assert!(exit.success(), "{exit:?}\n{}", server.stderr());
}

/// Pauses the callers, waits until nothing is in flight and the heap
/// trimmer has run, and returns the lowest of four anonymous RSS samples
/// (KiB) taken over a second; then resumes the callers.
async fn idle_rss(server: &SolusProcess, paused: &AtomicBool) -> u64 {
    paused.store(true, Ordering::Relaxed);
    let drained = Instant::now();
    while metric(&server.metrics().await, "solus_requests_in_flight", &[]) != Some(0.0) {
        assert!(drained.elapsed() < Duration::from_secs(30), "requests never drained");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(solus::heap::TRIM_EVERY + Duration::from_secs(1)).await;
    let mut low = u64::MAX;
    for _ in 0..4 {
        low = low.min(server.anon_rss_kib());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    paused.store(false, Ordering::Relaxed);
    low
}
