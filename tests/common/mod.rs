//! Test harness: starts a real Solus server on an ephemeral port over a given
//! storage backend and hands out tonic clients.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use solus::api::pb::{self, Level};
use solus::config::Settings;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub mod ports;
pub mod real_hbase;
pub use real_hbase::{RawClient, RealHbase, connect_raw};

/// A storage backend the suite runs against.
pub struct TestBackend {
    pub name: &'static str,
    /// Settings with the backend filled in; `server.listen` is ignored.
    pub settings: Settings,
    /// Whether concurrent AddIfAbsent calls are atomic (embedded: yes).
    pub atomic_add_if_absent: bool,
    /// The in-process HBase emulator the settings point at (HBase only).
    pub emulator: Option<Arc<hbase_emulator::EmulatorHandle>>,
    /// The real HBase the settings point at, held exclusively by this test.
    pub real: Option<(&'static RealHbase, Arc<real_hbase::Exclusive>)>,
    _dir: Arc<tempfile::TempDir>,
}

impl TestBackend {
    /// The embedded store in a fresh temporary directory.
    pub fn embedded() -> TestBackend {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let mut settings = Settings::default();
        settings.storage.embedded.path = dir.path().join("data");
        settings.server.health_check_interval_ms = 200;
        // Many servers share this process: none serves /metrics.
        settings.metrics.listen = String::new();
        TestBackend {
            name: "embedded",
            settings,
            atomic_add_if_absent: true,
            emulator: None,
            real: None,
            _dir: dir,
        }
    }

    /// The HBase store against a fresh in-process emulator on an ephemeral
    /// port, with short timeouts so fault tests run fast.
    pub fn hbase() -> TestBackend {
        Self::hbase_on(hbase_emulator::Emulator::start("127.0.0.1:0").expect("starting the HBase emulator"))
    }

    /// The HBase store against a given emulator (e.g. one with a manual clock).
    pub fn hbase_on(emulator: hbase_emulator::EmulatorHandle) -> TestBackend {
        let settings = Self::hbase_settings(emulator.addr());
        TestBackend {
            name: "hbase",
            settings,
            atomic_add_if_absent: false,
            emulator: Some(Arc::new(emulator)),
            real: None,
            _dir: Arc::new(tempfile::tempdir().expect("temp dir")),
        }
    }

    /// The HBase store against the real Apache HBase of `real_hbase.rs`,
    /// emptied and held for this test alone; `None` (the test then passes
    /// without running) where no real HBase can be had.
    pub fn real_hbase() -> Option<TestBackend> {
        let real = RealHbase::get()?;
        let exclusive = Arc::new(real.exclusive());
        let mut settings = Self::hbase_settings(real.thrift);
        // Real HBase is slower than the emulator (table creation, first region
        // assignment, compactions on 2 cores).
        settings.storage.hbase.read_timeout_ms = 20_000;
        settings.storage.hbase.write_timeout_ms = 20_000;
        settings.storage.hbase.connect_timeout_ms = 2_000;
        // A dropped test server stops quickly and stops re-creating tables.
        settings.server.drain_timeout_ms = 500;
        Some(TestBackend {
            name: "real-hbase",
            settings,
            atomic_add_if_absent: false,
            emulator: None,
            real: Some((real, exclusive)),
            _dir: Arc::new(tempfile::tempdir().expect("temp dir")),
        })
    }

    /// The HBase store with the given settings (e.g. a Kerberized HBase of
    /// `tests/kerberos.rs`); `fresh` gives the embedded store.
    pub fn with_settings(name: &'static str, settings: Settings) -> TestBackend {
        TestBackend {
            name,
            settings,
            atomic_add_if_absent: false,
            emulator: None,
            real: None,
            _dir: Arc::new(tempfile::tempdir().expect("temp dir")),
        }
    }

    /// The settings the HBase tests start from, for `thrift`.
    pub fn hbase_settings_for(thrift: &str) -> Settings {
        let mut s = Self::hbase_settings("127.0.0.1:1".parse().unwrap());
        s.storage.hbase.addresses = vec![thrift.to_string()];
        s
    }

