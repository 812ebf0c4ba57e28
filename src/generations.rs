//! Generations of a deduper: the physical filters one logical deduper reads
//! and writes while it is resized online, and the timing rules that make a
//! resize free of false negatives.
//!
//! A deduper without recorded generations is one filter, under its own name
//! and geometry (generation 0: today's layout, untouched). A resize records
//! a successor generation `N` (`N >= 1`), a filter of its own geometry under
//! the derived name `<name>~g<N>`, which no user name can take
//! ([`crate::deduper::validate_name`] allows only `[A-Za-z0-9_.-]`).
//!
//! Replicas cache configs ([`Timing::config_cache_ms`]) and their clocks
//! differ (up to [`Timing::clock_bound_ms`]), so the switch is two-phase:
//!
//! 1. From the moment a successor is recorded, reads consult every live
//!    generation (present if present in any).
//! 2. Writes move to the successor only at its `writes_from_ms` = recorded +
//!    [`Timing::grace_ms`]: by then every replica's cached config names it,
//!    so no replica still reads only the older generation.
//!
//! The older generation receives its last write by `writes_until_ms` =
//! successor's `writes_from_ms` + grace (a replica whose config is stale by
//! the cache TTL, on a clock off by the bound), and holds nothing live after
//! `retire_at_ms` = `writes_until_ms` + the longest expiry the deduper ever
//! had ([`Deduper::expiry_high_water_seconds`]). Then its data is deleted
//! and it is dropped from the config.
//!
//! At most one transition at a time: a resize while an older generation is
//! still live is refused ([`ResizeError::InTransition`]).

use serde::{Deserialize, Serialize};

use crate::contract::sizing::Geometry;
use crate::deduper::Deduper;

/// Separates a deduper's name from a generation number in the name of the
/// generation's filter (`<name>~g<N>`); never part of a user name.
pub const GENERATION_SEPARATOR: &str = "~g";

/// One generation of a deduper as its config records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// 0 for the deduper's original filter, then 1, 2, ...; never reused
    /// within a deduper's life.
    pub id: u32,
    pub geometry: Geometry,
    /// `n` it was sized for, when sized from `n` and `p`.
    pub expected_insertions: Option<u64>,
    /// `p` it was sized for, when sized from `n` and `p`.
    pub false_positive_rate: Option<f64>,
    /// When it was recorded, ms since the Unix epoch.
    pub created_ms: i64,
    /// From when writes go to it (when it is the newest), ms since the Unix epoch.
    pub writes_from_ms: i64,
    /// Set once a successor exists: the latest moment any replica may still
    /// write to it, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_until_ms: Option<i64>,
    /// Set once a successor exists: the longest expiry its bits may carry,
    /// in seconds (the deduper's high-water mark, raised with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_high_water_seconds: Option<u64>,
    /// Set once a successor exists: from when nothing in it can be live, ms
    /// since the Unix epoch (`writes_until_ms + expiry_high_water_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retire_at_ms: Option<i64>,
}

/// The timing of a transition, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a replica trusts a cached config.
    pub config_cache_ms: i64,
    /// How far replicas' clocks may differ.
    pub clock_bound_ms: i64,
    /// Slack for a request between its config lookup and its write.
    pub margin_ms: i64,
}

impl Timing {
    /// `config_cache_ms + clock_bound_ms + margin_ms`: how long after a
    /// config change every replica is known to act on it.
    pub fn grace_ms(&self) -> i64 {
        self.config_cache_ms + self.clock_bound_ms + self.margin_ms
    }
}

/// Why a resize was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResizeError {
    #[error(
        "deduper {name:?} is already resizing: generation {older} retires at {retire_at_ms} ms since the Unix epoch \
         (in {in_seconds} s); resize again after that"
    )]
    InTransition {
        name: String,
        older: u32,
        retire_at_ms: i64,
        in_seconds: i64,
    },
}

/// The name of generation `id`'s filter: the deduper's own name for 0,
/// else `<name>~g<id>`.
pub fn physical_name(name: &str, id: u32) -> String {
    if id == 0 {
        name.to_string()
    } else {
        format!("{name}{GENERATION_SEPARATOR}{id}")
    }
}

/// Whether `name` is a generation's filter name rather than a deduper's.
pub fn is_generation_name(name: &str) -> bool {
    name.contains(GENERATION_SEPARATOR)
}

/// The generations of `d`: those its config records, or its implicit
/// generation 0 when it records none. Sorted by id.
pub fn of(d: &Deduper) -> Vec<Generation> {
    if !d.generations.is_empty() {
        return d.generations.clone();
    }
    vec![Generation {
        id: 0,
        geometry: d.geometry,
        expected_insertions: d.expected_insertions,
        false_positive_rate: d.false_positive_rate,
        created_ms: d.create_time_ms,
        writes_from_ms: d.create_time_ms,
        writes_until_ms: None,
        expiry_high_water_seconds: None,
        retire_at_ms: None,
    }]
}

