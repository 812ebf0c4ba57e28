//! Layered settings: built-in defaults < optional TOML file < environment
//! variables `SOLUS__<SECTION>__<KEY>` (e.g. `SOLUS__SERVER__LISTEN`).

use std::net::SocketAddr;

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::deduper::SizeLimits;
use crate::engine::Limits;
use crate::storage::embedded::EmbeddedConfig;
use crate::storage::hbase::HbaseConfig;

/// All settings; every field has a default, so no file is needed.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub limits: LimitsConfig,
    /// This datacenter's name: DC-level dedupers use the `<table>_<farm>` data
    /// table on HBase. Default `dc1`.
    pub farm: String,
    pub log: LogConfig,
    pub auth: AuthConfig,
    pub metrics: MetricsConfig,
    pub stats: StatsConfig,
    pub resize: ResizeConfig,
}

/// The automatic resize policy (`resize.*`): see `engine::resize` and
/// docs/operations.md, "Resizing a deduper online".
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResizeConfig {
    /// Resize a deduper sized from n and p by itself when its load stays
    /// high. Default false.
    pub auto: bool,
    /// Load (estimated live entities / n) above which a statistics pass
    /// counts towards a resize. Default 0.9.
    pub load_threshold: f64,
    /// Consecutive statistics passes above the threshold that start a
    /// resize. Default 3.
    pub passes: u32,
    /// Also resize at once when the load, projected linearly from the last
    /// two passes one pass interval plus the switch's grace ahead, reaches
    /// 1.0 (from load 0.5 up). Default true.
    pub projection: bool,
    /// The successor is sized for this multiple of the estimated live
    /// entities. Default 4.0.
    pub growth: f64,
    /// Largest n the policy sizes a successor for (count); at it, the
    /// policy logs that the deduper is at its ceiling instead. Default
    /// 1,000,000,000.
    pub max_expected_insertions: u64,
}

impl Default for ResizeConfig {
    fn default() -> Self {
        ResizeConfig {
            auto: false,
            load_threshold: 0.9,
            passes: 3,
            projection: true,
            growth: 4.0,
            max_expected_insertions: 1_000_000_000,
        }
    }
}

/// Live deduper statistics (`stats.*`): see `engine::stats` and docs/operations.md.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatsConfig {
    /// How often the background pass recomputes every known deduper's
    /// figures, in ms (0 turns the pass off). Default 60,000.
    pub refresh_interval_ms: u64,
    /// Bits sampled per deduper and pass where the backend cannot count
    /// them all (HBase): the relative standard error of the estimated live
    /// entities is about 1/sqrt(sample_bits) (0.4% at the default 65,536;
    /// see docs/operations.md for the formula). Default 65,536.
    pub sample_bits: u64,
    /// Log a warning (once, until it recovers) when a deduper's estimated
    /// false-positive rate exceeds this multiple of its sized p. Default 2.
    pub over_capacity_fpr_factor: f64,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            refresh_interval_ms: 60_000,
            sample_bits: 65_536,
            over_capacity_fpr_factor: 2.0,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// gRPC listen address. Default `127.0.0.1:50051`.
    pub listen: SocketAddr,
    /// How often storage reachability is probed for health, in ms. Default 2,000.
    pub health_check_interval_ms: u64,
    /// Longest time any request may take, in ms, when the client sets no
    /// shorter deadline; past it the answer is `DEADLINE_EXCEEDED`. Default 30,000.
    pub request_timeout_ms: u64,
    /// On SIGTERM/SIGINT: how long in-flight requests may still run, in ms,
    /// after health turns `NOT_SERVING` and new requests are refused; then
    /// the remaining connections are closed, storage is flushed and the
    /// process exits 0. Default 20,000.
    pub drain_timeout_ms: u64,
    /// Extra plaintext listener serving only `grpc.health.v1.Health`, e.g.
    /// `0.0.0.0:50052`, for probes that cannot speak TLS (Kubernetes' native
    /// gRPC probes) when `server.tls` is on. Empty = off (default).
    pub health_listen: String,
    /// Most client connections open at once on `server.listen` (a count);
    /// further connections wait in the listen backlog, not accepted, until
    /// one closes (logged once per episode). Bounds the memory idle and
    /// slow-reading connections take. Default 1,024.
    pub max_connections: usize,
    /// Most HTTP/2 streams (calls) one connection may have open at once,
    /// advertised to the client as SETTINGS_MAX_CONCURRENT_STREAMS (a
    /// count); a client queues its further calls itself. An answer the
    /// client does not read keeps its stream open, so this bounds the
    /// answers waiting on one connection. Default 100.
    pub max_concurrent_streams: u32,
    /// Most streams of one connection the client may reset before the
    /// server has taken them up (a count); beyond it the connection is
    /// closed with GOAWAY ENHANCE_YOUR_CALM "too_many_resets" (the HTTP/2
    /// rapid-reset defence, CVE-2023-44487). A client recovering from a
    /// server stall resets up to `max_concurrent_streams` streams per
    /// deadline it waited through, all read at once when the server
    /// resumes: the default covers a 40 s stall with all 100 streams in use
    /// and 2 s deadlines. Default 2,000.
    pub max_pending_accept_reset_streams: usize,
    pub tls: TlsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: ([127, 0, 0, 1], 50051).into(),
            health_check_interval_ms: 2_000,
            request_timeout_ms: 30_000,
            drain_timeout_ms: 20_000,
            health_listen: String::new(),
            max_connections: 1_024,
            max_concurrent_streams: 100,
            max_pending_accept_reset_streams: 2_000,
            tls: TlsConfig::default(),
        }
    }
}

