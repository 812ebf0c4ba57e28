//! Prometheus metrics: the recorder and its `/metrics` HTTP listener
//! (`metrics.listen`), and the names and helpers the rest of the code records with.
//!
//! Exposed series (Prometheus text format, on any path of the listener):
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `solus_requests_total` | counter | `rpc`, `code` | Solus RPCs answered, by gRPC status name (`OK`, `NOT_FOUND`, ...) |
//! | `solus_request_duration_seconds` | histogram | `rpc` | time from arrival to answer, in seconds |
//! | `solus_request_entities` | histogram | `rpc` | entities per data request |
//! | `solus_requests_in_flight` | gauge | | Solus RPCs being served |
//! | `solus_storage_calls_total` | counter | `op` | storage calls, by operation |
//! | `solus_storage_errors_total` | counter | `op` | storage calls that failed |
//! | `solus_storage_call_duration_seconds` | histogram | `op` | storage call latency, in seconds |
//! | `solus_dedupers` | gauge | | dedupers known to this process (see [`DEDUPERS`]) |
//! | `solus_ready` | gauge | | 1 while storage answers the health probe (readiness `SERVING`), else 0 |
//! | `solus_journal_unreadable_records` | gauge | | embedded journal records found damaged and lost at this start-up (started with `storage.embedded.start_with_damaged_journal`) |
//! | `solus_deduper_requests_total` | counter | `client`, `deduper`, `rpc` | data requests answered `OK`, per deduper |
//! | `solus_deduper_entities_total` | counter | `client`, `deduper`, `rpc` | entities of those requests |
//! | `solus_deduper_fill_ratio` | gauge | `client`, `deduper` | fraction of the m bits set now (expiry >= now) |
//! | `solus_deduper_estimated_entities` | gauge | `client`, `deduper` | live entities n* = -(m/k) ln(1 - fill) (Swamidass & Baldi 2007) |
//! | `solus_deduper_estimated_fpr` | gauge | `client`, `deduper` | false-positive rate now, fill^k |
//! | `solus_deduper_target_fpr` | gauge | `client`, `deduper` | the p the deduper was sized for (when sized from n and p) |
//! | `solus_deduper_load_ratio` | gauge | `client`, `deduper` | n* / n (when sized from n and p); above 1 = over capacity |
//! | `solus_deduper_stats_timestamp_seconds` | gauge | `client`, `deduper` | when those figures were computed, s since the Unix epoch |
//!
//! The per-deduper series are capped at `metrics.max_deduper_series`
//! (client, deduper) pairs, first come first served: later dedupers are
//! counted under `client="_other", deduper="_other"` and get no gauges (a
//! warning is logged the first time). Deleting a deduper frees its pair.
//! The gauges come from the statistics pass (`stats.refresh_interval_ms`);
//! a deleted deduper's gauges read 0 and stay until restart (see [`deduper_gone`]).
//!
//! Health and reflection calls are not counted. Without an installed
//! recorder (`metrics.listen` empty) every record is a no-op.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

pub const REQUESTS: &str = "solus_requests_total";
pub const REQUEST_DURATION: &str = "solus_request_duration_seconds";
pub const REQUEST_ENTITIES: &str = "solus_request_entities";
pub const IN_FLIGHT: &str = "solus_requests_in_flight";
pub const STORAGE_CALLS: &str = "solus_storage_calls_total";
pub const STORAGE_ERRORS: &str = "solus_storage_errors_total";
/// The `op` label values of the storage series (the `Store` calls).
pub const STORAGE_OPS: [&str; 13] = [
    "read_bits",
    "write_bits",
    "read_and_write_bits",
    "create_deduper",
    "update_deduper",
    "get_deduper",
    "list_dedupers",
    "delete_deduper",
    "bit_stats",
    "remember_request",
    "recall_request",
    "ping",
    "flush",
];
pub const STORAGE_DURATION: &str = "solus_storage_call_duration_seconds";
/// Dedupers known to this process: with the embedded store, those it held at
/// start-up plus those created since, minus those deleted since (its exact
/// count); with HBase (shared by several replicas), those created minus
/// those deleted through this replica since it started (a change, which a
/// delete of an older deduper can take below 0).
pub const DEDUPERS: &str = "solus_dedupers";
pub const JOURNAL_UNREADABLE: &str = "solus_journal_unreadable_records";

