//! Differential test: one fixed script of Thrift1 calls - those Solus makes
//! plus edge cases - run against `hbase-emulator` and against real HBase;
//! every reply, error kind and cell (row, qualifier, value, timestamp) must
//! be the same. Error messages differ between the two and are not compared.
//! Each difference this found is listed in docs/hbase.md with the emulator
//! test named after it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use hbase_emulator::{Emulator, Transport};
use hbase_thrift::hbase::{
    BatchMutation, ColumnDescriptor, HbaseSyncClient, IOError, IllegalArgument, Mutation, THbaseSyncClient, TRowResult,
};
use solus::clock::now_ms;
use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol};
use thrift::transport::{ReadHalf, TFramedReadTransport, TFramedWriteTransport, TIoChannel, TTcpChannel, WriteHalf};

use crate::common::*;
use crate::hbase_shared::plain_scan;

const T: &str = "diff_t";

fn family(name: &str, versions: i32) -> ColumnDescriptor {
    ColumnDescriptor {
        name: Some(format!("{name}:").into_bytes()),
        max_versions: Some(versions),
        compression: Some("NONE".into()),
        in_memory: Some(false),
        bloom_filter_type: Some("NONE".into()),
        bloom_filter_vector_size: Some(0),
        bloom_filter_nb_hashes: Some(0),
        block_cache_enabled: Some(true),
        time_to_live: Some(-1),
    }
}

fn put(q: &str, v: &[u8]) -> Mutation {
    Mutation::new(false, format!("S:{q}").into_bytes(), v.to_vec(), true)
}

fn ttl_attr(ms: i64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    BTreeMap::from([(b"_ttl".to_vec(), ms.to_be_bytes().to_vec())])
}

/// An error as its kind only (messages differ between the two servers).
fn kind(e: &thrift::Error) -> String {
    match e {
        thrift::Error::User(u) if u.downcast_ref::<IOError>().is_some() => {
            let io = u.downcast_ref::<IOError>().unwrap();
            let message = io.message.clone().unwrap_or_default();
            // Batched failures: how many actions, and whether the cause is the bare table name.
            let detail = match message.split_once("Failed ") {
                Some((_, rest)) if message.contains("RetriesExhaustedWithDetailsException") => {
                    let first = rest.lines().next().unwrap_or_default();
                    let count: String = first.split(':').next().unwrap_or_default().into();
                    let cause = first.split(": ").nth(1).unwrap_or_default();
                    let cause = if cause.contains(' ') || cause.contains("Exception") {
                        exception_class(cause)
                    } else {
                        "<table name>".into()
                    };
                    format!(" ({count}: {cause})")
                }
                _ => String::new(),
            };
            format!("IOError {} retry={:?}{detail}", exception_class(&message), io.can_retry)
        }
        thrift::Error::User(u) if u.downcast_ref::<IllegalArgument>().is_some() => "IllegalArgument".into(),
        thrift::Error::User(u) if u.downcast_ref::<hbase_thrift::hbase::AlreadyExists>().is_some() => {
            "AlreadyExists".into()
        }
        thrift::Error::User(_) => "other user exception".into(),
        thrift::Error::Transport(_) | thrift::Error::Protocol(_) => "connection lost".into(),
        thrift::Error::Application(a) => format!("ApplicationError {:?}", a.kind),
    }
}

/// The first HBase exception class a message names (Solus decides on it,
/// e.g. `TableNotFoundException` for a missing table), or `-`.
fn exception_class(message: &str) -> String {
    message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
        .find(|w| w.ends_with("Exception"))
        .map(|w| w.rsplit('.').next().unwrap().to_string())
        .unwrap_or_else(|| "-".into())
}

