//! The listener: our own accept loop (thread per connection) so the server
//! can be stopped, restarted on the same port and have its connections cut,
//! which `thrift::server::TServer::listen` cannot do.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use thrift::protocol::{
    TBinaryInputProtocol, TBinaryOutputProtocol, TCompactInputProtocol, TCompactOutputProtocol, TInputProtocol,
    TOutputProtocol,
};
use thrift::transport::{TBufferedReadTransport, TBufferedWriteTransport, TFramedWriteTransport};

use crate::clock::{Clock, SystemClock};
use crate::dispatch::Dispatcher;
use crate::faults::Faults;
use crate::handler::Handler;
use crate::store::Store;
use crate::wal::ReplayStats;
use crate::wire::FramedReader;

/// How often an idle accept loop checks whether it was asked to stop.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// HBase's default `hbase.regionserver.thrift.framed.max_frame_size_in_mb`.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 2 * 1024 * 1024;

/// HBase's default `hbase.thrift.server.socket.read.timeout`: a connection
/// idle for this long is closed by the server.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Thrift transport (`hbase.regionserver.thrift.framed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    #[default]
    Buffered,
    Framed,
}

/// Thrift protocol (`hbase.regionserver.thrift.compact`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Binary,
    Compact,
}

/// Entry point: `Emulator::start(addr)` for the defaults (buffered, binary),
/// `Emulator::builder()` for anything else.
pub struct Emulator;

impl Emulator {
    pub fn start(addr: impl ToSocketAddrs) -> io::Result<EmulatorHandle> {
        Self::builder().start(addr)
    }

    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }
}

#[derive(Clone)]
pub struct EmulatorBuilder {
    transport: Transport,
    protocol: Protocol,
    latency: Duration,
    clock: Arc<dyn Clock>,
    max_frame_bytes: usize,
    idle_timeout: Option<Duration>,
    data_dir: Option<PathBuf>,
    fsync: bool,
}

impl Default for EmulatorBuilder {
    fn default() -> Self {
        Self {
            transport: Transport::Buffered,
            protocol: Protocol::Binary,
            latency: Duration::ZERO,
            clock: Arc::new(SystemClock),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            data_dir: None,
            fsync: false,
        }
    }
}

impl EmulatorBuilder {
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Delay added before serving each call (changeable later on the handle).
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Time source for stamping cells and expiring TTLs.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Largest frame the framed transport accepts before closing the connection.
    pub fn max_frame_bytes(mut self, bytes: usize) -> Self {
        self.max_frame_bytes = bytes;
        self
    }

    /// How long a connection may wait for the client's next bytes before the
    /// server closes it (`None`: never). Defaults to HBase's 60 s, which is
    /// what breaks idle pooled connections against a real server.
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Keeps the data in `dir` (created if needed) instead of memory only:
    /// every mutating call is appended to `dir/wal.log` before it is
    /// answered, and a start replays the log. Only one emulator at a time
    /// may use a directory. Default: in memory, lost with the process.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// With [`EmulatorBuilder::data_dir`]: also `fdatasync` every log
    /// record, to survive a machine crash and not just the process being
    /// killed. Default false.
    pub fn fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Replays the data directory's log, if any, then binds `addr` (port 0
    /// picks a free port) and starts serving. Errors: the address cannot be
    /// bound, or the log cannot be read or is corrupt (`InvalidData`; a
    /// torn last record is not an error, it is dropped).
    pub fn start(self, addr: impl ToSocketAddrs) -> io::Result<EmulatorHandle> {
        let (store, replayed) = match &self.data_dir {
            Some(dir) => {
                let (store, stats) = Store::open(dir, self.fsync)?;
                (store, Some(stats))
            }
            None => (Store::default(), None),
        };
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Mutex::new(store));
        let faults = Arc::new(Faults::new(self.latency));
        let handler = || Handler::new(store.clone(), self.clock.clone(), addr);
        let shared = Arc::new(Shared {
            dispatcher: Dispatcher::new(handler(), handler(), faults.clone()),
            connections: Connections::default(),
            transport: self.transport,
            protocol: self.protocol,
            max_frame_bytes: self.max_frame_bytes,
            idle_timeout: self.idle_timeout.filter(|t| !t.is_zero()),
        });
        let handle = EmulatorHandle {
            addr,
            shared,
            store,
            faults,
            clock: self.clock,
            listening: Mutex::new(None),
            replayed,
        };
        handle.listen_on(listener)?;
        Ok(handle)
    }
}

