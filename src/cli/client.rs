//! Operator client commands: deduper admin, add, check, add-if-absent.

use std::io::BufRead;

use anyhow::Context;
use clap::Args;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::hints::{Call, call_error, connect_error, endpoint_url};
use super::{DataArgs, DeduperCommand, LevelArg, Target, decode_hex};
use crate::api::pb;
use crate::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use crate::api::pb::deduper_service_client::DeduperServiceClient;

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub target: Target,
    /// Client id that owns the deduper (1-128 of A-Z a-z 0-9 _ . -).
    #[arg(long)]
    pub client: String,
    /// Name of the new deduper (1-128 of A-Z a-z 0-9 _ . -).
    #[arg(long)]
    pub name: String,
    /// n: distinct entities expected within one --expiry-seconds window (a count).
    #[arg(long, short = 'n')]
    pub expected_insertions: Option<u64>,
    /// p: target false-positive rate, a fraction in (0, 1), e.g. 0.01 for 1% [default with -n: 0.01].
    #[arg(long, short = 'p')]
    pub false_positive_rate: Option<f64>,
    /// k: bits set per entity (explicit geometry, instead of -n/-p; give with --shards and --bits-per-shard).
    #[arg(long)]
    pub hash_functions: Option<u32>,
    /// Number of shards (explicit geometry; give with --hash-functions and --bits-per-shard).
    #[arg(long)]
    pub shards: Option<u32>,
    /// Bits in each shard (explicit geometry; give with --hash-functions and --shards).
    #[arg(long)]
    pub bits_per_shard: Option<u32>,
    /// Longest and default TTL of an entity, in seconds.
    #[arg(long, default_value_t = 86_400)]
    pub expiry_seconds: u64,
    /// `global`: one filter for every datacenter; `dc`: one per datacenter (the server's `farm`).
    #[arg(long, value_enum, default_value = "global")]
    pub level: LevelArg,
}

/// Default p when only -n is given.
pub const DEFAULT_FALSE_POSITIVE_RATE: f64 = 0.01;

impl CreateArgs {
    /// The sizing fields of the request, checked in the flags' terms: -n
    /// (with -p, default 0.01), or all of --hash-functions, --shards and
    /// --bits-per-shard.
    pub fn sizing(&self) -> anyhow::Result<(u64, f64, u32, u32, u32)> {
        let geometry = [
            ("--hash-functions", self.hash_functions),
            ("--shards", self.shards),
            ("--bits-per-shard", self.bits_per_shard),
        ];
        let given: Vec<&str> = geometry.iter().filter(|(_, v)| v.is_some()).map(|(f, _)| *f).collect();
        let missing: Vec<&str> = geometry.iter().filter(|(_, v)| v.is_none()).map(|(f, _)| *f).collect();
        let by_np = self.expected_insertions.is_some() || self.false_positive_rate.is_some();
        if by_np && !given.is_empty() {
            anyhow::bail!(
                "size the deduper either with -n (and -p) or with --hash-functions, --shards and --bits-per-shard,                  not both (got -n/-p and {})",
                given.join(", ")
            );
        }
        if by_np {
            let Some(n) = self.expected_insertions else {
                anyhow::bail!(
                    "-p needs -n: give the number of distinct entities expected within one --expiry-seconds \
                     window, e.g. -n 1000000 -p 0.01"
                );
            };
            anyhow::ensure!(
                n >= 1,
                "-n must be at least 1 (distinct entities expected per expiry window)"
            );
            let p = self.false_positive_rate.unwrap_or(DEFAULT_FALSE_POSITIVE_RATE);
            anyhow::ensure!(
                p > 0.0 && p < 1.0,
                "-p must be a fraction strictly between 0 and 1 (e.g. 0.01 for 1%), got {p}"
            );
            return Ok((n, p, 0, 0, 0));
        }
        match (self.hash_functions, self.shards, self.bits_per_shard) {
            (Some(k), Some(s), Some(b)) => Ok((0, 0.0, k, s, b)),
            (None, None, None) => anyhow::bail!(
                "say how big the deduper is: -n <distinct entities per expiry window> (and -p <false-positive \
                 rate>, default 0.01), e.g. -n 1000000 -p 0.01; or all of --hash-functions, --shards and \
                 --bits-per-shard"
            ),
            _ => anyhow::bail!(
                "explicit geometry needs all of --hash-functions, --shards and --bits-per-shard: {} missing \
                 (or size it with -n and -p instead)",
                missing.join(", ")
            ),
        }
    }
}