/// Rows and their newest cells; timestamps relative to `base` (ms).
fn rows(result: thrift::Result<Vec<TRowResult>>, base: i64) -> String {
    match result {
        Err(e) => format!("Err({})", kind(&e)),
        Ok(rows) => {
            let mut out = String::new();
            for r in rows {
                let _ = write!(
                    out,
                    "[{}",
                    String::from_utf8_lossy(r.row.as_deref().unwrap_or_default())
                );
                for (col, cell) in r.columns.unwrap_or_default() {
                    let _ = write!(
                        out,
                        " {}={}@{}",
                        String::from_utf8_lossy(&col),
                        String::from_utf8_lossy(cell.value.as_deref().unwrap_or_default()),
                        stamp(cell.timestamp, base)
                    );
                }
                out.push(']');
            }
            if out.is_empty() { "(none)".into() } else { out }
        }
    }
}

/// A cell timestamp: the script's own ones relative to `base`; one the
/// server stamped itself (calls without a timestamp) as `server-time`.
fn stamp(ts: Option<i64>, base: i64) -> String {
    let Some(ts) = ts else { return "none".into() };
    let offset = ts - base;
    if [-60_000, -10_000, 0, 30_000, 60_000].contains(&offset) {
        format!("{offset:+}")
    } else if (now_ms() - ts).abs() < 300_000 {
        "server-time".into()
    } else {
        format!("{offset:+} (unexpected)")
    }
}

fn unit<T: std::fmt::Debug>(result: thrift::Result<T>) -> String {
    match result {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({})", kind(&e)),
    }
}

