//! Dedupers refused because their bits live elsewhere than this replica's
//! settings say (`Misplaced`): re-checked against the stored configs, so
//! that one deleted, or re-created where this replica keeps its bits, is no
//! longer reported (the server shows each refused one as a `NOT_SERVING`
//! health service, `server.rs`).

use super::{CacheKey, Engine};

impl Engine {
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
