//! One table's data: rows -> families -> qualifiers -> versions, plus the
//! delete markers HBase keeps until a major compaction.
//!
//! Writes behave as if the memstore were flushed after every call: versions
//! beyond the family's `maxVersions` and cells already expired are dropped at
//! once, and cells covered by a delete marker are removed.
//!
//! Every change goes through `put`, `delete_column`, `delete_family` or
//! `major_compact`, which note it in the table's journal (a no-op unless the
//! emulator persists to a data directory; see `wal.rs`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Bound;

use crate::column::Selection;
use crate::error::{HError, HResult};
use crate::schema::FamilySchema;
use crate::wal::{Journal, Record, StoredVersion};

/// HBase's `LATEST_TIMESTAMP`: "stamp with the server's current time".
pub(crate) const LATEST: i64 = i64::MAX;

/// A read's time range, `[min, max)`; `[0, i64::MAX)` is "all time".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimeRange {
    min: i64,
    max: i64,
}

impl TimeRange {
    pub const ALL: TimeRange = TimeRange { min: 0, max: LATEST };

    /// `[0, ts)`, what every `...Ts` read and `TScan.timestamp` use.
    pub fn before(ts: i64) -> HResult<Self> {
        if ts < 0 {
            return Err(HError::internal(format!(
                "java.lang.IllegalArgumentException: Timestamp cannot be negative. \
                 minStamp:0, maxStamp:{ts}"
            )));
        }
        Ok(TimeRange { min: 0, max: ts })
    }

    pub fn contains(&self, ts: i64) -> bool {
        ts >= self.min && (ts < self.max || self.max == LATEST)
    }
}

#[derive(Debug, Clone)]
struct Version {
    ts: i64,
    value: Vec<u8>,
    /// Per-cell TTL from the `_ttl` mutation attribute, in milliseconds.
    ttl_ms: Option<i64>,
}

impl Version {
    /// HBase's `isCellTTLExpired` plus the family TTL check.
    fn expired(&self, family_ttl_ms: Option<i64>, now: i64) -> bool {
        let cell = self.ttl_ms.is_some_and(|ttl| self.ts.saturating_add(ttl) < now);
        let family = family_ttl_ms.is_some_and(|ttl| self.ts < now.saturating_sub(ttl));
        cell || family
    }
}

/// A cell as a read returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell<'a> {
    pub family: &'a [u8],
    pub qualifier: &'a [u8],
    pub ts: i64,
    pub value: Cow<'a, [u8]>,
}

/// The parameters of one read, shared by every column it visits.
struct Read {
    range: TimeRange,
    max_versions: usize,
    now: i64,
}

impl Read {
    fn push_visible<'a>(
        &self,
        out: &mut Vec<Cell<'a>>,
        family: &'a [u8],
        qualifier: &'a [u8],
        column: &'a ColumnCells,
        family_ttl: Option<i64>,
    ) {
        let visible = column
            .versions
            .iter()
            .filter(|v| self.range.contains(v.ts) && !v.expired(family_ttl, self.now))
            .take(self.max_versions);
        out.extend(visible.map(|v| Cell {
            family,
            qualifier,
            ts: v.ts,
            value: Cow::Borrowed(&v.value),
        }));
    }
}

#[derive(Debug, Default)]
struct ColumnCells {
    /// A `DeleteColumn` marker: hides every version with `ts <= marker`.
    deleted_upto: Option<i64>,
    /// Newest first; at most one version per timestamp.
    versions: Vec<Version>,
}

#[derive(Debug, Default)]
struct FamilyCells {
    /// A `DeleteFamily` marker.
    deleted_upto: Option<i64>,
    columns: BTreeMap<Vec<u8>, ColumnCells>,
}

type Row = BTreeMap<Vec<u8>, FamilyCells>;

#[derive(Debug)]
pub(crate) struct Table {
    pub name: Vec<u8>,
    pub families: BTreeMap<Vec<u8>, FamilySchema>,
    pub enabled: bool,
    pub created_ms: i64,
    rows: BTreeMap<Vec<u8>, Row>,
    /// Where changes are noted for the write-ahead log.
    pub journal: Journal,
}

impl Table {
    pub fn new(name: Vec<u8>, families: BTreeMap<Vec<u8>, FamilySchema>, now: i64) -> Self {
        Self {
            name,
            families,
            enabled: true,
            created_ms: now,
            rows: BTreeMap::new(),
            journal: Journal::default(),
        }
    }