    /// Another backend on the same storage, emptied: a new emulator, or the
    /// same real HBase with its tables dropped.
    pub fn fresh(&self) -> TestBackend {
        match (&self.real, &self.emulator) {
            (Some((real, exclusive)), _) => {
                real.drop_user_tables();
                TestBackend {
                    name: self.name,
                    settings: self.settings.clone(),
                    atomic_add_if_absent: false,
                    emulator: None,
                    real: Some((real, exclusive.clone())),
                    _dir: Arc::new(tempfile::tempdir().expect("temp dir")),
                }
            }
            (None, Some(_)) => TestBackend::hbase(),
            (None, None) => TestBackend::embedded(),
        }
    }

    /// The Thrift1 address of the HBase backend (emulator or real).
    pub fn thrift_addr(&self) -> SocketAddr {
        match (&self.real, &self.emulator) {
            (Some((real, _)), _) => real.thrift,
            (None, Some(e)) => e.addr(),
            (None, None) => panic!("not an HBase test backend"),
        }
    }

    /// A plain Thrift1 client on the HBase backend, independent of Solus.
    pub fn raw_thrift(&self) -> RawClient {
        connect_raw(self.thrift_addr())
    }

    fn hbase_settings(thrift: SocketAddr) -> Settings {
        let mut settings = Settings::default();
        settings.storage.backend = solus::config::Backend::Hbase;
        settings.server.health_check_interval_ms = 200;
        // Many servers share this process: none serves /metrics.
        settings.metrics.listen = String::new();
        let h = &mut settings.storage.hbase;
        h.addresses = vec![thrift.to_string()];
        h.connect_timeout_ms = 500;
        h.read_timeout_ms = 2_000;
        h.write_timeout_ms = 2_000;
        h.retry_backoff_ms = 20;
        // The suite checks TTLs of 100 ms and shifts Solus' clock by years
        // (clock_shift.rs) or runs the emulator on a manual clock: the clock
        // bound is off here and on in tests/clock_cases (emulator and real HBase).
        h.max_clock_offset_ms = 0;
        settings
    }

    /// The emulator of an HBase backend; panics for other backends.
    pub fn emulator(&self) -> &hbase_emulator::EmulatorHandle {
        self.emulator.as_deref().expect("an HBase test backend")
    }

    pub fn data_path(&self) -> PathBuf {
        self.settings.storage.embedded.path.clone()
    }
}

/// A running server.
pub struct TestServer {
    pub addr: SocketAddr,
    pub channel: Channel,
    shutdown: Option<oneshot::Sender<()>>,
    join: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestServer {
    pub async fn start(backend: &TestBackend) -> TestServer {
        Self::start_with(backend.settings.clone()).await
    }

    pub async fn start_with(settings: Settings) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        let join = tokio::spawn(solus::server::serve(settings, listener, async {
            let _ = rx.await;
        }));
        let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect_lazy();
        let server = TestServer {
            addr,
            channel,
            shutdown: Some(tx),
            join: Some(join),
        };
        server.wait_ready().await;
        server
    }

