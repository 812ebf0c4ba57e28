//! Solus: a Bloom-filter deduplication service over gRPC.
//!
//! Request path: `api` (gRPC, statuses) -> `engine` (validate, hash, group,
//! one storage call) -> `storage` (embedded store or HBase), with the
//! byte-exact hashing and layout rules in `contract`.

pub mod api;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod contract;
pub mod deduper;
pub mod engine;
pub mod generations;
pub mod health;
pub mod heap;
pub mod metrics;
pub mod server;
pub mod storage;
pub mod text;
