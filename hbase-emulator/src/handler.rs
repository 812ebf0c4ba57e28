//! The generated `HbaseSyncHandler` trait, implemented over the store.
//!
//! Each method only unpacks its arguments and picks the exception set its IDL
//! declaration allows; the work lives in `reads.rs`, `writes.rs` and the
//! store. Calls the emulator does not model answer with an `IOError` that
//! says so (the trait has no default bodies, so every method is here).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hbase_thrift::hbase::{
    BatchMutation, Bytes, ColumnDescriptor, HbaseSyncHandler, Mutation, ScannerID, TAccessControlEntity, TAppend,
    TCell, TIncrement, TRegionInfo, TRowResult, TScan, TThriftServerType, Text,
};

use crate::clock::Clock;
use crate::error::Declared::{Io, IoIllegal, IoIllegalExists};
use crate::error::{HError, HResult, IntoThrift, unsupported};
use crate::reads::{prefix_scan_spec, scan_spec, simple_scan_spec};
use crate::store::Store;
use crate::table::{LATEST, Table, TimeRange};

type Attrs = BTreeMap<Text, Text>;

pub(crate) struct Handler {
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    /// The Thrift server's address, reported as the region server's.
    addr: SocketAddr,
}

impl Handler {
    pub fn new(store: Arc<Mutex<Store>>, clock: Arc<dyn Clock>, addr: SocketAddr) -> Self {
        Self { store, clock, addr }
    }

