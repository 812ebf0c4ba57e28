//! Pooled Thrift connections to HBase, and the one place calls are made:
//! connect/socket timeouts, broken-connection replacement, retries with
//! backoff, and the mapping of Thrift failures to [`HbaseError`].
//!
//! The pool is `r2d2` with our own connection manager rather than
//! `thrift-pool`'s: that one connects without a timeout to one address and
//! sets no socket timeouts, so a hung HBase would hang every caller.
//!
//! A connection is dropped instead of reused when a call on it failed below
//! the HBase level (transport, protocol or application error: the stream may
//! be out of step), and when a check on checkout - a non-blocking `peek` of
//! the socket, no Thrift call - finds it closed by the server. Such a failure
//! usually means the server went away or cut every connection, and a FIN
//! can still be in flight when the next checkout peeks: so the failure also
//! retires every connection opened before it (a generation counter), and the
//! retry starts on a fresh one.
//!
//! With `storage.hbase.kerberos.enabled` every new connection is
//! authenticated (SASL/GSSAPI, `kerberos.rs`) before it joins the pool, and
//! connections older than `max_connection_age_seconds` are refused on
//! checkout and re-opened, which bounds how long revoked credentials work.

use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{AlreadyExists, HbaseSyncClient, IOError, IllegalArgument};
use thrift::protocol::{
    TBinaryInputProtocol, TBinaryOutputProtocol, TCompactInputProtocol, TCompactOutputProtocol, TInputProtocol,
    TOutputProtocol,
};
use thrift::transport::{
    TBufferedReadTransport, TBufferedWriteTransport, TFramedReadTransport, TFramedWriteTransport, TIoChannel,
    TTcpChannel,
};

use super::config::{HbaseConfig, Protocol, Transport};
use super::java_error::summary;
use super::kerberos::Kerberos;
use crate::storage::{StorageError, caller};

/// A call skipped because the caller of the request has gone (see
/// `storage::caller`).
fn caller_left() -> HbaseError {
    HbaseError::Connection("call not made: the request's caller left (deadline passed or cancelled)".into())
}

/// The generated client over whichever transport and protocol are configured.
pub type Client = HbaseSyncClient<Box<dyn TInputProtocol + Send>, Box<dyn TOutputProtocol + Send>>;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HbaseError {
    /// No connection could be had, or it failed mid-call (I/O error,
    /// garbled answer). Retryable.
    Connection(String),
    /// No answer within the socket timeout. Retried once at most: HBase is
    /// likely still working on the call, and repeating it again and again
    /// would only add to the load that made it slow.
    TimedOut(String),
    /// HBase answered `IOError`; `retry` is its `canRetry` flag.
    Io { message: String, retry: bool },
    /// HBase answered `IllegalArgument`.
    IllegalArgument(String),
    /// HBase answered `AlreadyExists` (`createTable`).
    AlreadyExists(String),
}

impl HbaseError {
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            HbaseError::Connection(_) | HbaseError::TimedOut(_) | HbaseError::Io { retry: true, .. }
        )
    }

    /// Whether HBase said `table` does not exist: a `TableNotFoundException`,
    /// or the form real HBase gives batched writes (`mutateRows*` go through
    /// `HTable.put(List)`): `RetriesExhaustedWithDetailsException: Failed N
    /// actions: <table>: N times, servers with issues: null`, where the
    /// cause's message is the bare table name (found by the differential
    /// test against HBase 2.6, `tests/real_cases/differential.rs`).
    pub fn is_table_not_found(&self, table: &str) -> bool {
        let HbaseError::Io { message, .. } = self else {
            return false;
        };
        message.contains("TableNotFoundException")
            || (message.contains("RetriesExhaustedWithDetailsException")
                && [format!(" action: {table}: "), format!(" actions: {table}: ")]
                    .iter()
                    .any(|form| message.contains(form.as_str())))
    }

    /// The error as the engine sees it: always `Unavailable`, with the call
    /// that failed (`what`) and HBase's message.
    pub fn into_storage(self, what: &str) -> StorageError {
        let detail = match self {
            HbaseError::Connection(m) | HbaseError::TimedOut(m) => m,
            HbaseError::Io { message, .. } => format!("HBase IOError: {message}"),
            HbaseError::IllegalArgument(m) => format!("HBase IllegalArgument: {m}"),
            HbaseError::AlreadyExists(m) => format!("HBase AlreadyExists: {m}"),
        };
        StorageError::Unavailable(format!("HBase {what} failed: {detail}"))
    }
}

