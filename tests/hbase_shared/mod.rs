//! HBase cases run against every HBase backend: the in-process emulator
//! (`tests/hbase.rs`) and real Apache HBase (`tests/real_hbase.rs`). What an
//! independent Thrift client sees in the tables after requests through the
//! service, and legacy markers written straight through Thrift.
#![allow(dead_code)]

mod concurrency;
mod delete;
mod health;
mod layout;
mod legacy;
mod reads;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{TCell, THbaseSyncClient, TScan};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

pub use concurrency::*;
pub use delete::*;
pub use health::*;
pub use layout::*;
pub use legacy::*;
pub use reads::*;

use crate::common::{RawClient, TestServer};

/// Generates one `#[tokio::test]` per shared HBase case for a backend
/// expression of type `Option<TestBackend>` (`None` passes without running).
#[macro_export]
macro_rules! hbase_shared_cases {
    ($backend:expr) => {
        $crate::hbase_shared_cases!($backend;
            cells_carry_the_contract_layout,
            the_highest_expiry_stays_in_the_cell,
            meta_row_and_farm_table,
            legacy_markers_count_and_ttl_cells_override_them,
            auto_legacy_markers_follow_who_created_the_deduper,
            a_batch_of_10000_succeeds_with_default_hbase_settings,
            concurrent_add_if_absent_of_new_entities_answers_absent,
            requests_served_together_answer_each_entity_absent_once,
            replicas_racing_on_rows_answer_new_entities_absent,
            concurrent_checks_each_get_their_own_answers,
            a_claim_left_by_a_dead_replica_is_taken_over_after_the_lease,
            a_delete_covers_bits_written_under_a_longer_expiry,
            a_replica_with_another_table_refuses_to_delete_the_deduper,
            misplaced_deduper_health_follows_the_deduper,
        );
    };
    ($backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(backend) = $backend else { return };
                hbase_shared::$name(&backend).await;
            }
        )*
    };
}

/// The newest cells of one row (`family:qualifier` -> cell).
pub fn row(client: &mut RawClient, table: &str, key: &[u8]) -> BTreeMap<Vec<u8>, TCell> {
    let rows = client.get_row(table.into(), key.to_vec(), BTreeMap::new()).unwrap();
    rows.into_iter().next().and_then(|r| r.columns).unwrap_or_default()
}

/// A scan with nothing set (the crate's `Default` sets every field to zero).
pub fn plain_scan() -> TScan {
    TScan {
        start_row: None,
        stop_row: None,
        timestamp: None,
        columns: None,
        caching: None,
        filter_string: None,
        batch_size: None,
        sort_columns: None,
        reversed: None,
        cache_blocks: None,
    }
}

/// Every row key of a table, in order, but the clock probes'.
pub fn all_row_keys(client: &mut RawClient, table: &str) -> Vec<Vec<u8>> {
    let id = client
        .scanner_open_with_scan(table.into(), plain_scan(), BTreeMap::new())
        .unwrap();
    let rows = client.scanner_get_list(id, 10_000).unwrap();
    client.scanner_close(id).unwrap();
    rows.into_iter()
        .map(|r| r.row.unwrap())
        .filter(|k| !k.starts_with(CLOCK_PROBE_ROW_PREFIX))
        .collect()
}

/// Rows of the replicas' clock probes in the data table (docs/operations.md,
/// "Clocks"): not data, left out of [`all_row_keys`].
pub const CLOCK_PROBE_ROW_PREFIX: &[u8] = b"\x00clock-probe|";

/// Health of `solus.v1.DeduperService` right now (`Unknown` if unanswered).
pub async fn data_health(s: &TestServer) -> ServingStatus {
    let mut health = HealthClient::new(s.channel.clone());
    let req = HealthCheckRequest {
        service: "solus.v1.DeduperService".into(),
    };
    match health.check(req).await {
        Ok(r) => ServingStatus::try_from(r.get_ref().status).unwrap_or(ServingStatus::Unknown),
        Err(_) => ServingStatus::Unknown,
    }
}

/// Waits until the data service reports `want`; panics after `within`.
pub async fn wait_health(s: &TestServer, want: ServingStatus, within: Duration) {
    let start = Instant::now();
    loop {
        let got = data_health(s).await;
        if got == want {
            return;
        }
        assert!(
            start.elapsed() < within,
            "health still {got:?} after {within:?}, wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
