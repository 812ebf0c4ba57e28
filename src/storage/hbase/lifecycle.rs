//! Deleting a deduper and sampling its bits for the live statistics.
//!
//! # Delete
//! 1. (The engine deactivated the deduper first.)
//! 2. Every shard row `0..shards` of the deduper, computed from its geometry
//!    with [`layout::data_row_key`] (no scan), in the data table its config
//!    records (`loc`; the current setting only for configs without one),
//!    gets `deleteAllRowTs` at `T` = [`delete_bound`]`(d, now)` =
//!    `now + high-water expiry * 1000 + DELETE_SLACK_MS`. Bit cells carry
//!    their expiry time as their timestamp, which can lie up to the expiry
//!    in force at their write in the future, so a delete "as of now" would
//!    miss them, and so would one bounded by the *current* expiry after it
//!    was lowered; the high-water mark (`C:maxexp`, see `codec.rs`) is the
//!    longest expiry the deduper ever had, so `T` covers every cell any
//!    write ever made. A config without the mark (stored by an older
//!    version) takes the worst case, [`crate::deduper::MAX_EXPIRY_SECONDS`]:
//!    every bit is deleted, and the name stays taken for 100 years (below).
//!    A resized deduper: the shard rows of every generation it records, at
//!    `T` = [`tombstone_bound`] (later still; see "Generations" below).
//! 3. The config row: a tombstone cell `C:gone` = `T` is put above the
//!    row's newest cell, then the row is deleted below it.
//!
//! Interrupted after any step, the config is still there (inactive) and a
//! new delete redoes the idempotent row deletes; after step 3 it is gone.
//!
//! HBase keeps a delete marker until a major compaction, and the marker
//! hides every later put with a timestamp up to `T` - which would hide the
//! bits of a namesake deduper created before `T`. So `CreateDeduper` of the
//! same name is refused (`FAILED_PRECONDITION`, saying when it will be
//! allowed) until the tombstone's `T` has passed.
//!
//! # Generations (a deduper resized online, `crate::generations`)
//! Generation N's bits are the shard rows of the physical filter
//! `<name>~g<N>` (generation 0: `<name>`) in the same data table, family
//! and qualifiers: [`layout::data_row_key`]`(shard, client, "<name>~g<N>")`
//! for `shard` in `0..` that generation's own `shards`. Nothing allocates
//! them: the rows appear with the first write.
//!
//! Retirement ([`HbaseStore::retire_filters`], from `update_deduper` when a
//! change drops generations): every shard row of each dropped generation
//! gets `deleteAllRowTs` at `T_g` = its `retire_at_ms` + [`DELETE_SLACK_MS`]
//! (above every cell it holds: its last write came by `writes_until_ms`,
//! with at most the expiry high-water mark, on a clock within the slack),
//! and only then is the config stored without it. A crash in between
//! leaves the generation in the config, already empty; nothing in it was
//! live, and the next retirement pass deletes the rows again (idempotent)
//! and drops it. A deduper delete removes every generation's rows.
//!
//! Delete markers never hide a later generation's bits:
//! - within one deduper's life, no two generations share a physical name
//!   (ids are never reused), so a retired generation's markers are on rows
//!   no later generation writes;
//! - across lives (a deduper deleted and re-created, whose generations
//!   count from 1 again), the re-create waits for the tombstone's "until",
//!   which for a resized deduper is [`tombstone_bound`]: at least the
//!   ordinary bound plus another [`DELETE_SLACK_MS`], and at least every
//!   generation still recorded `retire_at_ms + 2 * DELETE_SLACK_MS`. A
//!   generation retired earlier has `T_g <= now + DELETE_SLACK_MS` on the
//!   retiring replica's clock when it read the config, since retirement
//!   requires `retire_at_ms <=` the clock taken just before that read; and
//!   that read saw the deduper active (retirement skips inactive dedupers),
//!   so it came before the deactivation that precedes every delete, hence
//!   before the delete's own clock reading. With replica clocks within
//!   [`DELETE_SLACK_MS`] (the premise of that slack), `T_g` is then below the
//!   tombstone's "until", and the re-created namesake's cells (stamped after
//!   it, with their expiry) are above every marker of the earlier life.
//!
//! # Statistics
//! [`sample`]: the bits at a uniform random sample of positions (without
//! replacement, from a seed) read through the ordinary bit read path
//! (`getRowsWithColumns`, split and parallel as any read), counted set or
//! not. The whole filter when it is not larger than the sample.