/// TLS for the gRPC port (rustls). Off unless both `cert_file` and
/// `key_file` are set; plaintext on a non-loopback address logs a warning.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Server certificate chain, PEM. Default none (plaintext).
    pub cert_file: Option<PathBuf>,
    /// Private key of `cert_file`, PEM (PKCS#8, PKCS#1 or SEC1). Default none.
    pub key_file: Option<PathBuf>,
    /// CA certificates, PEM: when set, every client must present a
    /// certificate signed by one of them (mutual TLS); the TLS handshake of
    /// a client without one fails. Default none.
    pub client_ca_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Whether the gRPC port speaks TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }
}

/// Bearer-token authentication (see `crate::auth`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Require `authorization: Bearer <token>` on every Solus RPC: none or
    /// an unknown token gets `UNAUTHENTICATED`, another client's dedupers
    /// `PERMISSION_DENIED`. Default false.
    pub enabled: bool,
    /// Lines of `<token> <client_id>` (`*` = admin, `#` comments); re-read
    /// on SIGHUP (a bad file keeps the previous tokens). Required when
    /// `enabled`. Default none.
    pub tokens_file: Option<PathBuf>,
}

/// Prometheus metrics (see `crate::metrics`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// `host:port` of the plain-HTTP `/metrics` listener; `""` turns metrics
    /// off. Default `127.0.0.1:9464`.
    pub listen: String,
    /// Most (client, deduper) label pairs the per-deduper series take; the
    /// dedupers beyond are counted under `client="_other", deduper="_other"`
    /// (counters) and get no per-deduper gauges; a deleted deduper's pair is
    /// freed. Default 1,000.
    pub max_deduper_series: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
            max_deduper_series: 1000,
        }
    }
}

/// Which storage backend serves the data.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// In-process, persistent, nothing to install (default).
    #[default]
    Embedded,
    /// Apache HBase through its Thrift1 server (`storage.hbase`).
    Hbase,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    pub backend: Backend,
    /// Data table name for global dedupers (HBase). Default `solus_deduper`.
    pub table: String,
    pub embedded: EmbeddedConfig,
    pub hbase: HbaseConfig,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: Backend::Embedded,
            table: "solus_deduper".into(),
            embedded: EmbeddedConfig::default(),
            hbase: HbaseConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most entities in one data request. Default 10,000.
    pub max_entities_per_request: usize,
    /// Largest entity, in bytes. Default 4,096.
    pub max_entity_bytes: usize,
    /// Largest decoded gRPC message, in bytes; a larger one is answered
    /// `RESOURCE_EXHAUSTED` before it is read. Default 16 MiB.
    pub max_message_bytes: usize,
    /// Most Solus RPCs served at once; past it a request is answered
    /// `RESOURCE_EXHAUSTED` at once (health and reflection are not
    /// counted). Default 1,024.
    pub max_concurrent_requests: usize,
    /// Most shards a deduper may have. Default 65,536.
    pub max_shards: u32,
    /// Largest shard chosen when sizing from n and p, in bits (sizing never
    /// picks more than 2^30 whatever this says). Default 1,048,576.
    pub max_bits_per_shard: u32,
    /// Accept `CreateDeduper` with an explicit `bits_per_shard` above 2^30,
    /// whose bit positions are biased (`abs(v % m)` of a signed 32-bit `v`
    /// is not uniform when `m` does not divide 2^31), only to attach to
    /// existing data of that geometry; logged at start and at each such
    /// creation. Default false: such a geometry is `INVALID_ARGUMENT`.
    pub allow_biased_bits_per_shard: bool,
    /// How long the answer of an `Add`/`AddIfAbsent` sent with a
    /// `request_id` is remembered, in seconds: a retry within it gets the
    /// first attempt's answer. Default 300.
    pub request_id_window_seconds: u64,
    /// How long a record id (`record_ids`) whose entity was answered absent
    /// is remembered, in seconds, from its latest `AddIfAbsent`: a replay of
    /// that record within it is answered absent again and remembered for
    /// another window. Cover the longest time between two attempts of a
    /// record (a stream job's restart, rebalance, recovery from a checkpoint,
    /// an outage). Default 3,600.
    pub record_id_window_seconds: u64,
    /// Most data requests of one deduper using storage threads at once
    /// (the server has 64); its further requests wait without a thread, so
    /// a deduper whose storage is slow, or a flood on one deduper, cannot
    /// hold up the others. Default 16.
    pub max_storage_tasks_per_deduper: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_entities_per_request: 10_000,
            max_entity_bytes: 4096,
            max_message_bytes: 16 << 20,
            max_concurrent_requests: 1_024,
            max_shards: 65_536,
            max_bits_per_shard: 1 << 20,
            allow_biased_bits_per_shard: false,
            request_id_window_seconds: 300,
            record_id_window_seconds: 3_600,
            max_storage_tasks_per_deduper: crate::engine::lanes::DEFAULT_TASKS_PER_DEDUPER,
        }
    }
}

