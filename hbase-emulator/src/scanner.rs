//! Server-side scanners (`scannerOpen*` / `scannerGet*`).
//!
//! A scanner keeps its position, not a snapshot: each `scannerGetList` reads
//! the table from where the previous call stopped. That is close enough to
//! HBase, whose scanners fetch in batches and see writes made between them.

use std::ops::Bound;

use hbase_thrift::hbase::TRowResult;

use crate::column::Selection;
use crate::filter::Filter;
use crate::results::row_result;
use crate::table::{Cell, Table, TimeRange};

/// What a scan reads, after the Thrift arguments have been interpreted.
#[derive(Debug, Clone)]
pub(crate) struct ScanSpec {
    pub start: Vec<u8>,
    pub stop: Vec<u8>,
    pub selection: Selection,
    pub range: TimeRange,
    /// `TScan.batchSize`: at most this many cells per result (partial rows).
    pub batch: Option<usize>,
    pub filter: Option<Filter>,
    pub reversed: bool,
    pub sort_columns: bool,
}

impl ScanSpec {
    pub fn new(start: Vec<u8>, stop: Vec<u8>, selection: Selection) -> Self {
        Self {
            start,
            stop,
            selection,
            range: TimeRange::ALL,
            batch: None,
            filter: None,
            reversed: false,
            sort_columns: false,
        }
    }

    /// Kept from HBase's deprecated `Scan.setStopRow`: equal non-empty start
    /// and stop rows make a "get scan" that includes that row.
    fn stop_bound(&self) -> Bound<&[u8]> {
        if self.stop.is_empty() {
            Bound::Unbounded
        } else if self.stop == self.start {
            Bound::Included(&self.stop)
        } else {
            Bound::Excluded(&self.stop)
        }
    }
}

#[derive(Debug, Clone)]
enum Position {
    Fresh,
    /// Part of `row` was returned (batching); skip that many cells.
    Within {
        row: Vec<u8>,
        skip: usize,
    },
    After(Vec<u8>),
    Done,
}

#[derive(Debug)]
pub(crate) struct Scanner {
    pub table: Vec<u8>,
    spec: ScanSpec,
    position: Position,
}

impl Scanner {
    pub fn new(table: Vec<u8>, spec: ScanSpec) -> Self {
        Self {
            table,
            spec,
            position: Position::Fresh,
        }
    }

    /// Up to `n` results; an empty list means the scan is over.
    pub fn next_rows(&mut self, table: &Table, n: usize, now: i64) -> Vec<TRowResult> {
        let mut out = Vec::new();
        if n == 0 {
            return out;
        }
        let position = self.position.clone();
        let start = match &position {
            Position::Done => return out,
            Position::Fresh if self.spec.start.is_empty() => Bound::Unbounded,
            Position::Fresh => Bound::Included(self.spec.start.as_slice()),
            Position::Within { row, .. } => Bound::Included(row.as_slice()),
            Position::After(row) => Bound::Excluded(row.as_slice()),
        };
        let spec = &self.spec;
        let batch = spec.batch.unwrap_or(usize::MAX);
        for row in table.row_keys(start, spec.stop_bound(), spec.reversed) {
            if spec.filter.as_ref().is_some_and(|f| f.exhausted(row, spec.reversed)) {
                break;
            }
            let skip = match &position {
                Position::Within { row: r, skip } if r == row => *skip,
                _ => 0,
            };
            let cells = Self::row_cells(spec, table, row, now);
            let mut offset = skip.min(cells.len());
            while offset < cells.len() {
                if out.len() == n {
                    self.position = Position::Within {
                        row: row.to_vec(),
                        skip: offset,
                    };
                    return out;
                }
                let end = offset.saturating_add(batch).min(cells.len());
                out.push(row_result(row, &cells[offset..end], spec.sort_columns));
                offset = end;
            }
            self.position = Position::After(row.to_vec());
            if out.len() == n {
                return out;
            }
        }
        self.position = Position::Done;
        out
    }

    /// The cells a row contributes after the scan's columns, time range and
    /// filter; empty when the row is filtered out.
    fn row_cells<'t>(spec: &ScanSpec, table: &'t Table, row: &[u8], now: i64) -> Vec<Cell<'t>> {
        if let Some(filter) = &spec.filter {
            // A filter only sees the columns the scan reads: a column-value
            // filter on an unread column finds it "missing", as in HBase.
            let lookup = |family: &[u8], qualifier: &[u8]| {
                if !spec.selection.includes(family, qualifier) {
                    return Vec::new();
                }
                table
                    .column_cells(row, family, qualifier, spec.range, now)
                    .into_iter()
                    .map(|c| c.value.into_owned())
                    .collect()
            };
            if !filter.row_passes(row, &lookup) {
                return Vec::new();
            }
        }
        let cells = table.row_cells(row, &spec.selection, spec.range, 1, now);
        match &spec.filter {
            Some(filter) => filter.apply_cells(cells),
            None => cells,
        }
    }
}
