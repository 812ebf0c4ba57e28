//! Issue 23 on the HBase emulator: replicas whose clocks are shifted below
//! Solus (an `LD_PRELOAD` shim) against the clock bound, and creators
//! racing on a deduper's claim. The same cases run on real HBase from
//! `tests/real_hbase.rs`.

mod clock_cases;
mod clock_shim;
mod common;
mod process;

use common::TestBackend;

clock_cases!(Some(TestBackend::hbase()));
