//! Backend-agnostic request logic: validate, look up the deduper (cached),
//! hash every entity to its shard and `k` bits, group the bits into one
//! sorted address list, make one storage call, answer in request order.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::contract::hashing;
use crate::deduper::{self, Deduper, Level, ModelError, SizeLimits, Sizing};
use crate::storage::{BitAddr, Cell, StorageError, Store};

/// Request limits (`limits.*` in the config).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most entities in one data request.
    pub max_entities_per_request: usize,
    /// Largest entity, in bytes.
    pub max_entity_bytes: usize,
    pub sizes: SizeLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_entities_per_request: 10_000,
            max_entity_bytes: 4096,
            sizes: SizeLimits::default(),
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
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Storage(StorageError),
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

/// (client id, deduper name).
type CacheKey = (String, String);

/// The request engine, shared by every gRPC handler.
pub struct Engine {
    store: Arc<dyn Store>,
    limits: Limits,
    cache: RwLock<HashMap<CacheKey, (Arc<Deduper>, Instant)>>,
}

/// Entities hashed and grouped: `addrs` sorted and unique, `index[i*k + j]`
/// the position in `addrs` of entity `i`'s `j`-th bit.
struct Plan {
    k: usize,
    addrs: Vec<BitAddr>,
    index: Vec<u32>,
}

impl Plan {
    fn build(d: &Deduper, entities: &[impl AsRef<[u8]>]) -> Plan {
        let k = d.geometry.hash_functions as usize;
        let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(entities.len() * k);
        let mut bits = [0u32; crate::contract::MAX_HASH_FUNCTIONS as usize];
        for e in entities {
            let e = e.as_ref();
            let shard = hashing::shard_of(e, d.geometry.shards);
            hashing::bit_positions(e, d.geometry.bits_per_shard, &mut bits[..k]);
            for &b in &bits[..k] {
                keyed.push(((u64::from(shard) << 32) | u64::from(b), keyed.len() as u32));
            }
        }
        // Keys use few distinct high bytes, which radix sort skips.
        radsort::sort_by_key(&mut keyed, |&(key, _)| key);
        let mut addrs: Vec<BitAddr> = Vec::with_capacity(keyed.len());
        let mut index = vec![0u32; keyed.len()];
        let mut last = None;
        for (key, slot) in keyed {
            if last != Some(key) {
                addrs.push(BitAddr {
                    shard: (key >> 32) as u32,
                    bit: key as u32,
                });
                last = Some(key);
            }
            index[slot as usize] = (addrs.len() - 1) as u32;
        }
        Plan { k, addrs, index }
    }

    fn entity_bits(&self, i: usize) -> &[u32] {
        &self.index[i * self.k..(i + 1) * self.k]
    }
}

impl Engine {
    pub fn new(store: Arc<dyn Store>, limits: Limits) -> Engine {
        Engine {
            store,
            limits,
            cache: RwLock::new(HashMap::new()),
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Runs blocking storage work off the async workers.
    async fn blocking<T: Send + 'static>(
        f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
    ) -> Result<T, EngineError> {
        tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
            Err(EngineError::Storage(StorageError::Unavailable(format!(
                "storage task failed: {e}"
            ))))
        })
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

