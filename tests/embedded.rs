//! The integration suite against the embedded store.

mod common;
mod suite;

use common::TestBackend;

backend_suite!(TestBackend::embedded());

/// The embedded store keeps every deduper's bits in memory, so it refuses
/// dedupers that would not fit its budget instead of running out of memory
/// when they fill up (a client could otherwise ask for 65,536 shards of
/// 2^30 bits and exhaust the machine with a few adds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_budget_refuses_dedupers_that_would_not_fit() {
    use common::{TestServer, create_geom, create_np};
    let mut backend = TestBackend::embedded();
    backend.settings.storage.embedded.max_memory_mib = 16;
    let s = TestServer::start(&backend).await;
    let mut admin = s.admin();
    // n = 1e6 at p = 1%: 9.6 million bits, one byte each: about 9.3 MiB.
    admin
        .create_deduper(create_np("c", "fits", 1_000_000, 0.01, 60))
        .await
        .unwrap();
    let e = admin
        .create_deduper(create_np("c", "second", 1_000_000, 0.01, 60))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{}", e.message());
    assert!(
        e.message().contains("storage.embedded.max_memory_mib"),
        "{}",
        e.message()
    );
    let huge = admin
        .create_deduper(create_geom("c", "huge", 7, 65_536, 1 << 30, 60))
        .await
        .unwrap_err();
    assert_eq!(huge.code(), tonic::Code::ResourceExhausted, "{}", huge.message());
    // Small ones still fit, and the budget survives a restart.
    admin
        .create_deduper(create_np("c", "small", 100_000, 0.01, 60))
        .await
        .unwrap();
    s.stop().await;
    let s = TestServer::start(&backend).await;
    let again = s
        .admin()
        .create_deduper(create_np("c", "second", 1_000_000, 0.01, 60))
        .await
        .unwrap_err();
    assert_eq!(
        again.code(),
        tonic::Code::ResourceExhausted,
        "reserved bytes are recomputed at start-up"
    );
}
