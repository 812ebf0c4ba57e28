//! Cases only real HBase runs (see `tests/real_hbase.rs`).

mod differential;
mod faults;
mod replicas;
mod tables;
mod ttl;
