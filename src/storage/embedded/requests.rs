//! Remembered `request_id` answers of the embedded store: in memory for
//! lookups, and in the `requests` keyspace so they survive a restart.
//!
//! Key: `<client>\0<deduper>\0<request_id>`; stored value: expiry time (ms
//! since the Unix epoch, 8 bytes BE) then the engine's record. Memory is
//! bounded by `storage.embedded.max_request_memory_mib`, counting per entry
//! its key, its record and [`ENTRY_OVERHEAD_BYTES`].

use std::collections::HashMap;
use std::sync::Mutex;

use super::codec;
use crate::storage::{RequestKey, StorageError};

/// Bytes counted per remembered request on top of its key and record: the
/// hash-map slot and the two vectors' headers, rounded up.
pub const ENTRY_OVERHEAD_BYTES: u64 = 96;

#[derive(Default)]
struct State {
    map: HashMap<Vec<u8>, (i64, Vec<u8>)>,
    bytes: u64,
}

/// The remembered requests; see the module docs.
pub struct Requests {
    budget: u64,
    state: Mutex<State>,
}

fn store_key(key: &RequestKey) -> Vec<u8> {
    let mut k = codec::deduper_key(&key.client_id, &key.deduper);
    k.push(0);
    k.extend_from_slice(&key.request_id);
    k
}

fn cost(key: &[u8], record: &[u8]) -> u64 {
    (key.len() + record.len()) as u64 + ENTRY_OVERHEAD_BYTES
}

impl Requests {
    /// `budget`: bytes all remembered requests may take.
    pub fn new(budget: u64) -> Requests {
        Requests {
            budget,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The unexpired record of `key` at `now_ms`.
    pub fn recall(&self, key: &RequestKey, now_ms: i64) -> Option<Vec<u8>> {
        let state = self.state();
        match state.map.get(&store_key(key)) {
            Some((expire, record)) if *expire >= now_ms => Some(record.clone()),
            _ => None,
        }
    }

    /// Stores `record` unless an unexpired one exists (returned instead);
    /// `persist(key, value)` writes it durably first, under the lock, so two
    /// attempts of one request cannot both win. Errors: `Capacity` beyond the
    /// budget; whatever `persist` returns.
    pub fn remember(
        &self,
        key: &RequestKey,
        record: &[u8],
        expire_ms: i64,
        now_ms: i64,
        persist: impl FnOnce(&[u8], &[u8]) -> Result<(), StorageError>,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        let k = store_key(key);
        let mut state = self.state();
        if let Some((expire, earlier)) = state.map.get(&k)
            && *expire >= now_ms
        {
            return Ok(Some(earlier.clone()));
        }
        let need = cost(&k, record);
        if state.bytes + need > self.budget {
            Self::sweep_locked(&mut state, now_ms);
        }
        if state.bytes + need > self.budget {
            return Err(StorageError::Capacity(format!(
                "{} remembered request_ids take {} of the {} bytes of storage.embedded.max_request_memory_mib; \
                 retry once older ones expired (limits.request_id_window_seconds), or send fewer request_ids",
                state.map.len(),
                state.bytes,
                self.budget
            )));
        }
        let mut value = expire_ms.to_be_bytes().to_vec();
        value.extend_from_slice(record);
        persist(&k, &value)?;
        if let Some((_, old)) = state.map.insert(k.clone(), (expire_ms, record.to_vec())) {
            state.bytes -= cost(&k, &old);
        }
        state.bytes += need;
        Ok(None)
    }

    /// Loads one stored entry at start-up; false when it had expired.
    pub fn load(&self, key: &[u8], value: &[u8], now_ms: i64) -> bool {
        let Some((expire, record)) = value.split_first_chunk::<8>() else {
            return false;
        };
        let expire = i64::from_be_bytes(*expire);
        if expire < now_ms {
            return false;
        }
        let mut state = self.state();
        state.bytes += cost(key, record);
        state.map.insert(key.to_vec(), (expire, record.to_vec()));
        true
    }

    /// Forgets every entry expired before `now_ms`; returns their keys (to
    /// delete from disk).
    pub fn sweep(&self, now_ms: i64) -> Vec<Vec<u8>> {
        Self::sweep_locked(&mut self.state(), now_ms)
    }

    fn sweep_locked(state: &mut State, now_ms: i64) -> Vec<Vec<u8>> {
        let gone: Vec<Vec<u8>> = state
            .map
            .iter()
            .filter(|(_, (expire, _))| *expire < now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            if let Some((_, record)) = state.map.remove(k) {
                state.bytes -= cost(k, &record);
            }
        }
        gone
    }

    /// Bytes counted against the budget now.
    pub fn bytes(&self) -> u64 {
        self.state().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> RequestKey {
        RequestKey {
            client_id: "c".into(),
            deduper: "d".into(),
            request_id: id.as_bytes().to_vec(),
        }
    }

    #[test]
    fn first_record_wins_until_it_expires_and_memory_is_bounded() {
        let r = Requests::new(3 * (ENTRY_OVERHEAD_BYTES + 20));
        let ok = |_: &[u8], _: &[u8]| Ok(());
        assert_eq!(r.remember(&key("a"), b"first", 100, 0, ok).unwrap(), None);
        assert_eq!(
            r.remember(&key("a"), b"second", 100, 50, ok).unwrap(),
            Some(b"first".to_vec())
        );
        assert_eq!(r.recall(&key("a"), 100), Some(b"first".to_vec()));
        assert_eq!(r.recall(&key("a"), 101), None);
        assert_eq!(r.bytes(), cost(&store_key(&key("a")), b"first"));
        r.remember(&key("b"), b"x", 100, 0, ok).unwrap();
        r.remember(&key("c"), b"x", 100, 0, ok).unwrap();
        let full = r.remember(&key("d"), b"x", 100, 0, ok).unwrap_err();
        assert!(
            matches!(full, StorageError::Capacity(ref m) if m.contains("max_request_memory_mib")),
            "{full}"
        );
        // Once the others expired, there is room again.
        assert_eq!(r.remember(&key("d"), b"x", 300, 200, ok).unwrap(), None);
        assert_eq!(r.bytes(), cost(&store_key(&key("d")), b"x"));
    }

    #[test]
    fn a_failed_persist_remembers_nothing() {
        let r = Requests::new(1 << 20);
        let failed = r.remember(&key("a"), b"rec", 100, 0, |_, _| {
            Err(StorageError::Unavailable("disk full".into()))
        });
        assert!(failed.is_err());
        assert_eq!(r.recall(&key("a"), 0), None);
        assert_eq!(r.bytes(), 0);
    }
}
