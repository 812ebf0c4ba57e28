//! `solus replay`: a realistic, heavily skewed event stream (keys sampled in
//! proportion to a weight column, e.g. npm monthly downloads) sent through
//! `AddIfAbsent` in batches, with an exact set kept beside it to count false
//! negatives (must be 0) and false positives (should stay near `p`).

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use rand::SeedableRng;
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::rngs::StdRng;
use tonic::Code;

use super::Target;
use super::client::connect;
use super::hints::{Call, call_error};
use crate::api::pb;
use crate::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use crate::api::pb::deduper_service_client::DeduperServiceClient;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub target: Target,
    /// Key file: `<key>\t<weight>` lines (a header line is skipped), or one key per line (uniform).
    #[arg(long)]
    pub input: PathBuf,
    /// Events to send (a count).
    #[arg(long, default_value_t = 500_000)]
    pub events: u64,
    /// Seed of the event sampler: the same seed replays the same stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Client id of the deduper replayed into.
    #[arg(long, default_value = "replay")]
    pub client: String,
    /// Deduper replayed into; created when missing, reused otherwise.
    #[arg(long, default_value = "replay")]
    pub deduper: String,
    /// n used when the deduper has to be created (distinct entities per expiry window).
    #[arg(long, default_value_t = 1_000_000)]
    pub expected_insertions: u64,
    /// p used when the deduper has to be created (a fraction in (0, 1)).
    #[arg(long, default_value_t = 0.01)]
    pub false_positive_rate: f64,
    /// Expiry (and TTL of every add) in seconds, when the deduper has to be created.
    #[arg(long, default_value_t = 86_400)]
    pub expiry_seconds: u64,
    /// Entities per AddIfAbsent request (a count).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Prefix of every entity; default `run-<unix ms>/`, so that a reused
    /// deduper's earlier data does not count as false positives.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Keys and their weights.
fn load_keys(path: &PathBuf) -> anyhow::Result<(Vec<String>, Vec<u64>)> {
    let file = std::fs::File::open(path).with_context(|| {
        format!(
            "opening --input {} (a key file: `<key>\\t<weight>` lines, or one key per line)",
            path.display()
        )
    })?;
    let (mut keys, mut weights) = (Vec::new(), Vec::new());
    for (no, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.is_empty() {
            continue;
        }
        match line.split_once('\t') {
            Some((key, w)) => match w.trim().parse::<u64>() {
                Ok(w) => {
                    keys.push(key.to_string());
                    weights.push(w);
                }
                Err(_) if no == 0 => {} // header
                Err(_) => anyhow::bail!("{}:{}: weight {w:?} is not a whole number", path.display(), no + 1),
            },
            None => {
                keys.push(line);
                weights.push(1);
            }
        }
    }
    anyhow::ensure!(!keys.is_empty(), "{} holds no keys", path.display());
    Ok((keys, weights))
}

/// Creates the deduper, or reuses it when it already exists. Returns its `p`, if known.
async fn ensure_deduper(a: &ReplayArgs) -> anyhow::Result<Option<f64>> {
    let call = replay_call(a);
    let mut admin = DeduperAdminServiceClient::new(connect(&a.target).await?);
    let req = pb::CreateDeduperRequest {
        client_id: a.client.clone(),
        name: a.deduper.clone(),
        expected_insertions: a.expected_insertions,
        false_positive_rate: a.false_positive_rate,
        expiry_seconds: a.expiry_seconds,
        level: pb::Level::Global as i32,
        ..Default::default()
    };
    let d = match admin.create_deduper(req).await {
        Ok(d) => d.into_inner(),
        Err(s) if s.code() == Code::AlreadyExists => {
            let get = pb::GetDeduperRequest {
                client_id: a.client.clone(),
                name: a.deduper.clone(),
            };
            let d = admin.get_deduper(get).await.map_err(|s| call_error(s, call))?;
            eprintln!("reusing existing deduper {}/{}", a.client, a.deduper);
            d.into_inner()
        }
        Err(s) => return Err(call_error(s, call).context("creating the deduper")),
    };
    let sized = match (d.expected_insertions, d.false_positive_rate) {
        (Some(n), Some(p)) => format!(", sized for n={n} p={p}"),
        _ => String::new(),
    };
    eprintln!(
        "deduper {}/{}: k={} shards={} bits_per_shard={}{sized}",
        d.client_id, d.name, d.hash_functions, d.shards, d.bits_per_shard
    );
    Ok(d.false_positive_rate)
}

