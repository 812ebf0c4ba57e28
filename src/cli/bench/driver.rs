//! The load loop: workers, pacing, latency histograms, progress and the summary.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use prost::bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::target::System;
use super::{BenchArgs, Op};

/// One request kind.
#[derive(Debug, Clone, Copy)]
pub enum Call {
    Add,
    Check,
    AddIfAbsent,
}

/// Summary of a run. Latencies in ms.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub system: String,
    pub op: Op,
    pub batch: usize,
    pub concurrency: usize,
    pub requests: u64,
    pub entities: u64,
    pub seconds: f64,
    pub requests_per_second: f64,
    pub entities_per_second: f64,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_p999_ms: f64,
    pub latency_max_ms: f64,
    /// Failed requests by status code.
    pub errors: BTreeMap<String, u64>,
}

impl Report {
    pub fn print(&self) {
        outln!("system        {}", self.system);
        outln!(
            "op            {} (batch {}, concurrency {})",
            self.op.name(),
            self.batch,
            self.concurrency
        );
        outln!(
            "requests      {} in {:.1} s = {:.0} requests/s",
            self.requests,
            self.seconds,
            self.requests_per_second
        );
        outln!(
            "entities      {} = {:.0} entities/s",
            self.entities,
            self.entities_per_second
        );
        outln!(
            "latency       p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
            self.latency_p50_ms,
            self.latency_p99_ms,
            self.latency_p999_ms,
            self.latency_max_ms
        );
        if self.errors.is_empty() {
            outln!("errors        none");
        } else {
            let shown: Vec<String> = self.errors.iter().map(|(code, n)| format!("{code} {n}")).collect();
            outln!("errors        {}", shown.join(", "));
        }
    }
}

/// The key space: the first keys of `--input` (at most `--key-space`; with
/// `--extend-input`, then generated ones up to `--key-space`), or generated ones. Generated keys are made on demand
/// (a key space of 10^8 costs no memory) in redis-benchmark's `__rand_int__`
/// format, so `key:__rand_int__` with `-r <key space>` draws the same keys.
pub struct KeySpace {
    file: Vec<Bytes>,
    len: usize,
}

impl KeySpace {
    /// Distinct keys (a count).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Keys read from `--input` (the rest are generated).
    pub fn read_from_file(&self) -> usize {
        self.file.len()
    }

    /// `len` generated keys and none from a file.
    #[cfg(test)]
    pub fn generated(len: usize) -> KeySpace {
        KeySpace { file: Vec::new(), len }
    }

    /// Calls `f` with each key at `indices` (each `< len`), in order: the
    /// keys [`KeySpace::many`] gives, without a `Bytes` per key (generated
    /// keys are written into one reused buffer).
    pub fn each(&self, indices: impl Iterator<Item = usize>, mut f: impl FnMut(&[u8])) {
        let mut buf = Vec::with_capacity(32);
        for i in indices {
            match self.file.get(i) {
                Some(k) => f(k),
                None => {
                    buf.clear();
                    push_generated_key(&mut buf, i);
                    f(&buf);
                }
            }
        }
    }

    /// The keys at `indices` (each `< len`), in order: the file's `i`-th key,
    /// else the generated `key:` and 12 digits, as redis-benchmark's
    /// `key:__rand_int__` ([`KeySpace::each`]). They are copied into one
    /// buffer and sliced from it: one allocation per batch, not per key.
    pub fn many(&self, indices: impl Iterator<Item = usize>) -> Vec<Bytes> {
        let (mut buf, mut ends) = (Vec::with_capacity(indices.size_hint().0 * 16), Vec::new());
        self.each(indices, |key| {
            buf.extend_from_slice(key);
            ends.push(buf.len());
        });
        let all = Bytes::from(buf);
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let key = all.slice(start..end);
                start = end;
                key
            })
            .collect()
    }
}

