//! Prometheus metrics: one process-wide registry (the Prometheus org's
//! `prometheus-client`), its `/metrics` HTTP listener (`metrics.listen`,
//! [`http`]), and the names and helpers the rest of the code records with.
//!
//! Exposed series (OpenMetrics text, which Prometheus scrapes, on any path
//! of the listener):
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
//! | `solus_checkpoint_consecutive_failures` | gauge | | embedded checkpoints failed since the last one that succeeded (0 while they succeed) |
//! | `solus_checkpoint_last_success_timestamp_seconds` | gauge | | when an embedded checkpoint last succeeded, s since the Unix epoch (0: none since start-up) |
//! | `solus_deduper_requests_total` | counter | `client`, `deduper`, `rpc` | data requests answered `OK`, per deduper |
//! | `solus_deduper_entities_total` | counter | `client`, `deduper`, `rpc` | entities of those requests |
//! | `solus_deduper_fill_ratio` | gauge | `client`, `deduper` | fraction of the m bits set now (expiry >= now) |
//! | `solus_deduper_estimated_entities` | gauge | `client`, `deduper` | live entities n* = -(m/k) ln(1 - fill) (Swamidass & Baldi 2007) |
//! | `solus_deduper_estimated_fpr` | gauge | `client`, `deduper` | false-positive rate now, fill^k |
//! | `solus_deduper_target_fpr` | gauge | `client`, `deduper` | the p the deduper was sized for (when sized from n and p) |
//! | `solus_deduper_load_ratio` | gauge | `client`, `deduper` | n* / n (when sized from n and p); above 1 = over capacity |
//! | `solus_deduper_stats_timestamp_seconds` | gauge | `client`, `deduper` | when those figures were computed, s since the Unix epoch |
//! | `solus_clock_offset_seconds` | gauge | | this replica's clock minus HBase's, from the last probe (HBase only) |
//! | `solus_clock_offset_error_seconds` | gauge | | that probe's error bound (half its round trip) |
//! | `solus_clock_max_offset_seconds` | gauge | | `storage.hbase.max_clock_offset_ms` in seconds (0: not enforced) |
//!
//! The per-deduper series are capped at `metrics.max_deduper_series`
//! (client, deduper) pairs, first come first served: later dedupers are
//! counted under `client="_other", deduper="_other"` and get no gauges (a
//! warning is logged the first time). Deleting a deduper removes every one
//! of its series and frees its pair ([`deduper_gone`]), so churn - dedupers
//! created and deleted per day or per job run - never grows `/metrics`
//! past the cap. The gauges come from the statistics pass
//! (`stats.refresh_interval_ms`).
//!
//! Health and reflection calls are not counted. With `metrics.listen`
//! empty the figures are still kept (a few atomic adds) but not served.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

mod http;

