//! Cases only real HBase runs (see `tests/real_hbase.rs`).

mod differential;
mod faults;
mod tables;
mod ttl;
