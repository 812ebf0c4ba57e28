//! Backend-agnostic request logic: validate, look up the deduper (cached),
//! hash every entity to its shard and `k` bits, group the bits into one
//! sorted address list, make one storage call, answer in request order.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use self::requests::{Kind, Record};
use crate::clock::now_ms;
use crate::contract::hashing;
use crate::deduper::{self, Deduper, Level, ModelError, SizeLimits, Sizing};
use crate::storage::{self, BitAddr, BitOrder, Cell, RequestKey, StorageError, Store};

mod fresh;
pub mod lanes;
mod placement;
pub mod records;
pub mod requests;
mod resize;
pub mod stats;

pub use self::resize::AutoResize;
pub use self::stats::{DeduperStats, StatsSettings};

/// Request limits (`limits.*` in the config).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most entities in one data request.
    pub max_entities_per_request: usize,
    /// Largest entity, in bytes.
    pub max_entity_bytes: usize,
    pub sizes: SizeLimits,
    /// How long a `request_id`'s answer is remembered, in ms.
    pub request_id_window_ms: u64,
    /// How long a record id answered absent is remembered, in ms.
    pub record_id_window_ms: u64,
    /// Most data requests of one deduper on the blocking pool at once
    /// ([`lanes`]).
    pub max_storage_tasks_per_deduper: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entities_per_request: 10_000,
            max_entity_bytes: 4096,
            sizes: SizeLimits::default(),
            request_id_window_ms: 300_000,
            record_id_window_ms: 3_600_000,
            max_storage_tasks_per_deduper: lanes::DEFAULT_TASKS_PER_DEDUPER,
        }
    }
}

/// Why a request failed; `api` maps each to a gRPC status.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("deduper {name:?} not found for client {client_id:?}")]
    NotFound { client_id: String, name: String },
    #[error("deduper {name:?} is inactive; reactivate it with UpdateDeduper(active = true)")]
    Inactive { name: String },
    #[error("deduper {name:?} already exists for client {client_id:?}")]
    AlreadyExists { client_id: String, name: String },
    #[error(
        "deduper {name:?} is active; deactivate it first (UpdateDeduper active = false, or `solus deduper update \
         --active false`), or delete it with force = true"
    )]
    Active { name: String },
    #[error("{0}")]
    Invalid(String),
    #[error(
        "deduper {name:?} keeps its bits in {recorded:?}, but the current settings put them in {current:?} \
         (storage.table / farm changed?); refusing to serve it empty: restore the setting"
    )]
    Misplaced {
        name: String,
        recorded: String,
        current: String,
    },
    /// A resize refused now (one is under way); the message says when it
    /// can be resized again.
    #[error("{0}")]
    Resize(String),
    #[error(transparent)]
    Storage(StorageError),
}

/// The outcome of one config lookup, shared by every caller waiting on it.
#[derive(Debug, Clone)]
enum Lookup {
    Found(Arc<Deduper>),
    NotFound,
    Failed(String, bool),
}

/// Looked-up configs with the time they were read.
type Cache = Arc<RwLock<HashMap<CacheKey, (Arc<Deduper>, Instant)>>>;

type Inflight = Arc<Mutex<HashMap<CacheKey, watch::Receiver<Option<Lookup>>>>>;

/// Sets its flag when dropped: tells queued storage work its caller left.
struct Abandon(Arc<AtomicBool>);

/// A checked write request (see [`Engine::prepare_write`]): the deduper
/// as looked up, the TTL in ms, the request id's key, and its window in ms.
struct Write {
    held: fresh::Held,
    ttl: u64,
    key: Option<RequestKey>,
    window: i64,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl From<ModelError> for EngineError {
    fn from(e: ModelError) -> Self {
        EngineError::Invalid(e.to_string())
    }
}

impl From<StorageError> for EngineError {
    fn from(e: StorageError) -> Self {
        EngineError::Storage(e)
    }
}

/// Fields of a create request, as received.
#[derive(Debug, Clone, Default)]
pub struct CreateSpec {
    pub client_id: String,
    pub name: String,
    pub expected_insertions: u64,
    pub false_positive_rate: f64,
    pub hash_functions: u32,
    pub shards: u32,
    pub bits_per_shard: u32,
    pub expiry_seconds: u64,
    pub level: Level,
}

/// How long a looked-up deduper config is trusted before re-reading it
/// (other replicas may have updated it).
const CONFIG_CACHE_TTL: Duration = Duration::from_secs(2);

/// Largest read, in bit addresses (entities x `k`), that may run on the
/// async worker ([`Store::entities_absent_now`]): about 2 ms of a core on a
/// filter far larger than the CPU caches, the bound on how long it keeps
/// the worker from its other connections. Larger reads go to the blocking
/// pool. On 2 cores, `CheckAbsence` at 1,000 entities ran 8-23% faster on
/// the worker than through the pool (docs/benchmarks.md).
const INLINE_READ_BITS: usize = 1 << 16;
/// Largest read, in entity bytes, hashed on the async worker: MD5 and
/// Murmur3 cost about 3 ms of a core per MiB, so long entities go to the
/// blocking pool however few addresses they make.
const INLINE_READ_BYTES: usize = 256 << 10;
/// Largest write, in bit addresses, that may run on the async worker
/// ([`Store::write_bits_now`], [`Store::read_then_write_bits_now`]): about
/// 2 ms of a core (2,340 entities at k = 7, at about 0.9 us of server CPU
/// each), the pause [`INLINE_READ_BITS`] allows reads. On 2 cores,
/// `AddIfAbsent` at 1,000 entities ran 22-35% faster there than through
/// the pool, with a third of the context switches (docs/benchmarks.md).
const INLINE_WRITE_BITS: usize = INLINE_READ_BITS / 4;

/// (client id, deduper name).
type CacheKey = (String, String);

/// The request engine, shared by every gRPC handler.
pub struct Engine {
    store: Arc<dyn Store>,
    limits: Limits,
    cache: Cache,
    /// Config lookups under way: later callers wait for the same read.
    inflight: Inflight,
    /// Raised by every [`Engine::forget`]: a lookup that read the store
    /// before a forget does not fill the cache after it (see `lookup`).
    forgotten: Arc<AtomicU64>,
    /// Dedupers whose config records no data location, logged once each.
    unrecorded: Mutex<HashSet<CacheKey>>,
    /// Dedupers refused as `Misplaced` since start: (client_id, name).
    misplaced: Mutex<std::collections::BTreeSet<CacheKey>>,
    /// Dedupers whose stored config was unusable at their last lookup.
    unusable: Mutex<std::collections::BTreeSet<CacheKey>>,
    /// Dedupers seen and their live figures (`stats.rs`).
    stats: Arc<stats::StatsBook>,
    stats_settings: StatsSettings,
    auto_resize: AutoResize,
    /// Each deduper's share of the blocking pool.
    lanes: lanes::Lanes,
}

/// Entities hashed and laid out for one storage call: `index[i*k + j]`
/// the position in `addrs` of entity `i`'s `j`-th bit; no index when that
/// position is `i*k + j` itself (entity order).
struct Plan {
    k: usize,
    addrs: Vec<BitAddr>,
    index: Option<Vec<u32>>,
}

impl Plan {
    /// The plan `order` asks for: sorted and unique ([`Plan::build`]), or
    /// for [`BitOrder::Any`], grouped by shard for writes (short journal
    /// records) and in entity order for reads, without a sort.
    fn for_store(order: BitOrder, write: bool, d: &Deduper, entities: &[impl AsRef<[u8]>]) -> Plan {
        match (order, write) {
            (BitOrder::SortedUnique, _) => Self::build(d, entities),
            (BitOrder::Any, true) => Self::by_shard(d, entities),
            (BitOrder::Any, false) => Self::in_entity_order(d, entities),
        }
    }