pub const REQUESTS: &str = "solus_requests_total";
pub const REQUEST_DURATION: &str = "solus_request_duration_seconds";
pub const REQUEST_ENTITIES: &str = "solus_request_entities";
pub const IN_FLIGHT: &str = "solus_requests_in_flight";
pub const STORAGE_CALLS: &str = "solus_storage_calls_total";
pub const STORAGE_ERRORS: &str = "solus_storage_errors_total";
/// The `op` label values of the storage series (the `Store` calls).
pub const STORAGE_OPS: [&str; 15] = [
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
    "remember_records",
    "recall_records",
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
/// Embedded checkpoints failed in a row (issue 45: a failing checkpoint was
/// visible only in the log).
pub const CHECKPOINT_FAILURES: &str = "solus_checkpoint_consecutive_failures";
pub const CHECKPOINT_LAST_SUCCESS: &str = "solus_checkpoint_last_success_timestamp_seconds";

/// Per-deduper series (labels `client`, `deduper`; see [`deduper_labels`]).
pub const DEDUPER_REQUESTS: &str = "solus_deduper_requests_total";
pub const DEDUPER_ENTITIES: &str = "solus_deduper_entities_total";
pub const DEDUPER_FILL: &str = "solus_deduper_fill_ratio";
pub const DEDUPER_ENTITIES_ESTIMATE: &str = "solus_deduper_estimated_entities";
pub const DEDUPER_FPR: &str = "solus_deduper_estimated_fpr";
pub const DEDUPER_TARGET_FPR: &str = "solus_deduper_target_fpr";
pub const DEDUPER_LOAD: &str = "solus_deduper_load_ratio";
/// Per generation of a resized deduper (labels client, deduper, generation):
/// its fill, estimated false-positive rate and load, and when it retires.
pub const DEDUPER_GENERATION_FILL: &str = "solus_deduper_generation_fill_ratio";
pub const DEDUPER_GENERATION_FPR: &str = "solus_deduper_generation_estimated_fpr";
pub const DEDUPER_GENERATION_LOAD: &str = "solus_deduper_generation_load_ratio";
pub const DEDUPER_GENERATION_RETIRE: &str = "solus_deduper_generation_retire_timestamp_seconds";
pub const DEDUPER_STATS_TIME: &str = "solus_deduper_stats_timestamp_seconds";
/// 1 while storage answers the health probe (readiness SERVING), else 0.
pub const READY: &str = "solus_ready";
/// Record ids remembered (answered absent), and answers given again from
/// a remembered record id (replays), over all dedupers.
pub const RECORDS_REMEMBERED: &str = "solus_records_remembered_total";
/// Resizes started (a successor generation recorded) by this process.
pub const RESIZES_STARTED: &str = "solus_resizes_started_total";
/// Decisions of the automatic resize policy, by `decision`: `started`,
/// `ceiling` (would grow past resize.max_expected_insertions), `failed`.
pub const AUTO_RESIZE_DECISIONS: &str = "solus_auto_resize_decisions_total";
/// Older generations retired (dropped, data freed) by this process.
pub const GENERATIONS_RETIRED: &str = "solus_generations_retired_total";
/// Data requests whose config was read again at their storage call: held
/// past `engine::fresh::MAX_CONFIG_AGE` (queued in a lane or for the pool).
pub const CONFIG_REREADS: &str = "solus_config_rereads_total";
/// Writes whose bits were written again with a later expiry: the storage
/// call took longer than `RESTAMP_AFTER_MS` (1 s) from its clock read.
pub const RESTAMPS: &str = "solus_restamps_total";
pub const RECORD_REPLAYS: &str = "solus_record_replays_total";
/// Record ids the embedded store holds in memory (expired ones until swept).
pub const RECORDS_HELD: &str = "solus_records_held";
/// The label value of the dedupers beyond `metrics.max_deduper_series`.
pub const OVERFLOW_LABEL: &str = "_other";

/// Latency buckets, in seconds: 100 us to 30 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Entities-per-request buckets.
const ENTITY_BUCKETS: &[f64] = &[0.0, 1.0, 10.0, 50.0, 100.0, 500.0, 1_000.0, 5_000.0, 10_000.0, 50_000.0];

type Labels = Vec<(&'static str, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

fn entity_histogram() -> Histogram {
    Histogram::new(ENTITY_BUCKETS.iter().copied())
}

/// Every metric of the process, registered once.
struct Metrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
    request_duration: Histograms,
    request_entities: Histograms,
    in_flight: Gauge,
    storage_calls: Family<Labels, Counter>,
    storage_errors: Family<Labels, Counter>,
    storage_duration: Histograms,
    dedupers: Gauge,
    ready: Gauge,
    journal_unreadable: Gauge,
    checkpoint_failures: Gauge,
    checkpoint_last_success: Gauge,
    records_remembered: Counter,
    resizes_started: Counter,
    auto_resize: Family<Labels, Counter>,
    generations_retired: Counter,
    config_rereads: Counter,
    restamps: Counter,
    record_replays: Counter,
    records_held: Gauge,
    clock_offset: FloatGauge,
    clock_offset_error: FloatGauge,
    clock_max_offset: FloatGauge,
    deduper_requests: Family<Labels, Counter>,
    deduper_entities: Family<Labels, Counter>,
    /// The per-deduper gauges, by metric name.
    deduper_gauges: Vec<(&'static str, Family<Labels, FloatGauge>)>,
    /// Handles of the series the request path records on, by their static
    /// label values: found without building a label vector per call.
    hot: Hot,
}

/// Cached handles of labelled series (clones share the family's value).
#[derive(Default)]
struct Hot {
    requests: RwLock<HashMap<(&'static str, &'static str), Counter>>,
    request_duration: RwLock<HashMap<&'static str, Histogram>>,
    request_entities: RwLock<HashMap<&'static str, Histogram>>,
    storage: RwLock<HashMap<&'static str, StorageSeries>>,
}

/// The three series of one storage operation.
#[derive(Clone)]
struct StorageSeries {
    calls: Counter,
    errors: Counter,
    duration: Histogram,
}

/// The handle cached under `key`, made by `make` on first use.
fn cached<K: std::hash::Hash + Eq + Copy, M: Clone>(
    cache: &RwLock<HashMap<K, M>>,
    key: K,
    make: impl FnOnce() -> M,
) -> M {
    if let Some(m) = cache.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return m.clone();
    }
    let m = make();
    cache
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_insert(m)
        .clone()
}

/// prometheus-client adds `_total` to a counter's name itself.
fn counter_name(full: &'static str) -> &'static str {
    full.strip_suffix("_total").unwrap_or(full)
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::default();
        registry.register(
            counter_name(REQUESTS),
            "Solus RPCs answered, by rpc and gRPC status code",
            requests.clone(),
        );
        let request_duration: Histograms = Family::new_with_constructor(latency_histogram);
        registry.register(
            REQUEST_DURATION,
            "Time from a Solus RPC's arrival to its answer, in seconds",
            request_duration.clone(),
        );
        let request_entities: Histograms = Family::new_with_constructor(entity_histogram);
        registry.register(REQUEST_ENTITIES, "Entities per data request", request_entities.clone());
        let in_flight = Gauge::default();
        registry.register(IN_FLIGHT, "Solus RPCs being served", in_flight.clone());
        let storage_calls: Family<Labels, Counter> = Family::default();
        registry.register(
            counter_name(STORAGE_CALLS),
            "Storage calls, by operation",
            storage_calls.clone(),
        );
        let storage_errors: Family<Labels, Counter> = Family::default();
        registry.register(
            counter_name(STORAGE_ERRORS),
            "Storage calls that failed, by operation",
            storage_errors.clone(),
        );
        let storage_duration: Histograms = Family::new_with_constructor(latency_histogram);
        registry.register(
            STORAGE_DURATION,
            "Storage call latency, by operation, in seconds",
            storage_duration.clone(),
        );
        // The storage counters start at zero, so a dashboard or alert on
        // errors sees the series before the first failure.
        for op in STORAGE_OPS {
            drop(storage_calls.get_or_create(&vec![("op", op.to_string())]));
            drop(storage_errors.get_or_create(&vec![("op", op.to_string())]));
        }
        let dedupers = Gauge::default();
        registry.register(
            DEDUPERS,
            "Dedupers known to this process: embedded store - held at start, plus created, minus deleted since; HBase - created minus deleted through this replica since start (can be negative)",
            dedupers.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            READY,
            "1 while storage answers the health probe (readiness SERVING), else 0",
            ready.clone(),
        );
        let journal_unreadable = Gauge::default();
        registry.register(
            JOURNAL_UNREADABLE,
            "Embedded journal records found damaged and lost at this start-up",
            journal_unreadable.clone(),
        );
        let checkpoint_failures = Gauge::default();
        registry.register(
            CHECKPOINT_FAILURES,
            "Embedded checkpoints failed since the last one that succeeded (the journal grows meanwhile)",
            checkpoint_failures.clone(),
        );
        let checkpoint_last_success = Gauge::default();
        registry.register(
            CHECKPOINT_LAST_SUCCESS,
            "When an embedded checkpoint last succeeded, in seconds since the Unix epoch (0: none since start-up)",
            checkpoint_last_success.clone(),
        );
        let resizes_started = Counter::default();
        registry.register(
            counter_name(RESIZES_STARTED),
            "Resizes started by this process: successor generations recorded (docs/operations.md, Resizing)",
            resizes_started.clone(),
        );
        let auto_resize: Family<Labels, Counter> = Family::default();
        registry.register(
            counter_name(AUTO_RESIZE_DECISIONS),
            "Decisions of the automatic resize policy (resize.auto), by decision: started, ceiling, failed",
            auto_resize.clone(),
        );
        for decision in ["started", "ceiling", "failed"] {
            drop(auto_resize.get_or_create(&vec![("decision", decision.to_string())]));
        }
        let generations_retired = Counter::default();
        registry.register(
            counter_name(GENERATIONS_RETIRED),
            "Older deduper generations retired by this process (their data freed)",
            generations_retired.clone(),
        );
        let config_rereads = Counter::default();
        registry.register(
            counter_name(CONFIG_REREADS),
            "Data requests whose deduper config was read again at their storage call, having waited past half the \
             resize margin since their lookup",
            config_rereads.clone(),
        );
        let restamps = Counter::default();
        registry.register(
            counter_name(RESTAMPS),
            "Writes whose bits were written again with an expiry counted from later: the storage call took over \
             1 s from its clock read, so the TTL counts from nearer the answer",
            restamps.clone(),
        );
        let records_remembered = Counter::default();
        registry.register(
            counter_name(RECORDS_REMEMBERED),
            "Record ids remembered because their entity was answered absent",
            records_remembered.clone(),
        );
        let record_replays = Counter::default();
        registry.register(
            counter_name(RECORD_REPLAYS),
            "Entities answered absent again because their record id was remembered (replays)",
            record_replays.clone(),
        );
        let records_held = Gauge::default();
        registry.register(
            RECORDS_HELD,
            "Record ids the embedded store holds in memory (storage.embedded.max_record_memory_mib)",
            records_held.clone(),
        );
        let clock_gauge = |registry: &mut Registry, name: &'static str, help: &str| {
            let g = FloatGauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let clock_offset = clock_gauge(
            &mut registry,
            CLOCK_OFFSET,
            "This replica's clock minus HBase's, in seconds, from the last probe (HBase only)",
        );
        let clock_offset_error = clock_gauge(
            &mut registry,
            CLOCK_OFFSET_ERROR,
            "The error bound of that probe (half its round trip), in seconds",
        );
        let clock_max_offset = clock_gauge(
            &mut registry,
            CLOCK_MAX_OFFSET,
            "storage.hbase.max_clock_offset_ms in seconds (0: not enforced)",
        );
        let deduper_requests: Family<Labels, Counter> = Family::default();
        registry.register(
            counter_name(DEDUPER_REQUESTS),
            "Data requests answered OK, by client, deduper and rpc",
            deduper_requests.clone(),
        );
        let deduper_entities: Family<Labels, Counter> = Family::default();
        registry.register(
            counter_name(DEDUPER_ENTITIES),
            "Entities of the data requests answered OK, by client, deduper and rpc",
            deduper_entities.clone(),
        );
        let mut deduper_gauges = Vec::new();
        for (name, help) in [
            (DEDUPER_FILL, "Fraction of a deduper's m bits set now (expiry >= now)"),
            (
                DEDUPER_ENTITIES_ESTIMATE,
                "Estimated live entities of a deduper: -(m/k) ln(1 - fill)",
            ),
            (
                DEDUPER_FPR,
                "Estimated current false-positive rate of a deduper: fill^k",
            ),
            (DEDUPER_TARGET_FPR, "False-positive rate p a deduper was sized for"),
            (
                DEDUPER_LOAD,
                "Estimated live entities over the sized n; above 1 = over capacity",
            ),
            (
                DEDUPER_STATS_TIME,
                "When a deduper's figures were computed, in seconds since the Unix epoch",
            ),
        ] {
            let family: Family<Labels, FloatGauge> = Family::default();
            registry.register(name, help, family.clone());
            deduper_gauges.push((name, family));
        }
        for (name, help) in [
            (
                DEDUPER_GENERATION_FILL,
                "Fraction of a deduper generation's m bits set now",
            ),
            (
                DEDUPER_GENERATION_FPR,
                "Estimated false-positive rate of one generation of a resized deduper: fill^k",
            ),
            (
                DEDUPER_GENERATION_LOAD,
                "Estimated live entities of one generation over the n it was sized for",
            ),
            (
                DEDUPER_GENERATION_RETIRE,
                "When an older generation of a resized deduper retires, in seconds since the Unix epoch",
            ),
        ] {
            let family: Family<Labels, FloatGauge> = Family::default();
            registry.register(name, help, family.clone());
            deduper_gauges.push((name, family));
        }
        Metrics {
            registry,
            requests,
            request_duration,
            request_entities,
            in_flight,
            storage_calls,
            storage_errors,
            storage_duration,
            dedupers,
            ready,
            journal_unreadable,
            checkpoint_failures,
            checkpoint_last_success,
            records_remembered,
            resizes_started,
            auto_resize,
            generations_retired,
            config_rereads,
            restamps,
            record_replays,
            records_held,
            clock_offset,
            clock_offset_error,
            clock_max_offset,
            deduper_requests,
            deduper_entities,
            deduper_gauges,
            hot: Hot::default(),
        }
    }

    fn deduper_gauge(&self, name: &str) -> &Family<Labels, FloatGauge> {
        &self
            .deduper_gauges
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a registered deduper gauge")
            .1
    }
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

fn m() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// The whole exposition (OpenMetrics text, ending in `# EOF`), as `/metrics` serves it.
pub fn render() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &m().registry);
    out
}

