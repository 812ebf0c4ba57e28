//! Online resize by generations (the rules are in [`crate::generations`]):
//! starting a successor generation, the data path's view of several
//! generations, and the background pass that retires older generations.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use super::{CONFIG_CACHE_TTL, Engine, EngineError, absent_in};
use crate::clock::now_ms;
use crate::deduper::{self, Deduper, Sizing};
use crate::generations::{self, ResizeError, Timing, View};
use crate::storage::Store;

/// Slack, in ms, for a request between its config lookup and its storage
/// call, added to every transition's grace.
pub const RESIZE_MARGIN_MS: i64 = 1000;

/// The generation `d`'s writes go to at `now` and the other live ones
/// (read only); `d` itself and none when it has no generations.
pub(super) fn split(d: &Deduper, now: i64) -> (Cow<'_, Deduper>, Vec<Deduper>) {
    if d.generations.is_empty() {
        return (Cow::Borrowed(d), Vec::new());
    }
    let view = View::at(d, now);
    let others = view.others().cloned().collect();
    let mut readers = view.readers;
    (Cow::Owned(readers.swap_remove(view.writer)), others)
}

/// Whether each entity is absent from every filter of `filters` (true for
/// every entity when there is none). One storage read per filter.
pub(super) fn absent_in_all<'a, E: AsRef<[u8]>>(
    store: &dyn Store,
    filters: impl Iterator<Item = &'a Deduper>,
    entities: &[E],
    now: i64,
) -> Result<Vec<bool>, EngineError> {
    let mut absent = vec![true; entities.len()];
    for f in filters {
        mask(&mut absent, &absent_in(store, f, entities, now)?);
    }
    Ok(absent)
}

/// `answer[i] &= absent[i]`: present in another generation is present.
pub(super) fn mask(answer: &mut [bool], absent: &[bool]) {
    for (a, &b) in answer.iter_mut().zip(absent) {
        *a &= b;
    }
}

impl Engine {
    /// The timing of a transition on this store: the config cache TTL,
    /// the replicas' clock bound (the store's `min_ttl_ms`, twice the
    /// tolerated offset) and [`RESIZE_MARGIN_MS`].
    pub fn resize_timing(&self) -> Timing {
        Timing {
            config_cache_ms: CONFIG_CACHE_TTL.as_millis() as i64,
            clock_bound_ms: i64::try_from(self.store.min_ttl_ms()).unwrap_or(i64::MAX),
            margin_ms: RESIZE_MARGIN_MS,
        }
    }