/// What replay's calls are about, for their errors.
fn replay_call(a: &ReplayArgs) -> Call<'_> {
    Call {
        target: &a.target,
        client: &a.client,
        deduper: Some(&a.deduper),
    }
}

pub async fn run(a: ReplayArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.batch >= 1, "--batch must be at least 1");
    let (keys, weights) = load_keys(&a.input)?;
    let sampler = WeightedIndex::new(&weights).context("weights must not all be zero")?;
    let p = ensure_deduper(&a).await?;
    let prefix = a
        .prefix
        .clone()
        .unwrap_or_else(|| format!("run-{}/", crate::clock::now_ms()));
    let mut client = DeduperServiceClient::new(connect(&a.target).await?)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut seen: HashSet<usize> = HashSet::new();
    let (mut sent, mut new, mut fneg, mut fpos) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let mut last_report = Instant::now();
    eprintln!(
        "replaying {} events from {} ({} keys), prefix {prefix:?}",
        a.events,
        a.input.display(),
        keys.len()
    );
    while sent < a.events {
        let n = (a.events - sent).min(a.batch as u64) as usize;
        let picks: Vec<usize> = (0..n).map(|_| sampler.sample(&mut rng)).collect();
        let entities = picks
            .iter()
            .map(|&i| format!("{prefix}{}", keys[i]).into_bytes().into())
            .collect();
        let req = pb::AddIfAbsentRequest {
            record_ids: Vec::new(),
            request_id: None,
            client_id: a.client.clone(),
            deduper: a.deduper.clone(),
            entities,
            ttl_ms: 0,
        };
        let absent = client
            .add_if_absent(req)
            .await
            .map_err(|s| call_error(s, replay_call(&a)).context(format!("AddIfAbsent after {sent} events")))?
            .into_inner()
            .absent;
        anyhow::ensure!(
            absent.len() == n,
            "server answered {} results for {n} entities",
            absent.len()
        );
        for (&i, absent) in picks.iter().zip(absent) {
            let first_time = seen.insert(i);
            new += u64::from(first_time);
            match (first_time, absent) {
                (false, true) => fneg += 1,
                (true, false) => fpos += 1,
                _ => {}
            }
        }
        sent += n as u64;
        if last_report.elapsed() >= Duration::from_secs(2) || sent == a.events {
            last_report = Instant::now();
            let rate = sent as f64 / start.elapsed().as_secs_f64();
            eprintln!(
                "  {sent}/{} events ({:.0}%), {rate:.0} events/s, distinct {new}, false negatives {fneg}, false positives {fpos}",
                a.events,
                100.0 * sent as f64 / a.events as f64
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let observed = if new > 0 { fpos as f64 / new as f64 } else { 0.0 };
    if a.json {
        let json = serde_json::json!({
            "events": sent, "distinct": new, "duplicates": sent - new, "false_negatives": fneg,
            "false_positives": fpos, "false_positive_rate": observed, "configured_p": p,
            "seconds": secs, "events_per_second": sent as f64 / secs,
        });
        outln!("{json}");
    } else {
        outln!("events            {sent}");
        outln!("distinct          {new}");
        outln!("duplicates        {}", sent - new);
        outln!("false negatives   {fneg}");
        match p {
            Some(p) => outln!(
                "false positives   {fpos} (rate {observed:.6} = {:.2} x configured p {p})",
                observed / p
            ),
            None => outln!("false positives   {fpos} (rate {observed:.6})"),
        }
        outln!("throughput        {:.0} events/s over {secs:.1} s", sent as f64 / secs);
    }
    anyhow::ensure!(
        fneg == 0,
        "{fneg} false negatives: entities added earlier were reported absent"
    );
    Ok(())
}
