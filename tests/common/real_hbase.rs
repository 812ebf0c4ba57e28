//! A real Apache HBase for the tests, started by `deploy/hbase/standalone.sh`.
//!
//! Found, in order: `SOLUS_REAL_HBASE_DIR` (a DIR that `standalone.sh start`
//! has started, as `.ci/run` does); `SOLUS_REAL_HBASE=off` skips; otherwise,
//! with `java` and `mvn` on the PATH, this test process starts its own in a
//! temporary directory (about a minute the first time: Maven fetches the
//! jars) and stops it when the process exits. Without Java or Maven the
//! real-HBase tests print one line saying so and pass without running.
//!
//! Tests share the one HBase one at a time (`RealHbase::exclusive`), each
//! starting from no user tables.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{HbaseSyncClient, THbaseSyncClient};
use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol};
use thrift::transport::{
    ReadHalf, TBufferedReadTransport, TBufferedWriteTransport, TIoChannel, TTcpChannel, WriteHalf,
};

/// A plain Thrift1 client over the buffered transport.
pub type RawClient = HbaseSyncClient<
    TBinaryInputProtocol<TBufferedReadTransport<ReadHalf<TTcpChannel>>>,
    TBinaryOutputProtocol<TBufferedWriteTransport<WriteHalf<TTcpChannel>>>,
>;

/// Connects a plain Thrift1 client (buffered transport, binary protocol).
pub fn connect_raw(addr: SocketAddr) -> RawClient {
    let mut channel = TTcpChannel::new();
    channel
        .open(addr)
        .unwrap_or_else(|e| panic!("connecting to HBase Thrift at {addr}: {e}"));
    let (r, w) = channel.split().unwrap();
    HbaseSyncClient::new(
        TBinaryInputProtocol::new(TBufferedReadTransport::new(r), true),
        TBinaryOutputProtocol::new(TBufferedWriteTransport::new(w), true),
    )
}

/// A running real HBase.
pub struct RealHbase {
    /// The DIR given to `standalone.sh start`.
    pub dir: PathBuf,
    /// Thrift1, buffered transport (Solus's default).
    pub thrift: SocketAddr,
    /// Thrift1, framed transport, if started.
    pub framed: Option<SocketAddr>,
    busy: AtomicBool,
}

/// One test's exclusive use of the real HBase; released on drop (also when
/// the test panics).
pub struct Exclusive(&'static AtomicBool);

impl Drop for Exclusive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

static REAL: OnceLock<Option<RealHbase>> = OnceLock::new();

/// The repository's `deploy/hbase/standalone.sh`.
pub fn standalone_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/hbase/standalone.sh")
}

/// One line straight to stderr: the test harness shows it even for tests
/// that pass (it captures `eprintln!`). Printed once per test process.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn read_port(dir: &Path, name: &str) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    let port: u16 = text.trim().parse().ok()?;
    Some(SocketAddr::from(([127, 0, 0, 1], port)))
}

