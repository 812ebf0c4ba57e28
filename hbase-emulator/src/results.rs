//! Conversions from stored cells to the Thrift result types, as
//! `ThriftUtilities.cellFromHBase` / `rowResultFromHBase` build them.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{TCell, TColumn, TRowResult};

use crate::column::make_column;
use crate::table::Cell;

pub(crate) fn tcell(cell: &Cell<'_>) -> TCell {
    TCell::new(cell.value.to_vec(), cell.ts)
}

/// One `TRowResult`: `columns` keyed `family:qualifier`, or, when the scan
/// asked for `sortColumns`, `sortedColumns` in family/qualifier order (the
/// other field is left unset, as in the Java server).
pub(crate) fn row_result(row: &[u8], cells: &[Cell<'_>], sorted: bool) -> TRowResult {
    if sorted {
        let columns = cells
            .iter()
            .map(|c| TColumn::new(make_column(c.family, c.qualifier), tcell(c)))
            .collect::<Vec<_>>();
        TRowResult::new(row.to_vec(), None, columns)
    } else {
        let columns = cells
            .iter()
            .map(|c| (make_column(c.family, c.qualifier), tcell(c)))
            .collect::<BTreeMap<_, _>>();
        TRowResult::new(row.to_vec(), columns, None)
    }
}