/// A connection that adds the target's bearer token to every call.
pub type Conn = InterceptedService<Channel, BearerToken>;

/// Adds `authorization: Bearer <token>` when a token is configured.
#[derive(Clone)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            request.metadata_mut().insert("authorization", t.clone());
        }
        Ok(request)
    }
}

/// How long a client command waits for the TCP (and TLS) connection.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects to the server named by `target` (TLS when `--ca-cert` is given).
/// Errors say what went wrong in terms of the flags (`--addr`, `--ca-cert`,
/// ...) and what to do next.
pub async fn connect(target: &Target) -> anyhow::Result<Conn> {
    let tls = target.ca_cert.is_some();
    let url = endpoint_url(&target.addr, tls)?;
    let mut endpoint = Channel::from_shared(url.clone())
        .map_err(|e| anyhow::anyhow!("--addr {:?} (or SOLUS_ADDR) is not a server address: {e}", target.addr))?
        .connect_timeout(CONNECT_TIMEOUT);
    if let Some(ca) = &target.ca_cert {
        let pem = std::fs::read(ca).with_context(|| format!("reading --ca-cert {}", ca.display()))?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        if let Some(domain) = &target.tls_domain {
            config = config.domain_name(domain.clone());
        }
        if let (Some(cert), Some(key)) = (&target.client_cert, &target.client_key) {
            let read = |flag: &str, p: &std::path::PathBuf| {
                std::fs::read(p).with_context(|| format!("reading {flag} {}", p.display()))
            };
            config = config.identity(Identity::from_pem(
                read("--client-cert", cert)?,
                read("--client-key", key)?,
            ));
        }
        endpoint = endpoint
            .tls_config(config)
            .context("--ca-cert, --client-cert, --client-key: TLS settings refused")?;
    }
    let channel = endpoint.connect().await.map_err(|e| connect_error(target, &url, &e))?;
    let token = match &target.token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .context("--token (or SOLUS_TOKEN) must be printable ASCII")?,
        ),
        None => None,
    };
    Ok(InterceptedService::new(channel, BearerToken(token)))
}