/// The script: one line of transcript per call.
fn script(raw: &mut RawClient, base: i64) -> Vec<String> {
    let mut t = Vec::new();
    let a = BTreeMap::new;
    let cols = |qs: &[&str]| qs.iter().map(|q| format!("S:{q}").into_bytes()).collect::<Vec<_>>();
    let bm = |row: &str, m: Vec<Mutation>| BatchMutation::new(row.as_bytes().to_vec(), m);

    t.push(format!(
        "create: {}",
        unit(raw.create_table(T.into(), vec![family("S", 1)]))
    ));
    t.push(format!(
        "create again: {}",
        unit(raw.create_table(T.into(), vec![family("S", 1)]))
    ));
    t.push(format!(
        "create versions 0: {}",
        unit(raw.create_table("diff_bad".into(), vec![family("S", 0)]))
    ));
    let names = raw.get_table_names().map(|n| {
        n.into_iter()
            .filter(|t| t.starts_with(b"diff_"))
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .collect::<Vec<_>>()
    });
    t.push(format!("table names: {}", unit(names)));
    let fam = raw.get_column_descriptors(T.into()).map(|m| {
        m.into_iter()
            .map(|(k, d)| {
                format!(
                    "{} versions={:?} compression={:?} bloom={:?} ttl={:?} in_memory={:?}",
                    String::from_utf8_lossy(&k),
                    d.max_versions,
                    d.compression,
                    d.bloom_filter_type,
                    d.time_to_live,
                    d.in_memory
                )
            })
            .collect::<Vec<_>>()
    });
    t.push(format!("descriptors: {}", unit(fam)));
    t.push(format!("is enabled: {}", unit(raw.is_table_enabled(T.into()))));

    // Timestamps in the future (Solus stamps cells with their expiry time).
    let get = |raw: &mut RawClient, row: &str, qs: &[&str]| {
        rows(raw.get_row_with_columns(T.into(), row.into(), cols(qs), a()), base)
    };
    let w = raw.mutate_rows_ts(T.into(), vec![bm("r1", vec![put("a", b"v1")])], base + 60_000, a());
    t.push(format!("put future ts: {}", unit(w)));
    t.push(format!("get future cell: {}", get(raw, "r1", &["a"])));
    let w = raw.mutate_rows_ts(T.into(), vec![bm("r1", vec![put("a", b"v0")])], base + 30_000, a());
    t.push(format!("put lower ts: {}", unit(w)));
    t.push(format!("highest ts wins (VERSIONS 1): {}", get(raw, "r1", &["a"])));
    let w = raw.mutate_rows_ts(T.into(), vec![bm("r1", vec![put("a", b"v2")])], base + 60_000, a());
    t.push(format!("put equal ts: {}", unit(w)));
    t.push(format!("equal ts, later write wins: {}", get(raw, "r1", &["a"])));
    let w = raw.mutate_rows_ts(T.into(), vec![bm("r2", vec![put("b", b"past")])], base - 60_000, a());
    t.push(format!("put past ts: {}", unit(w)));
    t.push(format!("get past cell: {}", get(raw, "r2", &["b"])));

    // Per-cell TTL (_ttl, ms, counted from the cell timestamp).
    let w = raw.mutate_rows_ts(
        T.into(),
        vec![bm("r3", vec![put("c", b"dead")])],
        base - 10_000,
        ttl_attr(5_000),
    );
    t.push(format!("put ts-10s ttl 5s: {}", unit(w)));
    let w = raw.mutate_rows_ts(
        T.into(),
        vec![bm("r3", vec![put("d", b"live")])],
        base,
        ttl_attr(600_000),
    );
    t.push(format!("put ts ttl 600s: {}", unit(w)));
    let w = raw.mutate_rows_ts(
        T.into(),
        vec![bm("r3", vec![put("e", b"later")])],
        base + 60_000,
        ttl_attr(1_000),
    );
    t.push(format!("put ts+60s ttl 1s: {}", unit(w)));
    t.push(format!("ttl cells: {}", get(raw, "r3", &["c", "d", "e"])));

    // Multi-row reads: absent rows skipped, missing columns left out, order kept.
    let multi = raw.get_rows_with_columns(
        T.into(),
        vec![b"r2".to_vec(), b"nope".to_vec(), b"r1".to_vec()],
        cols(&["a", "b", "zz"]),
        a(),
    );
    t.push(format!("getRowsWithColumns: {}", rows(multi, base)));
    t.push(format!("missing row: {}", get(raw, "nope", &["a"])));
    t.push(format!("missing column: {}", get(raw, "r1", &["zz"])));
    t.push(format!(
        "whole row: {}",
        rows(raw.get_row(T.into(), b"r1".to_vec(), a()), base)
    ));
    t.push(format!(
        "missing table get: {}",
        rows(raw.get_row("diff_none".into(), b"r1".to_vec(), a()), base)
    ));
    let w = raw.mutate_rows_ts("diff_none".into(), vec![bm("r1", vec![put("a", b"x")])], base, a());
    t.push(format!("missing table put: {}", unit(w)));
    let missing = raw.get_rows_with_columns("diff_none".into(), vec![b"r1".to_vec()], cols(&["a"]), a());
    t.push(format!("missing table getRowsWithColumns: {}", rows(missing, base)));
    match raw.scanner_open_with_scan("diff_none".into(), plain_scan(), a()) {
        Ok(id) => {
            t.push("missing table scan: opened".into());
            t.push(format!(
                "missing table scan, first get: {}",
                rows(raw.scanner_get_list(id, 1), base)
            ));
            t.push(format!("missing table scan, close: {}", unit(raw.scanner_close(id))));
        }
        Err(e) => t.push(format!("missing table scan: Err({})", kind(&e))),
    }
    t.push(format!(
        "missing table regions: {}",
        unit(raw.get_table_regions("diff_none".into()).map(|r| r.len()))
    ));
    t.push(format!(
        "regions: {}",
        unit(raw.get_table_regions(T.into()).map(|r| r.len()))
    ));
    t.push(format!(
        "missing table isTableEnabled: {}",
        unit(raw.is_table_enabled("diff_none".into()))
    ));
    t.push(format!(
        "missing table descriptors: {}",
        unit(raw.get_column_descriptors("diff_none".into()).map(|m| m.len()))
    ));
    let cp = raw.check_and_put(
        "diff_none".into(),
        b"r".to_vec(),
        b"S:a".to_vec(),
        vec![],
        put("a", b"x"),
        a(),
    );
    t.push(format!("missing table checkAndPut: {}", unit(cp)));
    let no_family = raw.mutate_rows_ts(
        T.into(),
        vec![bm(
            "r9",
            vec![Mutation::new(false, b"X:q".to_vec(), b"v".to_vec(), true)],
        )],
        base,
        a(),
    );
    t.push(format!("unknown family: {}", unit(no_family)));

    // Empty batches.
    t.push(format!(
        "empty mutateRows: {}",
        unit(raw.mutate_rows(T.into(), vec![], a()))
    ));
    t.push(format!(
        "empty mutateRowsTs: {}",
        unit(raw.mutate_rows_ts(T.into(), vec![], base, a()))
    ));
    t.push(format!(
        "empty getRowsWithColumns: {}",
        rows(raw.get_rows_with_columns(T.into(), vec![], cols(&["a"]), a()), base)
    ));

    // Deletes "as of now": future-stamped cells survive them.
    t.push(format!(
        "deleteAll future cell: {}",
        unit(raw.delete_all(T.into(), b"r1".to_vec(), b"S:a".to_vec(), a()))
    ));
    t.push(format!("after deleteAll: {}", get(raw, "r1", &["a"])));
    t.push(format!(
        "deleteAllRow past row: {}",
        unit(raw.delete_all_row(T.into(), b"r2".to_vec(), a()))
    ));
    t.push(format!("after deleteAllRow: {}", get(raw, "r2", &["b"])));
    let del = Mutation::new(true, b"S:d".to_vec(), vec![], true);
    t.push(format!(
        "delete mutation at ts: {}",
        unit(raw.mutate_row_ts(T.into(), b"r3".to_vec(), vec![del], base, a()))
    ));
    t.push(format!("after delete mutation: {}", get(raw, "r3", &["d", "e"])));

    // checkAndPut: an empty expected value matches an absent cell.
    let cp = |raw: &mut RawClient, expected: &[u8], value: &[u8]| {
        unit(raw.check_and_put(
            T.into(),
            b"r4".to_vec(),
            b"S:f".to_vec(),
            expected.to_vec(),
            put("f", value),
            a(),
        ))
    };
    t.push(format!("checkAndPut absent/empty: {}", cp(raw, b"", b"x")));
    t.push(format!("checkAndPut empty again: {}", cp(raw, b"", b"y")));
    t.push(format!("checkAndPut x->z: {}", cp(raw, b"x", b"z")));
    t.push(format!("checkAndPut x again: {}", cp(raw, b"x", b"w")));
    t.push(format!("after checkAndPut: {}", get(raw, "r4", &["f"])));

    // Meta-table writes and the active filter Solus lists dedupers with.
    let meta = |active: &[u8]| vec![put("name", b"x"), put("a", active)];
    t.push(format!(
        "mutateRow m1: {}",
        unit(raw.mutate_row(T.into(), b"m1".to_vec(), meta(&[0xFF]), a()))
    ));
    t.push(format!(
        "mutateRow m2: {}",
        unit(raw.mutate_row(T.into(), b"m2".to_vec(), meta(&[0x00]), a()))
    ));
    let mut filtered = plain_scan();
    filtered.columns = Some(cols(&["name", "a"]));
    let mut filter = b"SingleColumnValueFilter('S','a',!=,'binary:".to_vec();
    filter.push(0);
    filter.extend_from_slice(b"',true,true)");
    filtered.filter_string = Some(filter);
    filtered.caching = Some(100);
    match raw.scanner_open_with_scan(T.into(), filtered, a()) {
        Ok(id) => {
            t.push(format!(
                "active-filter scan: {}",
                rows(raw.scanner_get_list(id, 100), base)
            ));
            let _ = raw.scanner_close(id);
        }
        Err(e) => t.push(format!("active-filter scan: Err({})", kind(&e))),
    }

    // Scanners.
    let scan = raw.scanner_open_with_scan(T.into(), plain_scan(), a());
    match scan {
        Ok(id) => {
            t.push(format!("scan: {}", rows(raw.scanner_get_list(id, 100), base)));
            t.push(format!("scan end: {}", rows(raw.scanner_get_list(id, 100), base)));
            t.push(format!("scanner close: {}", unit(raw.scanner_close(id))));
        }
        Err(e) => t.push(format!("scan: Err({})", kind(&e))),
    }
    t.push(format!(
        "unknown scanner: {}",
        rows(raw.scanner_get_list(987_654, 1), base)
    ));

    t.push(format!("disable: {}", unit(raw.disable_table(T.into()))));
    t.push(format!("get on disabled: {}", get(raw, "r1", &["a"])));
    t.push(format!("delete: {}", unit(raw.delete_table(T.into()))));
    t.push(format!("delete missing: {}", unit(raw.delete_table(T.into()))));
    t
}

