//! gRPC services. The only module that knows about gRPC statuses: engine
//! errors are mapped to canonical codes here, once. The [`Gate`] in front of
//! the services authenticates, limits, counts and logs every Solus request;
//! the handlers check the caller's client and the deadline.

mod admin;
mod data;
mod gate;

pub use admin::AdminService;
pub use data::DataService;
pub use gate::{ConnectionShare, Gate, GateService, code_name};

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

/// The longest status message Solus sends, in bytes (before a "..."
/// marking the cut): [`bounded`] keeps every status within a few KiB of
/// reply headers.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 1024;

/// The longest `grpc-status-details-bin` payload Solus sends, in bytes
/// before base64 (a RetryInfo detail is the message again plus ~50 bytes).
pub const MAX_STATUS_DETAILS_BYTES: usize = 2048;

/// `status` within the bounds clients accept: a status travels in HTTP/2
/// headers (`grpc-message`, percent-encoded, and `grpc-status-details-bin`,
/// base64), and clients refuse the whole answer beyond their header-list
/// limit (hyper/h2 16 KiB by default, grpc-java 8 KiB) - the caller then
/// sees a protocol error instead of the reason. A message longer than
/// [`MAX_STATUS_MESSAGE_BYTES`] is cut at a char boundary, "..." marking
/// the cut; the details are rebuilt around the cut message when they carry
/// RetryInfo (so the retry advice survives), dropped when longer than
/// [`MAX_STATUS_DETAILS_BYTES`] otherwise. Worst case, all non-ASCII: 3 KiB
/// of `grpc-message` and under 3 KiB of details. A status within both
/// bounds is returned as it is.
pub fn bounded(status: Status) -> Status {
    let (message, details) = (status.message(), status.details());
    if message.len() <= MAX_STATUS_MESSAGE_BYTES && details.len() <= MAX_STATUS_DETAILS_BYTES {
        return status;
    }
    let cut = crate::text::truncate(message, MAX_STATUS_MESSAGE_BYTES);
    if let Some(delay) = status.get_details_retry_info().and_then(|r| r.retry_delay) {
        let mut rebuilt = transient(status.code(), cut, delay);
        *rebuilt.metadata_mut() = status.metadata().clone();
        return rebuilt;
    }
    let details = if details.len() <= MAX_STATUS_DETAILS_BYTES {
        details.to_vec().into()
    } else {
        Default::default()
    };
    Status::with_details_and_metadata(status.code(), cut, details, status.metadata().clone())
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
        EngineError::Inactive { .. }
        | EngineError::Active { .. }
        | EngineError::Misplaced { .. }
        | EngineError::Resize(_) => Code::FailedPrecondition,
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

    /// HBase's stack trace as it reached a status before `bounded`.
    fn long_message() -> String {
        let frame = "\n\tat org.apache.hadoop.hbase.regionserver.HRegion.put(HRegion.java:3217)";
        format!(
            "storage unavailable: AccessDeniedException: Insufficient permissions{}",
            frame.repeat(150)
        )
    }

    #[test]
    fn long_statuses_are_cut_and_keep_their_retry_info() {
        let long = long_message();
        assert!(long.len() > 10_000);
        let s = bounded(transient(Code::Unavailable, long.clone(), STORAGE_RETRY_DELAY));
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(s.message().len(), MAX_STATUS_MESSAGE_BYTES + 3);
        assert!(s.message().ends_with("...") && long.starts_with(s.message().trim_end_matches("...")));
        assert!(s.details().len() <= MAX_STATUS_DETAILS_BYTES, "{}", s.details().len());
        let retry = s.get_details_retry_info().expect("RetryInfo kept");
        assert_eq!(retry.retry_delay, Some(STORAGE_RETRY_DELAY));
        // The details' own copy of the message is the cut one too.
        let inner = <tonic_types::Status as prost::Message>::decode(s.details()).unwrap();
        assert_eq!(inner.message, s.message());

        // Whatever the details: longer than the bound, dropped.
        let plain = Status::with_details(Code::Internal, long.clone(), vec![7u8; 20_000].into());
        let s = bounded(plain);
        assert_eq!(
            (s.code(), s.message().len()),
            (Code::Internal, MAX_STATUS_MESSAGE_BYTES + 3)
        );
        assert!(s.details().is_empty());
        let small = Status::with_details(Code::Internal, long, vec![7u8; 10].into());
        assert_eq!(bounded(small).details(), &[7u8; 10]);

        // Within both bounds: untouched; a cut never splits a char.
        let s = bounded(Status::not_found("deduper \"d\" not found"));
        assert_eq!(s.message(), "deduper \"d\" not found");
        let s = bounded(Status::internal("é".repeat(600)));
        assert_eq!(
            s.message().trim_end_matches("...").chars().count(),
            MAX_STATUS_MESSAGE_BYTES / 2
        );
    }

    /// The headers of a status cut by `bounded` stay within a few KiB, which
    /// every gRPC client accepts, also for a message of only non-ASCII
    /// chars (percent-encoded three bytes each).
    #[test]
    fn bounded_status_headers_stay_within_a_few_kib() {
        for long in [long_message(), "é\n".repeat(5000)] {
            let http = bounded(transient(Code::Unavailable, long, STORAGE_RETRY_DELAY)).into_http::<()>();
            let bytes: usize = http.headers().iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
            assert!(bytes < 6 * 1024, "{bytes} bytes of headers");
        }
    }

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
