//! The integration suite, written once and run against every storage
//! backend (see `embedded.rs`; the HBase backend runs it through the emulator).
//! Each function starts its own server over the given backend.
#![allow(dead_code)]

mod admin;
mod data;
mod durability;
mod expiry;
mod failures;
mod lifecycle;
mod probability;
mod records;
mod service;

pub use admin::*;
pub use data::*;
pub use durability::*;
pub use expiry::*;
pub use failures::*;
pub use lifecycle::*;
pub use probability::*;
pub use records::*;
pub use service::*;

/// Generates one `#[tokio::test]` per suite function for a backend:
/// `backend_suite!(TestBackend::embedded())`, or for a backend that may be
/// missing here, `backend_suite!(optional TestBackend::real_hbase())`
/// (`None`: the test passes without running). The list lives here, once, so
/// a new suite test runs against every backend.
#[macro_export]
macro_rules! backend_suite {
    ($backend:expr) => {
        $crate::backend_suite!(optional Some($backend));
    };
    (optional $backend:expr) => {
        $crate::backend_suite!(optional $backend;
            admin_create_get_list_update,
            admin_errors,
            data_add_check_add_if_absent,
            data_errors,
            concurrent_add_if_absent_is_atomic,
            ttl_expiry,
            expiry_never_moves_backwards,
            restart_keeps_data,
            false_positive_rate_at_design_load,
            replay_npm_events,
            health_and_reflection,
            concurrent_updates_lose_no_change,
            request_id_repeats_get_the_first_answer,
            a_retry_after_the_first_attempts_expiry_is_remembered_for_its_ttl,
            an_empty_request_id_is_no_request_id,
            record_ids_replay_gets_the_first_answer,
            record_ids_replays_renew_their_memory,
            a_record_id_sent_with_two_entities_keeps_both_replays,
            delete_deduper_refuses_active_then_removes_everything,
            stats_estimate_live_entities_and_fpr,
            stats_fall_to_zero_after_the_ttl,
        );
    };
    (optional $backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(backend) = $backend else { return };
                suite::$name(&backend).await;
            }
        )*
    };
}
