//! The embedded store: the default backend, one process, nothing to install.
//!
//! Bits live in memory as pages of one-byte expiry stamps ([`filter`]),
//! answering reads without I/O. Every write request appends one compact
//! record to the journal ([`journal`], plain append-only files) before it
//! is acknowledged; a background checkpoint writes the pages that
//! changed in place into one file per deduper ([`pagefile`]), syncs it, and
//! then drops the journal records they cover. Because a write only ever
//! raises a stamp (max), records can be replayed in any order and replaying
//! one twice is harmless, which keeps recovery simple: load the page files,
//! replay the journal.
//!
//! Checkpoints scale with traffic, not with the filter: one runs only once
//! the journal holds at least half of the bytes of the pages waiting to be
//! saved ([`PAGE_BYTES_PER_JOURNAL_BYTE`]), so each journal byte costs at
//! most two bytes of page writes whatever the deduper's size, and the
//! journal stays within about half of the pages on disk.
//!
//! A write becomes visible only after its journal record was accepted
//! (and, with `fsync`, synced): a write that fails leaves no bit raised, so
//! a client told `UNAVAILABLE` never sees its entities reported present.
//!
//! Small writes run on the async worker that received them, without the
//! blocking pool's two thread hops, unless they would wait: for a lock
//! held for a change, for the journal's file, or for a disk (`fsync`, or
//! appends the OS has lately been slowing). See [`Wait`].
//!
//! Healing: fjall refuses every write after one failed (`Poisoned`). When a
//! call fails, the store marks itself broken and the next call (or the
//! health probe) reopens fjall - the in-memory bits stay, fjall replays its
//! own write-ahead files - so writes resume by themselves once the cause
//! (a full disk, say) is gone. `ping` reports the last write's failure until
//! a probe write succeeds again.
//!
//! Durability: every journal record is handed to the OS (one `pwrite`)
//! before we return, so an acknowledged write survives `kill -9` of the
//! process. With
//! `fsync = true` each write is also `fdatasync`ed before it is acknowledged,
//! so it survives power loss / an OS crash too.

mod checkpoints;
mod codec;
mod damage;
pub mod filter;
mod journal;
mod pagefile;
mod persist;
mod records;
mod region;
mod requests;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use serde::Deserialize;

use self::filter::{Filter, tick_ms_for};
use self::records::Records;
use self::requests::Requests;
use super::{
    BeforeWrite, BitAddr, BitOrder, BitStats, Cell, Change, RecordFingerprint, RequestKey, StorageError, Store,
};
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
    /// How often the checkpoint considers saving pages, in ms. Default
    /// 30,000. It saves them once the journal holds at least half of the
    /// bytes of the changed pages (so page writes stay within two bytes per
    /// journal byte), and also early, without waiting for the interval,
    /// once the journal holds half of the dedupers' full size (at least
    /// 8 MiB).
    pub checkpoint_interval_ms: u64,
    /// Checkpoint whatever the pages cost once this many journal bytes
    /// piled up (bounds the replay at start-up). Default 256 MiB.
    pub checkpoint_journal_bytes: u64,
    /// Accepted for configurations written for earlier versions, and
    /// ignored: expired stamps are now dropped when their page rolls
    /// forward (see [`filter`]), with no sweep. In seconds.
    pub sweep_interval_seconds: u64,
    /// Memory the dedupers' bits may take, in MiB, counting each deduper at
    /// its full size (1 byte per bit plus about 1% of page index, reached
    /// once it is filled). Creating a deduper beyond it fails with
    /// `RESOURCE_EXHAUSTED`. Default 8,192.
    pub max_memory_mib: u64,
    /// fjall block cache, in MiB. Default 4: reads are served from memory,
    /// and fjall is read back only at start-up.
    pub cache_mib: u64,
    /// Memory the remembered `request_id` answers may take, in MiB (each
    /// counted as its key, its answer and 96 bytes of overhead); a new
    /// `request_id` beyond it is refused with `RESOURCE_EXHAUSTED` until
    /// older ones expire. Default 64.
    pub max_request_memory_mib: u64,
    /// Start although the journal holds damaged records (a checksum failure
    /// with valid records after it: bit rot, a bad block), replaying every
    /// readable one and keeping the damaged file aside as
    /// `journal/<generation>.log.damaged`. Default false: refuse to start,
    /// naming the file, offset and records lost (docs/operations.md).
    pub start_with_damaged_journal: bool,
    /// Memory the remembered record ids (`record_ids` answered absent) may
    /// take, in MiB, at 48 bytes per record (about 5.6 million in the
    /// default); a request whose new record ids do not fit is refused with
    /// `RESOURCE_EXHAUSTED` until older ones expire. Default 256.
    pub max_record_memory_mib: u64,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            path: PathBuf::from("./data"),
            fsync: false,
            checkpoint_interval_ms: 30_000,
            checkpoint_journal_bytes: 256 << 20,
            sweep_interval_seconds: 600,
            max_memory_mib: 8192,
            cache_mib: 4,
            max_request_memory_mib: 64,
            start_with_damaged_journal: false,
            max_record_memory_mib: 256,
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(format!("embedded store: {e}"))
}

/// Shard locks of one deduper's read-and-raise: shard `s` takes stripe
/// `s % RMW_STRIPES`. An entity's bits all lie in its shard, so one stripe
/// held over them makes its read-and-raise atomic, while requests working
/// on other shards raise in parallel.
const RMW_STRIPES: usize = 64;

/// One deduper's in-memory bits, the locks that make read-and-write atomic,
/// and its page file.
struct Entry {
    /// Replaced as a whole (write lock) only to lengthen its ticks.
    filter: RwLock<Filter>,
    /// Read by a fused read-and-raise (which then locks its shards' stripes
    /// one at a time), written by a read-all-then-write (atomic as a whole).
    rmw: RwLock<()>,
    stripes: Box<[Mutex<()>]>,
    path: PathBuf,
    /// Opened by the first checkpoint that saves a page.
    file: Mutex<Option<pagefile::PageFile>>,
}

