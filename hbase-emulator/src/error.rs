//! HBase failures and how they travel over Thrift.
//!
//! The store reports failures as [`HError`]; each handler converts them with the
//! exception set its IDL method declares. Like the Java server, a failure kind a
//! method does not declare reaches the client as a `TApplicationException`
//! (`thrift::Error::Application`) rather than being silently retyped.

use hbase_thrift::hbase::{AlreadyExists, IOError, IllegalArgument};
use thrift::{ApplicationError, ApplicationErrorKind};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HError {
    /// `IOError`; `retry` fills its `canRetry` field.
    Io {
        message: String,
        retry: bool,
    },
    IllegalArgument(String),
    AlreadyExists(String),
    /// A Java runtime exception escaping the handler (the real server answers
    /// with an internal-error `TApplicationException`).
    Internal(String),
}

pub(crate) type HResult<T> = Result<T, HError>;

/// Which exceptions an IDL method declares besides `IOError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Declared {
    Io,
    IoIllegal,
    IoIllegalExists,
}

impl HError {
    /// A non-retryable `IOError` (HBase's `DoNotRetryIOException` family).
    pub fn io(message: impl Into<String>) -> Self {
        HError::Io {
            message: message.into(),
            retry: false,
        }
    }

    pub fn illegal(message: impl Into<String>) -> Self {
        HError::IllegalArgument(message.into())
    }

    pub fn internal(message: impl Into<String>) -> Self {
        HError::Internal(message.into())
    }

    pub fn table_not_found(table: &[u8]) -> Self {
        HError::io(format!(
            "org.apache.hadoop.hbase.TableNotFoundException: {}",
            String::from_utf8_lossy(table)
        ))
    }

    pub fn no_such_family(table: &[u8], family: &[u8]) -> Self {
        HError::io(format!(
            "org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException: \
             Column family {} does not exist in table {}",
            String::from_utf8_lossy(family),
            String::from_utf8_lossy(table)
        ))
    }

    pub fn message(&self) -> &str {
        match self {
            HError::Io { message, .. } => message,
            HError::IllegalArgument(m) | HError::AlreadyExists(m) | HError::Internal(m) => m,
        }
    }

    pub fn into_thrift(self, declared: Declared) -> thrift::Error {
        let illegal_ok = declared != Declared::Io;
        let exists_ok = declared == Declared::IoIllegalExists;
        match self {
            HError::Io { message, retry } => IOError::new(message, retry).into(),
            HError::IllegalArgument(m) if illegal_ok => IllegalArgument::new(m).into(),
            HError::AlreadyExists(m) if exists_ok => AlreadyExists::new(m).into(),
            HError::IllegalArgument(m) | HError::AlreadyExists(m) | HError::Internal(m) => internal_error(m),
        }
    }
}

/// The answer the Java server gives when a runtime exception escapes a handler.
pub(crate) fn internal_error(message: impl Into<String>) -> thrift::Error {
    thrift::Error::Application(ApplicationError::new(
        ApplicationErrorKind::InternalError,
        message.into(),
    ))
}

/// The answer for generated handler methods the emulator does not implement.
pub(crate) fn unsupported(call: &str) -> thrift::Error {
    IOError::new(format!("hbase-emulator does not support the Thrift call {call}"), false).into()
}

/// Converts a store result with the method's declared exception set.
pub(crate) trait IntoThrift<T> {
    fn declared(self, declared: Declared) -> thrift::Result<T>;
}

impl<T> IntoThrift<T> for HResult<T> {
    fn declared(self, declared: Declared) -> thrift::Result<T> {
        self.map_err(|e| e.into_thrift(declared))
    }
}