/// Generation `g` of `d` as a deduper of its own: its filter name and
/// geometry, the rest of `d`'s config, no generations. What the storage
/// calls of its bits take.
pub fn physical(d: &Deduper, g: &Generation) -> Deduper {
    Deduper {
        name: physical_name(&d.name, g.id),
        geometry: g.geometry,
        expected_insertions: g.expected_insertions,
        false_positive_rate: g.false_positive_rate,
        generations: Vec::new(),
        ..d.clone()
    }
}

/// Every filter `d` holds, live or not yet retired, as [`physical`] dedupers.
pub fn physical_filters(d: &Deduper) -> Vec<Deduper> {
    if d.generations.is_empty() {
        return vec![d.clone()];
    }
    d.generations.iter().map(|g| physical(d, g)).collect()
}

/// What a data call at `now_ms` reads and writes.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// Every generation that may hold a live bit, as physical dedupers
    /// (the writer included).
    pub readers: Vec<Deduper>,
    /// Index in `readers` of the one writes go to.
    pub writer: usize,
}

impl View {
    /// The view of `d` at `now_ms`: readers are the generations not past
    /// their `retire_at_ms`; the writer the newest whose `writes_from_ms`
    /// has come.
    pub fn at(d: &Deduper, now_ms: i64) -> View {
        let gens = of(d);
        let live: Vec<&Generation> = gens
            .iter()
            .filter(|g| g.retire_at_ms.is_none_or(|r| now_ms < r))
            .collect();
        let writer = live.iter().rposition(|g| g.writes_from_ms <= now_ms).unwrap_or(0);
        View {
            readers: live.iter().map(|g| physical(d, g)).collect(),
            writer,
        }
    }

    /// The generations read but not written, as indices in `readers`.
    pub fn others(&self) -> impl Iterator<Item = &Deduper> {
        self.readers
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != self.writer)
            .map(|(_, d)| d)
    }
}

/// Records a successor generation of `d` sized `geometry` (from `n`, `p`
/// when given) at `now_ms`, and makes `d`'s top-level geometry and sizing
/// the successor's. Errors: [`ResizeError::InTransition`] while an older
/// generation is still recorded.
pub fn start_successor(
    d: &mut Deduper,
    geometry: Geometry,
    n: Option<u64>,
    p: Option<f64>,
    now_ms: i64,
    timing: Timing,
) -> Result<(), ResizeError> {
    let mut gens = of(d);
    if gens.len() > 1 {
        let older = &gens[0];
        let retire_at_ms = older.retire_at_ms.unwrap_or(i64::MAX);
        return Err(ResizeError::InTransition {
            name: d.name.clone(),
            older: older.id,
            retire_at_ms,
            in_seconds: (retire_at_ms.saturating_sub(now_ms).max(0) + 999) / 1000,
        });
    }
    let writes_from_ms = now_ms + timing.grace_ms();
    let id = gens.last().map_or(1, |g| g.id + 1);
    if let Some(current) = gens.last_mut() {
        current.writes_until_ms = Some(writes_from_ms + timing.grace_ms());
    }
    gens.push(Generation {
        id,
        geometry,
        expected_insertions: n,
        false_positive_rate: p,
        created_ms: now_ms,
        writes_from_ms,
        writes_until_ms: None,
        expiry_high_water_seconds: None,
        retire_at_ms: None,
    });
    d.generations = gens;
    d.geometry = geometry;
    d.expected_insertions = n;
    d.false_positive_rate = p;
    seal(d);
    Ok(())
}

/// Recomputes the retirement of every older generation of `d` from its
/// `writes_until_ms` and `d`'s current expiry high-water mark (call after
/// any expiry change): a raised expiry pushes retirement later, never earlier.
pub fn seal(d: &mut Deduper) {
    let high = d.expiry_high_water_seconds();
    for g in &mut d.generations {
        let Some(until) = g.writes_until_ms else { continue };
        let h = g.expiry_high_water_seconds.unwrap_or(0).max(high);
        g.expiry_high_water_seconds = Some(h);
        let at = until.saturating_add(i64::try_from(h.saturating_mul(1000)).unwrap_or(i64::MAX));
        g.retire_at_ms = Some(g.retire_at_ms.map_or(at, |r| r.max(at)));
    }
}

/// The generations of `d` due for retirement at `now_ms`.
pub fn due(d: &Deduper, now_ms: i64) -> Vec<Generation> {
    d.generations
        .iter()
        .filter(|g| g.retire_at_ms.is_some_and(|r| r <= now_ms))
        .cloned()
        .collect()
}

/// Drops the generations of `d` due at `now_ms` from its config (the
/// newest is never due). Returns whether any was dropped.
pub fn retire(d: &mut Deduper, now_ms: i64) -> bool {
    let before = d.generations.len();
    d.generations.retain(|g| g.retire_at_ms.is_none_or(|r| r > now_ms));
    d.generations.len() != before
}

