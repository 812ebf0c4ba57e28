//! Remembered record ids of the embedded store (see `engine::records`): in
//! memory for lookups, and in the `records` keyspace so they survive a
//! restart.
//!
//! In memory, one map per deduper from a 128-bit hash of the record id
//! (murmur3 x64-128, seed 0) and its entity's fingerprint to its expiry
//! time and the expiry its latest batch on disk holds (an id sent with two
//! entities is two records): [`ENTRY_BYTES`] per record, counted against
//! `storage.embedded.max_record_memory_mib`. A record id is never kept
//! itself, so its length costs nothing; two ids collide with probability
//! about 2^-128 per pair.
//!
//! On disk, one entry per remembered batch (the record ids one request
//! remembered share one expiry): key `<client>\0<deduper>\0<expiry, 8 bytes
//! BE><nonce, 8 bytes BE>`, value the records, 24 bytes each (id hash 16
//! bytes BE, fingerprint 8 bytes BE). One write per request instead of one
//! per record, and a restart reads a few entries per request, not one per
//! record (400,000 records as single entries added 14 s to a debug build's
//! start-up, most of it fjall replaying its own journal). A batch is
//! deleted from disk once its expiry passed; an id remembered again later
//! lives on in the later batch.
//!
//! Replays (issue 45): a record already held is remembered again without
//! new memory, so it never counts against the budget - a job replaying
//! what it sent before is never refused for room, however full the budget.
//! A batch is written with [`HEADROOM_DIVISOR`]-th of its window more than
//! the window (its disk expiry), and a replay is written again only when
//! the window it must now last goes past the disk expiry it already has:
//! a record replayed over and over is written at most 8 times a window
//! (before: once per replay, 56-61 bytes on disk each until the window
//! passed), and the disk never holds less than memory promises, so a replay
//! is recalled after a restart as before it. The price: after a restart,
//! a record is remembered until its disk expiry, up to an eighth of a
//! window longer than promised - a possible duplicate, never a loss.
//! Only records not held yet take room; a request whose new records do not
//! fit is refused whole (`Capacity`), replays in it included.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::storage::{RecordFingerprint, StorageError};

/// Bytes counted per remembered record: a map slot of 48 bytes (the key,
/// 24 bytes padded to 32 by the u128's alignment, and two expiries) plus
/// the hash map's control byte; spare capacity is not counted.
pub const ENTRY_BYTES: u64 = 48;

/// A batch lasts on disk its window plus this fraction of it (see the
/// module docs): a replay within that much of its record's last write
/// writes nothing.
pub const HEADROOM_DIVISOR: i64 = 8;

/// Bytes of one record in a stored batch: id hash and fingerprint.
const RECORD_BYTES: usize = 24;

/// Expiry of a record in memory (what [`Records::recall`] answers from)
/// and of its latest batch on disk (never earlier).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Expiry {
    memory: i64,
    disk: i64,
}

type Map = HashMap<(u128, RecordFingerprint), Expiry>;

/// One deduper's records, and the disk keys of its batches with their expiry.
#[derive(Default)]
struct Dedup {
    map: Map,
    batches: Vec<(i64, Vec<u8>)>,
}

#[derive(Default)]
struct State {
    dedupers: HashMap<Vec<u8>, Dedup>,
    count: u64,
    /// Disk keys of batches that expired in a sweep made for room, for the
    /// next [`Records::sweep`] to return (they stayed on disk until a
    /// restart before).
    expired_keys: Vec<Vec<u8>>,
}

/// The remembered record ids; see the module docs.
pub struct Records {
    max_entries: u64,
    budget_bytes: u64,
    /// Makes batch keys of one expiry distinct; starts at a random value so
    /// a restarted process does not reuse the keys of live batches.
    nonce: AtomicU64,
    state: Mutex<State>,
    /// `state.count`, published whenever the lock is released, so that
    /// [`Records::count`] (read after every remembering call, for the
    /// metrics gauge) takes no second lock.
    held: AtomicU64,
}

/// The locked state; publishes its count to [`Records::held`] on release.
struct Locked<'a> {
    state: std::sync::MutexGuard<'a, State>,
    held: &'a AtomicU64,
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.state
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.held.store(self.state.count, Ordering::Relaxed);
    }
}

