//! The table catalogue and the open scanners: everything one HBase cluster
//! plus its Thrift server would hold, kept in memory behind one lock, and
//! optionally its write-ahead log (`wal.rs`): tables note their changes in
//! the shared journal and [`Store::commit`] appends them to the log before
//! the call that made them is answered.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;

use hbase_thrift::hbase::{ColumnDescriptor, TRowResult};

use crate::error::{HError, HResult};
use crate::scanner::{ScanSpec, Scanner};
use crate::schema::{FamilySchema, table_name};
use crate::table::Table;
use crate::wal::{Journal, Record, ReplayStats, Wal};

#[derive(Debug, Default)]
pub(crate) struct Store {
    tables: BTreeMap<Vec<u8>, Table>,
    scanners: HashMap<i32, Scanner>,
    next_scanner_id: i32,
    /// Changes not yet in the log (disabled without a log).
    journal: Journal,
    wal: Option<Wal>,
}

impl Store {
    /// A store persisted in `dir`: replays its log, rewrites the log as a
    /// snapshot when it is more than twice the live state, and logs every
    /// change from then on.
    pub fn open(dir: &Path, fsync: bool) -> io::Result<(Store, ReplayStats)> {
        let mut store = Store::default();
        let (mut wal, mut stats) = Wal::open(dir, fsync, |record| store.apply(record))?;
        let mut snapshot = Vec::new();
        for table in store.tables.values() {
            snapshot.push(Record::CreateTable {
                name: table.name.clone(),
                families: table.families.values().cloned().collect(),
                created_ms: table.created_ms,
            });
            if !table.enabled {
                snapshot.push(Record::SetEnabled {
                    name: table.name.clone(),
                    enabled: false,
                });
            }
            table.snapshot(&mut snapshot);
        }
        stats.compacted = wal.compact_if_larger(&snapshot)?;
        drop(snapshot);
        store.journal = Journal::enabled();
        for table in store.tables.values_mut() {
            table.journal = store.journal.clone();
        }
        store.wal = Some(wal);
        Ok((store, stats))
    }

