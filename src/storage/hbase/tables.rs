//! Table checks and creation: the data tables at start-up (or as soon as
//! HBase is reachable), a client's meta table on its first deduper, and any
//! of them again when HBase says at runtime that it does not exist (dropped
//! by an operator, or an emulator restarted without its data):
//! [`Tables::on_table`] forgets that the table was checked, re-creates it
//! with the same descriptor (with `create_tables`) and runs the call once
//! more.
//!
//! Thrift1 `createTable` cannot pre-split, so tables it creates start as one
//! region; production clusters should create them with
//! `deploy/hbase/create-tables.hbase` (256 one-byte split points) and may set
//! `create_tables = false` so a missing table is reported, not created.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use hbase_thrift::hbase::{ColumnDescriptor, THbaseSyncClient};

use super::pool::{HbaseError, Pool, Retry};
use crate::contract::layout;
use crate::storage::StorageError;

/// A family descriptor with every field set: the generated `Default` has
/// `maxVersions 0`, empty compression and bloom names, which HBase rejects.
fn family(name: &str, compression: &str, bloom: &str, in_memory: bool) -> ColumnDescriptor {
    ColumnDescriptor::new(
        format!("{name}:").into_bytes(),
        1,                       // maxVersions: only the newest cell counts
        compression.to_string(), // compression
        in_memory,
        bloom.to_string(),
        0,        // bloomFilterVectorSize (unused by HBase >= 0.92)
        0,        // bloomFilterNbHashes (unused)
        true,     // blockCacheEnabled
        i32::MAX, // timeToLive in s: HConstants.FOREVER; cell TTLs do the expiring
    )
}

/// Data family `S`: one version (the highest timestamp = the latest expiry),
/// GZ, and a row+column bloom filter: reads ask for explicit columns, most
/// of them absent, and the bloom answers those without reading blocks.
pub fn data_family() -> ColumnDescriptor {
    family(layout::DATA_FAMILY, "GZ", "ROWCOL", false)
}

/// Meta family `C`: tiny and read on every config cache miss.
pub fn meta_family() -> ColumnDescriptor {
    family(layout::META_FAMILY, "NONE", "ROW", true)
}

/// Why checking (or creating) a table failed.
#[derive(Debug)]
pub enum TableCheckError {
    /// A Thrift call failed: `what` names it.
    Call { what: String, error: HbaseError },
    /// HBase answered, and its tables are not what the settings need (a
    /// table missing with `create_tables = false`, or without its family):
    /// nothing changes that but an operator.
    Setup(String),
}

impl TableCheckError {
    /// Whether waiting may cure it: no connection, no answer in time (a
    /// `createTable` slower than `read_timeout_ms` just after HBase
    /// restarted), an `IOError` HBase marks `canRetry` (a master still
    /// initializing), or a table HBase listed and then did not find (being
    /// created or dropped meanwhile). Not a setup error, nor an `IOError`
    /// HBase marks final (`AccessDeniedException`, a refused descriptor).
    pub fn is_transient(&self) -> bool {
        match self {
            TableCheckError::Call { error, .. } => {
                error.retryable()
                    || matches!(error, HbaseError::Io { message, .. } if message.contains("TableNotFoundException"))
            }
            TableCheckError::Setup(_) => false,
        }
    }
}

impl From<TableCheckError> for StorageError {
    fn from(e: TableCheckError) -> StorageError {
        match e {
            TableCheckError::Call { what, error } => error.into_storage(&what),
            TableCheckError::Setup(why) => StorageError::Unavailable(why),
        }
    }
}

