//! The embedded store: the default backend, one process, nothing to install.
//!
//! Bits live in memory as pages of expiry stamps ([`filter`]), answering
//! reads without I/O. Durability comes from fjall (a pure-Rust LSM engine):
//! every write request appends one compact record to a journal keyspace
//! before it is acknowledged, and a background checkpoint saves the pages
//! that changed and then drops the journal records they cover. Because a
//! write only ever raises a stamp (max), records can be replayed in any order
//! and replaying one twice is harmless, which keeps recovery simple: load
//! the pages, replay the journal.
//!
//! Durability: fjall hands every journal append to the OS before we return,
//! so an acknowledged write survives `kill -9` of the process. With
//! `fsync = true` each write is also `fdatasync`ed before it is acknowledged,
//! so it survives power loss / an OS crash too.

mod codec;
pub mod filter;
mod persist;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use serde::Deserialize;

use self::filter::{Filter, expire_ms_of, stamp_of};
use super::{BitAddr, Cell, StorageError, Store};
use crate::clock::now_ms;
use crate::deduper::Deduper;

/// Settings of the embedded store (`storage.embedded.*`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedConfig {
    /// Data directory, created when missing. Default `./data`.
    pub path: PathBuf,
    /// `fdatasync` the journal before acknowledging each write. Default false.
    pub fsync: bool,
    /// Checkpoint at least this often, in ms. Default 30,000. A checkpoint
    /// rewrites every page touched since the last one.
    pub checkpoint_interval_ms: u64,
    /// Checkpoint early once this many journal bytes piled up (bounds the
    /// replay at start-up). Default 128 MiB.
    pub checkpoint_journal_bytes: u64,
    /// Physically drop expired bits this often, in seconds. Default 600.
    pub sweep_interval_seconds: u64,
    /// Memory the dedupers' bits may take, in MiB, counting each deduper at
    /// its full size (4 bytes per bit, reached once it is filled). Creating
    /// a deduper beyond it fails with `RESOURCE_EXHAUSTED`. Default 8,192.
    pub max_memory_mib: u64,
    /// fjall block cache, in MiB. Default 4: reads are served from memory,
    /// and fjall is read back only at start-up.
    pub cache_mib: u64,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            path: PathBuf::from("./data"),
            fsync: false,
            checkpoint_interval_ms: 30_000,
            checkpoint_journal_bytes: 128 << 20,
            sweep_interval_seconds: 600,
            max_memory_mib: 8192,
            cache_mib: 4,
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(format!("embedded store: {e}"))
}

/// One deduper's in-memory bits, plus the lock that makes read-and-write atomic.
struct Entry {
    filter: Filter,
    rmw: Mutex<()>,
}

