//! The request gate: a tower layer in front of the gRPC services that, for
//! every Solus RPC (health and reflection pass straight through),
//!
//! 1. refuses new requests once shutdown has begun (`UNAVAILABLE`),
//! 2. authenticates the bearer token before the message is even decoded
//!    (`UNAUTHENTICATED`) and hands the [`Principal`] to the handler, which
//!    checks it against the request's `client_id`,
//! 3. bounds the requests served at once (`RESOURCE_EXHAUSTED`,
//!    `limits.max_concurrent_requests`). A request holds its permit until
//!    its answer has been sent, not only until the handler returns: an
//!    answer the client does not read (an HTTP/2 window of 0) stays in
//!    memory, so unread answers count against the same limit (issue 45,
//!    class 4: 40 such connections grew the server to 1 GB). And no
//!    connection may hold as many permits as are still free: a client
//!    that stops reading fills at most its share, the others keep being
//!    served (with `c` such connections each holds about
//!    `max_concurrent_requests / (c + 1)`, and as many stay free),
//! 4. turns tonic's decoding failures into client-error statuses that name
//!    the limit: an oversized message (tonic: `OUT_OF_RANGE`) becomes
//!    `RESOURCE_EXHAUSTED` naming `limits.max_message_bytes`, and bytes that
//!    are not the request message (tonic: `INTERNAL`) become `INVALID_ARGUMENT`,
//! 5. records the request metrics and writes one log line per failed request
//!    (rpc, status code, message; never entity contents).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::Frame;
use tonic::codegen::Bytes;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::{Code, Status};
use tower::{Layer, Service};

use crate::auth::{Authenticator, Principal};

/// RetryInfo delay of a refusal at the concurrency limit: requests in
/// flight finish within milliseconds.
const BUSY_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// RetryInfo delay of a refusal while draining: long enough for the client
/// to reconnect to another replica (or to this one restarted).
const DRAINING_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(1000);
use crate::metrics;

/// Method paths of the Solus services and their `rpc` label.
const RPCS: &[(&str, &str)] = &[
    ("/solus.v1.DeduperService/Add", "Add"),
    ("/solus.v1.DeduperService/CheckAbsence", "CheckAbsence"),
    ("/solus.v1.DeduperService/AddIfAbsent", "AddIfAbsent"),
    ("/solus.v1.DeduperAdminService/CreateDeduper", "CreateDeduper"),
    ("/solus.v1.DeduperAdminService/GetDeduper", "GetDeduper"),
    ("/solus.v1.DeduperAdminService/ListDedupers", "ListDedupers"),
    ("/solus.v1.DeduperAdminService/UpdateDeduper", "UpdateDeduper"),
    ("/solus.v1.DeduperAdminService/DeleteDeduper", "DeleteDeduper"),
];

/// The `rpc` label of a path, `None` for non-Solus services.
fn rpc_of(path: &str) -> Option<&'static str> {
    if let Some((_, rpc)) = RPCS.iter().find(|(p, _)| *p == path) {
        return Some(rpc);
    }
    path.starts_with("/solus.").then_some("unknown")
}

/// Canonical upper-case name of a status code, as in the gRPC spec.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Messages tonic gives when the request body is not one well-formed message.
const DECODE_FAILURES: &[&str] = &[
    "failed to decode Protobuf message",
    "Missing request message",
    "Unexpected EOF decoding stream",
    "protocol error:",
];

struct State {
    auth: Arc<Authenticator>,
    permits: Arc<Semaphore>,
    max_concurrent: usize,
    max_message_bytes: usize,
    draining: AtomicBool,
}

/// One client connection's share of the gate: the permits its requests
/// hold now (running, or their answers not yet sent). The server gives
/// every accepted connection one, as the connection's `ConnectInfo`, so
/// it is in every request's extensions.
#[derive(Clone, Debug, Default)]
pub struct ConnectionShare {
    held: Arc<AtomicUsize>,
}

impl ConnectionShare {
    /// Permits this connection's requests hold now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// The gate, shared by the server (to start draining) and the layer.
#[derive(Clone)]
pub struct Gate {
    state: Arc<State>,
}

impl Gate {
    /// `max_concurrent`: `limits.max_concurrent_requests` (at least 1);
    /// `max_message_bytes`: the decoding limit given to tonic, for messages.
    pub fn new(auth: Arc<Authenticator>, max_concurrent: usize, max_message_bytes: usize) -> Gate {
        let max_concurrent = max_concurrent.max(1);
        Gate {
            state: Arc::new(State {
                auth,
                permits: Arc::new(Semaphore::new(max_concurrent)),
                max_concurrent,
                max_message_bytes,
                draining: AtomicBool::new(false),
            }),
        }
    }

