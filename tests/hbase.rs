//! The integration suite against the HBase backend, through the in-process
//! HBase emulator, plus what only HBase has: the exact cells an independent
//! Thrift client sees, legacy markers, Thrift calls per request, and faults.

mod common;
mod hbase_cases;
mod suite;

use common::TestBackend;

backend_suite!(TestBackend::hbase());