    /// Resizes a deduper online: records a successor generation sized for
    /// `expected_insertions` and `false_positive_rate` (each defaulting to
    /// the current one), read at once and written from its
    /// `writes_from_ms` on (see [`crate::generations`]). Larger or smaller
    /// both work. The same n and p as now: no change. Returns the config as
    /// stored. Errors: `Invalid` names or sizes (also when the deduper was
    /// sized by explicit geometry and only one of n, p is given),
    /// `NotFound`, `Misplaced`, `Resize` while an older generation is still
    /// live (saying when it retires) or on a store that keeps no
    /// generations, `Storage` (`Capacity`: the successor does not fit the
    /// embedded memory budget; nothing changed).
    pub async fn resize_deduper(
        &self,
        client_id: &str,
        name: &str,
        expected_insertions: Option<u64>,
        false_positive_rate: Option<f64>,
    ) -> Result<Deduper, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("name", name)?;
        if !self.store.supports_generations() {
            return Err(EngineError::Resize(format!(
                "resizing a deduper is not supported on the {} store yet; create a larger deduper instead \
                 (docs/operations.md)",
                self.store.kind()
            )));
        }
        let current = self.load_deduper(client_id, name).await?;
        let key = (client_id.to_string(), name.to_string());
        let current = self.check_location(&key, Arc::new(current))?;
        let n = expected_insertions.or(current.expected_insertions);
        let p = false_positive_rate.or(current.false_positive_rate);
        let (Some(n), Some(p)) = (n, p) else {
            return Err(EngineError::Invalid(format!(
                "deduper {name:?} was sized by explicit geometry: give both expected_insertions and \
                 false_positive_rate to resize it"
            )));
        };
        if current.expected_insertions == Some(n) && current.false_positive_rate == Some(p) {
            return Ok(Arc::unwrap_or_clone(current));
        }
        let geometry = deduper::resolve_geometry(&Sizing::Expected { n, p }, &self.limits.sizes)?;
        let timing = self.resize_timing();
        let store = self.store.clone();
        let (c, nm) = key.clone();
        let updated = Self::blocking(move || {
            let refused: Mutex<Option<ResizeError>> = Mutex::new(None);
            let change = |d: &mut Deduper| {
                let now = now_ms();
                // Each attempt of a compare-and-set decides afresh.
                let outcome = generations::start_successor(d, geometry, Some(n), Some(p), now, timing);
                if outcome.is_ok() {
                    d.update_time_ms = now;
                }
                *refused.lock().unwrap_or_else(|e| e.into_inner()) = outcome.err();
            };
            let stored = store.update_deduper(&c, &nm, &change)?;
            if let Some(e) = refused.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(EngineError::Resize(e.to_string()));
            }
            stored.ok_or(EngineError::NotFound { client_id: c, name: nm })
        })
        .await;
        self.forget(client_id, name);
        let updated = updated?;
        let newest = updated.generations.last();
        tracing::info!(
            client_id,
            deduper = name,
            expected_insertions = n,
            false_positive_rate = p,
            k = geometry.hash_functions,
            shards = geometry.shards,
            bits_per_shard = geometry.bits_per_shard,
            generation = newest.map(|g| g.id),
            writes_from_ms = newest.map(|g| g.writes_from_ms),
            retire_at_ms = updated.generations.first().and_then(|g| g.retire_at_ms),
            "deduper resize started: a successor generation is read now and written from writes_from_ms"
        );
        crate::metrics::resize_started();
        self.stats.note(&updated);
        Ok(updated)
    }

    /// Makes the retirement pass know every deduper the store records
    /// generations of (called at start-up: a restart resumes retirements
    /// without waiting for each deduper to be used). Failures are logged;
    /// such a deduper is then resumed when it is next looked up.
    pub async fn resume_resizes(&self) {
        let store = self.store.clone();
        match Self::blocking(move || Ok(store.resized_dedupers()?)).await {
            Ok(list) => {
                for d in &list {
                    self.stats.note(d);
                }
                if !list.is_empty() {
                    tracing::info!(
                        dedupers = list.len(),
                        "resumed the retirement of resized dedupers' generations"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "listing resized dedupers failed; each resumes when next looked up"),
        }
    }

    /// One retirement pass: drops from its config, and frees the data of,
    /// every generation past its `retire_at_ms` among the dedupers this
    /// server has seen. Failures are logged and retried on the next pass.
    pub async fn retire_generations(&self) {
        let now = now_ms();
        for d in self.stats.snapshot() {
            let due = generations::due(&d, now);
            if due.is_empty() {
                continue;
            }
            let store = self.store.clone();
            let (c, n) = (d.client_id.clone(), d.name.clone());
            let retired = Self::blocking(move || {
                let change = |d: &mut Deduper| {
                    let now = now_ms();
                    if generations::retire(d, now) {
                        d.update_time_ms = now;
                    }
                };
                Ok(store.update_deduper(&c, &n, &change)?)
            })
            .await;
            match retired {
                Ok(Some(updated)) => {
                    self.forget(&d.client_id, &d.name);
                    for g in due.iter().filter(|g| !updated.generations.iter().any(|u| u.id == g.id)) {
                        tracing::info!(client_id = %d.client_id, deduper = %d.name, generation = g.id,
                            retire_at_ms = g.retire_at_ms, "deduper generation retired: its data is freed");
                        crate::metrics::generation_retired();
                    }
                    self.stats.note(&updated);
                }
                Ok(None) => self.stats.drop_deduper(&d.client_id, &d.name),
                Err(e) => tracing::warn!(client_id = %d.client_id, deduper = %d.name, error = %e,
                    "retiring a deduper generation failed; retrying on the next pass"),
            }
        }
    }
}