    /// HBase's region-side `checkFamily`: unknown families fail the operation.
    pub fn check_families<'a>(&self, families: impl IntoIterator<Item = &'a [u8]>) -> HResult<()> {
        match families.into_iter().find(|f| !self.families.contains_key(*f)) {
            Some(missing) => Err(HError::no_such_family(&self.name, missing)),
            None => Ok(()),
        }
    }

    fn family_ttl(&self, family: &[u8]) -> Option<i64> {
        self.families.get(family).and_then(FamilySchema::ttl_ms)
    }

    /// Stores one version. `ts` must already be resolved (not `LATEST`) and
    /// the family must exist.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        row: &[u8],
        family: &[u8],
        qualifier: &[u8],
        ts: i64,
        value: Vec<u8>,
        ttl_ms: Option<i64>,
        now: i64,
    ) {
        let max_versions = self.families.get(family).map_or(1, |f| f.max_versions);
        let family_ttl = self.family_ttl(family);
        let cells = self
            .rows
            .entry(row.to_vec())
            .or_default()
            .entry(family.to_vec())
            .or_default();
        let masked = |marker: Option<i64>| marker.is_some_and(|m| ts <= m);
        let column_marker = cells.columns.get(qualifier).and_then(|c| c.deleted_upto);
        // A delete marker masks later puts with older timestamps until a major
        // compaction ("deletes mask puts" in the HBase book).
        if masked(cells.deleted_upto) || masked(column_marker) {
            return;
        }
        self.journal.record(|| Record::Put {
            table: self.name.clone(),
            row: row.to_vec(),
            family: family.to_vec(),
            qualifier: qualifier.to_vec(),
            ts,
            value: value.clone(),
            ttl_ms,
            now,
        });
        let column = cells.columns.entry(qualifier.to_vec()).or_default();
        column.versions.retain(|v| !v.expired(family_ttl, now));
        let version = Version { ts, value, ttl_ms };
        // Same timestamp: the later write replaces the earlier one.
        match column.versions.binary_search_by(|v| ts.cmp(&v.ts)) {
            Ok(i) => column.versions[i] = version,
            Err(i) => column.versions.insert(i, version),
        }
        column.versions.truncate(max_versions);
    }

    /// `Delete.addColumns(family, qualifier, upto)`: all versions `<= upto`.
    pub fn delete_column(&mut self, row: &[u8], family: &[u8], qualifier: &[u8], upto: i64) {
        self.journal.record(|| Record::DeleteColumn {
            table: self.name.clone(),
            row: row.to_vec(),
            family: family.to_vec(),
            qualifier: qualifier.to_vec(),
            upto,
        });
        let cells = self.family_cells(row, family);
        let column = cells.columns.entry(qualifier.to_vec()).or_default();
        column.deleted_upto = column.deleted_upto.max(Some(upto));
        column.versions.retain(|v| v.ts > upto);
    }

    /// `Delete.addFamily(family, upto)`.
    pub fn delete_family(&mut self, row: &[u8], family: &[u8], upto: i64) {
        self.journal.record(|| Record::DeleteFamily {
            table: self.name.clone(),
            row: row.to_vec(),
            family: family.to_vec(),
            upto,
        });
        let cells = self.family_cells(row, family);
        cells.deleted_upto = cells.deleted_upto.max(Some(upto));
        for column in cells.columns.values_mut() {
            column.versions.retain(|v| v.ts > upto);
        }
    }

    /// `new Delete(row, upto)`: the region adds a family delete for every family.
    pub fn delete_row(&mut self, row: &[u8], upto: i64) {
        let families: Vec<Vec<u8>> = self.families.keys().cloned().collect();
        for family in families {
            self.delete_family(row, &family, upto);
        }
    }

    fn family_cells(&mut self, row: &[u8], family: &[u8]) -> &mut FamilyCells {
        self.rows
            .entry(row.to_vec())
            .or_default()
            .entry(family.to_vec())
            .or_default()
    }

    /// The visible cells of one row, sorted by family and qualifier, at most
    /// `max_versions` per column, newest first.
    pub fn row_cells(
        &self,
        row: &[u8],
        selection: &Selection,
        range: TimeRange,
        max_versions: usize,
        now: i64,
    ) -> Vec<Cell<'_>> {
        let mut out = Vec::new();
        let Some(families) = self.rows.get(row) else {
            return out;
        };
        let read = Read {
            range,
            max_versions,
            now,
        };
        for (family, cells) in families {
            let ttl = self.family_ttl(family);
            let mut push = |q, c| read.push_visible(&mut out, family, q, c, ttl);
            match selection {
                Selection::All => cells.columns.iter().for_each(|(q, c)| push(q, c)),
                Selection::Families(map) => match map.get(family) {
                    None => {}
                    Some(None) => cells.columns.iter().for_each(|(q, c)| push(q, c)),
                    // Look wanted qualifiers up directly: rows can be wide.
                    Some(Some(wanted)) => wanted
                        .iter()
                        .filter_map(|q| cells.columns.get_key_value(q))
                        .for_each(|(q, c)| push(q, c)),
                },
            }
        }
        out
    }

    /// Visible versions of one column, newest first.
    pub fn column_cells(
        &self,
        row: &[u8],
        family: &[u8],
        qualifier: &[u8],
        range: TimeRange,
        now: i64,
    ) -> Vec<Cell<'_>> {
        let mut out = Vec::new();
        let found = self
            .rows
            .get(row)
            .and_then(|families| families.get_key_value(family))
            .and_then(|(f, cells)| Some((f, cells.columns.get_key_value(qualifier)?)));
        if let Some((family, (qualifier, column))) = found {
            let read = Read {
                range,
                max_versions: usize::MAX,
                now,
            };
            read.push_visible(&mut out, family, qualifier, column, self.family_ttl(family));
        }
        out
    }

    /// Row keys in `[start, stop)` (or `(stop, start]` reversed, walking down).
    /// Empty bounds are open.
    pub fn row_keys<'a>(
        &'a self,
        start: Bound<&'a [u8]>,
        stop: Bound<&'a [u8]>,
        reversed: bool,
    ) -> Box<dyn Iterator<Item = &'a [u8]> + 'a> {
        let (lo, hi) = if reversed { (stop, start) } else { (start, stop) };
        if !is_valid_range(lo, hi) {
            return Box::new(std::iter::empty());
        }
        let keys = self.rows.range::<[u8], _>((lo, hi)).map(|(k, _)| k.as_slice());
        if reversed { Box::new(keys.rev()) } else { Box::new(keys) }
    }

    /// What a major compaction does: drop delete markers, expired cells and
    /// rows left empty.
    pub fn major_compact(&mut self, now: i64) {
        self.journal.record(|| Record::MajorCompact {
            table: self.name.clone(),
            now,
        });
        let ttls: BTreeMap<Vec<u8>, Option<i64>> = self
            .families
            .iter()
            .map(|(name, f)| (name.clone(), f.ttl_ms()))
            .collect();
        for families in self.rows.values_mut() {
            for (family, cells) in families.iter_mut() {
                let ttl = ttls.get(family).copied().flatten();
                cells.deleted_upto = None;
                cells.columns.retain(|_, column| {
                    column.deleted_upto = None;
                    column.versions.retain(|v| !v.expired(ttl, now));
                    !column.versions.is_empty()
                });
            }
            families.retain(|_, cells| !cells.columns.is_empty());
        }
        self.rows.retain(|_, families| !families.is_empty());
    }
}