impl Entry {
    fn new(config: &EmbeddedConfig, deduper: &Deduper) -> Entry {
        Entry {
            filter: RwLock::new(Filter::new(&deduper.geometry, tick_ms_for(deduper.expiry_seconds))),
            rmw: RwLock::new(()),
            stripes: (0..RMW_STRIPES).map(|_| Mutex::new(())).collect(),
            path: pagefile::path(&config.path, &deduper.client_id, &deduper.name),
            file: Mutex::new(None),
        }
    }

    fn filter(&self) -> RwLockReadGuard<'_, Filter> {
        self.filter.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The filter, after lengthening its ticks when `expire_ms` does not
    /// fit them at `now_ms` or the deduper's expiry grew past them.
    /// `None` with [`Wait::No`] when that needs a wait or a lengthening.
    fn filter_for(
        &self,
        wait: Wait,
        deduper: &Deduper,
        expire_ms: i64,
        now_ms: i64,
    ) -> Option<RwLockReadGuard<'_, Filter>> {
        let want = |f: &Filter| {
            let fit = tick_ms_for((expire_ms.saturating_sub(now_ms).max(0) as u64).div_ceil(1000));
            tick_ms_for(deduper.expiry_seconds).max(if f.fits(expire_ms, now_ms) { 0 } else { fit })
        };
        {
            let f = read_lock(&self.filter, wait)?;
            if want(&f) <= f.tick_ms() {
                return Some(f);
            }
            if wait == Wait::No {
                return None;
            }
        }
        let mut f = self.filter.write().unwrap_or_else(|p| p.into_inner());
        let tick_ms = want(&f);
        if tick_ms > f.tick_ms() {
            tracing::info!(
                client_id = %deduper.client_id,
                deduper = %deduper.name,
                from_ms = f.tick_ms(),
                to_ms = tick_ms,
                "lengthening the deduper's expiry ticks (its expiry grew)"
            );
            *f = f.retick(&deduper.geometry, tick_ms, now_ms);
        }
        drop(f);
        Some(self.filter())
    }
}

/// The open fjall database and its keyspaces; replaced as a whole when the
/// store reopens after a failure.
struct Handles {
    db: Database,
    meta: Keyspace,
    /// Pages as earlier versions stored them (u32 stamps); read once at
    /// start-up, then emptied by the first checkpoint.
    pages: Keyspace,
    /// The journal of earlier versions; replayed once at start-up, then
    /// emptied by the first checkpoint.
    legacy_journal: Keyspace,
    /// Remembered request answers (see `requests.rs`).
    requests: Keyspace,
    /// Remembered record ids (see `records.rs`).
    records: Keyspace,
    /// One key, rewritten by the health probe after a failed write.
    probe: Keyspace,
}

impl Handles {
    fn open(config: &EmbeddedConfig) -> Result<Handles, StorageError> {
        std::fs::create_dir_all(&config.path)
            .map_err(|e| unavailable(format!("creating {}: {e}", config.path.display())))?;
        let db = Database::builder(&config.path)
            .cache_size(config.cache_mib << 20)
            // fjall keeps its own write-ahead files until memtables are
            // flushed; the minimum (64 MiB) bounds that disk overhead.
            .max_journaling_size(64 << 20)
            .open()
            .map_err(|e| unavailable(format!("opening {}: {e}", config.path.display())))?;
        // Small memtables: records are written once and rarely read back,
        // so a large memtable is only resident memory.
        let ks = |name, memtable_mib: u64| {
            db.keyspace(name, || {
                KeyspaceCreateOptions::default().max_memtable_size(memtable_mib << 20)
            })
            .map_err(unavailable)
        };
        Ok(Handles {
            meta: ks("meta", 4)?,
            pages: ks("pages", 4)?,
            legacy_journal: ks("journal", 1)?,
            requests: ks("requests", 4)?,
            records: ks("records", 4)?,
            probe: ks("probe", 1)?,
            db,
        })
    }
}

struct Inner {
    config: EmbeddedConfig,
    /// `None` only while a reopen is failing.
    fjall: RwLock<Option<Handles>>,
    /// A call failed: reopen fjall before the next one.
    broken: AtomicBool,
    /// The last write failed; `ping` fails until a probe write succeeds.
    write_failed: AtomicBool,
    /// Writers hold it shared from appending their journal record until
    /// their bits are raised; a checkpoint takes it exclusively to switch
    /// the journal to a new file, so every record in the older files has
    /// its bits in memory (and its pages marked dirty).
    commit: RwLock<()>,
    requests: Requests,
    records: Records,
    entries: RwLock<HashMap<Vec<u8>, Arc<Entry>>>,
    /// Serialises meta changes so create is check-then-insert safe; holds
    /// the bytes reserved by existing dedupers against the memory budget.
    meta_lock: Mutex<u64>,
    /// The write journal, opened by the recovery that replays it.
    journal: std::sync::OnceLock<journal::Journal>,
    journal_bytes: AtomicU64,
    /// Until when (ms since the Unix epoch) writes keep off the async
    /// workers: set by an append that took [`SLOW_APPEND`] or longer.
    slow_disk_until_ms: AtomicI64,
    /// Journal records found damaged and skipped at start-up.
    unreadable_journal_records: AtomicU64,
    /// The legacy `pages` keyspace had pages at start-up: empty it once
    /// they are saved in page files.
    legacy_pages: AtomicBool,
    checkpoint_lock: Mutex<()>,
    /// Failures and successes of checkpoints (metrics, health, backoff).
    checkpoints: checkpoints::Checkpoints,
    /// Test hook: the next delete fails after its checkpoint, before its batch.
    fail_next_delete: AtomicBool,
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
        let handles = Handles::open(&config)?;
        let inner = Inner {
            requests: Requests::new(config.max_request_memory_mib.saturating_mul(1 << 20)),
            records: Records::new(config.max_record_memory_mib.saturating_mul(1 << 20)),
            config,
            fjall: RwLock::new(Some(handles)),
            broken: AtomicBool::new(false),
            write_failed: AtomicBool::new(false),
            commit: RwLock::new(()),
            entries: RwLock::new(HashMap::new()),
            meta_lock: Mutex::new(0),
            journal: std::sync::OnceLock::new(),
            journal_bytes: AtomicU64::new(0),
            slow_disk_until_ms: AtomicI64::new(0),
            unreadable_journal_records: AtomicU64::new(0),
            legacy_pages: AtomicBool::new(false),
            checkpoint_lock: Mutex::new(()),
            checkpoints: checkpoints::Checkpoints::default(),
            fail_next_delete: AtomicBool::new(false),
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

    /// Bytes the store occupies on disk: fjall's journal and tables plus
    /// the page files (allocated blocks).
    pub fn disk_space(&self) -> u64 {
        self.inner
            .with_fjall(|h| Ok(h.db.disk_space().unwrap_or(0)))
            .unwrap_or(0)
            + self.pages_disk_space()
    }

    /// Number of dedupers the store holds (for the `solus_dedupers` gauge).
    pub fn deduper_count(&self) -> usize {
        let entries = self.inner.entries.read().unwrap_or_else(|p| p.into_inner());
        // A resized deduper's later generations are filters of it, not dedupers.
        entries.keys().filter(|k| !k.windows(2).any(|w| w == b"~g")).count()
    }

    /// Bytes of the page files on disk (allocated blocks).
    pub fn pages_disk_space(&self) -> u64 {
        pagefile::dir_usage(&self.inner.config.path.join("filters")).0
    }

    /// Bytes the remembered `request_id` answers take in memory, as counted
    /// against `max_request_memory_mib`.
    pub fn request_memory_bytes(&self) -> u64 {
        self.inner.requests.bytes()
    }

    /// Test hook for crash safety: the next `delete_deduper` stops with
    /// `Unavailable` between its checkpoint and its delete batch, as a crash
    /// there would.
    #[doc(hidden)]
    pub fn fail_next_delete_midway(&self) {
        self.inner.fail_next_delete.store(true, Ordering::SeqCst);
    }

    /// Saves every changed page and truncates the journal now.
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        self.inner.checkpoint()
    }

