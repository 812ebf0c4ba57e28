//! Bit cells in the data table: how a request's bits become Thrift reads and
//! writes, and how the answers become [`Cell`]s.
//!
//! Reads use `getRowsWithColumns`, which applies one column list to every
//! row it is given. Asking R shard rows for the union of their columns costs
//! R times the (row, column) pairs strictly needed, and the answer carries
//! every union column a row happens to hold. So rows are grouped greedily
//! (in shard order) while `rows x union columns` stays within
//! `max_cells_per_read`; a request whose bits fit that budget - any
//! single-entity request, and batches of up to a few hundred entities on a
//! typical deduper - is one call. Bigger ones are split and the calls run in
//! parallel.

use std::collections::{HashMap, HashSet};

use hbase_thrift::hbase::{BatchMutation, TRowResult};

use super::codec;
use crate::contract::layout::{self, Qualifier};
use crate::deduper::Deduper;
use crate::storage::{BitAddr, Cell, StorageError};

/// One `getRowsWithColumns` call: these rows, each asked for `columns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadGroup {
    pub rows: Vec<Vec<u8>>,
    pub columns: Vec<Vec<u8>>,
}

impl ReadGroup {
    /// (row, column) pairs this call asks HBase for.
    pub fn asked(&self) -> u64 {
        (self.rows.len() * self.columns.len()) as u64
    }
}

fn row_key(d: &Deduper, shard: u32) -> Vec<u8> {
    layout::data_row_key(shard, &d.client_id, &d.name)
}

/// Splits `bits` (sorted by shard, then bit) into read calls; see the module docs.
pub fn plan_reads(d: &Deduper, bits: &[BitAddr], legacy: bool, max_cells: u64) -> Vec<ReadGroup> {
    let per_bit = if legacy { 2 } else { 1 };
    let mut groups = Vec::new();
    let mut rows: Vec<u32> = Vec::new();
    let mut union: HashSet<u32> = HashSet::new();
    let mut flush = |rows: &mut Vec<u32>, union: &mut HashSet<u32>| {
        if rows.is_empty() {
            return;
        }
        let mut bits: Vec<u32> = union.drain().collect();
        bits.sort_unstable();
        let mut columns = Vec::with_capacity(bits.len() * per_bit);
        for b in bits {
            columns.push(codec::column(layout::DATA_FAMILY, &layout::ttl_qualifier(b)));
            if legacy {
                columns.push(codec::column(layout::DATA_FAMILY, &layout::legacy_qualifier(b)));
            }
        }
        groups.push(ReadGroup {
            rows: rows.drain(..).map(|s| row_key(d, s)).collect(),
            columns,
        });
    };
    for run in bits.chunk_by(|a, b| a.shard == b.shard) {
        let new = run.iter().filter(|a| !union.contains(&a.bit)).count();
        let cost = (rows.len() as u64 + 1) * ((union.len() + new) * per_bit) as u64;
        if !rows.is_empty() && cost > max_cells {
            flush(&mut rows, &mut union);
        }
        rows.push(run[0].shard);
        union.extend(run.iter().map(|a| a.bit));
    }
    flush(&mut rows, &mut union);
    groups
}

/// Fills `cells` (one per entry of `bits`) from the rows HBase returned.
/// Cells of union columns a row was not asked for are ignored. `Corrupt`
/// when a requested cell's value has the wrong length.
pub fn decode_rows(
    d: &Deduper,
    bits: &[BitAddr],
    results: &[TRowResult],
    cells: &mut [Cell],
) -> Result<(), StorageError> {
    let index: HashMap<BitAddr, usize> = bits.iter().enumerate().map(|(i, a)| (*a, i)).collect();
    let shard_of: HashMap<Vec<u8>, u32> = bits
        .chunk_by(|a, b| a.shard == b.shard)
        .map(|run| (row_key(d, run[0].shard), run[0].shard))
        .collect();
    let prefix = format!("{}:", layout::DATA_FAMILY);
    for row in results {
        let Some(&shard) = row.row.as_ref().and_then(|r| shard_of.get(r)) else {
            continue;
        };
        for (name, cell) in row.columns.iter().flatten() {
            let Some(q) = name.strip_prefix(prefix.as_bytes()).and_then(layout::parse_qualifier) else {
                continue;
            };
            let bit = match q {
                Qualifier::Ttl(b) | Qualifier::Legacy(b) => b,
            };
            let Some(&i) = index.get(&BitAddr { shard, bit }) else {
                continue;
            };
            let value = cell.value.as_deref().unwrap_or_default();
            match q {
                Qualifier::Ttl(_) => cells[i].expire_ms = Some(codec::decode_expire(value)?),
                Qualifier::Legacy(_) => cells[i].legacy = Some(codec::decode_marker(value)?),
            }
        }
    }
    Ok(())
}

