//! Deduper configs in the per-client meta table `<client_id>_dedupers`.
//!
//! Create: see `claim.rs` (a claim cell swapped by `checkAndPut`, decided by
//! HBase's timestamps alone). A row without `hf`, or whose `claim` holds a
//! creator's token, is a creation in progress: reads skip it (not found).
//!
//! Update: compare-and-set on the `ver` cell (see `codec.rs`). Read the row,
//! apply the change, `checkAndPut(C:ver, expected = the ver read, put the
//! new ver)`; a lost race re-reads and re-applies (changes only set values,
//! so applying one again is harmless), up to [`UPDATE_ATTEMPTS`] times. The
//! winner then mirrors `a`, `expiry` and `utime` into their columns with
//! cell timestamp = the new `utime`, which strictly increases from update to
//! update, so a late mirror never hides a newer one. Readers take the
//! mutable settings from `ver` unless the columns are newer.
//!
//! The high-water mark of `expiry` (`C:maxexp`, see `codec.rs`) is written
//! with the config at creation, and by an update before its compare-and-set:
//! a mark written for an update that then loses and is never applied only
//! overstates it, which only lengthens a delete; the reverse, an applied
//! expiry above the mark, cannot happen.
//!
//! Remembered requests: one row per request in the same table
//! ([`codec::request_row_key`]), one cell `C:req` = expiry time (8 bytes BE
//! ms) then the engine's record, written with `checkAndPut` (expected empty,
//! or the expired record it replaces) and a cell TTL of the window, so
//! exactly one attempt records and HBase drops the row afterwards.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{Mutation, TCell, THbaseSyncClient, TRowResult, TScan};

use super::codec::{self, Attributes, meta_col};
use super::lifecycle::Retirement;
use super::pool::{Pool, Retry};
use super::tables::Tables;
use crate::contract::layout;
use crate::deduper::Deduper;
use crate::storage::{Change, RequestKey, StorageError, Unreadable};

/// Compare-and-set attempts of one update before it answers `Unavailable`.
pub const UPDATE_ATTEMPTS: u32 = 50;

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
pub(super) fn read_row(
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
        Some(columns) => decode_row(client_id, name, &columns),
        None => Ok(None),
    }
}

/// [`codec::decode_deduper`] of the row of deduper `name`, which must also
/// be the name its `C:name` holds: a row whose `C:name` was overwritten
/// would be used under the other name (its shard rows, its health).
/// Errors: `Corrupt`, naming the row and the column.
fn decode_row(
    client_id: &str,
    name: &str,
    columns: &BTreeMap<Vec<u8>, TCell>,
) -> Result<Option<Deduper>, StorageError> {
    let d = codec::decode_deduper(client_id, columns).map_err(|e| match e {
        // Named after the row key, which is what the shell shows.
        StorageError::Corrupt(why) if !why.contains(&format!("deduper {name:?}")) => StorageError::Corrupt(format!(
            "{} (C:name does not say): {why}",
            codec::describe_row(client_id, Some(name))
        )),
        e => e,
    })?;
    match d {
        Some(d) if d.name != name => Err(StorageError::Corrupt(format!(
            "{}: column C:name holds {:?}, not the row key's name; {}",
            codec::describe_row(client_id, Some(name)),
            d.name,
            codec::DAMAGED_ROW_FIX
        ))),
        d => Ok(d),
    }
}

/// The deduper name in a meta row key of `client_id`
/// (`<prefix>deDuperConfig|<client_id>|<name>`); `None` for other rows
/// (remembered requests and records share the table).
fn name_of_row<'a>(client_id: &str, row: &'a [u8]) -> Option<&'a str> {
    let head = format!("{}|{client_id}|", layout::META_ROW_PREFIX);
    let name = row.get(1..)?.strip_prefix(head.as_bytes())?;
    let name = std::str::from_utf8(name).ok()?;
    (layout::meta_row_key(client_id, name) == row).then_some(name)
}

/// Writes `C:maxexp` of `d` at its own timestamp (`codec::max_expiry_put`);
/// nothing when the mark is unknown. Idempotent, retried.
pub(super) fn put_max_expiry(pool: &Pool, tables: &Tables, d: &Deduper) -> Result<(), StorageError> {
    let Some((put, timestamp)) = codec::max_expiry_put(d) else {
        return Ok(());
    };
    put_columns_at(pool, tables, d, vec![put], timestamp)
}

/// Writes `mutations` to `d`'s config row in one `mutateRowTs` at cell
/// timestamp `d.update_time_ms` (idempotent, retried; a lost table is
/// re-created first).
fn put_columns(pool: &Pool, tables: &Tables, d: &Deduper, mutations: Vec<Mutation>) -> Result<(), StorageError> {
    put_columns_at(pool, tables, d, mutations, d.update_time_ms)
}