/// The socket timeouts, to name them when one expires.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    read_ms: u64,
    /// This call's own read timeout, when it was scaled with its size.
    scaled_read_ms: Option<u64>,
    write_ms: u64,
    /// Appended to a timeout's message (see `Pool::timeout_hint`).
    hint: &'static str,
}

/// Whether a transport error is a socket timeout. The `thrift` crate keeps
/// only the message of the I/O error: a timeout is `TimedOut`, or on Unix a
/// `WouldBlock` ("Resource temporarily unavailable", EAGAIN), which is what
/// a blocking socket read or write returns when its timeout expires.
fn is_timeout(t: &thrift::TransportError) -> bool {
    if t.kind == thrift::TransportErrorKind::TimedOut {
        return true;
    }
    let m = t.message.to_ascii_lowercase();
    ["resource temporarily unavailable", "would block", "timed out"]
        .iter()
        .any(|s| m.contains(s))
}

/// Maps a Thrift error; `broken` is set when the connection must not be
/// reused. HBase's texts are shortened to their first line(s) (a Java stack
/// trace otherwise, see `java_error.rs`), for the log and the caller alike.
fn classify(e: thrift::Error, peer: SocketAddr, timeouts: Timeouts, broken: &mut bool) -> HbaseError {
    match e {
        thrift::Error::User(u) => {
            if let Some(io) = u.downcast_ref::<IOError>() {
                return HbaseError::Io {
                    message: summary(io.message.as_deref().unwrap_or_default()),
                    retry: io.can_retry.unwrap_or(false),
                };
            }
            if let Some(ia) = u.downcast_ref::<IllegalArgument>() {
                return HbaseError::IllegalArgument(summary(ia.message.as_deref().unwrap_or_default()));
            }
            if let Some(ae) = u.downcast_ref::<AlreadyExists>() {
                return HbaseError::AlreadyExists(summary(ae.message.as_deref().unwrap_or_default()));
            }
            *broken = true;
            HbaseError::Connection(format!("unexpected answer from {peer}: {}", summary(&u.to_string())))
        }
        // The Display of these errors shows only their kind: add the message.
        thrift::Error::Application(a) => {
            *broken = true;
            HbaseError::Connection(format!(
                "Thrift application error from {peer}: {:?}: {}",
                a.kind,
                summary(&a.message)
            ))
        }
        thrift::Error::Transport(t) if is_timeout(&t) => {
            *broken = true;
            let within = match timeouts.scaled_read_ms {
                Some(ms) => format!(
                    "{ms} ms (storage.hbase.read_timeout_ms = {} ms plus {} ms per cell written)",
                    timeouts.read_ms,
                    super::data::WRITE_MS_PER_CELL
                ),
                None => format!("storage.hbase.read_timeout_ms = {} ms", timeouts.read_ms),
            };
            HbaseError::TimedOut(format!(
                "call to {peer} timed out: no answer within {within} \
                 (or the request not sent within write_timeout_ms = {} ms) ({}){}",
                timeouts.write_ms, t.message, timeouts.hint
            ))
        }
        thrift::Error::Transport(t) => {
            *broken = true;
            HbaseError::Connection(format!("connection to {peer}: {:?}: {}", t.kind, t.message))
        }
        thrift::Error::Protocol(p) => {
            *broken = true;
            HbaseError::Connection(format!("garbled answer from {peer}: {:?}: {}", p.kind, p.message))
        }
    }
}

