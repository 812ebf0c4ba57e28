//! The integration suite, written once and run against every storage
//! backend (see `embedded.rs`; the HBase backend runs it through the emulator).
//! Each function starts its own server over the given backend.
#![allow(dead_code)]

mod admin;
mod data;
mod durability;
mod expiry;
mod probability;
mod service;

pub use admin::*;
pub use data::*;
pub use durability::*;
pub use expiry::*;
pub use probability::*;
pub use service::*;

/// Generates one `#[tokio::test]` per suite function for a backend.
#[macro_export]
macro_rules! backend_suite {
    ($backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let backend = $backend;
                suite::$name(&backend).await;
            }
        )*
    };
}
