//! A [`Store`] wrapper that records every call's latency and failures (see
//! `crate::metrics`), whatever the backend. Adds no behaviour of its own.

use std::sync::Arc;
use std::time::Instant;

use super::{
    BeforeWrite, BitAddr, BitOrder, BitStats, Cell, Change, ClockOffset, RecordFingerprint, RequestKey, StorageError,
    Store,
};
use crate::deduper::Deduper;
use crate::metrics;

/// Wraps a store; calls go straight through and are timed.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
}

impl MeteredStore {
    /// `dedupers_at_start`: how many dedupers the store holds, when the
    /// backend can tell cheaply (the embedded store); starts the deduper gauge,
    /// and the record gauge from what the store loaded (it read 0 after a
    /// restart until the next write: issue 45).
    pub fn new(inner: Arc<dyn Store>, dedupers_at_start: Option<usize>) -> MeteredStore {
        metrics::set_dedupers(dedupers_at_start.unwrap_or(0));
        let store = MeteredStore { inner };
        store.publish_records_held();
        store
    }

    fn publish_records_held(&self) {
        if let Some(n) = self.inner.records_held() {
            metrics::set_records_held(n);
        }
    }

    fn timed<T>(op: &'static str, f: impl FnOnce() -> Result<T, StorageError>) -> Result<T, StorageError> {
        let start = Instant::now();
        let r = f();
        metrics::storage_call(op, r.is_ok(), start.elapsed());
        r
    }
}

impl Store for MeteredStore {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn bit_order(&self) -> BitOrder {
        self.inner.bit_order()
    }

    fn shared_by_replicas(&self) -> bool {
        self.inner.shared_by_replicas()
    }

    fn resized_dedupers(&self) -> Result<Vec<Deduper>, StorageError> {
        self.inner.resized_dedupers()
    }

    fn read_bits(&self, deduper: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        Self::timed("read_bits", || self.inner.read_bits(deduper, bits))
    }

    /// Timed as `read_bits`: it is the same read, answered per entity.
    fn entities_absent(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        k: usize,
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError> {
        Self::timed("read_bits", || self.inner.entities_absent(deduper, bits, k, now_ms))
    }

    fn reads_from_memory(&self) -> bool {
        self.inner.reads_from_memory()
    }

    fn writes_to_memory(&self) -> bool {
        self.inner.writes_to_memory()
    }

    /// Timed as `read_bits` when it answers.
    fn entities_absent_now(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        k: usize,
        now_ms: i64,
    ) -> Option<Result<Vec<bool>, StorageError>> {
        let start = Instant::now();
        let r = self.inner.entities_absent_now(deduper, bits, k, now_ms)?;
        metrics::storage_call("read_bits", r.is_ok(), start.elapsed());
        Some(r)
    }

    /// Timed as `write_bits` when it answers.
    fn write_bits_now(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Option<Result<(), StorageError>> {
        let start = Instant::now();
        let r = self.inner.write_bits_now(deduper, bits, expire_ms)?;
        metrics::storage_call("write_bits", r.is_ok(), start.elapsed());
        Some(r)
    }

    /// Timed as `read_then_write_bits` (`read_and_write_bits`) when it answers.
    fn read_then_write_bits_now(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Option<Result<Vec<Cell>, StorageError>> {
        let start = Instant::now();
        let r = self.inner.read_then_write_bits_now(deduper, bits, expire_ms)?;
        metrics::storage_call("read_and_write_bits", r.is_ok(), start.elapsed());
        Some(r)
    }

    fn write_bits(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        Self::timed("write_bits", || self.inner.write_bits(deduper, bits, expire_ms))
    }

    fn read_and_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        before_write: &mut BeforeWrite<'_>,
    ) -> Result<Vec<Cell>, StorageError> {
        Self::timed("read_and_write_bits", || {
            self.inner.read_and_write_bits(deduper, bits, expire_ms, before_write)
        })
    }

    fn read_then_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Result<Vec<Cell>, StorageError> {
        Self::timed("read_and_write_bits", || {
            self.inner.read_then_write_bits(deduper, bits, expire_ms)
        })
    }

    fn create_deduper(&self, deduper: &Deduper) -> Result<(), StorageError> {
        // ALREADY_EXISTS is an answer, not a storage failure.
        let start = Instant::now();
        let r = self.inner.create_deduper(deduper);
        let failed = matches!(r, Err(StorageError::Unavailable(_) | StorageError::Corrupt(_)));
        metrics::storage_call("create_deduper", !failed, start.elapsed());
        if r.is_ok() {
            metrics::deduper_created();
        }
        r
    }

    fn update_deduper(
        &self,
        client_id: &str,
        name: &str,
        change: &Change<'_>,
    ) -> Result<Option<Deduper>, StorageError> {
        Self::timed("update_deduper", || self.inner.update_deduper(client_id, name, change))
    }

    fn get_deduper(&self, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError> {
        Self::timed("get_deduper", || self.inner.get_deduper(client_id, name))
    }

    fn list_dedupers(
        &self,
        client_id: &str,
        active_only: bool,
    ) -> Result<(Vec<Deduper>, Vec<crate::storage::Unreadable>), StorageError> {
        Self::timed("list_dedupers", || self.inner.list_dedupers(client_id, active_only))
    }

    fn delete_deduper(&self, deduper: &Deduper) -> Result<bool, StorageError> {
        let r = Self::timed("delete_deduper", || self.inner.delete_deduper(deduper));
        if let Ok(true) = r {
            metrics::deduper_deleted();
        }
        r
    }

    fn bit_stats(&self, deduper: &Deduper, now_ms: i64, sample_bits: u64, seed: u64) -> Result<BitStats, StorageError> {
        Self::timed("bit_stats", || self.inner.bit_stats(deduper, now_ms, sample_bits, seed))
    }

    fn remember_request(
        &self,
        key: &RequestKey,
        record: &[u8],
        expire_ms: i64,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        Self::timed("remember_request", || {
            self.inner.remember_request(key, record, expire_ms)
        })
    }

    fn recall_request(&self, key: &RequestKey) -> Result<Option<Vec<u8>>, StorageError> {
        Self::timed("recall_request", || self.inner.recall_request(key))
    }

    fn remember_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        expire_ms: i64,
    ) -> Result<(), StorageError> {
        let r = Self::timed("remember_records", || {
            self.inner.remember_records(deduper, records, expire_ms)
        });
        self.publish_records_held();
        r
    }

    fn recall_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError> {
        Self::timed("recall_records", || self.inner.recall_records(deduper, records, now_ms))
    }

    fn records_held(&self) -> Option<u64> {
        self.inner.records_held()
    }

    fn max_expire_ms(&self) -> i64 {
        self.inner.max_expire_ms()
    }

    fn data_location(&self, deduper: &Deduper) -> Option<String> {
        self.inner.data_location(deduper)
    }

    fn damage(&self) -> Option<String> {
        self.inner.damage()
    }

    fn clock_offset(&self) -> Result<Option<ClockOffset>, StorageError> {
        self.inner.clock_offset()
    }

    fn min_ttl_ms(&self) -> u64 {
        self.inner.min_ttl_ms()
    }

    /// Also republishes the record gauge, so that records forgotten by a
    /// checkpoint's sweep leave it within a health interval.
    fn ping(&self) -> Result<(), StorageError> {
        self.publish_records_held();
        Self::timed("ping", || self.inner.ping())
    }

    fn flush(&self) -> Result<(), StorageError> {
        Self::timed("flush", || self.inner.flush())
    }
}
