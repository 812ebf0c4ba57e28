//! Helpers shared by the integration tests: a real Thrift client over TCP
//! and small builders for HBase arguments.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use hbase_emulator::{Emulator, EmulatorHandle, ManualClock, Protocol, Transport};
use hbase_thrift::hbase::{
    AlreadyExists, BatchMutation, ColumnDescriptor, HbaseSyncClient, IOError, IllegalArgument, Mutation, TCell,
    THbaseSyncClient, TRowResult, TScan,
};
use thrift::protocol::{
    TBinaryInputProtocol, TBinaryOutputProtocol, TCompactInputProtocol, TCompactOutputProtocol, TInputProtocol,
    TOutputProtocol,
};
use thrift::transport::{
    TBufferedReadTransport, TBufferedWriteTransport, TFramedReadTransport, TFramedWriteTransport, TIoChannel,
    TTcpChannel,
};

pub type Client = HbaseSyncClient<Box<dyn TInputProtocol + Send>, Box<dyn TOutputProtocol + Send>>;
pub type Attrs = BTreeMap<Vec<u8>, Vec<u8>>;

pub const TABLE: &str = "t";

/// Buffered transport, binary protocol: HBase's defaults.
pub fn connect(addr: SocketAddr) -> Client {
    connect_with(addr, Transport::Buffered, Protocol::Binary)
}

pub fn try_connect(addr: SocketAddr, transport: Transport, protocol: Protocol) -> thrift::Result<Client> {
    let mut channel = TTcpChannel::new();
    channel.open(addr)?;
    let (reader, writer) = channel.split()?;
    let (i_prot, o_prot): (Box<dyn TInputProtocol + Send>, Box<dyn TOutputProtocol + Send>) =
        match (transport, protocol) {
            (Transport::Buffered, Protocol::Binary) => (
                Box::new(TBinaryInputProtocol::new(TBufferedReadTransport::new(reader), true)),
                Box::new(TBinaryOutputProtocol::new(TBufferedWriteTransport::new(writer), true)),
            ),
            (Transport::Buffered, Protocol::Compact) => (
                Box::new(TCompactInputProtocol::new(TBufferedReadTransport::new(reader))),
                Box::new(TCompactOutputProtocol::new(TBufferedWriteTransport::new(writer))),
            ),
            (Transport::Framed, Protocol::Binary) => (
                Box::new(TBinaryInputProtocol::new(TFramedReadTransport::new(reader), true)),
                Box::new(TBinaryOutputProtocol::new(TFramedWriteTransport::new(writer), true)),
            ),
            (Transport::Framed, Protocol::Compact) => (
                Box::new(TCompactInputProtocol::new(TFramedReadTransport::new(reader))),
                Box::new(TCompactOutputProtocol::new(TFramedWriteTransport::new(writer))),
            ),
        };
    Ok(HbaseSyncClient::new(i_prot, o_prot))
}

pub fn connect_with(addr: SocketAddr, transport: Transport, protocol: Protocol) -> Client {
    try_connect(addr, transport, protocol).expect("connect to the emulator")
}

/// An emulator on a free port with a manual clock, plus a connected client.
pub fn start_manual() -> (EmulatorHandle, Arc<ManualClock>, Client) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let emulator = Emulator::builder().clock(clock.clone()).start("127.0.0.1:0").unwrap();
    let client = connect(emulator.addr());
    (emulator, clock, client)
}

/// An emulator on a free port with the real clock, plus a connected client.
pub fn start() -> (EmulatorHandle, Client) {
    let emulator = Emulator::start("127.0.0.1:0").unwrap();
    let client = connect(emulator.addr());
    (emulator, client)
}

/// A fully specified family (the crate's `Default` would be rejected).
pub fn family(name: &str, max_versions: i32, ttl_secs: i32) -> ColumnDescriptor {
    ColumnDescriptor::new(
        format!("{name}:").into_bytes(),
        max_versions,
        "NONE".to_owned(),
        false,
        "ROW".to_owned(),
        0,
        0,
        true,
        ttl_secs,
    )
}

/// Creates `TABLE` with family `cf` (3 versions, no TTL).
pub fn create_table(client: &mut Client) {
    client.create_table(TABLE.into(), vec![family("cf", 3, 0)]).unwrap();
}

