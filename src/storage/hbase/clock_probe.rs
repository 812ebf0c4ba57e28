//! This replica's clock against HBase's: a probe cell HBase stamps.
//!
//! One sample: note this replica's time `t0`, `mutateRow` a cell
//! *without* a timestamp (the region server stamps it with its current time
//! `S`), note `t1` when the answer is back, then read the cell back for `S`.
//! HBase stamped it somewhere between `t0` and `t1` on this replica's clock,
//! so the offset (replica minus HBase) is `(t0 + t1) / 2 - S` within
//! `(t1 - t0) / 2 + 1` ms (the 1 ms for both clocks' millisecond
//! resolution). Up to [`SAMPLES`] samples are taken, stopping at one whose
//! error is at most [`GOOD_ERROR_MS`]; the one with the smallest error wins
//! (a slow round trip only widens the error, as in NTP).
//!
//! The probe row lives in the main data table (it always exists; `ping`
//! checks it) under a key no data row can have: data rows start with a
//! hash prefix byte and a decimal shard number, the probe row with `0x00`
//! and `clock-probe|`. Each process has its own row (a random id), so two
//! replicas never read each other's stamp, and its cell carries a TTL of
//! [`PROBE_TTL_MS`], so rows of past processes disappear. All probe rows
//! sort together, so they share one region (one region server's clock).

use hbase_thrift::hbase::THbaseSyncClient;

use super::HbaseStore;
use super::codec;
use super::pool::Retry;
use crate::clock::now_ms;
use crate::contract::layout;
use crate::storage::{ClockOffset, StorageError};

/// Most samples per measurement.
pub const SAMPLES: usize = 3;
/// A sample this precise (ms) ends the measurement early.
pub const GOOD_ERROR_MS: i64 = 10;
/// TTL of a probe cell, ms (an hour).
pub const PROBE_TTL_MS: i64 = 3_600_000;

/// The probe row of the process with id `id`.
pub fn probe_row(id: u64) -> Vec<u8> {
    let mut row = vec![0x00];
    row.extend_from_slice(format!("clock-probe|{id:016x}").as_bytes());
    row
}

fn probe_column() -> Vec<u8> {
    codec::column(layout::DATA_FAMILY, "clock")
}

impl HbaseStore {
    /// One sample (see the module docs). Errors: `Unavailable`, also when
    /// the cell read back is not the one just written.
    fn clock_sample(&self, table: &str, row: &[u8]) -> Result<ClockOffset, StorageError> {
        let t0 = now_ms();
        let stamp = t0.to_be_bytes().to_vec();
        self.tables
            .on_table(&self.pool, table, &format!("mutateRow {table}"), || {
                self.pool.call(Retry::Idempotent, |c| {
                    c.mutate_row(
                        table.as_bytes().to_vec(),
                        row.to_vec(),
                        vec![codec::put(probe_column(), stamp.clone())],
                        codec::ttl_attributes(PROBE_TTL_MS),
                    )
                })
            })?;
        let t1 = now_ms();
        let rows = self
            .pool
            .call(Retry::Idempotent, |c| {
                c.get_row(table.as_bytes().to_vec(), row.to_vec(), codec::Attributes::new())
            })
            .map_err(|e| e.into_storage(&format!("getRow {table}")))?;
        let cell = rows
            .into_iter()
            .next()
            .and_then(|r| r.columns)
            .and_then(|mut c| c.remove(&probe_column()));
        match cell {
            Some(cell) if cell.value.as_deref() == Some(stamp.as_slice()) => {
                let hbase = cell.timestamp.unwrap_or_default();
                Ok(ClockOffset {
                    offset_ms: t0 + (t1 - t0) / 2 - hbase,
                    error_ms: (t1 - t0 + 1) / 2 + 1,
                })
            }
            other => Err(StorageError::Unavailable(format!(
                "clock probe in {table}: the cell read back is not the one just written ({other:?})"
            ))),
        }
    }

    /// The best of up to [`SAMPLES`] samples (module docs).
    pub(super) fn measure_clock(&self) -> Result<ClockOffset, StorageError> {
        self.tables.ensure_data(&self.pool)?;
        let table = layout::data_table(&self.table, &self.farm, false);
        let row = probe_row(self.probe_id);
        let mut best: Option<ClockOffset> = None;
        for _ in 0..SAMPLES {
            let s = self.clock_sample(&table, &row)?;
            if best.is_none_or(|b| s.error_ms < b.error_ms) {
                best = Some(s);
            }
            if s.error_ms <= GOOD_ERROR_MS {
                break;
            }
        }
        Ok(best.expect("at least one sample"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_rows_cannot_be_data_rows() {
        let row = probe_row(0xabc);
        assert_eq!(row, b"\x00clock-probe|0000000000000abc".to_vec());
        // A data row's second byte is a shard number's first digit.
        let data = layout::data_row_key(0, "clock-probe", "x");
        assert!(data[1].is_ascii_digit());
        assert!(!row[1].is_ascii_digit());
    }
}
