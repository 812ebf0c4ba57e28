//! Wiring: opens the store, builds the engine, serves the Solus services plus
//! the standard gRPC health and reflection services behind the request gate
//! (TLS, tokens, limits, metrics), and shuts down cleanly within the drain timeout.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::Stream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::server::Connected;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic_health::pb::health_check_response::ServingStatus;

use crate::api::pb::deduper_admin_service_server::DeduperAdminServiceServer;
use crate::api::pb::deduper_service_server::DeduperServiceServer;
use crate::api::{AdminService, ConnectionShare, DataService, Gate, pb};
use crate::auth::Authenticator;
use crate::config::{Backend, Settings, TlsConfig};
use crate::engine::Engine;
use crate::health::Health;
use crate::storage::Store;
use crate::storage::clock_bound::ClockBoundStore;
use crate::storage::embedded::EmbeddedStore;
use crate::storage::hbase::HbaseStore;
use crate::storage::metered::MeteredStore;

/// Health service name of the data path: SERVING while storage is reachable.
pub const DATA_SERVICE_NAME: &str = "solus.v1.DeduperService";

/// How often older generations of resized dedupers are checked for retirement.
const RETIRE_PASS_INTERVAL: Duration = Duration::from_millis(500);

/// Health service name of recovery damage ([`Store::damage`]): SERVING when
/// there is none, NOT_SERVING while damaged journal files are kept aside or
/// the embedded checkpoints keep failing.
/// Not asked by the probes: the replica serves what it could read.
pub const JOURNAL_SERVICE_NAME: &str = "solus.v1.Journal";

/// Opens the configured storage backend (blocking: may replay a journal),
/// wrapped so every storage call is measured (`solus_storage_*` metrics).
pub fn open_store(settings: &Settings) -> anyhow::Result<Arc<dyn Store>> {
    match settings.storage.backend {
        Backend::Embedded => {
            let path = &settings.storage.embedded.path;
            check_data_dir(path)?;
            let store = EmbeddedStore::open(settings.storage.embedded.clone()).map_err(|e| {
                let text = e.to_string();
                if text.contains("Locked") {
                    anyhow::anyhow!(
                        "the data directory {} (storage.embedded.path) is in use by another process, most likely \
                         another `solus serve`: only one server may open it. Stop that server, or give this one its \
                         own directory: storage.embedded.path in the --config file, or \
                         SOLUS__STORAGE__EMBEDDED__PATH=<dir>",
                        path.display()
                    )
                } else {
                    anyhow::anyhow!(
                        "opening the embedded store at {} (storage.embedded.path): {text}",
                        path.display()
                    )
                }
            })?;
            let dedupers = store.deduper_count();
            Ok(Arc::new(MeteredStore::new(Arc::new(store), Some(dedupers))))
        }
        Backend::Hbase => {
            let store = HbaseStore::open(settings.storage.hbase.clone(), &settings.storage.table, &settings.farm)
                .map_err(|e| hbase_open_error(settings, &e))?;
            let metered = Arc::new(MeteredStore::new(Arc::new(store), None));
            let bound = settings.storage.hbase.max_clock_offset_ms;
            Ok(Arc::new(ClockBoundStore::new(
                metered,
                bound,
                "storage.hbase.max_clock_offset_ms",
            )))
        }
    }
}

/// Creates the embedded store's data directory when missing and checks that
/// this process may write there; the error names `storage.embedded.path`.
fn check_data_dir(path: &Path) -> anyhow::Result<()> {
    let fix = "choose a directory this user may write: storage.embedded.path in the --config file, or \
               SOLUS__STORAGE__EMBEDDED__PATH=<dir>";
    std::fs::create_dir_all(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot create the data directory {} (storage.embedded.path): {e}; {fix}",
            path.display()
        )
    })?;
    let probe = path.join(".solus-write-check");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot write in the data directory {} (storage.embedded.path): {e}; {fix}",
                path.display()
            )
        })
}

