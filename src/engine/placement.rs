//! Dedupers refused because their bits live elsewhere than this replica's
//! settings say (`Misplaced`), or because their stored config cannot be
//! used (`Corrupt`: a value no create accepts, e.g. a meta row overwritten
//! by hand, issue 45 class 6): re-checked against the stored configs, so
//! that one deleted, repaired, or re-created where this replica keeps its
//! bits, is no longer reported (the server shows each refused one as a
//! `NOT_SERVING` health service, `server.rs`).

use super::{CacheKey, Engine};
use crate::storage::StorageError;

impl Engine {
    /// Dedupers whose stored config could not be used at their last lookup
    /// (`Corrupt`), as (client_id, name): each is reported as a
    /// `NOT_SERVING` health service until a read of it succeeds again.
    pub fn unusable_dedupers(&self) -> Vec<(String, String)> {
        self.unusable
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Notes the outcome of a config lookup of `key`: an unusable config
    /// is remembered (logged once), any other outcome forgets it.
    pub(super) fn note_usable(&self, key: &CacheKey, corrupt: Option<&str>) {
        let mut unusable = self.unusable.lock().unwrap_or_else(|p| p.into_inner());
        match corrupt {
            Some(error) => {
                if unusable.insert(key.clone()) {
                    tracing::error!(client_id = %key.0, deduper = %key.1, error,
                        "deduper refused: its stored config cannot be used; restore the value the message names");
                }
            }
            None => {
                if unusable.remove(key) {
                    tracing::info!(client_id = %key.0, deduper = %key.1, "deduper config usable again");
                }
            }
        }
    }

    /// Re-reads the config of every deduper whose config was unusable and
    /// forgets those that are gone or readable again.
    pub async fn recheck_unusable(&self) {
        for key in self.unusable_dedupers() {
            let store = self.store.clone();
            let (c, n) = key.clone();
            match tokio::task::spawn_blocking(move || store.get_deduper(&c, &n)).await {
                Ok(Err(StorageError::Corrupt(_))) | Err(_) => {}
                Ok(Err(e)) => tracing::warn!(client_id = %key.0, deduper = %key.1, error = %e,
                    "re-checking a deduper with an unusable config failed; still refused"),
                Ok(Ok(_)) => self.note_usable(&key, None),
            }
        }
    }

    /// Re-reads the config of every deduper refused as misplaced and forgets
    /// those that are gone or whose recorded data location now matches
    /// this replica's (dropping their cached config too, so the next data
    /// call reads the current one). One `get_deduper` per refused deduper,
    /// on the blocking pool; a failed read keeps it refused (logged).
    pub async fn recheck_misplaced(&self) {
        let refused: Vec<CacheKey> = self
            .misplaced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        for key in refused {
            let store = self.store.clone();
            let (c, n) = key.clone();
            let read = tokio::task::spawn_blocking(move || {
                let d = store.get_deduper(&c, &n)?;
                Ok::<_, crate::storage::StorageError>(d.map(|d| {
                    let current = store.data_location(&d);
                    d.data_location.is_none() || d.data_location == current
                }))
            })
            .await;
            let resolved = match read {
                Ok(Ok(None)) => "deleted",
                Ok(Ok(Some(true))) => "its recorded data location matches this replica's now",
                Ok(Ok(Some(false))) => continue,
                Ok(Err(e)) => {
                    tracing::warn!(client_id = %key.0, deduper = %key.1, error = %e,
                        "re-checking a deduper refused as misplaced failed; still refused");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "re-checking a misplaced deduper: task failed");
                    continue;
                }
            };
            tracing::info!(client_id = %key.0, deduper = %key.1, why = resolved, "deduper no longer refused as misplaced");
            self.misplaced.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            self.forget(&key.0, &key.1);
        }
    }
}