    /// Sorted and unique addresses.
    fn build(d: &Deduper, entities: &[impl AsRef<[u8]>]) -> Plan {
        let g = &d.geometry;
        let k = g.hash_functions as usize;
        let bits_of = |n: u64| u64::BITS - n.saturating_sub(1).leading_zeros();
        let (shard_bits, bit_bits) = (bits_of(u64::from(g.shards)), bits_of(u64::from(g.bits_per_shard)));
        let slot_bits = bits_of((entities.len() * k) as u64);
        if shard_bits + bit_bits + slot_bits <= u64::BITS {
            Self::build_packed(d, entities, bit_bits, slot_bits)
        } else {
            Self::build_pairs(d, entities)
        }
    }

    /// Every entity's `k` bits in request order, repeats kept.
    fn in_entity_order(d: &Deduper, entities: &[impl AsRef<[u8]>]) -> Plan {
        let k = d.geometry.hash_functions as usize;
        let mut addrs = Vec::with_capacity(entities.len() * k);
        Self::hash_all(d, entities, |shard, bit, _| addrs.push(BitAddr { shard, bit }));
        Plan { k, addrs, index: None }
    }

    /// [`Plan::in_entity_order`] with the entities grouped by shard (in
    /// request order within a shard): one sort key per entity, not per bit.
    fn by_shard(d: &Deduper, entities: &[impl AsRef<[u8]>]) -> Plan {
        let plan = Self::in_entity_order(d, entities);
        let k = plan.k;
        if k == 0 || d.geometry.shards <= 1 {
            return plan;
        }
        let mut keys: Vec<u64> = plan
            .addrs
            .chunks_exact(k)
            .enumerate()
            .map(|(i, bits)| (u64::from(bits[0].shard) << 32) | i as u64)
            .collect();
        radsort::sort(&mut keys);
        let mut addrs = Vec::with_capacity(plan.addrs.len());
        let mut index = vec![0u32; plan.addrs.len()];
        for key in keys {
            let i = key as u32 as usize;
            for (j, slot) in index[i * k..(i + 1) * k].iter_mut().enumerate() {
                *slot = (addrs.len() + j) as u32;
            }
            addrs.extend_from_slice(&plan.addrs[i * k..(i + 1) * k]);
        }
        Plan {
            k,
            addrs,
            index: Some(index),
        }
    }

    /// Calls `each(shard, bit, slot)` for every bit of every entity, `slot`
    /// counting from 0 in entity order.
    fn hash_all(d: &Deduper, entities: &[impl AsRef<[u8]>], mut each: impl FnMut(u32, u32, u32)) {
        let k = d.geometry.hash_functions as usize;
        let mut bits = Vec::with_capacity(entities.len() * k);
        hashing::bit_positions_many(entities, d.geometry.bits_per_shard, k, &mut bits);
        let mut slot = 0u32;
        for (e, bits) in entities.iter().zip(bits.chunks_exact(k.max(1))) {
            let shard = hashing::shard_of(e.as_ref(), d.geometry.shards);
            for &b in bits {
                each(shard, b, slot);
                slot += 1;
            }
        }
    }

    /// Sorts one `u64` per bit, `shard | bit | slot` packed, when they fit
    /// (nearly always): half the bytes the radix sort moves with pairs.
    fn build_packed(d: &Deduper, entities: &[impl AsRef<[u8]>], bit_bits: u32, slot_bits: u32) -> Plan {
        let k = d.geometry.hash_functions as usize;
        let mut packed: Vec<u64> = Vec::with_capacity(entities.len() * k);
        Self::hash_all(d, entities, |shard, bit, slot| {
            let key = (u64::from(shard) << bit_bits) | u64::from(bit);
            packed.push((key << slot_bits) | u64::from(slot));
        });
        radsort::sort(&mut packed);
        let slot_mask = (1u64 << slot_bits) - 1;
        let bit_mask = (1u64 << bit_bits) - 1;
        Self::group(
            k,
            packed.len(),
            packed.into_iter().map(|v| {
                let key = v >> slot_bits;
                (
                    BitAddr {
                        shard: (key >> bit_bits) as u32,
                        bit: (key & bit_mask) as u32,
                    },
                    (v & slot_mask) as u32,
                )
            }),
        )
    }

    /// Sorts `(shard << 32 | bit, slot)` pairs: any geometry and batch.
    fn build_pairs(d: &Deduper, entities: &[impl AsRef<[u8]>]) -> Plan {
        let k = d.geometry.hash_functions as usize;
        let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(entities.len() * k);
        Self::hash_all(d, entities, |shard, bit, slot| {
            keyed.push(((u64::from(shard) << 32) | u64::from(bit), slot))
        });
        // Keys use few distinct high bytes, which radix sort skips.
        radsort::sort_by_key(&mut keyed, |&(key, _)| key);
        Self::group(
            k,
            keyed.len(),
            keyed.into_iter().map(|(key, slot)| {
                (
                    BitAddr {
                        shard: (key >> 32) as u32,
                        bit: key as u32,
                    },
                    slot,
                )
            }),
        )
    }