fn put_columns_at(
    pool: &Pool,
    tables: &Tables,
    d: &Deduper,
    mutations: Vec<Mutation>,
    timestamp: i64,
) -> Result<(), StorageError> {
    let table = layout::meta_table(&d.client_id);
    let row = layout::meta_row_key(&d.client_id, &d.name);
    tables.on_table(pool, &table, &format!("mutateRowTs {table}"), || {
        pool.call(Retry::Idempotent, |c| {
            c.mutate_row_ts(
                table.clone().into_bytes(),
                row.clone(),
                mutations.clone(),
                timestamp,
                Attributes::new(),
            )
        })
    })
}

/// What [`update`] runs between applying a change and storing it, with the
/// config as read, as changed, and this replica's clock (ms since the Unix
/// epoch) taken just before the read: deletes the data of generations the
/// change dropped (`lifecycle.rs`). `NotYet`: store nothing this time.
pub type BeforeStore<'a> = dyn Fn(&Deduper, &Deduper, i64) -> Result<Retirement, StorageError> + 'a;

/// Applies `change` by compare-and-set (see the module docs); `None` when
/// the deduper does not exist. `before_store` runs on every attempt before
/// its compare-and-set; when it answers `NotYet`, nothing is stored and the
/// config as read is returned. Errors: `Unavailable`, also after
/// [`UPDATE_ATTEMPTS`] lost races; `Corrupt`; those of `before_store`.
pub fn update(
    pool: &Pool,
    tables: &Tables,
    client_id: &str,
    name: &str,
    change: &Change<'_>,
    now_ms: i64,
    before_store: &BeforeStore<'_>,
) -> Result<Option<Deduper>, StorageError> {
    let table = layout::meta_table(client_id);
    let row = layout::meta_row_key(client_id, name);
    let ver_col = codec::column(layout::META_FAMILY, meta_col::VERSION);
    for attempt in 0..UPDATE_ATTEMPTS {
        let read_at = crate::clock::now_ms();
        let Some(columns) = read_row(pool, tables, client_id, name)? else {
            return Ok(None);
        };
        let Some(mut d) = decode_row(client_id, name, &columns)? else {
            return Ok(None);
        };
        let expected = columns.get(&ver_col).and_then(|c| c.value.clone()).unwrap_or_default();
        let previous = d.update_time_ms;
        let old = d.clone();
        change(&mut d);
        if before_store(&old, &d, read_at)? == Retirement::NotYet {
            return Ok(Some(old));
        }
        d.update_time_ms = d.update_time_ms.max(now_ms).max(previous + 1);
        put_max_expiry(pool, tables, &d)?;
        let won = pool
            .call(Retry::Once, |c| {
                c.check_and_put(
                    table.clone().into_bytes(),
                    row.clone(),
                    ver_col.clone(),
                    expected.clone(),
                    codec::put(ver_col.clone(), codec::encode_version(&d)),
                    Attributes::new(),
                )
            })
            .map_err(|e| e.into_storage(&format!("checkAndPut {table}")))?;
        if won {
            put_columns(pool, tables, &d, codec::mutable_mutations(&d))?;
            return Ok(Some(d));
        }
        let wait = std::time::Duration::from_millis(rand::random_range(1..=5u64 << attempt.min(4)));
        std::thread::sleep(wait);
    }
    Err(StorageError::Unavailable(format!(
        "deduper {name:?} of client {client_id:?}: {UPDATE_ATTEMPTS} concurrent updates in a row won the \
         compare-and-set; retry"
    )))
}

/// The record cell of a remembered request with its expiry time, if any.
fn read_request(pool: &Pool, key: &RequestKey) -> Result<Option<(Vec<u8>, i64)>, StorageError> {
    let table = layout::meta_table(&key.client_id);
    let row = codec::request_row_key(&key.client_id, &key.deduper, &key.request_id);
    let col = codec::column(layout::META_FAMILY, meta_col::REQUEST);
    let rows = pool
        .call(Retry::Idempotent, |c| {
            c.get_row_with_columns(
                table.clone().into_bytes(),
                row.clone(),
                vec![col.clone()],
                Attributes::new(),
            )
        })
        .map_err(|e| e.into_storage(&format!("getRowWithColumns {table}")))?;
    let cell = rows
        .into_iter()
        .next()
        .and_then(|r| r.columns)
        .and_then(|mut cols| cols.remove(&col))
        .and_then(|c| c.value);
    match cell {
        None => Ok(None),
        Some(v) => {
            let expire = v
                .first_chunk::<8>()
                .map(|b| i64::from_be_bytes(*b))
                .ok_or_else(|| StorageError::Corrupt(format!("request record of {} bytes", v.len())))?;
            Ok(Some((v, expire)))
        }
    }
}

/// The unexpired record of `key` (without its expiry prefix).
pub fn recall_request(pool: &Pool, key: &RequestKey, now_ms: i64) -> Result<Option<Vec<u8>>, StorageError> {
    Ok(read_request(pool, key)?
        .filter(|(_, expire)| *expire >= now_ms)
        .map(|(v, _)| v[8..].to_vec()))
}