    async fn cached_deduper(&self, client_id: &str, name: &str) -> Result<Arc<Deduper>, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("deduper", name)?;
        let key = (client_id.to_string(), name.to_string());
        if let Some((d, at)) = self.cache.read().unwrap_or_else(|p| p.into_inner()).get(&key)
            && at.elapsed() < CONFIG_CACHE_TTL
        {
            return Ok(d.clone());
        }
        let d = Arc::new(self.load_deduper(client_id, name).await?);
        self.cache
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (d.clone(), Instant::now()));
        Ok(d)
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

    fn forget(&self, client_id: &str, name: &str) {
        self.cache
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(client_id.to_string(), name.to_string()));
    }

    /// Remembers `entities` for `ttl_ms` (0 = the deduper's expiry). Returns
    /// the number added. One storage write.
    pub async fn add<E>(&self, client_id: &str, name: &str, entities: Vec<E>, ttl_ms: u64) -> Result<u32, EngineError>
    where
        E: AsRef<[u8]> + Send + Sync + 'static,
    {
        self.validate_entities(&entities)?;
        let d = self.active_deduper(client_id, name).await?;
        let ttl = d.effective_ttl_ms(ttl_ms)?;
        if entities.is_empty() {
            return Ok(0);
        }
        let store = self.store.clone();
        Self::blocking(move || {
            let plan = Plan::build(&d, &entities);
            store.write_bits(&d, &plan.addrs, now_ms() + ttl as i64)?;
            Ok(entities.len() as u32)
        })
        .await
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
        self.validate_entities(&entities)?;
        let d = self.active_deduper(client_id, name).await?;
        if entities.is_empty() {
            return Ok(Vec::new());
        }
        let store = self.store.clone();
        Self::blocking(move || {
            let plan = Plan::build(&d, &entities);
            let now = now_ms();
            let cells = store.read_bits(&d, &plan.addrs)?;
            check_len(&cells, &plan)?;
            Ok((0..entities.len())
                .map(|i| plan.entity_bits(i).iter().any(|&a| !cells[a as usize].is_set(now)))
                .collect())
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
        self.validate_entities(&entities)?;
        let d = self.active_deduper(client_id, name).await?;
        let ttl = d.effective_ttl_ms(ttl_ms)?;
        if entities.is_empty() {
            return Ok(Vec::new());
        }
        let store = self.store.clone();
        Self::blocking(move || {
            let plan = Plan::build(&d, &entities);
            let now = now_ms();
            let cells = store.read_and_write_bits(&d, &plan.addrs, now + ttl as i64)?;
            check_len(&cells, &plan)?;
            let mut set: Vec<bool> = cells.iter().map(|c| c.is_set(now)).collect();
            Ok((0..entities.len())
                .map(|i| {
                    let bits = plan.entity_bits(i);
                    let absent = bits.iter().any(|&a| !set[a as usize]);
                    bits.iter().for_each(|&a| set[a as usize] = true);
                    absent
                })
                .collect())
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
        let (n, p) = match sizing {
            Sizing::Expected { n, p } => (Some(n), Some(p)),
            Sizing::Explicit(_) => (None, None),
        };
        let now = now_ms();
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
        Ok(d)
    }

    /// One deduper, active or not. Errors: `Invalid` names, `NotFound`, `Storage`.
    pub async fn get_deduper(&self, client_id: &str, name: &str) -> Result<Deduper, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("name", name)?;
        self.load_deduper(client_id, name).await
    }

    /// A client's dedupers sorted by name.
    pub async fn list_dedupers(&self, client_id: &str, active_only: bool) -> Result<Vec<Deduper>, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        let store = self.store.clone();
        let c = client_id.to_string();
        Self::blocking(move || Ok(store.list_dedupers(&c, active_only)?)).await
    }

    /// Changes `active` and/or `expiry_seconds`; the geometry never changes.
    pub async fn update_deduper(
        &self,
        client_id: &str,
        name: &str,
        active: Option<bool>,
        expiry_seconds: Option<u64>,
    ) -> Result<Deduper, EngineError> {
        let mut d = self.get_deduper(client_id, name).await?;
        if let Some(e) = expiry_seconds {
            deduper::validate_expiry(e)?;
            d.expiry_seconds = e;
        }
        if let Some(a) = active {
            d.active = a;
        }
        d.update_time_ms = now_ms();
        let store = self.store.clone();
        let updated = d.clone();
        Self::blocking(move || Ok(store.update_deduper(&updated)?)).await?;
        self.forget(client_id, name);
        Ok(d)
    }
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