    /// Builds the plan from `(address, slot)` in address order.
    fn group(k: usize, len: usize, sorted: impl Iterator<Item = (BitAddr, u32)>) -> Plan {
        let mut addrs: Vec<BitAddr> = Vec::with_capacity(len);
        let mut index = vec![0u32; len];
        for (addr, slot) in sorted {
            if addrs.last() != Some(&addr) {
                addrs.push(addr);
            }
            index[slot as usize] = (addrs.len() - 1) as u32;
        }
        Plan {
            k,
            addrs,
            index: Some(index),
        }
    }

    /// Positions in `addrs` of entity `i`'s bits, in bit order.
    fn entity_bits(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let slots = i * self.k..(i + 1) * self.k;
        let index = self.index.as_deref().map(|index| &index[slots.clone()]);
        slots.enumerate().map(move |(j, slot)| match index {
            Some(index) => index[j] as usize,
            None => slot,
        })
    }
}

impl Engine {
    pub fn new(store: Arc<dyn Store>, limits: Limits) -> Engine {
        Engine {
            store,
            lanes: lanes::Lanes::new(limits.max_storage_tasks_per_deduper),
            limits,
            cache: Arc::new(RwLock::new(HashMap::new())),
            inflight: Arc::new(Mutex::new(HashMap::new())),
            forgotten: Arc::new(AtomicU64::new(0)),
            unrecorded: Mutex::new(HashSet::new()),
            misplaced: Mutex::new(std::collections::BTreeSet::new()),
            unusable: Mutex::new(std::collections::BTreeSet::new()),
            stats: Arc::new(stats::StatsBook::default()),
            stats_settings: StatsSettings::default(),
            auto_resize: AutoResize::default(),
        }
    }

    /// Sets the automatic resize policy (`resize.*`); off otherwise.
    pub fn with_auto_resize(mut self, policy: AutoResize) -> Engine {
        self.auto_resize = policy;
        self
    }

    /// Sets the statistics settings (`stats.*`); defaults otherwise.
    pub fn with_stats_settings(mut self, settings: StatsSettings) -> Engine {
        self.stats_settings = settings;
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs blocking storage work off the async workers. When the caller
    /// goes away (deadline passed, cancelled) before the work left the
    /// blocking pool's queue, the work is dropped without touching storage;
    /// work already running finishes.
    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        let gone = Arc::new(AtomicBool::new(false));
        let _abandon = Abandon(gone.clone());
        tokio::task::spawn_blocking(move || {
            if gone.load(Ordering::SeqCst) {
                return Err(EngineError::Storage(StorageError::Unavailable(
                    "caller left before storage was reached".into(),
                )));
            }
            // Backends skip remote calls not yet made once the caller is gone.
            storage::caller::run_for(Some(gone), f)
        })
        .await
        .unwrap_or_else(|e| {
            Err(EngineError::Storage(StorageError::Unavailable(format!(
                "storage task failed: {e}"
            ))))
        })
    }

    /// [`Engine::blocking`] in the deduper's lane ([`lanes`]): waits,
    /// holding no thread, while the deduper has its share of the pool
    /// there; the place is held until the work ends, also when the caller
    /// left meanwhile.
    async fn blocking_for<T: Send + 'static>(
        &self,
        client_id: &str,
        name: &str,
        f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        let place = self.lanes.enter(client_id, name).await;
        Self::blocking(move || {
            let _place = place;
            f()
        })
        .await
    }

    fn validate_entities(&self, entities: &[impl AsRef<[u8]>]) -> Result<(), EngineError> {
        let max = self.limits.max_entities_per_request;
        if entities.len() > max {
            return Err(EngineError::Invalid(format!(
                "{} entities in one request; at most {max} are allowed (limits.max_entities_per_request)",
                entities.len()
            )));
        }
        let max_bytes = self.limits.max_entity_bytes;
        for (i, e) in entities.iter().enumerate() {
            let len = e.as_ref().len();
            if len == 0 {
                return Err(EngineError::Invalid(format!(
                    "entity #{i} is empty; entities must be 1 to {max_bytes} bytes"
                )));
            }
            if len > max_bytes {
                return Err(EngineError::Invalid(format!(
                    "entity #{i} is {len} bytes; entities must be 1 to {max_bytes} bytes (limits.max_entity_bytes)"
                )));
            }
        }
        Ok(())
    }

    /// Looks up an active deduper for a data call.
    async fn active_deduper(&self, client_id: &str, name: &str) -> Result<Arc<Deduper>, EngineError> {
        let d = self.cached_deduper(client_id, name).await?;
        if !d.active {
            return Err(EngineError::Inactive { name: name.to_string() });
        }
        Ok(d)
    }

