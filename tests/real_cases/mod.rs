//! Cases only real HBase runs (see `tests/real_hbase.rs`).

mod tables;
mod ttl;
