//! Puts, gets, versions, deletes and the other data calls, through a real
//! Thrift client.

mod common;

use common::*;
use hbase_thrift::hbase::{THbaseSyncClient, TScan};

#[test]
fn put_then_get() {
    let (_emu, clock, mut client) = start_manual();
    create_table(&mut client);
    mutate(&mut client, "r1", vec![put("cf:a", b"1"), put("cf:b", b"2")]);

    let cell = get(&mut client, "r1", "cf:a").unwrap();
    assert_eq!(value(&cell), b"1");
    assert_eq!(cell.timestamp, Some(clock_now(&clock)), "stamped with server time");

    let rows = client.get_row(TABLE.into(), "r1".into(), no_attrs()).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(row_key(&rows[0]), "r1");
    assert_eq!(rows[0].sorted_columns, None);
    let values = row_values(&rows[0]);
    assert_eq!(values["cf:a"], b"1");
    assert_eq!(values["cf:b"], b"2");
}

fn clock_now(clock: &hbase_emulator::ManualClock) -> i64 {
    use hbase_emulator::Clock;
    clock.now_ms()
}

#[test]
fn highest_timestamp_wins_whatever_the_write_order() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate_ts(&mut client, "r", vec![put("cf:a", b"new")], 200);
    mutate_ts(&mut client, "r", vec![put("cf:a", b"old")], 100);
    let cell = get(&mut client, "r", "cf:a").unwrap();
    assert_eq!((value(&cell), cell.timestamp), (&b"new"[..], Some(200)));

    // Same timestamp: the later write replaces the earlier one.
    mutate_ts(&mut client, "r", vec![put("cf:a", b"newer")], 200);
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"newer");

    let versions = client
        .get_ver(TABLE.into(), "r".into(), "cf:a".into(), 10, no_attrs())
        .unwrap();
    let stamps: Vec<_> = versions.iter().map(|c| c.timestamp.unwrap()).collect();
    assert_eq!(stamps, vec![200, 100]);
}

#[test]
fn versions_are_capped_at_max_versions() {
    let (_emu, mut client) = start();
    create_table(&mut client); // cf keeps 3 versions
    for ts in 1..=5 {
        mutate_ts(&mut client, "r", vec![put("cf:a", &[ts as u8])], ts);
    }
    let versions = client
        .get_ver(TABLE.into(), "r".into(), "cf:a".into(), 10, no_attrs())
        .unwrap();
    let stamps: Vec<_> = versions.iter().map(|c| c.timestamp.unwrap()).collect();
    assert_eq!(stamps, vec![5, 4, 3]);
    io_error(client.get_ver(TABLE.into(), "r".into(), "cf:a".into(), 0, no_attrs()));
}

#[test]
fn ts_reads_are_strictly_older_and_plain_reads_see_the_future() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let future = i64::MAX / 2;
    mutate_ts(&mut client, "r", vec![put("cf:a", b"past")], 100);
    mutate_ts(&mut client, "r", vec![put("cf:a", b"future")], future);

    let row = client.get_row(TABLE.into(), "r".into(), no_attrs()).unwrap();
    assert_eq!(row_values(&row[0])["cf:a"], b"future");

    let before = |client: &mut Client, ts| client.get_row_ts(TABLE.into(), "r".into(), ts, no_attrs()).unwrap();
    assert_eq!(row_values(&before(&mut client, 101)[0])["cf:a"], b"past");
    assert!(before(&mut client, 100).is_empty(), "[0, ts) excludes ts");
    let cols = client
        .get_rows_with_columns_ts(TABLE.into(), bytes(&["r"]), bytes(&["cf:a"]), 101, no_attrs())
        .unwrap();
    assert_eq!(row_values(&cols[0])["cf:a"], b"past");
}

#[test]
fn missing_rows_and_columns_are_left_out() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate(&mut client, "r1", vec![put("cf:a", b"1")]);
    mutate(&mut client, "r3", vec![put("cf:a", b"3"), put("cf:b", b"3b")]);

    assert!(
        client
            .get_row(TABLE.into(), "nope".into(), no_attrs())
            .unwrap()
            .is_empty()
    );
    assert!(get(&mut client, "r1", "cf:zz").is_none());
    let none = client
        .get_row_with_columns(TABLE.into(), "r1".into(), bytes(&["cf:zz"]), no_attrs())
        .unwrap();
    assert!(none.is_empty(), "a row with none of the columns is absent");

    let rows = client
        .get_rows_with_columns(
            TABLE.into(),
            bytes(&["r3", "missing", "r1", "r3"]),
            bytes(&["cf:b", "cf:a"]),
            no_attrs(),
        )
        .unwrap();
    let keys: Vec<_> = rows.iter().map(row_key).collect();
    assert_eq!(keys, ["r3", "r1", "r3"], "request order, absent rows skipped");
    assert_eq!(row_values(&rows[1]).len(), 1, "missing column left out");
    assert_eq!(row_values(&rows[0]).len(), 2);
}

