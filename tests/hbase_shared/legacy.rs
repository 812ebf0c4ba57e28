//! Legacy `<bit>` markers written by an older service, straight through
//! Thrift: they make an entity present, and a `<bit>#ttl` cell for the same
//! bit takes precedence over them. With `read_legacy_markers = "auto"` (the
//! default) they are read for a deduper whose config the original service
//! wrote (no `C:legacy` column), and not asked for a deduper this Solus
//! created; `"always"` reads them for every deduper.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{BatchMutation, Mutation, THbaseSyncClient};
use solus::clock::now_ms;
use solus::contract::{hashing, layout};

use crate::common::*;

const K: u32 = 4;
const SHARDS: u32 = 3;
const BITS: u32 = 5000;

/// (row key, bits) of `entity` in deduper c/d.
fn cells_of(entity: &str) -> (Vec<u8>, Vec<u32>) {
    let shard = hashing::shard_of(entity.as_bytes(), SHARDS);
    let mut bits = vec![0u32; K as usize];
    hashing::bit_positions(entity.as_bytes(), BITS, &mut bits);
    (layout::data_row_key(shard, "c", "d"), bits)
}

fn put(raw: &mut RawClient, row: Vec<u8>, cells: Vec<(String, Vec<u8>)>) {
    let mutations: Vec<_> = cells
        .into_iter()
        .map(|(q, v)| Mutation::new(false, format!("S:{q}").into_bytes(), v, true))
        .collect();
    raw.mutate_rows(
        "solus_deduper".into(),
        vec![BatchMutation::new(row, mutations)],
        BTreeMap::new(),
    )
    .unwrap();
}

/// The config row the original Java service writes for deduper c/`name`
/// (no Solus-only columns), in an existing meta table.
fn put_legacy_config(raw: &mut RawClient, name: &str) {
    let now = now_ms();
    let cells: Vec<(&str, Vec<u8>)> = vec![
        ("name", name.as_bytes().to_vec()),
        ("hf", (K as i32).to_be_bytes().to_vec()),
        ("sh", (SHARDS as i32).to_be_bytes().to_vec()),
        ("bps", (BITS as i32).to_be_bytes().to_vec()),
        ("a", vec![0xFF]),
        ("level", b"GLOBAL".to_vec()),
        ("ctime", now.to_be_bytes().to_vec()),
        ("utime", now.to_be_bytes().to_vec()),
        ("expiry", 3600_i64.to_be_bytes().to_vec()),
    ];
    let mutations: Vec<Mutation> = cells
        .into_iter()
        .map(|(q, v)| Mutation::new(false, format!("C:{q}").into_bytes(), v, true))
        .collect();
    raw.mutate_rows(
        layout::meta_table("c").into(),
        vec![BatchMutation::new(layout::meta_row_key("c", name), mutations)],
        BTreeMap::new(),
    )
    .unwrap();
}

fn legacy_markers(entity: &str, value: bool) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let (row, bits) = cells_of(entity);
    let cells = bits
        .iter()
        .map(|&b| (layout::legacy_qualifier(b), layout::encode_legacy(value).to_vec()))
        .collect();
    (row, cells)
}

