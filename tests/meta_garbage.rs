//! Issue 45, class 6: garbage in a stored deduper config. One column of a
//! config row overwritten on HBase by hand (`sh`/`bps` = 0 panicked in the
//! storage task, answered as a retryable UNAVAILABLE; `hf` = 0 answered
//! every entity "present" and stored nothing; `hf` = 2^31-1 aborted the
//! whole server), and one bad row failed ListDedupers for every deduper of
//! its client. The same values in the embedded store's configs. Now each is
//! that deduper's error alone: INTERNAL (final: no RetryInfo) naming the
//! row and the column, listed apart under `unreadable`, the client's other
//! deduper served, and the deduper back once the value is put back.

mod common;

use std::collections::BTreeMap;

use common::*;
use hbase_thrift::hbase::{Mutation, THbaseSyncClient};
use solus::api::pb;
use tonic::Code;

/// What the bad deduper holds before the garbage: `b1` added.
async fn set_up(s: &TestServer) {
    for name in ["good", "bad"] {
        s.admin()
            .create_deduper(create_np("c", name, 1000, 0.01, 3600))
            .await
            .unwrap();
    }
    add(s, "c", "good", &["g1"], 0).await;
    add(s, "c", "bad", &["b1"], 0).await;
}

/// Every call on `c/bad` is refused, final and naming `names` (the row and
/// the column); `c/good` is served and listed; the server is up.
async fn refused_alone(s: &TestServer, names: &[String]) {
    let check = |what: &str, status: tonic::Status| {
        assert_eq!(status.code(), Code::Internal, "{what}: {status:?}");
        assert!(
            !solus::api::is_transient(&status),
            "{what}: final, no RetryInfo: {status:?}"
        );
        for n in names {
            assert!(
                status.message().contains(n.as_str()),
                "{what}: {n:?} in {:?}",
                status.message()
            );
        }
    };
    let mut data = s.data();
    let add = data
        .add(pb::AddRequest {
            client_id: "c".into(),
            deduper: "bad".into(),
            entities: ents(&["b2"]),
            ttl_ms: 0,
            request_id: None,
        })
        .await
        .unwrap_err();
    check("Add", add);
    let read = data
        .check_absence(pb::CheckAbsenceRequest {
            client_id: "c".into(),
            deduper: "bad".into(),
            entities: ents(&["b1", "b3"]),
            record_ids: Vec::new(),
        })
        .await
        .unwrap_err();
    check("CheckAbsence", read);
    let both = data
        .add_if_absent(pb::AddIfAbsentRequest {
            client_id: "c".into(),
            deduper: "bad".into(),
            entities: ents(&["b3"]),
            ttl_ms: 0,
            request_id: None,
            record_ids: Vec::new(),
        })
        .await
        .unwrap_err();
    check("AddIfAbsent", both);
    let get = s
        .admin()
        .get_deduper(pb::GetDeduperRequest {
            client_id: "c".into(),
            name: "bad".into(),
        })
        .await
        .unwrap_err();
    check("GetDeduper", get);
    let list = s
        .admin()
        .list_dedupers(pb::ListDedupersRequest {
            client_id: "c".into(),
            active_only: false,
        })
        .await
        .expect("ListDedupers answers for the good ones")
        .into_inner();
    let listed: Vec<&str> = list.dedupers.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(listed, ["good"]);
    eprintln!("listed apart: {:?}", list.unreadable);
    let unreadable: Vec<&str> = list.unreadable.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(unreadable, ["bad"]);
    for n in names {
        assert!(
            list.unreadable[0].error.contains(n.as_str()),
            "{n:?} in {:?}",
            list.unreadable[0].error
        );
    }
    // The client's other deduper is served, reads and writes.
    assert_eq!(absent(s, "c", "good", &["g1", "g2"]).await, [false, true]);
    assert_eq!(add_if_absent(s, "c", "good", &["g2"], 0).await, [true]);
    let mut health = tonic_health::pb::health_client::HealthClient::new(s.channel.clone());
    let up = health
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .unwrap();
    assert_eq!(up.into_inner().status, 1, "the server is up (SERVING)");
    // The bad deduper is its own NOT_SERVING health service (the health
    // pass reports it within a few of its 200 ms rounds); the good one has none.
    let service = |name: &str| tonic_health::pb::HealthCheckRequest {
        service: solus::server::misplaced_health_service("c", name),
    };
    let mut bad = None;
    for _ in 0..50 {
        bad = health.check(service("bad")).await.ok().map(|r| r.into_inner().status);
        if bad == Some(2) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(bad, Some(2), "c/bad NOT_SERVING");
    assert!(health.check(service("good")).await.is_err(), "no service for c/good");
}

/// On HBase: `C:<column>` of `c/bad`'s row put to `value` by hand (a
/// 4-byte Java int), read by a fresh server (no cached config); then put
/// back, and the deduper serves again with what it held.
async fn hbase_case(column: &str, value: i32) {
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    set_up(&s).await;
    let row = solus::contract::layout::meta_row_key("c", "bad");
    let mut raw = b.raw_thrift();
    let col = format!("C:{column}").into_bytes();
    let original = raw
        .get_row_with_columns(b"c_dedupers".to_vec(), row.clone(), vec![col.clone()], BTreeMap::new())
        .unwrap()[0]
        .columns
        .as_ref()
        .unwrap()[&col]
        .value
        .clone()
        .unwrap();
    let mut put = |v: Vec<u8>| {
        raw.mutate_row(
            b"c_dedupers".to_vec(),
            row.clone(),
            vec![Mutation::new(false, col.clone(), v, true)],
            BTreeMap::new(),
        )
        .unwrap()
    };
    put(value.to_be_bytes().to_vec());
    s.stop().await;
    let s = TestServer::start(&b).await;
    let names = [
        format!("column C:{column}"),
        "table c_dedupers".to_string(),
        format!("{}", row.escape_ascii()),
    ];
    refused_alone(&s, &names).await;
    put(original);
    // A refused config is not cached: the next call reads the row again.
    assert_eq!(absent(&s, "c", "bad", &["b1", "b4"]).await, [false, true]);
    assert_eq!(add_if_absent(&s, "c", "bad", &["b4", "b4"], 0).await, [true, false]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbase_shards_put_to_zero() {
    hbase_case("sh", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbase_bits_per_shard_put_to_zero() {
    hbase_case("bps", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbase_hash_functions_put_to_zero() {
    hbase_case("hf", 0).await;
}

/// On the old code this one aborted the test process (the allocation of
/// entities x 2^31-1 positions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbase_hash_functions_put_to_i32_max() {
    hbase_case("hf", i32::MAX).await;
}

/// A `C:name` overwritten: the row would be used under another deduper's
/// name (its shard rows); refused naming the column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hbase_name_overwritten() {
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    set_up(&s).await;
    let row = solus::contract::layout::meta_row_key("c", "bad");
    b.raw_thrift()
        .mutate_row(
            b"c_dedupers".to_vec(),
            row.clone(),
            vec![Mutation::new(false, b"C:name".to_vec(), b"good".to_vec(), true)],
            BTreeMap::new(),
        )
        .unwrap();
    s.stop().await;
    let s = TestServer::start(&b).await;
    refused_alone(&s, &["column C:name".to_string(), format!("{}", row.escape_ascii())]).await;
}

/// The embedded store: `c/bad`'s stored config with `field` of its geometry
/// set to `value`, written while the server is stopped; the server starts,
/// refuses that deduper alone, and serves the other.
async fn embedded_case(field: &str, value: u64) {
    let b = TestBackend::embedded();
    let s = TestServer::start(&b).await;
    set_up(&s).await;
    s.stop().await;
    {
        let db = fjall::Database::builder(b.data_path()).open().unwrap();
        let meta = db.keyspace("meta", fjall::KeyspaceCreateOptions::default).unwrap();
        let key = b"c\0bad";
        let mut config: serde_json::Value = serde_json::from_slice(&meta.get(key).unwrap().unwrap()).unwrap();
        config["geometry"][field] = value.into();
        meta.insert(key, serde_json::to_vec(&config).unwrap()).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }
    let s = TestServer::start(&b).await;
    refused_alone(&s, &[format!("field {field}"), "\"bad\"".to_string()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_shards_zero() {
    embedded_case("shards", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_bits_per_shard_zero() {
    embedded_case("bits_per_shard", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_hash_functions_zero() {
    embedded_case("hash_functions", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_hash_functions_i32_max() {
    embedded_case("hash_functions", i32::MAX as u64).await;
}