use std::collections::HashSet;

use hbase_thrift::hbase::THbaseSyncClient;
use rand::{Rng, SeedableRng};

use super::codec::{self, Attributes};
use super::pool::Retry;
use super::{HbaseStore, OnError, in_parallel};
use crate::clock::now_ms;
use crate::contract::layout;
use crate::deduper::Deduper;
use crate::generations::{self, Generation};
use crate::storage::{BitAddr, BitStats, StorageError};

/// Added to the delete time of the bit rows for clock differences between
/// the replicas that wrote the bits and this one, in ms.
pub const DELETE_SLACK_MS: i64 = 60_000;

/// The delete time of `d`'s bit rows at `now_ms` (ms since the Unix epoch):
/// `now_ms + expiry_high_water_seconds * 1000 + DELETE_SLACK_MS`, above the
/// timestamp of every bit cell any write to `d` made (see the module docs).
/// It is also the tombstone's "until": the one bound the delete and the
/// re-create guard share.
pub fn delete_bound(d: &Deduper, now_ms: i64) -> i64 {
    let expiry_ms = i64::try_from(d.expiry_high_water_seconds().saturating_mul(1000)).unwrap_or(i64::MAX / 2);
    now_ms.saturating_add(expiry_ms).saturating_add(DELETE_SLACK_MS)
}

/// The delete time of a retired generation's rows: its `retire_at_ms` +
/// [`DELETE_SLACK_MS`] (see the module docs); `None` for a generation
/// without one (the newest, never retired).
pub fn retire_bound(g: &Generation) -> Option<i64> {
    g.retire_at_ms.map(|r| r.saturating_add(DELETE_SLACK_MS))
}

/// The delete time and tombstone "until" of deleting `d` at `now_ms`:
/// [`delete_bound`]; for a resized deduper (one with generations) the
/// larger of that and every recorded generation's [`retire_bound`], plus
/// [`DELETE_SLACK_MS`] more, so that no marker of a generation retired
/// before the delete outlasts the tombstone (see the module docs).
pub fn tombstone_bound(d: &Deduper, now_ms: i64) -> i64 {
    let bound = delete_bound(d, now_ms);
    if d.generations.is_empty() {
        return bound;
    }
    let highest = d.generations.iter().filter_map(retire_bound).fold(bound, i64::max);
    highest.saturating_add(DELETE_SLACK_MS)
}

/// Whether [`HbaseStore::retire_filters`] deleted the rows or left it for later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retirement {
    /// The dropped generations' rows are deleted: store the config.
    Deleted,
    /// Not now (the deduper is inactive, or a generation's `retire_at_ms`
    /// is not yet past on the clock read before the config): store nothing.
    NotYet,
}

/// The tombstone column of a deleted deduper's config row: 8-byte BE ms
/// until which its delete markers hide new bits.
const TOMBSTONE: &str = "gone";

fn tombstone_col() -> Vec<u8> {
    codec::column(layout::META_FAMILY, TOMBSTONE)
}