    /// The config of a deduper for a data call: from the cache, or from one
    /// storage read shared by every concurrent caller. The read runs to the
    /// end and fills the cache even when its callers left. Errors:
    /// `Invalid` names, `NotFound`, `Misplaced`, `Storage`.
    async fn cached_deduper(&self, client_id: &str, name: &str) -> Result<Arc<Deduper>, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("deduper", name)?;
        let key = (client_id.to_string(), name.to_string());
        if let Some((d, at)) = self.cache.read().unwrap_or_else(|p| p.into_inner()).get(&key)
            && at.elapsed() < CONFIG_CACHE_TTL
        {
            return self.check_location(&key, d.clone());
        }
        let mut rx = self.lookup(&key);
        let outcome = rx
            .wait_for(Option::is_some)
            .await
            .map(|v| v.clone())
            .ok()
            .flatten()
            .unwrap_or_else(|| Lookup::Failed("config lookup task ended".into(), false));
        match &outcome {
            Lookup::Failed(m, true) => self.note_usable(&key, Some(m)),
            Lookup::Found(_) | Lookup::NotFound => self.note_usable(&key, None),
            Lookup::Failed(_, false) => {}
        }
        match outcome {
            Lookup::Found(d) => self.check_location(&key, d),
            Lookup::NotFound => Err(EngineError::NotFound {
                client_id: key.0,
                name: key.1,
            }),
            Lookup::Failed(m, true) => Err(EngineError::Storage(StorageError::Corrupt(m))),
            Lookup::Failed(m, false) => Err(EngineError::Storage(StorageError::Unavailable(m))),
        }
    }

    /// Joins the lookup of `key` under way, or starts one on its own task.
    /// A lookup that began before an [`Engine::forget`] serves its own
    /// callers but neither fills the cache nor takes later callers: once
    /// `forget` returns, this process serves only configs read after it
    /// (what lets a resize on a store no other process shares switch
    /// writes after the margin alone, `resize_timing`).
    fn lookup(&self, key: &CacheKey) -> watch::Receiver<Option<Lookup>> {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rx) = inflight.get(key) {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        inflight.insert(key.clone(), rx.clone());
        // Read before the store is: a forget from here on wins.
        let epoch = self.forgotten.load(Ordering::SeqCst);
        let (store, cache, inflight, key, forgotten) = (
            self.store.clone(),
            self.cache.clone(),
            self.inflight.clone(),
            key.clone(),
            self.forgotten.clone(),
        );
        let book = self.stats.clone();
        let ours = rx.clone();
        tokio::spawn(async move {
            let (c, n) = key.clone();
            let read = tokio::task::spawn_blocking(move || store.get_deduper(&c, &n)).await;
            let outcome = match read {
                Ok(Ok(Some(d))) => Lookup::Found(Arc::new(d)),
                Ok(Ok(None)) => Lookup::NotFound,
                Ok(Err(StorageError::Corrupt(m))) => Lookup::Failed(m, true),
                // The message only: `cached_deduper` wraps it in Unavailable again.
                Ok(Err(StorageError::Unavailable(m))) => Lookup::Failed(m, false),
                Ok(Err(e)) => Lookup::Failed(e.to_string(), false),
                Err(e) => Lookup::Failed(format!("storage task failed: {e}"), false),
            };
            if let Lookup::Found(d) = &outcome {
                let mut cache = cache.write().unwrap_or_else(|p| p.into_inner());
                // `forget` raises the epoch under this same lock.
                if forgotten.load(Ordering::SeqCst) == epoch {
                    book.note(d);
                    cache.insert(key.clone(), (d.clone(), Instant::now()));
                }
            }
            {
                let mut inflight = inflight.lock().unwrap_or_else(|p| p.into_inner());
                // A forget may have let a newer lookup of this key in meanwhile.
                if inflight.get(&key).is_some_and(|rx| rx.same_channel(&ours)) {
                    inflight.remove(&key);
                }
            }
            let _ = tx.send(Some(outcome));
        });
        rx
    }

    /// Dedupers refused since start because their bits live elsewhere than
    /// the current settings say, as (client_id, name); the server reports
    /// each as a `NOT_SERVING` health service (see `server.rs`).
    pub fn misplaced_dedupers(&self) -> Vec<(String, String)> {
        self.misplaced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Refuses a deduper whose recorded data location differs from where
    /// the current settings put its bits (`Misplaced`, logged). A config
    /// without a recorded location is taken to match (logged once).
    fn check_location(&self, key: &CacheKey, d: Arc<Deduper>) -> Result<Arc<Deduper>, EngineError> {
        let Some(current) = self.store.data_location(&d) else {
            return Ok(d);
        };
        match &d.data_location {
            Some(recorded) if *recorded != current => {
                self.misplaced
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone());
                tracing::error!(
                    client_id = %d.client_id,
                    deduper = %d.name,
                    recorded = %recorded,
                    current = %current,
                    "deduper refused: its bits live elsewhere than the current settings say"
                );
                Err(EngineError::Misplaced {
                    name: d.name.clone(),
                    recorded: recorded.clone(),
                    current,
                })
            }
            Some(_) => Ok(d),
            None => {
                if self
                    .unrecorded
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone())
                {
                    tracing::info!(
                        client_id = %d.client_id,
                        deduper = %d.name,
                        location = %current,
                        "deduper config records no data location (older writer): taken to be the current one"
                    );
                }
                Ok(d)
            }
        }
    }

    async fn load_deduper(&self, client_id: &str, name: &str) -> Result<Deduper, EngineError> {
        let store = self.store.clone();
        let (c, n) = (client_id.to_string(), name.to_string());
        Self::blocking(move || {
            store.get_deduper(&c, &n)?.ok_or(EngineError::NotFound {
                client_id: c.clone(),
                name: n.clone(),
            })
        })
        .await
    }

    /// Drops this process's cached config of a deduper after a change to
    /// it: every lookup from here on reads the store again.
    fn forget(&self, client_id: &str, name: &str) {
        let key = (client_id.to_string(), name.to_string());
        {
            let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
            self.forgotten.fetch_add(1, Ordering::SeqCst);
            cache.remove(&key);
        }
        // Later callers start a lookup of their own instead of joining one
        // that may have read the config before the change.
        self.inflight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
    }

    /// Remembers `entities` for `ttl_ms` (0 = the deduper's expiry). Returns
    /// the number added. One storage write.
    pub async fn add<E>(&self, client_id: &str, name: &str, entities: Vec<E>, ttl_ms: u64) -> Result<u32, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
    {
        self.add_with_id(client_id, name, entities, ttl_ms, None).await
    }

    /// [`Engine::add`], safe to retry with the same `request_id` within
    /// `limits.request_id_window_seconds`: the first attempt's record is
    /// stored before its bits, and a retry returns its answer and writes
    /// the bits again (with the later of the first attempt's expiry and
    /// its own). Errors besides
    /// `add`'s: `Invalid` for a reused `request_id` with another request.
    pub async fn add_with_id<E>(
        &self,
        client_id: &str,
        name: &str,
        entities: Vec<E>,
        ttl_ms: u64,
        request_id: Option<Vec<u8>>,
    ) -> Result<u32, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
    {
        let Some(Write { held, ttl, key, window }) = self
            .prepare_write(client_id, name, &entities, ttl_ms, request_id)
            .await?
        else {
            return Ok(0);
        };
        if key.is_none()
            && let Some(added) = self.write_now(&held.d, &entities, ttl, false)
        {
            return added.map(|_| entities.len() as u32);
        }
        let store = self.store.clone();
        self.blocking_for(client_id, name, move || {
            let d = held.current(&*store)?;
            let now = now_ms();
            let expire = check_expire(&*store, now, ttl)?;
            // Adds go to the newest generation writes have moved to.
            let (w, _) = resize::split(&d, now);
            let plan = Plan::for_store(store.bit_order(), true, &w, &entities);
            let Some(key) = key else {
                store.write_bits(&w, &plan.addrs, expire)?;
                restamp_if_slow(&*store, &d, now, &entities, ttl)?;
                return Ok(entities.len() as u32);
            };
            let digest = requests::digest(ttl_ms, &entities);
            let ours = Record {
                kind: Kind::Add,
                digest,
                expire_ms: expire,
                count: entities.len() as u32,
                absent: Vec::new(),
            };
            let record = match store.recall_request(&key)? {
                Some(earlier) => Record::decode(&earlier)?,
                None => match store.remember_request(&key, &ours.encode(), now + window)? {
                    Some(earlier) => Record::decode(&earlier)?,
                    None => ours,
                },
            };
            write_again(&*store, &record, Kind::Add, &digest, &w, &plan.addrs, expire)?;
            restamp_if_slow(&*store, &d, now, &entities, ttl)?;
            Ok(record.count)
        })
        .await
    }

    /// A small write of `entities` to `d` with `ttl` (ms) here on the async
    /// worker ([`Store::write_bits_now`], or with `read`
    /// [`Store::read_then_write_bits_now`]): two thread hops to the
    /// blocking pool and back cost more than the write itself. With `read`,
    /// the answer as `AddIfAbsent` gives it; without, an empty `Vec`.
    /// `None` (nothing written) when the write must go to the pool instead:
    /// a store that is not in memory, a resize under way, a large request,
    /// or the store gave way.
    fn write_now<E: AsRef<[u8]>>(
        &self,
        d: &Deduper,
        entities: &[E],
        ttl: u64,
        read: bool,
    ) -> Option<Result<Vec<bool>, EngineError>> {
        let k = d.geometry.hash_functions as usize;
        if !self.store.writes_to_memory()
            || !d.generations.is_empty()
            || entities.len() * k > INLINE_WRITE_BITS
            || entities.iter().map(|e| e.as_ref().len()).sum::<usize>() > INLINE_READ_BYTES
        {
            return None;
        }
        let now = now_ms();
        let expire = match check_expire(&*self.store, now, ttl) {
            Ok(expire) => expire,
            Err(e) => return Some(Err(e)),
        };
        // A panic fails this request only, as on the blocking pool.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let plan = Plan::for_store(self.store.bit_order(), true, d, entities);
            if !read {
                let written = self.store.write_bits_now(d, &plan.addrs, expire)?;
                return Some(written.map(|()| Vec::new()).map_err(EngineError::from));
            }
            let cells = match self.store.read_then_write_bits_now(d, &plan.addrs, expire)? {
                Ok(cells) => cells,
                Err(e) => return Some(Err(e.into())),
            };
            Some(check_len(&cells, &plan).map(|()| answer_of(&plan, entities.len(), &cells, now)))
        }));
        written.unwrap_or_else(|_| {
            Some(Err(EngineError::Storage(StorageError::Unavailable(
                "storage task failed: it panicked".into(),
            ))))
        })
    }

    /// What `Add` and `AddIfAbsent` check before storage: entities, the
    /// request id, an active deduper and the TTL. `None` for an empty
    /// request (a no-op). Errors: `Invalid`, `NotFound`, `Inactive`,
    /// `Misplaced`, `Storage`.
    async fn prepare_write<E: AsRef<[u8]>>(
        &self,
        client_id: &str,
        name: &str,
        entities: &[E],
        ttl_ms: u64,
        request_id: Option<Vec<u8>>,
    ) -> Result<Option<Write>, EngineError> {
        self.validate_entities(entities)?;
        let request_id = requests::given_id(request_id);
        if let Some(id) = &request_id {
            requests::validate_id(id)?;
        }
        let d = self.active_deduper(client_id, name).await?;
        let ttl = d.effective_ttl_ms(ttl_ms)?;
        if entities.is_empty() {
            return Ok(None);
        }
        let key = request_id.map(|request_id| RequestKey {
            client_id: client_id.to_string(),
            deduper: name.to_string(),
            request_id,
        });
        let window = self.limits.request_id_window_ms as i64;
        Ok(Some(Write {
            held: fresh::Held::new(d),
            ttl,
            key,
            window,
        }))
    }

    /// For each entity: true = definitely absent (never added, or expired).
    /// One storage read.
    pub async fn check_absence<E>(
        &self,
        client_id: &str,
        name: &str,
        entities: Vec<E>,
    ) -> Result<Vec<bool>, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
    {
        self.check_absence_with_records(client_id, name, entities, Vec::<Vec<u8>>::new())
            .await
    }

    /// [`Engine::check_absence`] with per-record identity: an entity read
    /// present whose record id (one per entity, or none; see
    /// [`records`]) an earlier `AddIfAbsent` remembered for it is answered
    /// absent. One more storage read, of the record ids of the entities read
    /// present. Errors besides `check_absence`'s: `Invalid` record ids.
    pub async fn check_absence_with_records<E, R>(
        &self,
        client_id: &str,
        name: &str,
        entities: Vec<E>,
        record_ids: Vec<R>,
    ) -> Result<Vec<bool>, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
        R: AsRef<[u8]> + Send + Sync + 'static,
    {
        self.validate_entities(&entities)?;
        records::validate(&record_ids, entities.len())?;
        let d = self.active_deduper(client_id, name).await?;
        if entities.is_empty() {
            return Ok(Vec::new());
        }
        // A small read the store answers from memory, here on the async
        // worker: two thread hops cost more than the read itself.
        let k = d.geometry.hash_functions as usize;
        if self.store.reads_from_memory()
            && record_ids.is_empty()
            && d.generations.is_empty()
            && entities.len() * k <= INLINE_READ_BITS
            && entities.iter().map(|e| e.as_ref().len()).sum::<usize>() <= INLINE_READ_BYTES
        {
            let plan = Plan::for_store(self.store.bit_order(), false, &d, &entities);
            if plan.index.is_none() && plan.k > 0 {
                let now = now_ms();
                if let Some(absent) = self.store.entities_absent_now(&d, &plan.addrs, plan.k, now) {
                    return check_entities(absent?, entities.len());
                }
            }
        }
        let store = self.store.clone();
        let held = fresh::Held::new(d);
        self.blocking_for(client_id, name, move || {
            let d = held.current(&*store)?;
            let now = now_ms();
            // Absent only if absent in every live generation.
            let mut absent = if d.generations.is_empty() {
                absent_in(&*store, &d, &entities, now)?
            } else {
                let view = crate::generations::View::at(&d, now);
                resize::absent_in_all(&*store, view.readers.iter(), &entities, now, &resize::newest_filter(&d))?
            };
            if !record_ids.is_empty() {
                let replays = records::apply_replays(&entities, &record_ids, &mut absent, |asked| {
                    store.recall_records(&d, asked, now)
                })?;
                crate::metrics::records(0, replays);
            }
            Ok(absent)
        })
        .await
    }

    /// What `check_absence` would have said just before this call, then
    /// `add`; a later entity sees the earlier ones. One storage
    /// read-and-write (atomic on the embedded store).
    pub async fn add_if_absent<E>(
        &self,
        client_id: &str,
        name: &str,
        entities: Vec<E>,
        ttl_ms: u64,
    ) -> Result<Vec<bool>, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
    {
        self.add_if_absent_with_id(client_id, name, entities, ttl_ms, None)
            .await
    }

    /// [`Engine::add_if_absent`], safe to retry with the same `request_id`
    /// within `limits.request_id_window_seconds`: the answer is computed
    /// from the read, recorded, and only then are the bits written; a retry
    /// returns the recorded answer and writes the bits again. Errors besides
    /// `add_if_absent`'s: `Invalid` for a reused `request_id` with another
    /// request.
    pub async fn add_if_absent_with_id<E>(
        &self,
        client_id: &str,
        name: &str,
        entities: Vec<E>,
        ttl_ms: u64,
        request_id: Option<Vec<u8>>,
    ) -> Result<Vec<bool>, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
    {
        self.add_if_absent_with_records(client_id, name, entities, ttl_ms, request_id, Vec::<Vec<u8>>::new())
            .await
    }

    /// [`Engine::add_if_absent_with_id`] with per-record identity (see
    /// [`records`]): `record_ids` is empty or one per entity. In the
    /// read-to-write window: the record ids of entities read present are
    /// looked up (a remembered one with the same entity is a replay and is
    /// answered absent again), then the ids of entities read absent are
    /// remembered for `limits.record_id_window_seconds`, and only then are
    /// the bits written. Errors besides `add_if_absent`'s: `Invalid` record
    /// ids; `Storage(Capacity)` when the store's record budget is full
    /// (nothing written).
    pub async fn add_if_absent_with_records<E, R>(
        &self,
        client_id: &str,
        name: &str,
        entities: Vec<E>,
        ttl_ms: u64,
        request_id: Option<Vec<u8>>,
        record_ids: Vec<R>,
    ) -> Result<Vec<bool>, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
        R: AsRef<[u8]> + Send + Sync + 'static,
    {
        records::validate(&record_ids, entities.len())?;
        let record_window = self.limits.record_id_window_ms as i64;
        let Some(Write { held, ttl, key, window }) = self
            .prepare_write(client_id, name, &entities, ttl_ms, request_id)
            .await?
        else {
            return Ok(Vec::new());
        };
        if key.is_none()
            && record_ids.is_empty()
            && let Some(answer) = self.write_now(&held.d, &entities, ttl, true)
        {
            return answer;
        }
        let store = self.store.clone();
        self.blocking_for(client_id, name, move || {
            let d = held.current(&*store)?;
            let now = now_ms();
            // The newest generation's own atomic add-if-absent, and a read of
            // the older ones (no writes go there once writes moved on).
            let (w, others) = resize::split(&d, now);
            // The store's own read-then-write pass (no ids) sees an address
            // repeated in the request as written by its first place. Reading
            // every cell before writing any (ids to record between) needs each
            // address once, so that a later entity sees an earlier one's bits
            // (`answer_of`): one new entity twice in a request was answered
            // absent twice (issue 45).
            let order = if key.is_none() && record_ids.is_empty() {
                store.bit_order()
            } else {
                BitOrder::SortedUnique
            };
            let plan = Plan::for_store(order, true, &w, &entities);
            let expire = check_expire(&*store, now, ttl)?;
            let digest = key.as_ref().map(|_| requests::digest(ttl_ms, &entities));
            if let (Some(key), Some(digest)) = (&key, &digest)
                && let Some(earlier) = store.recall_request(key)?
            {
                let record = Record::decode(&earlier)?;
                write_again(&*store, &record, Kind::AddIfAbsent, digest, &w, &plan.addrs, expire)?;
                restamp_if_slow(&*store, &d, now, &entities, ttl)?;
                return Ok(record.absent);
            }
            // Read after the write: of two racing adds of one entity to two
            // generations (at the switch), the later read sees the other's bits.
            let narrow_by_others = |answer: &mut [bool]| {
                if others.is_empty() {
                    return Ok(());
                }
                // The write above before these reads, for the argument above.
                std::sync::atomic::fence(Ordering::SeqCst);
                let newest = resize::newest_filter(&d);
                resize::narrow_to_absent_in_all(&*store, others.iter(), &entities, now, answer, &newest)
            };
            if key.is_none() && record_ids.is_empty() {
                // Nothing to record between the read and the write.
                let cells = store.read_then_write_bits(&w, &plan.addrs, expire)?;
                check_len(&cells, &plan)?;
                let mut answer = answer_of(&plan, entities.len(), &cells, now);
                narrow_by_others(&mut answer)?;
                restamp_if_slow(&*store, &d, now, &entities, ttl)?;
                return Ok(answer);
            }
            let mut before = vec![true; entities.len()];
            narrow_by_others(&mut before)?;
            let mut answer = None;
            let mut earlier = None;
            let mut replayed = vec![false; entities.len()];
            let result = store.read_and_write_bits(&w, &plan.addrs, expire, &mut |cells: &[Cell]| {
                if cells.len() != plan.addrs.len() {
                    return Err(StorageError::Corrupt(format!(
                        "storage answered {} cells for {} bits",
                        cells.len(),
                        plan.addrs.len()
                    )));
                }
                let mut absent = answer_of(&plan, entities.len(), cells, now);
                resize::mask(&mut absent, &before);
                if !record_ids.is_empty() {
                    let read = absent.clone();
                    let replays = records::apply_replays(&entities, &record_ids, &mut absent, |asked| {
                        store.recall_records(&d, asked, now)
                    })?;
                    replayed = absent.iter().zip(&read).map(|(&a, &r)| a && !r).collect();
                    // Replays are remembered again, from now: a job that keeps
                    // failing before its next checkpoint replays the same
                    // records for longer than one window after their first
                    // attempt, and each replay must find its memory.
                    let remember = records::first_occurrences(&entities, &record_ids, &absent);
                    if !remember.is_empty() {
                        store.remember_records(&d, &remember, now + record_window)?;
                    }
                    crate::metrics::records(remember.len() - replays, replays);
                }
                if let (Some(key), Some(digest)) = (&key, digest) {
                    let ours = Record {
                        kind: Kind::AddIfAbsent,
                        digest,
                        expire_ms: expire,
                        count: entities.len() as u32,
                        absent: absent.clone(),
                    };
                    if let Some(e) = store.remember_request(key, &ours.encode(), now + window)? {
                        // Another attempt recorded first: write nothing here.
                        earlier = Some(e);
                        return Err(StorageError::AlreadyExists);
                    }
                }
                answer = Some(absent);
                Ok(())
            });
            if let (Some(e), Some(digest)) = (earlier, &digest) {
                let record = Record::decode(&e)?;
                write_again(&*store, &record, Kind::AddIfAbsent, digest, &w, &plan.addrs, expire)?;
                restamp_if_slow(&*store, &d, now, &entities, ttl)?;
                return Ok(record.absent);
            }
            let cells = result?;
            answer.ok_or_else(|| EngineError::Storage(StorageError::Corrupt("no answer computed".into())))?;
            // The store's final cells decide: the HBase guard returns the rows it
            // lost a race on as set, after the answer was recorded from its read.
            // A replay stays absent whatever the cells say.
            let mut final_answer = answer_of(&plan, entities.len(), &cells, now);
            narrow_by_others(&mut final_answer)?;
            for (a, &r) in final_answer.iter_mut().zip(&replayed) {
                *a |= r;
            }
            restamp_if_slow(&*store, &d, now, &entities, ttl)?;
            Ok(final_answer)
        })
        .await
    }

    /// Creates a deduper. Errors: `Invalid` for bad names, sizes or expiry;
    /// `AlreadyExists`; `Storage`.
    pub async fn create_deduper(&self, spec: CreateSpec) -> Result<Deduper, EngineError> {
        deduper::validate_name("client_id", &spec.client_id)?;
        deduper::validate_name("name", &spec.name)?;
        deduper::validate_expiry(spec.expiry_seconds)?;
        let sizing = deduper::sizing_from_fields(
            spec.expected_insertions,
            spec.false_positive_rate,
            spec.hash_functions,
            spec.shards,
            spec.bits_per_shard,
        )?;
        let geometry = deduper::resolve_geometry(&sizing, &self.limits.sizes)?;
        if geometry.bits_per_shard > crate::contract::sizing::UNBIASED_BITS_PER_SHARD {
            // Only reachable with limits.allow_biased_bits_per_shard on.
            tracing::warn!(client_id = %spec.client_id, name = %spec.name, bits_per_shard = geometry.bits_per_shard,
                "creating a deduper with bits_per_shard above 2^30 (allowed by limits.allow_biased_bits_per_shard): \
                 its bit positions are not uniform and its false-positive rate is above the geometry's");
        }
        let (n, p) = match sizing {
            Sizing::Expected { n, p } => (Some(n), Some(p)),
            Sizing::Explicit(_) => (None, None),
        };
        let now = now_ms();
        check_expire(&*self.store, now, spec.expiry_seconds.saturating_mul(1000))?;
        let d = Deduper {
            expected_insertions: n,
            false_positive_rate: p,
            ..Deduper::new(
                spec.client_id,
                spec.name,
                geometry,
                spec.expiry_seconds,
                spec.level,
                now,
            )
        };
        let d = Deduper {
            data_location: self.store.data_location(&d),
            ..d
        };
        let store = self.store.clone();
        let created = d.clone();
        Self::blocking(move || match store.create_deduper(&created) {
            Err(StorageError::AlreadyExists) => Err(EngineError::AlreadyExists {
                client_id: created.client_id.clone(),
                name: created.name.clone(),
            }),
            other => Ok(other?),
        })
        .await?;
        self.forget(&d.client_id, &d.name);
        self.stats.note(&d);
        Ok(d)
    }

    /// One deduper, active or not. Errors: `Invalid` names, `NotFound`, `Storage`.
    pub async fn get_deduper(&self, client_id: &str, name: &str) -> Result<Deduper, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("name", name)?;
        let d = self.load_deduper(client_id, name).await?;
        self.stats.note(&d);
        Ok(d)
    }

    /// A client's dedupers sorted by name, and apart those whose stored
    /// config cannot be used ([`crate::storage::Unreadable`]), sorted by name.
    pub async fn list_dedupers(
        &self,
        client_id: &str,
        active_only: bool,
    ) -> Result<(Vec<Deduper>, Vec<crate::storage::Unreadable>), EngineError> {
        deduper::validate_name("client_id", client_id)?;
        let store = self.store.clone();
        let c = client_id.to_string();
        let (list, unreadable) = Self::blocking(move || Ok(store.list_dedupers(&c, active_only)?)).await?;
        list.iter().for_each(|d| self.stats.note(d));
        Ok((list, unreadable))
    }

    /// Changes `active` and/or `expiry_seconds`; the geometry never changes.
    /// Atomic against concurrent updates: returns only once this change is
    /// in the stored config, and returns that config. Errors: `Invalid`
    /// names or expiry (also one the store would cut short), `NotFound`,
    /// `Storage`.
    pub async fn update_deduper(
        &self,
        client_id: &str,
        name: &str,
        active: Option<bool>,
        expiry_seconds: Option<u64>,
    ) -> Result<Deduper, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("name", name)?;
        if let Some(e) = expiry_seconds {
            deduper::validate_expiry(e)?;
            check_expire(&*self.store, now_ms(), e.saturating_mul(1000))?;
        }
        let store = self.store.clone();
        let (c, n) = (client_id.to_string(), name.to_string());
        let updated = Self::blocking(move || {
            let change = move |d: &mut Deduper| {
                if let Some(e) = expiry_seconds {
                    d.set_expiry(e);
                    // A longer expiry keeps older generations longer.
                    crate::generations::seal(d);
                }
                if let Some(a) = active {
                    d.active = a;
                }
                d.update_time_ms = now_ms();
            };
            store
                .update_deduper(&c, &n, &change)?
                .ok_or(EngineError::NotFound { client_id: c, name: n })
        })
        .await?;
        self.forget(client_id, name);
        self.stats.note(&updated);
        Ok(updated)
    }
}