static INSTALLED: OnceLock<SocketAddr> = OnceLock::new();

/// Serves [`render`] over HTTP on `listen` (`host:port`); `""` leaves
/// metrics unserved and returns `Ok(None)`. Errors when the address is
/// malformed or cannot be bound (naming `metrics.listen`). A process serves
/// one listener: a second call (several servers in one test process) keeps
/// the first and returns its address.
pub fn install(listen: &str) -> anyhow::Result<Option<SocketAddr>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = listen.parse().map_err(|e| {
        anyhow::anyhow!("metrics.listen {listen:?} is not host:port ({e}); e.g. 127.0.0.1:9464, or \"\" for off")
    })?;
    if let Some(first) = INSTALLED.get() {
        if *first != addr {
            tracing::warn!(%first, requested = %addr, "metrics listener already running in this process; keeping it");
        }
        return Ok(Some(*first));
    }
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| crate::config::bind_error("metrics.listen", addr, &e))?;
    let bound = listener.local_addr()?;
    http::serve(listener)?;
    let _ = INSTALLED.set(addr);
    m();
    Ok(Some(bound))
}

fn op_labels(key: &'static str, value: &str) -> Labels {
    vec![(key, value.to_string())]
}

/// Records one answered Solus RPC.
pub fn request_done(rpc: &'static str, code: &'static str, elapsed: Duration) {
    let m = m();
    cached(&m.hot.requests, (rpc, code), || {
        m.requests
            .get_or_create(&vec![("rpc", rpc.to_string()), ("code", code.to_string())])
            .clone()
    })
    .inc();
    cached(&m.hot.request_duration, rpc, || {
        m.request_duration.get_or_create(&op_labels("rpc", rpc)).clone()
    })
    .observe(elapsed.as_secs_f64());
}