impl HbaseStore {
    /// See the module docs. `Ok(false)` when no config was there.
    pub(super) fn delete(&self, d: &Deduper) -> Result<bool, StorageError> {
        let Some(stored) = self.get_config_row(&d.client_id, &d.name)? else {
            return Ok(false);
        };
        let (stored, newest) = stored;
        let now = now_ms();
        let until = tombstone_bound(&stored, now);
        self.tables.ensure_data(&self.pool)?;
        let table = self.data_table(&stored);
        // Where its bits are, never where this replica would put them: the
        // engine refuses such a delete first (`Misplaced`); this holds for
        // any other caller. A config without a location is taken to match.
        if let Some(recorded) = stored.data_location.as_ref().filter(|r| **r != table) {
            return Err(StorageError::Precondition(format!(
                "deduper {:?} keeps its bits in {recorded:?}, but the current settings put them in {table:?} \
                 (storage.table / farm changed?); refusing to delete it from the wrong table: restore the setting",
                stored.name
            )));
        }
        let rows: Vec<(Vec<u8>, i64)> = generations::physical_filters(&stored)
            .iter()
            .flat_map(|f| shard_rows(f).into_iter().map(|row| (row, until)))
            .collect();
        self.delete_rows(&table, &rows)?;
        let meta = layout::meta_table(&stored.client_id);
        let row = layout::meta_row_key(&stored.client_id, &stored.name);
        let below = newest.max(now);
        self.pool
            .call(Retry::Idempotent, |c| {
                c.mutate_row_ts(
                    meta.clone().into_bytes(),
                    row.clone(),
                    vec![codec::put(tombstone_col(), until.to_be_bytes().to_vec())],
                    below + 1,
                    Attributes::new(),
                )
            })
            .map_err(|e| e.into_storage(&format!("mutateRowTs {meta}")))?;
        self.pool
            .call(Retry::Idempotent, |c| {
                c.delete_all_row_ts(meta.clone().into_bytes(), row.clone(), below, Attributes::new())
            })
            .map_err(|e| e.into_storage(&format!("deleteAllRowTs {meta}")))?;
        Ok(true)
    }

    /// `deleteAllRowTs` of every `(row, timestamp)` of `table`, in parallel
    /// (all attempted even when one fails; idempotent, retried).
    fn delete_rows(&self, table: &str, rows: &[(Vec<u8>, i64)]) -> Result<(), StorageError> {
        let what = format!("deleteAllRowTs {table}");
        in_parallel(rows, self.parallel_calls(), OnError::Continue, |(row, until)| {
            self.tables.on_table(&self.pool, table, &what, || {
                self.pool.call(Retry::Idempotent, |c| {
                    c.delete_all_row_ts(table.as_bytes().to_vec(), row.clone(), *until, Attributes::new())
                })
            })
        })?;
        Ok(())
    }

    /// Deletes the rows of the generations `change` dropped from `old`
    /// (see the module docs), before the config without them is stored:
    /// `NotYet` while `old` is inactive or a dropped generation's
    /// `retire_at_ms` is after `read_at_ms` (this replica's clock just
    /// before it read `old`). Errors: `Unavailable` (some rows deleted: the
    /// next pass deletes them again), `Precondition` when the bits are in
    /// another table than this replica's settings say, or a change drops a
    /// generation that never had a retirement time.
    pub(super) fn retire_filters(
        &self,
        old: &Deduper,
        changed: &Deduper,
        read_at_ms: i64,
    ) -> Result<Retirement, StorageError> {
        let kept = generations::of(changed);
        let dropped: Vec<Generation> = generations::of(old)
            .into_iter()
            .filter(|g| !kept.iter().any(|k| k.id == g.id))
            .collect();
        if dropped.is_empty() {
            return Ok(Retirement::Deleted);
        }
        let mut rows = Vec::new();
        for g in &dropped {
            let Some(until) = retire_bound(g) else {
                return Err(StorageError::Precondition(format!(
                    "deduper {:?}: refusing to drop generation {}, which has no retirement time (the newest)",
                    old.name, g.id
                )));
            };
            if !old.active || g.retire_at_ms.is_some_and(|r| r > read_at_ms) {
                return Ok(Retirement::NotYet);
            }
            let filter = generations::physical(old, g);
            rows.extend(shard_rows(&filter).into_iter().map(|row| (row, until)));
        }
        let table = self.data_table(old);
        if let Some(recorded) = old.data_location.as_ref().filter(|r| **r != table) {
            return Err(StorageError::Precondition(format!(
                "deduper {:?} keeps its bits in {recorded:?}, but the current settings put them in {table:?} \
                 (storage.table / farm changed?); refusing to retire its generations there: restore the setting",
                old.name
            )));
        }
        self.tables.ensure_data(&self.pool)?;
        self.delete_rows(&table, &rows)?;
        Ok(Retirement::Deleted)
    }