/// What to check when HBase cannot be reached, from the error's text: a
/// connection the Thrift server resets or drops at once is almost always a
/// transport or protocol mismatch (`storage.hbase.transport`/`.protocol`);
/// a refused one means nothing listens at `storage.hbase.addresses`.
pub fn hbase_hint(h: &crate::storage::hbase::HbaseConfig, error: &str) -> Option<String> {
    let lower = error.to_lowercase();
    let (transport, protocol) = thrift_names(h);
    let dropped = [
        "reset by peer",
        "broken pipe",
        "early eof",
        "unexpected end",
        "frame size",
        "bad version",
    ];
    if dropped.iter().any(|m| lower.contains(m)) {
        Some(format!(
            "the Thrift server dropped the connection: check that storage.hbase.transport ({transport}) and \
             storage.hbase.protocol ({protocol}) match its hbase.regionserver.thrift.framed and .compact (the \
             emulator's --framed and --compact)"
        ))
    } else if lower.contains("connection refused") {
        Some(format!(
            "nothing listens at {} (storage.hbase.addresses): start HBase's Thrift server (or `cargo run -p \
             hbase-emulator`), or set storage.hbase.addresses (SOLUS__STORAGE__HBASE__ADDRESSES=host:port)",
            h.addresses.join(",")
        ))
    } else {
        None
    }
}

/// A failed HBase start-up in the settings' terms.
fn hbase_open_error(settings: &Settings, e: &(dyn std::error::Error + 'static)) -> anyhow::Error {
    let h = &settings.storage.hbase;
    let text = crate::cli::hints::causes(e).join(": ");
    match hbase_hint(h, &text) {
        Some(hint) => anyhow::anyhow!("opening the HBase store: {text}; {hint}"),
        None => anyhow::anyhow!(
            "opening the HBase store at {} (storage.hbase.addresses): {text}",
            h.addresses.join(",")
        ),
    }
}

/// The rustls server configuration of `server.tls`, `None` for plaintext.
/// Errors name the file that could not be read; certificate/key mismatches
/// are reported when the server is built.
pub fn tls_config(tls: &TlsConfig) -> anyhow::Result<Option<ServerTlsConfig>> {
    let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) else {
        return Ok(None);
    };
    let read =
        |path: &Path, key: &str| std::fs::read(path).with_context(|| format!("reading {key} {}", path.display()));
    let identity = Identity::from_pem(read(cert, "server.tls.cert_file")?, read(key, "server.tls.key_file")?);
    let mut config = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = &tls.client_ca_file {
        config = config.client_ca_root(Certificate::from_pem(read(ca, "server.tls.client_ca_file")?));
    }
    Ok(Some(config))
}

/// The authenticator of `auth.*`: off, or the tokens of `auth.tokens_file`.
pub fn authenticator(settings: &Settings) -> anyhow::Result<Authenticator> {
    match (&settings.auth.tokens_file, settings.auth.enabled) {
        (Some(path), true) => Ok(Authenticator::from_file(path)?),
        (None, true) => anyhow::bail!("auth.enabled needs auth.tokens_file"),
        (_, false) => Ok(Authenticator::disabled()),
    }
}

/// Re-reads the tokens file on every SIGHUP; a refused file keeps the old
/// tokens. With auth off SIGHUP is only logged (it never stops the server).
#[cfg(unix)]
fn reload_tokens_on_sighup(auth: Arc<Authenticator>) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGHUP; the tokens file is read only at start");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            if !auth.enabled() {
                tracing::info!("SIGHUP: auth is off, nothing to re-read");
                continue;
            }
            match auth.reload() {
                Ok(n) => tracing::info!(tokens = n, "SIGHUP: tokens file re-read"),
                Err(e) => tracing::error!(error = %e, "SIGHUP: tokens file refused; keeping the previous tokens"),
            }
        }
    }))
}

#[cfg(not(unix))]
fn reload_tokens_on_sighup(_: Arc<Authenticator>) -> Option<tokio::task::JoinHandle<()>> {
    None
}