/// One pooled connection.
pub struct Conn {
    pub client: Client,
    /// A handle on the same socket, to check liveness without a Thrift call.
    socket: TcpStream,
    peer: SocketAddr,
    broken: bool,
    /// The pool generation when it was opened; older ones are retired.
    generation: u64,
    opened: Instant,
}

impl Conn {
    /// Whether the server closed the socket (or left unread bytes on it,
    /// which would desynchronise the next call): a non-blocking `peek`.
    fn check_open(&self) -> io::Result<()> {
        self.socket.set_nonblocking(true)?;
        let peeked = self.socket.peek(&mut [0u8; 1]);
        self.socket.set_nonblocking(false)?;
        match peeked {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Ok(0) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, "closed by the server")),
            Ok(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "unexpected bytes waiting")),
            Err(e) => Err(e),
        }
    }
}

/// Opens connections for r2d2 and remembers whether the last attempt failed.
struct Manager {
    config: HbaseConfig,
    next: AtomicUsize,
    /// The last connect error, cleared by a successful connect: lets callers
    /// fail fast while HBase is unreachable instead of waiting out the pool.
    down: Arc<Mutex<Option<String>>>,
    /// Bumped by every connection-level failure (see the module docs).
    generation: Arc<AtomicU64>,
    /// SASL/GSSAPI on every connection, when enabled.
    kerberos: Option<Arc<Kerberos>>,
    /// `max_connection_age_seconds`; `None` = no limit.
    max_age: Option<Duration>,
}

type Halves = (Box<dyn TInputProtocol + Send>, Box<dyn TOutputProtocol + Send>);

/// The protocol over SASL's halves, which buffer themselves (a frame each way).
fn over_sasl<R, W>(protocol: Protocol, r: R, w: W) -> Halves
where
    R: io::Read + Send + 'static,
    W: io::Write + Send + 'static,
{
    match protocol {
        Protocol::Binary => (
            Box::new(TBinaryInputProtocol::new(r, true)),
            Box::new(TBinaryOutputProtocol::new(w, true)),
        ),
        Protocol::Compact => (
            Box::new(TCompactInputProtocol::new(r)),
            Box::new(TCompactOutputProtocol::new(w)),
        ),
    }
}

impl Manager {
    /// Opens (and with Kerberos authenticates) a connection to `addr`,
    /// configured as `address`.
    fn open(&self, addr: SocketAddr, address: &str) -> io::Result<Conn> {
        let c = &self.config;
        let stream = TcpStream::connect_timeout(&addr, Duration::from_millis(c.connect_timeout_ms))?;
        stream.set_read_timeout(Some(Duration::from_millis(c.read_timeout_ms)))?;
        stream.set_write_timeout(Some(Duration::from_millis(c.write_timeout_ms)))?;
        stream.set_nodelay(true)?;
        let socket = stream.try_clone()?;
        if let Some(k) = &self.kerberos {
            // Framed + Kerberos was refused by validation (HBase has no SASL there).
            let (r, w) = k.handshake(&stream, address, addr)?;
            let (input, output) = over_sasl(c.protocol, r, w);
            return Ok(self.conn(input, output, socket, addr));
        }
        let (r, w) = TTcpChannel::with_stream(stream).split().map_err(io::Error::other)?;
        let (input, output): Halves = match (c.transport, c.protocol) {
            (Transport::Buffered, Protocol::Binary) => (
                Box::new(TBinaryInputProtocol::new(TBufferedReadTransport::new(r), true)),
                Box::new(TBinaryOutputProtocol::new(TBufferedWriteTransport::new(w), true)),
            ),
            (Transport::Framed, Protocol::Binary) => (
                Box::new(TBinaryInputProtocol::new(TFramedReadTransport::new(r), true)),
                Box::new(TBinaryOutputProtocol::new(TFramedWriteTransport::new(w), true)),
            ),
            (Transport::Buffered, Protocol::Compact) => (
                Box::new(TCompactInputProtocol::new(TBufferedReadTransport::new(r))),
                Box::new(TCompactOutputProtocol::new(TBufferedWriteTransport::new(w))),
            ),
            (Transport::Framed, Protocol::Compact) => (
                Box::new(TCompactInputProtocol::new(TFramedReadTransport::new(r))),
                Box::new(TCompactOutputProtocol::new(TFramedWriteTransport::new(w))),
            ),
        };
        Ok(self.conn(input, output, socket, addr))
    }