/// Checks `--client` and the deduper's flag before a call, so a bad id is
/// reported in the flag's name.
fn check_ids(client: &str, deduper: Option<(&'static str, &str)>) -> anyhow::Result<()> {
    crate::deduper::validate_name("--client", client)?;
    if let Some((flag, name)) = deduper {
        crate::deduper::validate_name(flag, name)?;
    }
    Ok(())
}

fn print_deduper(d: &pb::Deduper) {
    let level = pb::Level::try_from(d.level)
        .map(|l| l.as_str_name())
        .unwrap_or("LEVEL_UNSPECIFIED");
    let json = serde_json::json!({
        "client_id": d.client_id, "name": d.name, "hash_functions": d.hash_functions,
        "shards": d.shards, "bits_per_shard": d.bits_per_shard, "expiry_seconds": d.expiry_seconds,
        "active": d.active, "level": level, "create_time_ms": d.create_time_ms,
        "update_time_ms": d.update_time_ms, "expected_insertions": d.expected_insertions,
        "false_positive_rate": d.false_positive_rate,
        "stats": d.stats.as_ref().map(stats_json),
    });
    let mut json = json;
    if !d.generations.is_empty() {
        json["generations"] = d.generations.iter().map(generation_json).collect();
    }
    outln!("{json}");
}

/// One generation of a resized deduper as JSON: geometry, sizing, timing
/// (ms since the Unix epoch), where its bits are, and its figures.
fn generation_json(g: &pb::Generation) -> serde_json::Value {
    serde_json::json!({
        "id": g.id, "filter_name": g.filter_name, "hash_functions": g.hash_functions, "shards": g.shards,
        "bits_per_shard": g.bits_per_shard, "expected_insertions": g.expected_insertions,
        "false_positive_rate": g.false_positive_rate, "created_ms": g.created_ms,
        "writes_from_ms": g.writes_from_ms, "retire_at_ms": g.retire_at_ms,
        "stats": g.stats.as_ref().map(stats_json),
    })
}

/// A deduper's live figures as JSON (an infinite estimate shows as null).
fn stats_json(s: &pb::DeduperStats) -> serde_json::Value {
    serde_json::json!({
        "set_bits": s.set_bits, "sampled_bits": s.sampled_bits, "fill_ratio": s.fill_ratio,
        "estimated_entities": s.estimated_entities.round(),
        "estimated_entities_relative_error": s.estimated_entities_relative_error,
        "estimated_false_positive_rate": s.estimated_false_positive_rate, "load": s.load,
        "computed_at_ms": s.computed_at_ms,
    })
}

pub async fn deduper(command: DeduperCommand) -> anyhow::Result<()> {
    match command {
        DeduperCommand::Create(a) => {
            check_ids(&a.client, Some(("--name", &a.name)))?;
            let (expected_insertions, false_positive_rate, hash_functions, shards, bits_per_shard) = a.sizing()?;
            let mut c = DeduperAdminServiceClient::new(connect(&a.target).await?);
            let call = Call {
                target: &a.target,
                client: &a.client,
                deduper: Some(&a.name),
            };
            let level = match a.level {
                LevelArg::Global => pb::Level::Global,
                LevelArg::Dc => pb::Level::Dc,
            };
            let d = c
                .create_deduper(pb::CreateDeduperRequest {
                    client_id: a.client.clone(),
                    name: a.name.clone(),
                    expected_insertions,
                    false_positive_rate,
                    hash_functions,
                    shards,
                    bits_per_shard,
                    expiry_seconds: a.expiry_seconds,
                    level: level as i32,
                })
                .await
                .map_err(|s| call_error(s, call))?;
            print_deduper(d.get_ref());
        }
        DeduperCommand::Get { target, client, name } => {
            print_deduper(&get_deduper(&target, &client, &name).await?);
        }
        DeduperCommand::List {
            target,
            client,
            active_only,
        } => {
            check_ids(&client, None)?;
            let mut c = DeduperAdminServiceClient::new(connect(&target).await?);
            let call = Call {
                target: &target,
                client: &client,
                deduper: None,
            };
            let r = c
                .list_dedupers(pb::ListDedupersRequest {
                    client_id: client.clone(),
                    active_only,
                })
                .await
                .map_err(|s| call_error(s, call))?;
            r.get_ref().dedupers.iter().for_each(print_deduper);
            for u in &r.get_ref().unreadable {
                println!("unreadable {}: {}", u.name, u.error);
            }
        }
        DeduperCommand::Update {
            target,
            client,
            name,
            active,
            expiry_seconds,
            expected_insertions,
            false_positive_rate,
        } => {
            check_ids(&client, Some(("--name", &name)))?;
            anyhow::ensure!(
                active.is_some()
                    || expiry_seconds.is_some()
                    || expected_insertions.is_some()
                    || false_positive_rate.is_some(),
                "nothing to change: give --active true|false, --expiry-seconds <seconds> and/or \
                 --expected-insertions <n> [--false-positive-rate <p>]"
            );
            let mut c = DeduperAdminServiceClient::new(connect(&target).await?);
            let call = Call {
                target: &target,
                client: &client,
                deduper: Some(&name),
            };
            let d = c
                .update_deduper(pb::UpdateDeduperRequest {
                    client_id: client.clone(),
                    name: name.clone(),
                    active,
                    expiry_seconds,
                    expected_insertions,
                    false_positive_rate,
                })
                .await
                .map_err(|s| call_error(s, call))?;
            print_deduper(d.get_ref());
        }
        DeduperCommand::Delete {
            target,
            client,
            name,
            force,
        } => {
            check_ids(&client, Some(("--name", &name)))?;
            let mut c = DeduperAdminServiceClient::new(connect(&target).await?);
            let call = Call {
                target: &target,
                client: &client,
                deduper: Some(&name),
            };
            let r = c
                .delete_deduper(pb::DeleteDeduperRequest {
                    client_id: client.clone(),
                    name: name.clone(),
                    force,
                })
                .await
                .map_err(|s| call_error(s, call))?;
            // The words on stderr, the config it had (JSON) on stdout, as the other commands print it.
            eprintln!("deleted deduper {name:?} of client {client:?} (its config and bits)");
            if let Some(d) = &r.get_ref().deleted {
                print_deduper(d);
            }
        }
        DeduperCommand::Stats { target, client, name } => match get_deduper(&target, &client, &name).await? {
            pb::Deduper {
                stats: Some(s),
                generations,
                ..
            } => {
                let mut json = stats_json(&s);
                if !generations.is_empty() {
                    json["generations"] = generations.iter().map(generation_json).collect();
                }
                outln!("{json}");
            }
            _ => anyhow::bail!(
                "no figures for {client}/{name} yet: the server computes them every stats.refresh_interval_ms \
                     for the dedupers it has seen (0 turns that off); try again after that"
            ),
        },
    }
    Ok(())
}

/// `GetDeduper` for `deduper get` and `deduper stats`, with the ids checked
/// and errors in the CLI's words.
async fn get_deduper(target: &Target, client: &str, name: &str) -> anyhow::Result<pb::Deduper> {
    check_ids(client, Some(("--name", name)))?;
    let mut c = DeduperAdminServiceClient::new(connect(target).await?);
    let call = Call {
        target,
        client,
        deduper: Some(name),
    };
    let d = c
        .get_deduper(pb::GetDeduperRequest {
            client_id: client.to_string(),
            name: name.to_string(),
        })
        .await
        .map_err(|s| call_error(s, call))?;
    Ok(d.into_inner())
}

/// An entity as shown to the user, and its bytes.
type Shown = (String, Vec<u8>);

/// Entities from the arguments, or batches of stdin lines.
/// An entity as one line of output: UTF-8 text as is, except `\\`,
/// control characters (`\n`, `\t`, `\u{..}`) and bytes that are not UTF-8
/// (`\xNN`), which are escaped; never a raw newline.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' || c.is_control() {
                out.extend(c.escape_debug());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

fn batches(a: &DataArgs) -> anyhow::Result<Vec<Vec<Shown>>> {
    let decode = |s: &str| -> anyhow::Result<(String, Vec<u8>)> {
        let bytes = if a.hex { decode_hex(s)? } else { s.as_bytes().to_vec() };
        let shown = if a.hex { s.to_ascii_lowercase() } else { escape(&bytes) };
        Ok((shown, bytes))
    };
    let items: Vec<(String, Vec<u8>)> = if a.entities.is_empty() {
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            eprintln!("no entities given: reading them from stdin, one per line; end with Ctrl-D");
        }
        let mut v = Vec::new();
        for line in std::io::stdin().lock().lines() {
            let line = line.context("reading stdin")?;
            if !line.is_empty() {
                v.push(decode(&line)?);
            }
        }
        v
    } else {
        a.entities.iter().map(|s| decode(s)).collect::<anyhow::Result<_>>()?
    };
    Ok(items.chunks(a.batch.max(1)).map(|c| c.to_vec()).collect())
}