/// An accepted client connection: the socket, its share of the request
/// gate (its `ConnectInfo`, so the gate finds it in every request's
/// extensions), and its slot of `server.max_connections`, given back when
/// the connection is dropped.
pub struct Connection {
    stream: TcpStream,
    share: ConnectionShare,
    _slot: OwnedSemaphorePermit,
}

impl Connected for Connection {
    type ConnectInfo = ConnectionShare;

    fn connect_info(&self) -> ConnectionShare {
        self.share.clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A future slot of `server.max_connections`.
type SlotFuture = Pin<Box<dyn Future<Output = OwnedSemaphorePermit> + Send>>;

/// Accepted connections until `stop` resolves; then the listening socket is
/// closed at once, so new connections are refused while in-flight requests
/// drain on the open ones. At most `server.max_connections` are open at
/// once: with all slots taken, the listener is not polled, so new
/// connections wait in the kernel's backlog until one closes.
struct UntilStopped<'a> {
    listener: Option<TcpListenerStream>,
    stop: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    slots: Arc<Semaphore>,
    max_connections: usize,
    /// The slot for the next connection, once had.
    slot: Option<OwnedSemaphorePermit>,
    /// Waiting for a slot (all taken).
    waiting: Option<SlotFuture>,
}

impl<'a> UntilStopped<'a> {
    fn new(listener: TcpListener, max_connections: usize, stop: Pin<Box<dyn Future<Output = ()> + Send + 'a>>) -> Self {
        UntilStopped {
            listener: Some(TcpListenerStream::new(listener)),
            stop,
            slots: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            slot: None,
            waiting: None,
        }
    }

    /// A slot for the next connection, or `Pending` (woken when one frees).
    fn poll_slot(&mut self, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.slot.is_some() {
            return Poll::Ready(());
        }
        if self.waiting.is_none() {
            match self.slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    self.slot = Some(slot);
                    return Poll::Ready(());
                }
                Err(_) => {
                    tracing::warn!(
                        max_connections = self.max_connections,
                        "server.max_connections connections are open: new connections wait until one closes"
                    );
                    let slots = self.slots.clone();
                    self.waiting = Some(Box::pin(async move {
                        slots
                            .acquire_owned()
                            .await
                            .expect("the connection slots are never closed")
                    }));
                }
            }
        }
        let waiting = self.waiting.as_mut().expect("set above");
        let slot = std::task::ready!(waiting.as_mut().poll(cx));
        self.waiting = None;
        self.slot = Some(slot);
        tracing::info!("a connection closed: accepting new connections again");
        Poll::Ready(())
    }
}

impl Stream for UntilStopped<'_> {
    type Item = std::io::Result<Connection>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.listener.is_none() {
            return Poll::Ready(None);
        }
        if this.stop.as_mut().poll(cx).is_ready() {
            this.listener = None;
            return Poll::Ready(None);
        }
        std::task::ready!(this.poll_slot(cx));
        let listener = this.listener.as_mut().expect("checked above");
        let accepted = std::task::ready!(Pin::new(listener).poll_next(cx));
        Poll::Ready(accepted.map(|accepted| {
            accepted.map(|stream| {
                // No Nagle: a small response written after a large request would
                // otherwise wait for the peer's delayed ACK (about 40 ms).
                drop(stream.set_nodelay(true));
                Connection {
                    stream,
                    share: ConnectionShare::default(),
                    _slot: this.slot.take().expect("a slot was had above"),
                }
            })
        }))
    }
}

/// Serves only the health service, in plaintext, on `server.health_listen`
/// (none when empty): Kubernetes' native gRPC probes cannot speak TLS. It
/// reports the same statuses as the main port (NOT_SERVING while draining)
/// and stops with the server. Errors: the address cannot be parsed or bound.
async fn serve_health_only(
    listen: &str,
    health: tonic::transport::server::Router,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let addr: std::net::SocketAddr = listen
        .parse()
        .with_context(|| format!("server.health_listen {listen:?} is not an address like 0.0.0.0:50052"))?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| crate::config::bind_error("server.health_listen", addr, &e))?;
    tracing::info!(addr = %listener.local_addr()?, "plaintext health service for probes");
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    Ok(Some(tokio::spawn(async move {
        if let Err(e) = health.serve_with_incoming(incoming).await {
            tracing::error!(error = %e, "health listener failed");
        }
    })))
}

