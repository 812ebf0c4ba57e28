//! Scanners: ranges, columns, batching, filters, ids.

mod common;

use common::*;
use hbase_thrift::hbase::THbaseSyncClient;

fn keys(rows: &[hbase_thrift::hbase::TRowResult]) -> Vec<String> {
    rows.iter().map(row_key).collect()
}

/// Rows a..e with cf:a = row name, and cf:flag = "on" on b and d only.
fn fill(client: &mut Client) {
    create_table(client);
    for row in ["a", "b", "c", "d", "e"] {
        let mut mutations = vec![put("cf:a", row.as_bytes())];
        if row == "b" || row == "d" {
            mutations.push(put("cf:flag", b"on"));
        }
        mutate(client, row, mutations);
    }
    mutate(client, "c", vec![put("cf:flag", b"off")]);
}

#[test]
fn scans_every_row_in_order_in_chunks() {
    let (_emu, mut client) = start();
    fill(&mut client);
    assert_eq!(keys(&scan_all(&mut client, scan(), 2)), ["a", "b", "c", "d", "e"]);
    let id = client
        .scanner_open(TABLE.into(), "c".into(), vec![], no_attrs())
        .unwrap();
    assert_eq!(keys(&drain(&mut client, id, 1)), ["c", "d", "e"]);
    let id = client
        .scanner_open_with_stop(TABLE.into(), "b".into(), "d".into(), vec![], no_attrs())
        .unwrap();
    assert_eq!(keys(&drain(&mut client, id, 10)), ["b", "c"], "stop row excluded");
}

#[test]
fn start_stop_columns_and_reversed() {
    let (_emu, mut client) = start();
    fill(&mut client);
    let mut s = scan();
    s.start_row = Some(b"b".to_vec());
    s.stop_row = Some(b"e".to_vec());
    s.columns = Some(bytes(&["cf:flag"]));
    let rows = scan_all(&mut client, s, 10);
    assert_eq!(keys(&rows), ["b", "c", "d"]);
    assert_eq!(row_values(&rows[0]).into_keys().collect::<Vec<_>>(), ["cf:flag"]);

    let mut s = scan();
    s.reversed = Some(true);
    s.start_row = Some(b"d".to_vec());
    s.stop_row = Some(b"a".to_vec());
    assert_eq!(keys(&scan_all(&mut client, s, 2)), ["d", "c", "b"]);
}

#[test]
fn prefix_scans() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    for row in ["ab1", "ab2", "ac", "b"] {
        mutate(&mut client, row, vec![put("cf:a", b"1")]);
    }
    let id = client
        .scanner_open_with_prefix(TABLE.into(), "ab".into(), vec![], no_attrs())
        .unwrap();
    assert_eq!(keys(&drain(&mut client, id, 10)), ["ab1", "ab2"]);
    let mut s = scan();
    s.filter_string = Some(b"PrefixFilter('a')".to_vec());
    assert_eq!(keys(&scan_all(&mut client, s, 10)), ["ab1", "ab2", "ac"]);
}

#[test]
fn single_column_value_filter() {
    let (_emu, mut client) = start();
    fill(&mut client);
    let filtered = |client: &mut Client, filter: &str, columns: Option<&[&str]>| {
        let mut s = scan();
        s.filter_string = Some(filter.as_bytes().to_vec());
        s.columns = columns.map(bytes);
        keys(&scan_all(client, s, 10))
    };
    let strict = "SingleColumnValueFilter('cf','flag',=,'binary:on',true,true)";
    assert_eq!(filtered(&mut client, strict, None), ["b", "d"]);
    let lenient = "SingleColumnValueFilter('cf','flag',=,'binary:on',false,true)";
    assert_eq!(
        filtered(&mut client, lenient, None),
        ["a", "b", "d", "e"],
        "rows lacking it pass"
    );
    // The filter only sees columns the scan reads.
    assert!(filtered(&mut client, strict, Some(&["cf:a"])).is_empty());
    let combined = "PrefixFilter('d') AND SingleColumnValueFilter('cf','flag',=,'binary:on',true,true)";
    assert_eq!(filtered(&mut client, combined, None), ["d"]);
}

#[test]
fn unsupported_filters_are_refused() {
    let (_emu, mut client) = start();
    fill(&mut client);
    for filter in [
        "RowFilter(=,'binary:a')",
        "PrefixFilter('a'",
        "ValueFilter(=,'regexstring:.*')",
    ] {
        let mut s = scan();
        s.filter_string = Some(filter.as_bytes().to_vec());
        io_error(client.scanner_open_with_scan(TABLE.into(), s, no_attrs()));
    }
}

#[test]
fn batch_size_splits_rows_and_sort_columns_fills_sorted_columns() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let wide: Vec<_> = (0..5).map(|i| put(&format!("cf:q{i}"), b"v")).collect();
    mutate(&mut client, "wide", wide);
    mutate(&mut client, "z", vec![put("cf:q0", b"v")]);
    let mut s = scan();
    s.batch_size = Some(2);
    s.sort_columns = Some(true);
    let rows = scan_all(&mut client, s, 1);
    assert_eq!(keys(&rows), ["wide", "wide", "wide", "z"]);
    let sizes: Vec<_> = rows
        .iter()
        .map(|r| {
            assert_eq!(r.columns, None);
            r.sorted_columns.as_ref().unwrap().len()
        })
        .collect();
    assert_eq!(sizes, [2, 2, 1, 1]);
    let names: Vec<_> = rows[0]
        .sorted_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.column_name.clone().unwrap())
        .collect();
    assert_eq!(names, bytes(&["cf:q0", "cf:q1"]));
}

#[test]
fn scan_timestamp_reads_strictly_older_cells() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    mutate_ts(&mut client, "old", vec![put("cf:a", b"1")], 100);
    mutate_ts(&mut client, "new", vec![put("cf:a", b"1")], 200);
    let mut s = scan();
    s.timestamp = Some(200);
    assert_eq!(keys(&scan_all(&mut client, s, 10)), ["old"]);
    let id = client
        .scanner_open_ts(TABLE.into(), vec![], vec![], 201, no_attrs())
        .unwrap();
    assert_eq!(keys(&drain(&mut client, id, 10)), ["new", "old"]);
}

#[test]
fn unknown_scanner_ids_are_illegal_arguments() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    illegal_argument(client.scanner_get(42));
    illegal_argument(client.scanner_get_list(42, 10));
    illegal_argument(client.scanner_close(42));
    let id = client.scanner_open_with_scan(TABLE.into(), scan(), no_attrs()).unwrap();
    client.scanner_close(id).unwrap();
    illegal_argument(client.scanner_get(id));
}