struct Inner {
    config: EmbeddedConfig,
    db: Database,
    meta: Keyspace,
    pages: Keyspace,
    journal: Keyspace,
    entries: RwLock<HashMap<Vec<u8>, Arc<Entry>>>,
    /// Serialises meta changes so create is check-then-insert safe; holds
    /// the bytes reserved by existing dedupers against the memory budget.
    meta_lock: Mutex<u64>,
    next_seq: AtomicU64,
    journal_bytes: AtomicU64,
    checkpoint_lock: Mutex<()>,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The embedded store; see the module docs.
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl EmbeddedStore {
    /// Opens (or creates) the store at `config.path`, loads every deduper's
    /// pages and replays the journal. Errors with `Unavailable` when the
    /// directory cannot be opened (e.g. another process holds it) and
    /// `Corrupt` when stored data cannot be decoded.
    pub fn open(config: EmbeddedConfig) -> Result<EmbeddedStore, StorageError> {
        std::fs::create_dir_all(&config.path)
            .map_err(|e| unavailable(format!("creating {}: {e}", config.path.display())))?;
        let db = Database::builder(&config.path)
            .cache_size(config.cache_mib << 20)
            // fjall keeps its own write-ahead files until memtables are
            // flushed; the minimum (64 MiB) bounds that disk overhead.
            .max_journaling_size(64 << 20)
            .open()
            .map_err(|e| unavailable(format!("opening {}: {e}", config.path.display())))?;
        // Small memtables for pages and journal: their records are written
        // once and rarely read back, so a large memtable is only resident memory.
        let ks = |name, memtable_mib: u64| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable_mib << 20)
            })
            .map_err(unavailable)
        };
        let (meta, pages, journal) = (ks("meta", 4)?, ks("pages", 4)?, ks("journal", 4)?);
        let inner = Inner {
            config,
            db,
            meta,
            pages,
            journal,
            entries: RwLock::new(HashMap::new()),
            meta_lock: Mutex::new(0),
            next_seq: AtomicU64::new(0),
            journal_bytes: AtomicU64::new(0),
            checkpoint_lock: Mutex::new(()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        };
        inner.recover()?;
        let inner = Arc::new(inner);
        let worker = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("solus-checkpoint".into())
                .spawn(move || inner.checkpoint_loop())
                .map_err(unavailable)?
        };
        Ok(EmbeddedStore {
            inner,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// Bytes the store occupies on disk (journal and tables).
    pub fn disk_space(&self) -> u64 {
        self.inner.db.disk_space().unwrap_or(0)
    }

    /// Number of dedupers the store holds (for the `solus_dedupers` gauge).
    pub fn deduper_count(&self) -> usize {
        self.inner.entries.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Bytes of the saved stamp pages on disk (tables only; without the
    /// journal, whose files fjall preallocates).
    pub fn pages_disk_space(&self) -> u64 {
        self.inner.pages.disk_space()
    }

    /// Saves every changed page and truncates the journal now.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        self.inner.checkpoint(false)
    }

    /// Checkpoints, then flushes fjall's memtables to tables and compacts
    /// them, so that `disk_space` shows the steady-state size (used by the
    /// footprint benchmark; the background work does this gradually).
    pub fn compact(&self) -> Result<(), StorageError> {
        self.inner.checkpoint(false)?;
        for ks in [&self.inner.meta, &self.inner.pages, &self.inner.journal] {
            ks.rotate_memtable_and_wait().map_err(unavailable)?;
            ks.major_compact().map_err(unavailable)?;
        }
        self.inner.db.persist(PersistMode::SyncAll).map_err(unavailable)
    }

    fn write(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        read: bool,
    ) -> Result<Vec<Cell>, StorageError> {
        let inner = &self.inner;
        let entry = inner.entry(deduper);
        let stamp = stamp_of(expire_ms);
        let mut cells = Vec::with_capacity(if read { bits.len() } else { 0 });
        {
            let _atomic = read.then(|| entry.rmw.lock().unwrap_or_else(|p| p.into_inner()));
            for (i, a) in bits.iter().enumerate() {
                if let Some(ahead) = bits.get(i + PREFETCH_AHEAD) {
                    entry.filter.prefetch(ahead.shard, ahead.bit);
                }
                let prev = entry.filter.raise(a.shard, a.bit, stamp);
                if read {
                    cells.push(cell_of(prev));
                }
            }
        }
        // The sequence number is taken after the bits are in memory: a
        // checkpoint that sees this number also sees the bits (see checkpoint).
        let seq = inner.next_seq.fetch_add(1, Ordering::SeqCst);
        let record = codec::encode_write(&codec::deduper_key(&deduper.client_id, &deduper.name), stamp, bits);
        let len = record.len() as u64;
        inner.journal.insert(seq.to_be_bytes(), record).map_err(unavailable)?;
        if inner.config.fsync {
            inner.db.persist(PersistMode::SyncData).map_err(unavailable)?;
        }
        if inner.journal_bytes.fetch_add(len, Ordering::Relaxed) + len > inner.config.checkpoint_journal_bytes {
            inner.wake.notify_one();
        }
        Ok(cells)
    }

    fn put_meta(&self, deduper: &Deduper) -> Result<(), StorageError> {
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        let json = serde_json::to_vec(deduper).map_err(|e| StorageError::Corrupt(e.to_string()))?;
        self.inner.meta.insert(key, json).map_err(unavailable)?;
        self.inner.db.persist(PersistMode::SyncData).map_err(unavailable)
    }
}

/// How many addresses ahead a batch prefetches stamps (enough to overlap
/// several cache misses, few enough to stay in L1).
const PREFETCH_AHEAD: usize = 8;

fn cell_of(stamp: u32) -> Cell {
    Cell {
        expire_ms: (stamp != 0).then(|| expire_ms_of(stamp)),
        legacy: None,
    }
}

fn decode_meta(bytes: &[u8]) -> Result<Deduper, StorageError> {
    serde_json::from_slice(bytes).map_err(|e| StorageError::Corrupt(format!("deduper config: {e}")))
}

impl Inner {
    fn entry(&self, deduper: &Deduper) -> Arc<Entry> {
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        if let Some(e) = self.entries.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return e.clone();
        }
        let mut map = self.entries.write().unwrap_or_else(|p| p.into_inner());
        map.entry(key)
            .or_insert_with(|| {
                Arc::new(Entry {
                    filter: Filter::new(&deduper.geometry),
                    rmw: Mutex::new(()),
                })
            })
            .clone()
    }
}

impl Store for EmbeddedStore {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    fn read_bits(&self, deduper: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        let entry = self.inner.entry(deduper);
        let filter = &entry.filter;
        let cells = bits.iter().enumerate().map(|(i, a)| {
            if let Some(ahead) = bits.get(i + PREFETCH_AHEAD) {
                filter.prefetch(ahead.shard, ahead.bit);
            }
            cell_of(filter.get(a.shard, a.bit))
        });
        Ok(cells.collect())
    }

    fn write_bits(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        self.write(deduper, bits, expire_ms, false).map(drop)
    }

    fn read_and_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Result<Vec<Cell>, StorageError> {
        self.write(deduper, bits, expire_ms, true)
    }

    fn create_deduper(&self, deduper: &Deduper) -> Result<(), StorageError> {
        let mut reserved = self.inner.meta_lock.lock().unwrap_or_else(|p| p.into_inner());
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        if self.inner.meta.contains_key(&key).map_err(unavailable)? {
            return Err(StorageError::AlreadyExists);
        }
        let need = Filter::full_memory_bytes(&deduper.geometry);
        let budget = self.inner.config.max_memory_mib.saturating_mul(1 << 20);
        if reserved.saturating_add(need) > budget {
            let mib = |b: u64| b.div_ceil(1 << 20);
            return Err(StorageError::Capacity(format!(
                "deduper {:?} needs up to {} MiB of memory ({} bits x 4 bytes), but only {} of the embedded store's {} MiB \
                 are left (storage.embedded.max_memory_mib); size it smaller or raise the budget",
                deduper.name,
                mib(need),
                deduper.geometry.total_bits(),
                mib(budget.saturating_sub(*reserved)),
                self.inner.config.max_memory_mib
            )));
        }
        self.put_meta(deduper)?;
        self.inner.entry(deduper);
        *reserved += need;
        Ok(())
    }

    fn update_deduper(&self, deduper: &Deduper) -> Result<(), StorageError> {
        let _g = self.inner.meta_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.put_meta(deduper)
    }

    fn get_deduper(&self, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError> {
        let value = self
            .inner
            .meta
            .get(codec::deduper_key(client_id, name))
            .map_err(unavailable)?;
        value.map(|v| decode_meta(&v)).transpose()
    }

    fn list_dedupers(&self, client_id: &str, active_only: bool) -> Result<Vec<Deduper>, StorageError> {
        let mut out = Vec::new();
        for kv in self.inner.meta.prefix(codec::client_prefix(client_id)) {
            let d = decode_meta(&kv.value().map_err(unavailable)?)?;
            if d.active || !active_only {
                out.push(d);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn ping(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        self.inner.checkpoint(false)
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        *self.inner.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.inner.wake.notify_all();
        if let Some(w) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
        if let Err(e) = self.inner.checkpoint(false) {
            tracing::warn!(error = %e, "final checkpoint failed; the journal will be replayed at next start");
        }
    }
}