/// Records the number of entities in a data request.
pub fn request_entities(rpc: &'static str, n: usize) {
    let m = m();
    cached(&m.hot.request_entities, rpc, || {
        m.request_entities.get_or_create(&op_labels("rpc", rpc)).clone()
    })
    .observe(n as f64);
}

/// Adds `delta` (+1 or -1) to the in-flight gauge.
pub fn in_flight(delta: f64) {
    m().in_flight.inc_by(delta as i64);
}

/// Records one storage call.
pub fn storage_call(op: &'static str, ok: bool, elapsed: Duration) {
    let m = m();
    let series = cached(&m.hot.storage, op, || {
        let labels = op_labels("op", op);
        StorageSeries {
            calls: m.storage_calls.get_or_create(&labels).clone(),
            errors: m.storage_errors.get_or_create(&labels).clone(),
            duration: m.storage_duration.get_or_create(&labels).clone(),
        }
    });
    series.calls.inc();
    if !ok {
        series.errors.inc();
    }
    series.duration.observe(elapsed.as_secs_f64());
}

static SERIES: OnceLock<Series> = OnceLock::new();

/// The (client, deduper) label pairs admitted so far with the `rpc` values
/// each was counted under, and the cap.
struct Series {
    max: usize,
    admitted: Mutex<HashMap<(String, String), HashSet<&'static str>>>,
    /// The generation ids whose gauges are set, per pair.
    generations: Mutex<HashMap<(String, String), Vec<u32>>>,
    /// Whether the cap was reached and logged (once per process).
    warned: std::sync::atomic::AtomicBool,
}

