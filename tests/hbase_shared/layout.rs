//! What an independent Thrift client sees after adds through the service:
//! the contract's row keys, qualifiers and 8-byte values, cell timestamps =
//! expiry, the `_ttl` cell TTL, the meta row, and the farm table.

use std::collections::BTreeSet;

use serde_json::Value;
use solus::api::pb::{self, Level};
use solus::clock::now_ms;
use solus::contract::layout;

use super::{all_row_keys, row};
use crate::common::*;

fn vectors() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/test-vectors.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str::<Value>(&text).unwrap()["cases"]
        .as_array()
        .unwrap()
        .clone()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn add_req(client: &str, deduper: &str, entity: Vec<u8>, ttl_ms: u64) -> pb::AddRequest {
    pb::AddRequest {
        request_id: None,
        client_id: client.into(),
        deduper: deduper.into(),
        entities: vec![entity.into()],
        ttl_ms,
    }
}

/// Every reference case (bar the empty entity, which the API refuses): one
/// Add, then exactly the case's row, qualifiers and values in the table.
pub async fn cells_carry_the_contract_layout(first: &TestBackend) {
    let mut checked = 0;
    for case in vectors() {
        let entity = unhex(case["entity_hex"].as_str().unwrap());
        if entity.is_empty() {
            continue;
        }
        let mut b = first.fresh();
        // Some cases have bits_per_shard above 2^30 (biased positions): data
        // of such a geometry is what the switch exists for.
        b.settings.limits.allow_biased_bits_per_shard = true;
        let s = TestServer::start(&b).await;
        let num = |k: &str| case[k].as_u64().unwrap() as u32;
        let (client, deduper) = (case["client_id"].as_str().unwrap(), case["deduper"].as_str().unwrap());
        let create = create_geom(
            client,
            deduper,
            num("hash_functions"),
            num("shards"),
            num("bits_per_shard"),
            3600,
        );
        s.admin().create_deduper(create).await.unwrap();
        let before = now_ms();
        s.data().add(add_req(client, deduper, entity, 60_000)).await.unwrap();
        let after = now_ms();

        let key = unhex(case["row_key_hex"].as_str().unwrap());
        assert_eq!(key, layout::data_row_key(num("shard"), client, deduper));
        let mut raw = b.raw_thrift();
        assert_eq!(
            all_row_keys(&mut raw, "solus_deduper"),
            std::slice::from_ref(&key),
            "only the entity's shard row"
        );
        let cells = row(&mut raw, "solus_deduper", &key);
        let want: BTreeSet<Vec<u8>> = case["qualifiers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| format!("S:{}", q.as_str().unwrap()).into_bytes())
            .collect();
        let got: BTreeSet<Vec<u8>> = cells.keys().cloned().collect();
        assert_eq!(got, want, "qualifiers of case {}", case["entity_hex"]);
        for (col, cell) in &cells {
            let value = cell.value.as_deref().unwrap();
            assert_eq!(value.len(), 8, "{col:?}");
            let expire = i64::from_be_bytes(value.try_into().unwrap());
            assert!(
                (before + 60_000..=after + 60_000).contains(&expire),
                "{col:?}: {expire}"
            );
            assert_eq!(cell.timestamp, Some(expire), "cell timestamp = expiry time");
        }
        checked += 1;
    }
    assert_eq!(checked, 9);
}

/// A shorter add after a longer one leaves the longer expiry in the cell.
pub async fn the_highest_expiry_stays_in_the_cell(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_geom("c", "d", 1, 1, 10, 60))
        .await
        .unwrap();
    let start = now_ms();
    s.data().add(add_req("c", "d", b"x".to_vec(), 30_000)).await.unwrap();
    s.data().add(add_req("c", "d", b"x".to_vec(), 1_000)).await.unwrap();
    let mut raw = b.raw_thrift();
    let cells = row(&mut raw, "solus_deduper", &layout::data_row_key(0, "c", "d"));
    let expire = i64::from_be_bytes(
        cells
            .values()
            .next()
            .unwrap()
            .value
            .as_deref()
            .unwrap()
            .try_into()
            .unwrap(),
    );
    assert!(expire >= start + 30_000, "expiry {expire} moved backwards");
}

/// The meta row in Java `Bytes.toBytes` encodings, and DC-level data in the
/// farm table only.
pub async fn meta_row_and_farm_table(b: &TestBackend) {
    let s = TestServer::start(b).await;
    let mut req = create_geom("client-a", "clicks", 3, 4, 1000, 120);
    req.level = Level::Dc as i32;
    let d = s.admin().create_deduper(req).await.unwrap().into_inner();
    s.data()
        .add(add_req("client-a", "clicks", b"e".to_vec(), 0))
        .await
        .unwrap();

    let mut raw = b.raw_thrift();
    let meta = row(
        &mut raw,
        "client-a_dedupers",
        &layout::meta_row_key("client-a", "clicks"),
    );
    let value = |q: &str| meta[format!("C:{q}").as_bytes()].value.clone().unwrap();
    assert_eq!(value("name"), b"clicks");
    assert_eq!(value("hf"), [0, 0, 0, 3]);
    assert_eq!(value("sh"), [0, 0, 0, 4]);
    assert_eq!(value("bps"), 1000_i32.to_be_bytes());
    assert_eq!(value("a"), [0xFF]);
    assert_eq!(value("level"), b"DC");
    assert_eq!(value("ctime"), d.create_time_ms.to_be_bytes());
    assert_eq!(value("utime"), d.update_time_ms.to_be_bytes());
    assert_eq!(value("expiry"), 120_i64.to_be_bytes());
    assert!(
        !meta.contains_key(b"C:n".as_slice()),
        "n and p only when sized from them"
    );

    let shard = solus::contract::hashing::shard_of(b"e", 4);
    let key = layout::data_row_key(shard, "client-a", "clicks");
    assert_eq!(row(&mut raw, "solus_deduper_dc1", &key).len(), 3);
    assert!(all_row_keys(&mut raw, "solus_deduper").is_empty());
}