impl LimitsConfig {
    pub fn engine_limits(&self) -> Limits {
        Limits {
            max_entities_per_request: self.max_entities_per_request,
            max_entity_bytes: self.max_entity_bytes,
            sizes: SizeLimits {
                max_bits_per_shard: self.max_bits_per_shard,
                max_shards: self.max_shards,
                allow_biased_bits_per_shard: self.allow_biased_bits_per_shard,
            },
            request_id_window_ms: self.request_id_window_seconds.saturating_mul(1000),
            record_id_window_ms: self.record_id_window_seconds.saturating_mul(1000),
            max_storage_tasks_per_deduper: self.max_storage_tasks_per_deduper,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter, e.g. `info` or `solus=debug`. `RUST_LOG` wins when set. Default `info`.
    pub level: String,
    /// One JSON object per line instead of text. Default false.
    pub json: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            json: false,
        }
    }
}

/// Every settings key, dotted (`deploy/solus.toml` shows each with its default).
pub const KEYS: &[&str] = &[
    "farm",
    "server.listen",
    "server.health_check_interval_ms",
    "server.request_timeout_ms",
    "server.drain_timeout_ms",
    "server.health_listen",
    "server.max_connections",
    "server.max_concurrent_streams",
    "server.max_pending_accept_reset_streams",
    "server.tls.cert_file",
    "server.tls.key_file",
    "server.tls.client_ca_file",
    "storage.backend",
    "storage.table",
    "storage.embedded.path",
    "storage.embedded.fsync",
    "storage.embedded.checkpoint_interval_ms",
    "storage.embedded.checkpoint_journal_bytes",
    "storage.embedded.sweep_interval_seconds",
    "storage.embedded.max_memory_mib",
    "storage.embedded.cache_mib",
    "storage.embedded.max_request_memory_mib",
    "storage.embedded.start_with_damaged_journal",
    "storage.embedded.max_record_memory_mib",
    "storage.hbase.addresses",
    "storage.hbase.transport",
    "storage.hbase.protocol",
    "storage.hbase.pool_size",
    "storage.hbase.connect_timeout_ms",
    "storage.hbase.read_timeout_ms",
    "storage.hbase.write_timeout_ms",
    "storage.hbase.retries",
    "storage.hbase.retry_backoff_ms",
    "storage.hbase.create_tables",
    "storage.hbase.read_legacy_markers",
    "storage.hbase.max_cells_per_read",
    "storage.hbase.max_request_bytes",
    "storage.hbase.add_if_absent_guard",
    "storage.hbase.max_clock_offset_ms",
    "storage.hbase.max_connection_age_seconds",
    "storage.hbase.kerberos.enabled",
    "storage.hbase.kerberos.service",
    "storage.hbase.kerberos.server_host",
    "storage.hbase.kerberos.min_qop",
    "storage.hbase.kerberos.principal",
    "storage.hbase.kerberos.keytab",
    "storage.hbase.kerberos.ticket_cache",
    "storage.hbase.kerberos.krb5_config",
    "storage.hbase.kerberos.library",
    "limits.max_entities_per_request",
    "limits.max_entity_bytes",
    "limits.max_message_bytes",
    "limits.max_concurrent_requests",
    "limits.max_shards",
    "limits.max_bits_per_shard",
    "limits.allow_biased_bits_per_shard",
    "limits.request_id_window_seconds",
    "limits.record_id_window_seconds",
    "limits.max_storage_tasks_per_deduper",
    "log.level",
    "log.json",
    "auth.enabled",
    "auth.tokens_file",
    "metrics.listen",
    "metrics.max_deduper_series",
    "stats.refresh_interval_ms",
    "stats.sample_bits",
    "stats.over_capacity_fpr_factor",
    "resize.auto",
    "resize.load_threshold",
    "resize.passes",
    "resize.projection",
    "resize.growth",
    "resize.max_expected_insertions",
];

/// The keys whose values are one of a few words, and those words.
const CHOICES: &[(&str, &str)] = &[
    ("storage.backend", "\"embedded\" or \"hbase\""),
    ("storage.hbase.transport", "\"buffered\" or \"framed\""),
    ("storage.hbase.protocol", "\"binary\" or \"compact\""),
    (
        "storage.hbase.kerberos.min_qop",
        "\"authentication\", \"integrity\" or \"privacy\"",
    ),
];