impl Series {
    fn new(max: usize) -> Series {
        Series {
            max,
            admitted: Default::default(),
            generations: Default::default(),
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

/// Admits `(client_id, name)` if there is room (noting `rpc` under it);
/// true when it has its own labels.
fn admit(client_id: &str, name: &str, rpc: Option<&'static str>) -> bool {
    let series = series();
    let mut admitted = series.admitted.lock().unwrap_or_else(|p| p.into_inner());
    let key = (client_id.to_string(), name.to_string());
    let room = admitted.len() < series.max;
    let own = match admitted.get_mut(&key) {
        Some(rpcs) => {
            rpcs.extend(rpc);
            true
        }
        None if room => {
            admitted.insert(key, rpc.into_iter().collect());
            true
        }
        None => false,
    };
    drop(admitted);
    if !own && !series.warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            max = series.max,
            client_id,
            deduper = name,
            "metrics.max_deduper_series reached: this and further dedupers are counted under \
             client=\"_other\", deduper=\"_other\" and get no per-deduper gauges (logged once); raise the setting \
             if the series are wanted"
        );
    }
    own
}

/// The `client` and `deduper` label values of a deduper: its own while
/// fewer than `metrics.max_deduper_series` pairs are admitted (or it is),
/// else `("_other", "_other")` ([`OVERFLOW_LABEL`]). A deleted deduper's
/// pair leaves the count ([`deduper_gone`]). The first deduper refused its
/// own labels is logged (warn, once per process).
pub fn deduper_labels(client_id: &str, name: &str) -> (String, String) {
    if admit(client_id, name, None) {
        (client_id.to_string(), name.to_string())
    } else {
        (OVERFLOW_LABEL.to_string(), OVERFLOW_LABEL.to_string())
    }
}

fn pair_labels(client: &str, deduper: &str) -> Labels {
    vec![("client", client.to_string()), ("deduper", deduper.to_string())]
}

fn rpc_labels(client: &str, deduper: &str, rpc: &'static str) -> Labels {
    let mut labels = pair_labels(client, deduper);
    labels.push(("rpc", rpc.to_string()));
    labels
}

/// Counts one data request that succeeded on a deduper, and its entities.
pub fn deduper_request(client_id: &str, name: &str, rpc: &'static str, entities: usize) {
    let labels = if admit(client_id, name, Some(rpc)) {
        rpc_labels(client_id, name, rpc)
    } else {
        rpc_labels(OVERFLOW_LABEL, OVERFLOW_LABEL, rpc)
    };
    let m = m();
    m.deduper_requests.get_or_create(&labels).inc();
    m.deduper_entities.get_or_create(&labels).inc_by(entities as u64);
}

/// Sets the live-figure gauges of a deduper (not for those past the label cap).
pub fn deduper_stats(client_id: &str, name: &str, s: &crate::engine::DeduperStats, p: Option<f64>) {
    if !admit(client_id, name, None) {
        return;
    }
    let m = m();
    let labels = pair_labels(client_id, name);
    let set = |metric: &str, v: f64| {
        m.deduper_gauge(metric).get_or_create(&labels).set(v);
    };
    set(DEDUPER_FILL, s.fill_ratio);
    set(DEDUPER_ENTITIES_ESTIMATE, s.estimated_entities);
    set(DEDUPER_FPR, s.estimated_fpr);
    set(DEDUPER_STATS_TIME, s.computed_at_ms as f64 / 1000.0);
    if let Some(p) = p {
        set(DEDUPER_TARGET_FPR, p);
    }
    if let Some(load) = s.load {
        set(DEDUPER_LOAD, load);
    }
}

/// Sets the per-generation gauges of a resized deduper from `generations`
/// (id, figures, retirement in ms since the Unix epoch), and removes those
/// of its generations no longer listed (retired).
pub fn deduper_generations(
    client_id: &str,
    name: &str,
    generations: &[(u32, crate::engine::DeduperStats, Option<i64>)],
) {
    if !admit(client_id, name, None) {
        return;
    }
    let m = m();
    let key = (client_id.to_string(), name.to_string());
    let ids: Vec<u32> = generations.iter().map(|(id, _, _)| *id).collect();
    let before = series()
        .generations
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, ids.clone())
        .unwrap_or_default();
    for gone in before.iter().filter(|id| !ids.contains(id)) {
        remove_generation(m, client_id, name, *gone);
    }
    for (id, s, retire_at) in generations {
        let labels = generation_labels(client_id, name, *id);
        let set = |metric: &str, v: f64| {
            m.deduper_gauge(metric).get_or_create(&labels).set(v);
        };
        set(DEDUPER_GENERATION_FILL, s.fill_ratio);
        set(DEDUPER_GENERATION_FPR, s.estimated_fpr);
        if let Some(load) = s.load {
            set(DEDUPER_GENERATION_LOAD, load);
        }
        match retire_at {
            Some(at) => set(DEDUPER_GENERATION_RETIRE, *at as f64 / 1000.0),
            None => {
                m.deduper_gauge(DEDUPER_GENERATION_RETIRE).remove(&labels);
            }
        }
    }
}

