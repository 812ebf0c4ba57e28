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
pub const STORAGE_OPS: [&str; 11] = [
    "read_bits",
    "write_bits",
    "read_and_write_bits",
    "create_deduper",
    "update_deduper",
    "get_deduper",
    "list_dedupers",
    "remember_request",
    "recall_request",
    "ping",
    "flush",
];
pub const STORAGE_DURATION: &str = "solus_storage_call_duration_seconds";
/// Dedupers known to this process: with the embedded store, those it held at
/// start-up plus those created since; with HBase (shared by several
/// replicas), only those created through this replica since it started.
pub const DEDUPERS: &str = "solus_dedupers";

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
    describe_gauge!(
        DEDUPERS,
        "Dedupers known to this process: embedded store - held at start plus created since; HBase - created through this replica since start"
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

/// Sets the deduper gauge (at start-up).
pub fn set_dedupers(n: usize) {
    metrics::gauge!(DEDUPERS).set(n as f64);
}

/// Counts one created deduper.
pub fn deduper_created() {
    metrics::gauge!(DEDUPERS).increment(1.0);
}
