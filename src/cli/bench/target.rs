//! The systems a benchmark can drive: Solus over gRPC, Redis with one key per
//! entity (`SET k 1 NX PX ttl`, pipelined per batch) - what teams commonly use
//! instead of a Bloom dedup service - or RedisBloom (`BF.ADD` / `BF.EXISTS`
//! on one filter key, pipelined per batch; no per-entity expiry).

use anyhow::Context;
use tonic::Code;

use tonic::codegen::http::uri::PathAndQuery;

use super::Op;
use super::driver::{Call, KeySpace};
use super::wire;
use crate::api::pb;
use crate::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use crate::cli::Target as Addr;
use crate::cli::client::{Conn, connect};

/// How often [`System::solus`] asks for the deduper while the server answers
/// UNAVAILABLE or DEADLINE_EXCEEDED (waits of 2, 4, ... s between: 20 s in all).
const CREATE_ATTEMPTS: u32 = 5;

/// One connection to the system under test; cloned per worker.
#[derive(Clone)]
pub enum System {
    /// Requests encoded by [`wire`], sent on a plain gRPC client.
    Solus {
        grpc: tonic::client::Grpc<Conn>,
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
        let mut admin = DeduperAdminServiceClient::new(channel.clone());
        let mut attempt = 1;
        loop {
            let s = match admin.create_deduper(create.clone()).await {
                Ok(_) => break,
                Err(s) if s.code() == Code::AlreadyExists => break,
                Err(s) => s,
            };
            // A storage that is busy (HBase compacting what the run before left)
            // answers UNAVAILABLE or DEADLINE_EXCEEDED; creating is idempotent
            // (the same config again is ALREADY_EXISTS), so waiting and asking
            // again loses nothing and spares the caller a failed benchmark.
            if attempt < CREATE_ATTEMPTS && matches!(s.code(), Code::Unavailable | Code::DeadlineExceeded) {
                let wait = std::time::Duration::from_secs(2 * attempt as u64);
                eprintln!(
                    "creating deduper {client_id}/{deduper}: {:?} ({}); attempt {attempt} of {CREATE_ATTEMPTS}, retrying in {} s",
                    s.code(),
                    s.message(),
                    wait.as_secs()
                );
                tokio::time::sleep(wait).await;
                attempt += 1;
                continue;
            }
            let call = crate::cli::hints::Call {
                target: addr,
                client: client_id,
                deduper: Some(deduper),
            };
            return Err(crate::cli::hints::call_error(s, call)
                .context(format!("creating deduper {client_id}/{deduper} ({attempt} attempts)")));
        }
        let grpc = tonic::client::Grpc::new(channel)
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
        Ok(System::Solus {
            grpc,
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

    /// Sends one request of the keys at `indices`; errors carry a
    /// status-code name.
    pub async fn call(&mut self, call: Call, keys: &KeySpace, indices: &[usize], ttl_ms: u64) -> Result<(), String> {
        match self {
            System::Solus {
                grpc,
                client_id,
                deduper,
            } => {
                let (method, ttl_ms) = match call {
                    Call::Add => ("/solus.v1.DeduperService/Add", ttl_ms),
                    Call::Check => ("/solus.v1.DeduperService/CheckAbsence", 0),
                    Call::AddIfAbsent => ("/solus.v1.DeduperService/AddIfAbsent", ttl_ms),
                };
                let body = wire::request_body(client_id, deduper, keys, indices, ttl_ms);
                let code_name = |s: tonic::Status| crate::api::code_name(s.code()).to_string();
                grpc.ready()
                    .await
                    .map_err(|e| code_name(tonic::Status::unavailable(e.to_string())))?;
                grpc.unary(
                    tonic::Request::new(body),
                    PathAndQuery::from_static(method),
                    wire::Encoded,
                )
                .await
                .map(drop)
                .map_err(code_name)
            }
            System::Redis { conn, bloom } => {
                let keys = keys.many(indices.iter().copied());
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use tonic::{Request, Response, Status};

    use super::*;
    use crate::api::pb::deduper_admin_service_server::{DeduperAdminService, DeduperAdminServiceServer};

    /// Answers CreateDeduper from a script of codes (`Ok` for success), then OK.
    #[derive(Clone)]
    struct Scripted(Arc<Mutex<VecDeque<Code>>>, Arc<Mutex<u32>>);

    #[tonic::async_trait]
    impl DeduperAdminService for Scripted {
        async fn create_deduper(&self, _: Request<pb::CreateDeduperRequest>) -> Result<Response<pb::Deduper>, Status> {
            *self.1.lock().unwrap() += 1;
            match self.0.lock().unwrap().pop_front().unwrap_or(Code::Ok) {
                Code::Ok => Ok(Response::new(pb::Deduper::default())),
                code => Err(Status::new(code, "scripted")),
            }
        }
        async fn get_deduper(&self, _: Request<pb::GetDeduperRequest>) -> Result<Response<pb::Deduper>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn list_dedupers(
            &self,
            _: Request<pb::ListDedupersRequest>,
        ) -> Result<Response<pb::ListDedupersResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn update_deduper(&self, _: Request<pb::UpdateDeduperRequest>) -> Result<Response<pb::Deduper>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn delete_deduper(
            &self,
            _: Request<pb::DeleteDeduperRequest>,
        ) -> Result<Response<pb::DeleteDeduperResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
    }

    /// Serves the script; returns the address and the call counter.
    async fn serve(script: &[Code]) -> (Addr, Arc<Mutex<u32>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = Scripted(Arc::new(Mutex::new(script.iter().copied().collect())), Arc::default());
        let calls = svc.1.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DeduperAdminServiceServer::new(svc))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (Addr::plain(addr.to_string()), calls)
    }

    // Found on real HBase: `solus bench` after a run that left HBase compacting
    // failed at start because CreateDeduper's meta read timed out once.
    #[tokio::test]
    async fn create_is_retried_while_the_server_is_unavailable() {
        let (addr, calls) = serve(&[Code::Unavailable, Code::DeadlineExceeded]).await;
        let r = System::solus(&addr, "c", "d", 1000, 0.01).await;
        assert!(r.is_ok(), "{:?}", r.err());
        assert_eq!(*calls.lock().unwrap(), 3);
    }

    #[tokio::test]
    async fn create_is_not_retried_on_bad_input_and_already_exists_is_success() {
        let (addr, calls) = serve(&[Code::InvalidArgument]).await;
        let err = System::solus(&addr, "c", "d", 1000, 0.01)
            .await
            .err()
            .expect("INVALID_ARGUMENT fails");
        assert!(format!("{err:#}").contains("1 attempts"), "{err:#}");
        assert_eq!(*calls.lock().unwrap(), 1);
        let (addr, calls) = serve(&[Code::AlreadyExists]).await;
        assert!(System::solus(&addr, "c", "d", 1000, 0.01).await.is_ok());
        assert_eq!(*calls.lock().unwrap(), 1);
    }
}
