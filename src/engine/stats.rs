//! Live statistics of dedupers, backend-agnostic: how full each Bloom
//! filter is now (bits whose expiry is at or after now), how many live
//! entities that implies, and the false-positive rate it answers with.
//!
//! A background pass ([`Engine::refresh_stats`], every
//! `stats.refresh_interval_ms`) asks the store for each deduper this server
//! has seen (created, looked up, listed or used since it started) with
//! [`Store::bit_stats`] - one deduper at a time, on the blocking pool - and
//! keeps the figures; `GetDeduper`/`ListDedupers` answer the kept figures,
//! so no request ever waits for a count. The pass also sets the per-deduper
//! Prometheus gauges and logs the over-capacity warning.
//!
//! Cost of a pass per deduper: embedded, an exact count over the in-memory
//! filter, O(m) at about 1 ns per bit (under 10 ms for the 9.6 million bits
//! of n = 1e6, p = 1%); HBase, a read of `stats.sample_bits` cells
//! (65,536 by default: a few `getRowsWithColumns` calls, about 2 MB).
//!
//! [`Store::bit_stats`]: crate::storage::Store::bit_stats

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use super::{CacheKey, Engine, EngineError};
use crate::clock::now_ms;
use crate::deduper::{self, Deduper};
use crate::generations;
use crate::metrics;
use crate::storage::BitStats;

/// Settings of the statistics pass (`stats.*` in the config).
#[derive(Debug, Clone, Copy)]
pub struct StatsSettings {
    /// Bits sampled per deduper where the backend samples (HBase).
    pub sample_bits: u64,
    /// Warn when the estimated false-positive rate passes this multiple of p.
    pub over_capacity_fpr_factor: f64,
}

impl Default for StatsSettings {
    fn default() -> Self {
        StatsSettings {
            sample_bits: 65_536,
            over_capacity_fpr_factor: 2.0,
        }
    }
}

/// The live figures of one deduper (m bits, k hash functions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeduperStats {
    /// Set bits among those examined.
    pub set_bits: u64,
    /// Bits examined: m when counted exactly, else the sample size.
    pub sampled_bits: u64,
    /// X/m, estimated by set_bits / sampled_bits.
    pub fill_ratio: f64,
    /// n* = -(m/k) ln(1 - X/m): the number of distinct live entities that
    /// leaves X of m bits set in expectation (S. J. Swamidass and P. Baldi,
    /// "Mathematical correction for fingerprint similarity measures to
    /// improve chemical retrieval", J. Chem. Inf. Model. 47(3), 2007).
    /// Infinite when every examined bit is set.
    pub estimated_entities: f64,
    /// fill_ratio^k: chance that an entity never added answers "present".
    pub estimated_fpr: f64,
    /// estimated_entities / n, when the deduper was sized from n and p.
    pub load: Option<f64>,
    /// When counted, ms since the Unix epoch.
    pub computed_at_ms: i64,
    /// Relative standard error of `estimated_entities` due to sampling
    /// (0 for an exact count): sigma_f / ((1 - f) * -ln(1 - f)) with
    /// sigma_f = sqrt(f (1 - f) / S * (m - S) / (m - 1)), the delta method
    /// on n* with the finite-population standard error of a fraction f
    /// measured on S of m bits drawn without replacement.
    pub relative_error: f64,
}

impl DeduperStats {
    /// The figures of `d` from what the store counted at `now_ms`.
    pub fn from_bits(d: &Deduper, bits: BitStats, now_ms: i64) -> DeduperStats {
        let m = d.geometry.total_bits() as f64;
        let k = f64::from(d.geometry.hash_functions.max(1));
        let s = bits.sampled_bits;
        let f = if s == 0 { 0.0 } else { bits.set_bits as f64 / s as f64 };
        let estimated_entities = if f >= 1.0 {
            f64::INFINITY
        } else {
            -(m / k) * (-f).ln_1p()
        };
        let relative_error = if s as f64 >= m || f <= 0.0 || f >= 1.0 {
            0.0
        } else {
            let fpc = (m - s as f64) / (m - 1.0);
            let sigma = (f * (1.0 - f) / s as f64 * fpc).sqrt();
            sigma / ((1.0 - f) * -(-f).ln_1p())
        };
        DeduperStats {
            set_bits: bits.set_bits,
            sampled_bits: s,
            fill_ratio: f,
            estimated_entities,
            estimated_fpr: f.powf(k),
            load: d.expected_insertions.map(|n| estimated_entities / n.max(1) as f64),
            computed_at_ms: now_ms,
            relative_error,
        }
    }
}

