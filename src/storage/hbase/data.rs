//! Bit cells in the data table: how a request's bits become Thrift reads and
//! writes, and how the answers become [`Cell`]s.
//!
//! Reads ask each shard row for its own columns only. Thrift1 has no
//! multi-get with a column list per row: `getRowsWithColumns` applies one
//! list to every row it is given, so asking R rows for the union of their
//! columns costs about R times the (row, column) pairs needed, and HBase's
//! work grows with the pairs asked (issue 20: a 1,000-entity read over 10
//! shards asked 72,600 pairs for 7,000 wanted and outlasted the 5 s read
//! timeout). So:
//! - rows share one `getRowsWithColumns` only while the call asks at most
//!   [`UNION_CELLS`] pairs - a single-entity request (one row) and small
//!   batches stay one call;
//! - every other row is one `getRowWithColumns` of its own bits, and a row
//!   with more than `max_cells_per_read` columns is read in slices of that
//!   many; the calls run in parallel (`in_parallel` in `mod.rs`);
//! - the legacy marker columns are asked only when the deduper may hold
//!   them (`storage.hbase.read_legacy_markers`).
//!
//! Every call, read or write, also stays under `max_request_bytes` (HBase's
//! framed Thrift server drops the connection on a frame above 2 MB by
//! default), so a very large request becomes several calls instead of one
//! that can never succeed.

use std::collections::{HashMap, HashSet};

use hbase_thrift::hbase::{BatchMutation, TRowResult};

use super::codec;
use crate::contract::layout::{self, Qualifier};
use crate::deduper::Deduper;
use crate::storage::{BitAddr, Cell, StorageError};

/// Upper bound of one column name in a request: 4-byte length, then
/// `S:` + up to 10 digits + `#ttl`.
const COLUMN_WIRE_BYTES: u64 = 20;
/// Upper bound of one `Mutation` (binary protocol; compact is smaller):
/// field headers, the column, 8-byte value, flags.
const MUTATION_WIRE_BYTES: u64 = 31 + 16;
/// Per-row overhead besides the key: length prefix, batch struct headers.
const ROW_WIRE_BYTES: u64 = 16;

/// Size limits of one Thrift call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Most (row, column) pairs one read may ask for.
    pub cells: u64,
    /// Largest request, in bytes (estimated from above).
    pub bytes: u64,
}

/// Most (row, column) pairs a read call shared by several rows may ask for:
/// the union of their columns costs little at this size and saves calls.
pub const UNION_CELLS: u64 = 1_024;

/// One read call: these rows, each asked for `columns`
/// (`getRowWithColumns` for one row, `getRowsWithColumns` for several).
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

    fn new(rows: Vec<Vec<u8>>, bits: impl IntoIterator<Item = u32>, legacy: bool) -> ReadGroup {
        let mut bits: Vec<u32> = bits.into_iter().collect();
        bits.sort_unstable();
        bits.dedup();
        let mut columns = Vec::with_capacity(bits.len() * 2);
        for b in bits {
            columns.push(codec::column(layout::DATA_FAMILY, &layout::ttl_qualifier(b)));
            if legacy {
                columns.push(codec::column(layout::DATA_FAMILY, &layout::legacy_qualifier(b)));
            }
        }
        ReadGroup { rows, columns }
    }
}

fn row_key(d: &Deduper, shard: u32) -> Vec<u8> {
    layout::data_row_key(shard, &d.client_id, &d.name)
}

