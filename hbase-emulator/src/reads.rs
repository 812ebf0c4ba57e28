//! Gets and scanner opening: the read half of the handler.

use hbase_thrift::hbase::{TCell, TRowResult, TScan};

use crate::column::{ColumnName, Selection};
use crate::error::{HError, HResult};
use crate::filter::Filter;
use crate::handler::{Handler, check_row};
use crate::results::{row_result, tcell};
use crate::scanner::ScanSpec;
use crate::table::TimeRange;

impl Handler {
    /// `get` / `getVer` / `getVerTs`: the newest `versions` cells of one
    /// column (or of every column of a family), newest first.
    pub(crate) fn read_cells(
        &self,
        table: &[u8],
        row: &[u8],
        column: &[u8],
        versions: i32,
        range: TimeRange,
    ) -> HResult<Vec<TCell>> {
        // `new Get(row)` throws a runtime exception the handler does not catch.
        check_row(row).map_err(HError::internal)?;
        let versions = usize::try_from(versions)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| HError::io("java.io.IOException: versions must be positive"))?;
        let selection = Selection::single(&ColumnName::parse(column));
        let now = self.now();
        let store = self.store();
        let table = store.table(table)?;
        table.check_families(selection.families())?;
        let cells = table.row_cells(row, &selection, range, versions, now);
        Ok(cells.iter().map(tcell).collect())
    }

    /// `getRow*` / `getRows*`: one result per row that has any of the asked
    /// columns, in request order (duplicates repeat); absent rows are skipped.
    pub(crate) fn read_rows(
        &self,
        table: &[u8],
        rows: &[Vec<u8>],
        columns: &[Vec<u8>],
        range: TimeRange,
    ) -> HResult<Vec<TRowResult>> {
        if rows.is_empty() {
            // `Table.get(emptyList)` returns without contacting the cluster.
            return Ok(Vec::new());
        }
        for row in rows {
            check_row(row).map_err(HError::internal)?;
        }
        let selection = Selection::from_columns(columns);
        let now = self.now();
        let store = self.store();
        let table = store.table(table)?;
        table.check_families(selection.families())?;
        let results = rows.iter().filter_map(|row| {
            let cells = table.row_cells(row, &selection, range, 1, now);
            (!cells.is_empty()).then(|| row_result(row, &cells, false))
        });
        Ok(results.collect())
    }

    pub(crate) fn open_scanner(&self, table: &[u8], spec: ScanSpec) -> HResult<i32> {
        self.store().open_scanner(table, spec)
    }

    pub(crate) fn scanner_next(&self, id: i32, n: i32) -> HResult<Vec<TRowResult>> {
        let now = self.now();
        let n = usize::try_from(n).unwrap_or(0);
        self.store().scanner_next(id, n, now)
    }
}

/// Interprets a `TScan` as `scannerOpenWithScan` does: only fields that are
/// set count, and a set `timestamp` means the range `[0, timestamp)`.
pub(crate) fn scan_spec(scan: TScan) -> HResult<ScanSpec> {
    let columns = scan.columns.unwrap_or_default();
    let mut spec = ScanSpec::new(
        scan.start_row.unwrap_or_default(),
        scan.stop_row.unwrap_or_default(),
        Selection::from_columns(&columns),
    );
    if let Some(ts) = scan.timestamp {
        spec.range = TimeRange::before(ts)?;
    }
    // A batch limit <= 0 means "whole rows" in HBase's scanner context.
    spec.batch = scan.batch_size.and_then(|b| usize::try_from(b).ok()).filter(|&b| b > 0);
    if let Some(text) = scan.filter_string.filter(|f| !f.is_empty()) {
        spec.filter = Some(Filter::parse(&text)?);
    }
    spec.reversed = scan.reversed.unwrap_or(false);
    spec.sort_columns = scan.sort_columns.unwrap_or(false);
    Ok(spec)
}

/// `scannerOpen*` variants other than `WithScan`.
pub(crate) fn simple_scan_spec(
    start: Vec<u8>,
    stop: Vec<u8>,
    columns: &[Vec<u8>],
    timestamp: Option<i64>,
) -> HResult<ScanSpec> {
    let mut spec = ScanSpec::new(start, stop, Selection::from_columns(columns));
    if let Some(ts) = timestamp {
        spec.range = TimeRange::before(ts)?;
    }
    Ok(spec)
}

/// `scannerOpenWithPrefix`: start at the prefix and stop at the first row
/// without it (`WhileMatchFilter(PrefixFilter)`).
pub(crate) fn prefix_scan_spec(prefix: Vec<u8>, columns: &[Vec<u8>]) -> ScanSpec {
    let mut spec = ScanSpec::new(prefix.clone(), Vec::new(), Selection::from_columns(columns));
    spec.filter = Some(Filter::Prefix(prefix));
    spec
}
