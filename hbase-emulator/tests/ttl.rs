//! Per-cell (`_ttl` attribute) and family TTLs.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use hbase_thrift::hbase::THbaseSyncClient;

fn put_with_ttl(client: &mut Client, row: &str, ttl_ms: i64) {
    client
        .mutate_row(TABLE.into(), row.into(), vec![put("cf:a", b"v")], ttl_attrs(ttl_ms))
        .unwrap();
}

/// Every read path agrees on whether `row` is visible.
fn visible_everywhere(client: &mut Client, row: &str) -> bool {
    let by_get = get(client, row, "cf:a").is_some();
    let by_rows = !client
        .get_rows_with_columns(TABLE.into(), bytes(&[row]), bytes(&["cf:a"]), no_attrs())
        .unwrap()
        .is_empty();
    let mut s = scan();
    s.start_row = Some(row.into());
    s.stop_row = Some(row.into());
    let by_scan = !scan_all(client, s, 10).is_empty();
    assert_eq!(by_get, by_rows, "get vs getRowsWithColumns");
    assert_eq!(by_get, by_scan, "get vs scan");
    by_get
}

#[test]
fn cell_ttl_expires_after_timestamp_plus_ttl() {
    let (_emu, clock, mut client) = start_manual();
    create_table(&mut client);
    put_with_ttl(&mut client, "r", 1_000);
    clock.advance_ms(1_000);
    assert!(visible_everywhere(&mut client, "r"), "ts + ttl == now: still alive");
    clock.advance_ms(1);
    assert!(!visible_everywhere(&mut client, "r"), "ts + ttl < now: expired");
}

#[test]
fn cell_ttl_applies_to_every_row_of_a_mutate_rows_call() {
    let (_emu, clock, mut client) = start_manual();
    create_table(&mut client);
    client
        .mutate_rows(
            TABLE.into(),
            vec![batch("a", vec![put("cf:a", b"1")]), batch("b", vec![put("cf:a", b"2")])],
            ttl_attrs(50),
        )
        .unwrap();
    clock.advance_ms(51);
    assert!(!visible_everywhere(&mut client, "a"));
    assert!(!visible_everywhere(&mut client, "b"));
}

#[test]
fn cell_ttl_with_the_real_clock() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    put_with_ttl(&mut client, "short", 200);
    put_with_ttl(&mut client, "long", 60_000);
    assert!(visible_everywhere(&mut client, "short"));
    thread::sleep(Duration::from_millis(400));
    assert!(!visible_everywhere(&mut client, "short"));
    assert!(visible_everywhere(&mut client, "long"));
}

#[test]
fn cell_ttl_counts_from_the_cell_timestamp() {
    let (_emu, clock, mut client) = start_manual();
    create_table(&mut client);
    let old = {
        use hbase_emulator::Clock;
        clock.now_ms() - 10_000
    };
    client
        .mutate_row_ts(TABLE.into(), "r".into(), vec![put("cf:a", b"v")], old, ttl_attrs(5_000))
        .unwrap();
    assert!(!visible_everywhere(&mut client, "r"), "born expired");
}

#[test]
fn family_ttl_in_seconds() {
    let (_emu, clock, mut client) = start_manual();
    client.create_table(TABLE.into(), vec![family("cf", 1, 10)]).unwrap();
    mutate(&mut client, "r", vec![put("cf:a", b"v")]);
    clock.advance_ms(10_000);
    assert!(visible_everywhere(&mut client, "r"));
    clock.advance_ms(1);
    assert!(!visible_everywhere(&mut client, "r"));
}

#[test]
fn an_expired_newest_version_exposes_the_older_one() {
    let (_emu, clock, mut client) = start_manual();
    create_table(&mut client); // 3 versions
    mutate(&mut client, "r", vec![put("cf:a", b"durable")]);
    clock.advance_ms(1);
    put_with_ttl(&mut client, "r", 10);
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"v");
    clock.advance_ms(11);
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"durable");
}

#[test]
fn a_short_ttl_attribute_is_an_io_error() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let attrs = [(b"_ttl".to_vec(), vec![0, 0, 0, 1])].into();
    io_error(client.mutate_row(TABLE.into(), "r".into(), vec![put("cf:a", b"v")], attrs));
}
