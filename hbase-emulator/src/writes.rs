//! Mutations, deletes, checkAndPut, increments and appends: the write half of
//! the handler.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{BatchMutation, Mutation, TAppend, TCell, TIncrement};

use crate::column::ColumnName;
use crate::error::{HError, HResult};
use crate::handler::{Handler, check_row};
use crate::table::{LATEST, Table, TimeRange};

/// `Mutation.setTTL` stores the per-cell TTL under this attribute as 8-byte
/// big-endian milliseconds.
const TTL_ATTRIBUTE: &[u8] = b"_ttl";

pub(crate) type Attributes = BTreeMap<Vec<u8>, Vec<u8>>;

/// The per-cell TTL a call's attributes ask for (`None`: no TTL).
fn ttl_from_attributes(attributes: &Attributes) -> HResult<Option<i64>> {
    let Some(raw) = attributes.get(TTL_ATTRIBUTE) else {
        return Ok(None);
    };
    // `Bytes.toLong` reads the first 8 bytes and fails on shorter arrays.
    let bytes: [u8; 8] = raw.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| {
        HError::io(format!(
            "java.lang.IllegalArgumentException: offset (0) + length (8) exceed the \
                 capacity of the array: {}",
            raw.len()
        ))
    })?;
    let ttl = i64::from_be_bytes(bytes);
    // Long.MAX_VALUE is how `Mutation.getTTL` says "no TTL".
    Ok((ttl != i64::MAX).then_some(ttl))
}

/// `LATEST_TIMESTAMP` becomes the server's current time.
fn resolve(ts: i64, now: i64) -> i64 {
    if ts == LATEST { now } else { ts }
}

fn check_timestamp(ts: i64) -> Result<(), String> {
    if ts < 0 {
        Err(format!(
            "java.lang.IllegalArgumentException: Timestamp cannot be negative. ts={ts}"
        ))
    } else {
        Ok(())
    }
}

/// A put needs `family:qualifier` with a non-empty qualifier.
fn put_column(raw: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    match ColumnName::parse(raw) {
        ColumnName::Column(family, qualifier) if !qualifier.is_empty() => Ok((family, qualifier)),
        _ => Err(format!(
            "java.lang.IllegalArgumentException: Invalid famAndQf provided: a put needs \
             family:qualifier, got '{}'",
            String::from_utf8_lossy(raw)
        )),
    }
}

/// One row's share of a `mutateRow(s)` call, checked before anything is applied.
struct RowMutations {
    row: Vec<u8>,
    puts: Vec<(Vec<u8>, Vec<u8>, Vec<u8>)>,
    deletes: Vec<ColumnName>,
}

impl RowMutations {
    fn parse(row: Vec<u8>, mutations: Vec<Mutation>, ts: i64) -> HResult<Self> {
        check_row(&row).map_err(HError::illegal)?;
        check_timestamp(ts).map_err(HError::illegal)?;
        let mut puts = Vec::new();
        let mut deletes = Vec::new();
        // `writeToWAL` only picks a durability; there is no WAL here.
        for m in mutations {
            let column = m.column.unwrap_or_default();
            if m.is_delete.unwrap_or(false) {
                deletes.push(ColumnName::parse(&column));
            } else {
                let (family, qualifier) = put_column(&column).map_err(HError::illegal)?;
                puts.push((family, qualifier, m.value.unwrap_or_default()));
            }
        }
        Ok(Self { row, puts, deletes })
    }

    fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.deletes.is_empty()
    }

    /// One `Put`: all of its cells or none (an unknown family fails it whole).
    fn apply_puts(&self, table: &mut Table, ts: i64, ttl: Option<i64>, now: i64) -> HResult<()> {
        table.check_families(self.puts.iter().map(|(f, _, _)| f.as_slice()))?;
        for (family, qualifier, value) in &self.puts {
            table.put(&self.row, family, qualifier, ts, value.clone(), ttl, now);
        }
        Ok(())
    }

    fn apply_deletes(&self, table: &mut Table, ts: i64) -> HResult<()> {
        table.check_families(self.deletes.iter().map(ColumnName::family))?;
        for column in &self.deletes {
            apply_delete(table, &self.row, column, ts);
        }
        Ok(())
    }
}

fn apply_delete(table: &mut Table, row: &[u8], column: &ColumnName, upto: i64) {
    match column {
        ColumnName::Family(f) => table.delete_family(row, f, upto),
        ColumnName::Column(f, q) => table.delete_column(row, f, q, upto),
    }
}

/// A multi-row batch reports every failed action in one exception.
fn batch_result(results: impl Iterator<Item = HResult<()>>) -> HResult<()> {
    let failures: Vec<HError> = results.filter_map(Result::err).collect();
    match failures.first() {
        None => Ok(()),
        Some(first) => Err(retries_exhausted(failures.len(), first.message())),
    }
}