/// The estimated false-positive rate of reads over several generations
/// with rates `rates`: the chance a never-added entity is present in any,
/// `1 - prod(1 - r)` (the generations hash independently: other geometries).
pub fn union_fpr(rates: impl IntoIterator<Item = f64>) -> f64 {
    1.0 - rates.into_iter().map(|r| 1.0 - r.clamp(0.0, 1.0)).product::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deduper::Level;

    const T: Timing = Timing {
        config_cache_ms: 2000,
        clock_bound_ms: 300,
        margin_ms: 700,
    };

    fn geom(bits: u32) -> Geometry {
        Geometry {
            hash_functions: 7,
            shards: 1,
            bits_per_shard: bits,
        }
    }

    fn deduper() -> Deduper {
        Deduper {
            expected_insertions: Some(100),
            false_positive_rate: Some(0.01),
            ..Deduper::new("c", "d", geom(1000), 60, Level::Global, 1_000)
        }
    }

    #[test]
    fn names_of_generations_cannot_be_user_names() {
        assert_eq!(physical_name("orders", 0), "orders");
        assert_eq!(physical_name("orders", 3), "orders~g3");
        assert!(crate::deduper::validate_name("name", &physical_name("orders", 1)).is_err());
        assert!(is_generation_name("orders~g1") && !is_generation_name("orders"));
    }

    #[test]
    fn a_successor_is_read_at_once_and_written_after_the_grace() {
        let mut d = deduper();
        start_successor(&mut d, geom(4000), Some(400), Some(0.01), 10_000, T).unwrap();
        assert_eq!(d.geometry, geom(4000));
        assert_eq!(d.expected_insertions, Some(400));
        let g = &d.generations;
        assert_eq!((g[0].id, g[1].id), (0, 1));
        assert_eq!(g[1].writes_from_ms, 13_000);
        assert_eq!(g[0].writes_until_ms, Some(16_000));
        // 60 s of expiry after the last write to it.
        assert_eq!(g[0].retire_at_ms, Some(76_000));
        let names = |v: &View| v.readers.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        let before = View::at(&d, 12_999);
        assert_eq!((names(&before), before.writer), (vec!["d".into(), "d~g1".into()], 0));
        assert_eq!(before.readers[0].geometry, geom(1000));
        assert_eq!(before.readers[1].geometry, geom(4000));
        let after = View::at(&d, 13_000);
        assert_eq!(after.writer, 1);
        assert_eq!(after.others().map(|d| d.name.clone()).collect::<Vec<_>>(), ["d"]);
        let retired = View::at(&d, 76_000);
        assert_eq!((names(&retired), retired.writer), (vec!["d~g1".into()], 0));
    }

    #[test]
    fn one_transition_at_a_time_and_retirement_allows_the_next() {
        let mut d = deduper();
        start_successor(&mut d, geom(4000), Some(400), Some(0.01), 10_000, T).unwrap();
        let refused = start_successor(&mut d.clone(), geom(100), Some(10), Some(0.01), 20_000, T);
        assert_eq!(
            refused,
            Err(ResizeError::InTransition {
                name: "d".into(),
                older: 0,
                retire_at_ms: 76_000,
                in_seconds: 56
            })
        );
        assert!(due(&d, 75_999).is_empty());
        assert_eq!(due(&d, 76_000).len(), 1);
        assert!(!retire(&mut d, 75_999));
        assert!(retire(&mut d, 76_000));
        assert_eq!(d.generations.len(), 1);
        assert_eq!(physical_filters(&d)[0].name, "d~g1");
        // Shrinking: generation 2, smaller; ids are never reused.
        start_successor(&mut d, geom(100), Some(10), Some(0.01), 80_000, T).unwrap();
        assert_eq!(d.generations.iter().map(|g| g.id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(physical_filters(&d)[1].name, "d~g2");
    }

    #[test]
    fn a_raised_expiry_pushes_retirement_later_and_a_lowered_one_does_not_pull_it() {
        let mut d = deduper();
        start_successor(&mut d, geom(4000), Some(400), Some(0.01), 10_000, T).unwrap();
        d.set_expiry(120);
        seal(&mut d);
        assert_eq!(d.generations[0].retire_at_ms, Some(136_000));
        d.set_expiry(1);
        seal(&mut d);
        assert_eq!(d.generations[0].retire_at_ms, Some(136_000));
    }

    #[test]
    fn without_generations_the_deduper_is_its_own_generation_0() {
        let d = deduper();
        assert_eq!(physical_filters(&d), vec![d.clone()]);
        let g = of(&d);
        assert_eq!((g.len(), g[0].id, g[0].geometry), (1, 0, d.geometry));
        // The config of a deduper without generations is stored as before.
        assert!(!serde_json::to_string(&d).unwrap().contains("generations"));
    }

    #[test]
    fn union_rate_of_two_generations() {
        assert!((union_fpr([0.01, 0.01]) - 0.0199).abs() < 1e-12);
        assert!((union_fpr([0.02]) - 0.02).abs() < 1e-12);
        assert_eq!(union_fpr([]), 0.0);
    }
}