impl RealHbase {
    /// The shared real HBase, or `None` (with one printed line) when it
    /// cannot be had here.
    pub fn get() -> Option<&'static RealHbase> {
        REAL.get_or_init(Self::find).as_ref()
    }

    fn find() -> Option<RealHbase> {
        if let Ok(dir) = std::env::var("SOLUS_REAL_HBASE_DIR") {
            let dir = PathBuf::from(dir);
            let thrift = read_port(&dir, "thrift.port").unwrap_or_else(|| {
                panic!(
                    "SOLUS_REAL_HBASE_DIR={}: no thrift.port (not started by standalone.sh?)",
                    dir.display()
                )
            });
            return Some(RealHbase {
                framed: read_port(&dir, "thrift-framed.port"),
                dir,
                thrift,
                busy: AtomicBool::new(false),
            });
        }
        if std::env::var("SOLUS_REAL_HBASE").as_deref() == Ok("off") {
            say("skipped: real-HBase tests: SOLUS_REAL_HBASE=off");
            return None;
        }
        for tool in ["java", "mvn"] {
            if !on_path(tool) {
                say(&format!(
                    "skipped: real-HBase tests: no `{tool}` on the PATH (they need Java 11+ and Maven; .ci/run installs and starts them)"
                ));
                return None;
            }
        }
        let dir = std::env::temp_dir().join(format!("solus-real-hbase-{}", std::process::id()));
        let [thrift, framed] = super::ports::free_ports();
        eprintln!(
            "starting a real HBase for these tests in {} (standalone.sh)",
            dir.display()
        );
        let status = Command::new(standalone_script())
            .args(["start", dir.to_str().unwrap(), &thrift.to_string(), &framed.to_string()])
            .status()
            .expect("running deploy/hbase/standalone.sh");
        assert!(status.success(), "deploy/hbase/standalone.sh start failed ({status})");
        // Stop it when this test process exits, however it exits.
        let watchdog = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{script}' stop '{dir}' >/dev/null 2>&1; rm -rf '{dir}'",
            pid = std::process::id(),
            script = standalone_script().display(),
            dir = dir.display()
        );
        #[allow(clippy::zombie_processes)] // it must outlive this process: never waited for
        Command::new("setsid")
            .args(["sh", "-c", &watchdog])
            .spawn()
            .expect("starting the HBase watchdog");
        Some(RealHbase {
            dir,
            thrift: SocketAddr::from(([127, 0, 0, 1], thrift)),
            framed: Some(SocketAddr::from(([127, 0, 0, 1], framed))),
            busy: AtomicBool::new(false),
        })
    }

    /// Exclusive use for one test: waits for the previous test, then drops
    /// every user table so the test starts from an empty HBase.
    pub fn exclusive(&'static self) -> Exclusive {
        while self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let guard = Exclusive(&self.busy);
        self.drop_user_tables();
        guard
    }

    pub fn raw(&self) -> RawClient {
        connect_raw(self.thrift)
    }

    /// Disables and deletes every table but HBase's own, until none is left
    /// for 3 s: the previous test's server may still be shutting down (its
    /// runtime ends after the test released HBase) and re-create a table it
    /// finds missing (`create_tables`).
    pub fn drop_user_tables(&self) {
        let mut raw = self.raw();
        let start = Instant::now();
        let mut empty_since: Option<Instant> = None;
        loop {
            let names: Vec<Vec<u8>> = raw
                .get_table_names()
                .expect("getTableNames")
                .into_iter()
                .filter(|n| !n.starts_with(b"hbase:"))
                .collect();
            if names.is_empty() {
                let since = *empty_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_secs(3) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(250));
                continue;
            }
            empty_since = None;
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "user tables keep coming back: {:?}",
                names
                    .iter()
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .collect::<Vec<_>>()
            );
            for name in names {
                // Errors are expected in races (already disabled, enabling, gone):
                // the loop looks again.
                let _ = raw.disable_table(name.clone());
                let _ = raw.delete_table(name);
            }
        }
    }

    /// Runs `standalone.sh` with the given arguments after the command
    /// (e.g. `["shell", "-n", FILE]`), DIR inserted; panics on failure.
    pub fn script(&self, command: &str, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = Command::new(standalone_script())
            .arg(command)
            .arg(&self.dir)
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("running deploy/hbase/standalone.sh");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "standalone.sh {command} {args:?} failed: {text}");
        text
    }

    /// Pid of a process `standalone.sh` started (`master`, `thrift`).
    pub fn pid(&self, name: &str) -> u32 {
        std::fs::read_to_string(self.dir.join(format!("{name}.pid")))
            .unwrap_or_else(|e| panic!("{name}.pid: {e}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// kill -9 of one of the started processes, waiting until it is gone.
    pub fn kill9(&self, name: &str) {
        let pid = self.pid(name);
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let start = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Restarts whatever is not running (same DIR, data and ports) and waits
    /// until HBase answers again.
    pub fn restart_stopped(&self) {
        let mut args = vec![self.thrift.port().to_string()];
        if let Some(f) = self.framed {
            args.push(f.port().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.script("start", &args, &[]);
    }
}

/// Empty attributes for Thrift calls.
pub fn no_attrs() -> BTreeMap<Vec<u8>, Vec<u8>> {
    BTreeMap::new()
}