/// The 128-bit hash a record id is kept under.
pub fn id_hash(id: &[u8]) -> u128 {
    crate::contract::hashing::murmur3_x64_128_seeded(id, 0)
}

/// The prefix of every on-disk key of one deduper's records.
pub fn disk_prefix(deduper_key: &[u8]) -> Vec<u8> {
    let mut k = deduper_key.to_vec();
    k.push(0);
    k
}

fn batch_key(deduper_key: &[u8], expire_ms: i64, nonce: u64) -> Vec<u8> {
    let mut k = disk_prefix(deduper_key);
    k.extend_from_slice(&expire_ms.to_be_bytes());
    k.extend_from_slice(&nonce.to_be_bytes());
    k
}

/// `(deduper key, expiry)` of a batch key.
fn split_key(key: &[u8]) -> Option<(&[u8], i64)> {
    let (head, tail) = key.split_at_checked(key.len().checked_sub(16)?)?;
    let deduper_key = head.strip_suffix(&[0])?;
    Some((deduper_key, i64::from_be_bytes(tail[..8].try_into().ok()?)))
}

impl Records {
    /// `budget_bytes`: memory all remembered records may take.
    pub fn new(budget_bytes: u64) -> Records {
        Records {
            max_entries: budget_bytes / ENTRY_BYTES,
            budget_bytes,
            nonce: AtomicU64::new(rand::random()),
            state: Mutex::new(State::default()),
            held: AtomicU64::new(0),
        }
    }