/// What the engine keeps for the statistics: the dedupers seen, their
/// latest figures, and which ones are warned about as over capacity.
#[derive(Default)]
pub(super) struct StatsBook {
    known: Mutex<HashMap<CacheKey, Arc<Deduper>>>,
    figures: RwLock<HashMap<CacheKey, DeduperStats>>,
    /// Figures of each generation of a deduper that records generations,
    /// by generation id.
    generations: RwLock<HashMap<CacheKey, Vec<(u32, DeduperStats)>>>,
    warned: Mutex<HashSet<CacheKey>>,
    /// What the automatic resize policy keeps per deduper (`resize.rs`).
    pub(super) trends: Mutex<HashMap<CacheKey, super::resize::Trend>>,
}

fn key_of(d: &Deduper) -> CacheKey {
    (d.client_id.clone(), d.name.clone())
}

/// A seed of the sample positions fixed per deduper (FNV-1a of its ids and
/// creation time): every pass reads the same positions, so the figure of a
/// deduper moves only when its bits do.
fn sample_seed(d: &Deduper) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = d
        .client_id
        .bytes()
        .chain([0])
        .chain(d.name.bytes())
        .chain(d.create_time_ms.to_le_bytes());
    for b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl StatsBook {
    /// Remembers `d` (its latest config) for the next passes.
    pub(super) fn note(&self, d: &Deduper) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key_of(d), Arc::new(d.clone()));
    }

    /// The dedupers seen so far, as last noted.
    pub(super) fn snapshot(&self) -> Vec<Arc<Deduper>> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Forgets a deleted (or vanished) deduper, frees its metric labels and
    /// zeroes its gauges.
    pub(super) fn drop_deduper(&self, client_id: &str, name: &str) {
        let key = (client_id.to_string(), name.to_string());
        // Held to the end: a pass recording this deduper meanwhile does so
        // before (and is zeroed) or sees it gone, never re-admits its labels after.
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.remove(&key);
        let had = self.figures.write().unwrap_or_else(|p| p.into_inner()).remove(&key);
        self.generations.write().unwrap_or_else(|p| p.into_inner()).remove(&key);
        self.warned.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        self.trends.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        metrics::deduper_gone(client_id, name, had.map(|f| f.load.is_some()));
        drop(known);
    }

    pub(super) fn get(&self, client_id: &str, name: &str) -> Option<DeduperStats> {
        let key = (client_id.to_string(), name.to_string());
        self.figures
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied()
    }

    fn record(&self, d: &Deduper, s: DeduperStats, per_generation: Vec<(u32, DeduperStats)>, factor: f64) {
        let key = key_of(d);
        // A delete may have run while this deduper was being counted; held
        // until the gauges are set, so that a delete zeroes them after.
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if !known.contains_key(&key) {
            return;
        }
        self.figures
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), s);
        self.generations
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), per_generation.clone());
        metrics::deduper_stats(&d.client_id, &d.name, &s, d.false_positive_rate);
        if !d.generations.is_empty() {
            let per: Vec<_> = d
                .generations
                .iter()
                .filter_map(|g| {
                    let s = per_generation.iter().find(|(id, _)| *id == g.id)?.1;
                    Some((g.id, s, g.retire_at_ms))
                })
                .collect();
            metrics::deduper_generations(&d.client_id, &d.name, &per);
        }
        drop(known);
        let Some(p) = d.false_positive_rate else { return };
        let over = s.estimated_fpr > factor * p;
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        if over && warned.insert(key.clone()) {
            tracing::warn!(
                client_id = %d.client_id,
                deduper = %d.name,
                estimated_fpr = s.estimated_fpr,
                p,
                factor,
                estimated_entities = s.estimated_entities.round(),
                expected_insertions = d.expected_insertions,
                "deduper over capacity: its estimated false-positive rate passed stats.over_capacity_fpr_factor x p; \
                 resize it online (solus deduper update --expected-insertions, or resize.auto; docs/operations.md, \"Resizing\")"
            );
        } else if !over && warned.remove(&key) {
            tracing::info!(client_id = %d.client_id, deduper = %d.name, estimated_fpr = s.estimated_fpr, p,
                "deduper back within capacity");
        }
    }
}

