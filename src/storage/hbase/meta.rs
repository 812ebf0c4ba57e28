//! Deduper configs in the per-client meta table `<client_id>_dedupers`.
//!
//! Create: Thrift1's `checkAndPut` puts a single cell, so a config cannot be
//! written whole and conditionally. Creation claims the row with
//! `checkAndPut(C:name, expected empty, put C:name)` - exactly one caller
//! wins, the others get `AlreadyExists` - then writes every column with
//! `mutateRow`. A row holding `name` but no `hf` is a creation in progress:
//! reads skip it (not found), and a create that meets one answers
//! `Unavailable` ("retry") while the claim is younger than
//! [`CLAIM_TAKEOVER_MS`], and after that treats the claimer as dead and
//! writes its own config over the claim.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{TCell, THbaseSyncClient, TRowResult, TScan};

use super::codec::{self, Attributes, meta_col};
use super::pool::{Pool, Retry};
use super::tables::Tables;
use crate::contract::layout;
use crate::deduper::Deduper;
use crate::storage::StorageError;

/// How old (by its HBase timestamp, ms) an unfinished claim must be before
/// another create may take it over.
pub const CLAIM_TAKEOVER_MS: i64 = 30_000;

/// Rows fetched per `scannerGetList` when listing.
const SCAN_BATCH: i32 = 256;

fn meta_columns() -> Vec<Vec<u8>> {
    meta_col::ALL
        .iter()
        .map(|q| codec::column(layout::META_FAMILY, q))
        .collect()
}

/// The config row of one deduper, `None` when absent (or its table is: then
/// the table is also forgotten as checked, so a later create re-creates it).
fn read_row(
    pool: &Pool,
    tables: &Tables,
    client_id: &str,
    name: &str,
) -> Result<Option<BTreeMap<Vec<u8>, TCell>>, StorageError> {
    let table = layout::meta_table(client_id);
    let row = layout::meta_row_key(client_id, name);
    let result = pool.call(Retry::Idempotent, |c| {
        c.get_row_with_columns(
            table.clone().into_bytes(),
            row.clone(),
            meta_columns(),
            Attributes::new(),
        )
    });
    match result {
        Ok(rows) => Ok(rows.into_iter().next().and_then(|r| r.columns)),
        Err(e) if e.is_table_not_found(&table) => {
            tables.forget(&table);
            Ok(None)
        }
        Err(e) => Err(e.into_storage(&format!("getRowWithColumns {table}"))),
    }
}