/// `storage.hbase.transport` and `.protocol` as written in the settings.
fn thrift_names(h: &crate::storage::hbase::HbaseConfig) -> (&'static str, &'static str) {
    use crate::storage::hbase::{Protocol, Transport};
    let transport = match h.transport {
        Transport::Buffered => "buffered",
        Transport::Framed => "framed",
    };
    let protocol = match h.protocol {
        Protocol::Binary => "binary",
        Protocol::Compact => "compact",
    };
    (transport, protocol)
}

/// A one-line description of the store for the start-up log.
pub fn describe_store(settings: &Settings) -> String {
    match settings.storage.backend {
        Backend::Embedded => format!(
            "embedded store at {} (fsync per write: {})",
            settings.storage.embedded.path.display(),
            settings.storage.embedded.fsync
        ),
        Backend::Hbase => {
            let h = &settings.storage.hbase;
            let (transport, protocol) = thrift_names(h);
            format!(
                "HBase Thrift at {} ({transport} transport, {protocol} protocol{}), tables {} and {}_{}",
                h.addresses.join(","),
                describe_kerberos(&h.kerberos),
                settings.storage.table,
                settings.storage.table,
                settings.farm
            )
        }
    }
}

/// `storage.hbase.kerberos` for the start-up log: empty when off, else who
/// Solus authenticates as, from where, and the lowest qop it accepts.
fn describe_kerberos(k: &crate::storage::hbase::KerberosConfig) -> String {
    if !k.enabled {
        return String::new();
    }
    let source = match (k.keytab.as_str(), k.ticket_cache.as_str()) {
        ("", "") => "the default ticket cache".to_string(),
        ("", cache) => format!("ticket cache {cache}"),
        (keytab, _) => format!("keytab {keytab}"),
    };
    let who = if k.principal.is_empty() {
        format!("the principal of {source}")
    } else {
        format!("{} from {source}", k.principal)
    };
    format!(", Kerberos SASL GSSAPI as {who}, min qop {}", k.min_qop.name())
}

/// Health service name of a deduper refused as misplaced or for an
/// unusable stored config: `solus.v1.DeduperService/<client_id>/<name>`
/// (`NOT_SERVING`).
pub fn misplaced_health_service(client_id: &str, name: &str) -> String {
    format!("{DATA_SERVICE_NAME}/{client_id}/{name}")
}

/// Reports the dedupers refused as misplaced, or for a stored config that
/// cannot be used, as their own `NOT_SERVING`
/// health services, after asking the engine to re-check them, and clears
/// the services of those no longer refused (deleted, or re-created where
/// this replica keeps its bits): health follows the state, not history.
async fn report_misplaced(engine: &Engine, health: &Health, reported: &mut std::collections::BTreeSet<String>) {
    engine.recheck_misplaced().await;
    engine.recheck_unusable().await;
    let now: std::collections::BTreeSet<String> = engine
        .misplaced_dedupers()
        .iter()
        .chain(&engine.unusable_dedupers())
        .map(|(client_id, name)| misplaced_health_service(client_id, name))
        .collect();
    for gone in reported.difference(&now) {
        tracing::info!(service = %gone, "deduper no longer refused as misplaced: health service cleared");
        health.clear(gone);
    }
    for service in &now {
        health.set(service, ServingStatus::NotServing);
    }
    *reported = now;
}

