//! gRPC services. The only module that knows about gRPC statuses: engine
//! errors are mapped to canonical codes here, once. The [`Gate`] in front of
//! the services authenticates, limits, counts and logs every Solus request;
//! the handlers check the caller's client and the deadline.

mod admin;
mod data;
mod gate;

pub use admin::AdminService;
pub use data::DataService;
pub use gate::{Gate, GateService, code_name};

use std::future::Future;
use std::time::Duration;

use tonic::metadata::MetadataMap;
use tonic::{Code, Extensions, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::auth::Principal;
use crate::engine::EngineError;
use crate::storage::StorageError;

/// Generated protobuf types and service stubs of package `solus.v1`.
pub mod pb {
    tonic::include_proto!("solus.v1");

    /// Encoded descriptor set of `proto/`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("solus_descriptor");
}

/// How long a client should wait before retrying a refusal that storage
/// being unreachable caused (`google.rpc.RetryInfo.retry_delay`).
pub const STORAGE_RETRY_DELAY: Duration = Duration::from_millis(200);

/// A refusal that a retry can fix: `code` and `message` with a
/// `google.rpc.RetryInfo` detail (in the `grpc-status-details-bin` trailer)
/// asking to wait at least `delay`. Clients retry a status only when it
/// carries RetryInfo (or no server answered at all); refusals a retry cannot
/// fix (the memory budget, invalid input) carry none. See README, "Errors".
pub fn transient(code: Code, message: impl Into<String>, delay: Duration) -> Status {
    Status::with_error_details(code, message, ErrorDetails::with_retry_info(Some(delay)))
}

/// Whether `status` carries a `google.rpc.RetryInfo` detail (see [`transient`]).
pub fn is_transient(status: &Status) -> bool {
    status.get_details_retry_info().is_some()
}

/// Maps an engine error to its canonical status (the gate logs it). Storage
/// being unavailable is [`transient`]; every other error is final.
pub fn status_of(e: EngineError) -> Status {
    let code = match &e {
        EngineError::NotFound { .. } => Code::NotFound,
        EngineError::Inactive { .. } | EngineError::Active { .. } | EngineError::Misplaced { .. } => {
            Code::FailedPrecondition
        }
        EngineError::AlreadyExists { .. } => Code::AlreadyExists,
        EngineError::Invalid(_) => Code::InvalidArgument,
        EngineError::Storage(StorageError::Unavailable(_)) => Code::Unavailable,
        EngineError::Storage(StorageError::AlreadyExists) => Code::AlreadyExists,
        EngineError::Storage(StorageError::Corrupt(_)) => Code::Internal,
        EngineError::Storage(StorageError::Capacity(_)) => Code::ResourceExhausted,
        EngineError::Storage(StorageError::Precondition(_)) => Code::FailedPrecondition,
    };
    if code == Code::Unavailable {
        return transient(code, e.to_string(), STORAGE_RETRY_DELAY);
    }
    Status::new(code, e.to_string())
}

/// Checks that the caller the gate authenticated may act on `client_id`'s
/// dedupers: `PERMISSION_DENIED` when it may not (the message names only
/// the requested client, never a deduper), `UNAUTHENTICATED` when the
/// request did not come through the gate.
pub(crate) fn authorize(extensions: &Extensions, client_id: &str) -> Result<(), Status> {
    match extensions.get::<Principal>() {
        Some(p) if p.may_access(client_id) => Ok(()),
        Some(_) => {
            let shown: String = client_id.chars().take(crate::deduper::MAX_NAME_LEN + 1).collect();
            Err(Status::permission_denied(format!(
                "this token may not act on client {shown:?}'s dedupers"
            )))
        }
        None => Err(Status::unauthenticated("request was not authenticated")),
    }
}

/// Parses a `grpc-timeout` header value (`<digits><H|M|S|m|u|n>`, gRPC over
/// HTTP/2 spec, "Requests"); `None` when absent or malformed.
fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let v = metadata.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Runs a handler within the request's deadline: the client's
/// `grpc-timeout`, capped by the server's `server.request_timeout_ms`.
/// Answers `DEADLINE_EXCEEDED` a moment before the deadline, so the caller
/// gets that code rather than a transport-level cancellation. Storage work
/// already under way may still complete.
pub(crate) async fn within_deadline<T>(
    rpc: &'static str,
    metadata: &MetadataMap,
    server_timeout: Duration,
    handler: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let budget = grpc_timeout(metadata).map_or(server_timeout, |t| t.min(server_timeout));
    // Answer before tonic's own timer fires (it would send CANCELLED): leave
    // 10% of the budget, at least 1 ms and at most 100 ms, for a late wake-up
    // under load and for sending the status.
    let margin = (budget / 10)
        .clamp(Duration::from_millis(1), Duration::from_millis(100))
        .min(budget / 2);
    match tokio::time::timeout(budget - margin, handler).await {
        Ok(r) => r,
        // Transient: storage was slow; a retry (with the same request_id) is safe.
        Err(_) => Err(transient(
            Code::DeadlineExceeded,
            format!("{rpc} did not finish within its deadline of {} ms", budget.as_millis()),
            STORAGE_RETRY_DELAY,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grpc_timeout_units() {
        let mut m = MetadataMap::new();
        for (v, d) in [
            ("100m", Duration::from_millis(100)),
            ("2S", Duration::from_secs(2)),
            ("1M", Duration::from_secs(60)),
            ("1H", Duration::from_secs(3600)),
            ("5000u", Duration::from_millis(5)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ] {
            m.insert("grpc-timeout", v.parse().unwrap());
            assert_eq!(grpc_timeout(&m), Some(d), "{v}");
        }
        for bad in ["", "m", "10x", "123456789m", "-1m"] {
            m.insert("grpc-timeout", bad.parse().unwrap());
            assert_eq!(grpc_timeout(&m), None, "{bad:?}");
        }
    }
}
