//! `data_dir` / `--data-dir`: the write-ahead log survives the emulator
//! going away without any shutdown (the handle dropped, the binary killed
//! with SIGKILL), a torn last record is ignored, and a restarted emulator
//! answers every read exactly as before.

mod common;

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::thread;
use std::time::Duration;

use common::*;
use hbase_emulator::{Emulator, EmulatorHandle, ManualClock};
use hbase_thrift::hbase::{TAppend, THbaseSyncClient, TIncrement};

const T0: i64 = 1_700_000_000_000;

fn start_in(dir: &Path, clock: &Arc<ManualClock>) -> (EmulatorHandle, Client) {
    let emulator = Emulator::builder()
        .clock(clock.clone())
        .data_dir(dir)
        .start("127.0.0.1:0")
        .unwrap();
    let client = connect(emulator.addr());
    (emulator, client)
}

/// Everything a client can see: tables, their state and descriptors, and
/// every stored version of every visible column of the enabled ones.
fn dump(client: &mut Client) -> Vec<String> {
    let mut out = Vec::new();
    for table in client.get_table_names().unwrap() {
        let name = String::from_utf8_lossy(&table).into_owned();
        let enabled = client.is_table_enabled(table.clone()).unwrap();
        let descriptors = client.get_column_descriptors(table.clone()).unwrap();
        // The region id is the creation time; the server address differs.
        let region_ids: Vec<_> = client
            .get_table_regions(table.clone())
            .unwrap()
            .iter()
            .map(|r| (r.id, r.name.clone()))
            .collect();
        out.push(format!("{name} enabled={enabled} {descriptors:?} {region_ids:?}"));
        if !enabled {
            continue;
        }
        let id = client
            .scanner_open_with_scan(table.clone(), scan(), no_attrs())
            .unwrap();
        for row in drain(client, id, 100) {
            let key = row.row.clone().unwrap();
            for column in row.columns.unwrap().keys() {
                let versions = client
                    .get_ver(table.clone(), key.clone(), column.clone(), 100, no_attrs())
                    .unwrap();
                let versions: Vec<_> = versions.iter().map(|c| (c.timestamp, c.value.clone())).collect();
                out.push(format!(
                    "{name} {key:?} {} {versions:?}",
                    String::from_utf8_lossy(column)
                ));
            }
        }
    }
    out
}

/// A bit of every mutating call, including ones that fail half-way.
fn write_everything(client: &mut Client, clock: &ManualClock) {
    client
        .create_table(TABLE.into(), vec![family("cf", 3, 0), family("short", 1, 60)])
        .unwrap();
    for name in ["off", "gone"] {
        client.create_table(name.into(), vec![family("f", 1, 0)]).unwrap();
        client.disable_table(name.into()).unwrap();
    }
    client.delete_table("gone".into()).unwrap();
    client.create_table("back".into(), vec![family("f", 2, 0)]).unwrap();
    client.disable_table("back".into()).unwrap();
    client.enable_table("back".into()).unwrap();

    // Server-stamped, explicit and future timestamps, versions, binary keys.
    mutate(client, "r1", vec![put("cf:a", b"1"), put("cf:b", b"x")]);
    clock.advance_ms(10);
    mutate(client, "r1", vec![put("cf:a", b"2")]);
    mutate_ts(client, "r1", vec![put("cf:a", b"old")], 5);
    mutate_ts(client, "r2", vec![put("cf:a", b"future")], T0 * 2);
    client
        .mutate_row(
            TABLE.into(),
            vec![0xFF, 0x00, 0x80],
            vec![put("cf:\u{1}", &[0, 0xFF])],
            no_attrs(),
        )
        .unwrap();
    // Cell TTLs (one already expired at write time but still stored) and a family TTL.
    client
        .mutate_rows_ts(
            TABLE.into(),
            vec![
                batch("t1", vec![put("cf:a", b"ttl")]),
                batch("t2", vec![put("cf:a", b"ttl")]),
            ],
            T0 + 1_000,
            ttl_attrs(5_000),
        )
        .unwrap();
    client
        .mutate_row(TABLE.into(), "t3".into(), vec![put("short:a", b"fam")], no_attrs())
        .unwrap();
    // Deletes: a column marker, a row marker masking a later older put, a
    // family delete, and a mutateRows with a failing row (the other applies).
    mutate(client, "d1", vec![put("cf:a", b"1"), put("cf:b", b"1")]);
    client
        .delete_all(TABLE.into(), "d1".into(), "cf:a".into(), no_attrs())
        .unwrap();
    mutate_ts(client, "d2", vec![put("cf:a", b"v")], 900);
    client
        .delete_all_row_ts(TABLE.into(), "d2".into(), 1_000, no_attrs())
        .unwrap();
    mutate_ts(client, "d2", vec![put("cf:a", b"masked")], 500);
    mutate(client, "d3", vec![put("cf:a", b"1"), delete("cf")]);
    let half = client.mutate_rows(
        TABLE.into(),
        vec![
            batch("m1", vec![put("cf:a", b"ok")]),
            batch("m2", vec![put("nope:a", b"no")]),
        ],
        no_attrs(),
    );
    io_error(half);
    // checkAndPut applied and not, increments, append, majorCompact.
    for (expected, new) in [(&b""[..], &b"1"[..]), (b"", b"2"), (b"1", b"3")] {
        client
            .check_and_put(
                TABLE.into(),
                "c".into(),
                "cf:a".into(),
                expected.to_vec(),
                put("cf:a", new),
                no_attrs(),
            )
            .unwrap();
    }
    client
        .atomic_increment(TABLE.into(), "n".into(), "cf:n".into(), 5)
        .unwrap();
    client
        .increment(TIncrement::new(
            TABLE.as_bytes().to_vec(),
            b"n".to_vec(),
            b"cf:n".to_vec(),
            2,
        ))
        .unwrap();
    client
        .append(TAppend::new(
            TABLE.as_bytes().to_vec(),
            b"n".to_vec(),
            bytes(&["cf:s"]),
            bytes(&["ab"]),
        ))
        .unwrap();
    mutate_ts(client, "k", vec![put("cf:a", b"v")], 100);
    client
        .delete_all_row_ts(TABLE.into(), "k".into(), 200, no_attrs())
        .unwrap();
    client.major_compact("back".into()).unwrap();
    mutate(client, "b", vec![put("cf:a", b"after")]);
    client
        .mutate_row("back".into(), "r".into(), vec![put("f:q", b"v")], no_attrs())
        .unwrap();
}