pub async fn legacy_markers_count_and_ttl_cells_override_them(b: &TestBackend) {
    let s = TestServer::start(b).await;
    // A deduper of this Solus makes the meta table; "d" is the original service's.
    s.admin()
        .create_deduper(create_geom("c", "ours", K, SHARDS, BITS, 3600))
        .await
        .unwrap();
    let mut raw = b.raw_thrift();
    put_legacy_config(&mut raw, "d");

    // All k legacy markers true: present, for CheckAbsence and AddIfAbsent.
    let (row, cells) = legacy_markers("old-entity", true);
    put(&mut raw, row, cells);
    assert_eq!(absent(&s, "c", "d", &["old-entity", "new-entity"]).await, [false, true]);
    assert_eq!(add_if_absent(&s, "c", "d", &["old-entity"], 0).await, [false]);

    // A marker reading false does not count.
    let (row, mut cells) = legacy_markers("half-entity", true);
    cells[0].1 = layout::encode_legacy(false).to_vec();
    put(&mut raw, row, cells);
    assert_eq!(absent(&s, "c", "d", &["half-entity"]).await, [true]);

    // Legacy true everywhere, but an expired #ttl cell for one bit: the #ttl
    // cell decides that bit, so the entity is absent.
    let (row, cells) = legacy_markers("overridden", true);
    put(&mut raw, row.clone(), cells);
    assert_eq!(absent(&s, "c", "d", &["overridden"]).await, [false]);
    let (_, bits) = cells_of("overridden");
    let expired = layout::encode_expire_ms(now_ms() - 1_000).to_vec();
    put(&mut raw, row.clone(), vec![(layout::ttl_qualifier(bits[0]), expired)]);
    assert_eq!(absent(&s, "c", "d", &["overridden"]).await, [true]);
    // ... and a live #ttl cell over a legacy false marker sets the bit.
    let (_, mut cells) = legacy_markers("revived", true);
    let (revived_row, revived_bits) = cells_of("revived");
    cells[0].1 = layout::encode_legacy(false).to_vec();
    cells.push((
        layout::ttl_qualifier(revived_bits[0]),
        layout::encode_expire_ms(now_ms() + 60_000).to_vec(),
    ));
    put(&mut raw, revived_row, cells);
    assert_eq!(absent(&s, "c", "d", &["revived"]).await, [false]);

    // Adding through the service writes #ttl cells next to the markers.
    assert_eq!(add_if_absent(&s, "c", "d", &["overridden"], 0).await, [true]);
    assert_eq!(absent(&s, "c", "d", &["overridden"]).await, [false]);
}

/// (row key, bits) of `entity` in deduper c/`name` of the test geometry.
fn cells_in(name: &str, entity: &str) -> (Vec<u8>, Vec<u32>) {
    let (_, bits) = cells_of(entity);
    let shard = hashing::shard_of(entity.as_bytes(), SHARDS);
    (layout::data_row_key(shard, "c", name), bits)
}

/// `auto` (the default) asks no marker column of a deduper this Solus
/// created: markers put there straight through Thrift are not seen (were
/// they asked, the entity would read present); `always` reads them there
/// too; the original service's deduper is read with them under `auto`.
pub async fn auto_legacy_markers_follow_who_created_the_deduper(b: &TestBackend) {
    let s = TestServer::start(b).await;
    s.admin()
        .create_deduper(create_geom("c", "ours", K, SHARDS, BITS, 3600))
        .await
        .unwrap();
    let mut raw = b.raw_thrift();
    put_legacy_config(&mut raw, "theirs");
    for name in ["ours", "theirs"] {
        let (row, bits) = cells_in(name, "marked");
        let cells = bits
            .iter()
            .map(|&b| (layout::legacy_qualifier(b), layout::encode_legacy(true).to_vec()))
            .collect();
        put(&mut raw, row, cells);
    }
    assert_eq!(
        absent(&s, "c", "ours", &["marked"]).await,
        [true],
        "auto: no marker asked"
    );
    assert_eq!(
        absent(&s, "c", "theirs", &["marked"]).await,
        [false],
        "auto: markers read"
    );
    assert_eq!(add_if_absent(&s, "c", "theirs", &["marked"], 0).await, [false]);

    let mut always = b.settings.clone();
    always.storage.hbase.read_legacy_markers = solus::storage::hbase::LegacyMarkers::Always;
    let s = TestServer::start_with(always).await;
    assert_eq!(absent(&s, "c", "ours", &["marked"]).await, [false], "always");
    assert_eq!(absent(&s, "c", "theirs", &["marked"]).await, [false], "always");
}