    /// From now on new Solus requests are answered `UNAVAILABLE`.
    pub fn start_draining(&self) {
        self.state.draining.store(true, Ordering::SeqCst);
    }

    /// Solus requests being served now, or whose answers are not yet sent.
    pub fn in_flight(&self) -> usize {
        self.state.max_concurrent - self.state.permits.available_permits()
    }

    /// Lets a request in, or says why not.
    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<Admitted, Status> {
        let s = &self.state;
        if s.draining.load(Ordering::SeqCst) {
            return Err(super::transient(
                Code::Unavailable,
                "server is shutting down; retry on another replica or after restart",
                DRAINING_RETRY_DELAY,
            ));
        }
        let header = req.headers().get(http::header::AUTHORIZATION).map(|v| v.to_str());
        let principal = match header {
            Some(Err(_)) => Err(crate::auth::AuthError::Malformed),
            Some(Ok(v)) => s.auth.authenticate(Some(v)),
            None => s.auth.authenticate(None),
        }
        .map_err(|e| Status::unauthenticated(e.to_string()))?;
        let share = req.extensions().get::<ConnectionShare>().cloned();
        let busy = |why: String| super::transient(Code::ResourceExhausted, why, BUSY_RETRY_DELAY);
        if let Some(share) = &share {
            let (held, free) = (share.held(), s.permits.available_permits());
            if held > 0 && held >= free {
                return Err(busy(format!(
                    "server busy: this connection holds {held} of limits.max_concurrent_requests = {max} \
                     (running, or answers not yet read), and no connection may hold as many as are still free \
                     ({free}); read the answers, or retry with backoff",
                    max = s.max_concurrent
                )));
            }
        }
        let permit = s.permits.clone().try_acquire_owned().map_err(|_| {
            busy(format!(
                "server busy: {max} requests in flight, limits.max_concurrent_requests = {max}; retry with backoff",
                max = s.max_concurrent
            ))
        })?;
        if let Some(share) = &share {
            share.held.fetch_add(1, Ordering::SeqCst);
        }
        req.extensions_mut().insert::<Principal>(principal);
        metrics::in_flight(1.0);
        Ok(Admitted { _permit: permit, share })
    }

    /// Rewrites tonic's own decoding failures into client-error statuses,
    /// and cuts a status beyond the bounds clients accept ([`super::bounded`]).
    fn rewrite(&self, response: http::Response<Body>) -> http::Response<Body> {
        let Some(status) = status_of_response(&response) else {
            return response;
        };
        let message = status.message();
        let rewritten = match status.code() {
            Code::OutOfRange if message.contains("decoded message length too large") => {
                Status::resource_exhausted(format!(
                    "request message larger than limits.max_message_bytes = {} bytes ({message})",
                    self.state.max_message_bytes
                ))
            }
            Code::Internal if DECODE_FAILURES.iter().any(|p| message.starts_with(p)) => {
                Status::invalid_argument(format!("malformed request message: {message}"))
            }
            _ if message.len() > super::MAX_STATUS_MESSAGE_BYTES
                || status.details().len() > super::MAX_STATUS_DETAILS_BYTES =>
            {
                status
            }
            _ => return response,
        };
        super::bounded(rewritten).into_http()
    }
}

/// Holds a concurrency permit and the in-flight gauge while a request runs
/// and then while its answer is sent ([`SentBody`]); given back when the
/// answer's last frame is taken, or when the request or its answer is
/// dropped (the client gave up, reset the stream or went away).
struct Admitted {
    _permit: OwnedSemaphorePermit,
    share: Option<ConnectionShare>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(share) = &self.share {
            share.held.fetch_sub(1, Ordering::SeqCst);
        }
        metrics::in_flight(-1.0);
    }
}

/// An answer's body holding its request's [`Admitted`] until the body has
/// given its last frame (the trailers, or its end), fails, or is dropped.
/// HTTP/2 takes a body's frames only as the client's flow-control window
/// allows, so an answer the client does not read keeps its permit.
struct SentBody {
    inner: Body,
    admitted: Option<Admitted>,
}