/// What connection threads share.
struct Shared {
    dispatcher: Dispatcher,
    connections: Connections,
    transport: Transport,
    protocol: Protocol,
    max_frame_bytes: usize,
    idle_timeout: Option<Duration>,
}

/// Live client sockets, kept so they can be shut down from outside.
#[derive(Default)]
struct Connections {
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, TcpStream>>,
}

impl Connections {
    fn live(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, stream: &TcpStream) -> io::Result<u64> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.live().insert(id, stream.try_clone()?);
        Ok(id)
    }

    fn unregister(&self, id: u64) {
        self.live().remove(&id);
    }

    /// Shutting a socket down wakes its thread's blocking read, which then
    /// ends the connection; the client sees EOF / connection reset.
    fn shutdown_all(&self) {
        for (_, stream) in self.live().drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

struct Listening {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

/// A running (or stopped) emulator. Dropping it stops the server.
pub struct EmulatorHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    store: Arc<Mutex<Store>>,
    faults: Arc<Faults>,
    clock: Arc<dyn Clock>,
    listening: Mutex<Option<Listening>>,
    replayed: Option<ReplayStats>,
}

impl EmulatorHandle {
    /// The bound address; it stays the same across `stop` / `restart`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// What the start replayed from the data directory (`None` in memory).
    pub fn replayed(&self) -> Option<ReplayStats> {
        self.replayed
    }

    pub fn set_latency(&self, latency: Duration) {
        self.faults.set_latency(latency);
    }

    pub fn latency(&self) -> Duration {
        self.faults.latency()
    }

    /// The next `n` calls (of any kind) answer with an `IOError` saying the
    /// failure was injected (`canRetry` true).
    pub fn fail_next(&self, n: u64) {
        self.faults.fail_next(n);
    }

    /// The next `n` calls of `method` (a Thrift method name such as
    /// `mutateRowsTs`) answer with an injected `IOError`; other calls pass.
    pub fn fail_calls(&self, method: &str, n: u64) {
        self.faults.fail_calls(method, n);
    }

    /// The next `n` calls of `method` wait `delay` before they are served
    /// (the call's effect comes after it): to land one replica's call
    /// after another replica's.
    pub fn delay_calls(&self, method: &str, n: u64, delay: Duration) {
        self.faults.delay_calls(method, n, delay);
    }

    /// While `message` is `Some`, every call that reads or writes rows
    /// answers an `IOError` with that message and `canRetry` false; the
    /// schema calls (`getTableNames`, `getColumnDescriptors`, ...) still
    /// answer. That is how HBase answers a principal that authenticates but
    /// is granted nothing, its message being the whole Java stack trace of
    /// an `AccessDeniedException`. `None` ends it.
    pub fn deny_row_access_with(&self, message: Option<&str>) {
        self.faults.deny_row_access_with(message.map(str::to_owned));
    }

    /// Shuts down every live client connection; the server keeps listening.
    pub fn drop_connections(&self) {
        self.shared.connections.shutdown_all();
    }

    /// Number of client connections currently open.
    pub fn connection_count(&self) -> usize {
        self.shared.connections.live().len()
    }

    /// Stops listening and drops every connection, like the Thrift server
    /// process going down. Tables and data are kept; open scanners are lost.
    pub fn stop(&self) {
        if let Some(listening) = self.listening().take() {
            listening.stop.store(true, Ordering::SeqCst);
            // Joining guarantees the port is closed and every accepted
            // connection is registered before they are shut down.
            let _ = listening.thread.join();
        }
        self.shared.connections.shutdown_all();
        self.store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drop_scanners();
    }

    /// Listens again on the same address, with the same data. A no-op when
    /// already listening.
    pub fn restart(&self) -> io::Result<()> {
        if self.is_listening() {
            return Ok(());
        }
        self.listen_on(TcpListener::bind(self.addr)?)
    }

    pub fn is_listening(&self) -> bool {
        self.listening().is_some()
    }

    /// Total Thrift calls received (injected failures included).
    pub fn call_count(&self) -> u64 {
        self.faults.total_calls()
    }

    /// Calls received for one Thrift method name, e.g. `"getRowsWithColumns"`.
    pub fn calls(&self, method: &str) -> u64 {
        self.faults.calls(method)
    }

    /// Every method called so far with its count.
    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        self.faults.call_counts()
    }

    pub fn reset_counts(&self) {
        self.faults.reset_counts();
    }

    /// Forgets every table and open scanner (with a data directory, the
    /// tables' deletion is logged like a `deleteTable`).
    pub fn clear_data(&self) {
        let mut store = self.store.lock().unwrap_or_else(PoisonError::into_inner);
        store.clear();
        // A failed write leaves the log refusing every later write, which
        // then reports it; there is no caller to tell here.
        let _ = store.commit();
    }

    fn listening(&self) -> MutexGuard<'_, Option<Listening>> {
        self.listening.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn listen_on(&self, listener: TcpListener) -> io::Result<()> {
        // Non-blocking so the loop can notice `stop` between accepts.
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            let shared = self.shared.clone();
            thread::Builder::new()
                .name(format!("hbase-emulator-accept-{}", self.addr.port()))
                .spawn(move || accept_loop(&listener, &stop, &shared))?
        };
        *self.listening() = Some(Listening { stop, thread });
        Ok(())
    }
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool, shared: &Arc<Shared>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _peer)) => {
                // A connection that cannot be set up is simply dropped.
                let _ = spawn_connection(stream, shared.clone());
            }
            // WouldBlock when idle; other errors (e.g. out of descriptors)
            // are transient for a listener, so wait and retry too.
            Err(_) => thread::sleep(ACCEPT_POLL),
        }
    }
}

