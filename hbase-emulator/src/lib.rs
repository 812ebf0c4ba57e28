//! An in-memory HBase Thrift1 server for tests and local development.
//!
//! It speaks the same wire protocol as HBase's Thrift1 gateway (the `Hbase`
//! service of `hbase-thrift`), reproduces the HBase behaviours a storage
//! backend relies on (versions, timestamps, per-cell and family TTLs, delete
//! markers, error types) and adds fault injection: latency, failed calls,
//! row access denied with a given message (as to a principal granted nothing),
//! dropped connections, and stopping / restarting on the same port.
//! In-memory by default; with [`EmulatorBuilder::data_dir`] every change is
//! written to a write-ahead log first and replayed on the next start, so the
//! data survives the process being killed.
//!
//! ```no_run
//! use std::time::Duration;
//! use hbase_emulator::Emulator;
//!
//! let emulator = Emulator::start("127.0.0.1:0").unwrap();
//! let addr = emulator.addr(); // point the client at this
//! emulator.set_latency(Duration::from_millis(5));
//! emulator.fail_next(1);
//! emulator.stop(); // server down, data kept
//! emulator.restart().unwrap(); // back on the same port
//! assert_eq!(emulator.addr(), addr);
//! ```

mod clock;
mod column;
mod dispatch;
mod error;
mod faults;
mod filter;
mod handler;
mod reads;
mod results;
mod scanner;
mod schema;
mod server;
mod store;
mod table;
mod wal;
mod wire;
mod writes;

pub use clock::{Clock, ManualClock, SystemClock};
pub use dispatch::CALLS;
pub use server::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_FRAME_BYTES, Emulator, EmulatorBuilder, EmulatorHandle, Protocol, Transport,
};
pub use wal::ReplayStats;