/// Environment variables of the client commands (`--addr` and friends) and
/// of the test suite: `SOLUS_` with one underscore, but not settings.
pub const CLIENT_VARIABLES: &[&str] = &[
    "SOLUS_ADDR",
    "SOLUS_TOKEN",
    "SOLUS_CA_CERT",
    "SOLUS_CLIENT_CERT",
    "SOLUS_CLIENT_KEY",
    "SOLUS_REQUIRE_SHARED_DATA",
];

/// Variables of the repository's scripts and tests (deploy/hbase, the
/// real-HBase tests): not the server's, and not warned about.
const TOOL_VARIABLES: &[&str] = &[
    "SOLUS_REAL_HBASE",
    "SOLUS_REAL_HBASE_DIR",
    "SOLUS_TABLE",
    "SOLUS_FARM",
    "SOLUS_CLIENTS",
    "SOLUS_META_SPLITS",
    "SOLUS_KERBEROS_KDC_DIR",
    "SOLUS_KERBEROS_HBASE_DIR",
    "SOLUS_KERBEROS_THRIFT",
];

/// HBase's framed Thrift server drops frames above
/// `hbase.regionserver.thrift.framed.max_frame_size_in_mb` (2 MB by default).
pub const HBASE_DEFAULT_MAX_FRAME_BYTES: u64 = 2 << 20;

/// The settings environment variable of a dotted key: `server.listen` ->
/// `SOLUS__SERVER__LISTEN`.
pub fn env_name(key: &str) -> String {
    format!("SOLUS__{}", key.replace('.', "__").to_uppercase())
}

/// The dotted key a `SOLUS__...` variable sets (`None` for other variables).
fn key_of_variable(name: &str) -> Option<String> {
    let rest = name.strip_prefix("SOLUS__")?;
    Some(rest.split("__").collect::<Vec<_>>().join(".").to_lowercase())
}

/// Warnings about environment variables that look meant for the server but
/// are ignored: `SOLUS_SERVER_LISTEN` (one underscore, like the client's
/// `SOLUS_ADDR`) instead of `SOLUS__SERVER__LISTEN`.
pub fn environment_warnings(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let mut out: Vec<String> = vars
        .into_iter()
        .filter_map(|(name, _)| {
            let rest = name.strip_prefix("SOLUS_")?;
            if rest.starts_with('_') || CLIENT_VARIABLES.contains(&name.as_str()) {
                return None;
            }
            let flat = rest.to_lowercase();
            let meant = KEYS.iter().find(|k| k.replace('.', "_") == flat);
            // The scripts' and tests' own variables, unless one reads like a setting (SOLUS_FARM).
            let tool = TOOL_VARIABLES.contains(&name.as_str()) || name.starts_with("SOLUS_HBASE_");
            if tool && meant.is_none() {
                return None;
            }
            Some(match meant {
                Some(key) => format!(
                    "environment variable {name} is ignored: settings take two underscores between \
                     SOLUS, section and key; for {key} set {}",
                    env_name(key)
                ),
                None => format!(
                    "environment variable {name} is ignored: settings are SOLUS__<SECTION>__<KEY> with two \
                     underscores (e.g. SOLUS__SERVER__LISTEN; deploy/solus.toml lists the keys), and the \
                     client's variables are {}",
                    CLIENT_VARIABLES[..5].join(", ")
                ),
            })
        })
        .collect();
    out.sort();
    out
}

/// The text between the first pair of backquotes after `marker` in `text`.
fn quoted_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('`')?;
    Some(&rest[..rest.find('`')?])
}