/// Records `record` unless an unexpired one exists (see the module docs).
/// The client's meta table exists: its deduper does.
pub fn remember_request(
    pool: &Pool,
    key: &RequestKey,
    record: &[u8],
    expire_ms: i64,
    now_ms: i64,
) -> Result<Option<Vec<u8>>, StorageError> {
    let table = layout::meta_table(&key.client_id);
    let row = codec::request_row_key(&key.client_id, &key.deduper, &key.request_id);
    let col = codec::column(layout::META_FAMILY, meta_col::REQUEST);
    let mut value = expire_ms.to_be_bytes().to_vec();
    value.extend_from_slice(record);
    // The cell outlives the record by a minute, so HBase never drops it early.
    let ttl = codec::ttl_attributes((expire_ms - now_ms).max(0).saturating_add(60_000));
    for _ in 0..UPDATE_ATTEMPTS {
        let expected = match read_request(pool, key)? {
            Some((earlier, expire)) if expire >= now_ms => return Ok(Some(earlier[8..].to_vec())),
            Some((stale, _)) => stale,
            None => Vec::new(),
        };
        // Not retried blindly: a lost answer is resolved by reading again.
        let won = pool.call(Retry::Once, |c| {
            c.check_and_put(
                table.clone().into_bytes(),
                row.clone(),
                col.clone(),
                expected.clone(),
                codec::put(col.clone(), value.clone()),
                ttl.clone(),
            )
        });
        match won {
            Ok(true) => return Ok(None),
            Ok(false) => continue,
            Err(e) if e.retryable() => {
                // Maybe stored: the next read tells (ours then reads as "earlier").
                if let Some((v, _)) = read_request(pool, key)?
                    && v == value
                {
                    return Ok(None);
                }
                return Err(e.into_storage(&format!("checkAndPut {table}")));
            }
            Err(e) => return Err(e.into_storage(&format!("checkAndPut {table}"))),
        }
    }
    Err(StorageError::Unavailable(format!(
        "request record in {table}: {UPDATE_ATTEMPTS} concurrent attempts in a row; retry"
    )))
}

/// Scans the client's meta table (only rows whose `a` is true when
/// `active_only`, filtered by HBase) and returns complete configs sorted by
/// name, and apart the config rows that cannot be used (each with its
/// `Corrupt` message), sorted by name: one damaged row is its deduper's
/// error, not the list's. A missing table is an empty list (and forgotten
/// as checked). Errors: `Unavailable`.
pub fn list(
    pool: &Pool,
    tables: &Tables,
    client_id: &str,
    active_only: bool,
) -> Result<(Vec<Deduper>, Vec<Unreadable>), StorageError> {
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
            return Ok((Vec::new(), Vec::new()));
        }
        Err(e) => return Err(e.into_storage(&format!("scan of {table}"))),
    };
    let mut out = Vec::with_capacity(rows.len());
    let mut unreadable = Vec::new();
    let empty = BTreeMap::new();
    for r in rows {
        let columns = r.columns.as_ref().unwrap_or(&empty);
        let Some(name) = r.row.as_deref().and_then(|row| name_of_row(client_id, row)) else {
            // Not a config row (its key says so); its cells decide nothing.
            continue;
        };
        match decode_row(client_id, name, columns) {
            Ok(Some(d)) if d.active || !active_only => out.push(d),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(client_id, deduper = name, error = %e, "unusable deduper config left out of a list");
                unreadable.push(Unreadable {
                    name: name.to_string(),
                    error: e.to_string(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    unreadable.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((out, unreadable))
}

/// Every config with generations, of every client: `getTableNames`, then
/// [`list`] of each `<client_id>_dedupers` table. A config this replica
/// cannot use is skipped (`list` logs it; the deduper is refused when
/// looked up, with the same message), the client's others are resumed.
/// Errors: `Unavailable`.
pub fn resized(pool: &Pool, tables: &Tables) -> Result<Vec<Deduper>, StorageError> {
    let names = pool
        .call(Retry::Idempotent, |c| c.get_table_names())
        .map_err(|e| e.into_storage("getTableNames"))?;
    let suffix = layout::meta_table("");
    let mut out = Vec::new();
    for name in names {
        let Some(client_id) = std::str::from_utf8(&name)
            .ok()
            .and_then(|n| n.strip_suffix(suffix.as_str()))
        else {
            continue;
        };
        if client_id.is_empty() || layout::meta_table(client_id).as_bytes() != name.as_slice() {
            continue;
        }
        // An unusable config is skipped (logged by `list`): its deduper
        // resumes when next looked up, which reports the damage.
        let (list, _) = list(pool, tables, client_id, false)?;
        out.extend(list.into_iter().filter(|d| !d.generations.is_empty()));
    }
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
        assert_eq!(cols.len(), 17);
        assert!(cols.iter().all(|c| c.starts_with(b"C:") && c.len() > 2));
    }
}
