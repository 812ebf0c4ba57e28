//! gRPC services. The only module that knows about gRPC statuses: engine
//! errors are mapped to canonical codes here, once.

mod admin;
mod data;

pub use admin::AdminService;
pub use data::DataService;

use tonic::{Code, Status};

use crate::engine::EngineError;
use crate::storage::StorageError;

/// Generated protobuf types and service stubs of package `solus.v1`.
pub mod pb {
    tonic::include_proto!("solus.v1");

    /// Encoded descriptor set of `proto/`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("solus_descriptor");
}

/// Maps an engine error to its canonical status, logging server-side failures.
pub fn status_of(rpc: &'static str, e: EngineError) -> Status {
    let code = match &e {
        EngineError::NotFound { .. } => Code::NotFound,
        EngineError::Inactive { .. } => Code::FailedPrecondition,
        EngineError::AlreadyExists { .. } => Code::AlreadyExists,
        EngineError::Invalid(_) => Code::InvalidArgument,
        EngineError::Storage(StorageError::Unavailable(_)) => Code::Unavailable,
        EngineError::Storage(StorageError::AlreadyExists) => Code::AlreadyExists,
        EngineError::Storage(StorageError::Corrupt(_)) => Code::Internal,
    };
    let message = e.to_string();
    match code {
        Code::Unavailable | Code::Internal => tracing::warn!(rpc, code = ?code, %message, "request failed"),
        _ => tracing::info!(rpc, code = ?code, %message, "request refused"),
    }
    Status::new(code, message)
}