/// Delete markers are not visible, only their effect: older puts after
/// them stay masked (until a major compaction). A masked put changes nothing.
fn assert_markers_still_mask(client: &mut Client) {
    for (row, ts) in [("d1", 5), ("d2", 999), ("k", 150)] {
        mutate_ts(client, row, vec![put("cf:a", b"masked again")], ts);
        assert!(get(client, row, "cf:a").is_none(), "{row} at {ts}");
    }
}

#[test]
fn a_new_emulator_on_the_same_directory_sees_everything() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (first, mut client) = start_in(dir.path(), &clock);
    write_everything(&mut client, &clock);
    let before = dump(&mut client);
    assert!(before.len() > 15, "{before:#?}");

    // The first one is stopped, not dropped: nothing is flushed on the way
    // out, the log already holds every answered call.
    first.stop();
    let (second, mut client) = start_in(dir.path(), &clock);
    assert!(second.replayed().unwrap().frames > 20);
    assert_eq!(dump(&mut client), before);
    drop(first);

    // Behaviour, not just contents: markers still mask older puts, TTLs
    // still expire by the cells' own timestamps.
    assert_markers_still_mask(&mut client);
    assert!(get(&mut client, "t1", "cf:a").is_some());
    clock.set_ms(T0 + 6_001);
    assert!(get(&mut client, "t1", "cf:a").is_none(), "cell TTL: ts + 5 s");
    assert!(get(&mut client, "t3", "short:a").is_some());
    clock.advance_ms(60_000);
    let fam = client
        .get(TABLE.into(), "t3".into(), "short:a".into(), no_attrs())
        .unwrap();
    assert!(fam.is_empty(), "family TTL: 60 s");
    assert_eq!(get(&mut client, "r2", "cf:a").map(|c| c.timestamp), Some(Some(T0 * 2)));
}

#[test]
fn the_log_is_compacted_at_start_when_mostly_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (first, mut client) = start_in(dir.path(), &clock);
    write_everything(&mut client, &clock);
    for i in 0..500 {
        let value = format!("value {i}");
        mutate_ts(&mut client, "hot", vec![put("cf:a", value.as_bytes())], T0 + i);
    }
    let before = dump(&mut client);
    drop(first);
    let log = dir.path().join("wal.log");
    let long = fs::metadata(&log).unwrap().len();

    let (second, mut client) = start_in(dir.path(), &clock);
    let stats = second.replayed().unwrap();
    assert!(stats.compacted, "{stats:?}");
    let short = fs::metadata(&log).unwrap().len();
    assert!(short * 2 < long, "{short} vs {long}");
    assert_eq!(dump(&mut client), before);
    assert_markers_still_mask(&mut client);
    mutate(&mut client, "new", vec![put("cf:a", b"1")]);
    let after = dump(&mut client);
    drop(second);

    // The compacted log, plus what was appended to it, replays the same
    // (the second start replayed the long log; this one reads the snapshot).
    let (third, mut client) = start_in(dir.path(), &clock);
    assert!(!third.replayed().unwrap().compacted);
    assert_eq!(dump(&mut client), after);
    assert_markers_still_mask(&mut client);
    assert_eq!(
        get(&mut client, "hot", "cf:a").map(|c| c.timestamp),
        Some(Some(T0 + 499))
    );
}

