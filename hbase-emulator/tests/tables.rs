//! Table administration against a real Thrift client.

mod common;

use common::*;
use hbase_thrift::hbase::{ColumnDescriptor, THbaseSyncClient, TThriftServerType};

#[test]
fn create_list_and_describe() {
    let (_emu, mut client) = start();
    let mut snappy = family("d", 1, 3600);
    snappy.compression = Some("snappy".into());
    snappy.bloom_filter_type = Some("ROWCOL".into());
    client
        .create_table(TABLE.into(), vec![family("cf", 3, 0), snappy])
        .unwrap();
    assert_eq!(client.get_table_names().unwrap(), bytes(&[TABLE]));
    assert!(client.is_table_enabled(TABLE.into()).unwrap());

    let descriptors = client.get_column_descriptors(TABLE.into()).unwrap();
    let keys: Vec<_> = descriptors.keys().cloned().collect();
    assert_eq!(keys, bytes(&["cf:", "d:"]));
    let cf = &descriptors[&b"cf:".to_vec()];
    assert_eq!(cf.max_versions, Some(3));
    assert_eq!(cf.compression.as_deref(), Some("NONE"));
    assert_eq!(cf.time_to_live, Some(i32::MAX), "0 means forever");
    let d = &descriptors[&b"d:".to_vec()];
    assert_eq!(d.compression.as_deref(), Some("SNAPPY"));
    assert_eq!(d.bloom_filter_type.as_deref(), Some("ROWCOL"));
    assert_eq!(d.time_to_live, Some(3600));
}

#[test]
fn existing_table_is_already_exists() {
    let (_emu, mut client) = start();
    create_table(&mut client);
    let e = already_exists(client.create_table(TABLE.into(), vec![family("cf", 1, 0)]));
    assert!(e.message.unwrap().contains("already in use"));
}

#[test]
fn invalid_descriptors_are_illegal_arguments() {
    let (_emu, mut client) = start();
    let mut bad_compression = family("cf", 1, 0);
    bad_compression.compression = Some("FOO".into());
    let mut bad_bloom = family("cf", 1, 0);
    bad_bloom.bloom_filter_type = Some("row".into());
    let cases = [
        ("crate default", ColumnDescriptor::default()),
        ("zero versions", family("cf", 0, 0)),
        ("bad compression", bad_compression),
        ("bad bloom", bad_bloom),
        ("empty name", family("", 1, 0)),
    ];
    for (what, descriptor) in cases {
        illegal_argument(client.create_table(TABLE.into(), vec![descriptor]));
        assert!(client.get_table_names().unwrap().is_empty(), "{what}");
    }
    let dup = vec![family("cf", 1, 0), family("cf", 2, 0)];
    illegal_argument(client.create_table(TABLE.into(), dup));
    io_error(client.create_table(TABLE.into(), vec![]));
}

#[test]
fn unset_descriptor_fields_take_idl_defaults() {
    let (_emu, mut client) = start();
    let sparse = ColumnDescriptor::new(b"cf:".to_vec(), None, None, None, None, None, None, None, None);
    client.create_table(TABLE.into(), vec![sparse]).unwrap();
    let cf = &client.get_column_descriptors(TABLE.into()).unwrap()[&b"cf:".to_vec()];
    assert_eq!(cf.max_versions, Some(3));
    assert_eq!(cf.compression.as_deref(), Some("NONE"));
    assert_eq!(cf.bloom_filter_type.as_deref(), Some("NONE"));
    assert_eq!(cf.time_to_live, Some(i32::MAX));
}

#[test]
fn delete_needs_an_existing_disabled_table() {
    let (_emu, mut client) = start();
    io_error(client.delete_table("missing".into()));
    create_table(&mut client);
    assert!(message(&io_error(client.delete_table(TABLE.into()))).contains("TableNotDisabled"));
    io_error(client.enable_table(TABLE.into()));
    client.disable_table(TABLE.into()).unwrap();
    assert!(!client.is_table_enabled(TABLE.into()).unwrap());
    io_error(client.disable_table(TABLE.into()));
    let e = io_error(client.get_row(TABLE.into(), "r".into(), no_attrs()));
    assert!(message(&e).contains("TableNotEnabledException"));
    client.delete_table(TABLE.into()).unwrap();
    assert!(client.get_table_names().unwrap().is_empty());
    io_error(client.is_table_enabled(TABLE.into()));
}

#[test]
fn missing_table_is_an_io_error() {
    let (_emu, mut client) = start();
    let e = io_error(client.get(TABLE.into(), "r".into(), "cf:a".into(), no_attrs()));
    assert!(message(&e).contains("TableNotFoundException"));
    io_error(client.mutate_row(TABLE.into(), "r".into(), vec![put("cf:a", b"1")], no_attrs()));
    io_error(client.get_column_descriptors(TABLE.into()));
    // As in HBase, the scanner opens and its first get fails (hbase_differences.rs).
    let id = client.scanner_open_with_scan(TABLE.into(), scan(), no_attrs()).unwrap();
    io_error(client.scanner_get_list(id, 1));
}

#[test]
fn one_region_per_table() {
    let (emu, mut client) = start();
    assert!(client.get_table_regions(TABLE.into()).unwrap().is_empty());
    create_table(&mut client);
    let regions = client.get_table_regions(TABLE.into()).unwrap();
    assert_eq!(regions.len(), 1);
    assert_eq!(regions[0].start_key.as_deref(), Some(&b""[..]));
    assert_eq!(regions[0].end_key.as_deref(), Some(&b""[..]));
    assert_eq!(regions[0].port, Some(i32::from(emu.addr().port())));
}

#[test]
fn unsupported_calls_say_so() {
    let (_emu, mut client) = start();
    let e = io_error(client.get_region_info("r".into()));
    assert!(message(&e).contains("does not support"));
    assert_eq!(client.get_thrift_server_type().unwrap(), TThriftServerType::ONE);
}
