//! The history runner of issue 51: concurrent clients record every data
//! call against a real server (in this process, over gRPC) while a
//! nemesis resizes, changes the expiry and steps the clock; the
//! `solus-promises` model then checks the history.
//!
//! Op choices and the nemesis's schedule come from the seed; the threads'
//! interleaving does not (the server runs on real threads), so a seed
//! replays the same workload, not always the same history. A violation is
//! printed with its shrunk history (the ops that witness it).

pub mod nemesis;
pub mod workload;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use solus_promises::{Op, Report, Settings};
use tokio::sync::Mutex;

/// One run's shape.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    /// How long clients send, real time.
    pub duration: Duration,
    /// Concurrent clients.
    pub clients: u32,
    /// Distinct entities the clients draw from: small, so collisions are
    /// frequent.
    pub pool: u32,
    /// The deduper's expiry, in (Solus clock) seconds.
    pub expiry_seconds: u64,
    /// n and p it is created with.
    pub expected_insertions: u64,
    pub false_positive_rate: f64,
    /// Largest batch of a "large" request (those fill the deduper's lane).
    pub large_batch: usize,
    /// Share of requests that are large.
    pub large_share: f64,
    /// Longest deadline a client gives a call, real ms.
    pub max_deadline_ms: u64,
    pub nemesis: nemesis::Faults,
}

impl Plan {
    /// The fast run's shape for `seed`.
    pub fn fast(seed: u64, duration: Duration) -> Plan {
        Plan {
            seed,
            duration,
            clients: 32,
            pool: 5_000,
            expiry_seconds: 4,
            expected_insertions: 500_000,
            false_positive_rate: 1e-6,
            large_batch: 6_000,
            large_share: 0.5,
            max_deadline_ms: 10_000,
            nemesis: nemesis::Faults::default(),
        }
    }
}

/// What the clients share: the history and the op ids.
#[derive(Default)]
pub struct Recorder {
    ops: Mutex<Vec<Op>>,
    next_id: AtomicU64,
    pub stop: AtomicBool,
    /// Failed calls by status code and message (digits dropped), counted.
    pub failures: std::sync::Mutex<std::collections::BTreeMap<String, u32>>,
    /// What the nemesis did, when (Solus clock, ms).
    pub events: std::sync::Mutex<Vec<(i64, String)>>,
}

impl Recorder {
    pub fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn failure(&self, s: &tonic::Status) {
        let message: String = s.message().chars().filter(|c| !c.is_ascii_digit()).take(90).collect();
        let key = format!("{:?}: {message}", s.code());
        *self.failures.lock().unwrap().entry(key).or_default() += 1;
    }

    pub fn event(&self, what: String) {
        self.events.lock().unwrap().push((solus::clock::now_ms(), what));
    }

    pub async fn record(&self, op: Op) {
        self.ops.lock().await.push(op);
    }

    pub async fn history(&self) -> Vec<Op> {
        let mut ops = self.ops.lock().await.clone();
        ops.sort_by_key(|o| (o.invoke_ms, o.id));
        ops
    }
}

/// A run's outcome: the report, the history, and what the nemesis did.
pub struct Outcome {
    pub report: Report,
    pub history: Vec<Op>,
    pub faults: nemesis::Done,
    /// The nemesis's acts other than clock steps: (Solus clock ms, what).
    pub events: Vec<(i64, String)>,
    /// Failed calls by status and message, counted.
    pub failures: Vec<(String, u32)>,
    pub took: Duration,
}

/// The model's settings for a run: the answer slack covers a clock step of
/// the nemesis while a call is between its clock read and its answer (the
/// steps come every `interval`, far longer than a storage call).
pub fn settings(faults: &nemesis::Faults, clock_bound_ms: i64) -> Settings {
    Settings {
        clock_bound_ms,
        answer_slack_ms: 1000 + faults.max_clock_step_ms,
        // Whole seconds on the embedded store; HBase keeps ms, but its
        // default is kept: it only widens what explains a present answer.
        ..Settings::default()
    }
}