/// Splits `bits` (sorted by shard, then bit) into read calls within
/// `limits`; see the module docs. `limits.cells` bounds the columns of one
/// row's call (a row needing more is sliced); rows share a call only while
/// it asks at most `min(limits.cells, UNION_CELLS)` pairs. `legacy` adds
/// each bit's marker column. Every call stays under `limits.bytes`.
pub fn plan_reads(d: &Deduper, bits: &[BitAddr], legacy: bool, limits: CallLimits) -> Vec<ReadGroup> {
    let per_bit: u64 = if legacy { 2 } else { 1 };
    let shared = limits.cells.min(UNION_CELLS);
    let fits = |rows: u64, row_bytes: u64, bits: u64| {
        let columns = bits * per_bit;
        let cells = if rows > 1 { shared } else { limits.cells };
        rows * columns <= cells && columns * COLUMN_WIRE_BYTES + row_bytes <= limits.bytes
    };
    let mut groups = Vec::new();
    let (mut rows, mut row_bytes, mut union) = (Vec::new(), 0u64, HashSet::new());
    for run in bits.chunk_by(|a, b| a.shard == b.shard) {
        let key = row_key(d, run[0].shard);
        let key_bytes = key.len() as u64 + ROW_WIRE_BYTES;
        let own: HashSet<u32> = run.iter().map(|a| a.bit).collect();
        let new = own.iter().filter(|b| !union.contains(*b)).count() as u64;
        if !rows.is_empty() && !fits(rows.len() as u64 + 1, row_bytes + key_bytes, union.len() as u64 + new) {
            groups.push(ReadGroup::new(std::mem::take(&mut rows), union.drain(), legacy));
            row_bytes = 0;
        }
        if rows.is_empty() && !fits(1, key_bytes, own.len() as u64) {
            let by_cells = limits.cells / per_bit;
            let by_bytes = limits.bytes.saturating_sub(key_bytes) / (per_bit * COLUMN_WIRE_BYTES);
            let slice = by_cells.min(by_bytes).max(1) as usize;
            let mut own: Vec<u32> = own.into_iter().collect();
            own.sort_unstable();
            for part in own.chunks(slice) {
                groups.push(ReadGroup::new(vec![key.clone()], part.iter().copied(), legacy));
            }
            continue;
        }
        rows.push(key);
        row_bytes += key_bytes;
        union.extend(own);
    }
    if !rows.is_empty() {
        groups.push(ReadGroup::new(rows, union, legacy));
    }
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

/// Most cells one `mutateRowsTs` call writes. Like reads, big writes are
/// split into calls small enough to answer within the read timeout on a
/// busy HBase: issue 20's 10,000-entity Adds (70,000 cells), four at once,
/// timed out at 5 s in calls of ~20,000 cells (1 MiB) on a loaded 2-core
/// machine. A 1,000-entity Add (~7,000 cells at k = 7) stays one call.
pub const WRITE_CELLS: u64 = 8_192;

/// Read timeout each written cell adds to `read_timeout_ms`, in ms: a write
/// call of `c` cells may take `read_timeout_ms + c * WRITE_MS_PER_CELL` to
/// answer (21.4 s for [`WRITE_CELLS`] at the default 5 s), a floor of 500
/// cells/s where this 2-core standalone HBase writes ~150,000. Issue 20: an
/// Add of 10,000 entities failed at a flat 5 s while HBase compacted.
pub const WRITE_MS_PER_CELL: u64 = 2;

/// Read timeout of a write call of `cells` cells, in ms (see [`WRITE_MS_PER_CELL`]).
pub fn write_read_timeout_ms(read_timeout_ms: u64, cells: usize) -> u64 {
    read_timeout_ms.saturating_add((cells as u64).saturating_mul(WRITE_MS_PER_CELL))
}

/// The `mutateRowsTs` calls of a write: per touched shard row, a put of
/// `<bit>#ttl` = `expire_ms` (8-byte big-endian) for each of its bits. One
/// call unless the request would exceed `max_bytes` or [`WRITE_CELLS`]; then
/// a row that fits in a call of its own starts the next call rather than
/// being split (measured, issue 20: Add at batch 10,000, 10 rows of ~7,000
/// cells, 21,300 entities/s against 18,100-19,300 with rows split, Thrift
/// CPU per entity down 40%); only a row over the limits is split.
pub fn write_calls(d: &Deduper, bits: &[BitAddr], expire_ms: i64, max_bytes: u64) -> Vec<Vec<BatchMutation>> {
    let value = layout::encode_expire_ms(expire_ms).to_vec();
    let mut calls: Vec<Vec<BatchMutation>> = vec![Vec::new()];
    let (mut bytes, mut cells) = (0u64, 0u64);
    for run in bits.chunk_by(|a, b| a.shard == b.shard) {
        let key = row_key(d, run[0].shard);
        let row_bytes = key.len() as u64 + ROW_WIRE_BYTES;
        let mut rest = run;
        let run_bytes = row_bytes + run.len() as u64 * MUTATION_WIRE_BYTES;
        let fits_alone = run.len() as u64 <= WRITE_CELLS && run_bytes <= max_bytes;
        if fits_alone && cells > 0 && (cells + run.len() as u64 > WRITE_CELLS || bytes + run_bytes > max_bytes) {
            // Whole rows per call: a row split across calls costs HBase's
            // Thrift server and region server more per cell (issue 20).
            calls.push(Vec::new());
            (bytes, cells) = (0, 0);
        }
        while !rest.is_empty() {
            let room = (max_bytes.saturating_sub(bytes + row_bytes) / MUTATION_WIRE_BYTES).min(WRITE_CELLS - cells);
            if room == 0 && bytes > 0 {
                calls.push(Vec::new());
                (bytes, cells) = (0, 0);
                continue;
            }
            let (now, later) = rest.split_at((room.max(1) as usize).min(rest.len()));
            let mutations: Vec<_> = now
                .iter()
                .map(|a| {
                    codec::put(
                        codec::column(layout::DATA_FAMILY, &layout::ttl_qualifier(a.bit)),
                        value.clone(),
                    )
                })
                .collect();
            bytes += row_bytes + now.len() as u64 * MUTATION_WIRE_BYTES;
            cells += now.len() as u64;
            calls
                .last_mut()
                .expect("one call")
                .push(BatchMutation::new(key.clone(), mutations));
            rest = later;
        }
    }
    calls.retain(|c| !c.is_empty());
    calls
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hbase_thrift::hbase::TCell;

    use super::*;
    use crate::contract::sizing::Geometry;
    use crate::deduper::Level;

    fn deduper() -> Deduper {
        let geometry = Geometry {
            hash_functions: 2,
            shards: 4,
            bits_per_shard: 100,
        };
        Deduper::new("client-a", "orders", geometry, 60, Level::Global, 0)
    }

    fn addrs(pairs: &[(u32, u32)]) -> Vec<BitAddr> {
        pairs.iter().map(|&(shard, bit)| BitAddr { shard, bit }).collect()
    }

    fn cells(cells: u64) -> CallLimits {
        CallLimits { cells, bytes: 1 << 20 }
    }

    #[test]
    fn one_group_within_budget_with_union_columns() {
        let d = deduper();
        let bits = addrs(&[(0, 5), (0, 7), (2, 5), (2, 9)]);
        let groups = plan_reads(&d, &bits, true, cells(1000));
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert_eq!(g.rows, vec![row_key(&d, 0), row_key(&d, 2)]);
        let cols: Vec<&[u8]> = g.columns.iter().map(Vec::as_slice).collect();
        assert_eq!(cols, [&b"S:5#ttl"[..], b"S:5", b"S:7#ttl", b"S:7", b"S:9#ttl", b"S:9"]);
        assert_eq!(g.asked(), 12);
        let without_legacy = plan_reads(&d, &bits, false, cells(1000));
        assert_eq!(without_legacy[0].columns.len(), 3);
    }

    #[test]
    fn groups_split_past_the_budget_and_cover_every_bit() {
        let d = deduper();
        let bits = addrs(&[(0, 1), (0, 2), (1, 3), (1, 4), (2, 5), (3, 6)]);
        // Two rows x four columns = 8 fits; a third row would make 18.
        let groups = plan_reads(&d, &bits, true, cells(8));
        let rows: Vec<usize> = groups.iter().map(|g| g.rows.len()).collect();
        assert_eq!(rows, [1, 1, 2]);
        assert!(groups.iter().all(|g| g.asked() <= 8));
        // A row over budget on its own is read in slices, one bit (two columns) at least.
        let sliced = plan_reads(&d, &bits, true, cells(1));
        assert_eq!(sliced.len(), 6);
        assert!(sliced.iter().all(|g| g.rows.len() == 1 && g.columns.len() == 2));
    }

    /// The deduper of issue 20 (n = 10^6, p = 0.01: k = 7, 10 shards of
    /// 958,506 bits) and the distinct bits of `n` entities, as the engine
    /// sorts them.
    fn issue_20(n: usize) -> (Deduper, Vec<BitAddr>) {
        use crate::contract::hashing;
        let geometry = Geometry {
            hash_functions: 7,
            shards: 10,
            bits_per_shard: 958_506,
        };
        let d = Deduper::new("c", "d", geometry, 3600, Level::Global, 0);
        let mut set = std::collections::BTreeSet::new();
        let mut bits = [0u32; 7];
        for i in 0..n {
            let e = format!("entity-{i}");
            let shard = hashing::shard_of(e.as_bytes(), 10);
            hashing::bit_positions(e.as_bytes(), 958_506, &mut bits);
            set.extend(bits.iter().map(|&bit| BitAddr { shard, bit }));
        }
        (d, set.into_iter().collect())
    }

    fn default_limits() -> CallLimits {
        let c = super::super::config::HbaseConfig::default();
        CallLimits {
            cells: c.max_cells_per_read,
            bytes: c.max_request_bytes,
        }
    }

    fn asked(groups: &[ReadGroup]) -> u64 {
        groups.iter().map(ReadGroup::asked).sum()
    }

    #[test]
    fn each_row_asks_its_own_columns_only() {
        let (d, bits) = issue_20(1_000);
        let wanted = bits.len() as u64;
        assert!((6_900..=7_000).contains(&wanted), "{wanted} distinct bits");
        for (legacy, per_bit) in [(false, 1), (true, 2)] {
            let groups = plan_reads(&d, &bits, legacy, default_limits());
            // One getRowWithColumns per shard row, asking exactly its bits.
            assert_eq!(groups.len(), 10, "legacy {legacy}");
            assert!(groups.iter().all(|g| g.rows.len() == 1));
            assert_eq!(asked(&groups), wanted * per_bit, "legacy {legacy}");
            for g in &groups {
                let shard = (0..10).find(|&s| row_key(&d, s) == g.rows[0]).unwrap();
                let own = bits.iter().filter(|a| a.shard == shard).count() as u64;
                assert_eq!(g.columns.len() as u64, own * per_bit);
            }
        }
        // The union read it replaces asked every row for every row's bits.
        let union = CallLimits {
            cells: u64::MAX,
            bytes: u64::MAX,
        };
        let old_style = 10 * 2 * wanted;
        assert!(old_style > 138_000 && asked(&plan_reads(&d, &bits, true, union)) < old_style / 9);
    }

    #[test]
    fn big_rows_are_sliced_and_small_requests_share_a_call() {
        let (d, bits) = issue_20(10_000);
        let wanted = bits.len() as u64;
        assert!((69_000..=70_000).contains(&wanted), "{wanted}");
        // ~7,000 bits per row: 2 slices of at most 4,096 columns; 4 with markers.
        for (legacy, calls) in [(false, 20), (true, 40)] {
            let groups = plan_reads(&d, &bits, legacy, default_limits());
            assert_eq!(groups.len(), calls, "legacy {legacy}");
            assert!(groups.iter().all(|g| g.rows.len() == 1 && g.asked() <= 4_096));
            assert_eq!(asked(&groups), wanted * if legacy { 2 } else { 1 });
        }
        // One entity: one row, its 7 bits (14 columns with markers).
        let (_, one) = issue_20(1);
        let groups = plan_reads(&d, &one, true, default_limits());
        assert_eq!(groups.len(), 1);
        assert_eq!((groups[0].rows.len(), groups[0].columns.len()), (1, 14));
        // Ten entities: one shared call within UNION_CELLS.
        let (_, ten) = issue_20(10);
        let groups = plan_reads(&d, &ten, false, default_limits());
        assert_eq!(groups.len(), 1);
        let rows: HashSet<u32> = ten.iter().map(|a| a.shard).collect();
        assert_eq!(groups[0].rows.len(), rows.len());
        assert!(
            rows.len() > 3 && groups[0].asked() <= UNION_CELLS,
            "{} rows",
            rows.len()
        );
        assert_eq!(groups[0].columns.len(), ten.len(), "70 distinct bits, no duplicates");
    }

    #[test]
    fn reads_stay_under_the_request_size() {
        let d = deduper();
        let bits: Vec<BitAddr> = (0..1000).map(|bit| BitAddr { shard: 1, bit }).collect();
        let limits = CallLimits {
            cells: u64::MAX,
            bytes: 10_000,
        };
        let groups = plan_reads(&d, &bits, true, limits);
        // (10,000 - key) / (2 x 20) = 249 bits per call.
        assert_eq!(groups.len(), 5);
        let total: usize = groups.iter().map(|g| g.columns.len()).sum();
        assert_eq!(total, 2000);
        assert!(
            groups
                .iter()
                .all(|g| g.columns.len() as u64 * COLUMN_WIRE_BYTES < 10_000)
        );
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
        let calls = write_calls(&d, &addrs(&[(0, 5), (0, 7), (3, 1)]), 1_700_000_000_000, 1 << 20);
        assert_eq!(calls.len(), 1);
        let batches = &calls[0];
        assert_eq!(batches.len(), 2);
        assert_eq!(batches[0].row.as_deref(), Some(&row_key(&d, 0)[..]));
        let m = &batches[0].mutations.as_ref().unwrap()[1];
        assert_eq!(m.column.as_deref(), Some(&b"S:7#ttl"[..]));
        assert_eq!(m.value.as_deref(), Some(&1_700_000_000_000_i64.to_be_bytes()[..]));
        assert_eq!((m.write_to_w_a_l, m.is_delete), (Some(true), Some(false)));
    }

    #[test]
    fn big_writes_split_under_the_request_size() {
        let d = deduper();
        let bits: Vec<BitAddr> = (0..3000)
            .map(|i| BitAddr {
                shard: i / 1000,
                bit: i % 1000,
            })
            .collect();
        let calls = write_calls(&d, &bits, 1, 50_000);
        assert!(calls.len() >= 3, "{}", calls.len());
        let mut seen = Vec::new();
        for call in &calls {
            let mutations: usize = call.iter().map(|b| b.mutations.as_ref().unwrap().len()).sum();
            assert!(mutations as u64 * MUTATION_WIRE_BYTES <= 50_000);
            for b in call {
                for m in b.mutations.as_ref().unwrap() {
                    seen.push((b.row.clone().unwrap(), m.column.clone().unwrap()));
                }
            }
        }
        assert_eq!(seen.len(), 3000, "every bit written exactly once");
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 3000);
    }

    #[test]
    fn big_writes_split_into_calls_of_at_most_write_cells() {
        let (d, bits) = issue_20(10_000);
        let calls = write_calls(&d, &bits, 1, 1 << 20);
        let sizes: Vec<usize> = calls
            .iter()
            .map(|c| c.iter().map(|b| b.mutations.as_ref().unwrap().len()).sum())
            .collect();
        assert_eq!(sizes.iter().sum::<usize>(), bits.len());
        assert!(sizes.iter().all(|&n| n as u64 <= WRITE_CELLS), "{sizes:?}");
        // Ten rows of ~7,000 cells: one whole row per call, none split.
        assert_eq!(calls.len(), 10, "{sizes:?}");
        assert!(calls.iter().all(|c| c.len() == 1), "{sizes:?}");
        let rows: std::collections::BTreeSet<_> = calls.iter().map(|c| c[0].row.clone()).collect();
        assert_eq!(rows.len(), 10);
        let (d, bits) = issue_20(1_000);
        assert_eq!(write_calls(&d, &bits, 1, 1 << 20).len(), 1);
    }

    /// Per call, the number of cells each of its rows carries.
    fn cells_per_row_per_call(calls: &[Vec<BatchMutation>]) -> Vec<Vec<usize>> {
        calls
            .iter()
            .map(|c| c.iter().map(|b| b.mutations.as_ref().unwrap().len()).collect())
            .collect()
    }

    #[test]
    fn only_a_row_over_the_limit_is_split() {
        let d = deduper();
        // Row 0: WRITE_CELLS + 10 bits (over the limit alone); row 1: 3 bits.
        let mut pairs: Vec<(u32, u32)> = (0..WRITE_CELLS as u32 + 10).map(|b| (0, b)).collect();
        pairs.extend([(1, 1), (1, 2), (1, 3)]);
        let shape = cells_per_row_per_call(&write_calls(&d, &addrs(&pairs), 1, 1 << 30));
        // Row 0 fills a call and spills 10 cells; row 1 joins the spill (it fits).
        assert_eq!(shape, vec![vec![WRITE_CELLS as usize], vec![10, 3]]);
        // Two rows that each fit but not together: one call each.
        let mut pairs: Vec<(u32, u32)> = (0..5_000).map(|b| (0, b)).collect();
        pairs.extend((0..5_000).map(|b| (1, b)));
        let shape = cells_per_row_per_call(&write_calls(&d, &addrs(&pairs), 1, 1 << 30));
        assert_eq!(shape, vec![vec![5_000], vec![5_000]]);
    }
}
