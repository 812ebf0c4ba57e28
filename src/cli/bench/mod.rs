//! `solus bench`: a gRPC load generator for Solus (or, for comparison, a
//! pipelined Redis `SET NX PX` client driven the same way), and
//! `solus compare`, which runs both side by side.
//!
//! Closed loop: `--concurrency` workers each send one request of `--batch`
//! entities at a time (optionally paced to `--rate` requests/s in total),
//! for `--duration` seconds or `--requests` requests, or once over the key
//! space with `--sequential`. Latency is per request, in an HDR histogram.

mod compare;
mod driver;
mod target;
mod wire;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

pub use compare::{CompareArgs, run_compare};
pub use driver::Report;

use super::Target;

/// What each request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// `Add` (Redis: pipelined `SET k 1 NX PX ttl`; RedisBloom: `BF.ADD`).
    Add,
    /// `CheckAbsence` (Redis: pipelined `EXISTS k`; RedisBloom: `BF.EXISTS`).
    Check,
    /// `AddIfAbsent` (Redis: pipelined `SET k 1 NX PX ttl`, absent = OK; RedisBloom: `BF.ADD`).
    AddIfAbsent,
    /// 50% check, 30% add-if-absent, 20% add.
    Mix,
}

impl Op {
    /// The name of `--op`, e.g. `add-if-absent`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Check => "check",
            Op::AddIfAbsent => "add-if-absent",
            Op::Mix => "mix",
        }
    }

    /// The row label in `solus compare`'s table (`Check`, `AddIfAbsent`, ...).
    pub fn label(self) -> &'static str {
        match self {
            Op::Add => "Add",
            Op::Check => "Check",
            Op::AddIfAbsent => "AddIfAbsent",
            Op::Mix => "Mix",
        }
    }
}

#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub target: Target,
    /// Benchmark a Redis server at this URL (e.g. `redis://127.0.0.1:6379`) instead of Solus.
    #[arg(long)]
    pub redis: Option<String>,
    /// With --redis: drive the RedisBloom filter of this key (`BF.ADD` / `BF.EXISTS`)
    /// instead of one key per entity; created when missing (`BF.RESERVE key p n`).
    #[arg(long, requires = "redis")]
    pub bloom_key: Option<String>,
    /// What each request does.
    #[arg(long, value_enum, default_value = "add-if-absent")]
    pub op: Op,
    /// Entities per request (a count).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Requests in flight at once (one per worker; a count).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Run time in seconds (ignored with --requests or --sequential).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Stop after this many requests in total (a count).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Pace to this many requests/s in total (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Distinct keys to draw from, a count: the first lines of --input, or
    /// generated `key:<12 digits>` (redis-benchmark's `key:__rand_int__` with `-r <count>`).
    #[arg(long, default_value_t = 1_000_000)]
    pub key_space: usize,
    /// When --input holds fewer than --key-space keys, continue with generated keys
    /// (`key:<i>`, i from the number read) up to --key-space instead of stopping at the file's end.
    #[arg(long)]
    pub extend_input: bool,
    /// Send every key of the key space exactly once, in order, then stop (a load phase).
    #[arg(long)]
    pub sequential: bool,
    /// TTL of adds, in ms.
    #[arg(long, default_value_t = 3_600_000)]
    pub ttl_ms: u64,
    /// Seed of the key sampler.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Key file: one key per line (a `<key>\t...` line uses the key).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Client id of the deduper benchmarked.
    #[arg(long, default_value = "bench")]
    pub client: String,
    /// Deduper benchmarked; created when missing (n = --expected-insertions, p = --false-positive-rate).
    #[arg(long, default_value = "bench")]
    pub deduper: String,
    /// n of the deduper created when missing, a count (default: --key-space).
    /// Smaller than --key-space to draw random keys over more than the deduper holds.
    #[arg(long)]
    pub expected_insertions: Option<u64>,
    /// p of the deduper created when missing, a fraction in (0, 1).
    #[arg(long, default_value_t = 0.01)]
    pub false_positive_rate: f64,
    /// Print the summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs `solus bench` and prints its summary.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let report = driver::run(&args).await?;
    if args.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        report.print();
    }
    Ok(())
}