/// A settings error in the server's terms: which key, where it was set (the
/// file or the environment variable), and what is allowed.
fn explain(
    e: config::ConfigError,
    file: Option<&Path>,
    env: &std::collections::HashMap<String, String>,
) -> anyhow::Error {
    let message = e.to_string();
    let shown_file = file.map(|f| f.display().to_string());
    if let Some(f) = &shown_file
        && message.contains("not found")
        && message.contains(f.as_str())
        && !file.is_some_and(Path::exists)
    {
        return anyhow::anyhow!(
            "settings file {f} (--config) does not exist; no file is needed for the defaults, and \
             deploy/solus.toml lists every key with its default"
        );
    }
    // Where a key was set: an environment variable wins over the file.
    let origin = |key: &str| -> String {
        let from_env = env
            .keys()
            .filter_map(|name| Some((name, key_of_variable(name)?)))
            .find(|(_, k)| k == key || k.starts_with(&format!("{key}.")));
        match (from_env, &shown_file) {
            (Some((name, _)), _) => format!("from environment variable {name}"),
            (None, Some(f)) => format!("in {f}"),
            (None, None) => "in the environment".to_string(),
        }
    };
    // Drop the location the config crate appends ("... in file.toml"): ours is said once.
    let message = match &shown_file {
        Some(f) => message.trim_end_matches(&format!(" in {f}")).to_string(),
        None => message,
    };
    let section = quoted_after(&message, "for key ");
    if let Some(field) = quoted_after(&message, "unknown field ") {
        let key = section.map_or(field.to_string(), |s| format!("{s}.{field}"));
        // Direct children of the section (or the top level): keys, and sub-sections as `name.*`.
        let mut known: Vec<String> = Vec::new();
        for k in KEYS {
            let rest = match section {
                Some(s) => match k.strip_prefix(s).and_then(|r| r.strip_prefix('.')) {
                    Some(rest) => rest,
                    None => continue,
                },
                None => k,
            };
            let shown = match rest.split_once('.') {
                Some((sub, _)) => format!("{sub}.*"),
                None => rest.to_string(),
            };
            if !known.contains(&shown) {
                known.push(shown);
            }
        }
        let within = section.map_or("the top level".to_string(), |s| format!("[{s}]"));
        let flat = key.replace('.', "_");
        let meant = KEYS
            .iter()
            .find(|k| k.replace('.', "_") == flat)
            .map(|k| format!(" (did you mean {k}, or {} in the environment?)", env_name(k)))
            .unwrap_or_default();
        return anyhow::anyhow!(
            "unknown setting {key} {}{meant}; {within} has {}; deploy/solus.toml lists every key with its default",
            origin(&key),
            known.join(", ")
        );
    }
    let Some(key) = section else {
        return anyhow::anyhow!(
            "settings{}: {message}",
            shown_file.map(|f| format!(" file {f}")).unwrap_or_default()
        );
    };
    if let Some((_, allowed)) = CHOICES.iter().find(|(k, _)| *k == key) {
        let given = message
            .split("variant constructor ")
            .nth(1)
            .and_then(|r| r.split(" for key").next())
            .map(|v| format!(" = {v:?}"))
            .unwrap_or_default();
        return anyhow::anyhow!("{key}{given} {} is not allowed: use {allowed}", origin(key));
    }
    let hint = match key {
        "server.listen" => "; give host:port, e.g. 127.0.0.1:50051",
        _ => "",
    };
    anyhow::anyhow!("{message} ({}){hint}", origin(key))
}

/// Why the address `addr` of the listen setting `key` cannot be bound, and
/// what to do: which setting (and variable) moves it, how to find the
/// process holding the port, and for `metrics.listen` how to turn it off.
pub fn bind_error(key: &str, addr: impl std::fmt::Display, e: &std::io::Error) -> anyhow::Error {
    let var = env_name(key);
    let off = if key == "metrics.listen" {
        format!("; or turn metrics off with {key} = \"\" ({var}=)")
    } else {
        String::new()
    };
    let port = addr
        .to_string()
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .unwrap_or_default();
    match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "{key} {addr}: the port is already in use by another process (another `solus serve`? `ss -ltnp \
             'sport = :{port}'` shows which). Stop it, or choose a free port: {key} in the --config file, or \
             {var}=<host:port>{off}"
        ),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "{key} {addr}: not allowed to listen there ({e}; ports below 1024 need privileges). Choose a port \
             above 1023: {key} in the --config file, or {var}=<host:port>{off}"
        ),
        std::io::ErrorKind::AddrNotAvailable => anyhow::anyhow!(
            "{key} {addr}: that address is not one of this machine's ({e}). Use 127.0.0.1 (this machine only), \
             0.0.0.0 (every interface) or one of its addresses: {key} in the --config file, or {var}=<host:port>{off}"
        ),
        _ => anyhow::anyhow!(
            "{key} {addr}: cannot listen there: {e}. Set another address: {key} in the --config file, or \
             {var}=<host:port>{off}"
        ),
    }
}