    fn conn(
        &self,
        input: Box<dyn TInputProtocol + Send>,
        output: Box<dyn TOutputProtocol + Send>,
        socket: TcpStream,
        peer: SocketAddr,
    ) -> Conn {
        Conn {
            client: HbaseSyncClient::new(input, output),
            socket,
            peer,
            broken: false,
            generation: self.generation.load(Ordering::SeqCst),
            opened: Instant::now(),
        }
    }

    fn too_old(&self, conn: &Conn) -> bool {
        self.max_age.is_some_and(|age| conn.opened.elapsed() >= age)
    }

    /// Tries every configured address once, starting from a rotating one so
    /// connections spread over several Thrift servers.
    fn connect_any(&self) -> io::Result<Conn> {
        let addresses = &self.config.addresses;
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut errors = Vec::new();
        for i in 0..addresses.len() {
            let name = &addresses[(start + i) % addresses.len()];
            let resolved = match name.to_socket_addrs() {
                Ok(r) => r,
                Err(e) => {
                    errors.push(format!("{name}: {e}"));
                    continue;
                }
            };
            for addr in resolved {
                match self.open(addr, name) {
                    Ok(c) => return Ok(c),
                    Err(e) => errors.push(format!("{name} ({addr}): {e}")),
                }
            }
        }
        Err(io::Error::new(io::ErrorKind::NotConnected, errors.join("; ")))
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = io::Error;

    fn connect(&self) -> io::Result<Conn> {
        let result = self.connect_any();
        *self.down.lock().unwrap_or_else(|p| p.into_inner()) = result.as_ref().err().map(|e| e.to_string());
        result
    }

    fn is_valid(&self, conn: &mut Conn) -> io::Result<()> {
        if conn.generation < self.generation.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "retired after a connection failure",
            ));
        }
        if self.too_old(conn) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "older than storage.hbase.max_connection_age_seconds",
            ));
        }
        conn.check_open()
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || conn.generation < self.generation.load(Ordering::SeqCst) || self.too_old(conn)
    }
}

/// r2d2 logs through the `log` crate at error level on every failed connect
/// attempt; we report failures on the calls instead.
#[derive(Debug)]
struct QuietErrors;

impl r2d2::HandleError<io::Error> for QuietErrors {
    fn handle_error(&self, error: io::Error) {
        tracing::debug!(%error, "HBase connection not opened or not reused");
    }
}

/// Whether a call may be repeated after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Same effect when repeated: retried within the budget.
    Idempotent,
    /// Made once.
    Once,
}

/// The connection pool plus the retry policy.
pub struct Pool {
    pool: r2d2::Pool<Manager>,
    down: Arc<Mutex<Option<String>>>,
    generation: Arc<AtomicU64>,
    checkout_timeout: Duration,
    /// The wait when every connection is open and busy.
    busy_timeout: Duration,
    retries: u32,
    backoff: Duration,
    addresses: String,
    timeouts: Timeouts,
    /// Whether any call has had an answer (see `timeout_hint`).
    answered: AtomicBool,
    kerberos: bool,
}

/// Why a plain connection's first calls may time out: a SASL server reads
/// them as a broken negotiation and stays silent.
const SASL_HINT: &str = "; no call has been answered yet: if the Thrift server requires SASL (it sets \
                         hbase.thrift.security.qop), set storage.hbase.kerberos.enabled = true";