    /// Checkpoints, then syncs fjall, so that `disk_space` shows the
    /// steady-state size (used by the footprint benchmark).
    pub fn compact(&self) -> Result<(), StorageError> {
        self.inner.checkpoint()?;
        self.inner
            .with_fjall(|h| h.db.persist(PersistMode::SyncAll).map_err(unavailable))
    }

    /// Journals, then raises, the bits of one write; unless `read` is
    /// [`Read::No`], returns the cells as they were, atomically against other
    /// reading writes of the deduper. Nothing is raised unless the journal
    /// record was accepted (and synced with `fsync`).
    fn write(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        read: Read<'_, '_>,
    ) -> Result<Vec<Cell>, StorageError> {
        self.write_in(Wait::Yes, deduper, bits, expire_ms, read)
            .unwrap_or_else(|| Err(unavailable("a waiting write gave way")))
    }

    /// [`EmbeddedStore::write`]; with [`Wait::No`], `None` instead of any
    /// wait longer than a stripe's (see [`Wait`]), before anything was
    /// journaled or raised.
    fn write_in(
        &self,
        wait: Wait,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        read: Read<'_, '_>,
    ) -> Option<Result<Vec<Cell>, StorageError>> {
        let inner = &self.inner;
        // A synced append waits on the disk, and so may any append while the
        // OS throttles writers: neither on an async worker.
        if wait == Wait::No
            && (inner.config.fsync
                || matches!(read, Read::Before(_))
                || now_ms() < inner.slow_disk_until_ms.load(Ordering::Relaxed))
        {
            return None;
        }
        let entry = match inner.entry_in_wait(wait, deduper)? {
            Ok(entry) => entry,
            Err(e) => return Some(Err(e)),
        };
        let now = now_ms();
        // Encoded before the lock: it does not depend on the read.
        let record = codec::encode_write(
            &codec::deduper_key(&deduper.client_id, &deduper.name),
            codec::expire_seconds(expire_ms),
            bits,
        );
        // Fused: shared, then a stripe per run of one shard (below); Before:
        // exclusive over the whole read-then-write.
        let _shared = match read {
            Read::Fused => Some(read_lock(&entry.rmw, wait)?),
            _ => None,
        };
        let _exclusive = matches!(read, Read::Before(_)).then(|| entry.rmw.write().unwrap_or_else(|p| p.into_inner()));
        let filter = entry.filter_for(wait, deduper, expire_ms, now)?;
        let (tick, now_tick) = (filter.tick_of(expire_ms), filter.now_tick(now));
        let mut cells = Vec::new();
        let fused = matches!(read, Read::Fused);
        if fused {
            cells.reserve(bits.len());
        }
        if let Read::Before(before_write) = read {
            cells.reserve(bits.len());
            for (i, a) in bits.iter().enumerate() {
                if let Some(ahead) = bits.get(i + PREFETCH_AHEAD) {
                    filter.prefetch(ahead.shard, ahead.bit);
                }
                cells.push(cell_of(filter.get_expire_ms(a.shard, a.bit)));
            }
            if let Err(e) = before_write(&cells) {
                return Some(Err(e));
            }
        }
        let len = record.len() as u64;
        let written = inner.with_write_in(wait, |h| {
            let _ = h; // held for the store's failure tracking
            let Some(_commit) = read_lock(&inner.commit, wait) else {
                return Ok(None);
            };
            let appended = match wait {
                Wait::Yes => Some(inner.journal()?.append(&record)),
                Wait::No => inner.journal()?.try_append(&record),
            };
            let Some(appended) = appended else {
                return Ok(None);
            };
            let took = appended.map_err(|e| unavailable(format!("appending to the journal: {e}")))?;
            // A synced append is slow by design; it never runs on a worker anyway.
            if took >= SLOW_APPEND && !inner.config.fsync {
                inner
                    .slow_disk_until_ms
                    .store(now_ms().saturating_add(SLOW_DISK_BACKOFF_MS), Ordering::Relaxed);
            }
            let mut stripe: Option<(u32, std::sync::MutexGuard<'_, ()>)> = None;
            for (i, a) in bits.iter().enumerate() {
                if let Some(ahead) = bits.get(i + PREFETCH_AHEAD) {
                    filter.prefetch(ahead.shard, ahead.bit);
                }
                if fused && stripe.as_ref().is_none_or(|(s, _)| *s != a.shard) {
                    // One stripe at a time, so no two requests wait on each other in a cycle.
                    drop(stripe.take());
                    let lock = &entry.stripes[a.shard as usize % RMW_STRIPES];
                    stripe = Some((a.shard, lock.lock().unwrap_or_else(|p| p.into_inner())));
                }
                // `filter_for` made the expiry fit, against this same now.
                let too_far = |_| StorageError::Corrupt(format!("expiry {expire_ms} ms does not fit the filter"));
                if fused {
                    // Read just before the raise, while the line is in cache.
                    let before = filter.get_and_raise(a.shard, a.bit, tick, now_tick).map_err(too_far)?;
                    cells.push(cell_of((before != 0).then(|| filter.expire_ms_of(before))));
                } else {
                    filter.raise(a.shard, a.bit, tick, now_tick).map_err(too_far)?;
                }
            }
            Ok(Some(()))
        });
        if let Err(e) = written? {
            return Some(Err(e));
        }
        let before = inner.journal_bytes.fetch_add(len, Ordering::Relaxed);
        // Let the checkpoint weigh its trigger every 4 MiB of journal.
        if (before + len) >> 22 != before >> 22 {
            inner.wake.notify_one();
        }
        Some(Ok(cells))
    }

    fn put_meta(h: &Handles, deduper: &Deduper) -> Result<(), StorageError> {
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        let json = serde_json::to_vec(deduper).map_err(|e| StorageError::Corrupt(e.to_string()))?;
        h.meta.insert(key, json).map_err(unavailable)?;
        h.db.persist(PersistMode::SyncData).map_err(unavailable)
    }
}

/// What a write reads of the cells it raises.
enum Read<'a, 'b> {
    /// Nothing.
    No,
    /// All cells first, then `before_write` with them, then the raises.
    Before(&'a mut BeforeWrite<'b>),
    /// Each cell just before it is raised, in one pass over the bits.
    Fused,
}

/// An append's write this slow (a page-cache copy takes microseconds;
/// the wait for another append's turn does not count) means the OS
/// is making writers wait - dirty-page throttling pauses writers for 10 to
/// 200 ms: writes then keep off the async workers for
/// [`SLOW_DISK_BACKOFF_MS`], so such waits stall a blocking thread, not
/// every connection of a worker. Not lower: under a checkpoint's page
/// writes, appends of a few milliseconds come and go, and at 2 ms the
/// adds of the outsider's method went to the pool about a fifth of the time.
const SLOW_APPEND: Duration = Duration::from_millis(20);
const SLOW_DISK_BACKOFF_MS: i64 = 1_000;

/// Size of the health probe's write after a failed write, in bytes: about
/// the journal record of a 10,000-entity request at k = 25.
const PROBE_BYTES: usize = 1 << 20;

/// Whether a write may wait for locks and I/O (on a blocking thread) or
/// must give way instead (on an async worker, where a wait stops every
/// other connection the worker serves). Giving way covers the locks a
/// checkpoint, a reopen, a create or delete, or a longer tick hold
/// exclusively, the journal's file while another write appends, a synced
/// append, and any append for a while after a slow one ([`SLOW_APPEND`]);
/// a stripe is still waited for, as its holder only raises stamps in
/// memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wait {
    Yes,
    No,
}