    async fn wait_ready(&self) {
        let mut health = tonic_health::pb::health_client::HealthClient::new(self.channel.clone());
        // Up to 60 s: a real HBase just restarted can take that to answer.
        for _ in 0..2400 {
            let req = tonic_health::pb::HealthCheckRequest { service: String::new() };
            if health.check(req).await.is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("server at {} did not become ready", self.addr);
    }

    pub fn data(&self) -> DeduperServiceClient<Channel> {
        DeduperServiceClient::new(self.channel.clone())
    }

    pub fn admin(&self) -> DeduperAdminServiceClient<Channel> {
        DeduperAdminServiceClient::new(self.channel.clone())
    }

    /// Graceful shutdown; panics if the server failed.
    pub async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        self.join
            .take()
            .unwrap()
            .await
            .expect("server task")
            .expect("server result");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A create request sized from n and p.
pub fn create_np(client: &str, name: &str, n: u64, p: f64, expiry_seconds: u64) -> pb::CreateDeduperRequest {
    pb::CreateDeduperRequest {
        client_id: client.into(),
        name: name.into(),
        expected_insertions: n,
        false_positive_rate: p,
        expiry_seconds,
        level: Level::Global as i32,
        ..Default::default()
    }
}

/// An update that deactivates deduper `name` of `client` (nothing else changed).
pub fn deactivate(client: &str, name: &str) -> pb::UpdateDeduperRequest {
    pb::UpdateDeduperRequest {
        client_id: client.into(),
        name: name.into(),
        active: Some(false),
        ..Default::default()
    }
}

/// A delete of deduper `name` of `client`; `force` deletes an active one.
pub fn delete_req(client: &str, name: &str, force: bool) -> pb::DeleteDeduperRequest {
    pb::DeleteDeduperRequest {
        client_id: client.into(),
        name: name.into(),
        force,
    }
}

/// A create request with explicit geometry.
pub fn create_geom(client: &str, name: &str, k: u32, shards: u32, bps: u32, expiry: u64) -> pb::CreateDeduperRequest {
    pb::CreateDeduperRequest {
        client_id: client.into(),
        name: name.into(),
        hash_functions: k,
        shards,
        bits_per_shard: bps,
        expiry_seconds: expiry,
        level: Level::Global as i32,
        ..Default::default()
    }
}

pub fn ents<S: AsRef<[u8]>>(items: &[S]) -> Vec<prost::bytes::Bytes> {
    items
        .iter()
        .map(|s| prost::bytes::Bytes::copy_from_slice(s.as_ref()))
        .collect()
}

pub async fn add(s: &TestServer, client: &str, deduper: &str, items: &[&str], ttl_ms: u64) -> u32 {
    let req = pb::AddRequest {
        request_id: None,
        client_id: client.into(),
        deduper: deduper.into(),
        entities: ents(items),
        ttl_ms,
    };
    s.data().add(req).await.expect("Add").into_inner().added
}

pub async fn absent(s: &TestServer, client: &str, deduper: &str, items: &[&str]) -> Vec<bool> {
    let req = pb::CheckAbsenceRequest {
        record_ids: Vec::new(),
        client_id: client.into(),
        deduper: deduper.into(),
        entities: ents(items),
    };
    s.data()
        .check_absence(req)
        .await
        .expect("CheckAbsence")
        .into_inner()
        .absent
}

pub async fn add_if_absent(s: &TestServer, client: &str, deduper: &str, items: &[&str], ttl_ms: u64) -> Vec<bool> {
    let req = pb::AddIfAbsentRequest {
        record_ids: Vec::new(),
        request_id: None,
        client_id: client.into(),
        deduper: deduper.into(),
        entities: ents(items),
        ttl_ms,
    };
    s.data()
        .add_if_absent(req)
        .await
        .expect("AddIfAbsent")
        .into_inner()
        .absent
}

/// The directory of the large data sets, beside the clone (not in the repository).
pub const SHARED_DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data");

/// A large data set, `../shared/data/<name>`, for the test `test`. When it is
/// absent (a clone on its own) this prints one line saying the test skipped
/// and returns `None`; with `SOLUS_REQUIRE_SHARED_DATA=1` (CI) absence fails
/// the test instead.
pub fn shared_data(test: &str, name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(SHARED_DATA).join(name);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var_os("SOLUS_REQUIRE_SHARED_DATA").is_some_and(|v| v == "1") {
        panic!("{test}: {} is missing and SOLUS_REQUIRE_SHARED_DATA=1", path.display());
    }
    skipped(test, &format!("{} is absent", path.display()));
    None
}

/// Prints one line saying `test` skipped and why. It goes straight to the
/// process's stderr, which the test harness does not capture, so the line
/// shows in `cargo test` output even when the test passes.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {why}");
}

/// CheckAbsence of any number of entities, in requests of 5,000; the
/// answers in order.
pub async fn absent_all<S: AsRef<[u8]>>(
    client: &mut DeduperServiceClient<Channel>,
    client_id: &str,
    deduper: &str,
    items: &[S],
) -> Vec<bool> {
    let mut out = Vec::with_capacity(items.len());
    for chunk in items.chunks(5000) {
        let req = pb::CheckAbsenceRequest {
            record_ids: Vec::new(),
            client_id: client_id.into(),
            deduper: deduper.into(),
            entities: ents(chunk),
        };
        out.extend(
            client
                .check_absence(req)
                .await
                .expect("CheckAbsence")
                .into_inner()
                .absent,
        );
    }
    out
}

/// A channel to a `solus serve` child process on 127.0.0.1:`port` once its
/// gRPC health service answers (polled every 50 ms, up to 15 s); panics
/// when it does not come up (used by the kill -9 tests).
pub async fn connect_when_healthy(port: u16) -> Channel {
    for _ in 0..300 {
        if let Ok(ch) = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect()
            .await
        {
            let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
            let req = tonic_health::pb::HealthCheckRequest { service: String::new() };
            if health.check(req).await.is_ok() {
                return ch;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("server on port {port} did not come up");
}