/// Per-deduper series (labels `client`, `deduper`; see [`deduper_labels`]).
pub const DEDUPER_REQUESTS: &str = "solus_deduper_requests_total";
pub const DEDUPER_ENTITIES: &str = "solus_deduper_entities_total";
pub const DEDUPER_FILL: &str = "solus_deduper_fill_ratio";
pub const DEDUPER_ENTITIES_ESTIMATE: &str = "solus_deduper_estimated_entities";
pub const DEDUPER_FPR: &str = "solus_deduper_estimated_fpr";
pub const DEDUPER_TARGET_FPR: &str = "solus_deduper_target_fpr";
pub const DEDUPER_LOAD: &str = "solus_deduper_load_ratio";
pub const DEDUPER_STATS_TIME: &str = "solus_deduper_stats_timestamp_seconds";
/// 1 while storage answers the health probe (readiness SERVING), else 0.
pub const READY: &str = "solus_ready";
/// The label value of the dedupers beyond `metrics.max_deduper_series`.
pub const OVERFLOW_LABEL: &str = "_other";

/// Latency buckets, in seconds: 100 us to 30 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Entities-per-request buckets.
const ENTITY_BUCKETS: &[f64] = &[0.0, 1.0, 10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0, 50_000.0];

static INSTALLED: OnceLock<SocketAddr> = OnceLock::new();

/// Installs the process-wide recorder and serves it over HTTP on `listen`
/// (`host:port`); `""` leaves metrics off and returns `Ok(None)`. Must run
/// inside a tokio runtime. Errors when the address is malformed or cannot be
/// bound. A process holds one recorder: a second call (several servers in
/// one test process) keeps the first listener and returns its address.
pub fn install(listen: &str) -> anyhow::Result<Option<SocketAddr>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = listen.parse().map_err(|e| {
        anyhow::anyhow!("metrics.listen {listen:?} is not host:port ({e}); e.g. 127.0.0.1:9464, or \"\" for off")
    })?;
    if let Some(first) = INSTALLED.get() {
        if *first != addr {
            tracing::warn!(%first, requested = %addr, "metrics recorder already installed in this process; keeping it");
        }
        return Ok(Some(*first));
    }
    // The exporter's own error does not say which setting; a trial bind does
    // (the socket is closed at once, with no connection: the port is free again).
    drop(std::net::TcpListener::bind(addr).map_err(|e| crate::config::bind_error("metrics.listen", addr, &e))?);
    let builder = PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Full(REQUEST_DURATION.into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(STORAGE_DURATION.into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(REQUEST_ENTITIES.into()), ENTITY_BUCKETS)?;
    // Installed from a thread outside the server's runtime, the exporter
    // gets a runtime (and blocking pool) of its own: /metrics never queues
    // behind storage calls on the server's blocking pool.
    std::thread::scope(|s| s.spawn(|| builder.install()).join())
        .map_err(|_| anyhow::anyhow!("installing the metrics exporter panicked"))?
        .map_err(|e| anyhow::anyhow!("serving metrics on {addr} (metrics.listen): {e}"))?;
    let _ = INSTALLED.set(addr);
    describe();
    Ok(Some(addr))
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(REQUESTS, "Solus RPCs answered, by rpc and gRPC status code");
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time from a Solus RPC's arrival to its answer"
    );
    describe_histogram!(REQUEST_ENTITIES, Unit::Count, "Entities per data request");
    describe_gauge!(IN_FLIGHT, "Solus RPCs being served");
    describe_counter!(STORAGE_CALLS, "Storage calls, by operation");
    describe_counter!(STORAGE_ERRORS, "Storage calls that failed, by operation");
    describe_histogram!(STORAGE_DURATION, Unit::Seconds, "Storage call latency, by operation");
    // Start the storage counters at zero so a dashboard or alert on errors
    // sees the series before the first failure.
    for op in STORAGE_OPS {
        metrics::counter!(STORAGE_CALLS, "op" => op).absolute(0);
        metrics::counter!(STORAGE_ERRORS, "op" => op).absolute(0);
    }
    describe_counter!(
        DEDUPER_REQUESTS,
        "Data requests answered OK, by client, deduper and rpc"
    );
    describe_counter!(
        DEDUPER_ENTITIES,
        "Entities of the data requests answered OK, by client, deduper and rpc"
    );
    describe_gauge!(
        DEDUPER_FILL,
        "Fraction of a deduper's bits set now (expiry at or after now)"
    );
    describe_gauge!(
        DEDUPER_ENTITIES_ESTIMATE,
        "Live entities estimated from the fill: -(m/k) ln(1 - fill) (Swamidass & Baldi 2007)"
    );
    describe_gauge!(
        DEDUPER_FPR,
        "Estimated current false-positive rate of a deduper: fill^k"
    );
    describe_gauge!(DEDUPER_TARGET_FPR, "False-positive rate p a deduper was sized for");
    describe_gauge!(
        DEDUPER_LOAD,
        "Estimated live entities over the sized n; above 1 = over capacity"
    );
    describe_gauge!(
        DEDUPER_STATS_TIME,
        Unit::Seconds,
        "When a deduper's figures were computed, since the Unix epoch"
    );
    describe_gauge!(
        READY,
        "1 while storage answers the health probe (readiness SERVING), else 0"
    );
    describe_gauge!(
        JOURNAL_UNREADABLE,
        "Embedded journal records found damaged and lost at this start-up"
    );
    describe_gauge!(
        DEDUPERS,
        "Dedupers known to this process: embedded store - held at start, plus created, minus deleted since; HBase - created minus deleted through this replica since start (can be negative)"
    );
}