impl Pool {
    /// Builds the pool without connecting: connections are opened in the
    /// background and on demand, so a down HBase does not stop start-up.
    /// `kerberos`: authenticate every connection (see `kerberos.rs`).
    pub fn new(config: &HbaseConfig, kerberos: Option<Arc<Kerberos>>) -> Pool {
        let down = Arc::new(Mutex::new(None));
        let generation = Arc::new(AtomicU64::new(0));
        let max_age =
            (config.max_connection_age_seconds > 0).then(|| Duration::from_secs(config.max_connection_age_seconds));
        let has_kerberos = kerberos.is_some();
        let manager = Manager {
            config: config.clone(),
            next: AtomicUsize::new(0),
            down: down.clone(),
            generation: generation.clone(),
            kerberos,
            max_age,
        };
        let checkout_timeout = Duration::from_millis(config.connect_timeout_ms.max(10));
        let busy_timeout =
            Duration::from_millis(config.connect_timeout_ms.saturating_add(config.read_timeout_ms).max(10));
        let pool = r2d2::Pool::builder()
            .max_size(config.pool_size)
            .min_idle(Some(config.pool_size.min(2)))
            .connection_timeout(checkout_timeout)
            .test_on_check_out(true)
            // The reaper closes idle old connections too (checkout refuses them).
            .max_lifetime(max_age)
            .error_handler(Box::new(QuietErrors))
            .build_unchecked(manager);
        Pool {
            pool,
            down,
            generation,
            checkout_timeout,
            busy_timeout,
            retries: config.retries,
            backoff: Duration::from_millis(config.retry_backoff_ms),
            addresses: config.addresses.join(", "),
            timeouts: Timeouts {
                read_ms: config.read_timeout_ms,
                scaled_read_ms: None,
                write_ms: config.write_timeout_ms,
                hint: "",
            },
            answered: AtomicBool::new(false),
            kerberos: has_kerberos,
        }
    }

    /// The timeouts, with [`SASL_HINT`] while a plain pool has had no answer.
    fn timeouts(&self) -> Timeouts {
        let mut t = self.timeouts;
        if !self.kerberos && !self.answered.load(Ordering::Relaxed) {
            t.hint = SASL_HINT;
        }
        t
    }

    fn checkout(&self) -> Result<r2d2::PooledConnection<Manager>, HbaseError> {
        if let Some(c) = self.pool.try_get() {
            return Ok(c);
        }
        // No idle connection. With none open at all and the last connect
        // failed, HBase is unreachable: say so at once rather than waiting
        // the whole checkout timeout (r2d2 keeps reconnecting in the
        // background and clears the mark on the first success). With some
        // open, they are busy: wait for one.
        let down = self.down.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(e) = down.filter(|_| self.pool.state().connections == 0) {
            return Err(HbaseError::Connection(format!(
                "cannot connect to the HBase Thrift server ({e})"
            )));
        }
        // Every connection open and busy: one frees within a call's read
        // timeout, so wait that long (a request split into many calls would
        // otherwise fail whenever HBase answers slower than connect_timeout).
        // Fewer open: connections are being (re)made, e.g. after an outage:
        // the connect timeout, so an outage fails requests quickly.
        let wait = if self.pool.state().connections >= self.pool.max_size() {
            self.busy_timeout
        } else {
            self.checkout_timeout
        };
        self.pool.get_timeout(wait).map_err(|e| {
            HbaseError::Connection(format!(
                "no connection to the HBase Thrift server at {} within {} ms: {e}",
                self.addresses,
                wait.as_millis()
            ))
        })
    }