type Framed = HbaseSyncClient<
    TBinaryInputProtocol<TFramedReadTransport<ReadHalf<TTcpChannel>>>,
    TBinaryOutputProtocol<TFramedWriteTransport<WriteHalf<TTcpChannel>>>,
>;

fn framed_client(addr: SocketAddr) -> Framed {
    let mut channel = TTcpChannel::new();
    channel.open(addr).unwrap();
    let (r, w) = channel.split().unwrap();
    HbaseSyncClient::new(
        TBinaryInputProtocol::new(TFramedReadTransport::new(r), true),
        TBinaryOutputProtocol::new(TFramedWriteTransport::new(w), true),
    )
}

/// Framed transport: a frame over the server's 2 MB limit, then a fresh
/// connection.
fn frame_limit(addr: SocketAddr) -> Vec<String> {
    let mut t = Vec::new();
    let mut c = framed_client(addr);
    t.push(format!(
        "framed create: {}",
        unit(c.create_table("diff_f".into(), vec![family("S", 1)]))
    ));
    let small = c.mutate_rows(
        "diff_f".into(),
        vec![BatchMutation::new(b"r".to_vec(), vec![put("a", &[7u8; 1 << 20])])],
        BTreeMap::new(),
    );
    t.push(format!("1 MiB frame: {}", unit(small)));
    let big = c.mutate_rows(
        "diff_f".into(),
        vec![BatchMutation::new(b"r".to_vec(), vec![put("a", &[7u8; 3 << 20])])],
        BTreeMap::new(),
    );
    t.push(format!("3 MiB frame: {}", unit(big)));
    let mut c = framed_client(addr);
    let after = c.get_row("diff_f".into(), b"r".to_vec(), BTreeMap::new()).map(|r| {
        r.iter()
            .map(|r| {
                r.columns
                    .as_ref()
                    .map(|c| c.values().map(|v| v.value.as_ref().map(Vec::len)).collect::<Vec<_>>())
            })
            .collect::<Vec<_>>()
    });
    t.push(format!("new connection, value length: {}", unit(after)));
    let _ = c.disable_table("diff_f".into());
    let _ = c.delete_table("diff_f".into());
    t
}

