//! `solus compare`: Solus (embedded store) against Redis with one key per
//! entity, on the same machine, keys, batch size and concurrency. Starts both
//! servers on free loopback ports, loads every key once, measures memory and
//! disk per remembered entity, then throughput and latency per operation,
//! prints one table, and stops everything it started.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::driver::{self, Report};
use super::{BenchArgs, Op};
use crate::cli::Target;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The Redis server binary (Debian package `redis-server`).
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Entities per request (a count).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Requests in flight at once (one per worker; a count).
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
    /// p of the Solus deduper, a fraction in (0, 1) (n = --key-space).
    #[arg(long, default_value_t = 0.01)]
    pub false_positive_rate: f64,
    /// Also write the results as a Markdown table to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
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

/// Allocated bytes under `path` (blocks, not apparent length).
fn disk_bytes(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => disk_bytes(&e.path()),
                    Ok(m) => std::os::unix::fs::MetadataExt::blocks(&m) * 512,
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
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

pub async fn run_compare(a: CompareArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temporary data directory")?;
    let data = dir.path().join("solus-data");
    let (solus_port, redis_port) = (free_port()?, free_port()?);
    let exe = std::env::current_exe().context("locating the solus binary")?;
    eprintln!(
        "starting solus on 127.0.0.1:{solus_port} (embedded store in {})",
        data.display()
    );
    let solus = Guard(
        Command::new(exe)
            .arg("serve")
            .env("SOLUS__SERVER__LISTEN", format!("127.0.0.1:{solus_port}"))
            .env("SOLUS__STORAGE__EMBEDDED__PATH", &data)
            // Checkpoints a third as often as the default, so the memory and
            // disk figures can be read after one without a long wait.
            .env("SOLUS__STORAGE__EMBEDDED__CHECKPOINT_INTERVAL_MS", "10000")
            .env("SOLUS__LOG__LEVEL", "warn")
            .env("SOLUS__METRICS__LISTEN", "")
            .stdout(Stdio::null())
            .spawn()
            .context("starting solus serve")?,
    );
    eprintln!(
        "starting {} on 127.0.0.1:{redis_port} (no persistence)",
        a.redis_server.display()
    );
    let _redis = Guard(
        Command::new(&a.redis_server)
            .args([
                "--port",
                &redis_port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {} (install Debian's redis-server)", a.redis_server.display()))?,
    );
    let solus_addr = format!("127.0.0.1:{solus_port}");
    let redis_url = format!("redis://127.0.0.1:{redis_port}/");
    wait_for("solus", || async {
        crate::cli::client::connect(&Target::plain(solus_addr.clone()))
            .await
            .is_ok()
    })
    .await?;
    wait_for("redis", || async { redis_used_memory(&redis_url).await.is_ok() }).await?;

    let args = |redis: bool, op: Op| BenchArgs {
        target: Target::plain(solus_addr.clone()),
        redis: redis.then(|| redis_url.clone()),
        op,
        batch: a.batch,
        concurrency: a.concurrency,
        duration: a.duration,
        requests: None,
        rate: None,
        key_space: a.key_space,
        sequential: false,
        ttl_ms: 3_600_000,
        seed: 1,
        input: a.input.clone(),
        client: "compare".into(),
        deduper: "compare".into(),
        false_positive_rate: a.false_positive_rate,
        json: false,
        quiet: true,
    };

    // Memory and disk per remembered entity: load every key once.
    let pid = solus.0.id();
    let (rss0, disk0, redis0) = (rss_bytes(pid)?, disk_bytes(&data), redis_used_memory(&redis_url).await?);
    eprintln!("loading {} keys into each system...", a.key_space);
    let mut load = args(false, Op::Add);
    load.sequential = true;
    let solus_load = driver::run(&load).await?;
    load.redis = Some(redis_url.clone());
    let redis_load = driver::run(&load).await?;
    eprintln!("waiting 11 s for a checkpoint before reading memory and disk...");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let entities = solus_load.entities.max(1);
    let solus_rss = rss_bytes(pid)?.saturating_sub(rss0);
    let solus_disk = disk_bytes(&data).saturating_sub(disk0);
    let redis_mem = redis_used_memory(&redis_url).await?.saturating_sub(redis0);

    let mut rows: Vec<(String, Report, Report)> = Vec::new();
    rows.push(("load (Add, each key once)".into(), solus_load, redis_load));
    for op in [Op::Check, Op::AddIfAbsent, Op::Add] {
        eprintln!("measuring {} for {} s on each system...", op.name(), a.duration);
        let s = driver::run(&args(false, op)).await?;
        let r = driver::run(&args(true, op)).await?;
        rows.push((op.label().to_string(), s, r));
    }
    // Latency at half of peak throughput.
    let peak = rows[1].1.requests_per_second;
    let mut half = args(false, Op::Check);
    half.rate = Some(peak / 2.0);
    let s_half = driver::run(&half).await?;
    half.redis = Some(redis_url.clone());
    let r_half = driver::run(&half).await?;
    rows.push((
        format!("Check at {:.0} requests/s (half of Solus peak)", peak / 2.0),
        s_half,
        r_half,
    ));

    let mut out = String::new();
    let _ = writeln!(
        out,
        "| operation | Solus entities/s | Redis entities/s | Solus/Redis | Solus p99 ms | Redis p99 ms | errors (S/R) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---|");
    for (name, s, r) in &rows {
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {:.0} | {:.2}x | {:.2} | {:.2} | {}/{} |",
            s.entities_per_second,
            r.entities_per_second,
            s.entities_per_second / r.entities_per_second.max(1e-9),
            s.latency_p99_ms,
            r.latency_p99_ms,
            s.errors.values().sum::<u64>(),
            r.errors.values().sum::<u64>()
        );
    }
    let solus_total = solus_rss + solus_disk;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| bytes per remembered entity ({entities} keys) | Solus | Redis | Solus/Redis |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| memory + disk | {:.1} (RSS {:.1} + disk {:.1}) | {:.1} (used_memory) | {:.2}x |",
        solus_total as f64 / entities as f64,
        solus_rss as f64 / entities as f64,
        solus_disk as f64 / entities as f64,
        redis_mem as f64 / entities as f64,
        solus_total as f64 / redis_mem.max(1) as f64
    );
    let _ = writeln!(
        out,
        "\nbatch {}, concurrency {}, {} s per measurement, Solus deduper n = {} p = {}, client and servers on this machine",
        a.batch, a.concurrency, a.duration, a.key_space, a.false_positive_rate
    );
    print!("{out}");
    if let Some(path) = &a.markdown {
        std::fs::write(path, &out).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
