//! Remembered record ids as HBase cells: one `C:rec#<fingerprint>` per
//! (id, entity), and an earlier version's `C:rec` still read.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{Mutation, THbaseSyncClient};
use prost::bytes::Bytes;
use solus::api::pb;
use solus::clock::now_ms;
use solus::contract::layout;
use solus::engine::records::fingerprint;

use super::raw_client;
use crate::common::*;
use crate::hbase_shared::row;

fn aia(entity: &str, id: &str) -> pb::AddIfAbsentRequest {
    pb::AddIfAbsentRequest {
        client_id: "c".into(),
        deduper: "r".into(),
        entities: vec![Bytes::copy_from_slice(entity.as_bytes())],
        ttl_ms: 0,
        request_id: None,
        record_ids: vec![Bytes::copy_from_slice(id.as_bytes())],
    }
}

fn record_row(id: &str) -> Vec<u8> {
    let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
    layout::prefixed(format!("record|c|r|{hex}").as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_cells_are_per_entity_and_the_earlier_single_cell_is_read() {
    let b = TestBackend::hbase();
    let s = TestServer::start(&b).await;
    s.admin()
        .create_deduper(create_np("c", "r", 10_000, 0.01, 3600))
        .await
        .unwrap();
    let absent = |r: tonic::Response<pb::AddIfAbsentResponse>| r.into_inner().absent;
    assert_eq!(
        absent(s.data().add_if_absent(aia("e1", "id")).await.unwrap()),
        vec![true]
    );
    assert_eq!(
        absent(s.data().add_if_absent(aia("e2", "id")).await.unwrap()),
        vec![true]
    );
    let mut raw = raw_client(b.emulator().addr());
    let meta = layout::meta_table("c");
    let cells = row(&mut raw, &meta, &record_row("id"));
    let names: Vec<String> = cells.keys().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
    let mut expected = vec![
        format!("C:rec#{:016x}", fingerprint(b"e1")),
        format!("C:rec#{:016x}", fingerprint(b"e2")),
    ];
    expected.sort();
    assert_eq!(names, expected);
    let value = cells.values().next().unwrap().value.clone().unwrap();
    assert_eq!(value.len(), 16, "expiry then fingerprint");

    // A record an earlier version remembered: one `C:rec` cell per id.
    s.data()
        .add(pb::AddRequest {
            client_id: "c".into(),
            deduper: "r".into(),
            entities: vec![Bytes::from_static(b"old")],
            ttl_ms: 0,
            request_id: None,
        })
        .await
        .unwrap();
    let mut legacy = (now_ms() + 3_600_000).to_be_bytes().to_vec();
    legacy.extend_from_slice(&fingerprint(b"old").to_be_bytes());
    let put = Mutation::new(false, b"C:rec".to_vec(), legacy, true);
    raw.mutate_row(meta.into_bytes(), record_row("old-id"), vec![put], BTreeMap::new())
        .unwrap();
    assert_eq!(
        absent(s.data().add_if_absent(aia("old", "old-id")).await.unwrap()),
        vec![true],
        "the replay of a record remembered in the earlier cell"
    );
    assert_eq!(
        absent(s.data().add_if_absent(aia("old", "other-id")).await.unwrap()),
        vec![false]
    );
    s.stop().await;
}
