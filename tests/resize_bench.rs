//! The "Done when" run of issue 22 on the embedded store or real HBase (ignored by
//! default; `bench/resize.sh` runs it in release): three dedupers sized
//! n = 100,000, p = 0.01, expiry 60 s, fed the same distinct real names
//! (`../shared/data/pypi-names.txt`): `none` is never resized, `manual` is
//! resized by hand when its load reaches 1.0, `auto` (on a second server
//! with `resize.auto = true`) by the policy. Window 1 brings 100,000
//! names (load 1); window 2 400,000 more and window 1's 100,000 again (a
//! stream repeats itself: 500,000 live at its end, load 5 without a
//! resize); window 3 none (the older generations retire). Every few seconds it prints, per
//! deduper, the false-positive rate of never-added probes and the false
//! negatives among names added within their TTL, as a table.
//!
//! Knobs (environment): RESIZE_BENCH_BACKEND (`embedded`, or `hbase`: real
//! HBase at SOLUS_REAL_HBASE_DIR, see [`backends`]), RESIZE_BENCH_NAMES (the names file), RESIZE_BENCH_N (100000), RESIZE_BENCH_EXPIRY_S
//! (60), RESIZE_BENCH_RESIZE_TO (1000000: the peak of 500,000 with the 2x headroom docs/operations.md advises), RESIZE_BENCH_PROBES (20000),
//! RESIZE_BENCH_SAMPLE_S (5).

mod common;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use solus::api::pb;
use tokio::sync::Mutex;

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Names added, with when (ms since the Unix epoch, before the call).
type Added = Arc<Mutex<VecDeque<(i64, usize)>>>;

struct Run {
    server: Arc<TestServer>,
    name: &'static str,
    added: Added,
    /// When each batch was sent and its size, never pruned: the exact live
    /// count for the resize by hand.
    sent: Arc<Mutex<Vec<(i64, usize)>>>,
}