fn generation_labels(client: &str, deduper: &str, id: u32) -> Labels {
    let mut labels = pair_labels(client, deduper);
    labels.push(("generation", id.to_string()));
    labels
}

fn remove_generation(m: &Metrics, client: &str, deduper: &str, id: u32) {
    let labels = generation_labels(client, deduper, id);
    for name in [
        DEDUPER_GENERATION_FILL,
        DEDUPER_GENERATION_FPR,
        DEDUPER_GENERATION_LOAD,
        DEDUPER_GENERATION_RETIRE,
    ] {
        m.deduper_gauge(name).remove(&labels);
    }
}

/// A deleted deduper: removes every series of its pair (counters and
/// gauges) from `/metrics` and frees the pair under
/// `metrics.max_deduper_series` (a later deduper gets its own labels).
/// `figures` is accepted for the callers' sake and no longer needed: every
/// gauge of the pair is removed whether it was set or not. The `_other`
/// series stay (they count dedupers that never had their own).
pub fn deduper_gone(client_id: &str, name: &str, figures: Option<bool>) {
    let _ = figures;
    let key = (client_id.to_string(), name.to_string());
    let Some(rpcs) = series().admitted.lock().unwrap_or_else(|p| p.into_inner()).remove(&key) else {
        return;
    };
    let m = m();
    for rpc in rpcs {
        let labels = rpc_labels(client_id, name, rpc);
        m.deduper_requests.remove(&labels);
        m.deduper_entities.remove(&labels);
    }
    let labels = pair_labels(client_id, name);
    for (_, family) in &m.deduper_gauges {
        family.remove(&labels);
    }
    let generations = series()
        .generations
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key)
        .unwrap_or_default();
    for id in generations {
        remove_generation(m, client_id, name, id);
    }
}