#[test]
fn a_bare_family_selects_the_whole_family() {
    let (_emu, mut client) = start();
    client
        .create_table(TABLE.into(), vec![family("cf", 1, 0), family("x", 1, 0)])
        .unwrap();
    mutate(
        &mut client,
        "r",
        vec![put("cf:a", b"1"), put("cf:b", b"2"), put("x:c", b"3")],
    );
    let read = |client: &mut Client, cols: &[&str]| {
        let rows = client
            .get_row_with_columns(TABLE.into(), "r".into(), bytes(cols), no_attrs())
            .unwrap();
        row_values(&rows[0]).into_keys().collect::<Vec<_>>()
    };
    assert_eq!(read(&mut client, &["cf"]), ["cf:a", "cf:b"]);
    assert_eq!(read(&mut client, &[]), ["cf:a", "cf:b", "x:c"]);
    // HBase quirk: addColumn after addFamily narrows the family again.
    assert_eq!(read(&mut client, &["cf", "cf:b"]), ["cf:b"]);
    let cells = client.get(TABLE.into(), "r".into(), "cf".into(), no_attrs()).unwrap();
    assert_eq!(cells.len(), 2, "get with a family returns each column's newest cell");
}

#[test]
fn mutate_rows_puts_then_deletes() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate(&mut client, "gone", vec![put("cf:a", b"x")]);
    client
        .mutate_rows(
            TABLE.into(),
            vec![
                batch("r", vec![put("cf:a", b"1"), delete("cf:a"), put("cf:b", b"2")]),
                batch("gone", vec![delete("cf")]),
            ],
            no_attrs(),
        )
        .unwrap();
    // The delete runs after the put at the same timestamp, so it wins.
    assert!(get(&mut client, "r", "cf:a").is_none());
    assert_eq!(value(&get(&mut client, "r", "cf:b").unwrap()), b"2");
    assert!(get(&mut client, "gone", "cf:a").is_none());

    // With an explicit timestamp the same rule holds, and a delete marker at
    // ts also hides a put at ts made in a later call.
    client
        .mutate_rows_ts(
            TABLE.into(),
            vec![batch("t", vec![put("cf:a", b"1"), delete("cf:a")])],
            500,
            no_attrs(),
        )
        .unwrap();
    assert!(get(&mut client, "t", "cf:a").is_none());
    mutate_ts(&mut client, "t", vec![put("cf:a", b"again")], 500);
    assert!(get(&mut client, "t", "cf:a").is_none(), "deletes mask puts");
    mutate_ts(&mut client, "t", vec![put("cf:a", b"later")], 501);
    assert_eq!(value(&get(&mut client, "t", "cf:a").unwrap()), b"later");
}

#[test]
fn puts_need_a_qualifier() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    for column in ["cf", "cf:"] {
        illegal_argument(client.mutate_row(
            TABLE.into(),
            "r".into(),
            vec![put("cf:ok", b"1"), put(column, b"x")],
            no_attrs(),
        ));
        illegal_argument(client.mutate_rows(
            TABLE.into(),
            vec![
                batch("r", vec![put("cf:ok", b"1")]),
                batch("s", vec![put(column, b"x")]),
            ],
            no_attrs(),
        ));
    }
    assert!(get(&mut client, "r", "cf:ok").is_none(), "nothing applied");
    illegal_argument(client.mutate_row(TABLE.into(), "".into(), vec![put("cf:a", b"1")], no_attrs()));
}

#[test]
fn unknown_families_fail_like_no_such_column_family() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let e = io_error(client.mutate_row(
        TABLE.into(),
        "r".into(),
        vec![put("cf:a", b"1"), put("nope:a", b"1")],
        no_attrs(),
    ));
    assert!(message(&e).contains("NoSuchColumnFamilyException"));
    assert!(get(&mut client, "r", "cf:a").is_none(), "the Put fails whole");
    io_error(client.get(TABLE.into(), "r".into(), "nope:a".into(), no_attrs()));
    io_error(client.get_rows_with_columns(TABLE.into(), bytes(&["r"]), bytes(&["nope"]), no_attrs()));
    let mut s = scan();
    s.columns = Some(bytes(&["nope"]));
    io_error(client.scanner_open_with_scan(TABLE.into(), s, no_attrs()));

    // In a batch, other rows still go through, as with a real multi-put.
    let e = io_error(client.mutate_rows(
        TABLE.into(),
        vec![
            batch("ok", vec![put("cf:a", b"1")]),
            batch("bad", vec![put("nope:a", b"1")]),
        ],
        no_attrs(),
    ));
    assert!(message(&e).contains("Failed 1 action"));
    assert!(get(&mut client, "ok", "cf:a").is_some());
}

