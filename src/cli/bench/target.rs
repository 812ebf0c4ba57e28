//! The systems a benchmark can drive: Solus over gRPC, Redis with one key per
//! entity (`SET k 1 NX PX ttl`, pipelined per batch) - what teams commonly use
//! instead of a Bloom dedup service - or RedisBloom (`BF.ADD` / `BF.EXISTS`
//! on one filter key, pipelined per batch; no per-entity expiry).

use anyhow::Context;
use prost::bytes::Bytes;
use tonic::Code;

use super::Op;
use super::driver::Call;
use crate::api::pb;
use crate::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use crate::api::pb::deduper_service_client::DeduperServiceClient;
use crate::cli::Target as Addr;
use crate::cli::client::{Conn, connect};

/// One connection to the system under test; cloned per worker.
#[derive(Clone)]
pub enum System {
    Solus {
        client: DeduperServiceClient<Conn>,
        client_id: String,
        deduper: String,
    },
    /// One key per entity, or with a filter key, RedisBloom's `BF.ADD` / `BF.EXISTS` on it.
    Redis {
        conn: redis::aio::MultiplexedConnection,
        bloom: Option<String>,
    },
}

impl System {
    /// Connects to Solus and creates the deduper (n = `key_space`) when missing.
    pub async fn solus(addr: &Addr, client_id: &str, deduper: &str, n: u64, p: f64) -> anyhow::Result<System> {
        let channel = connect(addr).await?;
        let create = pb::CreateDeduperRequest {
            client_id: client_id.into(),
            name: deduper.into(),
            expected_insertions: n.max(1),
            false_positive_rate: p,
            expiry_seconds: 86_400,
            level: pb::Level::Global as i32,
            ..Default::default()
        };
        match DeduperAdminServiceClient::new(channel.clone())
            .create_deduper(create)
            .await
        {
            Ok(_) => {}
            Err(s) if s.code() == Code::AlreadyExists => {}
            Err(s) => {
                let call = crate::cli::hints::Call {
                    target: addr,
                    client: client_id,
                    deduper: Some(deduper),
                };
                return Err(
                    crate::cli::hints::call_error(s, call).context(format!("creating deduper {client_id}/{deduper}"))
                );
            }
        }
        let client = DeduperServiceClient::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        Ok(System::Solus {
            client,
            client_id: client_id.into(),
            deduper: deduper.into(),
        })
    }

    /// Connects to Redis. With `bloom`, the RedisBloom filter of that key is
    /// created when missing (`BF.RESERVE bloom p n`).
    pub async fn redis(url: &str, bloom: Option<&str>, n: u64, p: f64) -> anyhow::Result<System> {
        let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url:?}"))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .with_context(|| format!("connecting to {url}"))?;
        if let Some(key) = bloom {
            let r: redis::RedisResult<()> = redis::cmd("BF.RESERVE")
                .arg(key)
                .arg(p)
                .arg(n.max(1))
                .query_async(&mut conn)
                .await;
            match r {
                Ok(()) => {}
                Err(e) if e.to_string().contains("exists") => {}
                Err(e) => return Err(e).with_context(|| format!("BF.RESERVE {key} {p} {n} (is RedisBloom loaded?)")),
            }
        }
        Ok(System::Redis {
            conn,
            bloom: bloom.map(str::to_string),
        })
    }

    /// Sends one request of `keys`; errors carry a status-code name.
    pub async fn call(&mut self, call: Call, keys: Vec<Bytes>, ttl_ms: u64) -> Result<(), String> {
        match self {
            System::Solus {
                client,
                client_id,
                deduper,
            } => {
                let (c, d) = (client_id.clone(), deduper.clone());
                let r = match call {
                    Call::Add => client
                        .add(pb::AddRequest {
                            request_id: None,
                            client_id: c,
                            deduper: d,
                            entities: keys,
                            ttl_ms,
                        })
                        .await
                        .map(drop),
                    Call::Check => client
                        .check_absence(pb::CheckAbsenceRequest {
                            record_ids: Vec::new(),
                            client_id: c,
                            deduper: d,
                            entities: keys,
                        })
                        .await
                        .map(drop),
                    Call::AddIfAbsent => client
                        .add_if_absent(pb::AddIfAbsentRequest {
                            record_ids: Vec::new(),
                            request_id: None,
                            client_id: c,
                            deduper: d,
                            entities: keys,
                            ttl_ms,
                        })
                        .await
                        .map(drop),
                };
                r.map_err(|s| crate::api::code_name(s.code()).to_string())
            }
            System::Redis { conn, bloom } => {
                let mut pipe = redis::pipe();
                for k in &keys {
                    match (call, bloom.as_deref()) {
                        (Call::Check, Some(f)) => pipe.cmd("BF.EXISTS").arg(f).arg(&k[..]),
                        (Call::Add | Call::AddIfAbsent, Some(f)) => pipe.cmd("BF.ADD").arg(f).arg(&k[..]),
                        (Call::Check, None) => pipe.cmd("EXISTS").arg(&k[..]),
                        (Call::Add | Call::AddIfAbsent, None) => pipe
                            .cmd("SET")
                            .arg(&k[..])
                            .arg(1)
                            .arg("NX")
                            .arg("PX")
                            .arg(ttl_ms.max(1)),
                    };
                }
                let r: redis::RedisResult<Vec<redis::Value>> = pipe.query_async(conn).await;
                r.map(drop).map_err(|e| match e.code() {
                    Some(code) => format!("redis {code}"),
                    None if e.is_io_error() => "redis connection".to_string(),
                    None => "redis error".to_string(),
                })
            }
        }
    }
}

impl Op {
    /// The call for the `i`-th request of a worker.
    pub fn call_for(self, i: u64) -> Call {
        match self {
            Op::Add => Call::Add,
            Op::Check => Call::Check,
            Op::AddIfAbsent => Call::AddIfAbsent,
            Op::Mix => match i % 10 {
                0..=4 => Call::Check,
                5..=7 => Call::AddIfAbsent,
                _ => Call::Add,
            },
        }
    }
}