/// HBase's `RetriesExhaustedWithDetailsException` for `n` failed actions of
/// one cause, as its Thrift handler passes it on: not a DoNotRetry
/// exception, so `canRetry` is set.
fn retries_exhausted(n: usize, cause: &str) -> HError {
    let plural = |word: &str| if n == 1 { word.to_string() } else { format!("{word}s") };
    HError::Io {
        message: format!(
            "org.apache.hadoop.hbase.client.RetriesExhaustedWithDetailsException: Failed {n} {}: {cause}: {n} {}, \
             servers with issues: null",
            plural("action"),
            plural("time")
        ),
        retry: true,
    }
}

/// A missing table as HBase's handler reports it for `mutateRows*`: its
/// batched `HTable.put(List)` (or `delete(List)` when there are no puts)
/// fails with `RetriesExhaustedWithDetailsException` whose cause is the bare
/// table name, and `canRetry` set. Other errors pass unchanged.
fn batched_table_error(e: HError, table: &[u8], batch: &[RowMutations]) -> HError {
    if !e.message().contains("TableNotFoundException") {
        return e;
    }
    let puts = batch.iter().filter(|ops| !ops.puts.is_empty()).count();
    let n = if puts > 0 {
        puts
    } else {
        batch.iter().filter(|ops| !ops.deletes.is_empty()).count()
    };
    retries_exhausted(n, &String::from_utf8_lossy(table))
}

/// Timestamp for an increment/append result: never older than the cell it
/// replaces, so it always becomes the newest version.
fn next_ts(current_ts: Option<i64>, now: i64) -> i64 {
    current_ts.map_or(now, |ts| now.max(ts.saturating_add(1)))
}

impl Handler {
    /// `mutateRow` / `mutateRowTs`: the Java handler sends the row's Delete
    /// first, then its Put, so a put and delete of one column at the same
    /// timestamp leave the column deleted.
    pub(crate) fn mutate_row(
        &self,
        table: &[u8],
        row: Vec<u8>,
        mutations: Vec<Mutation>,
        ts: i64,
        attributes: &Attributes,
    ) -> HResult<()> {
        let ops = RowMutations::parse(row, mutations, ts)?;
        if ops.is_empty() {
            // The Java handler sends nothing, so the table is never checked.
            return Ok(());
        }
        let ttl = ttl_from_attributes(attributes)?;
        let now = self.now();
        let ts = resolve(ts, now);
        self.write(|store| {
            let table = store.table_mut(table)?;
            ops.apply_deletes(table, ts)?;
            ops.apply_puts(table, ts, ttl, now)
        })
    }

    /// `mutateRows` / `mutateRowsTs`: every row's Put first, then every
    /// row's Delete. Rows fail independently; a failed put skips the deletes.
    pub(crate) fn mutate_rows(
        &self,
        table: &[u8],
        batches: Vec<BatchMutation>,
        ts: i64,
        attributes: &Attributes,
    ) -> HResult<()> {
        let batch = batches
            .into_iter()
            .map(|b| {
                let row = b.row.unwrap_or_default();
                RowMutations::parse(row, b.mutations.unwrap_or_default(), ts)
            })
            .collect::<HResult<Vec<_>>>()?;
        if batch.iter().all(RowMutations::is_empty) {
            return Ok(());
        }
        let ttl = ttl_from_attributes(attributes)?;
        let now = self.now();
        let ts = resolve(ts, now);
        self.write(|store| {
            let table = store
                .table_mut(table)
                .map_err(|e| batched_table_error(e, table, &batch))?;
            let puts = batch.iter().filter(|ops| !ops.puts.is_empty());
            batch_result(puts.map(|ops| ops.apply_puts(table, ts, ttl, now)))?;
            let deletes = batch.iter().filter(|ops| !ops.deletes.is_empty());
            batch_result(deletes.map(|ops| ops.apply_deletes(table, ts)))
        })
    }

    /// `deleteAll*` (with a column) and `deleteAllRow*` (without): everything
    /// up to `ts`, where `LATEST` means "now", so future cells survive.
    pub(crate) fn delete_cells(&self, table: &[u8], row: &[u8], column: Option<&[u8]>, ts: i64) -> HResult<()> {
        check_row(row).map_err(HError::internal)?;
        check_timestamp(ts).map_err(HError::internal)?;
        let now = self.now();
        let ts = resolve(ts, now);
        self.write(|store| {
            let table = store.table_mut(table)?;
            match column.map(ColumnName::parse) {
                None => table.delete_row(row, ts),
                Some(column) => {
                    table.check_families([column.family()])?;
                    apply_delete(table, row, &column, ts);
                }
            }
            Ok(())
        })
    }

