//! The `AddIfAbsent` guard: optimistic concurrency per shard row, so two
//! replicas racing on the same new entity do not both answer "absent".
//!
//! Each data row may carry one guard cell, `S:solus#guard`, holding a random
//! 16-byte nonce. An `AddIfAbsent`:
//! 1. reads the guard of every shard row it touches **no later than** it
//!    reads their bits (in the same `getRowsWithColumns` call when the read
//!    is one call, which HBase answers atomically per row; else in a call
//!    made first);
//! 2. writes its bits (`mutateRowsTs`, as any add);
//! 3. swaps each row's guard from the value it read to a fresh nonce with
//!    `checkAndPut` (atomic per row in HBase).
//!
//! Of two requests that both read a row before either wrote it, the second
//! swap fails: the guard is no longer what it read. That request then treats
//! every bit of that row as set, so its entities there answer "present".
//! A request that read after the other's swap read after its bits too
//! (bits are written before the swap) and sees them. So at most one of any
//! set of racing requests answers "absent" for an entity - the price is a
//! "present" for genuinely new entities that only share a shard row with a
//! concurrent request (a false positive, counted against p only under
//! contention), and one `checkAndPut` per touched row. A swap whose answer
//! was lost is not retried (it could have succeeded: the row is taken as
//! lost, the safe side). The guard cell carries the deduper's `_ttl`.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{THbaseSyncClient, TRowResult};

use super::codec::{self, Attributes};
use super::pool::{Pool, Retry};
use super::tables::Tables;
use crate::contract::layout;
use crate::storage::StorageError;

/// Qualifier of the guard cell in family `S` (no `#ttl` suffix: never read
/// as a bit, and no bit qualifier is text).
pub const GUARD_QUALIFIER: &str = "solus#guard";

/// `S:solus#guard` as a Thrift column.
pub fn column() -> Vec<u8> {
    codec::column(layout::DATA_FAMILY, GUARD_QUALIFIER)
}

/// Guard cell values by row key.
pub type GuardValues = BTreeMap<Vec<u8>, Vec<u8>>;

/// Guard values by row key, from rows HBase returned (rows without one map
/// to an empty value: `checkAndPut` with an empty expected value matches an
/// absent cell).
pub fn values(rows: &[TRowResult]) -> GuardValues {
    let col = column();
    rows.iter()
        .filter_map(|r| {
            let value = r.columns.as_ref()?.get(&col)?.value.clone()?;
            Some((r.row.clone()?, value))
        })
        .collect()
}

/// Swaps the guard of `row` from `expected` to a fresh nonce. Ok(false) when
/// another request swapped it first (or the answer was lost).
pub fn swap(
    pool: &Pool,
    tables: &Tables,
    table: &str,
    row: &[u8],
    expected: &[u8],
    ttl_ms: i64,
) -> Result<bool, StorageError> {
    let nonce: [u8; 16] = rand::random();
    let what = format!("checkAndPut {table} (AddIfAbsent guard)");
    let attributes: Attributes = codec::ttl_attributes(ttl_ms);
    tables.on_table(pool, table, &what, || {
        pool.call(Retry::Once, |c| {
            c.check_and_put(
                table.as_bytes().to_vec(),
                row.to_vec(),
                column(),
                expected.to_vec(),
                codec::put(column(), nonce.to_vec()),
                attributes.clone(),
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hbase_thrift::hbase::TCell;

    #[test]
    fn guard_values_by_row_and_absent_ones_left_out() {
        let cell = |v: &[u8]| TCell::new(v.to_vec(), 1);
        let rows = vec![
            TRowResult::new(b"r1".to_vec(), BTreeMap::from([(column(), cell(b"n1"))]), None),
            TRowResult::new(
                b"r2".to_vec(),
                BTreeMap::from([(b"S:7#ttl".to_vec(), cell(&[0; 8]))]),
                None,
            ),
        ];
        let got = values(&rows);
        assert_eq!(got, BTreeMap::from([(b"r1".to_vec(), b"n1".to_vec())]));
        assert_eq!(column(), b"S:solus#guard");
    }
}
