//! Behaviours where the emulator differed from real HBase 2.6 until the
//! differential test (`tests/real_cases/differential.rs` in Solus) showed it;
//! one test each, named after the difference (list in docs/hbase.md).

mod common;

use common::*;
use hbase_thrift::hbase::{IOError, THbaseSyncClient};

fn io_error<T: std::fmt::Debug>(r: thrift::Result<T>) -> IOError {
    match r {
        Err(thrift::Error::User(u)) => u.downcast_ref::<IOError>().expect("an IOError").clone(),
        other => panic!("expected an IOError, got {other:?}"),
    }
}

#[test]
fn batched_puts_on_a_missing_table_fail_as_retries_exhausted_naming_the_table() {
    let (_emu, mut client) = start();
    let one = io_error(client.mutate_rows_ts("gone".into(), vec![batch("r", vec![put("cf:a", b"v")])], 5, no_attrs()));
    assert!(
        one.message.as_deref().unwrap().starts_with(
            "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException: Failed 1 action: gone: 1 time, \
             servers with issues: null"
        ),
        "{one:?}"
    );
    assert_eq!(one.can_retry, Some(true));
    let rows = (0..3)
        .map(|i| batch(&format!("r{i}"), vec![put("cf:a", b"v")]))
        .collect();
    let three = io_error(client.mutate_rows("gone".into(), rows, no_attrs()));
    assert!(
        three
            .message
            .as_deref()
            .unwrap()
            .contains("Failed 3 actions: gone: 3 times"),
        "{three:?}"
    );
    // A single-row mutation still says TableNotFoundException, as HBase does.
    let single = io_error(client.mutate_row("gone".into(), b"r".to_vec(), vec![put("cf:a", b"v")], no_attrs()));
    assert!(
        single
            .message
            .as_deref()
            .unwrap()
            .starts_with("org.apache.hadoop.hbase.TableNotFoundException: gone")
    );
}

#[test]
fn a_scanner_on_a_missing_table_opens_and_its_first_get_fails() {
    let (_emu, mut client) = start();
    let id = client
        .scanner_open_with_scan("gone".into(), scan(), no_attrs())
        .expect("opens, as in HBase");
    let e = io_error(client.scanner_get_list(id, 1));
    assert!(
        e.message
            .as_deref()
            .unwrap()
            .starts_with("org.apache.hadoop.hbase.TableNotFoundException: gone")
    );
    assert_eq!(e.can_retry, Some(false));
    client.scanner_close(id).unwrap();
}

#[test]
fn failed_batch_actions_and_deleting_a_missing_table_are_retryable() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let family = io_error(client.mutate_rows(TABLE.into(), vec![batch("r", vec![put("nope:a", b"v")])], no_attrs()));
    assert!(
        family.message.as_deref().unwrap().contains("Failed 1 action: "),
        "{family:?}"
    );
    assert_eq!(
        family.can_retry,
        Some(true),
        "RetriesExhaustedWithDetailsException is not a DoNotRetry one"
    );
    let missing = io_error(client.delete_table("gone".into()));
    assert_eq!(missing.can_retry, Some(true), "a plain IOException");
}