/// Sets `solus_journal_unreadable_records`: journal records lost at start-up.
pub fn set_journal_unreadable_records(records: u64) {
    m().journal_unreadable.set(i64::try_from(records).unwrap_or(i64::MAX));
}

/// Sets `solus_checkpoint_consecutive_failures`.
pub fn set_checkpoint_failures(failures: u64) {
    m().checkpoint_failures.set(i64::try_from(failures).unwrap_or(i64::MAX));
}

/// Sets `solus_checkpoint_last_success_timestamp_seconds` (seconds since the epoch).
pub fn set_checkpoint_last_success(unix_seconds: i64) {
    m().checkpoint_last_success.set(unix_seconds);
}

/// Counts record ids remembered and answers given again from them.
pub fn records(remembered: usize, replays: usize) {
    let m = m();
    m.records_remembered.inc_by(remembered as u64);
    m.record_replays.inc_by(replays as u64);
}

/// Counts one resize started.
pub fn resize_started() {
    m().resizes_started.inc();
}

/// Counts one decision of the automatic resize policy (`started`,
/// `ceiling` or `failed`).
pub fn auto_resize(decision: &'static str) {
    m().auto_resize
        .get_or_create(&vec![("decision", decision.to_string())])
        .inc();
}

/// Counts one older generation retired.
pub fn generation_retired() {
    m().generations_retired.inc();
}