/// Sets [`JOURNAL_SERVICE_NAME`] from the store's damage report, logging a
/// change (with the sentence, which names the files).
fn report_damage(health: &Health, damage: Option<String>, last: &mut Option<Option<String>>) {
    if last.as_ref() == Some(&damage) {
        return;
    }
    match &damage {
        Some(what) => {
            tracing::warn!(service = JOURNAL_SERVICE_NAME, damage = %what, "health: NOT_SERVING");
            health.set(JOURNAL_SERVICE_NAME, ServingStatus::NotServing);
        }
        None => health.set(JOURNAL_SERVICE_NAME, ServingStatus::Serving),
    }
    *last = Some(damage);
}

/// Probes storage every `every` on a thread of its own - never on the
/// blocking pool, where it would queue behind slow storage calls - and
/// reports the result as the health of the data service; a failure is
/// logged with what to check (`hint`, from the error's text).
/// Each round also reports the misplaced dedupers ([`report_misplaced`]).
async fn watch_storage(
    store: Arc<dyn Store>,
    engine: Arc<Engine>,
    health: Health,
    every: Duration,
    hint: impl Fn(&str) -> Option<String> + Send + 'static,
) {
    let mut last = None;
    let mut last_damage = None;
    let mut reported_misplaced = std::collections::BTreeSet::new();
    loop {
        // A deduper refused because a setting moved its data (storage.table,
        // farm) shows as its own NOT_SERVING health service; the replica stays
        // ready for every other deduper.
        report_misplaced(&engine, &health, &mut reported_misplaced).await;
        let s = store.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("solus-health-probe".into())
            .spawn(move || drop(tx.send((s.ping(), s.damage()))));
        let ok = match spawned {
            Ok(_) => rx
                .await
                .map_err(|_| "health probe thread ended without an answer".to_string())
                .map(|(r, damage)| {
                    report_damage(&health, damage, &mut last_damage);
                    r.map_err(|e| e.to_string())
                }),
            Err(e) => Err(format!("starting the health probe thread: {e}")),
        };
        let status = match ok {
            Ok(Ok(())) => ServingStatus::Serving,
            Ok(Err(e)) => match hint(&e) {
                Some(hint) => {
                    tracing::warn!(error = %e, hint = %hint, "NOT_SERVING: the storage probe failed (the error says why: unreachable, or a clock beyond its bound)");
                    ServingStatus::NotServing
                }
                None => {
                    tracing::warn!(error = %e, "NOT_SERVING: the storage probe failed (the error says why: unreachable, or a clock beyond its bound)");
                    ServingStatus::NotServing
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "storage probe failed");
                ServingStatus::NotServing
            }
        };
        if last != Some(status) {
            let shown = match status {
                ServingStatus::Serving => "SERVING",
                ServingStatus::NotServing => "NOT_SERVING",
                ServingStatus::Unknown | ServingStatus::ServiceUnknown => "UNKNOWN",
            };
            tracing::info!(service = DATA_SERVICE_NAME, status = shown, "health changed");
            crate::metrics::set_ready(status == ServingStatus::Serving);
            health.set(DATA_SERVICE_NAME, status);
            last = Some(status);
        }
        tokio::time::sleep(every).await;
    }
}