    /// The config and the newest cell timestamp of its row, `None` when absent.
    fn get_config_row(&self, client_id: &str, name: &str) -> Result<Option<(Deduper, i64)>, StorageError> {
        let Some(columns) = super::meta::read_row(&self.pool, &self.tables, client_id, name)? else {
            return Ok(None);
        };
        let newest = columns.values().filter_map(|c| c.timestamp).max().unwrap_or(0);
        Ok(codec::decode_deduper(client_id, &columns)?.map(|d| (d, newest)))
    }

    /// `FAILED_PRECONDITION` while a deleted namesake's delete markers would
    /// hide the new deduper's bits (see the module docs).
    pub(super) fn check_tombstone(&self, d: &Deduper, now_ms: i64) -> Result<(), StorageError> {
        let meta = layout::meta_table(&d.client_id);
        let row = layout::meta_row_key(&d.client_id, &d.name);
        let rows = match self.pool.call(Retry::Idempotent, |c| {
            c.get_row_with_columns(
                meta.clone().into_bytes(),
                row.clone(),
                vec![tombstone_col()],
                Attributes::new(),
            )
        }) {
            Ok(rows) => rows,
            Err(e) if e.is_table_not_found(&meta) => return Ok(()),
            Err(e) => return Err(e.into_storage(&format!("getRowWithColumns {meta}"))),
        };
        let until = rows
            .into_iter()
            .next()
            .and_then(|r| r.columns)
            .and_then(|mut cols| cols.remove(&tombstone_col()))
            .and_then(|c| c.value)
            .and_then(|v| layout::decode_expire_ms(&v));
        match until {
            Some(until) if until >= now_ms => Err(StorageError::Precondition(format!(
                "deduper {:?} of client {:?} was deleted recently; HBase's delete markers hide bits written under \
                 this name until {} ms since the epoch ({} s from now: the longest expiry_seconds it ever had, \
                 plus {} s or more); create it then, or use another name now",
                d.name,
                d.client_id,
                until,
                (until - now_ms).div_euclid(1000) + 1,
                DELETE_SLACK_MS / 1000
            ))),
            _ => Ok(()),
        }
    }

    /// Counts the set bits at `sample_bits` uniform random positions drawn
    /// without replacement from `seed` (every bit when m is not larger).
    pub(super) fn sample(
        &self,
        d: &Deduper,
        now_ms: i64,
        sample_bits: u64,
        seed: u64,
    ) -> Result<BitStats, StorageError> {
        let addrs = sample_positions(d, sample_bits, seed);
        let cells = self.read(d, &addrs)?;
        Ok(BitStats {
            set_bits: cells.iter().filter(|c| c.is_set(now_ms)).count() as u64,
            sampled_bits: addrs.len() as u64,
        })
    }
}

/// The row key of every shard row of the physical filter `f` (a deduper,
/// or one generation of one as [`generations::physical`] gives it).
pub fn shard_rows(f: &Deduper) -> Vec<Vec<u8>> {
    (0..f.geometry.shards)
        .map(|shard| layout::data_row_key(shard, &f.client_id, &f.name))
        .collect()
}

