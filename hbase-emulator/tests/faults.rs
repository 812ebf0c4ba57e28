//! Fault injection, call accounting and the transport/protocol options.

mod common;

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use hbase_emulator::{Emulator, Protocol, Transport};
use hbase_thrift::hbase::THbaseSyncClient;

#[test]
fn counts_calls_per_method() {
    let (emu, mut client) = start();
    create_table(&mut client);
    emu.reset_counts();
    client.get_row(TABLE.into(), "r".into(), no_attrs()).unwrap();
    client.get_row(TABLE.into(), "r".into(), no_attrs()).unwrap();
    client
        .get_rows_with_columns(TABLE.into(), bytes(&["a", "b"]), bytes(&["cf:a"]), no_attrs())
        .unwrap();
    assert_eq!(emu.call_count(), 3);
    assert_eq!(emu.calls("getRow"), 2);
    assert_eq!(emu.calls("getRowsWithColumns"), 1);
    assert_eq!(emu.calls("mutateRows"), 0);
    assert_eq!(emu.call_counts().len(), 2);
    emu.reset_counts();
    assert_eq!(emu.call_count(), 0);
}

#[test]
fn latency_is_added_to_every_call() {
    let (emu, mut client) = start();
    emu.set_latency(Duration::from_millis(150));
    let started = Instant::now();
    client.get_table_names().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
    emu.set_latency(Duration::ZERO);
    let started = Instant::now();
    client.get_table_names().unwrap();
    assert!(started.elapsed() < Duration::from_millis(150));
}

#[test]
fn fail_next_injects_io_errors() {
    let (emu, mut client) = start();
    create_table(&mut client);
    emu.fail_next(2);
    let e = io_error(client.mutate_row(TABLE.into(), "r".into(), vec![put("cf:a", b"1")], no_attrs()));
    assert!(message(&e).contains("injected"));
    assert_eq!(e.can_retry, Some(true));
    io_error(client.get_table_names());
    assert!(
        get(&mut client, "r", "cf:a").is_none(),
        "the failed put was not applied"
    );
    mutate(&mut client, "r", vec![put("cf:a", b"1")]);
    assert!(get(&mut client, "r", "cf:a").is_some());
    assert_eq!(emu.calls("mutateRow"), 2, "failed calls are counted too");
}

#[test]
fn fail_next_answers_calls_with_binary_row_keys() {
    // Row keys are bytes, not UTF-8 (Solus prefixes a hash byte): the
    // injected failure must still be an IOError, not a dropped connection.
    let (emu, mut client) = start();
    create_table(&mut client);
    emu.fail_next(1);
    let e = io_error(client.mutate_row(
        TABLE.into(),
        vec![0xF7, 0xFF, b'r'],
        vec![put("cf:a", b"1")],
        no_attrs(),
    ));
    assert!(message(&e).contains("injected"));
    client
        .mutate_row(
            TABLE.into(),
            vec![0xF7, 0xFF, b'r'],
            vec![put("cf:a", b"1")],
            no_attrs(),
        )
        .unwrap();
    assert_eq!(emu.connection_count(), 1, "the same connection kept serving");
}

#[test]
fn drop_connections_cuts_clients_but_keeps_serving() {
    let (emu, mut client) = start();
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:a", b"1")]);
    assert_eq!(emu.connection_count(), 1);
    emu.drop_connections();
    assert!(client.get_table_names().is_err(), "old connection is dead");
    let mut fresh = connect(emu.addr());
    assert!(get(&mut fresh, "r", "cf:a").is_some());
}

#[test]
fn stop_and_restart_keep_data_and_port() {
    let (emu, mut client) = start();
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:a", b"1")]);
    let scanner = client.scanner_open_with_scan(TABLE.into(), scan(), no_attrs()).unwrap();
    let addr = emu.addr();

    emu.stop();
    assert!(!emu.is_listening());
    assert!(TcpStream::connect(addr).is_err(), "nothing listens while stopped");
    assert!(client.get_table_names().is_err(), "connections were dropped");

    emu.restart().unwrap();
    assert_eq!(emu.addr(), addr);
    let mut client = connect(addr);
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"1");
    illegal_argument(client.scanner_get(scanner)); // scanners die with the server
}

#[test]
fn dropping_the_handle_stops_the_server() {
    let emu = Emulator::start("127.0.0.1:0").unwrap();
    let addr = emu.addr();
    drop(emu);
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn framed_compact_server() {
    let emu = Emulator::builder()
        .transport(Transport::Framed)
        .protocol(Protocol::Compact)
        .start("127.0.0.1:0")
        .unwrap();
    let mut client = connect_with(emu.addr(), Transport::Framed, Protocol::Compact);
    create_table(&mut client);
    mutate(&mut client, "r", vec![put("cf:a", b"1")]);
    assert_eq!(value(&get(&mut client, "r", "cf:a").unwrap()), b"1");
    assert_eq!(scan_all(&mut client, scan(), 10).len(), 1);

    // A buffered/binary client is not understood (and does not hang).
    let mut wrong = connect(emu.addr());
    assert!(wrong.get_table_names().is_err());
}

#[test]
fn framed_transport_refuses_oversized_frames() {
    let emu = Emulator::builder()
        .transport(Transport::Framed)
        .max_frame_bytes(1024)
        .start("127.0.0.1:0")
        .unwrap();
    let mut client = connect_with(emu.addr(), Transport::Framed, Protocol::Binary);
    create_table(&mut client);
    let big = vec![b'x'; 4096];
    let result = client.mutate_row(TABLE.into(), "r".into(), vec![put("cf:a", &big)], no_attrs());
    assert!(matches!(result, Err(thrift::Error::Transport(_))), "{result:?}");
    let mut fresh = connect_with(emu.addr(), Transport::Framed, Protocol::Binary);
    assert!(get(&mut fresh, "r", "cf:a").is_none());
}

#[test]
fn many_concurrent_clients() {
    let (emu, mut client) = start();
    create_table(&mut client);
    let addr = emu.addr();
    let workers: Vec<_> = (0..8)
        .map(|w| {
            thread::spawn(move || {
                let mut client = connect(addr);
                for i in 0..50 {
                    mutate(&mut client, &format!("w{w}-{i}"), vec![put("cf:a", b"1")]);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(scan_all(&mut client, scan(), 100).len(), 400);
}

#[test]
fn idle_connections_are_closed_like_hbase_read_timeout() {
    let emu = Emulator::builder()
        .idle_timeout(Some(Duration::from_millis(200)))
        .start("127.0.0.1:0")
        .unwrap();
    let mut client = connect(emu.addr());
    client.get_table_names().unwrap();
    thread::sleep(Duration::from_millis(500));
    assert_eq!(emu.connection_count(), 0);
    assert!(client.get_table_names().is_err());
    connect(emu.addr()).get_table_names().unwrap();
}

#[test]
fn an_empty_mutation_list_never_touches_the_table() {
    let (_emu, mut client) = start();
    client
        .mutate_row("missing".into(), "r".into(), vec![], no_attrs())
        .unwrap();
    client
        .mutate_rows("missing".into(), vec![batch("r", vec![])], no_attrs())
        .unwrap();
}
