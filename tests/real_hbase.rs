//! The integration suite and the shared HBase cases against real Apache
//! HBase (standalone, started by `deploy/hbase/standalone.sh`; see
//! `common/real_hbase.rs` for how it is found or started, and skipped with
//! one printed line where Java or Maven is missing), plus what only the real
//! thing can show: the table script run by HBase's own shell, cell TTL
//! through flush and major compaction, the emulator compared call by call,
//! faults, and the clock cases of issue 23 (`clock_cases/`).

mod clock_cases;
mod clock_shim;
mod common;
mod hbase_shared;
mod process;
mod real_cases;
mod suite;

use common::TestBackend;

backend_suite!(optional TestBackend::real_hbase());
hbase_shared_cases!(TestBackend::real_hbase());
clock_cases!(TestBackend::real_hbase());