    fn once<T>(
        &self,
        read_ms: Option<u64>,
        f: &mut impl FnMut(&mut Client) -> thrift::Result<T>,
    ) -> Result<T, HbaseError> {
        let mut conn = self.checkout()?;
        if caller::gone() {
            // Waited for a connection longer than the caller did: hand it on.
            return Err(caller_left());
        }
        let peer = conn.peer;
        let mut timeouts = self.timeouts();
        if let Some(ms) = read_ms {
            if conn.socket.set_read_timeout(Some(Duration::from_millis(ms))).is_err() {
                conn.broken = true;
                return Err(HbaseError::Connection(format!(
                    "cannot set the read timeout of the socket to {peer}"
                )));
            }
            timeouts.scaled_read_ms = Some(ms);
        }
        let result = f(&mut conn.client);
        if read_ms.is_some()
            && conn
                .socket
                .set_read_timeout(Some(Duration::from_millis(self.timeouts.read_ms)))
                .is_err()
        {
            conn.broken = true; // never hand on a connection with a longer timeout than configured
        }
        if !matches!(&result, Err(thrift::Error::Transport(_) | thrift::Error::Protocol(_))) {
            self.answered.store(true, Ordering::Relaxed);
        }
        result.map_err(|e| {
            let e = classify(e, peer, timeouts, &mut conn.broken);
            if conn.broken {
                self.generation.fetch_add(1, Ordering::SeqCst);
            }
            e
        })
    }

    /// Runs `f` on a pooled connection. `Retry::Idempotent` calls are retried
    /// after retryable failures, up to `retries` more times, waiting
    /// `retry_backoff_ms` and doubling (with jitter); after a timeout only
    /// once ([`may_retry`]). `f` may make several Thrift calls (e.g. a
    /// scan); a retry repeats all of them.
    pub fn call<T>(&self, retry: Retry, f: impl FnMut(&mut Client) -> thrift::Result<T>) -> Result<T, HbaseError> {
        self.call_within(retry, None, f)
    }

    /// [`Pool::call`] with the socket read timeout set to `read_ms` for this
    /// call (and its retries) instead of `read_timeout_ms`: for calls whose
    /// service time grows with their size, such as big writes. A timeout's
    /// message names `read_ms`.
    pub fn call_with_read_timeout<T>(
        &self,
        retry: Retry,
        read_ms: u64,
        f: impl FnMut(&mut Client) -> thrift::Result<T>,
    ) -> Result<T, HbaseError> {
        self.call_within(retry, Some(read_ms.max(1)), f)
    }

