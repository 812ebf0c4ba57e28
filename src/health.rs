//! The standard gRPC health service (`grpc.health.v1.Health`), with the
//! protocol's streaming semantics and a state the server can also take back:
//!
//! - `Check` of a known service answers its status; of an unknown one,
//!   `NOT_FOUND` (as the protocol says).
//! - `Watch` answers the current status at once - `SERVICE_UNKNOWN` for a
//!   service not known (yet) - then every change, and stays open: a watcher
//!   can wait for a per-deduper status to appear, or to go away
//!   ([`Health::clear`] streams `SERVICE_UNKNOWN` again).
//! - [`Health::close`] (graceful stop): every open `Watch` gets its last
//!   status and then ends with `OK`, so health-checking clients (Envoy,
//!   gRPC's own) do not hold the drain for its whole timeout.
//!
//! (tonic-health's service answers `Watch` of an unknown service with
//! `NOT_FOUND`, cannot end its streams, and is replaced by this one.)

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::{self, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// Every service's status, and whether the server is closing.
#[derive(Debug, Clone, Default, PartialEq)]
struct Snapshot {
    statuses: BTreeMap<String, ServingStatus>,
    closed: bool,
}

/// The health state, shared by the server's reporters and the gRPC service;
/// cheap to clone.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<watch::Sender<Snapshot>>,
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

impl Health {
    /// An empty state: every service unknown.
    pub fn new() -> Health {
        Health {
            state: Arc::new(watch::Sender::new(Snapshot::default())),
        }
    }

    /// Sets `service`'s status (`""` is the server as a whole); watchers
    /// hear of it only when it changed.
    pub fn set(&self, service: &str, status: ServingStatus) {
        self.state
            .send_if_modified(|s| s.statuses.insert(service.to_string(), status) != Some(status));
    }

    /// Forgets `service`: `Check` answers `NOT_FOUND` again and its watchers
    /// get `SERVICE_UNKNOWN` (their streams stay open).
    pub fn clear(&self, service: &str) {
        self.state.send_if_modified(|s| s.statuses.remove(service).is_some());
    }

    /// The status of `service`, `None` when unknown.
    pub fn status(&self, service: &str) -> Option<ServingStatus> {
        self.state.borrow().statuses.get(service).copied()
    }

    /// The services with a status, sorted.
    pub fn services(&self) -> Vec<String> {
        self.state.borrow().statuses.keys().cloned().collect()
    }

    /// Ends every open `Watch` after its last status, and every later one
    /// after its first (see the module docs). For the graceful stop.
    pub fn close(&self) {
        self.state.send_if_modified(|s| !std::mem::replace(&mut s.closed, true));
    }

    /// The gRPC service over this state.
    pub fn service(&self) -> HealthServer<Health> {
        HealthServer::new(self.clone())
    }
}

/// A `Watch` stream: the status of one service, then its changes.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

fn response(status: ServingStatus) -> HealthCheckResponse {
    HealthCheckResponse { status: status as i32 }
}

#[tonic::async_trait]
impl health_server::Health for Health {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        match self.status(service) {
            Some(status) => Ok(Response::new(response(status))),
            None => Err(Status::not_found(format!("unknown health service {service:?}"))),
        }
    }

    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<HealthCheckRequest>) -> Result<Response<WatchStream>, Status> {
        let service = request.into_inner().service;
        let mut rx = self.state.subscribe();
        let stream = async_stream(move |tx| async move {
            let mut last = None;
            loop {
                let (status, closed) = {
                    let s = rx.borrow_and_update();
                    let status = s
                        .statuses
                        .get(&service)
                        .copied()
                        .unwrap_or(ServingStatus::ServiceUnknown);
                    (status, s.closed)
                };
                if last != Some(status) {
                    if tx.send(Ok(response(status))).await.is_err() {
                        return;
                    }
                    last = Some(status);
                }
                if closed || rx.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(stream))
    }
}

/// A stream fed by `produce` through a small channel; ends when `produce`
/// returns (or the client goes: then its sends fail and it returns).
fn async_stream<F, Fut>(produce: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<HealthCheckResponse, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(produce(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_stream::StreamExt;

    use super::*;
    use crate::health::health_server::Health as _;

    async fn next(s: &mut WatchStream) -> Option<i32> {
        tokio::time::timeout(Duration::from_secs(2), s.next())
            .await
            .expect("a message or the end within 2 s")
            .map(|r| r.unwrap().status)
    }

    fn req(service: &str) -> Request<HealthCheckRequest> {
        Request::new(HealthCheckRequest {
            service: service.into(),
        })
    }

    #[tokio::test]
    async fn watch_streams_unknown_then_changes_then_ends_on_close() {
        let h = Health::new();
        let mut w = h.watch(req("svc")).await.unwrap().into_inner();
        assert_eq!(next(&mut w).await, Some(ServingStatus::ServiceUnknown as i32));
        h.set("svc", ServingStatus::NotServing);
        assert_eq!(next(&mut w).await, Some(ServingStatus::NotServing as i32));
        h.set("svc", ServingStatus::NotServing);
        h.set("other", ServingStatus::Serving);
        h.clear("svc");
        assert_eq!(
            next(&mut w).await,
            Some(ServingStatus::ServiceUnknown as i32),
            "no repeat of an unchanged status, none for another service"
        );
        assert_eq!(h.check(req("svc")).await.unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(
            h.check(req("other")).await.unwrap().into_inner().status,
            ServingStatus::Serving as i32
        );
        h.close();
        assert_eq!(next(&mut w).await, None, "closed: the stream ends");
        let mut late = h.watch(req("other")).await.unwrap().into_inner();
        assert_eq!(next(&mut late).await, Some(ServingStatus::Serving as i32));
        assert_eq!(next(&mut late).await, None);
    }
}
