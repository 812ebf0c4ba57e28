//! Operator client commands: deduper admin, add, check, add-if-absent.

use std::io::BufRead;

use anyhow::Context;
use clap::Args;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::{DataArgs, DeduperCommand, LevelArg, Target, decode_hex, endpoint_url};
use crate::api::pb;
use crate::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use crate::api::pb::deduper_service_client::DeduperServiceClient;

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub target: Target,
    #[arg(long)]
    pub client: String,
    #[arg(long)]
    pub name: String,
    /// n: expected insertions within the expiry window.
    #[arg(long, short = 'n')]
    pub expected_insertions: Option<u64>,
    /// p: target false-positive rate, in (0, 1).
    #[arg(long, short = 'p')]
    pub false_positive_rate: Option<f64>,
    /// k (explicit geometry; give with --shards and --bits-per-shard).
    #[arg(long)]
    pub hash_functions: Option<u32>,
    #[arg(long)]
    pub shards: Option<u32>,
    #[arg(long)]
    pub bits_per_shard: Option<u32>,
    /// Longest and default TTL, in seconds.
    #[arg(long, default_value_t = 86_400)]
    pub expiry_seconds: u64,
    #[arg(long, value_enum, default_value = "global")]
    pub level: LevelArg,
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

/// Connects to the server named by `target` (TLS when `--ca-cert` is given).
pub async fn connect(target: &Target) -> anyhow::Result<Conn> {
    let tls = target.ca_cert.is_some();
    let url = endpoint_url(&target.addr, tls);
    let mut endpoint = Channel::from_shared(url.clone()).with_context(|| format!("bad server address {url:?}"))?;
    if let Some(ca) = &target.ca_cert {
        let pem = std::fs::read(ca).with_context(|| format!("reading --ca-cert {}", ca.display()))?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem));
        if let Some(domain) = &target.tls_domain {
            config = config.domain_name(domain.clone());
        }
        if let (Some(cert), Some(key)) = (&target.client_cert, &target.client_key) {
            let read = |p: &std::path::PathBuf| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        endpoint = endpoint.tls_config(config).context("TLS settings")?;
    }
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("connecting to {url}"))?;
    let token = match &target.token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .context("the token must be printable ASCII")?,
        ),
        None => None,
    };
    Ok(InterceptedService::new(channel, BearerToken(token)))
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
    });
    println!("{json}");
}

fn status_error(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", s.code(), s.message())
}

pub async fn deduper(command: DeduperCommand) -> anyhow::Result<()> {
    match command {
        DeduperCommand::Create(a) => {
            let mut c = DeduperAdminServiceClient::new(connect(&a.target).await?);
            let level = match a.level {
                LevelArg::Global => pb::Level::Global,
                LevelArg::Dc => pb::Level::Dc,
            };
            let d = c
                .create_deduper(pb::CreateDeduperRequest {
                    client_id: a.client,
                    name: a.name,
                    expected_insertions: a.expected_insertions.unwrap_or(0),
                    false_positive_rate: a.false_positive_rate.unwrap_or(0.0),
                    hash_functions: a.hash_functions.unwrap_or(0),
                    shards: a.shards.unwrap_or(0),
                    bits_per_shard: a.bits_per_shard.unwrap_or(0),
                    expiry_seconds: a.expiry_seconds,
                    level: level as i32,
                })
                .await
                .map_err(status_error)?;
            print_deduper(d.get_ref());
        }
        DeduperCommand::Get { target, client, name } => {
            let mut c = DeduperAdminServiceClient::new(connect(&target).await?);
            let d = c
                .get_deduper(pb::GetDeduperRequest {
                    client_id: client,
                    name,
                })
                .await
                .map_err(status_error)?;
            print_deduper(d.get_ref());
        }
        DeduperCommand::List {
            target,
            client,
            active_only,
        } => {
            let mut c = DeduperAdminServiceClient::new(connect(&target).await?);
            let r = c
                .list_dedupers(pb::ListDedupersRequest {
                    client_id: client,
                    active_only,
                })
                .await
                .map_err(status_error)?;
            r.get_ref().dedupers.iter().for_each(print_deduper);
        }
        DeduperCommand::Update {
            target,
            client,
            name,
            active,
            expiry_seconds,
        } => {
            let mut c = DeduperAdminServiceClient::new(connect(&target).await?);
            let d = c
                .update_deduper(pb::UpdateDeduperRequest {
                    client_id: client,
                    name,
                    active,
                    expiry_seconds,
                })
                .await
                .map_err(status_error)?;
            print_deduper(d.get_ref());
        }
    }
    Ok(())
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

pub async fn add(a: DataArgs) -> anyhow::Result<()> {
    let mut c = DeduperServiceClient::new(connect(&a.target).await?);
    let mut total = 0u64;
    for batch in batches(&a)? {
        let r = c
            .add(pb::AddRequest {
                request_id: None,
                client_id: a.client.clone(),
                deduper: a.deduper.clone(),
                entities: batch.into_iter().map(|(_, b)| b.into()).collect(),
                ttl_ms: a.ttl_ms,
            })
            .await
            .map_err(status_error)?;
        total += u64::from(r.get_ref().added);
    }
    println!("added {total}");
    Ok(())
}

/// `check` and `add-if-absent`: prints `absent <entity>` or `present <entity>`.
pub async fn check(a: DataArgs, add: bool) -> anyhow::Result<()> {
    let mut c = DeduperServiceClient::new(connect(&a.target).await?);
    for batch in batches(&a)? {
        let entities = batch.iter().map(|(_, b)| b.clone().into()).collect();
        let absent = if add {
            let req = pb::AddIfAbsentRequest {
                request_id: None,
                client_id: a.client.clone(),
                deduper: a.deduper.clone(),
                entities,
                ttl_ms: a.ttl_ms,
            };
            c.add_if_absent(req).await.map_err(status_error)?.into_inner().absent
        } else {
            let req = pb::CheckAbsenceRequest {
                client_id: a.client.clone(),
                deduper: a.deduper.clone(),
                entities,
            };
            c.check_absence(req).await.map_err(status_error)?.into_inner().absent
        };
        for ((shown, _), absent) in batch.iter().zip(absent) {
            println!("{} {shown}", if absent { "absent" } else { "present" });
        }
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
