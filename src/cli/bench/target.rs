//! The two systems a benchmark can drive: Solus over gRPC, or Redis with one
//! key per entity (`SET k 1 NX PX ttl`, pipelined per batch) - what teams
//! commonly use instead of a Bloom dedup service.

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
    Redis(redis::aio::MultiplexedConnection),
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

    pub async fn redis(url: &str) -> anyhow::Result<System> {
        let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url:?}"))?;
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .with_context(|| format!("connecting to {url}"))?;
        Ok(System::Redis(conn))
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
                            client_id: c,
                            deduper: d,
                            entities: keys,
                        })
                        .await
                        .map(drop),
                    Call::AddIfAbsent => client
                        .add_if_absent(pb::AddIfAbsentRequest {
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
            System::Redis(conn) => {
                let mut pipe = redis::pipe();
                for k in &keys {
                    match call {
                        Call::Check => pipe.cmd("EXISTS").arg(&k[..]),
                        Call::Add | Call::AddIfAbsent => pipe
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