/// What a data command's calls are about.
fn data_call(a: &DataArgs) -> Call<'_> {
    Call {
        target: &a.target,
        client: &a.client,
        deduper: Some(&a.deduper),
    }
}

pub async fn add(a: DataArgs) -> anyhow::Result<()> {
    check_ids(&a.client, Some(("--deduper", &a.deduper)))?;
    let mut c = DeduperServiceClient::new(connect(&a.target).await?);
    let batches = batches(&a)?;
    let mut total = 0u64;
    for batch in batches {
        let r = c
            .add(pb::AddRequest {
                request_id: None,
                client_id: a.client.clone(),
                deduper: a.deduper.clone(),
                entities: batch.into_iter().map(|(_, b)| b.into()).collect(),
                ttl_ms: a.ttl_ms,
            })
            .await
            .map_err(|s| call_error(s, data_call(&a)))?;
        total += u64::from(r.get_ref().added);
    }
    outln!("added {total}");
    Ok(())
}

/// `check` and `add-if-absent`: prints `absent <entity>` or `present <entity>`.
pub async fn check(a: DataArgs, add: bool) -> anyhow::Result<()> {
    check_ids(&a.client, Some(("--deduper", &a.deduper)))?;
    let mut c = DeduperServiceClient::new(connect(&a.target).await?);
    let batches = batches(&a)?;
    for batch in batches {
        let entities = batch.iter().map(|(_, b)| b.clone().into()).collect();
        let absent = if add {
            let req = pb::AddIfAbsentRequest {
                record_ids: Vec::new(),
                request_id: None,
                client_id: a.client.clone(),
                deduper: a.deduper.clone(),
                entities,
                ttl_ms: a.ttl_ms,
            };
            c.add_if_absent(req)
                .await
                .map_err(|s| call_error(s, data_call(&a)))?
                .into_inner()
                .absent
        } else {
            let req = pb::CheckAbsenceRequest {
                record_ids: Vec::new(),
                client_id: a.client.clone(),
                deduper: a.deduper.clone(),
                entities,
            };
            c.check_absence(req)
                .await
                .map_err(|s| call_error(s, data_call(&a)))?
                .into_inner()
                .absent
        };
        for ((shown, _), absent) in batch.iter().zip(absent) {
            outln!("{} {shown}", if absent { "absent" } else { "present" });
        }
    }
    Ok(())
}

