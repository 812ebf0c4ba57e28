//! The integration suite against the HBase backend, through the in-process
//! HBase emulator, plus what only HBase has: the exact cells an independent
//! Thrift client sees, legacy markers, Thrift calls per request, and faults.
//! `tests/real_hbase.rs` runs the suite and the shared cases on real HBase.

mod common;
mod hbase_cases;
mod hbase_shared;
mod suite;

use common::TestBackend;

backend_suite!(TestBackend::hbase());
hbase_shared_cases!(Some(TestBackend::hbase()));

/// A delete interrupted by HBase failing every row delete leaves the
/// deduper listed and inactive with its config intact; the delete runs
/// again once HBase answers, and touches only the shard rows its geometry
/// names (no scan).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_delete_can_be_run_again() {
    use common::{TestServer, add, create_geom};
    use hbase_thrift::hbase::THbaseSyncClient;
    use solus::api::pb;
    use tonic::Code;
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    let mut admin = s.admin();
    admin
        .create_deduper(create_geom("c", "d", 3, 4, 1000, 60))
        .await
        .unwrap();
    add(&s, "c", "d", &["a", "b", "c", "e", "f", "g"], 0).await;
    let delete = |force| pb::DeleteDeduperRequest {
        client_id: "c".into(),
        name: "d".into(),
        force,
    };
    // More failures than the pool's retries: the delete stops midway.
    b.emulator().fail_calls("deleteAllRowTs", 1_000);
    let e = admin.delete_deduper(delete(true)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{}", e.message());
    b.emulator().fail_calls("deleteAllRowTs", 0);
    let d = admin
        .get_deduper(pb::GetDeduperRequest {
            client_id: "c".into(),
            name: "d".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!d.active, "left deactivated and listed");
    let refused = s
        .data()
        .add(pb::AddRequest {
            client_id: "c".into(),
            deduper: "d".into(),
            entities: common::ents(&["z"]),
            ttl_ms: 0,
            request_id: None,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition);

    b.emulator().reset_counts();
    admin.delete_deduper(delete(false)).await.unwrap();
    let counts = b.emulator().call_counts();
    assert_eq!(
        counts.get("deleteAllRowTs"),
        Some(&5),
        "4 shard rows and the config row: {counts:?}"
    );
    assert!(!counts.keys().any(|k| k.starts_with("scanner")), "no scan: {counts:?}");
    let again = admin.delete_deduper(delete(true)).await.unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    // The shard rows are empty to an independent client.
    let mut raw = b.raw_thrift();
    for shard in 0..4 {
        let row = solus::contract::layout::data_row_key(shard, "c", "d");
        let rows = raw
            .get_row(b.settings.storage.table.clone().into_bytes(), row, Default::default())
            .unwrap();
        assert!(
            rows.iter().all(|r| r.columns.as_ref().is_none_or(|c| c.is_empty())),
            "shard {shard}: {rows:?}"
        );
    }
}