/// `lock` read-locked: waiting for it, or only if that needs no wait.
fn read_lock<T>(lock: &RwLock<T>, wait: Wait) -> Option<RwLockReadGuard<'_, T>> {
    match wait {
        Wait::Yes => Some(lock.read().unwrap_or_else(|p| p.into_inner())),
        Wait::No => read_now(lock),
    }
}

/// `lock` read-locked if that needs no wait (poisoned or not, as the
/// store's other reads take it); `None` while a writer holds or awaits it.
fn read_now<T>(lock: &RwLock<T>) -> Option<RwLockReadGuard<'_, T>> {
    match lock.try_read() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Whether each entity of `bits` (`k` addresses per entity, entity order)
/// has a bit unset at `now_ms`: bit `j` is read only of the entities whose
/// bits `0..j` were all set, so an absent entity usually costs one or two
/// cache misses instead of `k`.
fn absent_in(filter: &Filter, bits: &[BitAddr], k: usize, now_ms: i64) -> Vec<bool> {
    let k = k.max(1);
    let entities = bits.len() / k;
    let mut absent = vec![false; entities];
    let mut pending: Vec<u32> = (0..entities as u32).collect();
    let mut next = Vec::with_capacity(entities);
    for j in 0..k {
        let addr = |i: u32| bits[i as usize * k + j];
        for &i in pending.iter().take(PREFETCH_AHEAD) {
            filter.prefetch(addr(i).shard, addr(i).bit);
        }
        for (p, &i) in pending.iter().enumerate() {
            if let Some(&ahead) = pending.get(p + PREFETCH_AHEAD) {
                filter.prefetch(addr(ahead).shard, addr(ahead).bit);
            }
            let a = addr(i);
            if filter.get_expire_ms(a.shard, a.bit).is_some_and(|e| e >= now_ms) {
                next.push(i);
            } else {
                absent[i as usize] = true;
            }
        }
        std::mem::swap(&mut pending, &mut next);
        next.clear();
        if pending.is_empty() {
            break;
        }
    }
    absent
}

/// How many addresses ahead a batch prefetches stamps (enough to overlap
/// several cache misses, few enough to stay in L1).
const PREFETCH_AHEAD: usize = 24;

fn cell_of(expire_ms: Option<i64>) -> Cell {
    Cell {
        expire_ms,
        legacy: None,
    }
}

/// Removes a deduper's page file, if any. Errors: `Unavailable`.
fn remove_page_file(config: &EmbeddedConfig, deduper: &Deduper) -> Result<(), StorageError> {
    let path = pagefile::path(&config.path, &deduper.client_id, &deduper.name);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(unavailable(format!("removing {}: {e}", path.display()))),
    }
}