/// `solus health`: one line per health service (`""`, the data path and
/// the journal) with its status; exits non-zero unless every one is SERVING.
pub async fn health(target: &Target) -> anyhow::Result<()> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut client = tonic_health::pb::health_client::HealthClient::new(connect(target).await?);
    let mut all_serving = true;
    for (service, meaning) in [
        ("", "the process"),
        (crate::server::DATA_SERVICE_NAME, "storage answers (readiness)"),
        (
            crate::server::JOURNAL_SERVICE_NAME,
            "no damaged journal kept aside, checkpoints succeed (see the server log and docs/operations.md)",
        ),
    ] {
        let req = tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        };
        let status = match client.check(req).await {
            Ok(r) => ServingStatus::try_from(r.into_inner().status)
                .map_or("UNKNOWN", |s| s.as_str_name())
                .to_string(),
            Err(e) if e.code() == tonic::Code::NotFound => "NOT_FOUND".into(),
            Err(e) => return Err(anyhow::anyhow!("health check of {service:?}: {}", e.message())),
        };
        all_serving &= status == "SERVING";
        let shown = if service.is_empty() { "\"\"" } else { service };
        outln!("{shown:<26} {status:<12} {meaning}");
    }
    if !all_serving {
        anyhow::bail!("not every health service is SERVING");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn entities_are_shown_on_one_line() {
        assert_eq!(escape(b"order-1"), "order-1");
        assert_eq!(escape("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(escape(b"a\nb\tc\\d"), "a\\nb\\tc\\\\d");
        assert_eq!(escape(b"\xff\x00x"), "\\xff\\0x");
        assert!(!escape(b"line1\r\nline2").contains('\n'));
    }
}
