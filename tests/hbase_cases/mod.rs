//! HBase-only integration tests on the emulator (see `tests/hbase.rs`):
//! Thrift calls per request, faults the emulator injects, exact cell TTL.

mod calls;
mod failures;
mod faults;
mod records;
mod ttl;

pub use crate::common::connect_raw as raw_client;
pub use crate::hbase_shared::wait_health;