#[test]
fn a_torn_last_record_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (first, mut client) = start_in(dir.path(), &clock);
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:a", b"kept")]);
    drop(first);
    let log = dir.path().join("wal.log");
    let whole = fs::metadata(&log).unwrap().len();
    // A crash in the middle of the next record: its length says 100 bytes, 3 made it.
    let mut file = OpenOptions::new().append(true).open(&log).unwrap();
    file.write_all(&[100, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9]).unwrap();
    drop(file);

    let (second, mut client) = start_in(dir.path(), &clock);
    assert_eq!(second.replayed().unwrap().torn_bytes, 11);
    assert_eq!(fs::metadata(&log).unwrap().len(), whole, "the torn tail is cut off");
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"kept");
    mutate(&mut client, "r2", vec![put("cf:a", b"new")]);
    drop(second);
    let (_third, mut client) = start_in(dir.path(), &clock);
    assert_eq!(value(&get(&mut client, "r2", "cf:a").unwrap()), b"new");
}

#[test]
fn clear_data_and_fsync_mode_are_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let emulator = Emulator::builder()
        .data_dir(dir.path())
        .fsync(true)
        .start("127.0.0.1:0")
        .unwrap();
    let mut client = connect(emulator.addr());
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:a", b"1")]);
    emulator.clear_data();
    client.create_table("other".into(), vec![family("f", 1, 0)]).unwrap();
    drop(emulator);
    let emulator = Emulator::builder().data_dir(dir.path()).start("127.0.0.1:0").unwrap();
    let mut client = connect(emulator.addr());
    assert_eq!(client.get_table_names().unwrap(), bytes(&["other"]));
}

#[test]
fn in_memory_by_default() {
    let (emulator, mut client) = start();
    assert_eq!(emulator.replayed(), None);
    create_table(&mut client);
    drop(emulator);
    let (_emulator, mut client) = start();
    assert!(client.get_table_names().unwrap().is_empty());
}

/// The real binary, read until it says where it listens.
struct Binary(Child);

impl Binary {
    fn start(dir: &Path, listen: &str) -> (Binary, SocketAddr) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hbase-emulator"))
            .args(["--listen", listen, "--data-dir"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines.next().expect("the emulator exited before listening").unwrap();
            if let Some(rest) = line.strip_prefix("hbase-emulator listening on ") {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        (Binary(child), addr)
    }

    /// SIGKILL: no handler, no flush, no exit code of its own.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_binary_killed_with_sigkill_under_load_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (binary, addr) = Binary::start(dir.path(), "127.0.0.1:0");
    let mut client = connect(addr);
    client
        .create_table(TABLE.into(), vec![family("cf", 1, 0), family("short", 1, 60)])
        .unwrap();
    client
        .mutate_rows_ts(
            TABLE.into(),
            vec![batch("ttl", vec![put("cf:a", b"v")])],
            1_000,
            ttl_attrs(10),
        )
        .unwrap();

    // A writer acknowledging one row per call until the server disappears.
    let acked = Arc::new(AtomicI64::new(-1));
    let started = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, started) = (acked.clone(), started.clone());
        thread::spawn(move || {
            let mut client = connect(addr);
            for i in 0.. {
                let row = format!("row-{i:06}");
                let value = format!("value {i}");
                let done = client.mutate_rows(
                    TABLE.into(),
                    vec![batch(&row, vec![put("cf:a", value.as_bytes()), put("cf:b", b"b")])],
                    no_attrs(),
                );
                if done.is_err() {
                    return;
                }
                acked.store(i, Ordering::SeqCst);
                if i == 200 {
                    started.store(true, Ordering::SeqCst);
                }
            }
        })
    };
    while !started.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(5));
    }
    binary.kill();
    writer.join().unwrap();
    let acked = acked.load(Ordering::SeqCst);
    assert!(acked >= 200);

    let (_binary, addr) = Binary::start(dir.path(), "127.0.0.1:0");
    let mut client = connect(addr);
    let descriptors = client.get_column_descriptors(TABLE.into()).unwrap();
    assert_eq!(descriptors[&b"short:".to_vec()].time_to_live, Some(60));
    for i in 0..=acked {
        let row = format!("row-{i:06}");
        let cells = client
            .get_row(TABLE.into(), row.clone().into_bytes(), no_attrs())
            .unwrap();
        assert_eq!(cells.len(), 1, "acknowledged {row} lost (acked up to {acked})");
        let values = row_values(&cells[0]);
        assert_eq!(values["cf:a"], format!("value {i}").as_bytes());
        assert_eq!(values["cf:b"], b"b");
    }
    // The TTL is stored, not only the cell: long expired by the wall clock.
    assert!(get(&mut client, "ttl", "cf:a").is_none());
    let raw = client
        .get_row_ts(TABLE.into(), "ttl".into(), 1_001, no_attrs())
        .unwrap();
    assert!(raw.is_empty(), "expired cells stay invisible after a restart");
}
