//! Backend-agnostic request logic: validate, look up the deduper (cached),
//! hash every entity to its shard and `k` bits, group the bits into one
//! sorted address list, make one storage call, answer in request order.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

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
        keyed.sort_unstable();
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
            client_id: spec.client_id,
            name: spec.name,
            geometry,
            expiry_seconds: spec.expiry_seconds,
            active: true,
            level: spec.level,
            create_time_ms: now,
            update_time_ms: now,
            expected_insertions: n,
            false_positive_rate: p,
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
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::contract::sizing::Geometry;

    /// A store that counts calls and remembers the max expiry per bit.
    #[derive(Default)]
    struct CountingStore {
        bits: Mutex<HashMap<BitAddr, i64>>,
        calls: Mutex<Vec<&'static str>>,
        dedupers: Mutex<HashMap<(String, String), Deduper>>,
    }

    impl CountingStore {
        fn take_calls(&self) -> Vec<&'static str> {
            std::mem::take(&mut self.calls.lock().unwrap())
        }
        fn read(&self, bits: &[BitAddr]) -> Vec<Cell> {
            let map = self.bits.lock().unwrap();
            bits.iter()
                .map(|b| Cell {
                    expire_ms: map.get(b).copied(),
                    legacy: None,
                })
                .collect()
        }
        fn write(&self, bits: &[BitAddr], expire_ms: i64) {
            assert!(bits.windows(2).all(|w| w[0] < w[1]), "addresses sorted and unique");
            let mut map = self.bits.lock().unwrap();
            for b in bits {
                let e = map.entry(*b).or_insert(expire_ms);
                *e = (*e).max(expire_ms);
            }
        }
    }

    impl Store for CountingStore {
        fn kind(&self) -> &'static str {
            "counting"
        }
        fn read_bits(&self, _: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
            self.calls.lock().unwrap().push("read");
            Ok(self.read(bits))
        }
        fn write_bits(&self, _: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
            self.calls.lock().unwrap().push("write");
            self.write(bits, expire_ms);
            Ok(())
        }
        fn read_and_write_bits(&self, _: &Deduper, bits: &[BitAddr], e: i64) -> Result<Vec<Cell>, StorageError> {
            self.calls.lock().unwrap().push("read_and_write");
            let cells = self.read(bits);
            self.write(bits, e);
            Ok(cells)
        }
        fn create_deduper(&self, d: &Deduper) -> Result<(), StorageError> {
            self.dedupers
                .lock()
                .unwrap()
                .insert((d.client_id.clone(), d.name.clone()), d.clone());
            Ok(())
        }
        fn update_deduper(&self, d: &Deduper) -> Result<(), StorageError> {
            self.create_deduper(d)
        }
        fn get_deduper(&self, c: &str, n: &str) -> Result<Option<Deduper>, StorageError> {
            self.calls.lock().unwrap().push("get_deduper");
            Ok(self
                .dedupers
                .lock()
                .unwrap()
                .get(&(c.to_string(), n.to_string()))
                .cloned())
        }
        fn list_dedupers(&self, _: &str, _: bool) -> Result<Vec<Deduper>, StorageError> {
            Ok(Vec::new())
        }
        fn ping(&self) -> Result<(), StorageError> {
            Ok(())
        }
        fn flush(&self) -> Result<(), StorageError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn one_storage_call_per_request_whatever_the_batch() {
        let store = Arc::new(CountingStore::default());
        let engine = Engine::new(store.clone(), Limits::default());
        let spec = CreateSpec {
            client_id: "c".into(),
            name: "d".into(),
            hash_functions: 7,
            shards: 256,
            bits_per_shard: 4096,
            expiry_seconds: 60,
            ..Default::default()
        };
        engine.create_deduper(spec).await.unwrap();
        let batch: Vec<Vec<u8>> = (0..5000).map(|i| format!("e{i}").into_bytes()).collect();
        engine.check_absence("c", "d", batch.clone()).await.unwrap();
        assert_eq!(
            store.take_calls(),
            ["get_deduper", "read"],
            "config loaded once, then one read"
        );
        engine.add("c", "d", batch.clone(), 0).await.unwrap();
        assert_eq!(
            store.take_calls(),
            ["write"],
            "config cached; one write for 5000 entities over 256 shards"
        );
        let absent = engine.add_if_absent("c", "d", batch.clone(), 0).await.unwrap();
        assert_eq!(store.take_calls(), ["read_and_write"]);
        assert!(absent.iter().all(|a| !a));
        // 5000 entities x 7 bits over 256 x 4096 bits: every address is sent once.
        let distinct = store.bits.lock().unwrap().len();
        assert!(distinct > 30_000 && distinct <= 35_000, "{distinct}");
    }

    #[tokio::test]
    async fn plan_groups_duplicate_bits_and_keeps_entity_order() {
        let d = Deduper {
            client_id: "c".into(),
            name: "d".into(),
            geometry: Geometry {
                hash_functions: 3,
                shards: 1,
                bits_per_shard: 2,
            },
            expiry_seconds: 60,
            active: true,
            level: Level::Global,
            create_time_ms: 0,
            update_time_ms: 0,
            expected_insertions: None,
            false_positive_rate: None,
        };
        let plan = Plan::build(&d, &[b"a".as_slice(), b"b", b"a"]);
        assert!(plan.addrs.len() <= 2, "two bits in the only shard: {:?}", plan.addrs);
        assert_eq!(plan.entity_bits(0), plan.entity_bits(2), "same entity, same bits");
        for i in 0..3 {
            let mut expected = [0u32; 3];
            hashing::bit_positions([b"a".as_slice(), b"b", b"a"][i], 2, &mut expected);
            let got: Vec<u32> = plan
                .entity_bits(i)
                .iter()
                .map(|&a| plan.addrs[a as usize].bit)
                .collect();
            assert_eq!(got, expected);
        }
    }
}