/// `absent`, when it answers `entities` entities; `Corrupt` otherwise.
fn check_entities(absent: Vec<bool>, entities: usize) -> Result<Vec<bool>, EngineError> {
    if absent.len() != entities {
        return Err(EngineError::Storage(StorageError::Corrupt(format!(
            "storage answered {} entities for {entities}",
            absent.len()
        ))));
    }
    Ok(absent)
}

/// Whether each of `entities` is absent from the filter of `d` (one
/// physical filter) at `now`: one storage read. Errors: `Storage`.
fn absent_in<E: AsRef<[u8]>>(
    store: &dyn Store,
    d: &Deduper,
    entities: &[E],
    now: i64,
) -> Result<Vec<bool>, EngineError> {
    let plan = Plan::for_store(store.bit_order(), false, d, entities);
    if plan.index.is_none() && plan.k > 0 {
        // Entity order: the store may stop at each entity's first unset bit.
        check_entities(store.entities_absent(d, &plan.addrs, plan.k, now)?, entities.len())
    } else {
        let cells = store.read_bits(d, &plan.addrs)?;
        check_len(&cells, &plan)?;
        Ok((0..entities.len())
            .map(|i| plan.entity_bits(i).any(|a| !cells[a].is_set(now)))
            .collect())
    }
}

