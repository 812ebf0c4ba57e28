//! Kerberos (SASL/GSSAPI) between Solus and a Kerberized HBase's Thrift1
//! servers (issue 19): refusals with reasons, the three qops, what privacy
//! hides on the wire, ticket renewal, large requests.
//!
//! The realm and HBase come, in order: from `SOLUS_KERBEROS_KDC_DIR`,
//! `SOLUS_KERBEROS_HBASE_DIR` and `SOLUS_KERBEROS_THRIFT`
//! (`privacy=host:port,integrity=...,authentication=...`), as `.ci/run`
//! sets them; otherwise, with `krb5kdc`, `java` and `mvn` present, this
//! process starts them with `deploy/kerberos/kdc.sh` and
//! `deploy/hbase/standalone.sh` (Kerberized mode) and stops them when it
//! exits; otherwise every test prints one `skipped:` line and passes.

mod common;
// Two of the suite's functions run here, not the whole list.
#[allow(unused_imports)]
mod suite;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::ports::free_port;
use common::*;
use solus::config::Settings;
use solus::storage::Store;
use solus::storage::hbase::{HbaseConfig, HbaseStore, Qop};

/// A Kerberized HBase with one Thrift server per qop.
struct Realm {
    kdc: PathBuf,
    hbase: PathBuf,
    thrift: BTreeMap<Qop, String>,
}

static REALM: OnceLock<Option<Realm>> = OnceLock::new();
/// Tests that start Solus servers take turns (2 cores, one HBase).
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} || test -x /usr/sbin/{tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn script(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn parse_thrift(list: &str) -> BTreeMap<Qop, String> {
    list.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(q, a)| {
            let qop = match q.trim() {
                "privacy" => Qop::Privacy,
                "integrity" => Qop::Integrity,
                "authentication" => Qop::Authentication,
                other => panic!("SOLUS_KERBEROS_THRIFT: unknown qop {other:?}"),
            };
            (qop, a.trim().to_string())
        })
        .collect()
}

impl Realm {
    fn get() -> Option<&'static Realm> {
        REALM.get_or_init(Self::find).as_ref()
    }

    fn find() -> Option<Realm> {
        if let (Ok(kdc), Ok(hbase), Ok(thrift)) = (
            std::env::var("SOLUS_KERBEROS_KDC_DIR"),
            std::env::var("SOLUS_KERBEROS_HBASE_DIR"),
            std::env::var("SOLUS_KERBEROS_THRIFT"),
        ) {
            return Some(Realm {
                kdc: kdc.into(),
                hbase: hbase.into(),
                thrift: parse_thrift(&thrift),
            });
        }
        for tool in ["krb5kdc", "java", "mvn"] {
            if !on_path(tool) {
                skipped(
                    "Kerberos tests",
                    &format!("no `{tool}` here (they need an MIT KDC, Java and Maven; .ci/run provides them)"),
                );
                return None;
            }
        }
        if !script("deploy/kerberos/kdc.sh").is_file() {
            skipped("Kerberos tests", "no deploy/kerberos/kdc.sh in this checkout");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("solus-kerberos-{}", std::process::id()));
        let (kdc, hbase) = (dir.join("kdc"), dir.join("hbase"));
        eprintln!(
            "starting a KDC and a Kerberized HBase for these tests in {}",
            dir.display()
        );
        run(Command::new(script("deploy/kerberos/kdc.sh")).arg("start").arg(&kdc));
        // Stop both when this process exits, however it exits.
        let watchdog = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{hb}' stop '{hbase}' >/dev/null 2>&1; \
             '{kd}' stop '{kdc}' >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            hb = script("deploy/hbase/standalone.sh").display(),
            kd = script("deploy/kerberos/kdc.sh").display(),
            hbase = hbase.display(),
            kdc = kdc.display(),
            dir = dir.display(),
        );
        #[allow(clippy::zombie_processes)] // it must outlive this process: never waited for
        Command::new("setsid")
            .args(["sh", "-c", &watchdog])
            .spawn()
            .expect("starting the watchdog");
        let mut thrift = BTreeMap::new();
        let privacy = free_port();
        run(Command::new(script("deploy/hbase/standalone.sh"))
            .arg("start")
            .arg(&hbase)
            .arg(privacy.to_string())
            .env("SOLUS_HBASE_KERBEROS", &kdc)
            .env("SOLUS_HBASE_THRIFT_QOP", "privacy")
            .env("SOLUS_HBASE_GRANTS", "solus:RWXCA solus-short:RWXCA"));
        thrift.insert(Qop::Privacy, format!("127.0.0.1:{privacy}"));
        for qop in [Qop::Integrity, Qop::Authentication] {
            let port = free_port();
            run(Command::new(script("deploy/hbase/standalone.sh"))
                .arg("thrift")
                .arg(&hbase)
                .arg(port.to_string())
                .arg(qop.name()));
            thrift.insert(qop, format!("127.0.0.1:{port}"));
        }
        Some(Realm { kdc, hbase, thrift })
    }

    /// HBase settings for the server of `qop` as `keytab`'s principal.
    fn config(&self, qop: Qop, keytab: &str) -> HbaseConfig {
        let mut h = HbaseConfig {
            addresses: vec![self.thrift[&qop].clone()],
            read_timeout_ms: 20_000,
            write_timeout_ms: 20_000,
            connect_timeout_ms: 2_000,
            retries: 0,
            max_clock_offset_ms: 0,
            ..HbaseConfig::default()
        };
        let k = &mut h.kerberos;
        k.enabled = true;
        k.min_qop = qop;
        k.keytab = self.kdc.join(keytab).display().to_string();
        k.krb5_config = self.kdc.join("krb5.conf").display().to_string();
        // The addresses are 127.0.0.1; the server's principal is hbase/localhost.
        k.server_host = "localhost".into();
        h
    }

    fn settings(&self, qop: Qop, keytab: &str) -> Settings {
        let mut s = TestBackend::hbase_settings_for(&self.thrift[&qop]);
        s.storage.hbase = self.config(qop, keytab);
        s.server.drain_timeout_ms = 500;
        s
    }
}