    /// `checkAndPut`: puts (at "now") when the newest `column` value equals
    /// `expected`; an empty `expected` matches an absent or empty cell.
    pub(crate) fn check_and_put(
        &self,
        table: &[u8],
        row: &[u8],
        column: &[u8],
        expected: &[u8],
        put: Mutation,
        attributes: &Attributes,
    ) -> HResult<bool> {
        check_row(row).map_err(HError::illegal)?;
        let (put_family, put_qualifier) = put_column(&put.column.unwrap_or_default()).map_err(HError::illegal)?;
        let (family, qualifier) = match ColumnName::parse(column) {
            ColumnName::Column(f, q) => (f, q),
            ColumnName::Family(_) => {
                return Err(HError::illegal("checkAndPut needs a family:qualifier column"));
            }
        };
        let ttl = ttl_from_attributes(attributes)?;
        let now = self.now();
        self.write(|store| {
            let table = store.table_mut(table)?;
            table.check_families([family.as_slice(), put_family.as_slice()])?;
            let current = table.column_cells(row, &family, &qualifier, TimeRange::ALL, now);
            let matches = match current.first() {
                None => expected.is_empty(),
                Some(cell) if expected.is_empty() => cell.value.is_empty(),
                Some(cell) => cell.value.as_ref() == expected,
            };
            if matches {
                let value = put.value.unwrap_or_default();
                table.put(row, &put_family, &put_qualifier, now, value, ttl, now);
            }
            Ok(matches)
        })
    }

    /// `atomicIncrement`: a bare family means the empty qualifier.
    pub(crate) fn atomic_increment(&self, table: &[u8], row: &[u8], column: &[u8], amount: i64) -> HResult<i64> {
        check_row(row).map_err(HError::internal)?;
        let (family, qualifier) = match ColumnName::parse(column) {
            ColumnName::Family(f) => (f, Vec::new()),
            ColumnName::Column(f, q) => (f, q),
        };
        let now = self.now();
        self.write(|store| {
            let table = store.table_mut(table)?;
            table.check_families([family.as_slice()])?;
            increment_cell(table, row, &family, &qualifier, amount, now)
        })
    }

    /// `increment` / `incrementRows` (no coalescing: applied at once).
    pub(crate) fn increment(&self, increment: TIncrement) -> HResult<()> {
        let table = increment.table.unwrap_or_default();
        let row = increment.row.unwrap_or_default();
        if table.is_empty() || row.is_empty() {
            return Err(HError::internal("Must supply a table and a row key; can't increment"));
        }
        let column = increment.column.unwrap_or_default();
        let ColumnName::Column(family, qualifier) = ColumnName::parse(&column) else {
            return Err(HError::internal(
                "java.lang.NullPointerException (increment needs family:qualifier)",
            ));
        };
        let now = self.now();
        let amount = increment.ammount.unwrap_or(0);
        self.write(|store| {
            let table = store.table_mut(&table)?;
            table.check_families([family.as_slice()])?;
            increment_cell(table, &row, &family, &qualifier, amount, now).map(drop)
        })
    }

    /// `append`: concatenates onto each column's newest value and returns the
    /// new cells in column order.
    pub(crate) fn append(&self, append: TAppend) -> HResult<Vec<TCell>> {
        let table = append.table.unwrap_or_default();
        let row = append.row.unwrap_or_default();
        if table.is_empty() || row.is_empty() {
            return Err(HError::internal("Must supply a table and a row key; can't append"));
        }
        let columns = append.columns.unwrap_or_default();
        let values = append.values.unwrap_or_default();
        if columns.len() != values.len() {
            return Err(HError::internal(
                "java.lang.IllegalArgumentException: Sizes of columns and values in tappend object are not matching",
            ));
        }
        let mut deltas = Vec::with_capacity(columns.len());
        for (column, value) in columns.iter().zip(values) {
            let (family, qualifier) = put_column(column).map_err(HError::internal)?;
            deltas.push((family, qualifier, value));
        }
        let now = self.now();
        deltas.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        self.write(|store| {
            let table = store.table_mut(&table)?;
            table.check_families(deltas.iter().map(|(f, _, _)| f.as_slice()))?;
            let mut out = Vec::with_capacity(deltas.len());
            for (family, qualifier, delta) in deltas {
                let current = table.column_cells(&row, &family, &qualifier, TimeRange::ALL, now);
                let current = current.first().map(|c| (c.ts, c.value.to_vec()));
                let ts = next_ts(current.as_ref().map(|c| c.0), now);
                let mut value = current.map(|c| c.1).unwrap_or_default();
                value.extend_from_slice(&delta);
                table.put(&row, &family, &qualifier, ts, value.clone(), None, now);
                out.push(TCell::new(value, ts));
            }
            Ok(out)
        })
    }
}

/// Adds to an 8-byte big-endian counter (absent counts as 0).
fn increment_cell(
    table: &mut Table,
    row: &[u8],
    family: &[u8],
    qualifier: &[u8],
    amount: i64,
    now: i64,
) -> HResult<i64> {
    let current = table.column_cells(row, family, qualifier, TimeRange::ALL, now);
    let current = current.first().map(|c| (c.ts, c.value.to_vec()));
    let base = match &current {
        None => 0,
        Some((_, value)) => {
            let bytes: [u8; 8] = value.as_slice().try_into().map_err(|_| {
                HError::io(format!(
                    "org.apache.hadoop.hbase.DoNotRetryIOException: Field is not a long, \
                     it's {} bytes wide",
                    value.len()
                ))
            })?;
            i64::from_be_bytes(bytes)
        }
    };
    let value = base.wrapping_add(amount);
    let ts = next_ts(current.map(|c| c.0), now);
    table.put(row, family, qualifier, ts, value.to_be_bytes().to_vec(), None, now);
    Ok(value)
}