pub fn put(column: &str, value: &[u8]) -> Mutation {
    Mutation::new(false, column.as_bytes().to_vec(), value.to_vec(), true)
}

pub fn delete(column: &str) -> Mutation {
    Mutation::new(true, column.as_bytes().to_vec(), None, true)
}

pub fn batch(row: &str, mutations: Vec<Mutation>) -> BatchMutation {
    BatchMutation::new(row.as_bytes().to_vec(), mutations)
}

pub fn no_attrs() -> Attrs {
    BTreeMap::new()
}

/// The `_ttl` attribute, as Java's `Mutation.setTTL(ms)` writes it.
pub fn ttl_attrs(ttl_ms: i64) -> Attrs {
    BTreeMap::from([(b"_ttl".to_vec(), ttl_ms.to_be_bytes().to_vec())])
}

pub fn bytes(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

pub fn mutate(client: &mut Client, row: &str, mutations: Vec<Mutation>) {
    client
        .mutate_row(TABLE.into(), row.into(), mutations, no_attrs())
        .unwrap();
}

pub fn mutate_ts(client: &mut Client, row: &str, mutations: Vec<Mutation>, ts: i64) {
    client
        .mutate_row_ts(TABLE.into(), row.into(), mutations, ts, no_attrs())
        .unwrap();
}

/// The newest value of one column, via `get`.
pub fn get(client: &mut Client, row: &str, column: &str) -> Option<TCell> {
    let cells = client.get(TABLE.into(), row.into(), column.into(), no_attrs()).unwrap();
    assert!(cells.len() <= 1, "get returns at most one cell: {cells:?}");
    cells.into_iter().next()
}

pub fn value(cell: &TCell) -> &[u8] {
    cell.value.as_deref().unwrap_or_default()
}

/// `family:qualifier -> value` of a row result.
pub fn row_values(result: &TRowResult) -> BTreeMap<String, Vec<u8>> {
    result
        .columns
        .as_ref()
        .expect("columns map")
        .iter()
        .map(|(k, c)| (String::from_utf8_lossy(k).into_owned(), value(c).to_vec()))
        .collect()
}

pub fn row_key(result: &TRowResult) -> String {
    String::from_utf8_lossy(result.row.as_deref().unwrap_or_default()).into_owned()
}

/// A scan with only the given fields set (never `TScan::default()`).
pub fn scan() -> TScan {
    TScan::new(None, None, None, None, None, None, None, None, None, None)
}

/// Opens a scanner and drains it `chunk` rows at a time.
pub fn scan_all(client: &mut Client, scan: TScan, chunk: i32) -> Vec<TRowResult> {
    let id = client.scanner_open_with_scan(TABLE.into(), scan, no_attrs()).unwrap();
    drain(client, id, chunk)
}

pub fn drain(client: &mut Client, id: i32, chunk: i32) -> Vec<TRowResult> {
    let mut out = Vec::new();
    loop {
        let rows = client.scanner_get_list(id, chunk).unwrap();
        if rows.is_empty() {
            break;
        }
        out.extend(rows);
    }
    client.scanner_close(id).unwrap();
    out
}

fn user_error<T: std::error::Error + 'static>(error: thrift::Error) -> T {
    match error {
        thrift::Error::User(user) => match user.downcast::<T>() {
            Ok(e) => *e,
            Err(other) => panic!("wrong exception type: {other:?}"),
        },
        other => panic!("expected an HBase exception, got {other:?}"),
    }
}

pub fn io_error<T: std::fmt::Debug>(result: thrift::Result<T>) -> IOError {
    user_error(result.expect_err("expected IOError"))
}

pub fn illegal_argument<T: std::fmt::Debug>(result: thrift::Result<T>) -> IllegalArgument {
    user_error(result.expect_err("expected IllegalArgument"))
}

pub fn already_exists<T: std::fmt::Debug>(result: thrift::Result<T>) -> AlreadyExists {
    user_error(result.expect_err("expected AlreadyExists"))
}

pub fn message(e: &IOError) -> &str {
    e.message.as_deref().unwrap_or_default()
}