    fn call_within<T>(
        &self,
        retry: Retry,
        read_ms: Option<u64>,
        mut f: impl FnMut(&mut Client) -> thrift::Result<T>,
    ) -> Result<T, HbaseError> {
        let budget = if retry == Retry::Idempotent { self.retries } else { 0 };
        let (mut attempt, mut timeouts) = (0, 0);
        loop {
            if caller::gone() {
                return Err(caller_left());
            }
            match self.once(read_ms, &mut f) {
                Err(e) if may_retry(&e, attempt, budget, &mut timeouts) => {
                    let wait = self.backoff.saturating_mul(1 << attempt.min(16));
                    let jittered = wait.mul_f64(rand::random_range(0.5..=1.0));
                    tracing::debug!(error = ?e, attempt, wait_ms = jittered.as_millis() as u64, "retrying HBase call");
                    std::thread::sleep(jittered);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

/// Whether a call that failed with `e` on attempt `attempt` (from 0) is
/// made again: a retryable failure within `budget`, and not a second
/// timeout of the same call (`timeouts` counts them): HBase is likely still
/// working on the timed-out attempts.
fn may_retry(e: &HbaseError, attempt: u32, budget: u32, timeouts: &mut u32) -> bool {
    if matches!(e, HbaseError::TimedOut(_)) {
        *timeouts += 1;
        if *timeouts > 1 {
            return false;
        }
    }
    attempt < budget && e.retryable()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_retried_after_one_timeout_not_after_two() {
        let t = HbaseError::TimedOut("slow".into());
        let c = HbaseError::Connection("reset".into());
        let mut timeouts = 0;
        assert!(may_retry(&t, 0, 5, &mut timeouts));
        assert!(may_retry(&c, 1, 5, &mut timeouts));
        assert!(!may_retry(&t, 2, 5, &mut timeouts), "second timeout");
        let mut fresh = 0;
        assert!(!may_retry(&c, 2, 2, &mut fresh), "budget spent");
        assert!(!may_retry(&HbaseError::IllegalArgument("x".into()), 0, 5, &mut fresh));
    }

    #[test]
    fn table_not_found_in_both_forms_real_hbase_uses() {
        let io = |m: &str| HbaseError::Io {
            message: m.into(),
            retry: true,
        };
        let get = io("org.apache.hadoop.hbase.TableNotFoundException: solus_deduper\n\tat ...");
        assert!(get.is_table_not_found("solus_deduper"));
        // HBase 2.6.1 answering mutateRowsTs on a dropped table (one and three rows).
        let one = io(
            "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException: Failed 1 action: \
                      solus_deduper: 1 time, servers with issues: null\n\tat org.apache.hadoop.hbase.client.BatchErrors",
        );
        let three = io(
            "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException: Failed 3 actions: \
                        solus_deduper: 3 times, servers with issues: null",
        );
        assert!(one.is_table_not_found("solus_deduper") && three.is_table_not_found("solus_deduper"));
        assert!(!one.is_table_not_found("solus_deduper_dc1"), "another table's failure");
        let family = io(
            "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException: Failed 1 action: \
                         org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException: Column family X does not exist \
                         in table solus_deduper: 1 time, servers with issues: vm,16020,1",
        );
        assert!(!family.is_table_not_found("solus_deduper"));
        assert!(!HbaseError::Connection("reset".into()).is_table_not_found("solus_deduper"));
    }

    fn classified(e: io::Error) -> (HbaseError, bool) {
        let peer: SocketAddr = "127.0.0.1:9090".parse().unwrap();
        let timeouts = Timeouts {
            read_ms: 300,
            scaled_read_ms: None,
            write_ms: 400,
            hint: SASL_HINT,
        };
        let mut broken = false;
        let e = classify(thrift::Error::from(e), peer, timeouts, &mut broken);
        (e, broken)
    }

    /// HBase's `IOError` for a principal granted nothing is its Java stack
    /// trace: the error keeps the exception and its message only.
    #[test]
    fn hbase_stack_traces_are_kept_to_their_first_line() {
        let first = "org.apache.hadoop.hbase.security.AccessDeniedException: Insufficient permissions for user \
                     'stranger' (table=shop_dedupers, action=READ)";
        let trace = format!(
            "{first}\n{}",
            "\tat org.apache.hadoop.hbase.ipc.RpcHandler.run(RpcHandler.java:85)\n".repeat(100)
        );
        let peer: SocketAddr = "127.0.0.1:9090".parse().unwrap();
        let timeouts = Timeouts {
            read_ms: 300,
            scaled_read_ms: None,
            write_ms: 400,
            hint: "",
        };
        let user = thrift::Error::User(Box::new(IOError::new(trace, false)));
        let mut broken = false;
        let e = classify(user, peer, timeouts, &mut broken);
        assert!(!broken, "an HBase answer leaves the connection usable");
        assert_eq!(
            e,
            HbaseError::Io {
                message: first.to_string(),
                retry: false
            }
        );
        assert_eq!(
            e.into_storage("getRowWithColumns shop_dedupers").to_string(),
            format!("storage unavailable: HBase getRowWithColumns shop_dedupers failed: HBase IOError: {first}")
        );
    }

    #[test]
    fn socket_timeouts_name_the_setting() {
        // What a blocking read past SO_RCVTIMEO returns on Linux (EAGAIN), and TimedOut.
        for e in [
            io::Error::from_raw_os_error(11),
            io::Error::from(io::ErrorKind::WouldBlock),
            io::Error::from(io::ErrorKind::TimedOut),
        ] {
            let (e, broken) = classified(e);
            assert!(broken);
            let HbaseError::TimedOut(m) = e else { panic!("{e:?}") };
            assert!(
                m.contains("timed out")
                    && m.contains("read_timeout_ms = 300 ms")
                    && m.contains("400 ms")
                    && m.contains("storage.hbase.kerberos.enabled"),
                "{m}"
            );
        }
        let (e, _) = classified(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(!format!("{e:?}").contains("timed out"), "{e:?}");
        assert!(e.retryable());
    }
}