async fn get(s: &TestServer, name: &str) -> pb::Deduper {
    s.admin()
        .get_deduper(pb::GetDeduperRequest {
            client_id: "bench".into(),
            name: name.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// The backends of the two servers (the second with `resize.auto`), from
/// RESIZE_BENCH_BACKEND: `embedded` (the default), each its own store; or
/// `hbase`, both on the real HBase of `tests/common/real_hbase.rs`
/// (SOLUS_REAL_HBASE_DIR, as `bench/resize.sh` passes it), its tables
/// emptied first. `None` (printed) when that HBase cannot be had.
fn backends(sample_s: u64) -> Option<(TestBackend, TestBackend)> {
    let (mut plain, mut auto) = match std::env::var("RESIZE_BENCH_BACKEND").as_deref() {
        Ok("hbase") => {
            let Some(plain) = TestBackend::real_hbase() else {
                println!("RESIZE_BENCH_BACKEND=hbase: no real HBase (set SOLUS_REAL_HBASE_DIR); not run");
                return None;
            };
            // The same HBase, held by `plain` for the whole run.
            let auto = TestBackend::with_settings("real-hbase", plain.settings.clone());
            (plain, auto)
        }
        Ok("embedded") | Err(_) => (TestBackend::embedded(), TestBackend::embedded()),
        Ok(other) => panic!("RESIZE_BENCH_BACKEND={other:?}: expected embedded or hbase"),
    };
    for b in [&mut plain, &mut auto] {
        b.settings.stats.refresh_interval_ms = sample_s * 1000;
        b.settings.storage.embedded.max_memory_mib = 1024;
    }
    auto.settings.resize.auto = true;
    println!("backend: {}", plain.name);
    Some((plain, auto))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long: bench/resize.sh"]
async fn resize_done_when_run() {
    // RESIZE_BENCH_NAMES: another copy of the names (a worktree has no
    // ../shared beside it).
    let path = match std::env::var_os("RESIZE_BENCH_NAMES") {
        Some(p) => std::path::PathBuf::from(p),
        None => match shared_data("resize_done_when_run", "pypi-names.txt") {
            Some(p) => p,
            None => return,
        },
    };
    let n = knob("RESIZE_BENCH_N", 100_000);
    let expiry_s = knob("RESIZE_BENCH_EXPIRY_S", 60);
    let resize_to = knob("RESIZE_BENCH_RESIZE_TO", 1_000_000);
    let probes_n = knob("RESIZE_BENCH_PROBES", 20_000) as usize;
    let sample_s = knob("RESIZE_BENCH_SAMPLE_S", 5);
    let text = std::fs::read_to_string(path).unwrap();
    let names: Arc<Vec<String>> = Arc::new(text.lines().map(str::to_string).collect());
    let distinct = (5 * n) as usize;
    assert!(names.len() >= distinct + probes_n, "{} names", names.len());
    // What is sent, in order: window 1 names 0..n; window 2, per name i of
    // window 1, i again and 4 new ones; 6n sends of 5n distinct names.
    let nn = n as usize;
    let order: Arc<Vec<usize>> = Arc::new(
        (0..nn)
            .chain((0..nn).flat_map(|i| std::iter::once(i).chain(nn + 4 * i..nn + 4 * i + 4)))
            .collect(),
    );
    let total = order.len();
    let probes: Vec<String> = names[names.len() - probes_n..].to_vec();

    let Some((plain, auto)) = backends(sample_s) else {
        return;
    };
    let s1 = Arc::new(TestServer::start(&plain).await);
    let s2 = Arc::new(TestServer::start(&auto).await);
    let runs: Vec<Run> = [(&s1, "none"), (&s1, "manual"), (&s2, "auto")]
        .into_iter()
        .map(|(s, name)| Run {
            server: s.clone(),
            name,
            added: Arc::default(),
            sent: Arc::default(),
        })
        .collect();
    for r in &runs {
        r.server
            .admin()
            .create_deduper(create_np("bench", r.name, n, 0.01, expiry_s))
            .await
            .unwrap();
    }

    // The schedule: window 1 n sends, window 2 5n, window 3 none.
    let window = Duration::from_secs(expiry_s);
    let start = Instant::now();
    let due = move |elapsed: Duration| -> usize {
        let w = elapsed.as_secs_f64() / window.as_secs_f64();
        let k = if w < 1.0 {
            w * n as f64
        } else if w < 2.0 {
            n as f64 + (w - 1.0) * 5.0 * n as f64
        } else {
            total as f64
        };
        (k as usize).min(total)
    };
    let mut feeders = Vec::new();
    for r in &runs {
        let (server, name, added, sent_log, names, order) = (
            r.server.clone(),
            r.name,
            r.added.clone(),
            r.sent.clone(),
            names.clone(),
            order.clone(),
        );
        feeders.push(tokio::spawn(async move {
            let mut data = server.data();
            let mut next = 0usize;
            while next < total {
                let until = due(start.elapsed());
                if until <= next {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                let end = until.min(next + 2000);
                let sent = solus::clock::now_ms();
                data.add_if_absent(pb::AddIfAbsentRequest {
                    client_id: "bench".into(),
                    deduper: name.into(),
                    entities: ents(&order[next..end].iter().map(|&i| &names[i]).collect::<Vec<_>>()),
                    ..Default::default()
                })
                .await
                .unwrap();
                sent_log.lock().await.push((sent, end - next));
                let mut a = added.lock().await;
                a.extend(order[next..end].iter().map(|&i| (sent, i)));
                next = end;
            }
        }));
    }

    // The resize by hand, the moment `manual` holds n live names (sent
    // within the expiry): what an operator watching the exact load would do.
    let resized_at = Arc::new(Mutex::new(None::<f64>));
    let watcher = {
        let (server, sent, resized_at) = (runs[1].server.clone(), runs[1].sent.clone(), resized_at.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let live_from = solus::clock::now_ms() - expiry_s as i64 * 1000;
                let live: usize = sent
                    .lock()
                    .await
                    .iter()
                    .filter(|(t, _)| *t >= live_from)
                    .map(|(_, c)| c)
                    .sum();
                if live as u64 >= n {
                    server
                        .admin()
                        .update_deduper(pb::UpdateDeduperRequest {
                            client_id: "bench".into(),
                            name: "manual".into(),
                            expected_insertions: Some(resize_to),
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                    *resized_at.lock().await = Some(start.elapsed().as_secs_f64());
                    println!(
                        "manual resize at t = {:.1} s, {live} live names",
                        start.elapsed().as_secs_f64()
                    );
                    return;
                }
            }
        })
    };

    println!(
        "| t (s) | sent | none: FPR | none: FN | manual: FPR | manual: FN | manual: gens | auto: FPR | auto: FN | auto: gens |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut noted = false;
    let end = window * 3 + Duration::from_secs(10);
    let mut worst = [0f64; 3];
    let mut worst_after_retire = [0f64; 3];
    let mut false_negatives = [0usize; 3];
    while start.elapsed() < end {
        tokio::time::sleep(Duration::from_secs(sample_s)).await;
        let mut row = format!("| {:.0} | {} |", start.elapsed().as_secs_f64(), due(start.elapsed()));
        let mut note = "";
        if !noted && resized_at.lock().await.is_some() {
            noted = true;
            note = " manual resize before this row";
        }
        for (i, r) in runs.iter().enumerate() {
            let mut data = r.server.data();
            let fp = absent_all(&mut data, "bench", r.name, &probes)
                .await
                .iter()
                .filter(|a| !**a)
                .count() as f64
                / probes_n as f64;
            // Names added within their TTL, with 2 s to spare.
            let live_from = solus::clock::now_ms() - (expiry_s as i64 * 1000 - 2000);
            let live: Vec<&String> = {
                let mut a = r.added.lock().await;
                while a.front().is_some_and(|(t, _)| *t < live_from) {
                    a.pop_front();
                }
                a.iter().map(|(_, i)| &names[*i]).collect()
            };
            let step = (live.len() / 20_000).max(1);
            let sample: Vec<&String> = live.iter().step_by(step).copied().collect();
            let fnr = absent_all(&mut data, "bench", r.name, &sample)
                .await
                .iter()
                .filter(|a| **a)
                .count();
            false_negatives[i] += fnr;
            let d = get(&r.server, r.name).await;
            worst[i] = worst[i].max(fp);
            let gens = d.generations.len().max(1);
            if gens == 1 && !d.generations.is_empty() {
                worst_after_retire[i] = worst_after_retire[i].max(fp);
            }
            row += &format!(" {:.4} | {fnr} |", fp);
            if r.name != "none" {
                row += &format!(" {gens} |");
            }
        }
        println!("{row}{note}");
    }
    for f in feeders {
        f.await.unwrap();
    }
    watcher.await.unwrap();
    println!(
        "worst FPR: none {:.4}, manual {:.4}, auto {:.4}; after retirement: manual {:.4}, auto {:.4}; false negatives: {:?}",
        worst[0], worst[1], worst[2], worst_after_retire[1], worst_after_retire[2], false_negatives
    );
    assert_eq!(false_negatives, [0, 0, 0], "no false negative, ever");
}