/// Snapshot and restore of the stored cells, for rewriting the log.
impl Table {
    /// The stored cells as records (markers and every kept version, expired
    /// or not), which `restore_*` turn back into the same state.
    pub fn snapshot(&self, out: &mut Vec<Record>) {
        for (row, families) in &self.rows {
            for (family, cells) in families {
                if cells.deleted_upto.is_some() || cells.columns.is_empty() {
                    out.push(Record::RestoreFamily {
                        table: self.name.clone(),
                        row: row.clone(),
                        family: family.clone(),
                        deleted_upto: cells.deleted_upto,
                    });
                }
                for (qualifier, column) in &cells.columns {
                    let versions = column.versions.iter().map(|v| StoredVersion {
                        ts: v.ts,
                        value: v.value.clone(),
                        ttl_ms: v.ttl_ms,
                    });
                    out.push(Record::RestoreColumn {
                        table: self.name.clone(),
                        row: row.clone(),
                        family: family.clone(),
                        qualifier: qualifier.clone(),
                        deleted_upto: column.deleted_upto,
                        versions: versions.collect(),
                    });
                }
            }
        }
    }

    pub fn restore_family(&mut self, row: &[u8], family: &[u8], deleted_upto: Option<i64>) {
        self.family_cells(row, family).deleted_upto = deleted_upto;
    }