/// Appends `key:` and `i` in at least 12 digits (`format!("key:{i:012}")`)
/// to `buf`. By hand, two digits per step: the formatter took a tenth of
/// the load generator's CPU, a digit per step still a tenth of what was left.
fn push_generated_key(buf: &mut Vec<u8>, i: usize) {
    const TWELVE_DIGITS: u64 = 1_000_000_000_000;
    /// "00" to "99", each two ASCII digits.
    const PAIRS: [u8; 200] = {
        let mut t = [0u8; 200];
        let mut n = 0;
        while n < 100 {
            t[2 * n] = b'0' + (n / 10) as u8;
            t[2 * n + 1] = b'0' + (n % 10) as u8;
            n += 1;
        }
        t
    };
    let mut v = i as u64;
    if v >= TWELVE_DIGITS {
        use std::io::Write as _;
        let _ = write!(buf, "key:{i:012}");
        return;
    }
    let mut digits = [b'0'; 12];
    for pair in digits.chunks_exact_mut(2).rev() {
        let d = (v % 100) as usize * 2;
        pair.copy_from_slice(&PAIRS[d..d + 2]);
        v /= 100;
    }
    buf.extend_from_slice(b"key:");
    buf.extend_from_slice(&digits);
}

/// The key space of `args` (see [`KeySpace`]).
pub fn load_keys(args: &BenchArgs) -> anyhow::Result<Arc<KeySpace>> {
    let n = args.key_space.max(1);
    let mut file = Vec::new();
    let (mut buf, mut ends) = (Vec::new(), Vec::new());
    if let Some(path) = &args.input {
        let f = std::fs::File::open(path).with_context(|| format!("opening --input {}", path.display()))?;
        for line in BufReader::new(f).lines() {
            if ends.len() == n {
                break;
            }
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            let key = line.split('\t').next().unwrap_or_default();
            if !key.is_empty() {
                buf.extend_from_slice(key.as_bytes());
                ends.push(buf.len());
            }
        }
        anyhow::ensure!(!ends.is_empty(), "{} holds no keys", path.display());
        // One buffer kept for the life of the process: a `Bytes` slice of
        // static memory clones as a plain copy, where one `Bytes` per key
        // would cost a refcount (and its cache miss) per key sent, about
        // half of the load generator's CPU at 2 M keys/s.
        let all: &'static [u8] = Box::leak(std::mem::take(&mut buf).into_boxed_slice());
        let mut start = 0;
        file = ends
            .iter()
            .map(|&end| {
                let key = Bytes::from_static(&all[start..end]);
                start = end;
                key
            })
            .collect();
        if !args.extend_input {
            let len = file.len();
            return Ok(Arc::new(KeySpace { file, len }));
        }
    }
    Ok(Arc::new(KeySpace { file, len: n }))
}

struct Shared {
    requests: AtomicU64,
    entities: AtomicU64,
    errors: AtomicU64,
    cursor: AtomicU64,
    stop: AtomicBool,
}

struct WorkerResult {
    histogram: Histogram<u64>,
    errors: BTreeMap<String, u64>,
}