/// `absent` per entity from the cells read: an entity is absent when one
/// of its bits is unset, and a later entity sees the earlier ones as added.
fn answer_of(plan: &Plan, entities: usize, cells: &[Cell], now: i64) -> Vec<bool> {
    let mut set: Vec<bool> = cells.iter().map(|c| c.is_set(now)).collect();
    (0..entities)
        .map(|i| {
            let absent = plan.entity_bits(i).any(|a| !set[a]);
            plan.entity_bits(i).for_each(|a| set[a] = true);
            absent
        })
        .collect()
}

/// Longest, in ms, a write may take from its clock read (which stamps its
/// bits' expiry) to its end before its bits are written again: the slack
/// the history checker allows between the clock read and the answer.
const RESTAMP_AFTER_MS: i64 = 1000;

/// A write's TTL counts from its clock read, and its caller's from the
/// answer: a storage call that took seconds (HBase under load, a guard
/// claim waited for) left its entities that much less time after the
/// answer (seen by the history checker on real HBase: read absent 3 s
/// before the end of the TTL the client was answered for). So once the
/// write of `d`'s `entities` stamped at `stamped_at` (ms) is done, if more
/// than [`RESTAMP_AFTER_MS`] have passed, they are written once more with
/// `ttl` from now, to the generation writes go to now (the config read
/// again: it is older than [`fresh::MAX_CONFIG_AGE`] by then). Once only,
/// so that a slow store (HBase overloaded, every call slow) gets at most
/// twice the writes. Bits only rise: another request sees nothing but a
/// later expiry.
fn restamp_if_slow<E: AsRef<[u8]>>(
    store: &dyn Store,
    d: &Deduper,
    stamped_at: i64,
    entities: &[E],
    ttl: u64,
) -> Result<(), EngineError> {
    if now_ms() - stamped_at <= RESTAMP_AFTER_MS {
        return Ok(());
    }
    let d = fresh::reread(store, d)?;
    let now = now_ms();
    let expire = check_expire(store, now, ttl)?;
    let (w, _) = resize::split(&d, now);
    let plan = Plan::for_store(store.bit_order(), true, &w, entities);
    store.write_bits(&w, &plan.addrs, expire)?;
    crate::metrics::restamp();
    Ok(())
}

