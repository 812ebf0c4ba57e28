//! The integration suite against the HBase backend, through the in-process
//! HBase emulator, plus what only HBase has: the exact cells an independent
//! Thrift client sees, legacy markers, Thrift calls per request, and faults.
//! `tests/real_hbase.rs` runs the suite and the shared cases on real HBase.

mod common;
mod hbase_cases;
mod hbase_shared;
mod suite;

use common::TestBackend;

backend_suite!(TestBackend::hbase());
hbase_shared_cases!(Some(TestBackend::hbase()));