/// A table name no other test uses, also the marker the wire tests look for.
fn unique(what: &str) -> String {
    format!("solus_{what}_{:08x}", rand::random::<u32>())
}

fn open(config: HbaseConfig, table: &str) -> Result<HbaseStore, String> {
    HbaseStore::open(config, table, "dc1").map_err(|e| e.to_string())
}

fn ping(config: HbaseConfig, table: &str) -> Result<(), String> {
    open(config, table)?.ping().map_err(|e| e.to_string())
}

macro_rules! realm {
    () => {
        match Realm::get() {
            Some(r) => r,
            None => return,
        }
    };
}

/// Bytes recorded in one direction.
type Log = Arc<Mutex<Vec<u8>>>;

/// A TCP proxy to `target` recording both directions (client to server first).
struct Recorder {
    addr: SocketAddr,
    up: Log,
    down: Log,
    /// Connections accepted.
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Recorder {
    fn start(target: &str) -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, down): (Log, Log) = (Arc::default(), Arc::default());
        let (u, d) = (Arc::clone(&up), Arc::clone(&down));
        let target = target.to_string();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let pipe = |mut from: TcpStream, mut to: TcpStream, log: Log| {
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 65536];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                            log.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                };
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap(), u.clone());
                pipe(server, client, d.clone());
            }
        });
        Recorder {
            addr,
            up,
            down,
            accepted,
        }
    }

    fn seen(&self, marker: &[u8]) -> bool {
        [&self.up, &self.down]
            .iter()
            .any(|log| log.lock().unwrap().windows(marker.len()).any(|w| w == marker))
    }

    /// Lengths of the client's frames after negotiation, one connection
    /// recorded: SASL messages (status, 4-byte length, payload) up to the
    /// client's COMPLETE, then 4-byte-length frames.
    fn client_frames(&self) -> Vec<usize> {
        let bytes = self.up.lock().unwrap().clone();
        let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let mut at = 0;
        loop {
            let (status, len) = (bytes[at], be(at + 1));
            at += 5 + len;
            if status == 5 {
                break;
            }
        }
        let mut frames = Vec::new();
        while at + 4 <= bytes.len() {
            frames.push(be(at));
            at += 4 + be(at);
        }
        frames
    }
}

#[test]
fn a_missing_library_is_named_at_start_up() {
    let mut c = HbaseConfig::default();
    c.kerberos.enabled = true;
    c.kerberos.library = "/nonexistent/libgssapi_krb5.so.2".into();
    let e = open(c, "solus_x").err().unwrap();
    assert!(
        e.contains("/nonexistent/libgssapi_krb5.so.2") && e.contains("libgssapi-krb5-2"),
        "{e}"
    );
}

#[test]
fn kerberos_with_the_framed_transport_is_refused_at_start_up() {
    let mut c = HbaseConfig::default();
    c.kerberos.enabled = true;
    c.transport = solus::storage::hbase::Transport::Framed;
    let e = open(c, "solus_x").err().unwrap();
    assert!(e.contains("buffered transport only"), "{e}");
    // And through the settings loader, naming the key.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("solus.toml");
    std::fs::write(
        &file,
        "[storage]\nbackend = \"hbase\"\n[storage.hbase]\ntransport = \"framed\"\n[storage.hbase.kerberos]\nenabled = true\n",
    )
    .unwrap();
    let e = Settings::load(Some(&file)).err().unwrap().to_string();
    assert!(
        e.contains("storage.hbase.kerberos.enabled") && e.contains("buffered"),
        "{e}"
    );
}