    pub fn restore_column(
        &mut self,
        row: &[u8],
        family: &[u8],
        qualifier: &[u8],
        deleted_upto: Option<i64>,
        versions: Vec<StoredVersion>,
    ) {
        let column = ColumnCells {
            deleted_upto,
            versions: versions
                .into_iter()
                .map(|v| Version {
                    ts: v.ts,
                    value: v.value,
                    ttl_ms: v.ttl_ms,
                })
                .collect(),
        };
        let cells = self.family_cells(row, family);
        cells.columns.insert(qualifier.to_vec(), column);
    }
}

/// `BTreeMap::range` panics on inverted or empty-exclusive ranges; such a
/// scan simply matches nothing.
fn is_valid_range(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    use Bound::*;
    match (lo, hi) {
        (Included(a), Included(b)) => a <= b,
        (Included(a) | Excluded(a), Included(b) | Excluded(b)) => a < b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hbase_thrift::hbase::ColumnDescriptor;

    fn table(max_versions: i32, ttl_secs: i32) -> Table {
        let cd = ColumnDescriptor::new(
            b"cf".to_vec(),
            max_versions,
            "NONE".to_owned(),
            false,
            "NONE".to_owned(),
            0,
            0,
            true,
            ttl_secs,
        );
        let family = FamilySchema::from_thrift(&cd).unwrap();
        Table::new(b"t".to_vec(), BTreeMap::from([(b"cf".to_vec(), family)]), 0)
    }

    fn newest(t: &Table, now: i64) -> Option<(i64, Vec<u8>)> {
        let cells = t.row_cells(b"r", &Selection::All, TimeRange::ALL, 1, now);
        cells.first().map(|c| (c.ts, c.value.to_vec()))
    }

    #[test]
    fn highest_timestamp_wins_and_versions_are_capped() {
        let mut t = table(2, 0);
        t.put(b"r", b"cf", b"q", 20, b"new".to_vec(), None, 0);
        t.put(b"r", b"cf", b"q", 10, b"old".to_vec(), None, 0);
        assert_eq!(newest(&t, 0), Some((20, b"new".to_vec())));
        t.put(b"r", b"cf", b"q", 20, b"newer".to_vec(), None, 0);
        assert_eq!(newest(&t, 0), Some((20, b"newer".to_vec())));
        t.put(b"r", b"cf", b"q", 30, b"x".to_vec(), None, 0);
        let all = t.column_cells(b"r", b"cf", b"q", TimeRange::ALL, 0);
        assert_eq!(all.iter().map(|c| c.ts).collect::<Vec<_>>(), vec![30, 20]);
    }

    #[test]
    fn delete_markers_mask_older_puts_until_major_compaction() {
        let mut t = table(1, 0);
        t.put(b"r", b"cf", b"q", 100, b"future".to_vec(), None, 0);
        t.delete_row(b"r", 50);
        assert_eq!(newest(&t, 0), Some((100, b"future".to_vec())));
        t.delete_column(b"r", b"cf", b"q", 200);
        t.put(b"r", b"cf", b"q", 150, b"masked".to_vec(), None, 0);
        assert_eq!(newest(&t, 0), None);
        t.major_compact(0);
        t.put(b"r", b"cf", b"q", 150, b"visible".to_vec(), None, 0);
        assert_eq!(newest(&t, 0), Some((150, b"visible".to_vec())));
    }

    #[test]
    fn ttls_hide_cells() {
        let mut t = table(1, 10);
        t.put(b"r", b"cf", b"q", 1_000, b"v".to_vec(), Some(500), 1_000);
        assert!(newest(&t, 1_500).is_some());
        assert!(newest(&t, 1_501).is_none());
        t.put(b"r", b"cf", b"q", 1_000, b"v".to_vec(), None, 1_000);
        assert!(newest(&t, 11_000).is_some());
        assert!(newest(&t, 11_001).is_none());
    }

    #[test]
    fn time_ranges() {
        assert!(TimeRange::before(10).unwrap().contains(9));
        assert!(!TimeRange::before(10).unwrap().contains(10));
        assert!(!TimeRange::before(0).unwrap().contains(0));
        assert!(TimeRange::before(-1).is_err());
        assert!(TimeRange::ALL.contains(LATEST));
    }
}