fn spawn_connection(stream: TcpStream, shared: Arc<Shared>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    // A read that times out fails the call loop, which closes the connection.
    stream.set_read_timeout(shared.idle_timeout)?;
    let id = shared.connections.register(&stream)?;
    let spawned = thread::Builder::new().name("hbase-emulator-conn".into()).spawn({
        let shared = shared.clone();
        move || {
            let _ = serve_connection(stream, &shared);
            shared.connections.unregister(id);
        }
    });
    if let Err(e) = spawned {
        shared.connections.unregister(id);
        return Err(e);
    }
    Ok(())
}

type InputProtocol = Box<dyn TInputProtocol + Send>;
type OutputProtocol = Box<dyn TOutputProtocol + Send>;

fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    let (mut i_prot, mut o_prot) = protocols(stream, shared)?;
    // Ends on EOF, a shut-down socket or any protocol error, as the Java
    // server closes the connection on a broken stream.
    while shared.dispatcher.serve_call(&mut *i_prot, &mut *o_prot).is_ok() {}
    Ok(())
}

fn protocols(stream: TcpStream, shared: &Shared) -> io::Result<(InputProtocol, OutputProtocol)> {
    let reader = stream.try_clone()?;
    let writer = stream;
    // Binary like Java's default factory: lenient reads, strict writes.
    Ok(match (shared.transport, shared.protocol) {
        (Transport::Buffered, Protocol::Binary) => (
            Box::new(TBinaryInputProtocol::new(TBufferedReadTransport::new(reader), false)),
            Box::new(TBinaryOutputProtocol::new(TBufferedWriteTransport::new(writer), true)),
        ),
        (Transport::Buffered, Protocol::Compact) => (
            Box::new(TCompactInputProtocol::new(TBufferedReadTransport::new(reader))),
            Box::new(TCompactOutputProtocol::new(TBufferedWriteTransport::new(writer))),
        ),
        (Transport::Framed, Protocol::Binary) => (
            Box::new(TBinaryInputProtocol::new(
                FramedReader::new(reader, shared.max_frame_bytes),
                false,
            )),
            Box::new(TBinaryOutputProtocol::new(TFramedWriteTransport::new(writer), true)),
        ),
        (Transport::Framed, Protocol::Compact) => (
            Box::new(TCompactInputProtocol::new(FramedReader::new(
                reader,
                shared.max_frame_bytes,
            ))),
            Box::new(TCompactOutputProtocol::new(TFramedWriteTransport::new(writer))),
        ),
    })
}