/// Runs `plan` against the replicas at `channels` (sharing one store;
/// client `c` talks to replica `c % replicas`, the nemesis to the first),
/// then checks the history.
pub async fn run(
    plan: &Plan,
    channels: &[tonic::transport::Channel],
    clock_bound_ms: i64,
    restart: Option<nemesis::Restart>,
) -> Outcome {
    let channel = channels[0].clone();
    let started = Instant::now();
    let rec = Arc::new(Recorder::default());
    workload::create(&channel, plan).await;
    let mut clients = Vec::new();
    for c in 0..plan.clients {
        let channel = channels[c as usize % channels.len()].clone();
        let (rec, plan) = (rec.clone(), plan.clone());
        clients.push(tokio::spawn(
            async move { workload::client(c, &plan, channel, &rec).await },
        ));
    }
    let nemesis = {
        let (rec, plan, channel) = (rec.clone(), plan.clone(), channel.clone());
        tokio::spawn(async move { nemesis::run(&plan, channel, rec, restart).await })
    };
    tokio::time::sleep(plan.duration).await;
    rec.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.expect("client task");
    }
    let faults = nemesis.await.expect("nemesis task");
    let events = rec.events.lock().unwrap().clone();
    let failures = rec.failures.lock().unwrap().clone().into_iter().collect();
    let history = rec.history().await;
    let report = solus_promises::check(&history, &settings(&plan.nemesis, clock_bound_ms));
    Outcome {
        report,
        history,
        faults,
        events,
        failures,
        took: started.elapsed(),
    }
}

/// Prints a run's summary and, for each kind of violation found, the first
/// one with its shrunk history.
pub fn print(plan: &Plan, backend: &str, o: &Outcome) {
    eprintln!(
        "promises: {backend} seed {} ({:.1} s): {}; faults: {}; sized p = {:.0e}",
        plan.seed,
        o.took.as_secs_f64(),
        o.report,
        o.faults,
        plan.false_positive_rate
    );
    for (what, n) in &o.failures {
        eprintln!("  {n} failed: {what}");
    }
    let mut took: Vec<i64> = o.history.iter().map(|op| op.complete_ms - op.invoke_ms).collect();
    took.sort_unstable();
    if !took.is_empty() {
        let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
        eprintln!(
            "  call time (Solus clock, ms): p50 {}, p90 {}, p99 {}, max {}",
            at(0.5),
            at(0.9),
            at(0.99),
            at(1.0)
        );
    }
    for at in &o.report.false_positive_examples {
        eprintln!("  false positive: {at}");
        every_op_of(&o.history, at);
    }
    let mut shown: Vec<&str> = Vec::new();
    for v in &o.report.violations {
        if shown.contains(&v.name()) {
            continue;
        }
        shown.push(v.name());
        eprintln!("  {v}");
        let shrunk = solus_promises::shrink(&o.history, v);
        for op in &shrunk {
            eprintln!("    {}", workload::describe(op));
        }
        if let Some(at) = v.read() {
            every_op_of(&o.history, &at);
        }
        // The nemesis's acts from 10 s before the first witness to the last's end.
        let from = shrunk.iter().map(|op| op.invoke_ms).min().unwrap_or(0) - 10_000;
        let to = shrunk.iter().map(|op| op.complete_ms).max().unwrap_or(0);
        for (at, what) in o.events.iter().filter(|(at, _)| (from..=to).contains(at)) {
            eprintln!("    nemesis at {at}: {what}");
        }
    }
}

/// Prints every op of the entity at `at`, with its answers there.
fn every_op_of(history: &[Op], at: &solus_promises::At) {
    let op = history.iter().find(|op| op.id == at.op).expect("a witness op");
    let e = &op.entities[at.entity];
    eprintln!("    every op of {:?}:", String::from_utf8_lossy(e));
    for other in history.iter().filter(|x| x.entities.contains(e)).take(40) {
        let places: Vec<usize> = (0..other.entities.len()).filter(|&i| &other.entities[i] == e).collect();
        let answers: Vec<Option<bool>> = places.iter().map(|&i| other.answer(i)).collect();
        eprintln!("      at {places:?} answers {answers:?} {}", workload::describe(other));
    }
}