    fn state(&self) -> Locked<'_> {
        Locked {
            state: self.state.lock().unwrap_or_else(|p| p.into_inner()),
            held: &self.held,
        }
    }

    /// Whether each `(id, fingerprint)` of `records` is remembered and
    /// unexpired at `now_ms`, in order.
    pub fn recall(&self, deduper_key: &[u8], records: &[(&[u8], RecordFingerprint)], now_ms: i64) -> Vec<bool> {
        let state = self.state();
        let Some(d) = state.dedupers.get(deduper_key) else {
            return vec![false; records.len()];
        };
        records
            .iter()
            .map(|&(id, fp)| d.map.get(&(id_hash(id), fp)).is_some_and(|e| e.memory >= now_ms))
            .collect()
    }

    /// Remembers `records` until `expire_ms`. `persist(key, value)` writes
    /// the batch durably first; the records are visible to
    /// [`Records::recall`] only after it succeeded. Records held already
    /// (replays) take no room, and are written again only when `expire_ms`
    /// goes past the expiry of their batch on disk; a batch is written with
    /// an expiry of `expire_ms` plus [`HEADROOM_DIVISOR`]-th of
    /// `expire_ms - now_ms` (module docs). Errors: `Capacity` when the
    /// budget has no room for the records not held yet, even after
    /// forgetting the expired ones (nothing is remembered then); whatever
    /// `persist` returns.
    pub fn remember(
        &self,
        deduper_key: &[u8],
        records: &[(&[u8], RecordFingerprint)],
        expire_ms: i64,
        now_ms: i64,
        persist: impl FnOnce(&[u8], &[u8]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        if records.is_empty() {
            return Ok(());
        }
        let mut entries: Vec<(u128, RecordFingerprint)> = records.iter().map(|(id, fp)| (id_hash(id), *fp)).collect();
        entries.sort_unstable();
        entries.dedup();
        let disk_expire = expire_ms.saturating_add(expire_ms.saturating_sub(now_ms).max(0) / HEADROOM_DIVISOR);
        let to_write: Vec<(u128, RecordFingerprint)> = {
            // Room is checked before the write and may be overshot by the
            // batches of requests racing this one: a bound, not an exact cap.
            let mut state = self.state();
            let new = |state: &State| {
                let d = state.dedupers.get(deduper_key);
                entries
                    .iter()
                    .filter(|e| d.is_none_or(|d| !d.map.contains_key(e)))
                    .count() as u64
            };
            let mut needed = new(&state);
            if state.count + needed > self.max_entries {
                let gone = Self::sweep_locked(&mut state, now_ms);
                state.expired_keys.extend(gone);
                needed = new(&state);
            }
            if state.count + needed > self.max_entries {
                return Err(StorageError::Capacity(format!(
                    "{} remembered record ids take {} of the {} bytes of storage.embedded.max_record_memory_mib \
                     ({ENTRY_BYTES} bytes each); {needed} more do not fit (replays of records held take no room): \
                     raise the setting, shorten limits.record_id_window_seconds, or send fewer record_ids",
                    state.count,
                    state.count * ENTRY_BYTES,
                    self.budget_bytes,
                )));
            }
            // Replays whose batch on disk outlasts the new expiry need no
            // write: extended in memory at once (the disk already holds it).
            let mut to_write = Vec::with_capacity(entries.len());
            let mut d = state.dedupers.get_mut(deduper_key);
            for key in &entries {
                match d.as_mut().and_then(|d| d.map.get_mut(key)) {
                    Some(e) if e.disk >= expire_ms => e.memory = e.memory.max(expire_ms),
                    _ => to_write.push(*key),
                }
            }
            to_write
        };
        if to_write.is_empty() {
            return Ok(());
        }
        let key = batch_key(deduper_key, disk_expire, self.nonce.fetch_add(1, Ordering::Relaxed));
        let mut value = Vec::with_capacity(to_write.len() * RECORD_BYTES);
        for &(h, fp) in &to_write {
            value.extend_from_slice(&h.to_be_bytes());
            value.extend_from_slice(&fp.to_be_bytes());
        }
        persist(&key, &value)?;
        let mut state = self.state();
        let d = state.dedupers.entry(deduper_key.to_vec()).or_default();
        d.batches.push((disk_expire, key));
        let added = Self::insert(
            &mut d.map,
            to_write.into_iter(),
            Expiry {
                memory: expire_ms,
                disk: disk_expire,
            },
        );
        state.count += added;
        Ok(())
    }

    /// Inserts records (a later expiry wins over an earlier one, in memory
    /// and on disk apart); returns how many (id, fingerprint) pairs were new.
    fn insert(map: &mut Map, entries: impl Iterator<Item = (u128, RecordFingerprint)>, expire: Expiry) -> u64 {
        let mut added = 0;
        for key in entries {
            match map.get_mut(&key) {
                Some(slot) => {
                    slot.memory = slot.memory.max(expire.memory);
                    slot.disk = slot.disk.max(expire.disk);
                }
                None => {
                    map.insert(key, expire);
                    added += 1;
                }
            }
        }
        added
    }

    /// Loads one stored batch at start-up; returns the records it held
    /// still unexpired at `now_ms`. An expired or undecodable batch is kept
    /// only to be deleted by the next [`Records::sweep`].
    pub fn load(&self, key: &[u8], value: &[u8], now_ms: i64) -> u64 {
        let Some((deduper_key, expire)) = split_key(key) else {
            return 0;
        };
        let mut state = self.state();
        let d = state.dedupers.entry(deduper_key.to_vec()).or_default();
        let live = expire >= now_ms && value.len() % RECORD_BYTES == 0;
        d.batches.push((if live { expire } else { i64::MIN }, key.to_vec()));
        if !live {
            return 0;
        }
        let entries = value.chunks_exact(RECORD_BYTES).map(|r| {
            let h = u128::from_be_bytes(r[..16].try_into().unwrap_or_default());
            let fp = u64::from_be_bytes(r[16..].try_into().unwrap_or_default());
            (h, fp)
        });
        // Remembered until the batch's own expiry: what the last process
        // promised in memory may have been less, never more (module docs).
        let added = Self::insert(
            &mut d.map,
            entries,
            Expiry {
                memory: expire,
                disk: expire,
            },
        );
        state.count += added;
        (value.len() / RECORD_BYTES) as u64
    }

    /// Forgets every record expired before `now_ms`; returns the disk keys
    /// of the batches that expired.
    pub fn sweep(&self, now_ms: i64) -> Vec<Vec<u8>> {
        let mut state = self.state();
        let mut gone = std::mem::take(&mut state.expired_keys);
        gone.extend(Self::sweep_locked(&mut state, now_ms));
        gone
    }

    fn sweep_locked(state: &mut State, now_ms: i64) -> Vec<Vec<u8>> {
        let mut gone = Vec::new();
        let mut forgotten = 0u64;
        for d in state.dedupers.values_mut() {
            let before = d.map.len();
            d.map.retain(|_, e| e.memory >= now_ms);
            forgotten += (before - d.map.len()) as u64;
            d.batches.retain_mut(|(expire, key)| {
                let keep = *expire >= now_ms;
                if !keep {
                    gone.push(std::mem::take(key));
                }
                keep
            });
        }
        state.dedupers.retain(|_, d| !d.map.is_empty() || !d.batches.is_empty());
        state.count -= forgotten;
        gone
    }

    /// Forgets every record of one deduper (it was deleted).
    pub fn forget_deduper(&self, deduper_key: &[u8]) {
        let mut state = self.state();
        if let Some(d) = state.dedupers.remove(deduper_key) {
            state.count -= d.map.len() as u64;
        }
    }

    /// Records held in memory now (expired ones until swept).
    pub fn count(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &[u8] = b"c\0d";

    #[test]
    fn remembered_until_expiry_and_bounded() {
        let r = Records::new(3 * ENTRY_BYTES);
        let mut written = Vec::new();
        r.remember(D, &[(b"a", 1), (b"b", 2)], 100, 0, |k, v| {
            written.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(written.len(), 1, "one disk entry per batch");
        assert_eq!(written[0].1.len(), 2 * RECORD_BYTES);
        assert_eq!(
            r.recall(D, &[(b"a", 1), (b"b", 2), (b"b", 1), (b"c", 3)], 100),
            vec![true, true, false, false]
        );
        assert_eq!(r.recall(D, &[(b"a", 1)], 101), vec![false]);
        assert_eq!(r.recall(b"c\0other", &[(b"a", 1)], 0), vec![false]);
        // Remembered again later: one record, the later expiry.
        r.remember(D, &[(b"a", 1)], 150, 0, |_, _| Ok(())).unwrap();
        assert_eq!(r.count(), 2);
        assert_eq!(r.recall(D, &[(b"a", 1)], 120), vec![true]);
        // The same id with another entity is another record: both are recalled.
        r.remember(D, &[(b"a", 9)], 150, 0, |_, _| Ok(())).unwrap();
        assert_eq!(r.count(), 3);
        assert_eq!(r.recall(D, &[(b"a", 1), (b"a", 9)], 120), vec![true, true]);
        let full = r.remember(D, &[(b"c", 3)], 100, 0, |_, _| Ok(())).unwrap_err();
        assert!(
            matches!(full, StorageError::Capacity(ref m) if m.contains("max_record_memory_mib")),
            "{full}"
        );
        assert_eq!(r.recall(D, &[(b"c", 3)], 0), vec![false]);
        // Past 100 the first batch expired: "b" is forgotten, both "a" live on in later ones.
        assert_eq!(r.sweep(120), vec![written[0].0.clone()]);
        assert_eq!(r.count(), 2);
        assert_eq!(
            r.recall(D, &[(b"a", 1), (b"a", 9), (b"b", 2)], 120),
            vec![true, true, false]
        );
        // Room again; the "a"s (expired at 150) are held until a sweep needs or takes them.
        r.remember(D, &[(b"c", 3)], 300, 200, |_, _| Ok(())).unwrap();
        assert_eq!(r.count(), 3);
        assert_eq!(r.recall(D, &[(b"a", 1), (b"c", 3)], 200), vec![false, true]);
        // On disk each batch lasts an eighth of its window longer (300 + 100 / 8).
        assert_eq!(r.sweep(312).len(), 2, "the batches of the \"a\"s");
        assert_eq!(r.count(), 0);
        assert_eq!(r.sweep(313).len(), 1, "the last one");
    }

    /// Issue 45: with the budget full, a replay of held records was refused
    /// (each replay counted again), and each replay wrote its records again.
    #[test]
    fn replays_take_no_room_and_are_written_only_past_their_disk_expiry() {
        let r = Records::new(2 * ENTRY_BYTES);
        let mut disk = Vec::new();
        let mut keep = |k: &[u8], v: &[u8]| {
            disk.push((k.to_vec(), v.to_vec()));
            Ok(())
        };
        r.remember(D, &[(b"a", 1), (b"b", 2)], 800, 0, &mut keep).unwrap();
        // Full. A replay (window 800 from 50) fits in the batch's disk
        // expiry, 800 + 800 / 8: remembered again in memory, not written.
        r.remember(D, &[(b"a", 1), (b"b", 2)], 850, 50, |_, _| {
            panic!("a replay written again")
        })
        .unwrap();
        assert_eq!(r.count(), 2);
        assert_eq!(r.recall(D, &[(b"a", 1), (b"b", 2)], 850), vec![true, true]);
        assert_eq!(r.recall(D, &[(b"a", 1)], 851), vec![false]);
        // New ones are still refused, naming only what does not fit; a
        // request mixing them with replays is refused whole.
        let full = r
            .remember(D, &[(b"a", 1), (b"c", 3)], 860, 60, |_, _| panic!("refused"))
            .unwrap_err();
        assert!(
            matches!(full, StorageError::Capacity(ref m) if m.contains("; 1 more do not fit")),
            "{full}"
        );
        assert_eq!(r.recall(D, &[(b"a", 1), (b"c", 3)], 855), vec![false, false]);
        // A replay whose window outlasts the disk expiry (900) is written,
        // alone, with headroom again: 1000 + 800 / 8.
        r.remember(D, &[(b"a", 1)], 1000, 200, &mut keep).unwrap();
        assert_eq!(disk.len(), 2);
        assert_eq!(disk[1].1.len(), RECORD_BYTES, "only the replay that needed it");
        assert_eq!(split_key(&disk[1].0).unwrap().1, 1100);
        assert_eq!(r.recall(D, &[(b"a", 1), (b"b", 2)], 1000), vec![true, false]);
        // After a restart, memory is never short of what it promised: each
        // record until its latest disk expiry.
        let loaded = Records::new(2 * ENTRY_BYTES);
        for (k, v) in &disk {
            loaded.load(k, v, 0);
        }
        assert_eq!(loaded.count(), 2);
        assert_eq!(loaded.recall(D, &[(b"a", 1), (b"b", 2)], 900), vec![true, true]);
        assert_eq!(loaded.recall(D, &[(b"a", 1), (b"b", 2)], 1100), vec![true, false]);
        // A sweep made for room hands the batches it dropped to the next
        // sweep, which deletes them from disk.
        r.remember(D, &[(b"c", 3)], 2000, 1050, |_, _| Ok(())).unwrap();
        assert_eq!(
            r.count(),
            1,
            "both expired by 1050, in memory; the first batch on disk too"
        );
        assert_eq!(r.sweep(1051), vec![disk[0].0.clone()]);
    }

    #[test]
    fn a_failed_persist_remembers_nothing_and_load_round_trips() {
        let r = Records::new(1 << 20);
        let failed = r.remember(D, &[(b"a", 1)], 100, 0, |_, _| {
            Err(StorageError::Unavailable("disk full".into()))
        });
        assert!(failed.is_err());
        assert_eq!(r.recall(D, &[(b"a", 1)], 0), vec![false]);
        let mut disk = Vec::new();
        r.remember(D, &[(b"a", 7), (b"b", 8)], 100, 0, |k, v| {
            disk.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        r.remember(D, &[(b"c", 5)], 40, 0, |k, v| {
            disk.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        let loaded = Records::new(1 << 20);
        assert_eq!(loaded.load(&disk[0].0, &disk[0].1, 50), 2);
        assert_eq!(
            loaded.load(&disk[1].0, &disk[1].1, 50),
            0,
            "expired batches are not loaded"
        );
        assert_eq!(
            loaded.recall(D, &[(b"a", 7), (b"b", 8), (b"c", 5), (b"a", 8)], 50),
            vec![true, true, false, false]
        );
        // ...but are deleted from disk by the next sweep.
        assert_eq!(loaded.sweep(50), vec![disk[1].0.clone()]);
        loaded.forget_deduper(D);
        assert_eq!(loaded.count(), 0);
        assert_eq!(loaded.recall(D, &[(b"a", 7)], 50), vec![false]);
    }
}