/// Which tables are known to exist.
pub struct Tables {
    /// Data tables (global and this farm's) that must exist.
    data: Vec<String>,
    create: bool,
    data_ready: AtomicBool,
    meta_ready: Mutex<HashSet<String>>,
    /// Tables this process has seen exist: creating one again is a
    /// re-creation, logged as a warning.
    seen: Mutex<HashSet<String>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tables {
    pub fn new(data: Vec<String>, create: bool) -> Tables {
        Tables {
            data,
            create,
            data_ready: AtomicBool::new(false),
            meta_ready: Mutex::new(HashSet::new()),
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// Runs `call`, a Thrift call on `table` (`what` names it in errors).
    /// When HBase answers that the table does not exist, the table is
    /// checked again and re-created (see [`Tables::recover`]) and `call`
    /// runs once more. Errors: `Unavailable` with the call, or naming the
    /// missing table and `create_tables` when it may not be re-created.
    pub fn on_table<T>(
        &self,
        pool: &Pool,
        table: &str,
        what: &str,
        mut call: impl FnMut() -> Result<T, HbaseError>,
    ) -> Result<T, StorageError> {
        match call() {
            Err(e) if e.is_table_not_found(table) => {
                self.recover(pool, table)?;
                call().map_err(|e| e.into_storage(what))
            }
            other => other.map_err(|e| e.into_storage(what)),
        }
    }

    /// HBase said `table` does not exist: forgets that it was checked, then
    /// checks it again (every data table at once for a data table), which
    /// re-creates it with its usual descriptor when `create_tables` is on.
    pub fn recover(&self, pool: &Pool, table: &str) -> Result<(), StorageError> {
        self.forget(table);
        // It was used as existing: creating it now is a re-creation.
        locked(&self.seen).insert(table.to_string());
        if self.data.iter().any(|t| t == table) {
            self.ensure_data(pool)
        } else {
            self.ensure_meta_table(pool, table)
        }
    }

    /// Forgets that `table` was checked, so the next use checks it again.
    pub fn forget(&self, table: &str) {
        if self.data.iter().any(|t| t == table) {
            self.data_ready.store(false, Ordering::Release);
        } else {
            locked(&self.meta_ready).remove(table);
        }
    }

    /// Checks the data tables once (one `getTableNames`, plus a
    /// `getColumnDescriptors` and maybe a `createTable` per table the first
    /// time). Errors: `Unavailable` when HBase cannot be reached or a table
    /// is missing and may not be created, or lacks family `S`.
    pub fn ensure_data(&self, pool: &Pool) -> Result<(), StorageError> {
        self.check_data(pool).map_err(StorageError::from)
    }

    /// [`Tables::ensure_data`], telling a transient failure from a setup
    /// error ([`TableCheckError::is_transient`]): what start-up needs to
    /// decide between serving `NOT_SERVING` and stopping.
    pub fn check_data(&self, pool: &Pool) -> Result<(), TableCheckError> {
        if self.data_ready.load(Ordering::Acquire) {
            return Ok(());
        }
        for table in &self.data {
            self.ensure(pool, table, layout::DATA_FAMILY, data_family)?;
        }
        self.data_ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Makes sure `<client_id>_dedupers` exists before the client's first
    /// deduper is written. Same errors as [`Tables::ensure_data`].
    pub fn ensure_meta(&self, pool: &Pool, client_id: &str) -> Result<(), StorageError> {
        self.ensure_meta_table(pool, &layout::meta_table(client_id))
    }

    fn ensure_meta_table(&self, pool: &Pool, table: &str) -> Result<(), StorageError> {
        if locked(&self.meta_ready).contains(table) {
            return Ok(());
        }
        self.ensure(pool, table, layout::META_FAMILY, meta_family)
            .map_err(StorageError::from)?;
        locked(&self.meta_ready).insert(table.to_string());
        Ok(())
    }

    fn ensure(
        &self,
        pool: &Pool,
        table: &str,
        family_name: &str,
        descriptor: fn() -> ColumnDescriptor,
    ) -> Result<(), TableCheckError> {
        let call = |what: String| move |error: HbaseError| TableCheckError::Call { what, error };
        let names = pool
            .call(Retry::Idempotent, |c| c.get_table_names())
            .map_err(call("getTableNames".into()))?;
        if names.iter().any(|n| n.as_slice() == table.as_bytes()) {
            let families = pool
                .call(Retry::Idempotent, |c| c.get_column_descriptors(table.into()))
                .map_err(call(format!("getColumnDescriptors {table}")))?;
            let wanted = format!("{family_name}:");
            if !families.keys().any(|k| k.as_slice() == wanted.as_bytes()) {
                return Err(TableCheckError::Setup(format!(
                    "HBase table {table} exists but has no column family {family_name}; \
                     recreate it with deploy/hbase/create-tables.hbase"
                )));
            }
            locked(&self.seen).insert(table.to_string());
            return Ok(());
        }
        let again = locked(&self.seen).contains(table);
        if !self.create {
            let gone = if again { " any more (dropped?)" } else { "" };
            return Err(TableCheckError::Setup(format!(
                "HBase table {table} does not exist{gone} and storage.hbase.create_tables is false; \
                 create it with deploy/hbase/create-tables.hbase"
            )));
        }
        let created = match pool.call(Retry::Once, |c| c.create_table(table.into(), vec![descriptor()])) {
            Ok(()) => true,
            // Another replica created it first: just as good.
            Err(HbaseError::AlreadyExists(_)) => false,
            Err(e) => return Err(call(format!("createTable {table}"))(e)),
        };
        locked(&self.seen).insert(table.to_string());
        if created && again {
            tracing::warn!(
                table,
                "HBase table disappeared (dropped, or HBase lost it); re-created it empty \
                 (one region; see deploy/hbase for pre-split tables)"
            );
        } else if created {
            tracing::info!(
                table,
                "created HBase table (one region; see deploy/hbase for pre-split tables)"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Start-up stays up for what waiting may cure, and stops for a setup error.
    #[test]
    fn transient_table_check_failures_are_told_from_setup_errors() {
        let call = |error| TableCheckError::Call {
            what: "createTable solus_deduper".into(),
            error,
        };
        let io = |message: &str, retry| HbaseError::Io {
            message: message.into(),
            retry,
        };
        for transient in [
            call(HbaseError::TimedOut("no answer within 5000 ms".into())),
            call(HbaseError::Connection("Connection refused".into())),
            call(io(
                "org.apache.hadoop.hbase.PleaseHoldException: Master is initializing",
                true,
            )),
            call(io(
                "org.apache.hadoop.hbase.TableNotFoundException: solus_deduper",
                false,
            )),
        ] {
            assert!(transient.is_transient(), "{transient:?}");
        }
        for setup in [
            call(io(
                "org.apache.hadoop.hbase.security.AccessDeniedException: Insufficient permissions",
                false,
            )),
            call(HbaseError::IllegalArgument("bad descriptor".into())),
            TableCheckError::Setup("HBase table solus_deduper does not exist and create_tables is false".into()),
        ] {
            assert!(!setup.is_transient(), "{setup:?}");
        }
        let e = StorageError::from(call(HbaseError::TimedOut("no answer within 5000 ms".into())));
        assert_eq!(
            e.to_string(),
            "storage unavailable: HBase createTable solus_deduper failed: no answer within 5000 ms"
        );
    }

    #[test]
    fn descriptors_fill_every_field() {
        let d = data_family();
        assert_eq!(d.name.as_deref(), Some(&b"S:"[..]));
        assert_eq!(d.max_versions, Some(1));
        assert_eq!(d.compression.as_deref(), Some("GZ"));
        assert_eq!(d.bloom_filter_type.as_deref(), Some("ROWCOL"));
        assert_eq!(d.time_to_live, Some(i32::MAX));
        let m = meta_family();
        assert_eq!(m.name.as_deref(), Some(&b"C:"[..]));
        for f in [d, m] {
            assert!(
                f.in_memory.is_some()
                    && f.bloom_filter_vector_size.is_some()
                    && f.bloom_filter_nb_hashes.is_some()
                    && f.block_cache_enabled.is_some()
            );
        }
    }
}