/// Serves on `listener` until `shutdown` resolves; then health turns
/// `NOT_SERVING`, the listener closes, new requests on open connections get
/// `UNAVAILABLE`, in-flight ones finish (for at most
/// `server.drain_timeout_ms`), storage is flushed and this returns `Ok`.
/// Errors: unreadable TLS or tokens files, a metrics address that cannot be
/// bound, storage that cannot be opened or flushed.
pub async fn serve(
    settings: Settings,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let tls = tls_config(&settings.server.tls)?;
    let auth = Arc::new(authenticator(&settings)?);
    match crate::metrics::install(&settings.metrics.listen)? {
        Some(addr) => tracing::info!(%addr, "metrics on http://{addr}/metrics"),
        None => tracing::info!("metrics off (metrics.listen is empty)"),
    }
    crate::heap::tune();
    let trimmer = crate::heap::spawn_trimmer();
    let opened = settings.clone();
    let store = tokio::task::spawn_blocking(move || open_store(&opened)).await??;
    crate::metrics::set_max_deduper_series(settings.metrics.max_deduper_series);
    let stats_settings = crate::engine::StatsSettings {
        sample_bits: settings.stats.sample_bits.max(1),
        over_capacity_fpr_factor: settings.stats.over_capacity_fpr_factor,
    };
    let r = &settings.resize;
    let auto_resize = crate::engine::AutoResize {
        enabled: r.auto,
        load_threshold: r.load_threshold,
        passes: r.passes,
        projection: r.projection,
        growth: r.growth,
        max_expected_insertions: r.max_expected_insertions,
    };
    let engine = Arc::new(
        Engine::new(store.clone(), settings.limits.engine_limits())
            .with_stats_settings(stats_settings)
            .with_auto_resize(auto_resize),
    );
    let stats_pass = (settings.stats.refresh_interval_ms > 0).then(|| {
        let engine = engine.clone();
        let every = Duration::from_millis(settings.stats.refresh_interval_ms);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                engine.refresh_stats().await;
            }
        })
    });
    // Retires older generations of resized dedupers on time (cheap when
    // none is due: no storage call).
    // Stopped by a signal, not aborted: a pass in its storage call finishes
    // first, so the store is released when `serve` returns.
    let (retire_stop, mut retire_stopped) = tokio::sync::watch::channel(false);
    let retire_pass = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine.resume_resizes().await;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(RETIRE_PASS_INTERVAL) => engine.retire_generations().await,
                    _ = retire_stopped.changed() => return,
                }
            }
        })
    };
    if settings.limits.allow_biased_bits_per_shard {
        tracing::warn!(
            "limits.allow_biased_bits_per_shard is on: CreateDeduper accepts bits_per_shard above 2^30, whose bit \
             positions are not uniform (false-positive rate above the geometry's); meant only for attaching to \
             existing data of such a geometry"
        );
    }

    let health = Health::new();
    health.set("", ServingStatus::Serving);
    let hbase = (settings.storage.backend == Backend::Hbase).then(|| settings.storage.hbase.clone());
    let watcher = tokio::spawn(watch_storage(
        store.clone(),
        engine.clone(),
        health.clone(),
        Duration::from_millis(settings.server.health_check_interval_ms.max(100)),
        move |error| hbase.as_ref().and_then(|h| hbase_hint(h, error)),
    ));

    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let max = settings.limits.max_message_bytes;
    let gate = Gate::new(auth.clone(), settings.limits.max_concurrent_requests, max);
    let sighup = reload_tokens_on_sighup(auth.clone());
    let timeout = Duration::from_millis(settings.server.request_timeout_ms.max(1));
    let data = DeduperServiceServer::new(DataService::new(engine.clone(), timeout)).max_decoding_message_size(max);
    let admin =
        DeduperAdminServiceServer::new(AdminService::new(engine.clone(), timeout)).max_decoding_message_size(max);

    let addr = listener.local_addr()?;
    if tls.is_none() && !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "plaintext gRPC on a non-loopback address: anyone on the network can read requests and bearer tokens; \
             set server.tls.cert_file and server.tls.key_file"
        );
    }
    tracing::info!(
        %addr,
        store = %describe_store(&settings),
        tls = tls.is_some(),
        mutual_tls = settings.server.tls.client_ca_file.is_some(),
        auth = %auth,
        "solus listening"
    );
    let health_only = serve_health_only(
        &settings.server.health_listen,
        tonic::transport::Server::builder().add_service(health.service()),
    )
    .await?;
    // HTTP/2 limits (issue 45 class 4, issue 46 class 4): tonic leaves
    // MAX_CONCURRENT_STREAMS unlimited and the reset-stream limit at h2's 20.
    let mut builder = tonic::transport::Server::builder()
        .max_concurrent_streams(settings.server.max_concurrent_streams)
        .http2_max_pending_accept_reset_streams(Some(settings.server.max_pending_accept_reset_streams));
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .context("server.tls: certificate or key refused")?;
    }

    // Shutdown: flip health, refuse new requests, close the listener, start the drain clock.
    let drain = Duration::from_millis(settings.server.drain_timeout_ms);
    let (drain_tx, mut drain_rx) = tokio::sync::watch::channel(false);
    let (drain_gate, drain_health) = (gate.clone(), health.clone());
    let incoming = UntilStopped::new(
        listener,
        settings.server.max_connections,
        Box::pin(async move {
            shutdown.await;
            tracing::info!(
                in_flight = drain_gate.in_flight(),
                drain_timeout_ms = drain.as_millis() as u64,
                "shutting down: refusing new requests, finishing in-flight ones"
            );
            drain_gate.start_draining();
            drain_health.set(DATA_SERVICE_NAME, ServingStatus::NotServing);
            drain_health.set("", ServingStatus::NotServing);
            // Watchers get NOT_SERVING, then their streams end: an open
            // Watch would otherwise hold the graceful stop to the drain timeout.
            drain_health.close();
            let _ = drain_tx.send(true);
        }),
    );
    // The incoming stream ending starts tonic's graceful shutdown (GOAWAY,
    // then wait for open requests); the signal itself never fires.
    let server = builder
        .layer(gate.clone())
        .add_service(health.service())
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(data)
        .add_service(admin)
        .serve_with_incoming_shutdown(incoming, std::future::pending::<()>());
    let result = tokio::select! {
        r = server => r,
        _ = async {
            let _ = drain_rx.wait_for(|started| *started).await;
            tokio::time::sleep(drain).await;
        } => {
            tracing::warn!(
                in_flight = gate.in_flight(),
                drain_timeout_ms = drain.as_millis() as u64,
                "drain timeout reached: closing the remaining connections"
            );
            Ok(())
        }
    };

    if let Some(task) = health_only {
        task.abort();
    }
    watcher.abort();
    trimmer.abort();
    let _ = watcher.await;
    if let Some(task) = stats_pass {
        task.abort();
        let _ = task.await;
    }
    let _ = retire_stop.send(true);
    let _ = retire_pass.await;
    if let Some(task) = sighup {
        task.abort();
    }
    drop(engine);
    let flushed = tokio::task::spawn_blocking(move || {
        let r = store.flush();
        drop(store);
        r
    })
    .await?;
    result.context("gRPC server failed")?;
    flushed.context("flushing storage on shutdown")?;
    tracing::info!("solus stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_line_says_kerberos_when_it_is_on() {
        let mut s = Settings::default();
        s.storage.backend = Backend::Hbase;
        s.storage.hbase.addresses = vec!["127.0.0.1:9290".into()];
        let plain = describe_store(&s);
        assert!(
            plain.starts_with("HBase Thrift at 127.0.0.1:9290 (buffered transport, binary protocol), tables "),
            "{plain}"
        );
        assert!(!plain.contains("Kerberos"), "{plain}");
        let k = &mut s.storage.hbase.kerberos;
        k.enabled = true;
        k.keytab = "/tmp/kdc/solus.keytab".into();
        k.principal = "solus/localhost@SOLUS.TEST".into();
        assert!(
            describe_store(&s).starts_with(
                "HBase Thrift at 127.0.0.1:9290 (buffered transport, binary protocol, Kerberos SASL GSSAPI as \
                 solus/localhost@SOLUS.TEST from keytab /tmp/kdc/solus.keytab, min qop privacy), tables "
            ),
            "{}",
            describe_store(&s)
        );
        let k = &mut s.storage.hbase.kerberos;
        k.keytab.clear();
        k.principal.clear();
        k.min_qop = crate::storage::hbase::Qop::Integrity;
        assert!(
            describe_store(&s)
                .contains("Kerberos SASL GSSAPI as the principal of the default ticket cache, min qop integrity)"),
            "{}",
            describe_store(&s)
        );
        s.storage.hbase.kerberos.ticket_cache = "FILE:/tmp/krb5cc_solus".into();
        assert!(describe_store(&s).contains("as the principal of ticket cache FILE:/tmp/krb5cc_solus, min qop"));
    }
}