#[test]
fn delete_all_deletes_as_of_now() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let future = i64::MAX / 2;
    mutate(&mut client, "r", vec![put("cf:now", b"1")]);
    mutate_ts(&mut client, "r", vec![put("cf:later", b"2")], future);
    client.delete_all_row(TABLE.into(), "r".into(), no_attrs()).unwrap();
    assert!(get(&mut client, "r", "cf:now").is_none());
    assert!(get(&mut client, "r", "cf:later").is_some(), "future cells survive");

    mutate(&mut client, "s", vec![put("cf:a", b"1"), put("cf:b", b"2")]);
    client
        .delete_all(TABLE.into(), "s".into(), "cf:a".into(), no_attrs())
        .unwrap();
    assert!(get(&mut client, "s", "cf:a").is_none());
    assert!(get(&mut client, "s", "cf:b").is_some());
}

#[test]
fn delete_markers_last_until_major_compaction() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate_ts(&mut client, "r", vec![put("cf:a", b"v")], 900);
    client
        .delete_all_row_ts(TABLE.into(), "r".into(), 1000, no_attrs())
        .unwrap();
    mutate_ts(&mut client, "r", vec![put("cf:a", b"old")], 500);
    assert!(get(&mut client, "r", "cf:a").is_none(), "masked by the marker");
    client
        .delete_all_ts(TABLE.into(), "r".into(), "cf:b".into(), 10, no_attrs())
        .unwrap();
    client.major_compact(TABLE.into()).unwrap();
    mutate_ts(&mut client, "r", vec![put("cf:a", b"old")], 500);
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"old");
}

#[test]
fn check_and_put() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let cas = |client: &mut Client, expected: &[u8], new: &[u8]| {
        client
            .check_and_put(
                TABLE.into(),
                "r".into(),
                "cf:a".into(),
                expected.to_vec(),
                put("cf:a", new),
                no_attrs(),
            )
            .unwrap()
    };
    assert!(cas(&mut client, b"", b"1"), "empty expected matches an absent cell");
    assert!(!cas(&mut client, b"", b"2"));
    assert!(!cas(&mut client, b"x", b"2"));
    assert!(cas(&mut client, b"1", b"2"));
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"2");
    illegal_argument(client.check_and_put(
        TABLE.into(),
        "r".into(),
        "cf:a".into(),
        vec![],
        put("cf", b"x"),
        no_attrs(),
    ));
}

#[test]
fn atomic_increment_keeps_a_big_endian_long() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let inc = |client: &mut Client, by| {
        client
            .atomic_increment(TABLE.into(), "r".into(), "cf:n".into(), by)
            .unwrap()
    };
    assert_eq!(inc(&mut client, 5), 5);
    assert_eq!(inc(&mut client, -2), 3);
    assert_eq!(value(&get(&mut client, "r", "cf:n").unwrap()), 3i64.to_be_bytes());
    mutate(&mut client, "r", vec![put("cf:s", b"abc")]);
    io_error(client.atomic_increment(TABLE.into(), "r".into(), "cf:s".into(), 1));
}

#[test]
fn default_tscan_reads_nothing_like_the_real_server() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:a", b"1")]);
    // TScan::default() sets timestamp Some(0): the time range [0, 0).
    assert!(scan_all(&mut client, TScan::default(), 10).is_empty());
    assert_eq!(scan_all(&mut client, scan(), 10).len(), 1);
}

#[test]
fn append_and_increment() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:s", b"ab")]);
    let append = hbase_thrift::hbase::TAppend::new(
        TABLE.as_bytes().to_vec(),
        b"r".to_vec(),
        bytes(&["cf:s"]),
        bytes(&["cd"]),
    );
    let cells = client.append(append).unwrap();
    assert_eq!(value(&cells[0]), b"abcd");
    let increment = hbase_thrift::hbase::TIncrement::new(TABLE.as_bytes().to_vec(), b"r".to_vec(), b"cf:n".to_vec(), 7);
    client.increment(increment).unwrap();
    assert_eq!(value(&get(&mut client, "r", "cf:n").unwrap()), 7i64.to_be_bytes());
}