impl Inner {
    /// Refuses `need` more bytes of filters (for `deduper`, named in the
    /// message) beyond `max_memory_mib` given `reserved`. Errors: `Capacity`.
    fn check_budget(&self, reserved: u64, need: u64, deduper: &Deduper) -> Result<(), StorageError> {
        let budget = self.config.max_memory_mib.saturating_mul(1 << 20);
        if reserved.saturating_add(need) <= budget {
            return Ok(());
        }
        // Two decimals: whole MiB would round "needs 0.73, 0.54 left" to "needs 1, 1 left".
        let mib = |b: u64| format!("{:.2}", b as f64 / f64::from(1 << 20));
        Err(StorageError::Capacity(format!(
            "deduper {:?} needs {} MiB of memory ({} bits x 1 byte, plus the page index), but only {} of the embedded store's {} MiB \
             are left (storage.embedded.max_memory_mib); size it smaller or raise the budget",
            deduper.name,
            mib(need),
            deduper.geometry.total_bits(),
            mib(budget.saturating_sub(reserved)),
            self.config.max_memory_mib
        )))
    }

    /// The journal. Errors: `Unavailable` before recovery opened it.
    fn journal(&self) -> Result<&journal::Journal, StorageError> {
        self.journal.get().ok_or_else(|| unavailable("the journal is not open"))
    }
}

/// The config stored under meta key `key` ([`codec::deduper_key`]), checked
/// against the bounds of every create ([`Deduper::check_stored`]): a value
/// no create accepts is never used. Errors: `Corrupt`, naming the deduper
/// (from the key) and the field.
fn decode_meta(key: &[u8], bytes: &[u8]) -> Result<Deduper, StorageError> {
    let (client_id, name) = match key.iter().position(|&b| b == 0) {
        Some(i) => (&key[..i], &key[i + 1..]),
        None => (key, &[][..]),
    };
    let what = format!(
        "config of deduper \"{}\" of client \"{}\" (embedded store, meta keyspace)",
        name.escape_ascii(),
        client_id.escape_ascii()
    );
    let fix = "this deduper is refused; the client's other dedupers are served";
    let d: Deduper = serde_json::from_slice(bytes)
        .map_err(|e| StorageError::Corrupt(format!("{what}: does not decode: {e}; {fix}")))?;
    if d.client_id.as_bytes() != client_id || d.name.as_bytes() != name {
        return Err(StorageError::Corrupt(format!(
            "{what}: field client_id/name holds {:?}/{:?}, not its key's; {fix}",
            d.client_id, d.name
        )));
    }
    d.check_stored().map_err(|e| {
        let generation = e
            .generation
            .map(|g| format!("generations[id {g}]."))
            .unwrap_or_default();
        StorageError::Corrupt(format!(
            "{what}: field {generation}{} holds a value no create accepts: {}; {fix}",
            e.field.name(),
            e.why
        ))
    })?;
    Ok(d)
}

/// The deduper name in a meta key, for a config that does not decode.
fn name_of_key(key: &[u8]) -> String {
    let name = key.iter().position(|&b| b == 0).map_or(key, |i| &key[i + 1..]);
    String::from_utf8_lossy(name).into_owned()
}

impl Inner {
    /// Runs `f` on the open fjall handles, reopening first when an earlier
    /// call failed. An `Unavailable` from `f` marks the store broken, so the
    /// next call reopens. Errors: `Unavailable` while fjall cannot be reopened.
    fn with_fjall<T>(&self, f: impl FnOnce(&Handles) -> Result<T, StorageError>) -> Result<T, StorageError> {
        self.with_fjall_in(Wait::Yes, f)
            .unwrap_or_else(|| Err(unavailable("a waiting call gave way")))
    }

    /// [`Inner::with_fjall`]; with [`Wait::No`], `None` instead of waiting
    /// for the handles or reopening them.
    fn with_fjall_in<T>(
        &self,
        wait: Wait,
        f: impl FnOnce(&Handles) -> Result<T, StorageError>,
    ) -> Option<Result<T, StorageError>> {
        let guard = match self.handles(wait)? {
            Ok(guard) => guard,
            Err(e) => return Some(Err(e)),
        };
        let Some(h) = guard.as_ref() else {
            self.broken.store(true, Ordering::SeqCst);
            return Some(Err(unavailable(
                "the store is closed after a failure; reopening on the next call",
            )));
        };
        let r = f(h);
        if matches!(r, Err(StorageError::Unavailable(_))) {
            self.broken.store(true, Ordering::SeqCst);
        }
        Some(r)
    }

    /// As [`Inner::with_fjall`] for a write: also records whether writes
    /// currently fail, for `ping`.
    fn with_write<T>(&self, f: impl FnOnce(&Handles) -> Result<T, StorageError>) -> Result<T, StorageError> {
        self.with_write_in(Wait::Yes, |h| f(h).map(Some))
            .unwrap_or_else(|| Err(unavailable("a waiting write gave way")))
    }

    /// [`Inner::with_write`]; `None` when the handles gave way ([`Wait::No`])
    /// or `f` did (`Ok(None)`: it wrote nothing, so the failure tracking
    /// is left as it was).
    fn with_write_in<T>(
        &self,
        wait: Wait,
        f: impl FnOnce(&Handles) -> Result<Option<T>, StorageError>,
    ) -> Option<Result<T, StorageError>> {
        let r = match self.with_fjall_in(wait, f)? {
            Ok(None) => return None,
            Ok(Some(v)) => Ok(v),
            Err(e) => Err(e),
        };
        match &r {
            Ok(_) => self.write_failed.store(false, Ordering::SeqCst),
            Err(StorageError::Unavailable(e)) => {
                if !self.write_failed.swap(true, Ordering::SeqCst) {
                    tracing::error!(error = %e, "embedded store write failed; reopening and probing until writes succeed");
                }
            }
            Err(_) => {}
        }
        Some(r)
    }

