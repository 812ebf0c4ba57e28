//! Big batches with the HBase backend's default settings (issue 20): every
//! shard row is read for its own columns in calls small enough for the
//! default 5 s read timeout, so a batch of 10,000 entities succeeds.

use solus::storage::hbase::HbaseConfig;

use crate::common::*;

/// AddIfAbsent, CheckAbsence and AddIfAbsent again of 10,000 new entities
/// in one request each, on the deduper of issue 20 (n = 10^6, p = 0.01,
/// 10 shards), with every `storage.hbase` setting at its default but the
/// address: every answer arrives, and no added entity reads absent.
pub async fn a_batch_of_10000_succeeds_with_default_hbase_settings(b: &TestBackend) {
    let mut settings = b.settings.clone();
    settings.storage.hbase = HbaseConfig {
        addresses: settings.storage.hbase.addresses.clone(),
        // The clock bound is off in the suite (see tests/common).
        max_clock_offset_ms: 0,
        ..HbaseConfig::default()
    };
    let s = TestServer::start_with(settings).await;
    s.admin()
        .create_deduper(create_np("c", "big", 1_000_000, 0.01, 3600))
        .await
        .unwrap();
    let items: Vec<String> = (0..10_000).map(|i| format!("big-{i}")).collect();
    let refs: Vec<&str> = items.iter().map(String::as_str).collect();
    let first = add_if_absent(&s, "c", "big", &refs, 0).await;
    // p = 0.01 at 10^6: among 10,000 new entities hardly any false positive.
    let new = first.iter().filter(|a| **a).count();
    assert!(new >= 9_990, "{new} of 10,000 answered absent");
    assert!(absent(&s, "c", "big", &refs).await.iter().all(|a| !a), "all present");
    let again = add_if_absent(&s, "c", "big", &refs, 0).await;
    assert!(again.iter().all(|a| !a), "second AddIfAbsent: all present");
}