/// Counts one data request's config read again at its storage call.
pub fn config_reread() {
    m().config_rereads.inc();
}

/// Counts one slow write's bits written again with a later expiry.
pub fn restamp() {
    m().restamps.inc();
}

/// Sets the gauge of record ids held in memory.
pub fn set_records_held(n: u64) {
    m().records_held.set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// Sets the readiness gauge.
pub fn set_ready(ready: bool) {
    m().ready.set(i64::from(ready));
}

/// Counts one deleted deduper.
pub fn deduper_deleted() {
    m().dedupers.dec();
}

/// Sets the deduper gauge (at start-up).
pub fn set_dedupers(n: usize) {
    m().dedupers.set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// Counts one created deduper.
pub fn deduper_created() {
    m().dedupers.inc();
}

/// This replica's clock minus the shared storage's (HBase's), in seconds,
/// from the last measurement (see `storage::clock_bound`).
pub const CLOCK_OFFSET: &str = "solus_clock_offset_seconds";
/// The error bound of that measurement (half its round trip), in seconds.
pub const CLOCK_OFFSET_ERROR: &str = "solus_clock_offset_error_seconds";
/// The largest offset tolerated (`storage.hbase.max_clock_offset_ms`), in
/// seconds; 0 when not enforced.
pub const CLOCK_MAX_OFFSET: &str = "solus_clock_max_offset_seconds";

/// Sets the clock offset gauges from one measurement (all in ms).
pub fn set_clock_offset(offset_ms: i64, error_ms: i64, max_offset_ms: i64) {
    let m = m();
    m.clock_offset.set(offset_ms as f64 / 1000.0);
    m.clock_offset_error.set(error_ms as f64 / 1000.0);
    m.clock_max_offset.set(max_offset_ms as f64 / 1000.0);
}
