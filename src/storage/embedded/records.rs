//! Remembered record ids of the embedded store (see `engine::records`): in
//! memory for lookups, and in the `records` keyspace so they survive a
//! restart.
//!
//! In memory, one map per deduper from a 128-bit hash of the record id
//! (murmur3 x64-128, seed 0) to its expiry time and its entity's
//! fingerprint: [`ENTRY_BYTES`] per record, counted against
//! `storage.embedded.max_record_memory_mib`. A record id is never kept
//! itself, so its length costs nothing; two ids collide with probability
//! about 2^-128 per pair.
//!
//! On disk: key `<client>\0<deduper>\0<id hash, 16 bytes BE>`, value expiry
//! time (8 bytes BE, ms since the Unix epoch) then the fingerprint (8 bytes BE).

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Mutex;

use crate::storage::{RecordFingerprint, StorageError};

/// Bytes counted per remembered record: 32 bytes of key and value plus the
/// hash map's control byte and spare capacity, rounded up.
pub const ENTRY_BYTES: u64 = 48;

/// Length of a stored value: expiry and fingerprint.
const VALUE_BYTES: usize = 16;

type Map = HashMap<u128, (i64, RecordFingerprint)>;

#[derive(Default)]
struct State {
    dedupers: HashMap<Vec<u8>, Map>,
    count: u64,
}

/// The remembered record ids; see the module docs.
pub struct Records {
    max_entries: u64,
    budget_bytes: u64,
    state: Mutex<State>,
}

/// The 128-bit hash a record id is kept under.
pub fn id_hash(id: &[u8]) -> u128 {
    murmur3::murmur3_x64_128(&mut Cursor::new(id), 0).unwrap_or(0)
}

/// The on-disk key of one record of the deduper `deduper_key`.
pub fn disk_key(deduper_key: &[u8], hash: u128) -> Vec<u8> {
    let mut k = Vec::with_capacity(deduper_key.len() + 17);
    k.extend_from_slice(deduper_key);
    k.push(0);
    k.extend_from_slice(&hash.to_be_bytes());
    k
}

/// The prefix of every on-disk key of one deduper's records.
pub fn disk_prefix(deduper_key: &[u8]) -> Vec<u8> {
    let mut k = deduper_key.to_vec();
    k.push(0);
    k
}

fn value(expire_ms: i64, fp: RecordFingerprint) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    v[..8].copy_from_slice(&expire_ms.to_be_bytes());
    v[8..].copy_from_slice(&fp.to_be_bytes());
    v
}

