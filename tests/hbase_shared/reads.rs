//! Big batches with the HBase backend's default settings (issue 20): every
//! shard row is read for its own columns in calls small enough for the
//! default 5 s read timeout, so a batch of 10,000 entities succeeds.

use solus::api::pb;
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

/// Reads in two rounds (`storage.hbase.read_rounds = 2`, the default) give
/// the answers of one read of every bit: two dedupers with the same
/// entities added (same bits, other row keys), one read by a server in one
/// round, the other by a server in two, answer the same CheckAbsence and
/// AddIfAbsent - batches of added, new and repeated entities, with and
/// without a request id (the answer recorded between read and write) - on
/// a filter filled to load ~0.9, where many entities need the second round.
pub async fn two_round_reads_answer_as_one_read_of_every_bit(b: &TestBackend) {
    let mut servers = Vec::new();
    for rounds in [1, 2] {
        let mut settings = b.settings.clone();
        settings.storage.hbase.read_rounds = rounds;
        servers.push(TestServer::start_with(settings).await);
    }
    let (one, two) = (&servers[0], &servers[1]);
    for (s, name) in [(one, "r1"), (two, "r2")] {
        s.admin()
            .create_deduper(create_np("c", name, 10_000, 0.01, 3600))
            .await
            .unwrap();
    }
    let filled: Vec<String> = (0..9_000).map(|i| format!("in-{i}")).collect();
    let refs: Vec<&str> = filled.iter().map(String::as_str).collect();
    for name in ["r1", "r2"] {
        for chunk in refs.chunks(3_000) {
            add(one, "c", name, chunk, 0).await;
        }
    }
    // 600 added, 600 new, and 200 repeats of the batch's own new entities.
    let mut batch: Vec<String> = (0..600).map(|i| format!("in-{}", i * 13)).collect();
    batch.extend((0..600).map(|i| format!("new-{i}")));
    batch.extend((0..200).map(|i| format!("new-{}", i * 3)));
    let batch: Vec<&str> = batch.iter().map(String::as_str).collect();

    let checked = absent(one, "c", "r1", &batch).await;
    assert_eq!(absent(two, "c", "r2", &batch).await, checked, "CheckAbsence");
    assert!(checked[..600].iter().all(|a| !a), "no false negatives");
    let new = checked[600..1_200].iter().filter(|a| **a).count();
    // Load 0.9 of n = 10^4 at p = 0.01: a few percent of new entities read present.
    assert!((450..600).contains(&new), "{new} of 600 new entities absent");

    let first = add_if_absent(one, "c", "r1", &batch, 0).await;
    assert_eq!(add_if_absent(two, "c", "r2", &batch, 0).await, first, "AddIfAbsent");
    assert!(
        first[1_200..].iter().all(|a| !a),
        "repeats within the batch are present"
    );

    let more: Vec<String> = (0..800).map(|i| format!("more-{}", i % 500)).collect();
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    let with_id = |s: &TestServer, name: &str| {
        let req = pb::AddIfAbsentRequest {
            record_ids: Vec::new(),
            request_id: Some(format!("req-{name}").into_bytes().into()),
            client_id: "c".into(),
            deduper: name.into(),
            entities: ents(&more),
            ttl_ms: 0,
        };
        let mut client = s.data();
        async move {
            client
                .add_if_absent(req)
                .await
                .expect("AddIfAbsent")
                .into_inner()
                .absent
        }
    };
    let by_one = with_id(one, "r1").await;
    assert_eq!(with_id(two, "r2").await, by_one, "AddIfAbsent with a request id");
    assert!(by_one[500..].iter().all(|a| !a), "repeats within the batch are present");
    assert!(absent(two, "c", "r2", &more).await.iter().all(|a| !a), "all added");
}