impl Engine {
    /// The latest live figures of a deduper, `None` before the first pass
    /// that counted it.
    pub fn stats_of(&self, client_id: &str, name: &str) -> Option<DeduperStats> {
        self.stats.get(client_id, name)
    }

    /// The latest figures of each generation of a deduper that records
    /// generations, by generation id; empty before the first pass that
    /// counted it, or without generations.
    pub fn generation_stats_of(&self, client_id: &str, name: &str) -> Vec<(u32, DeduperStats)> {
        let key = (client_id.to_string(), name.to_string());
        self.stats
            .generations
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }

    /// One statistics pass: counts every deduper seen so far, one at a time
    /// on the blocking pool, and keeps the figures (see the module docs).
    /// A deduper whose count fails keeps its previous figures (logged);
    /// one that no longer exists is forgotten.
    pub async fn refresh_stats(&self) {
        for d in self.stats.snapshot() {
            let store = self.store.clone();
            let settings = self.stats_settings;
            let counted = tokio::task::spawn_blocking(move || {
                // The config may have changed (expiry) or gone since it was noted.
                let Some(current) = store.get_deduper(&d.client_id, &d.name)? else {
                    return Ok((d, None));
                };
                let now = now_ms();
                if current.generations.is_empty() {
                    let bits = store.bit_stats(&current, now, settings.sample_bits, sample_seed(&current))?;
                    let stats = DeduperStats::from_bits(&current, bits, now);
                    return Ok((Arc::new(current), Some((stats, Vec::new()))));
                }
                // Each generation on its own; the deduper's figures are the
                // newest one's, with the rate of a read of all live ones.
                let mut per = Vec::new();
                for g in &current.generations {
                    let f = generations::physical(&current, g);
                    let bits = store.bit_stats(&f, now, settings.sample_bits, sample_seed(&f))?;
                    per.push((g.id, DeduperStats::from_bits(&f, bits, now)));
                }
                let live = current
                    .generations
                    .iter()
                    .zip(&per)
                    .filter(|(g, _)| g.retire_at_ms.is_none_or(|r| now < r));
                let union = generations::union_fpr(live.map(|(_, (_, s))| s.estimated_fpr));
                let newest = per
                    .last()
                    .map(|(_, s)| *s)
                    .unwrap_or_else(|| DeduperStats::from_bits(&current, crate::storage::BitStats::default(), now));
                let stats = DeduperStats {
                    estimated_fpr: union,
                    ..newest
                };
                Ok::<_, crate::storage::StorageError>((Arc::new(current), Some((stats, per))))
            })
            .await;
            match counted {
                Ok(Ok((d, Some((s, per))))) => {
                    self.stats
                        .record(&d, s, per, self.stats_settings.over_capacity_fpr_factor);
                    self.consider_auto_resize(&d, &s).await;
                }
                Ok(Ok((d, None))) => self.stats.drop_deduper(&d.client_id, &d.name),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "deduper statistics pass: counting failed; keeping the last figures")
                }
                Err(e) => tracing::warn!(error = %e, "deduper statistics pass: task failed"),
            }
        }
    }

    /// Deletes a deduper: deactivates it (so no data call uses it while its
    /// bits go), drops it from this server's config cache, then has the
    /// store remove its bits and its config (see [`Store::delete_deduper`]).
    /// Returns the config as it was. Errors: `Invalid` names, `NotFound`
    /// (also for a second delete), `Misplaced` when its recorded data
    /// location is not where this replica's settings put it (as for data
    /// calls), `Active` when active and not `force`,
    /// `Storage` (then the deduper is left inactive and listed: run the
    /// delete again).
    ///
    /// [`Store::delete_deduper`]: crate::storage::Store::delete_deduper
    pub async fn delete_deduper(&self, client_id: &str, name: &str, force: bool) -> Result<Deduper, EngineError> {
        deduper::validate_name("client_id", client_id)?;
        deduper::validate_name("name", name)?;
        let d = self.load_deduper(client_id, name).await?;
        // Refused where data calls are: its bits live elsewhere than this
        // replica's settings say, and deleting here would orphan them.
        let key = (client_id.to_string(), name.to_string());
        let d = Arc::unwrap_or_clone(self.check_location(&key, Arc::new(d))?);
        if d.active && !force {
            return Err(EngineError::Active { name: name.to_string() });
        }
        let store = self.store.clone();
        let (c, n) = (client_id.to_string(), name.to_string());
        let deleted = Self::blocking(move || {
            if d.active {
                let off = |d: &mut Deduper| {
                    d.active = false;
                    d.update_time_ms = now_ms();
                };
                store.update_deduper(&c, &n, &off)?;
            }
            if store.delete_deduper(&d)? {
                Ok(d)
            } else {
                Err(EngineError::NotFound { client_id: c, name: n })
            }
        })
        .await;
        self.forget(client_id, name);
        if deleted.is_ok() {
            self.stats.drop_deduper(client_id, name);
        }
        deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::sizing::Geometry;
    use crate::deduper::Level;

    fn d(m_per_shard: u32, k: u32, n: Option<u64>) -> Deduper {
        let g = Geometry {
            hash_functions: k,
            shards: 1,
            bits_per_shard: m_per_shard,
        };
        Deduper {
            expected_insertions: n,
            ..Deduper::new("c", "d", g, 60, Level::Global, 0)
        }
    }

    #[test]
    fn estimates_follow_swamidass_baldi() {
        // m = 1000, k = 5, half the bits set: n* = -(1000/5) ln(0.5) = 138.63.
        let s = DeduperStats::from_bits(
            &d(1000, 5, Some(100)),
            BitStats {
                set_bits: 500,
                sampled_bits: 1000,
            },
            42,
        );
        assert!((s.estimated_entities - 138.629).abs() < 0.001, "{s:?}");
        assert!((s.estimated_fpr - 0.03125).abs() < 1e-12);
        assert!((s.load.unwrap() - 1.386_29).abs() < 1e-5);
        assert_eq!((s.relative_error, s.computed_at_ms), (0.0, 42));
        let empty = DeduperStats::from_bits(&d(1000, 5, None), BitStats::default(), 1);
        assert_eq!(
            (empty.estimated_entities, empty.estimated_fpr, empty.load),
            (0.0, 0.0, None)
        );
        let full = DeduperStats::from_bits(
            &d(10, 2, None),
            BitStats {
                set_bits: 10,
                sampled_bits: 10,
            },
            1,
        );
        assert!(full.estimated_entities.is_infinite() && full.estimated_fpr == 1.0);
    }

    #[test]
    fn sampled_estimates_state_their_error() {
        // f = 0.5 on S = 65,536 of m = 10^7: sigma_f = 0.00195 (x fpc 0.9967),
        // relative error = sigma_f / (0.5 ln 2) = 0.563%.
        let s = DeduperStats::from_bits(
            &d(10_000_000, 7, None),
            BitStats {
                set_bits: 32_768,
                sampled_bits: 65_536,
            },
            1,
        );
        assert!((s.relative_error - 0.005_62).abs() < 0.000_02, "{}", s.relative_error);
    }
}