impl Records {
    /// `budget_bytes`: memory all remembered records may take.
    pub fn new(budget_bytes: u64) -> Records {
        Records {
            max_entries: budget_bytes / ENTRY_BYTES,
            budget_bytes,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The unexpired fingerprints of `ids` at `now_ms`, in order.
    pub fn recall(&self, deduper_key: &[u8], ids: &[&[u8]], now_ms: i64) -> Vec<Option<RecordFingerprint>> {
        let state = self.state();
        let Some(map) = state.dedupers.get(deduper_key) else {
            return vec![None; ids.len()];
        };
        ids.iter()
            .map(|id| match map.get(&id_hash(id)) {
                Some(&(expire, fp)) if expire >= now_ms => Some(fp),
                _ => None,
            })
            .collect()
    }

    /// Remembers `records` until `expire_ms`. `persist(entries)` writes the
    /// `(disk key, value)` pairs durably first; they are visible to
    /// [`Records::recall`] only after it succeeded. Errors: `Capacity` when
    /// the budget has no room for all of them even after forgetting the
    /// expired ones (nothing is remembered then); whatever `persist` returns.
    pub fn remember(
        &self,
        deduper_key: &[u8],
        records: &[(&[u8], RecordFingerprint)],
        expire_ms: i64,
        now_ms: i64,
        persist: impl FnOnce(&[(Vec<u8>, [u8; VALUE_BYTES])]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        if records.is_empty() {
            return Ok(());
        }
        let entries: Vec<(u128, RecordFingerprint)> = records.iter().map(|(id, fp)| (id_hash(id), *fp)).collect();
        {
            // Room is checked before the write and may be overshot by the
            // batches of requests racing this one: a bound, not an exact cap.
            let mut state = self.state();
            if state.count + entries.len() as u64 > self.max_entries {
                let _ = Self::sweep_locked(&mut state, now_ms);
            }
            if state.count + entries.len() as u64 > self.max_entries {
                return Err(StorageError::Capacity(format!(
                    "{} remembered record ids take {} of the {} bytes of storage.embedded.max_record_memory_mib \
                     ({ENTRY_BYTES} bytes each); {} more do not fit: raise the setting, shorten \
                     limits.record_id_window_seconds, or send fewer record_ids",
                    state.count,
                    state.count * ENTRY_BYTES,
                    self.budget_bytes,
                    entries.len()
                )));
            }
        }
        let disk: Vec<(Vec<u8>, [u8; VALUE_BYTES])> = entries
            .iter()
            .map(|&(h, fp)| (disk_key(deduper_key, h), value(expire_ms, fp)))
            .collect();
        persist(&disk)?;
        let mut state = self.state();
        let map = state.dedupers.entry(deduper_key.to_vec()).or_default();
        let mut added = 0;
        for (h, fp) in entries {
            if map.insert(h, (expire_ms, fp)).is_none() {
                added += 1;
            }
        }
        state.count += added;
        Ok(())
    }

    /// Loads one stored entry at start-up; false when it had expired (or is
    /// not a record entry).
    pub fn load(&self, key: &[u8], value: &[u8], now_ms: i64) -> bool {
        let (Some((deduper_key, hash)), Ok(value)) = (split_key(key), <[u8; VALUE_BYTES]>::try_from(value)) else {
            return false;
        };
        let expire = i64::from_be_bytes(value[..8].try_into().unwrap_or_default());
        if expire < now_ms {
            return false;
        }
        let fp = u64::from_be_bytes(value[8..].try_into().unwrap_or_default());
        let mut state = self.state();
        if state
            .dedupers
            .entry(deduper_key.to_vec())
            .or_default()
            .insert(hash, (expire, fp))
            .is_none()
        {
            state.count += 1;
        }
        true
    }

    /// Forgets every record expired before `now_ms`; returns their disk keys.
    pub fn sweep(&self, now_ms: i64) -> Vec<Vec<u8>> {
        Self::sweep_locked(&mut self.state(), now_ms)
    }

    fn sweep_locked(state: &mut State, now_ms: i64) -> Vec<Vec<u8>> {
        let mut gone = Vec::new();
        for (deduper_key, map) in &mut state.dedupers {
            map.retain(|&h, &mut (expire, _)| {
                let keep = expire >= now_ms;
                if !keep {
                    gone.push(disk_key(deduper_key, h));
                }
                keep
            });
        }
        state.dedupers.retain(|_, map| !map.is_empty());
        state.count -= gone.len() as u64;
        gone
    }

    /// Forgets every record of one deduper (it was deleted).
    pub fn forget_deduper(&self, deduper_key: &[u8]) {
        let mut state = self.state();
        if let Some(map) = state.dedupers.remove(deduper_key) {
            state.count -= map.len() as u64;
        }
    }

    /// Records held in memory now (expired ones until swept).
    pub fn count(&self) -> u64 {
        self.state().count
    }
}

/// `(deduper key, id hash)` of a disk key.
fn split_key(key: &[u8]) -> Option<(&[u8], u128)> {
    let (head, hash) = key.split_at_checked(key.len().checked_sub(16)?)?;
    let deduper_key = head.strip_suffix(&[0])?;
    Some((deduper_key, u128::from_be_bytes(hash.try_into().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &[u8] = b"c\0d";

    #[test]
    fn remembered_until_expiry_and_bounded() {
        let r = Records::new(3 * ENTRY_BYTES);
        let mut written = Vec::new();
        r.remember(D, &[(b"a", 1), (b"b", 2)], 100, 0, |e| {
            written = e.to_vec();
            Ok(())
        })
        .unwrap();
        assert_eq!(written.len(), 2);
        assert_eq!(r.recall(D, &[b"a", b"b", b"c"], 100), vec![Some(1), Some(2), None]);
        assert_eq!(r.recall(D, &[b"a"], 101), vec![None]);
        assert_eq!(r.recall(b"c\0other", &[b"a"], 0), vec![None]);
        // A replaced id does not count twice.
        r.remember(D, &[(b"a", 9)], 100, 0, |_| Ok(())).unwrap();
        assert_eq!(r.count(), 2);
        assert_eq!(r.recall(D, &[b"a"], 0), vec![Some(9)]);
        let full = r.remember(D, &[(b"c", 3), (b"d", 4)], 100, 0, |_| Ok(())).unwrap_err();
        assert!(
            matches!(full, StorageError::Capacity(ref m) if m.contains("max_record_memory_mib")),
            "{full}"
        );
        assert_eq!(r.recall(D, &[b"c"], 0), vec![None]);
        // Once the others expired there is room again, and the sweep names their disk keys.
        r.remember(D, &[(b"c", 3), (b"d", 4)], 300, 200, |_| Ok(())).unwrap();
        assert_eq!(r.count(), 2);
        assert_eq!(r.sweep(301).len(), 2);
        assert_eq!(r.count(), 0);
    }

    #[test]
    fn a_failed_persist_remembers_nothing_and_load_round_trips() {
        let r = Records::new(1 << 20);
        let failed = r.remember(D, &[(b"a", 1)], 100, 0, |_| {
            Err(StorageError::Unavailable("disk full".into()))
        });
        assert!(failed.is_err());
        assert_eq!(r.recall(D, &[b"a"], 0), vec![None]);
        let mut disk = Vec::new();
        r.remember(D, &[(b"a", 7)], 100, 0, |e| {
            disk = e.to_vec();
            Ok(())
        })
        .unwrap();
        let loaded = Records::new(1 << 20);
        assert!(loaded.load(&disk[0].0, &disk[0].1, 50));
        assert!(
            !loaded.load(&disk[0].0, &disk[0].1, 101),
            "expired entries are not loaded"
        );
        assert_eq!(loaded.recall(D, &[b"a"], 50), vec![Some(7)]);
        loaded.forget_deduper(D);
        assert_eq!(loaded.count(), 0);
        assert_eq!(loaded.recall(D, &[b"a"], 50), vec![None]);
    }
}
