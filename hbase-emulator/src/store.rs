//! The table catalogue and the open scanners: everything one HBase cluster
//! plus its Thrift server would hold, kept in memory behind one lock.

use std::collections::{BTreeMap, HashMap};

use hbase_thrift::hbase::{ColumnDescriptor, TRowResult};

use crate::error::{HError, HResult};
use crate::scanner::{ScanSpec, Scanner};
use crate::schema::{FamilySchema, table_name};
use crate::table::Table;

#[derive(Debug, Default)]
pub(crate) struct Store {
    tables: BTreeMap<Vec<u8>, Table>,
    scanners: HashMap<i32, Scanner>,
    next_scanner_id: i32,
}

impl Store {
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
        self.tables.insert(name.clone(), Table::new(name, families, now));
        Ok(())
    }

    /// Like `Admin.deleteTable`: the table must exist and be disabled.
    pub fn delete_table(&mut self, raw_name: &[u8]) -> HResult<()> {
        let name = table_name(raw_name)?;
        let table = self
            .tables
            .get(&name)
            .ok_or_else(|| HError::io("java.io.IOException: table does not exist"))?;
        if table.enabled {
            return Err(HError::io(format!(
                "org.apache.hadoop.hbase.TableNotDisabledException: {}",
                String::from_utf8_lossy(&name)
            )));
        }
        self.tables.remove(&name);
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

    pub fn open_scanner(&mut self, raw_name: &[u8], spec: ScanSpec) -> HResult<i32> {
        let table = self.table(raw_name)?;
        table.check_families(spec.selection.families())?;
        let scanner = Scanner::new(table.name.clone(), spec);
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

    /// Forgets every table and scanner (test isolation).
    pub fn clear(&mut self) {
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
