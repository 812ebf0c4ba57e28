//! Remembered record ids on HBase (see `engine::records`): one row per
//! record id in the client's meta table `<client_id>_dedupers`, row key
//! [`codec::record_row_key`], one cell per entity the id was sent with,
//! `C:rec#<fingerprint, 16 hex digits>` = expiry time (8 bytes BE, ms since
//! the Unix epoch) then the entity's fingerprint (8 bytes BE), written with
//! a cell TTL a minute past the expiry so HBase drops it by itself. One cell
//! of about 90 bytes plus the id in hex per record. Versions before
//! 2026-12-06 wrote one `C:rec` cell per id (the same value), so an id sent
//! with a second entity replaced the first's: both are read.
//!
//! Writes are plain puts (`mutateRows`, idempotent, split under
//! `max_request_bytes`): two attempts of one record that race both answered
//! absent and both write the same value, so no compare-and-set is needed.
//! Reads are one `getRowsWithColumns` per split asking for family `C` (a
//! record row holds only these narrow cells).

use std::collections::HashMap;

use hbase_thrift::hbase::{BatchMutation, THbaseSyncClient};

use super::codec::{self, Attributes, meta_col};
use super::pool::{Pool, Retry};
use crate::contract::layout;
use crate::deduper::Deduper;
use crate::storage::{RecordFingerprint, StorageError};

/// Bytes of one record row in a Thrift call besides its row key: the
/// column name, the value and framing, from above.
const ROW_OVERHEAD_BYTES: u64 = 64;

/// Splits `rows` so no call carries more than `max_bytes` of row keys and overhead.
fn splits<T>(rows: Vec<(Vec<u8>, T)>, max_bytes: u64) -> Vec<Vec<(Vec<u8>, T)>> {
    let mut out: Vec<Vec<(Vec<u8>, T)>> = vec![Vec::new()];
    let mut bytes = 0u64;
    for row in rows {
        let cost = row.0.len() as u64 + ROW_OVERHEAD_BYTES;
        if bytes + cost > max_bytes && !out.last().is_some_and(Vec::is_empty) {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += cost;
        if let Some(v) = out.last_mut() {
            v.push(row);
        }
    }
    out
}

/// Puts one `C:rec` cell per record (see the module docs).
pub fn remember(
    pool: &Pool,
    d: &Deduper,
    records: &[(&[u8], RecordFingerprint)],
    expire_ms: i64,
    now_ms: i64,
    max_bytes: u64,
) -> Result<(), StorageError> {
    let table = layout::meta_table(&d.client_id);
    let ttl = codec::ttl_attributes((expire_ms - now_ms).max(0).saturating_add(60_000));
    let rows: Vec<(Vec<u8>, RecordFingerprint)> = records
        .iter()
        .map(|&(id, fp)| (codec::record_row_key(&d.client_id, &d.name, id), fp))
        .collect();
    for split in splits(rows, max_bytes) {
        let batches: Vec<BatchMutation> = split
            .into_iter()
            .map(|(row, fp)| {
                let mut value = expire_ms.to_be_bytes().to_vec();
                value.extend_from_slice(&fp.to_be_bytes());
                BatchMutation::new(row, vec![codec::put(column(fp), value)])
            })
            .collect();
        pool.call(Retry::Idempotent, |c| {
            c.mutate_rows(table.clone().into_bytes(), batches.clone(), ttl.clone())
        })
        .map_err(|e| e.into_storage(&format!("mutateRows {table} (record ids)")))?;
    }
    Ok(())
}

/// The column of the record of one entity: `C:rec#<fingerprint in hex>`.
fn column(fp: RecordFingerprint) -> Vec<u8> {
    codec::column(layout::META_FAMILY, &format!("{}#{fp:016x}", meta_col::RECORD))
}

/// Whether each `(id, fingerprint)` of `records` is remembered and
/// unexpired at `now_ms`, in order: a `C:rec#...` cell (or an earlier
/// version's `C:rec`) of the id's row holding that fingerprint.
pub fn recall(
    pool: &Pool,
    d: &Deduper,
    records: &[(&[u8], RecordFingerprint)],
    now_ms: i64,
    max_bytes: u64,
) -> Result<Vec<bool>, StorageError> {
    let table = layout::meta_table(&d.client_id);
    let family = layout::META_FAMILY.as_bytes().to_vec();
    let legacy = codec::column(layout::META_FAMILY, meta_col::RECORD);
    let prefix = [legacy.as_slice(), b"#"].concat();
    // One row per distinct id; each asked record's index under its row.
    let mut wanted: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    for (i, (id, _)) in records.iter().enumerate() {
        wanted
            .entry(codec::record_row_key(&d.client_id, &d.name, id))
            .or_default()
            .push(i);
    }
    let mut out = vec![false; records.len()];
    for split in splits(wanted.into_iter().collect(), max_bytes) {
        let (keys, slots): (Vec<Vec<u8>>, Vec<Vec<usize>>) = split.into_iter().unzip();
        // Borrowed: the keys are copied only into the call (once per attempt).
        let index: HashMap<&[u8], &Vec<usize>> = keys.iter().map(Vec::as_slice).zip(&slots).collect();
        let results = pool
            .call(Retry::Idempotent, |c| {
                c.get_rows_with_columns(
                    table.clone().into_bytes(),
                    keys.clone(),
                    vec![family.clone()],
                    Attributes::new(),
                )
            })
            .map_err(|e| e.into_storage(&format!("getRowsWithColumns {table} (record ids)")))?;
        for r in results {
            let (Some(row), Some(cols)) = (r.row, r.columns) else {
                continue;
            };
            let Some(asked) = index.get(row.as_slice()) else {
                continue;
            };
            for (name, cell) in cols {
                let (true, Some(value)) = (name == legacy || name.starts_with(&prefix), cell.value) else {
                    continue;
                };
                let bad = || StorageError::Corrupt(format!("record id cell of {} bytes in {table}", value.len()));
                let expire = i64::from_be_bytes(value.get(..8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
                let fp = u64::from_be_bytes(value.get(8..16).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
                if expire >= now_ms {
                    for &i in asked.iter() {
                        out[i] |= records[i].1 == fp;
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_stay_under_the_request_size_and_keep_every_row() {
        let rows: Vec<(Vec<u8>, usize)> = (0..100).map(|i| (vec![b'r'; 36], i)).collect();
        let calls = splits(rows, 1000);
        assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), 100);
        assert!(
            calls.iter().all(|c| c.len() as u64 * 100 <= 1000),
            "{:?}",
            calls.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert_eq!(calls.len(), 10);
        // A row larger than the limit still goes, alone.
        assert_eq!(splits(vec![(vec![0u8; 5000], 0)], 1000).len(), 1);
    }
}