    /// A panic in one call must not wedge every later call.
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a mutating call: whatever it changed (even when it then fails,
    /// like a partly applied `mutateRows`) is in the write-ahead log, if
    /// any, before the call is answered.
    pub(crate) fn write<T>(&self, call: impl FnOnce(&mut Store) -> HResult<T>) -> HResult<T> {
        let mut store = self.store();
        store.check_log()?;
        let result = call(&mut store);
        store.commit()?;
        result
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The table's single region, spanning every row key.
    fn region(&self, table: &Table) -> TRegionInfo {
        let id = table.created_ms;
        let name = String::from_utf8_lossy(&table.name);
        let encoded = format!("{:016x}{:016x}", fnv1a(&table.name), fnv1a(&id.to_be_bytes()));
        TRegionInfo::new(
            Vec::new(),
            Vec::new(),
            id,
            format!("{name},,{id}.{encoded}.").into_bytes(),
            1,
            self.addr.ip().to_string().into_bytes(),
            i32::from(self.addr.port()),
        )
    }
}

/// `Mutation.checkRow`: row keys are 1..=32767 bytes.
pub(crate) fn check_row(row: &[u8]) -> Result<(), String> {
    if row.is_empty() {
        Err("java.lang.IllegalArgumentException: Row length is 0".into())
    } else if row.len() > usize::from(i16::MAX.unsigned_abs()) {
        Err(format!(
            "java.lang.IllegalArgumentException: Row length {} is > 32767",
            row.len()
        ))
    } else {
        Ok(())
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl HbaseSyncHandler for Handler {
    fn handle_enable_table(&self, table_name: Bytes) -> thrift::Result<()> {
        self.write(|store| store.set_enabled(&table_name, true)).declared(Io)
    }

    fn handle_disable_table(&self, table_name: Bytes) -> thrift::Result<()> {
        self.write(|store| store.set_enabled(&table_name, false)).declared(Io)
    }

    fn handle_is_table_enabled(&self, table_name: Bytes) -> thrift::Result<bool> {
        self.store().any_table(&table_name).map(|t| t.enabled).declared(Io)
    }

    /// Compactions are no-ops except that a major one drops delete markers.
    fn handle_compact(&self, table_name_or_region_name: Bytes) -> thrift::Result<()> {
        self.store()
            .any_table(&table_name_or_region_name)
            .map(drop)
            .declared(Io)
    }

    fn handle_major_compact(&self, table_name_or_region_name: Bytes) -> thrift::Result<()> {
        let now = self.now();
        self.write(|store| store.major_compact(&table_name_or_region_name, now))
            .declared(Io)
    }

    fn handle_get_table_names(&self) -> thrift::Result<Vec<Text>> {
        Ok(self.store().table_names())
    }

    fn handle_get_table_names_with_is_table_enabled(&self) -> thrift::Result<BTreeMap<Text, bool>> {
        let store = self.store();
        Ok(store.tables().map(|t| (t.name.clone(), t.enabled)).collect())
    }

    fn handle_get_column_descriptors(&self, table_name: Text) -> thrift::Result<BTreeMap<Text, ColumnDescriptor>> {
        let store = self.store();
        let table = store.any_table(&table_name).declared(Io)?;
        let descriptors = table.families.values().map(|f| {
            let cd = f.to_thrift();
            (cd.name.clone().unwrap_or_default(), cd)
        });
        Ok(descriptors.collect())
    }

    /// A missing table has no regions (an empty list, not an error).
    fn handle_get_table_regions(&self, table_name: Text) -> thrift::Result<Vec<TRegionInfo>> {
        match self.store().any_table(&table_name) {
            Ok(table) => Ok(vec![self.region(table)]),
            Err(HError::Io { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into_thrift(Io)),
        }
    }

    fn handle_create_table(&self, table_name: Text, column_families: Vec<ColumnDescriptor>) -> thrift::Result<()> {
        let now = self.now();
        self.write(|store| store.create_table(&table_name, &column_families, now))
            .declared(IoIllegalExists)
    }

    fn handle_delete_table(&self, table_name: Text) -> thrift::Result<()> {
        self.write(|store| store.delete_table(&table_name)).declared(Io)
    }

    fn handle_get(&self, table_name: Text, row: Text, column: Text, _: Attrs) -> thrift::Result<Vec<TCell>> {
        self.read_cells(&table_name, &row, &column, 1, TimeRange::ALL)
            .declared(Io)
    }

    fn handle_get_ver(
        &self,
        table_name: Text,
        row: Text,
        column: Text,
        num_versions: i32,
        _: Attrs,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(&table_name, &row, &column, num_versions, TimeRange::ALL)
            .declared(Io)
    }

    fn handle_get_ver_ts(
        &self,
        table_name: Text,
        row: Text,
        column: Text,
        timestamp: i64,
        num_versions: i32,
        _: Attrs,
    ) -> thrift::Result<Vec<TCell>> {
        TimeRange::before(timestamp)
            .and_then(|range| self.read_cells(&table_name, &row, &column, num_versions, range))
            .declared(Io)
    }

    fn handle_get_row(&self, table_name: Text, row: Text, _: Attrs) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, &[row], &[], TimeRange::ALL).declared(Io)
    }

    fn handle_get_row_with_columns(
        &self,
        table_name: Text,
        row: Text,
        columns: Vec<Text>,
        _: Attrs,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, &[row], &columns, TimeRange::ALL)
            .declared(Io)
    }

    fn handle_get_row_ts(
        &self,
        table_name: Text,
        row: Text,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<Vec<TRowResult>> {
        TimeRange::before(timestamp)
            .and_then(|range| self.read_rows(&table_name, &[row], &[], range))
            .declared(Io)
    }

    fn handle_get_row_with_columns_ts(
        &self,
        table_name: Text,
        row: Text,
        columns: Vec<Text>,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<Vec<TRowResult>> {
        TimeRange::before(timestamp)
            .and_then(|range| self.read_rows(&table_name, &[row], &columns, range))
            .declared(Io)
    }

    fn handle_get_rows(&self, table_name: Text, rows: Vec<Text>, _: Attrs) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, &rows, &[], TimeRange::ALL).declared(Io)
    }

    fn handle_get_rows_with_columns(
        &self,
        table_name: Text,
        rows: Vec<Text>,
        columns: Vec<Text>,
        _: Attrs,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, &rows, &columns, TimeRange::ALL)
            .declared(Io)
    }

    fn handle_get_rows_ts(
        &self,
        table_name: Text,
        rows: Vec<Text>,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<Vec<TRowResult>> {
        TimeRange::before(timestamp)
            .and_then(|range| self.read_rows(&table_name, &rows, &[], range))
            .declared(Io)
    }

    fn handle_get_rows_with_columns_ts(
        &self,
        table_name: Text,
        rows: Vec<Text>,
        columns: Vec<Text>,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<Vec<TRowResult>> {
        TimeRange::before(timestamp)
            .and_then(|range| self.read_rows(&table_name, &rows, &columns, range))
            .declared(Io)
    }

    fn handle_mutate_row(
        &self,
        table_name: Text,
        row: Text,
        mutations: Vec<Mutation>,
        attributes: Attrs,
    ) -> thrift::Result<()> {
        self.mutate_row(&table_name, row, mutations, LATEST, &attributes)
            .declared(IoIllegal)
    }

    fn handle_mutate_row_ts(
        &self,
        table_name: Text,
        row: Text,
        mutations: Vec<Mutation>,
        timestamp: i64,
        attributes: Attrs,
    ) -> thrift::Result<()> {
        self.mutate_row(&table_name, row, mutations, timestamp, &attributes)
            .declared(IoIllegal)
    }

    fn handle_mutate_rows(
        &self,
        table_name: Text,
        row_batches: Vec<BatchMutation>,
        attributes: Attrs,
    ) -> thrift::Result<()> {
        self.mutate_rows(&table_name, row_batches, LATEST, &attributes)
            .declared(IoIllegal)
    }

    fn handle_mutate_rows_ts(
        &self,
        table_name: Text,
        row_batches: Vec<BatchMutation>,
        timestamp: i64,
        attributes: Attrs,
    ) -> thrift::Result<()> {
        self.mutate_rows(&table_name, row_batches, timestamp, &attributes)
            .declared(IoIllegal)
    }

    fn handle_atomic_increment(&self, table_name: Text, row: Text, column: Text, value: i64) -> thrift::Result<i64> {
        self.atomic_increment(&table_name, &row, &column, value)
            .declared(IoIllegal)
    }

    fn handle_delete_all(&self, table_name: Text, row: Text, column: Text, _: Attrs) -> thrift::Result<()> {
        self.delete_cells(&table_name, &row, Some(&column), LATEST).declared(Io)
    }

    fn handle_delete_all_ts(
        &self,
        table_name: Text,
        row: Text,
        column: Text,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<()> {
        self.delete_cells(&table_name, &row, Some(&column), timestamp)
            .declared(Io)
    }

    fn handle_delete_all_row(&self, table_name: Text, row: Text, _: Attrs) -> thrift::Result<()> {
        self.delete_cells(&table_name, &row, None, LATEST).declared(Io)
    }

    fn handle_increment(&self, increment: TIncrement) -> thrift::Result<()> {
        self.increment(increment).declared(Io)
    }

    fn handle_increment_rows(&self, increments: Vec<TIncrement>) -> thrift::Result<()> {
        increments.into_iter().try_for_each(|i| self.increment(i)).declared(Io)
    }

    fn handle_delete_all_row_ts(&self, table_name: Text, row: Text, timestamp: i64, _: Attrs) -> thrift::Result<()> {
        self.delete_cells(&table_name, &row, None, timestamp).declared(Io)
    }

    fn handle_scanner_open_with_scan(&self, table_name: Text, scan: TScan, _: Attrs) -> thrift::Result<ScannerID> {
        scan_spec(scan)
            .and_then(|spec| self.open_scanner(&table_name, spec))
            .declared(Io)
    }

    fn handle_scanner_open(
        &self,
        table_name: Text,
        start_row: Text,
        columns: Vec<Text>,
        _: Attrs,
    ) -> thrift::Result<ScannerID> {
        simple_scan_spec(start_row, Vec::new(), &columns, None)
            .and_then(|spec| self.open_scanner(&table_name, spec))
            .declared(Io)
    }

    fn handle_scanner_open_with_stop(
        &self,
        table_name: Text,
        start_row: Text,
        stop_row: Text,
        columns: Vec<Text>,
        _: Attrs,
    ) -> thrift::Result<ScannerID> {
        simple_scan_spec(start_row, stop_row, &columns, None)
            .and_then(|spec| self.open_scanner(&table_name, spec))
            .declared(Io)
    }

    fn handle_scanner_open_with_prefix(
        &self,
        table_name: Text,
        start_and_prefix: Text,
        columns: Vec<Text>,
        _: Attrs,
    ) -> thrift::Result<ScannerID> {
        let spec = prefix_scan_spec(start_and_prefix, &columns);
        self.open_scanner(&table_name, spec).declared(Io)
    }

    fn handle_scanner_open_ts(
        &self,
        table_name: Text,
        start_row: Text,
        columns: Vec<Text>,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<ScannerID> {
        simple_scan_spec(start_row, Vec::new(), &columns, Some(timestamp))
            .and_then(|spec| self.open_scanner(&table_name, spec))
            .declared(Io)
    }

    fn handle_scanner_open_with_stop_ts(
        &self,
        table_name: Text,
        start_row: Text,
        stop_row: Text,
        columns: Vec<Text>,
        timestamp: i64,
        _: Attrs,
    ) -> thrift::Result<ScannerID> {
        simple_scan_spec(start_row, stop_row, &columns, Some(timestamp))
            .and_then(|spec| self.open_scanner(&table_name, spec))
            .declared(Io)
    }

    fn handle_scanner_get(&self, id: ScannerID) -> thrift::Result<Vec<TRowResult>> {
        self.scanner_next(id, 1).declared(IoIllegal)
    }

    fn handle_scanner_get_list(&self, id: ScannerID, nb_rows: i32) -> thrift::Result<Vec<TRowResult>> {
        self.scanner_next(id, nb_rows).declared(IoIllegal)
    }

    fn handle_scanner_close(&self, id: ScannerID) -> thrift::Result<()> {
        self.store().close_scanner(id).declared(IoIllegal)
    }

    fn handle_get_region_info(&self, _row: Text) -> thrift::Result<TRegionInfo> {
        Err(unsupported("getRegionInfo"))
    }

    fn handle_append(&self, append: TAppend) -> thrift::Result<Vec<TCell>> {
        self.append(append).declared(Io)
    }

    fn handle_check_and_put(
        &self,
        table_name: Text,
        row: Text,
        column: Text,
        value: Text,
        mput: Mutation,
        attributes: Attrs,
    ) -> thrift::Result<bool> {
        self.check_and_put(&table_name, &row, &column, &value, mput, &attributes)
            .declared(IoIllegal)
    }

    fn handle_get_thrift_server_type(&self) -> thrift::Result<TThriftServerType> {
        Ok(TThriftServerType::ONE)
    }

    fn handle_get_cluster_id(&self) -> thrift::Result<String> {
        Ok("hbase-emulator".to_owned())
    }

    fn handle_grant(&self, _info: TAccessControlEntity) -> thrift::Result<bool> {
        Err(unsupported("grant"))
    }

    fn handle_revoke(&self, _info: TAccessControlEntity) -> thrift::Result<bool> {
        Err(unsupported("revoke"))
    }
}