    /// The handles, after reopening fjall if a call failed; `None` with
    /// [`Wait::No`] when that needs a reopen or a wait.
    fn handles(&self, wait: Wait) -> Option<Result<RwLockReadGuard<'_, Option<Handles>>, StorageError>> {
        if self.broken.load(Ordering::SeqCst) {
            if wait == Wait::No {
                return None;
            }
            if let Err(e) = self.reopen() {
                return Some(Err(e));
            }
        }
        read_lock(&self.fjall, wait).map(Ok)
    }

    /// Closes and reopens fjall (it refuses every write after one failed).
    /// The in-memory bits stay as they are: they only hold writes fjall
    /// accepted, which it recovers from its own files.
    fn reopen(&self) -> Result<(), StorageError> {
        let mut slot = self.fjall.write().unwrap_or_else(|p| p.into_inner());
        if !self.broken.load(Ordering::SeqCst) {
            return Ok(());
        }
        // The old database must be gone before the new one takes its lock file.
        *slot = None;
        let handles = Handles::open(&self.config)?;
        *slot = Some(handles);
        self.broken.store(false, Ordering::SeqCst);
        tracing::warn!(path = %self.config.path.display(), "embedded store reopened after a failure");
        Ok(())
    }

    /// The deduper's in-memory filter. Filters exist from `create_deduper`
    /// (or start-up) until `delete_deduper`; a data call that raced a
    /// delete finds none and fails with `Precondition` instead of creating
    /// an orphan filter outside the memory budget.
    fn entry(&self, deduper: &Deduper) -> Result<Arc<Entry>, StorageError> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        Self::entry_in(&entries, deduper)
    }

    /// In-memory entries (empty filters) for `filters`, keyed for the map.
    fn new_entries(&self, filters: &[Deduper]) -> Vec<(Vec<u8>, Arc<Entry>)> {
        filters
            .iter()
            .map(|f| {
                (
                    codec::deduper_key(&f.client_id, &f.name),
                    Arc::new(Entry::new(&self.config, f)),
                )
            })
            .collect()
    }

    /// [`Inner::entry`], or `None` while the map is locked for a change.
    fn try_entry(&self, deduper: &Deduper) -> Option<Result<Arc<Entry>, StorageError>> {
        self.entry_in_wait(Wait::No, deduper)
    }

    /// [`Inner::entry`]; with [`Wait::No`], `None` while the map is locked.
    fn entry_in_wait(&self, wait: Wait, deduper: &Deduper) -> Option<Result<Arc<Entry>, StorageError>> {
        Some(Self::entry_in(&*read_lock(&self.entries, wait)?, deduper))
    }

    fn entry_in(entries: &HashMap<Vec<u8>, Arc<Entry>>, deduper: &Deduper) -> Result<Arc<Entry>, StorageError> {
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        entries.get(&key).cloned().ok_or_else(|| {
            StorageError::Precondition(format!(
                "deduper {:?} of client {:?} was deleted",
                deduper.name, deduper.client_id
            ))
        })
    }
}

impl Store for EmbeddedStore {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    /// One process holds the directory (its lock file).
    fn shared_by_replicas(&self) -> bool {
        false
    }