impl Settings {
    /// Defaults, then `file` when given, then `SOLUS__*` environment variables.
    /// Errors name the key, the file or variable that set it, and what is allowed.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Settings> {
        Self::load_with_env(file, None)
    }

    /// As [`Settings::load`], reading `SOLUS__*` variables from `env` instead
    /// of the process environment when given (tests).
    pub fn load_with_env(
        file: Option<&Path>,
        env: Option<std::collections::HashMap<String, String>>,
    ) -> anyhow::Result<Settings> {
        let seen: std::collections::HashMap<String, String> = match &env {
            Some(env) => env.clone(),
            None => std::env::vars().filter(|(k, _)| k.starts_with("SOLUS__")).collect(),
        };
        let mut builder = config::Config::builder();
        if let Some(f) = file {
            builder = builder.add_source(config::File::from(f).format(config::FileFormat::Toml).required(true));
        }
        builder = builder.add_source(
            config::Environment::with_prefix("SOLUS")
                .separator("__")
                .try_parsing(true)
                .source(env),
        );
        let settings: Settings = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| explain(e, file, &seen))?;
        settings.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(settings)
    }

    /// Settings that are allowed but probably a mistake, one sentence each
    /// (logged as warnings at start-up).
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.resize.auto && self.stats.refresh_interval_ms == 0 {
            out.push(
                "resize.auto is on but stats.refresh_interval_ms = 0 turns the statistics pass off, and the \
                 automatic resize decides on its figures: no deduper is resized by itself; set \
                 stats.refresh_interval_ms (default 60000)"
                    .to_string(),
            );
        }
        let h = &self.storage.hbase;
        if self.storage.backend == Backend::Hbase
            && h.transport == crate::storage::hbase::Transport::Framed
            && h.max_request_bytes > HBASE_DEFAULT_MAX_FRAME_BYTES
        {
            out.push(format!(
                "storage.hbase.max_request_bytes = {} is above the 2 MiB frame limit of HBase's framed Thrift \
                 server (hbase.regionserver.thrift.framed.max_frame_size_in_mb, default 2): unless that limit was \
                 raised, large requests will fail with \"Broken pipe\"; set it to at most {} (default 1048576)",
                h.max_request_bytes, HBASE_DEFAULT_MAX_FRAME_BYTES
            ));
        }
        out
    }

    fn validate(&self) -> Result<(), config::ConfigError> {
        let bad = |m: String| Err(config::ConfigError::Message(m));
        let l = &self.limits;
        if l.max_bits_per_shard == 0 || l.max_bits_per_shard > crate::contract::MAX_BITS_PER_SHARD {
            return bad(format!(
                "limits.max_bits_per_shard must be 1 to 2147483647, got {}",
                l.max_bits_per_shard
            ));
        }
        if l.max_shards == 0 {
            return bad("limits.max_shards must be at least 1".into());
        }
        if l.max_entities_per_request == 0 || l.max_entity_bytes == 0 || l.max_message_bytes < 1024 {
            return bad(
                "limits.max_entities_per_request and max_entity_bytes must be > 0, max_message_bytes >= 1024".into(),
            );
        }
        if self.farm.is_empty() {
            return bad("farm must not be empty".into());
        }
        if l.max_concurrent_requests == 0 {
            return bad("limits.max_concurrent_requests must be at least 1".into());
        }
        if l.max_storage_tasks_per_deduper == 0 {
            return bad("limits.max_storage_tasks_per_deduper must be at least 1".into());
        }
        let server = &self.server;
        let http2: [(&str, u64); 3] = [
            ("server.max_connections", server.max_connections as u64),
            (
                "server.max_concurrent_streams",
                u64::from(server.max_concurrent_streams),
            ),
            (
                "server.max_pending_accept_reset_streams",
                server.max_pending_accept_reset_streams as u64,
            ),
        ];
        if let Some((key, got)) = http2.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{key} must be at least 1, got {got}"));
        }
        let tls = &self.server.tls;
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            return bad("server.tls.cert_file and server.tls.key_file must be set together".into());
        }
        if tls.client_ca_file.is_some() && !tls.enabled() {
            return bad("server.tls.client_ca_file needs server.tls.cert_file and key_file".into());
        }
        if self.auth.enabled && self.auth.tokens_file.is_none() {
            return bad("auth.enabled needs auth.tokens_file".into());
        }
        if !self.metrics.listen.is_empty() && self.metrics.listen.parse::<SocketAddr>().is_err() {
            return bad(format!(
                "metrics.listen must be host:port (e.g. 127.0.0.1:9464) or empty, got {:?}",
                self.metrics.listen
            ));
        }
        if self.storage.backend == Backend::Hbase {
            self.storage.hbase.validate().or_else(bad)?;
        }
        let r = &self.resize;
        // One message per key, naming it and its value.
        let checks: [(&str, bool, String, &str); 4] = [
            (
                "resize.load_threshold",
                r.load_threshold > 0.0,
                r.load_threshold.to_string(),
                "> 0",
            ),
            ("resize.growth", r.growth > 1.0, r.growth.to_string(), "> 1"),
            ("resize.passes", r.passes >= 1, r.passes.to_string(), "at least 1"),
            (
                "resize.max_expected_insertions",
                r.max_expected_insertions >= 1,
                r.max_expected_insertions.to_string(),
                "at least 1",
            ),
        ];
        if let Some((key, _, got, rule)) = checks.iter().find(|c| !c.1) {
            return bad(format!("{key} must be {rule}, got {got}"));
        }
        Ok(())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            server: ServerConfig::default(),
            storage: StorageConfig::default(),
            limits: LimitsConfig::default(),
            farm: "dc1".into(),
            log: LogConfig::default(),
            auth: AuthConfig::default(),
            metrics: MetricsConfig::default(),
            stats: StatsConfig::default(),
            resize: ResizeConfig::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by a new user's trial: the message listed all four keys'
    /// rules and values, not which one was wrong; and an automatic resize
    /// with the statistics pass off started silently and never ran.
    #[test]
    fn resize_settings_name_the_wrong_key_and_warn_without_a_statistics_pass() {
        let load = |pairs: &[(&str, &str)]| {
            let env = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Settings::load_with_env(None, Some(env))
        };
        let e = load(&[("SOLUS__RESIZE__GROWTH", "1")]).unwrap_err().to_string();
        assert!(e.contains("resize.growth must be > 1, got 1"), "{e}");
        assert!(!e.contains("load_threshold"), "{e}");
        let e = load(&[("SOLUS__RESIZE__PASSES", "0")]).unwrap_err().to_string();
        assert!(e.contains("resize.passes must be at least 1, got 0"), "{e}");
        let s = load(&[
            ("SOLUS__RESIZE__AUTO", "true"),
            ("SOLUS__STATS__REFRESH_INTERVAL_MS", "0"),
        ])
        .unwrap();
        assert!(
            s.warnings()
                .iter()
                .any(|w| w.contains("resize.auto") && w.contains("stats.refresh_interval_ms"))
        );
        assert!(load(&[("SOLUS__RESIZE__AUTO", "true")]).unwrap().warnings().is_empty());
    }

    #[test]
    fn defaults_need_no_file() {
        let s = Settings::load(None).unwrap();
        assert_eq!(s.server.listen.to_string(), "127.0.0.1:50051");
        assert_eq!(s.storage.backend, Backend::Embedded);
        assert_eq!(s.storage.table, "solus_deduper");
        assert_eq!(s.farm, "dc1");
        assert_eq!(s.limits.max_entities_per_request, 10_000);
        assert_eq!(s.limits.max_entity_bytes, 4096);
    }

    #[test]
    fn example_file_matches_the_defaults() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/solus.toml"));
        let s = Settings::load(Some(path)).unwrap();
        assert_eq!(format!("{s:?}"), format!("{:?}", Settings::default()));
    }

    #[test]
    fn file_then_environment_override() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(
            &file,
            "farm = \"eu\"\n[limits]\nmax_shards = 10\n[storage.embedded]\nfsync = true\n",
        )
        .unwrap();
        let mut env = std::collections::HashMap::new();
        env.insert("SOLUS__LIMITS__MAX_SHARDS".to_string(), "20".to_string());
        env.insert("SOLUS__SERVER__LISTEN".to_string(), "0.0.0.0:1234".to_string());
        let s = Settings::load_with_env(Some(&file), Some(env)).unwrap();
        assert_eq!((s.farm.as_str(), s.limits.max_shards), ("eu", 20));
        assert!(s.storage.embedded.fsync);
        assert_eq!(s.server.listen.to_string(), "0.0.0.0:1234");
    }

    #[test]
    fn biased_geometries_are_refused_unless_switched_on() {
        let s = Settings::load(None).unwrap();
        assert!(!s.limits.engine_limits().sizes.allow_biased_bits_per_shard);
        let mut env = std::collections::HashMap::new();
        env.insert(
            "SOLUS__LIMITS__ALLOW_BIASED_BITS_PER_SHARD".to_string(),
            "true".to_string(),
        );
        let s = Settings::load_with_env(None, Some(env)).unwrap();
        assert!(s.limits.engine_limits().sizes.allow_biased_bits_per_shard);
    }

    #[test]
    fn security_keys_are_checked_together() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        let refused = [
            ("[server.tls]\ncert_file = \"c.pem\"\n", "key_file"),
            ("[server.tls]\nclient_ca_file = \"ca.pem\"\n", "client_ca_file"),
            ("[auth]\nenabled = true\n", "tokens_file"),
            ("[limits]\nmax_concurrent_requests = 0\n", "max_concurrent_requests"),
            (
                "[limits]\nmax_storage_tasks_per_deduper = 0\n",
                "max_storage_tasks_per_deduper",
            ),
            ("[metrics]\nlisten = \"localhost\"\n", "metrics.listen"),
        ];
        for (text, mentions) in refused {
            std::fs::write(&file, text).unwrap();
            let e = Settings::load(Some(&file)).unwrap_err().to_string();
            assert!(e.contains(mentions), "{text}: {e}");
        }
        std::fs::write(
            &file,
            "[server.tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nclient_ca_file = \"ca.pem\"\n\
             [auth]\nenabled = true\ntokens_file = \"t\"\n[metrics]\nlisten = \"\"\n",
        )
        .unwrap();
        let s = Settings::load(Some(&file)).unwrap();
        assert!(s.server.tls.enabled() && s.auth.enabled);
        assert_eq!(s.metrics.listen, "");
        let d = Settings::default();
        assert_eq!(
            (d.limits.max_concurrent_requests, d.server.drain_timeout_ms),
            (1024, 20_000)
        );
        assert_eq!((d.metrics.listen.as_str(), d.auth.enabled), ("127.0.0.1:9464", false));
    }

    #[test]
    fn empty_environment_value_turns_metrics_off() {
        let mut env = std::collections::HashMap::new();
        env.insert("SOLUS__METRICS__LISTEN".to_string(), String::new());
        let s = Settings::load_with_env(None, Some(env)).unwrap();
        assert_eq!(s.metrics.listen, "");
    }

    #[test]
    fn settings_errors_name_the_key_where_it_was_set_and_what_is_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        let shown = file.display().to_string();
        let load = |text: &str, env: &[(&str, &str)]| {
            std::fs::write(&file, text).unwrap();
            let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Settings::load_with_env(Some(&file), Some(env)).unwrap_err().to_string()
        };
        let e = load("[storage]\nbackend = \"hbse\"\n", &[]);
        assert!(
            e.contains("storage.backend") && e.contains("\"embedded\" or \"hbase\"") && e.contains(&shown),
            "{e}"
        );
        let e = load("", &[("SOLUS__STORAGE__BACKEND", "hbse")]);
        assert!(e.contains("SOLUS__STORAGE__BACKEND") && e.contains("\"hbase\""), "{e}");
        let e = load("[storage.hbase]\ntransport = \"frame\"\n", &[]);
        assert!(e.contains("\"buffered\" or \"framed\""), "{e}");
        let e = load("[server]\nlisten_addr = \"x\"\n", &[]);
        assert!(
            e.contains("unknown setting server.listen_addr") && e.contains(&shown) && e.contains("listen,"),
            "{e}"
        );
        let e = load("", &[("SOLUS__SERVER__LISTN", "x")]);
        assert!(e.contains("SOLUS__SERVER__LISTN") && !e.contains(&shown), "{e}");
        let e = load("", &[("SOLUS__SERVER_LISTEN", "x")]);
        assert!(
            e.contains("did you mean server.listen") && e.contains("SOLUS__SERVER__LISTEN"),
            "{e}"
        );
        let e = load("", &[("SOLUS__SERVER__LISTEN", "localhost")]);
        assert!(e.contains("server.listen") && e.contains("host:port"), "{e}");
        let e = load("[limits]\nmax_shards = \"many\"\n", &[]);
        assert!(e.contains("limits.max_shards") && e.contains(&shown), "{e}");
        let missing = dir.path().join("nope.toml");
        let e = Settings::load(Some(&missing)).unwrap_err().to_string();
        assert!(
            e.contains("nope.toml") && e.contains("--config") && e.contains("does not exist"),
            "{e}"
        );
    }

    #[test]
    fn single_underscore_variables_are_named_with_their_double_underscore_form() {
        let vars = [
            ("SOLUS_SERVER_LISTEN", "0.0.0.0:1"),
            ("SOLUS_STORAGE_EMBEDDED_PATH", "/d"),
            ("SOLUS_ADDR", "x:1"),
            ("SOLUS__SERVER__LISTEN", "127.0.0.1:1"),
            ("SOLUS_WHATEVER", "1"),
            ("PATH", "/bin"),
            ("SOLUS_REAL_HBASE_DIR", "/tmp/h"),
            ("SOLUS_HBASE_HEAP", "1g"),
            ("SOLUS_FARM", "eu"),
        ];
        let w = environment_warnings(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(w.len(), 4, "{w:#?}");
        assert!(w.iter().any(|w| w.contains("SOLUS_FARM") && w.contains("SOLUS__FARM")));
        assert!(
            w.iter()
                .any(|w| w.contains("SOLUS_SERVER_LISTEN") && w.contains("SOLUS__SERVER__LISTEN"))
        );
        assert!(w.iter().any(|w| w.contains("SOLUS__STORAGE__EMBEDDED__PATH")));
        assert!(
            w.iter()
                .any(|w| w.contains("SOLUS_WHATEVER") && w.contains("SOLUS_ADDR"))
        );
    }

    #[test]
    fn hbase_requests_above_the_framed_limit_are_warned_about() {
        let mut s = Settings::default();
        s.storage.backend = Backend::Hbase;
        s.storage.hbase.max_request_bytes = 4 << 20;
        assert!(s.warnings().is_empty(), "buffered transport has no frame limit");
        s.storage.hbase.transport = crate::storage::hbase::Transport::Framed;
        let w = s.warnings();
        assert!(
            w.len() == 1 && w[0].contains("storage.hbase.max_request_bytes") && w[0].contains("2097152"),
            "{w:?}"
        );
        s.storage.hbase.max_request_bytes = 2 << 20;
        assert!(s.warnings().is_empty());
    }

    #[test]
    fn every_key_of_the_example_file_is_known_and_every_known_key_exists() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/solus.toml")).unwrap();
        let mut section = String::new();
        for line in text.lines().map(|l| l.trim().trim_start_matches("# ")) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = format!("{name}.");
            } else if let Some((key, _)) = line.split_once(" = ")
                && !key.contains(' ')
            {
                let key = format!("{section}{key}");
                assert!(
                    KEYS.contains(&key.as_str()),
                    "{key} of deploy/solus.toml is missing from KEYS"
                );
            }
        }
        for key in KEYS {
            let e = Settings::load_with_env(None, Some([(env_name(key), "#bad#".to_string())].into()));
            if let Err(e) = e {
                assert!(!e.to_string().contains("unknown setting"), "{key}: {e}");
            }
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.toml");
        std::fs::write(&file, "[server]\nlisten_addr = \"x\"\n").unwrap();
        let e = Settings::load(Some(&file)).unwrap_err().to_string();
        assert!(e.contains("listen_addr"), "{e}");
        std::fs::write(&file, "[limits]\nmax_bits_per_shard = 0\n").unwrap();
        let e = Settings::load(Some(&file)).unwrap_err().to_string();
        assert!(e.contains("max_bits_per_shard"), "{e}");
    }
}