#[test]
fn connections_older_than_max_connection_age_are_reopened() {
    // No Kerberos needed: the emulator behind a counting proxy.
    let emulator = hbase_emulator::Emulator::start("127.0.0.1:0").unwrap();
    for (age, reopened) in [(1, true), (0, false)] {
        let recorder = Recorder::start(&emulator.addr().to_string());
        let c = HbaseConfig {
            addresses: vec![recorder.addr.to_string()],
            pool_size: 1,
            max_clock_offset_ms: 0,
            max_connection_age_seconds: age,
            ..HbaseConfig::default()
        };
        let store = open(c, &unique("age")).unwrap();
        store.ping().unwrap();
        let first = recorder.accepted.load(std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(1_500));
        store.ping().unwrap();
        let after = recorder.accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(after > first, reopened, "age {age}: {first} then {after} connections");
    }
}

#[test]
fn a_plain_solus_against_a_sasl_server_is_refused_quickly_with_a_hint() {
    let realm = realm!();
    let mut c = realm.config(Qop::Privacy, "solus.keytab");
    c.kerberos.enabled = false;
    c.read_timeout_ms = 1_500;
    let started = Instant::now();
    let e = ping(c, &unique("plain")).unwrap_err();
    assert!(
        e.contains("storage.hbase.kerberos.enabled") && e.contains("hbase.thrift.security.qop"),
        "{e}"
    );
    // Open's probe and ping's, each bounded by the read timeout.
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
}