    /// A scan of every config (the meta keyspace is small and in memory).
    fn resized_dedupers(&self) -> Result<Vec<Deduper>, StorageError> {
        let mut out = Vec::new();
        self.inner.with_fjall(|h| {
            for kv in h.meta.iter() {
                let (key, value) = kv.into_inner().map_err(unavailable)?;
                // An unusable config was reported at start-up and is
                // refused when looked up; it has no generations to resume.
                if let Ok(d) = decode_meta(&key, &value)
                    && !d.generations.is_empty()
                {
                    out.push(d);
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Each bit is one stamp reached directly: no sort needed, and a repeat
    /// costs one more (cached) stamp access. Journal records are encoded per
    /// run of one shard, which writes grouped by shard keep as short as
    /// sorted ones.
    fn bit_order(&self) -> BitOrder {
        BitOrder::Any
    }

    fn read_bits(&self, deduper: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        let entry = self.inner.entry(deduper)?;
        let filter = entry.filter();
        let cells = bits.iter().enumerate().map(|(i, a)| {
            if let Some(ahead) = bits.get(i + PREFETCH_AHEAD) {
                filter.prefetch(ahead.shard, ahead.bit);
            }
            cell_of(filter.get_expire_ms(a.shard, a.bit))
        });
        Ok(cells.collect())
    }

    /// In rounds: round `j` reads bit `j` of the entities whose earlier bits
    /// were all set, prefetching ahead through that list. Checks of mostly
    /// new entities then touch about `1 / (1 - fill)` stamps each instead
    /// of `k`: each stamp is a cache miss, most of a check's cost.
    fn entities_absent(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        k: usize,
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError> {
        let entry = self.inner.entry(deduper)?;
        Ok(absent_in(&entry.filter(), bits, k, now_ms))
    }

    /// Bits live in memory: reads need no I/O.
    fn reads_from_memory(&self) -> bool {
        true
    }

    /// Unless every write is synced (`fsync`), a write is a raise in memory
    /// and an append the OS buffers.
    fn writes_to_memory(&self) -> bool {
        !self.inner.config.fsync
    }

    /// `None` while the map of dedupers or this deduper's filter is locked
    /// for a change (a create, a delete, lengthened ticks).
    fn entities_absent_now(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        k: usize,
        now_ms: i64,
    ) -> Option<Result<Vec<bool>, StorageError>> {
        let entry = match self.inner.try_entry(deduper)? {
            Ok(entry) => entry,
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(absent_in(&*read_now(&entry.filter)?, bits, k, now_ms)))
    }

    fn write_bits(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        self.write(deduper, bits, expire_ms, Read::No).map(drop)
    }

    /// `None` with `fsync` on, and while a lock it needs is held for a
    /// change or the journal's file for another append (see [`Wait`]).
    fn write_bits_now(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Option<Result<(), StorageError>> {
        Some(self.write_in(Wait::No, deduper, bits, expire_ms, Read::No)?.map(drop))
    }

    /// As `write_bits_now`.
    fn read_then_write_bits_now(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Option<Result<Vec<Cell>, StorageError>> {
        self.write_in(Wait::No, deduper, bits, expire_ms, Read::Fused)
    }

    /// Atomic against other `read_and_write_bits` of the same deduper:
    /// read, `before_write`, journal and raise all run under its lock.
    fn read_and_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        before_write: &mut BeforeWrite<'_>,
    ) -> Result<Vec<Cell>, StorageError> {
        self.write(deduper, bits, expire_ms, Read::Before(before_write))
    }

    /// Atomic as `read_and_write_bits`; reads each cell just before raising
    /// it, in one pass over the filter instead of two.
    fn read_then_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Result<Vec<Cell>, StorageError> {
        self.write(deduper, bits, expire_ms, Read::Fused)
    }

    fn create_deduper(&self, deduper: &Deduper) -> Result<(), StorageError> {
        let mut reserved = self.inner.meta_lock.lock().unwrap_or_else(|p| p.into_inner());
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        let filters = crate::generations::physical_filters(deduper);
        let need = filters.iter().map(|f| Filter::full_memory_bytes(&f.geometry)).sum();
        let made = self.inner.with_write(|h| {
            if h.meta.contains_key(&key).map_err(unavailable)? {
                return Err(StorageError::AlreadyExists);
            }
            self.inner.check_budget(*reserved, need, deduper)?;
            // A page file a crashed delete left behind is not this deduper's.
            for f in &filters {
                remove_page_file(&self.inner.config, f)?;
            }
            // Allocated (and faulted in: up to seconds for a large filter)
            // before the config is stored, so a caller that finds the config
            // finds its filter too (moments later), and before the map is
            // locked, so other dedupers' calls never wait on it.
            let made = self.inner.new_entries(&filters);
            Self::put_meta(h, deduper)?;
            Ok(made)
        })?;
        self.inner
            .entries
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend(made);
        *reserved += need;
        Ok(())
    }

    /// Read, change and write under the store's meta lock: updates of one
    /// process are serialised, and no other process opens the directory.
    /// A change that records a generation allocates its filter (against
    /// the memory budget: `Capacity`, nothing changed, when it does not
    /// fit) before the config is stored; one that drops a generation frees
    /// its filter, page file and budget after (a crash between leaves an
    /// orphan page file, removed at the next start).
    fn update_deduper(
        &self,
        client_id: &str,
        name: &str,
        change: &Change<'_>,
    ) -> Result<Option<Deduper>, StorageError> {
        let mut reserved = self.inner.meta_lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(old) = self.get_deduper(client_id, name)? else {
            return Ok(None);
        };
        let mut d = old.clone();
        change(&mut d);
        let (before, after) = (
            crate::generations::physical_filters(&old),
            crate::generations::physical_filters(&d),
        );
        let missing = |from: &[Deduper], of: &[Deduper]| -> Vec<Deduper> {
            from.iter()
                .filter(|f| !of.iter().any(|o| o.name == f.name))
                .cloned()
                .collect()
        };
        let (added, removed) = (missing(&after, &before), missing(&before, &after));
        let size = |fs: &[Deduper]| -> u64 { fs.iter().map(|f| Filter::full_memory_bytes(&f.geometry)).sum() };
        let need = size(&added);
        if let Some(f) = added.first() {
            self.inner.check_budget(*reserved, need, f)?;
        }
        for f in &added {
            // A page file of an earlier namesake (a crashed delete) is not this one's.
            remove_page_file(&self.inner.config, f)?;
        }
        // Allocated before the config that names them is stored, and before
        // the map is locked (as in `create_deduper`).
        let made = self.inner.new_entries(&added);
        self.inner.with_write(|h| Self::put_meta(h, &d))?;
        let dropped: Vec<Arc<Entry>> = {
            let mut entries = self.inner.entries.write().unwrap_or_else(|p| p.into_inner());
            entries.extend(made);
            removed
                .iter()
                .filter_map(|f| entries.remove(&codec::deduper_key(&f.client_id, &f.name)))
                .collect()
        };
        // Unmapped after the map is unlocked.
        drop(dropped);
        *reserved += need;
        if !removed.is_empty() {
            // After any checkpoint still saving the dropped filters' pages.
            let _checkpoint = self.inner.checkpoint_lock.lock().unwrap_or_else(|p| p.into_inner());
            for f in &removed {
                remove_page_file(&self.inner.config, f)?;
            }
            *reserved = reserved.saturating_sub(size(&removed));
        }
        Ok(Some(d))
    }

    fn get_deduper(&self, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError> {
        let key = codec::deduper_key(client_id, name);
        let value = self.inner.with_fjall(|h| h.meta.get(&key).map_err(unavailable))?;
        value.map(|v| decode_meta(&key, &v)).transpose()
    }

    fn list_dedupers(
        &self,
        client_id: &str,
        active_only: bool,
    ) -> Result<(Vec<Deduper>, Vec<crate::storage::Unreadable>), StorageError> {
        let (mut out, mut unreadable) = (Vec::new(), Vec::new());
        self.inner.with_fjall(|h| {
            for kv in h.meta.prefix(codec::client_prefix(client_id)) {
                let (key, value) = kv.into_inner().map_err(unavailable)?;
                match decode_meta(&key, &value) {
                    Ok(d) if d.active || !active_only => out.push(d),
                    Ok(_) => {}
                    Err(e) => unreadable.push(crate::storage::Unreadable {
                        name: name_of_key(&key),
                        error: e.to_string(),
                    }),
                }
            }
            Ok(())
        })?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((out, unreadable))
    }

    /// Under the meta lock: checkpoints (its pages are saved with the
    /// others), drops the in-memory filter (calls already holding it finish
    /// on it), checkpoints twice more - which deletes every journal file so
    /// far, with every record this deduper's included, so none is left to
    /// replay into a namesake created later - then removes its meta row
    /// (synced), then its page file, and frees its share of
    /// `max_memory_mib`. Interrupted before the meta row goes (a failure:
    /// the filter is put back; a crash: restart loads the page file), the
    /// deduper is whole and a new delete finishes the job; the engine
    /// deactivated it before, so no data call uses it meanwhile. A page file
    /// left by a crash after that is never loaded (no meta row names it)
    /// and is removed when a deduper of that name is created.
    /// Errors: `Unavailable`, `Corrupt`.
    fn delete_deduper(&self, deduper: &Deduper) -> Result<bool, StorageError> {
        let mut reserved = self.inner.meta_lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stored) = self.get_deduper(&deduper.client_id, &deduper.name)? else {
            return Ok(false);
        };
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        self.inner.checkpoint()?;
        let entries = || self.inner.entries.write().unwrap_or_else(|p| p.into_inner());
        let filters = crate::generations::physical_filters(&stored);
        let removed: Vec<(Vec<u8>, Arc<Entry>)> = {
            let mut entries = entries();
            filters
                .iter()
                .filter_map(|f| {
                    let key = codec::deduper_key(&f.client_id, &f.name);
                    entries.remove(&key).map(|e| (key, e))
                })
                .collect()
        };
        let result = self
            .inner
            .checkpoint()
            .and_then(|()| self.inner.checkpoint())
            .and_then(|()| {
                if self.inner.fail_next_delete.swap(false, Ordering::SeqCst) {
                    return Err(unavailable(
                        "injected failure between the checkpoint and the delete batch",
                    ));
                }
                self.inner.with_write(|h| {
                    // The deduper's remembered record ids go with it.
                    let mut batch = h.db.batch();
                    for kv in h.records.prefix(records::disk_prefix(&key)) {
                        batch.remove(&h.records, kv.key().map_err(unavailable)?);
                    }
                    batch.remove(&h.meta, key.clone());
                    batch.commit().map_err(unavailable)?;
                    h.db.persist(PersistMode::SyncAll).map_err(unavailable)
                })
            });
        if let Err(e) = result {
            entries().extend(removed);
            return Err(e);
        }
        self.inner.records.forget_deduper(&key);
        for f in &filters {
            remove_page_file(&self.inner.config, f)?;
            *reserved = reserved.saturating_sub(Filter::full_memory_bytes(&f.geometry));
        }
        Ok(true)
    }

    /// Exact: [`Filter::count_live`] over the in-memory filter (O(m), see
    /// there); `sample_bits` and `seed` are not used.
    fn bit_stats(&self, deduper: &Deduper, now_ms: i64, _: u64, _: u64) -> Result<BitStats, StorageError> {
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        let entry = self
            .inner
            .entries
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        Ok(BitStats {
            set_bits: entry.map_or(0, |e| e.filter().count_live(now_ms)),
            sampled_bits: deduper.geometry.total_bits(),
        })
    }

    /// In memory, and in the `requests` keyspace (synced like a write).
    /// Errors: `Capacity` beyond `storage.embedded.max_request_memory_mib`.
    fn remember_request(
        &self,
        key: &RequestKey,
        record: &[u8],
        expire_ms: i64,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let inner = &self.inner;
        inner.requests.remember(key, record, expire_ms, now_ms(), |k, v| {
            inner.with_write(|h| {
                h.requests.insert(k, v).map_err(unavailable)?;
                if inner.config.fsync {
                    h.db.persist(PersistMode::SyncData).map_err(unavailable)?;
                }
                Ok(())
            })
        })
    }

    fn recall_request(&self, key: &RequestKey) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.inner.requests.recall(key, now_ms()))
    }

    /// In memory, and in the `records` keyspace as one entry (synced like a
    /// write) before they are visible.
    fn remember_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        expire_ms: i64,
    ) -> Result<(), StorageError> {
        let inner = &self.inner;
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        inner.records.remember(&key, records, expire_ms, now_ms(), |k, v| {
            inner.with_write(|h| {
                h.records.insert(k, v).map_err(unavailable)?;
                if inner.config.fsync {
                    h.db.persist(PersistMode::SyncData).map_err(unavailable)?;
                }
                Ok(())
            })
        })
    }

    fn recall_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError> {
        let key = codec::deduper_key(&deduper.client_id, &deduper.name);
        Ok(self.inner.records.recall(&key, records, now_ms))
    }

    fn records_held(&self) -> Option<u64> {
        Some(self.inner.records.count())
    }

    /// Ticks are whole seconds or longer in a `u32`: 2106-02-07T06:28:15Z.
    fn max_expire_ms(&self) -> i64 {
        filter::MAX_EXPIRE_MS
    }

    /// The damaged journal files kept aside and the records lost at start-up
    /// (`damage.rs`), while any such file is in `journal/`; and checkpoints
    /// failing persistently (`checkpoints.rs`).
    fn damage(&self) -> Option<String> {
        let kept = damage::kept_files(&self.inner.config.path.join("journal"));
        let lost = self.inner.unreadable_journal_records.load(Ordering::SeqCst);
        let found = [damage::describe(&kept, lost), self.inner.checkpoints.describe()];
        let found: Vec<String> = found.into_iter().flatten().collect();
        (!found.is_empty()).then(|| found.join("; "))
    }

    /// Fine while writes succeed; after a failed one, a probe write of
    /// [`PROBE_BYTES`] (room for a large request's journal record), synced,
    /// must succeed first. Errors: `Unavailable`.
    fn ping(&self) -> Result<(), StorageError> {
        let inner = &self.inner;
        if !inner.write_failed.load(Ordering::SeqCst) && !inner.broken.load(Ordering::SeqCst) {
            return Ok(());
        }
        inner.with_write(|h| {
            // Random bytes: fjall compresses its journal, and zeros would take no room.
            let value: Vec<u8> = (0..PROBE_BYTES).map(|_| rand::random::<u8>()).collect();
            h.probe.insert("probe", value).map_err(unavailable)?;
            h.db.persist(PersistMode::SyncData).map_err(unavailable)
        })
    }

    fn flush(&self) -> Result<(), StorageError> {
        self.inner.checkpoint()
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        *self.inner.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.inner.wake.notify_all();
        if let Some(w) = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
        if let Err(e) = self.inner.checkpoint() {
            tracing::warn!(error = %e, "final checkpoint failed; the journal will be replayed at next start");
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