/// Records one answered Solus RPC.
pub fn request_done(rpc: &'static str, code: &'static str, elapsed: Duration) {
    metrics::counter!(REQUESTS, "rpc" => rpc, "code" => code).increment(1);
    metrics::histogram!(REQUEST_DURATION, "rpc" => rpc).record(elapsed.as_secs_f64());
}

/// Records the number of entities in a data request.
pub fn request_entities(rpc: &'static str, n: usize) {
    metrics::histogram!(REQUEST_ENTITIES, "rpc" => rpc).record(n as f64);
}

/// Adds `delta` (+1 or -1) to the in-flight gauge.
pub fn in_flight(delta: f64) {
    metrics::gauge!(IN_FLIGHT).increment(delta);
}

/// Records one storage call.
pub fn storage_call(op: &'static str, ok: bool, elapsed: Duration) {
    metrics::counter!(STORAGE_CALLS, "op" => op).increment(1);
    if !ok {
        metrics::counter!(STORAGE_ERRORS, "op" => op).increment(1);
    }
    metrics::histogram!(STORAGE_DURATION, "op" => op).record(elapsed.as_secs_f64());
}

static SERIES: OnceLock<Series> = OnceLock::new();

/// The (client, deduper) label pairs admitted so far, and the cap.
struct Series {
    max: usize,
    admitted: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    /// Whether the cap was reached and logged (once per process).
    warned: std::sync::atomic::AtomicBool,
}

impl Series {
    fn new(max: usize) -> Series {
        Series {
            max,
            admitted: Default::default(),
            warned: Default::default(),
        }
    }
}

fn series() -> &'static Series {
    SERIES.get_or_init(|| Series::new(1000))
}

/// Sets the cap on per-deduper label pairs (`metrics.max_deduper_series`);
/// the first call in a process wins. Default 1,000.
pub fn set_max_deduper_series(max: usize) {
    let _ = SERIES.set(Series::new(max));
}