/// `min(sample_bits, m)` distinct bit positions of `d`, uniform (Floyd's
/// algorithm, so O(sample) whatever m), sorted; every bit when m is not
/// larger than the sample.
pub fn sample_positions(d: &Deduper, sample_bits: u64, seed: u64) -> Vec<BitAddr> {
    let m = d.geometry.total_bits();
    let bps = u64::from(d.geometry.bits_per_shard.max(1));
    let at = |i: u64| BitAddr {
        shard: (i / bps) as u32,
        bit: (i % bps) as u32,
    };
    if m <= sample_bits {
        return (0..m).map(at).collect();
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut chosen = HashSet::with_capacity(sample_bits as usize);
    for j in (m - sample_bits)..m {
        let t = rng.random_range(0..=j);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    let mut out: Vec<BitAddr> = chosen.into_iter().map(at).collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::sizing::Geometry;
    use crate::deduper::Level;

    fn deduper(shards: u32, bps: u32) -> Deduper {
        let g = Geometry {
            hash_functions: 3,
            shards,
            bits_per_shard: bps,
        };
        Deduper::new("c", "d", g, 60, Level::Global, 0)
    }

    #[test]
    fn the_delete_bound_reaches_the_longest_expiry_ever_set() {
        let mut d = deduper(1, 10);
        d.set_expiry(3600);
        d.set_expiry(1);
        assert_eq!(delete_bound(&d, 1_000), 1_000 + 3_600_000 + DELETE_SLACK_MS);
        // A config stored before the mark: the longest expiry Solus accepts.
        d.max_expiry_seconds = None;
        let worst = crate::deduper::MAX_EXPIRY_SECONDS as i64 * 1000;
        assert_eq!(delete_bound(&d, 1_000), 1_000 + worst + DELETE_SLACK_MS);
    }

    #[test]
    fn a_resized_deduper_s_tombstone_outlasts_every_generation_s_delete_markers() {
        let mut d = deduper(1, 10);
        d.set_expiry(60);
        assert_eq!(
            tombstone_bound(&d, 1_000),
            delete_bound(&d, 1_000),
            "never resized: as before"
        );
        let timing = crate::generations::Timing {
            config_cache_ms: 2000,
            clock_bound_ms: 0,
            margin_ms: 1000,
        };
        let g = d.geometry;
        crate::generations::start_successor(&mut d, g, Some(10), Some(0.01), 1_000, timing).unwrap();
        let r0 = d.generations[0].retire_at_ms.unwrap();
        assert_eq!(r0, 1_000 + 6_000 + 60_000);
        assert_eq!(retire_bound(&d.generations[0]), Some(r0 + DELETE_SLACK_MS));
        assert_eq!(retire_bound(&d.generations[1]), None, "the newest never retires");
        // Deleted mid-transition: above generation 0's markers by a slack.
        assert_eq!(tombstone_bound(&d, 2_000), r0 + 2 * DELETE_SLACK_MS);
        // Deleted after generation 0 retired at `t >= r0` (its markers at
        // most `t + slack` on the retiring clock): the tombstone reaches
        // `t + expiry + 2 slack`, a whole expiry and slack above them.
        d.generations.remove(0);
        let t = r0 + 5_000;
        assert_eq!(tombstone_bound(&d, t), t + 60_000 + 2 * DELETE_SLACK_MS);
        assert!(tombstone_bound(&d, t) > r0 + DELETE_SLACK_MS + 60_000);
    }

    #[test]
    fn samples_are_distinct_sorted_in_range_and_repeatable() {
        let d = deduper(4, 1000);
        let s = sample_positions(&d, 1000, 7);
        assert_eq!(s.len(), 1000);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.iter().all(|a| a.shard < 4 && a.bit < 1000));
        assert_eq!(s, sample_positions(&d, 1000, 7));
        assert_ne!(s, sample_positions(&d, 1000, 8));
        // Uniform: each of the 4 shards gets about a quarter (250 +/- 4 sigma = 55).
        for shard in 0..4 {
            let n = s.iter().filter(|a| a.shard == shard).count();
            assert!((195..=305).contains(&n), "shard {shard}: {n}");
        }
        assert_eq!(sample_positions(&d, 5000, 1).len(), 4000, "all bits when m <= sample");
    }
}