impl http_body::Body for SentBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        let last = match &polled {
            Poll::Pending => false,
            Poll::Ready(Some(Ok(frame))) => frame.is_trailers() || this.inner.is_end_stream(),
            Poll::Ready(Some(Err(_)) | None) => true,
        };
        if last {
            this.admitted = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The response with its body holding `admitted` until sent.
fn hold_until_sent(response: http::Response<Body>, admitted: Admitted) -> http::Response<Body> {
    response.map(|inner| {
        Body::new(SentBody {
            inner,
            admitted: Some(admitted),
        })
    })
}

/// The status of a response: tonic puts it in the extensions (and the
/// `grpc-status` header) of every trailers-only answer; no status there
/// means the handler answered `OK` (a unary body carries its trailer after it).
fn status_of_response(response: &http::Response<Body>) -> Option<Status> {
    response
        .extensions()
        .get::<Status>()
        .cloned()
        .or_else(|| Status::from_header_map(response.headers()))
        .filter(|s| s.code() != Code::Ok)
}

/// Records the outcome and logs a failed request once.
fn record(rpc: &'static str, status: Option<&Status>, start: Instant) {
    let code = status.map_or(Code::Ok, Status::code);
    metrics::request_done(rpc, code_name(code), start.elapsed());
    let Some(status) = status else { return };
    let (code, message) = (code_name(code), status.message());
    match status.code() {
        Code::Unavailable
        | Code::Internal
        | Code::Unknown
        | Code::DataLoss
        | Code::DeadlineExceeded
        | Code::ResourceExhausted => {
            tracing::warn!(rpc, code, detail = message, "request failed")
        }
        _ => tracing::info!(rpc, code, detail = message, "request refused"),
    }
}

impl<S> Layer<S> for Gate {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> GateService<S> {
        GateService {
            gate: self.clone(),
            inner,
        }
    }
}

/// The gate around the gRPC router.
#[derive(Clone)]
pub struct GateService<S> {
    gate: Gate,
    inner: S,
}

impl<S> Service<http::Request<Body>> for GateService<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let Some(rpc) = rpc_of(req.uri().path()) else {
            return Box::pin(self.inner.call(req));
        };
        // The service that was polled ready serves this call; keep a fresh clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let gate = self.gate.clone();
        Box::pin(async move {
            let start = Instant::now();
            let response = match gate.admit(&mut req) {
                Err(status) => status.into_http(),
                Ok(admitted) => {
                    let response = gate.rewrite(inner.call(req).await?);
                    hold_until_sent(response, admitted)
                }
            };
            record(rpc, status_of_response(&response).as_ref(), start);
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_solus_rpcs_only() {
        assert_eq!(rpc_of("/solus.v1.DeduperService/AddIfAbsent"), Some("AddIfAbsent"));
        assert_eq!(
            rpc_of("/solus.v1.DeduperAdminService/ListDedupers"),
            Some("ListDedupers")
        );
        assert_eq!(rpc_of("/solus.v1.DeduperService/Nope"), Some("unknown"));
        assert_eq!(rpc_of("/grpc.health.v1.Health/Check"), None);
        assert_eq!(
            rpc_of("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            None
        );
    }

    #[test]
    fn rewrites_tonic_decode_failures_only() {
        let gate = Gate::new(Arc::new(Authenticator::disabled()), 4, 1024);
        let answer = |s: Status| {
            let r = gate.rewrite(s.into_http());
            let s = status_of_response(&r).unwrap();
            (s.code(), s.message().to_string())
        };
        let (code, m) = answer(Status::out_of_range(
            "Error, decoded message length too large: found 2000 bytes, the limit is: 1024 bytes",
        ));
        assert_eq!(code, Code::ResourceExhausted);
        assert!(
            m.contains("limits.max_message_bytes = 1024") && m.contains("2000"),
            "{m}"
        );
        let (code, _) = answer(Status::internal("failed to decode Protobuf message: invalid wire type"));
        assert_eq!(code, Code::InvalidArgument);
        assert_eq!(answer(Status::internal("corrupt stored data: x")).0, Code::Internal);
        assert_eq!(answer(Status::out_of_range("other")).0, Code::OutOfRange);
    }

    /// Any status a handler returns leaves the gate within the bounds (a
    /// storage error once carried HBase's 10 KB stack trace to the client).
    #[test]
    fn cuts_long_statuses_of_any_kind() {
        use crate::api::{MAX_STATUS_MESSAGE_BYTES, STORAGE_RETRY_DELAY, is_transient, transient};
        let gate = Gate::new(Arc::new(Authenticator::disabled()), 4, 1024);
        let long = "AccessDeniedException: Insufficient permissions\n\tat x.y(Z.java:1)".repeat(200);
        for status in [
            transient(Code::Unavailable, long.clone(), STORAGE_RETRY_DELAY),
            Status::invalid_argument(long.clone()),
            Status::internal(format!("failed to decode Protobuf message: {long}")),
        ] {
            let code = status.code();
            let r = gate.rewrite(status.into_http());
            let s = status_of_response(&r).unwrap();
            let headers: usize = r.headers().iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
            assert!(headers < 6 * 1024, "{code:?}: {headers} bytes of headers");
            assert!(s.message().len() <= MAX_STATUS_MESSAGE_BYTES + 3, "{code:?}");
            assert!(s.message().contains("Insufficient permissions"), "{code:?}");
            assert_eq!(
                is_transient(&s),
                code == Code::Unavailable,
                "RetryInfo kept where it was"
            );
        }
    }
}