/// The `client` and `deduper` label values of a deduper: its own while
/// fewer than `metrics.max_deduper_series` pairs are admitted (or it is),
/// else `("_other", "_other")` ([`OVERFLOW_LABEL`]). A deleted deduper's
/// pair leaves the count ([`deduper_gone`]). The first deduper refused its
/// own labels is logged (warn, once per process).
pub fn deduper_labels(client_id: &str, name: &str) -> (String, String) {
    let series = series();
    let mut admitted = series.admitted.lock().unwrap_or_else(|p| p.into_inner());
    let key = (client_id.to_string(), name.to_string());
    if admitted.contains(&key) || admitted.len() < series.max && admitted.insert(key.clone()) {
        return key;
    }
    drop(admitted);
    if !series.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            max = series.max,
            client_id,
            deduper = name,
            "metrics.max_deduper_series reached: this and further dedupers are counted under \
             client=\"_other\", deduper=\"_other\" and get no per-deduper gauges (logged once); raise the setting \
             if the series are wanted"
        );
    }
    (OVERFLOW_LABEL.to_string(), OVERFLOW_LABEL.to_string())
}

/// Counts one data request that succeeded on a deduper, and its entities.
pub fn deduper_request(client_id: &str, name: &str, rpc: &'static str, entities: usize) {
    let (c, d) = deduper_labels(client_id, name);
    metrics::counter!(DEDUPER_REQUESTS, "client" => c.clone(), "deduper" => d.clone(), "rpc" => rpc).increment(1);
    metrics::counter!(DEDUPER_ENTITIES, "client" => c, "deduper" => d, "rpc" => rpc).increment(entities as u64);
}

/// Sets the live-figure gauges of a deduper (not for those past the label cap).
pub fn deduper_stats(client_id: &str, name: &str, s: &crate::engine::DeduperStats, p: Option<f64>) {
    let (c, d) = deduper_labels(client_id, name);
    if c == OVERFLOW_LABEL && d == OVERFLOW_LABEL {
        return;
    }
    let labels = [("client", c), ("deduper", d)];
    metrics::gauge!(DEDUPER_FILL, &labels).set(s.fill_ratio);
    metrics::gauge!(DEDUPER_ENTITIES_ESTIMATE, &labels).set(s.estimated_entities);
    metrics::gauge!(DEDUPER_FPR, &labels).set(s.estimated_fpr);
    metrics::gauge!(DEDUPER_STATS_TIME, &labels).set(s.computed_at_ms as f64 / 1000.0);
    if let Some(p) = p {
        metrics::gauge!(DEDUPER_TARGET_FPR, &labels).set(p);
    }
    if let Some(load) = s.load {
        metrics::gauge!(DEDUPER_LOAD, &labels).set(load);
    }
}

/// A deleted deduper: frees its pair under `metrics.max_deduper_series` (a
/// later deduper gets its own labels) and, when it had figures (`figures`:
/// whether they had a load), zeroes its fill, entities, rate and load
/// gauges. metrics-exporter-prometheus 0.18 has no call that removes one
/// series (only an idle timeout over every gauge, which would also drop
/// `solus_ready` and `solus_dedupers` between changes), so the zeroed
/// gauges and the deduper's counters stay on `/metrics` until the process
/// restarts; they no longer count against the cap.
pub fn deduper_gone(client_id: &str, name: &str, figures: Option<bool>) {
    let key = (client_id.to_string(), name.to_string());
    let was_admitted = series().admitted.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
    let Some(had_load) = figures.filter(|_| was_admitted) else {
        return;
    };
    let labels = [("client", key.0), ("deduper", key.1)];
    for g in [DEDUPER_FILL, DEDUPER_ENTITIES_ESTIMATE, DEDUPER_FPR] {
        metrics::gauge!(g, &labels).set(0.0);
    }
    if had_load {
        metrics::gauge!(DEDUPER_LOAD, &labels).set(0.0);
    }
}

/// Sets `solus_journal_unreadable_records`: journal records lost at start-up.
pub fn set_journal_unreadable_records(records: u64) {
    metrics::gauge!(JOURNAL_UNREADABLE).set(records as f64);
}

/// Sets the readiness gauge.
pub fn set_ready(ready: bool) {
    metrics::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
}

/// Counts one deleted deduper.
pub fn deduper_deleted() {
    metrics::gauge!(DEDUPERS).decrement(1.0);
}

/// Sets the deduper gauge (at start-up).
pub fn set_dedupers(n: usize) {
    metrics::gauge!(DEDUPERS).set(n as f64);
}

/// Counts one created deduper.
pub fn deduper_created() {
    metrics::gauge!(DEDUPERS).increment(1.0);
}
