//! The real `solus serve` binary as a child process: environment settings,
//! captured stderr, signals, `/metrics` scrapes, resident memory.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// A running `solus serve`.
pub struct SolusProcess {
    child: Child,
    /// gRPC port (on 127.0.0.1 unless the listen address says otherwise).
    pub port: u16,
    /// `/metrics` port, when metrics are on.
    pub metrics_port: Option<u16>,
    stderr: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl SolusProcess {
    /// Starts the server on a free loopback port over a fresh embedded
    /// store, metrics on a free port, plus `env` (`SOLUS__...` pairs, which
    /// win). Waits until health answers.
    pub async fn start(env: &[(&str, String)]) -> SolusProcess {
        Self::start_on("127.0.0.1", env).await
    }

    /// As [`SolusProcess::start`], listening on `host`.
    pub async fn start_on(host: &str, env: &[(&str, String)]) -> SolusProcess {
        let dir = tempfile::tempdir().unwrap();
        let [port, metrics_port] = crate::common::ports::free_ports();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_solus"));
        cmd.arg("serve")
            .env_remove("RUST_LOG")
            .env("SOLUS__SERVER__LISTEN", format!("{host}:{port}"))
            .env("SOLUS__STORAGE__EMBEDDED__PATH", dir.path().join("data"))
            .env("SOLUS__METRICS__LISTEN", format!("127.0.0.1:{metrics_port}"))
            .env("SOLUS__SERVER__HEALTH_CHECK_INTERVAL_MS", "200");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let metrics_off = env.iter().any(|(k, v)| *k == "SOLUS__METRICS__LISTEN" && v.is_empty());
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning solus serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (pipe, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let p = SolusProcess {
            child,
            port,
            metrics_port: (!metrics_off).then_some(metrics_port),
            stderr,
            _dir: dir,
        };
        p.wait_healthy().await;
        p
    }

    /// The embedded store's data directory.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self._dir.path().join("data")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(ch) = Channel::from_shared(self.url()).unwrap().connect().await {
                let mut health = tonic_health::pb::health_client::HealthClient::new(ch);
                let req = tonic_health::pb::HealthCheckRequest { service: String::new() };
                if health.check(req).await.is_ok() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "solus on port {} did not come up; stderr:\n{}",
            self.port,
            self.stderr()
        );
    }

    /// A fresh connection.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .expect("connect")
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends a signal by name (`TERM`, `HUP`, ...) with `kill`.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("running kill")
            .success();
        assert!(ok, "kill -{name} {}", self.pid());
    }

    /// Waits for the process to exit, at most `limit`; `None` if it did not
    /// (it is then killed).
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the stderr reader drain the pipe.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// The process's anonymous resident memory in KiB (`RssAnon` in
    /// `/proc/<pid>/status`): its heap, stacks and maps, without the pages
    /// of its binary and libraries, which the kernel evicts and faults in
    /// again as page-cache pressure comes and goes.
    pub fn anon_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("reading /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("RssAnon in /proc status")
    }

    /// The `/metrics` page (plain HTTP/1.1 GET).
    pub async fn metrics(&self) -> String {
        let port = self.metrics_port.expect("metrics are on");
        http_get(port, "/metrics").await
    }
}

impl Drop for SolusProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 GET on 127.0.0.1: returns the body of a 200 answer.
pub async fn http_get(port: u16, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting to the metrics port");
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}

/// The value of the series `name` whose labels include every `labels` pair,
/// in a Prometheus text page; `None` when there is no such series.
pub fn metric(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    page.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (series_name, series_labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            return None;
        }
        let has_all = labels
            .iter()
            .all(|(k, v)| series_labels.split(',').any(|pair| pair == format!("{k}=\"{v}\"")));
        has_all.then(|| value.parse().ok()).flatten()
    })
}