/// The row batches of one `mutateRowsTs`: per touched shard row, a put of
/// `<bit>#ttl` = `expire_ms` (8-byte big-endian) for each of its bits.
pub fn write_batches(d: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Vec<BatchMutation> {
    let value = layout::encode_expire_ms(expire_ms).to_vec();
    bits.chunk_by(|a, b| a.shard == b.shard)
        .map(|run| {
            let mutations: Vec<_> = run
                .iter()
                .map(|a| {
                    codec::put(
                        codec::column(layout::DATA_FAMILY, &layout::ttl_qualifier(a.bit)),
                        value.clone(),
                    )
                })
                .collect();
            BatchMutation::new(row_key(d, run[0].shard), mutations)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hbase_thrift::hbase::TCell;

    use super::*;
    use crate::contract::sizing::Geometry;
    use crate::deduper::Level;

    fn deduper() -> Deduper {
        Deduper {
            client_id: "client-a".into(),
            name: "orders".into(),
            geometry: Geometry {
                hash_functions: 2,
                shards: 4,
                bits_per_shard: 100,
            },
            expiry_seconds: 60,
            active: true,
            level: Level::Global,
            create_time_ms: 0,
            update_time_ms: 0,
            expected_insertions: None,
            false_positive_rate: None,
        }
    }

    fn addrs(pairs: &[(u32, u32)]) -> Vec<BitAddr> {
        pairs.iter().map(|&(shard, bit)| BitAddr { shard, bit }).collect()
    }

    #[test]
    fn one_group_within_budget_with_union_columns() {
        let d = deduper();
        let bits = addrs(&[(0, 5), (0, 7), (2, 5), (2, 9)]);
        let groups = plan_reads(&d, &bits, true, 1000);
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert_eq!(g.rows, vec![row_key(&d, 0), row_key(&d, 2)]);
        let cols: Vec<&[u8]> = g.columns.iter().map(Vec::as_slice).collect();
        assert_eq!(cols, [&b"S:5#ttl"[..], b"S:5", b"S:7#ttl", b"S:7", b"S:9#ttl", b"S:9"]);
        assert_eq!(g.asked(), 12);
        let without_legacy = plan_reads(&d, &bits, false, 1000);
        assert_eq!(without_legacy[0].columns.len(), 3);
    }

    #[test]
    fn groups_split_past_the_budget_and_cover_every_bit() {
        let d = deduper();
        let bits = addrs(&[(0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (3, 6)]);
        // Two rows x four columns = 8 fits; a third row would make 18.
        let groups = plan_reads(&d, &bits, true, 8);
        let rows: Vec<usize> = groups.iter().map(|g| g.rows.len()).collect();
        assert_eq!(rows, [1, 1, 2]);
        assert!(groups.iter().all(|g| g.asked() <= 8));
        // A single row over budget is still read (alone).
        assert_eq!(plan_reads(&d, &bits, true, 1).len(), 4);
    }

    #[test]
    fn decoding_keeps_only_requested_cells_in_order() {
        let d = deduper();
        let bits = addrs(&[(0, 5), (2, 5), (2, 9)]);
        let cell = |v: Vec<u8>| TCell::new(v, 1_i64);
        let results = vec![
            TRowResult::new(
                row_key(&d, 2),
                BTreeMap::from([
                    (b"S:5#ttl".to_vec(), cell(42_i64.to_be_bytes().to_vec())),
                    (b"S:9".to_vec(), cell(vec![0xFF])),
                    (b"S:7#ttl".to_vec(), cell(vec![1])), // not asked for row 2: ignored
                ]),
                None,
            ),
            TRowResult::new(
                row_key(&d, 0),
                BTreeMap::from([(b"S:9#ttl".to_vec(), cell(vec![0; 8]))]), // union column of row 2
                None,
            ),
        ];
        let mut cells = vec![Cell::default(); 3];
        decode_rows(&d, &bits, &results, &mut cells).unwrap();
        assert_eq!(
            cells,
            [
                Cell::default(),
                Cell {
                    expire_ms: Some(42),
                    legacy: None
                },
                Cell {
                    expire_ms: None,
                    legacy: Some(true)
                },
            ]
        );
        let bad = vec![TRowResult::new(
            row_key(&d, 0),
            BTreeMap::from([(b"S:5#ttl".to_vec(), cell(vec![1, 2, 3]))]),
            None,
        )];
        assert!(matches!(
            decode_rows(&d, &bits, &bad, &mut cells),
            Err(StorageError::Corrupt(_))
        ));
    }

    #[test]
    fn one_batch_per_shard_row() {
        let d = deduper();
        let batches = write_batches(&d, &addrs(&[(0, 5), (0, 7), (3, 1)]), 1_700_000_000_000);
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].row.as_deref(), Some(&row_key(&d, 0)[..]));
        let m = &batches[0].mutations.as_ref().unwrap()[1];
        assert_eq!(m.column.as_deref(), Some(&b"S:7#ttl"[..]));
        assert_eq!(m.value.as_deref(), Some(&1_700_000_000_000_i64.to_be_bytes()[..]));
        assert_eq!((m.write_to_w_a_l, m.is_delete), (Some(true), Some(false)));
    }
}