/// One `getRowWithColumns`. Errors: `Unavailable`, `Corrupt`.
pub fn get(pool: &Pool, tables: &Tables, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError> {
    match read_row(pool, tables, client_id, name)? {
        Some(columns) => codec::decode_deduper(client_id, &columns),
        None => Ok(None),
    }
}

/// Writes every column of `d` in one `mutateRow` (idempotent, retried; a
/// lost table is re-created first).
pub fn put_all(pool: &Pool, tables: &Tables, d: &Deduper) -> Result<(), StorageError> {
    let table = layout::meta_table(&d.client_id);
    let row = layout::meta_row_key(&d.client_id, &d.name);
    tables.on_table(pool, &table, &format!("mutateRow {table}"), || {
        pool.call(Retry::Idempotent, |c| {
            c.mutate_row(
                table.clone().into_bytes(),
                row.clone(),
                codec::deduper_mutations(d),
                Attributes::new(),
            )
        })
    })
}

/// Claims the row, then writes the config (see the module docs). Errors:
/// `AlreadyExists`; `Unavailable` when HBase fails or another create of the
/// same name is still in progress.
pub fn create(pool: &Pool, tables: &Tables, d: &Deduper, now_ms: i64) -> Result<(), StorageError> {
    let table = layout::meta_table(&d.client_id);
    let row = layout::meta_row_key(&d.client_id, &d.name);
    let name_col = codec::column(layout::META_FAMILY, meta_col::NAME);
    // Not retried: had a lost answer hidden a successful claim, the retry
    // would see our own claim and report AlreadyExists. Except after a
    // missing table, when nothing was claimed: re-created, then tried again.
    let claimed = tables.on_table(pool, &table, &format!("checkAndPut {table}"), || {
        pool.call(Retry::Once, |c| {
            c.check_and_put(
                table.clone().into_bytes(),
                row.clone(),
                name_col.clone(),
                Vec::new(),
                codec::put(name_col.clone(), d.name.clone().into_bytes()),
                Attributes::new(),
            )
        })
    })?;
    if !claimed {
        let columns = read_row(pool, tables, &d.client_id, &d.name)?.unwrap_or_default();
        if codec::decode_deduper(&d.client_id, &columns)?.is_some() {
            return Err(StorageError::AlreadyExists);
        }
        let claimed_at = columns.get(&name_col).and_then(|c| c.timestamp).unwrap_or(0);
        if now_ms - claimed_at < CLAIM_TAKEOVER_MS {
            return Err(StorageError::Unavailable(format!(
                "deduper {:?} of client {:?} is being created by another request; retry in a few seconds",
                d.name, d.client_id
            )));
        }
        tracing::warn!(client_id = %d.client_id, name = %d.name, claimed_at, "taking over an abandoned deduper creation");
    }
    put_all(pool, tables, d)
}

/// Scans the client's meta table (only rows whose `a` is true when
/// `active_only`, filtered by HBase) and returns complete configs sorted by
/// name. A missing table is an empty list (and forgotten as checked).
/// Errors: `Unavailable`, `Corrupt`.
pub fn list(pool: &Pool, tables: &Tables, client_id: &str, active_only: bool) -> Result<Vec<Deduper>, StorageError> {
    let table = layout::meta_table(client_id);
    let result = pool.call(Retry::Idempotent, |c| {
        let scan = TScan {
            start_row: None,
            stop_row: None,
            timestamp: None,
            columns: Some(meta_columns()),
            caching: Some(SCAN_BATCH),
            filter_string: active_only.then(active_filter),
            batch_size: None,
            sort_columns: None,
            reversed: None,
            cache_blocks: None,
        };
        let id = c.scanner_open_with_scan(table.clone().into_bytes(), scan, Attributes::new())?;
        let rows = drain(c, id);
        let closed = c.scanner_close(id);
        let rows = rows?;
        closed?;
        Ok(rows)
    });
    let rows = match result {
        Ok(rows) => rows,
        Err(e) if e.is_table_not_found(&table) => {
            tables.forget(&table);
            return Ok(Vec::new());
        }
        Err(e) => return Err(e.into_storage(&format!("scan of {table}"))),
    };
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if let Some(d) = codec::decode_deduper(client_id, r.columns.as_ref().unwrap_or(&BTreeMap::new()))?
            && (d.active || !active_only)
        {
            out.push(d);
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn drain(c: &mut impl THbaseSyncClient, id: i32) -> thrift::Result<Vec<TRowResult>> {
    let mut rows = Vec::new();
    loop {
        let batch = c.scanner_get_list(id, SCAN_BATCH)?;
        if batch.is_empty() {
            return Ok(rows);
        }
        rows.extend(batch);
    }
}

/// `a` present and not `0x00` (Java `Bytes.toBoolean` is true for any
/// non-zero byte); `filterIfMissing = true` drops rows without `a`.
fn active_filter() -> Vec<u8> {
    let mut f = format!(
        "SingleColumnValueFilter('{}','{}',!=,'binary:",
        layout::META_FAMILY,
        meta_col::ACTIVE
    )
    .into_bytes();
    f.push(0x00);
    f.extend_from_slice(b"',true,true)");
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_filter_uses_the_filter_language() {
        assert_eq!(
            active_filter(),
            b"SingleColumnValueFilter('C','a',!=,'binary:\0',true,true)".to_vec()
        );
    }

    #[test]
    fn every_meta_column_is_asked_by_name() {
        let cols = meta_columns();
        assert_eq!(cols.len(), 11);
        assert!(cols.iter().all(|c| c.starts_with(b"C:") && c.len() > 2));
    }
}