/// The expiry time of an add at `now` with `ttl_ms` (ms since the Unix
/// epoch); `Invalid`, naming the limit, when the store would cut it short
/// or the TTL is shorter than the replicas' clocks can honour.
/// Writes the bits of a request recorded as `record` (the first attempt's,
/// or this one's) after checking it is the same `kind` of request with the
/// same `digest`. The expiry is the later of the recorded one and this
/// attempt's own `expire_ms`: a repeat that comes after the first attempt's
/// expiry passed is still acknowledged with its TTL ahead of it. Errors:
/// `Invalid` for another request under the same id; `Storage`.
fn write_again(
    store: &dyn Store,
    record: &Record,
    kind: Kind,
    digest: &[u8; 32],
    d: &Deduper,
    addrs: &[BitAddr],
    expire_ms: i64,
) -> Result<(), EngineError> {
    record.check_same(kind, digest)?;
    store.write_bits(d, addrs, record.expire_ms.max(expire_ms))?;
    Ok(())
}

fn check_expire(store: &dyn Store, now: i64, ttl_ms: u64) -> Result<i64, EngineError> {
    let min = store.min_ttl_ms();
    if ttl_ms < min {
        return Err(EngineError::Invalid(format!(
            "a TTL of {ttl_ms} ms is shorter than {min} ms, twice the clock offset the replicas tolerate \
             (storage.hbase.max_clock_offset_ms): another replica could see it expired as it is written; use a \
             longer ttl_ms or expiry_seconds"
        )));
    }
    let expire = now.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let max = store.max_expire_ms();
    if expire > max {
        return Err(EngineError::Invalid(format!(
            "an expiry {ttl_ms} ms from now ends after {}, the latest the {} store keeps (stamps are u32 seconds); \
             use a shorter ttl_ms or expiry_seconds",
            format_ms(max),
            store.kind()
        )));
    }
    Ok(expire)
}

/// `YYYY-MM-DDTHH:MM:SSZ` of ms since the Unix epoch (proleptic Gregorian).
fn format_ms(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn check_len(cells: &[Cell], plan: &Plan) -> Result<(), EngineError> {
    if cells.len() == plan.addrs.len() {
        Ok(())
    } else {
        Err(EngineError::Storage(StorageError::Corrupt(format!(
            "storage answered {} cells for {} bits",
            cells.len(),
            plan.addrs.len()
        ))))
    }
}

#[cfg(test)]
mod tests;