fn compare(what: &str, emulator: &[String], real: &[String]) {
    let mut diffs = String::new();
    for (i, (e, r)) in emulator.iter().zip(real).enumerate() {
        if e != r {
            let _ = writeln!(diffs, "  step {i}\n    emulator: {e}\n    HBase:    {r}");
        }
    }
    if emulator.len() != real.len() {
        let _ = writeln!(
            diffs,
            "  {} steps on the emulator, {} on HBase",
            emulator.len(),
            real.len()
        );
    }
    eprintln!("{what}, real HBase transcript:\n  {}", real.join("\n  "));
    assert!(
        diffs.is_empty(),
        "{what}: the emulator differs from real HBase:\n{diffs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_answers_the_thrift_script_as_real_hbase_does() {
    let Some(b) = TestBackend::real_hbase() else { return };
    let base = now_ms();
    let emulator = Emulator::start("127.0.0.1:0").unwrap();
    let on_emulator = script(&mut connect_raw(emulator.addr()), base);
    let on_hbase = script(&mut b.raw_thrift(), base);
    compare("buffered transport", &on_emulator, &on_hbase);

    let (real, _) = b.real.clone().unwrap();
    let Some(framed) = real.framed else {
        panic!("the real HBase has no framed Thrift server (standalone.sh start DIR PORT FRAMED_PORT)")
    };
    let emulator = Emulator::builder()
        .transport(Transport::Framed)
        .start("127.0.0.1:0")
        .unwrap();
    compare("framed transport", &frame_limit(emulator.addr()), &frame_limit(framed));
}