    /// Replays one logged change.
    fn apply(&mut self, record: Record) -> Result<(), String> {
        fn table<'a>(tables: &'a mut BTreeMap<Vec<u8>, Table>, name: &[u8]) -> Result<&'a mut Table, String> {
            let missing = || format!("table {} does not exist", String::from_utf8_lossy(name));
            tables.get_mut(name).ok_or_else(missing)
        }
        match record {
            Record::CreateTable {
                name,
                families,
                created_ms,
            } => {
                let families = families.into_iter().map(|f| (f.name.clone(), f)).collect();
                self.tables.insert(name.clone(), Table::new(name, families, created_ms));
            }
            Record::DeleteTable { name } => {
                self.tables.remove(&name);
            }
            Record::SetEnabled { name, enabled } => table(&mut self.tables, &name)?.enabled = enabled,
            Record::Put {
                table: t,
                row,
                family,
                qualifier,
                ts,
                value,
                ttl_ms,
                now,
            } => table(&mut self.tables, &t)?.put(&row, &family, &qualifier, ts, value, ttl_ms, now),
            Record::DeleteColumn {
                table: t,
                row,
                family,
                qualifier,
                upto,
            } => table(&mut self.tables, &t)?.delete_column(&row, &family, &qualifier, upto),
            Record::DeleteFamily {
                table: t,
                row,
                family,
                upto,
            } => table(&mut self.tables, &t)?.delete_family(&row, &family, upto),
            Record::MajorCompact { table: t, now } => table(&mut self.tables, &t)?.major_compact(now),
            Record::RestoreFamily {
                table: t,
                row,
                family,
                deleted_upto,
            } => table(&mut self.tables, &t)?.restore_family(&row, &family, deleted_upto),
            Record::RestoreColumn {
                table: t,
                row,
                family,
                qualifier,
                deleted_upto,
                versions,
            } => table(&mut self.tables, &t)?.restore_column(&row, &family, &qualifier, deleted_upto, versions),
        }
        Ok(())
    }

    /// Refuses writes once the log failed (see `wal.rs`).
    pub fn check_log(&self) -> HResult<()> {
        match self.wal.as_ref().and_then(Wal::broken) {
            Some(why) => Err(HError::io(format!(
                "java.io.IOException: hbase-emulator write-ahead log: {why}"
            ))),
            None => Ok(()),
        }
    }

    /// Appends the changes made since the last commit to the log (one frame).
    pub fn commit(&mut self) -> HResult<()> {
        let records = self.journal.take();
        match &mut self.wal {
            Some(wal) if !records.is_empty() => wal.append(&records).map_err(|e| {
                HError::io(format!(
                    "java.io.IOException: hbase-emulator could not write its write-ahead log: {e}"
                ))
            }),
            _ => Ok(()),
        }
    }

    pub fn create_table(&mut self, raw_name: &[u8], descriptors: &[ColumnDescriptor], now: i64) -> HResult<()> {
        let name = table_name(raw_name)?;
        if self.tables.contains_key(&name) {
            return Err(HError::AlreadyExists("table name already in use".into()));
        }
        let mut families = BTreeMap::new();
        for descriptor in descriptors {
            let family = FamilySchema::from_thrift(descriptor)?;
            if families.contains_key(&family.name) {
                return Err(HError::illegal(format!(
                    "java.lang.IllegalArgumentException: Family '{}' already exists so cannot be added",
                    String::from_utf8_lossy(&family.name)
                )));
            }
            families.insert(family.name.clone(), family);
        }
        if families.is_empty() {
            return Err(HError::io(
                "org.apache.hadoop.hbase.DoNotRetryIOException: Table should have at least one column family.",
            ));
        }
        self.journal.record(|| Record::CreateTable {
            name: name.clone(),
            families: families.values().cloned().collect(),
            created_ms: now,
        });
        let mut table = Table::new(name.clone(), families, now);
        table.journal = self.journal.clone();
        self.tables.insert(name, table);
        Ok(())
    }

    /// Like `Admin.deleteTable`: the table must exist and be disabled.
    pub fn delete_table(&mut self, raw_name: &[u8]) -> HResult<()> {
        let name = table_name(raw_name)?;
        let table = self
            .tables
            .get(&name)
            // HBase's handler throws a plain IOException here: canRetry is set.
            .ok_or_else(|| HError::Io {
                message: "java.io.IOException: table does not exist".into(),
                retry: true,
            })?;
        if table.enabled {
            return Err(HError::io(format!(
                "org.apache.hadoop.hbase.TableNotDisabledException: {}",
                String::from_utf8_lossy(&name)
            )));
        }
        self.tables.remove(&name);
        self.journal.record(|| Record::DeleteTable { name });
        Ok(())
    }

    pub fn set_enabled(&mut self, raw_name: &[u8], enabled: bool) -> HResult<()> {
        let table = self.any_table_mut(raw_name)?;
        if table.enabled == enabled {
            let exception = if enabled {
                "TableNotDisabledException"
            } else {
                "TableNotEnabledException"
            };
            return Err(HError::io(format!(
                "org.apache.hadoop.hbase.{exception}: {}",
                String::from_utf8_lossy(&table.name)
            )));
        }
        table.enabled = enabled;
        let name = table.name.clone();
        self.journal.record(|| Record::SetEnabled { name, enabled });
        Ok(())
    }

    pub fn table_names(&self) -> Vec<Vec<u8>> {
        self.tables.keys().cloned().collect()
    }

    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.tables.values()
    }

    /// A table in any state (admin calls).
    pub fn any_table(&self, raw_name: &[u8]) -> HResult<&Table> {
        let name = table_name(raw_name)?;
        self.tables.get(&name).ok_or_else(|| HError::table_not_found(&name))
    }

    fn any_table_mut(&mut self, raw_name: &[u8]) -> HResult<&mut Table> {
        let name = table_name(raw_name)?;
        self.tables.get_mut(&name).ok_or_else(|| HError::table_not_found(&name))
    }

    /// A table that can serve reads and writes.
    pub fn table(&self, raw_name: &[u8]) -> HResult<&Table> {
        let table = self.any_table(raw_name)?;
        check_enabled(table)?;
        Ok(table)
    }

    pub fn table_mut(&mut self, raw_name: &[u8]) -> HResult<&mut Table> {
        let table = self.any_table_mut(raw_name)?;
        check_enabled(table)?;
        Ok(table)
    }

    /// Like HBase's handler, a scanner on a missing table opens; its first
    /// `scannerGet*` answers `TableNotFoundException`.
    pub fn open_scanner(&mut self, raw_name: &[u8], spec: ScanSpec) -> HResult<i32> {
        let name = match self.table(raw_name) {
            Ok(table) => {
                table.check_families(spec.selection.families())?;
                table.name.clone()
            }
            Err(_) if !self.tables.contains_key(&table_name(raw_name)?) => table_name(raw_name)?,
            Err(e) => return Err(e),
        };
        let scanner = Scanner::new(name, spec);
        // Ids count up from 0 like the Java handler's, and are never reused.
        let id = self.next_scanner_id;
        self.next_scanner_id = self.next_scanner_id.wrapping_add(1);
        self.scanners.insert(id, scanner);
        Ok(id)
    }

    pub fn scanner_next(&mut self, id: i32, n: usize, now: i64) -> HResult<Vec<TRowResult>> {
        let scanner = self
            .scanners
            .get_mut(&id)
            .ok_or_else(|| HError::illegal("scanner ID is invalid"))?;
        let table = self
            .tables
            .get(&scanner.table)
            .ok_or_else(|| HError::table_not_found(&scanner.table))?;
        check_enabled(table)?;
        Ok(scanner.next_rows(table, n, now))
    }

    pub fn close_scanner(&mut self, id: i32) -> HResult<()> {
        self.scanners
            .remove(&id)
            .map(drop)
            .ok_or_else(|| HError::illegal("scanner ID is invalid"))
    }

    /// Scanners live in the Thrift server process: they vanish when it stops.
    pub fn drop_scanners(&mut self) {
        self.scanners.clear();
    }

    pub fn major_compact(&mut self, raw_name: &[u8], now: i64) -> HResult<()> {
        self.any_table_mut(raw_name)?.major_compact(now);
        Ok(())
    }

    /// Forgets every table and scanner (test isolation); logged as deletes.
    pub fn clear(&mut self) {
        for name in self.tables.keys() {
            self.journal.record(|| Record::DeleteTable { name: name.clone() });
        }
        self.tables.clear();
        self.scanners.clear();
    }
}

fn check_enabled(table: &Table) -> HResult<()> {
    if table.enabled {
        Ok(())
    } else {
        Err(HError::io(format!(
            "org.apache.hadoop.hbase.TableNotEnabledException: {} is disabled.",
            String::from_utf8_lossy(&table.name)
        )))
    }
}