/// Runs the benchmark described by `args`.
pub async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.batch >= 1 && args.concurrency >= 1,
        "--batch and --concurrency must be at least 1"
    );
    let keys = load_keys(args)?;
    let n = args.expected_insertions.unwrap_or(keys.len() as u64);
    let p = args.false_positive_rate;
    let system = match &args.redis {
        Some(url) => System::redis(url, args.bloom_key.as_deref(), n, p).await?,
        None => System::solus(&args.target, &args.client, &args.deduper, n, p).await?,
    };
    let name = match (&args.redis, &args.bloom_key) {
        (Some(url), Some(key)) => format!("redisbloom {url} {key}"),
        (Some(url), None) => format!("redis {url}"),
        (None, _) => format!("solus {}", args.target.addr),
    };
    let shared = Arc::new(Shared {
        requests: AtomicU64::new(0),
        entities: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        cursor: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let per_worker_interval = args
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(args.concurrency as f64 / r));
    let deadline = (!args.sequential && args.requests.is_none()).then(|| Duration::from_secs_f64(args.duration));
    let budget = args.requests;
    let start = Instant::now();

    let mut workers = Vec::new();
    for w in 0..args.concurrency {
        let (mut system, keys, shared) = (system.clone(), keys.clone(), shared.clone());
        let (batch, op, ttl, sequential) = (args.batch, args.op, args.ttl_ms, args.sequential);
        let mut rng = StdRng::seed_from_u64(args.seed.wrapping_add(w as u64 * 0x9E37_79B9));
        workers.push(tokio::spawn(async move {
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
            let mut errors = BTreeMap::new();
            let mut indices = Vec::with_capacity(batch);
            let mut pacer = per_worker_interval.map(|i| {
                let mut t = tokio::time::interval(i);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                t
            });
            for i in 0u64.. {
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(b) = budget
                    && shared.requests.fetch_add(1, Ordering::Relaxed) >= b
                {
                    break;
                }
                indices.clear();
                if sequential {
                    let from = shared.cursor.fetch_add(batch as u64, Ordering::Relaxed) as usize;
                    if from >= keys.len() {
                        break;
                    }
                    indices.extend(from..(from + batch).min(keys.len()));
                } else {
                    indices.extend((0..batch).map(|_| rng.random_range(0..keys.len())));
                }
                if let Some(p) = pacer.as_mut() {
                    p.tick().await;
                }
                let n = indices.len() as u64;
                let t0 = Instant::now();
                let result = system.call(op.call_for(i), &keys, &indices, ttl).await;
                histogram.saturating_record(t0.elapsed().as_micros() as u64);
                if budget.is_none() {
                    shared.requests.fetch_add(1, Ordering::Relaxed);
                }
                match result {
                    Ok(()) => {
                        shared.entities.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(code) => {
                        shared.errors.fetch_add(1, Ordering::Relaxed);
                        *errors.entry(code).or_insert(0) += 1;
                    }
                }
            }
            WorkerResult { histogram, errors }
        }));
    }

    let progress = {
        let (shared, quiet) = (shared.clone(), args.quiet);
        tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64);
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if let Some(d) = deadline
                    && start.elapsed() >= d
                {
                    shared.stop.store(true, Ordering::Relaxed);
                }
                if !quiet {
                    let e = shared.entities.load(Ordering::Relaxed);
                    let rate = (e - last.1) as f64 / last.0.elapsed().as_secs_f64();
                    last = (Instant::now(), e);
                    eprintln!(
                        "  {:>5.1} s: {} requests, {} entities ({rate:.0}/s), {} errors",
                        start.elapsed().as_secs_f64(),
                        shared.requests.load(Ordering::Relaxed),
                        e,
                        shared.errors.load(Ordering::Relaxed)
                    );
                }
            }
        })
    };

    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut errors = BTreeMap::new();
    for w in workers {
        let r = w.await.context("benchmark worker panicked")?;
        histogram.add(&r.histogram).context("merging histograms")?;
        for (code, n) in r.errors {
            *errors.entry(code).or_insert(0) += n;
        }
    }
    progress.abort();
    let seconds = start.elapsed().as_secs_f64();
    let requests = histogram.len();
    let entities = shared.entities.load(Ordering::Relaxed);
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    Ok(Report {
        system: name,
        op: args.op,
        batch: args.batch,
        concurrency: args.concurrency,
        requests,
        entities,
        seconds,
        requests_per_second: requests as f64 / seconds,
        entities_per_second: entities as f64 / seconds,
        latency_p50_ms: ms(0.5),
        latency_p99_ms: ms(0.99),
        latency_p999_ms: ms(0.999),
        latency_max_ms: histogram.max() as f64 / 1000.0,
        errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_keys_is_the_keys_one_by_one() {
        let keys = KeySpace {
            file: vec![Bytes::from_static(b"left-pad"), Bytes::from_static(b"react")],
            len: 1_000,
        };
        let many = keys.many([1, 7, 0, 999, 2, 1, 42].into_iter());
        let want: [&[u8]; 7] = [
            b"react",
            b"key:000000000007",
            b"left-pad",
            b"key:000000000999",
            b"key:000000000002",
            b"react",
            b"key:000000000042",
        ];
        assert_eq!(many, want.map(Bytes::from_static).to_vec());
    }

    #[test]
    fn generated_keys_are_redis_benchmarks_rand_int_keys() {
        for i in [
            0,
            7,
            42,
            99_999_999,
            123_456_789_012,
            999_999_999_999,
            1_000_000_000_000,
            usize::MAX,
        ] {
            let mut buf = b"x".to_vec();
            push_generated_key(&mut buf, i);
            assert_eq!(buf, format!("xkey:{i:012}").into_bytes(), "{i}");
        }
        let keys = KeySpace {
            file: Vec::new(),
            len: 100_000_000,
        };
        assert_eq!(
            keys.many([99_999_999, 0].into_iter()),
            [
                Bytes::from_static(b"key:000099999999"),
                Bytes::from_static(b"key:000000000000")
            ]
        );
    }
}