#[test]
fn a_kerberized_solus_against_a_plain_server_says_so_quickly() {
    let realm = realm!();
    // A plain Thrift server: the emulator speaks Thrift1 without SASL.
    let emulator = hbase_emulator::Emulator::start("127.0.0.1:0").unwrap();
    let mut c = realm.config(Qop::Privacy, "solus.keytab");
    c.addresses = vec![emulator.addr().to_string()];
    let started = Instant::now();
    let e = ping(c, &unique("noserver")).unwrap_err();
    assert!(
        e.contains("did not answer SASL negotiation") && e.contains("hbase.thrift.security.qop"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(12), "{:?}", started.elapsed());
}

#[test]
fn without_credentials_the_error_carries_the_gssapi_reason() {
    let realm = realm!();
    let mut c = realm.config(Qop::Privacy, "solus.keytab");
    c.kerberos.keytab = String::new();
    c.kerberos.ticket_cache = "FILE:/nonexistent/krb5cc_solus".into();
    let e = ping(c, &unique("nocred")).unwrap_err();
    assert!(e.contains("storage.hbase.kerberos.ticket_cache"), "{e}");
    assert!(
        e.contains("GSSAPI major") && e.contains("/nonexistent/krb5cc_solus"),
        "{e}"
    );
}

#[test]
fn a_wrong_server_host_names_the_principal_and_the_setting() {
    let realm = realm!();
    let mut c = realm.config(Qop::Privacy, "solus.keytab");
    c.kerberos.server_host = "nohost".into();
    let e = ping(c, &unique("wronghost")).unwrap_err();
    assert!(e.contains("not found in Kerberos database"), "{e}");
    assert!(
        e.contains("hbase/nohost") && e.contains("storage.hbase.kerberos.server_host"),
        "{e}"
    );
}

#[test]
fn each_qop_works_and_a_weaker_server_is_refused_never_downgraded() {
    let realm = realm!();
    for qop in Qop::ALL {
        ping(realm.config(qop, "solus.keytab"), &unique("qop")).unwrap_or_else(|e| panic!("{qop:?}: {e}"));
    }
    for (server, min) in [
        (Qop::Authentication, Qop::Privacy),
        (Qop::Integrity, Qop::Privacy),
        (Qop::Authentication, Qop::Integrity),
    ] {
        let mut c = realm.config(server, "solus.keytab");
        c.kerberos.min_qop = min;
        let e = ping(c, &unique("downgrade")).unwrap_err();
        let want = format!(
            "offers the security layer {} only, and storage.hbase.kerberos.min_qop = {}",
            server.name(),
            min.name()
        );
        assert!(e.contains(&want), "{server:?} {min:?}: {e}");
    }
    // A lower minimum takes the stronger layer a server offers.
    let mut c = realm.config(Qop::Privacy, "solus.keytab");
    c.kerberos.min_qop = Qop::Authentication;
    ping(c, &unique("upgrade")).unwrap();
}

#[test]
fn privacy_hides_a_marker_on_the_wire_and_authentication_shows_it() {
    let realm = realm!();
    for (qop, visible) in [
        (Qop::Privacy, false),
        (Qop::Integrity, true),
        (Qop::Authentication, true),
    ] {
        let recorder = Recorder::start(&realm.thrift[&qop]);
        let mut c = realm.config(qop, "solus.keytab");
        c.addresses = vec![recorder.addr.to_string()];
        // The table name travels in every call (createTable, isTableEnabled, ...).
        let marker = unique("marker");
        ping(c, &marker).unwrap_or_else(|e| panic!("{qop:?}: {e}"));
        assert_eq!(recorder.seen(marker.as_bytes()), visible, "{qop:?}");
        assert!(
            !recorder.client_frames().is_empty(),
            "{qop:?}: no frame after negotiation"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_of_a_mebibyte_and_more_under_privacy() {
    let realm = realm!();
    let _turn = TURN.lock().await;
    let recorder = Recorder::start(&realm.thrift[&Qop::Privacy]);
    let mut settings = realm.settings(Qop::Privacy, "solus.keytab");
    settings.storage.table = unique("large");
    settings.limits.max_entities_per_request = 20_000;
    let h = &mut settings.storage.hbase;
    h.addresses = vec![recorder.addr.to_string()];
    // One connection (the recorder parses one byte stream); split calls wait for it.
    h.pool_size = 1;
    h.connect_timeout_ms = 60_000;
    h.max_request_bytes = 4 << 20;
    h.max_cells_per_read = 1 << 20;
    let s = TestServer::start_with(settings).await;
    let client = unique("big");
    s.admin()
        .create_deduper(create_geom(&client, "d", 7, 1, 1 << 24, 3600))
        .await
        .unwrap();
    let owned: Vec<String> = (0..20_000).map(|i| format!("entity-{i}")).collect();
    let entities: Vec<&str> = owned.iter().map(String::as_str).collect();
    assert_eq!(add(&s, &client, "d", &entities, 0).await, 20_000);
    let answers = absent(&s, &client, "d", &entities).await;
    assert!(answers.iter().all(|a| !a), "an added entity answered absent");
    let largest = recorder.client_frames().into_iter().max().unwrap();
    assert!(largest >= 1 << 20, "largest frame {largest} bytes");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_runs_over_kerberos_and_hbase_logs_the_solus_principal() {
    let realm = realm!();
    let _turn = TURN.lock().await;
    let mut settings = realm.settings(Qop::Privacy, "solus.keytab");
    let table = unique("suite");
    settings.storage.table = table.clone();
    let backend = TestBackend::with_settings("kerberized-hbase", settings);
    suite::data_add_check_add_if_absent(&backend).await;
    suite::admin_create_get_list_update(&backend).await;
    // The AccessController's audit lines name the caller: Solus's principal.
    let log = std::fs::read_to_string(realm.hbase.join("logs/master.log")).unwrap_or_default();
    let line = log.lines().find(|l| l.contains(&table) && l.contains("create"));
    assert!(
        line.is_some_and(|l| l.contains("Client=solus/") || l.contains("user=solus")),
        "no create of {table} by solus in master.log: {line:?}"
    );
}

/// What an AccessDenied for solus-short means here.
const GRANT_HINT: &str = " (solus-short needs rights: start the Kerberized HBase with \
                          SOLUS_HBASE_GRANTS=\"solus:RWXCA solus-short:RWXCA\")";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_tickets_are_renewed_without_a_restart() {
    let realm = realm!();
    let _turn = TURN.lock().await;
    // 20-second tickets; connections re-opened every 4 s.
    let mut c = realm.config(Qop::Privacy, "short.keytab");
    c.max_connection_age_seconds = 4;
    c.pool_size = 2;
    let table = unique("short");
    // The KDC logs every ticket it issues: new ones must come from the keytab.
    let issued = || {
        std::fs::read_to_string(realm.kdc.join("kdc.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("AS_REQ") && l.contains("ISSUE") && l.contains("solus-short/"))
            .count()
    };
    let before = issued();
    let store = tokio::task::spawn_blocking(move || open(c, &table).unwrap())
        .await
        .unwrap();
    let store = Arc::new(store);
    let started = Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_secs(50) {
        let s = store.clone();
        tokio::task::spawn_blocking(move || s.ping())
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("after {:?}: {e}{}", started.elapsed(), GRANT_HINT));
        pings += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(pings >= 15, "{pings}");
    // 50 s of 20 s tickets: at least two more fetched without kinit.
    assert!(
        issued() >= before + 3,
        "tickets issued: {before} before, {} after",
        issued()
    );
}
