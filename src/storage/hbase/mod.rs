//! The HBase backend: the contract's layout in HBase tables, reached through
//! HBase's Thrift1 server (`hbase-thrift` crate). Only this module knows
//! about Thrift.
//!
//! # Tables
//! Data: `storage.table` for global dedupers and `<table>_<farm>` for
//! DC-level ones, family `S` (one version, GZ, ROWCOL bloom); one row per
//! shard ([`layout::data_row_key`]), one cell per bit. Meta: one table per
//! client, `<client_id>_dedupers`, family `C`; see `codec.rs` for the
//! columns and their Java `Bytes.toBytes` encodings and `claim.rs` for how
//! creation stays exclusive.
//!
//! # Writes and the never-backwards rule
//! An add of a request is one `mutateRowsTs` over every touched shard row
//! (several, in parallel, past `max_request_bytes`, about 20,000 cells):
//! each bit's cell `S:<bit>#ttl` gets the expiry time (8-byte big-endian ms)
//! as its value **and as its cell timestamp**, with the mutation attribute
//! `_ttl` = `expiry_seconds * 1000` (8-byte big-endian ms), written to the WAL.
//! HBase keeps the version with the highest timestamp whatever the order the
//! writes arrive in, and reads return only that version, so a bit's expiry
//! never moves backwards - across requests, replicas and retries - without
//! reading first. Consequences, all intended:
//! - reads must use the plain `getRows*` calls, which read the time range
//!   [0, `Long.MAX`) and so see these future-timestamped cells (the `...Ts`
//!   variants would hide them);
//! - the cell TTL check `timestamp + ttl < now` becomes `expire + expiry <
//!   now`: HBase drops a cell `expiry_seconds` after it expired, never
//!   before (reads compare the value with the clock and do not rely on that);
//! - the family TTL is left at forever: a family TTL is measured from the
//!   timestamp too, so any value would also only ever delay removal;
//! - `deleteAll` deletes "as of now" and would miss these cells; Solus never
//!   deletes bits. Other writers of the same table (a legacy service stamping
//!   cells with the current time) lose against ours when their expiry is later
//!   but their timestamp earlier: run one writer kind per table.
//!
//! # Reads
//! All `k` bits of every entity of a request - with their legacy `S:<bit>`
//! markers when the deduper may hold them (`read_legacy_markers`) - each
//! shard row asked for its own columns only: one `getRowWithColumns` per
//! row (sliced past `max_cells_per_read` columns), in parallel; small
//! requests share one `getRowsWithColumns` (see `data.rs` for why). Never
//! whole rows. Concurrent reads of one deduper share one such read per
//! round, as do concurrent writes one write (`combine.rs`).
//!
//! # AddIfAbsent across replicas
//! `read_and_write_bits` reads, then writes: between the two another request
//! (this replica or another) can add the same entity, and both would answer
//! "absent". With `storage.hbase.add_if_absent_guard` (default on) a guard
//! cell per deduper (in a narrow guard row beside the shard rows), whose
//! slots claim the round's rows with one `checkAndPut` before the write and
//! release them with one after, closes that window: a request answers only
//! from a read no other writer overtook, reading a contended row again
//! (`guard.rs`; one guard read and two `checkAndPut`s per round, cost
//! measured in docs/hbase.md). Nothing
//! is ever lost either way: every write lands and the max expiry wins.
//!
//! # Failures
//! Every failure is `StorageError::Unavailable` with the call and HBase's
//! message (`pool.rs`), shortened to its first line (`java_error.rs`: HBase
//! sends whole Java stack traces); idempotent calls are retried within the configured
//! budget. If HBase is down at start-up the store still opens; tables are
//! checked as soon as it answers, and `ping` (used by the health watcher)
//! fails until then. A table HBase reports missing at runtime is re-created
//! (with `create_tables`) and the call repeated once (`tables.rs`), `ping`
//! included, so health recovers without a restart.

mod claim;
mod clock_probe;
mod codec;
mod combine;
pub mod config;
mod data;
mod gssapi;
mod guard;
mod java_error;
mod kerberos;
mod lifecycle;
mod meta;
mod pool;
mod records;
mod row_locks;
mod sasl;
mod tables;

use std::collections::BTreeSet;

use hbase_thrift::hbase::{THbaseSyncClient, TRowResult};

use self::codec::Attributes;
pub use self::codec::{GENERATIONS_V1, TTL_ATTRIBUTE};
pub use self::config::{HbaseConfig, KerberosConfig, LegacyMarkers, Protocol, Qop, Transport};
use self::data::ReadGroup;
pub use self::lifecycle::DELETE_SLACK_MS;
use self::pool::{Pool, Retry};
use self::tables::Tables;
pub use self::tables::{data_family, meta_family};
use super::{
    BeforeWrite, BitAddr, BitStats, Cell, Change, ClockOffset, RecordFingerprint, RequestKey, StorageError, Store,
};
use crate::clock::now_ms;
use crate::contract::layout;
use crate::deduper::{Deduper, Level};

/// The HBase store; see the module docs.
pub struct HbaseStore {
    config: HbaseConfig,
    table: String,
    farm: String,
    pool: Pool,
    tables: Tables,
    /// This process's clock probe row (`clock_probe.rs`).
    probe_id: u64,
    /// Rows held by guarded `AddIfAbsent`s of this process (`row_locks.rs`).
    row_locks: row_locks::RowLocks,
    /// Guard claims this process's ended requests left held (`guard.rs`).
    guard_orphans: guard::Orphans,
    /// Guarded `AddIfAbsent`s of this process waiting per deduper (`combine.rs`).
    combiner: combine::Combiner,
    /// Reads (`read_bits`) of this process waiting per deduper.
    read_rounds: combine::Combiner,
    /// Writes (`write_bits`) of this process waiting per deduper.
    write_rounds: combine::Combiner,
}

impl HbaseStore {
    /// Connects lazily and checks the data tables (`table` and
    /// `<table>_<farm>`), creating missing ones when `create_tables` is set.
    /// An unreachable or slow HBase is not an error here: when a check fails
    /// in a way waiting may cure ([`tables::TableCheckError::is_transient`]:
    /// no connection, a timeout - a `createTable` slower than
    /// `read_timeout_ms` just after HBase restarted - or an `IOError` HBase
    /// marks retryable), the store opens anyway and the health probe
    /// (`ping`) checks and creates the tables again until HBase answers.
    /// Errors: invalid settings; `Unavailable` when HBase answers that a
    /// data table is missing and may not be created (`create_tables =
    /// false`), lacks its family, or may not be created (an `IOError` HBase
    /// marks final, e.g. `AccessDeniedException`).
    pub fn open(config: HbaseConfig, table: &str, farm: &str) -> Result<HbaseStore, StorageError> {
        config.validate().map_err(StorageError::Unavailable)?;
        let kerberos = if config.kerberos.enabled {
            Some(std::sync::Arc::new(
                kerberos::Kerberos::new(&config).map_err(StorageError::Unavailable)?,
            ))
        } else {
            None
        };
        let data_tables = vec![
            layout::data_table(table, farm, false),
            layout::data_table(table, farm, true),
        ];
        let store = HbaseStore {
            pool: Pool::new(&config, kerberos),
            tables: Tables::new(data_tables, config.create_tables),
            config,
            table: table.to_string(),
            farm: farm.to_string(),
            probe_id: rand::random(),
            row_locks: row_locks::RowLocks::default(),
            guard_orphans: guard::Orphans::default(),
            combiner: combine::Combiner::default(),
            read_rounds: combine::Combiner::default(),
            write_rounds: combine::Combiner::eager(),
        };
        match store.pool.call(Retry::Once, |c| c.get_table_names()) {
            Ok(_) => match store.tables.check_data(&store.pool) {
                Ok(()) => {}
                Err(e) if e.is_transient() => tracing::warn!(
                    error = %StorageError::from(e),
                    "HBase answered at start-up but could not check or create the data tables in time; serving \
                     NOT_SERVING, and the health probe tries again until it can"
                ),
                Err(e) => return Err(e.into()),
            },
            Err(e) => tracing::warn!(
                error = %e.into_storage("getTableNames"),
                "HBase unreachable (or refusing this client: see the error) at start-up; serving NOT_SERVING until it answers"
            ),
        }
        Ok(store)
    }

    /// Calls one request may run at once ([`parallel_calls`]).
    fn parallel_calls(&self) -> usize {
        parallel_calls(self.config.pool_size)
    }

    /// The data table of `d`.
    fn data_table(&self, d: &Deduper) -> String {
        layout::data_table(&self.table, &self.farm, d.level == Level::Dc)
    }

    /// What requests served together (`combine.rs`) must share: the same
    /// rows, i.e. one data table, client, name and geometry.
    fn rows_key(&self, d: &Deduper) -> String {
        format!(
            "{}\u{0}{}\u{0}{}\u{0}{:?}",
            self.data_table(d),
            d.client_id,
            d.name,
            d.geometry
        )
    }

    /// One read call: `getRowWithColumns` for one row, `getRowsWithColumns`
    /// for several.
    fn read_group(&self, table: &str, group: &ReadGroup) -> Result<Vec<TRowResult>, StorageError> {
        let name = if group.rows.len() == 1 {
            "getRowWithColumns"
        } else {
            "getRowsWithColumns"
        };
        let what = format!("{name} {table}");
        self.tables.on_table(&self.pool, table, &what, || {
            self.pool.call(Retry::Idempotent, |c| match group.rows.as_slice() {
                [row] => c.get_row_with_columns(
                    table.as_bytes().to_vec(),
                    row.clone(),
                    group.columns.clone(),
                    Attributes::new(),
                ),
                rows => c.get_rows_with_columns(
                    table.as_bytes().to_vec(),
                    rows.to_vec(),
                    group.columns.clone(),
                    Attributes::new(),
                ),
            })
        })
    }

    fn read(&self, d: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        Ok(self.read_with_guard(d, bits, false)?.0)
    }

    /// The cells of `bits`, and (with `guard`) the value of `d`'s
    /// `AddIfAbsent` guard cell, read first (one call), so no later than
    /// the bits (`guard.rs`); without `guard`, an empty value.
    fn read_with_guard(
        &self,
        d: &Deduper,
        bits: &[BitAddr],
        guard: bool,
    ) -> Result<(Vec<Cell>, Vec<u8>), StorageError> {
        let mut cells = vec![Cell::default(); bits.len()];
        if bits.is_empty() {
            return Ok((cells, Vec::new()));
        }
        self.tables.ensure_data(&self.pool)?;
        let table = self.data_table(d);
        let guard_value = if guard { self.read_guard(&table, d)? } else { Vec::new() };
        let limits = data::CallLimits {
            cells: self.config.max_cells_per_read,
            bytes: self.config.max_request_bytes,
        };
        let legacy = self.config.read_legacy_markers.read_for(d);
        let groups = data::plan_reads(d, bits, legacy, limits);
        tracing::trace!(
            calls = groups.len(),
            legacy,
            asked = groups.iter().map(ReadGroup::asked).sum::<u64>(),
            bits = bits.len(),
            "HBase read plan"
        );
        let results: Vec<TRowResult> = in_parallel(&groups, self.parallel_calls(), OnError::Stop, |g| {
            self.read_group(&table, g)
        })?
        .into_iter()
        .flatten()
        .collect();
        data::decode_rows(d, bits, &results, &mut cells)?;
        Ok((cells, guard_value))
    }

    /// The value of `d`'s guard cell (one call; empty when there is none).
    fn read_guard(&self, table: &str, d: &Deduper) -> Result<Vec<u8>, StorageError> {
        let group = ReadGroup {
            rows: vec![guard_row(d)],
            columns: vec![guard::column()],
        };
        Ok(guard::value(&self.read_group(table, &group)?))
    }

    /// AddIfAbsent with the guard (`guard.rs`), alone: a round of one
    /// (`guarded_round`). `before_write` sees the cells as read (a request
    /// id's answer is recorded from them): a retry of a request whose release
    /// was refused repeats that first answer (see docs/hbase.md).
    fn guarded_read_and_write(
        &self,
        d: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        before_write: &mut BeforeWrite<'_>,
    ) -> Result<Vec<Cell>, StorageError> {
        let member = combine::Member {
            bits: bits.to_vec(),
            expire_ms,
        };
        let mut cells = self.guarded_round(d, std::slice::from_ref(&member), Some(before_write))?;
        Ok(cells.pop().unwrap_or_default())
    }

    fn write(&self, d: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        self.write_many(d, &[(bits, expire_ms)])
    }

    /// Writes each `(bits, expire_ms)`: its own `mutateRowsTs` calls (one
    /// timestamp per call), at most [`MAX_PARALLEL_WRITES`] at once.
    fn write_many(&self, d: &Deduper, writes: &[(&[BitAddr], i64)]) -> Result<(), StorageError> {
        if writes.iter().all(|(bits, _)| bits.is_empty()) {
            return Ok(());
        }
        self.tables.ensure_data(&self.pool)?;
        let table = self.data_table(d);
        let calls: Vec<_> = writes
            .iter()
            .filter(|(bits, _)| !bits.is_empty())
            .flat_map(|&(bits, expire_ms)| {
                data::write_calls(d, bits, expire_ms, self.config.max_request_bytes)
                    .into_iter()
                    .map(move |c| (c, expire_ms))
            })
            .collect();
        let ttl_ms = i64::try_from(d.expiry_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
        let what = format!("mutateRowsTs {table}");
        in_parallel(
            &calls,
            parallel_writes(self.config.pool_size),
            OnError::Continue,
            |(batches, expire_ms)| {
                let cells = batches.iter().map(|b| b.mutations.as_ref().map_or(0, Vec::len)).sum();
                let read_ms = data::write_read_timeout_ms(self.config.read_timeout_ms, cells);
                // Idempotent: a replayed put carries the same timestamp and value.
                self.tables.on_table(&self.pool, &table, &what, || {
                    self.pool.call_with_read_timeout(Retry::Idempotent, read_ms, |c| {
                        c.mutate_rows_ts(
                            table.as_bytes().to_vec(),
                            batches.clone(),
                            *expire_ms,
                            codec::ttl_attributes(ttl_ms),
                        )
                    })
                })
            },
        )?;
        Ok(())
    }

    /// The bits of a round's `members`, grouped by expiry (`combine::writes`).
    fn write_members(&self, d: &Deduper, members: &[combine::Member]) -> Result<(), StorageError> {
        let merged = combine::writes(members);
        let writes: Vec<(&[BitAddr], i64)> = merged.iter().map(|(bits, e)| (bits.as_ref(), *e)).collect();
        self.write_many(d, &writes)
    }

    /// One round of guarded `AddIfAbsent`s of `d` (`combine.rs`): hold the
    /// rows in this process, read the union of the members' bits with the
    /// guards, claim every row (`guard::claim`: rows claimed by another
    /// replica are waited for and read again), (for a round of one)
    /// `before_write` with the cells read, write the members' bits (grouped
    /// by expiry, `combine::writes`), release the rows. Each member's cells
    /// as if the members had run in order; the bits of a row whose release
    /// failed (taken over after [`guard::CLAIM_LEASE`]) come back as set.
    fn guarded_round(
        &self,
        d: &Deduper,
        members: &[combine::Member],
        before_write: Option<&mut BeforeWrite<'_>>,
    ) -> Result<Vec<Vec<Cell>>, StorageError> {
        let table = self.data_table(d);
        let all = combine::union(members);
        let shards: Vec<u32> = all
            .iter()
            .map(|a| a.shard)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let rows: Vec<Vec<u8>> = shards
            .iter()
            .map(|&s| layout::data_row_key(s, &d.client_id, &d.name))
            .collect();
        // Held through the round: requests of this process take turns here
        // instead of contending for the claims in HBase.
        let _held = self.row_locks.lock(&table, &rows);
        let ttl_ms = i64::try_from(d.expiry_seconds.saturating_mul(1000))
            .unwrap_or(i64::MAX)
            .saturating_add(guard::TTL_SLACK.as_millis() as i64);
        let guard_row = guard_row(d);
        // Claims an earlier request of this process left held: released first.
        let cell = GuardCell {
            store: self,
            d,
            table: &table,
            guard_row: &guard_row,
            ttl_ms,
        };
        self.guard_orphans.settle(&table, &guard_row, &cell);
        let orphans = self.guard_orphans.tokens(&table, &guard_row);
        let (cells, first) = self.read_with_guard(d, &all, true)?;
        // `all` is sorted by shard: each row's bits are one run of it.
        let ranges = shards
            .iter()
            .map(|&s| all.partition_point(|a| a.shard < s)..all.partition_point(|a| a.shard <= s))
            .collect();
        let mut guarded = GuardedRows {
            cell,
            all: &all,
            ranges,
            cells,
        };
        let timing = guard::Timing::default();
        let mut left_held = Vec::new();
        let claim = guard::claim(&mut guarded, &shards, first, timing, &orphans, &mut left_held);
        self.guard_orphans.add(&table, &guard_row, &shards, &left_held);
        let claim = claim?;
        let mut answers = combine::answers(members, &all, &guarded.cells);
        let written = (|| {
            if let (Some(before_write), [mine]) = (before_write, answers.as_slice()) {
                before_write(mine)?;
            }
            self.write_members(d, members)
        })();
        if let Err(e) = written {
            // Bits may have landed: released under this claim's token, which
            // no one read the bits under, so the next claimant reads again.
            if !guard::give_back(&guarded, &shards, &[claim.token]) {
                self.guard_orphans.add(&table, &guard_row, &shards, &[claim.token]);
            }
            return Err(e);
        }
        let lost: BTreeSet<u32> = shards
            .iter()
            .zip(guard::release(&guarded, &shards, &claim, timing))
            .filter(|(_, kept)| !kept)
            .map(|(s, _)| *s)
            .collect();
        if !lost.is_empty() {
            // Rows taken over are settled at once (no slot of ours); rows
            // whose release did not land are released by the next round.
            self.guard_orphans.add(&table, &guard_row, &shards, &[claim.token]);
        }
        if !lost.is_empty() {
            tracing::warn!(
                rows = lost.len(),
                requests = members.len(),
                "AddIfAbsent rows taken over (held past the guard lease) or not confirmed after the write: \
                 those rows answer present"
            );
        }
        for (m, cells) in members.iter().zip(&mut answers) {
            for (cell, a) in cells.iter_mut().zip(&m.bits) {
                if lost.contains(&a.shard) {
                    *cell = Cell {
                        expire_ms: Some(i64::MAX),
                        legacy: None,
                    };
                }
            }
        }
        Ok(answers)
    }
}

/// A deduper's guard cell: read and swapped alone.
struct GuardCell<'a> {
    store: &'a HbaseStore,
    d: &'a Deduper,
    table: &'a str,
    /// The deduper's guard row key.
    guard_row: &'a [u8],
    /// `_ttl` of the guard cell (ms).
    ttl_ms: i64,
}

impl guard::Rows for GuardCell<'_> {
    fn peek(&self) -> Result<Vec<u8>, StorageError> {
        self.store.read_guard(self.table, self.d)
    }

    /// No rows of its own: the guard cell alone.
    fn reread(&mut self, _which: &[usize]) -> Result<Vec<u8>, StorageError> {
        self.peek()
    }

    fn swap(&self, expected: &[u8], new: &[u8]) -> Result<bool, StorageError> {
        let s = self.store;
        guard::swap(
            &s.pool,
            &s.tables,
            self.table,
            self.guard_row,
            expected,
            new,
            self.ttl_ms,
        )
    }
}

/// The rows of one guarded round as `guard::claim` sees them.
struct GuardedRows<'a> {
    cell: GuardCell<'a>,
    /// The round's bits, sorted; `cells[j]` is `all[j]`.
    all: &'a [BitAddr],
    /// Each row's bits within `all` (row `i` is the round's `i`-th shard).
    ranges: Vec<std::ops::Range<usize>>,
    cells: Vec<Cell>,
}

impl guard::Rows for GuardedRows<'_> {
    fn peek(&self) -> Result<Vec<u8>, StorageError> {
        self.cell.peek()
    }

    fn reread(&mut self, which: &[usize]) -> Result<Vec<u8>, StorageError> {
        let bits: Vec<BitAddr> = which
            .iter()
            .flat_map(|&i| self.all[self.ranges[i].clone()].iter().copied())
            .collect();
        let (cells, value) = self.cell.store.read_with_guard(self.cell.d, &bits, true)?;
        let mut from = 0;
        for &i in which {
            let range = self.ranges[i].clone();
            let to = from + range.len();
            self.cells[range].copy_from_slice(&cells[from..to]);
            from = to;
        }
        Ok(value)
    }

    fn swap(&self, expected: &[u8], new: &[u8]) -> Result<bool, StorageError> {
        self.cell.swap(expected, new)
    }
}

/// The guard row of `d` (`guard.rs`).
fn guard_row(d: &Deduper) -> Vec<u8> {
    layout::guard_row_key(&d.client_id, &d.name)
}

/// Most HBase calls one request runs at once (each on its own pooled connection).
const MAX_PARALLEL_CALLS: usize = 8;

/// Most `mutateRowsTs` calls one request runs at once: its writes land in
/// the same region's memstore and contend there (Add at batch 10,000 on
/// real HBase: 1.12x-1.15x of HBase's client with 2, 1.06x-1.11x with 8; see
/// docs/hbase.md "Two write calls at once").
const MAX_PARALLEL_WRITES: usize = 2;

/// Calls one request may run at once with a pool of `pool_size`
/// connections: at most half the pool (and [`MAX_PARALLEL_CALLS`]), so one
/// big request split into many calls leaves connections - and the Thrift
/// server's threads, one per connection - to the others.
fn parallel_calls(pool_size: u32) -> usize {
    (pool_size as usize / 2).clamp(1, MAX_PARALLEL_CALLS)
}

/// `mutateRowsTs` calls one request may run at once: [`parallel_calls`],
/// at most [`MAX_PARALLEL_WRITES`].
fn parallel_writes(pool_size: u32) -> usize {
    parallel_calls(pool_size).min(MAX_PARALLEL_WRITES)
}

/// What [`in_parallel`] does with the calls not started yet once one failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnError {
    /// Make them anyway (writes: every write that lands is progress).
    Continue,
    /// Skip them (reads: the request fails anyway, and an overloaded HBase
    /// gets no more of its work).
    Stop,
}

/// Runs `f` on every item: directly for one (the usual case), else on up to
/// `threads` threads, each taking its own pooled connection, so a request
/// split into many calls cannot spawn a thread per call. The first error
/// wins; calls already running finish, the ones not started yet are made
/// or skipped by `on_error` (every call here is idempotent, so a retry of
/// the request redoes them).
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    on_error: OnError,
    f: impl Fn(&T) -> Result<R, StorageError> + Sync,
) -> Result<Vec<R>, StorageError> {
    if let [one] = items {
        return Ok(vec![f(one)?]);
    }
    let failed = std::sync::atomic::AtomicBool::new(false);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<R, StorageError>>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let caller = crate::storage::caller::current();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..items.len().min(threads.max(1)))
            .map(|_| {
                let caller = caller.clone();
                s.spawn(|| {
                    crate::storage::caller::run_for(caller, || {
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(item) = items.get(i) else { break };
                            if on_error == OnError::Stop && failed.load(std::sync::atomic::Ordering::Relaxed) {
                                break;
                            }
                            let r = f(item);
                            if r.is_err() {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                            }
                            *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                        }
                    })
                })
            })
            .collect();
        // A panicked worker leaves its item without a result: reported below.
        workers.into_iter().for_each(|w| drop(w.join()));
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner().unwrap_or_else(|p| p.into_inner()).unwrap_or_else(|| {
                let why = if failed.load(std::sync::atomic::Ordering::Relaxed) {
                    "HBase call not made: an earlier call of the request failed"
                } else {
                    "HBase call thread panicked"
                };
                Err(StorageError::Unavailable(why.into()))
            })
        })
        .collect()
}

impl Store for HbaseStore {
    fn kind(&self) -> &'static str {
        "hbase"
    }

    /// The reads of `deduper` waiting in this process are served in rounds
    /// (`combine.rs`): one `getRowWithColumns` per touched shard row for the
    /// union of their bits (sliced past `max_cells_per_read` columns or
    /// `max_request_bytes`; small rounds share one `getRowsWithColumns`), in
    /// parallel. Errors: `Unavailable`; `Corrupt` for a cell value of the
    /// wrong length.
    fn read_bits(&self, deduper: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError> {
        let member = combine::Member {
            bits: bits.to_vec(),
            expire_ms: 0,
        };
        let key = format!(
            "{}\u{0}{}",
            self.rows_key(deduper),
            self.config.read_legacy_markers.read_for(deduper)
        );
        self.read_rounds.serve(&key, member, |members| {
            let all = combine::union(members);
            let cells = self.read(deduper, &all)?;
            Ok(combine::each(members, &all, &cells))
        })
    }

    /// The writes of `deduper` waiting in this process are served in rounds
    /// (`combine.rs`): one `mutateRowsTs` per group of expiries within
    /// [`combine::MERGE_WITHIN_MS`] (cell timestamp = the group's latest
    /// `expire_ms`, ms since the Unix epoch; calls of whole rows past
    /// `data::WRITE_CELLS` cells or `max_request_bytes`). Errors:
    /// `Unavailable`.
    fn write_bits(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError> {
        let member = combine::Member {
            bits: bits.to_vec(),
            expire_ms,
        };
        self.write_rounds.serve(&self.rows_key(deduper), member, |members| {
            self.write_members(deduper, members)?;
            Ok(vec![Vec::new(); members.len()])
        })?;
        Ok(())
    }

    /// Read, `before_write`, write; with `add_if_absent_guard` each touched
    /// row claimed before the write and released after: see the module docs and `guard.rs`.
    fn read_and_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        before_write: &mut BeforeWrite<'_>,
    ) -> Result<Vec<Cell>, StorageError> {
        if self.config.add_if_absent_guard {
            return self.guarded_read_and_write(deduper, bits, expire_ms, before_write);
        }
        let cells = self.read(deduper, bits)?;
        before_write(&cells)?;
        self.write(deduper, bits, expire_ms)?;
        Ok(cells)
    }

    /// With `add_if_absent_guard`, the requests of one deduper waiting for
    /// each other's rows are served in rounds (`combine.rs`): each answered
    /// as if they had run one after another. Errors: `Unavailable`.
    fn read_then_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Result<Vec<Cell>, StorageError> {
        if !self.config.add_if_absent_guard {
            return self.read_and_write_bits(deduper, bits, expire_ms, &mut |_: &[Cell]| Ok(()));
        }
        let member = combine::Member {
            bits: bits.to_vec(),
            expire_ms,
        };
        self.combiner.serve(&self.rows_key(deduper), member, |members| {
            self.guarded_round(deduper, members, None)
        })
    }

    /// Errors besides the claim's (`meta.rs`): `Precondition` while a
    /// deleted namesake's delete markers would hide the bits (`lifecycle.rs`).
    /// The tombstone is checked before the claim (no claim left behind in
    /// the common case) and again once the claim is held, before the config
    /// is written: a delete that ran between the first check and the claim
    /// (its tombstone lands before it empties the row this claim then took)
    /// would otherwise leave a new config whose bits its markers hide.
    fn create_deduper(&self, deduper: &Deduper) -> Result<(), StorageError> {
        self.tables.ensure_meta(&self.pool, &deduper.client_id)?;
        self.check_tombstone(deduper, now_ms())?;
        claim::create(&self.pool, &self.tables, deduper, &|| {
            self.check_tombstone(deduper, now_ms())
        })
    }

    /// Shard rows by geometry, then the config row: see `lifecycle.rs`.
    fn delete_deduper(&self, deduper: &Deduper) -> Result<bool, StorageError> {
        self.delete(deduper)
    }

    /// A uniform sample of `sample_bits` positions, read like any bits
    /// (`lifecycle.rs`): `sample_bits` cells read, split and in parallel.
    fn bit_stats(&self, deduper: &Deduper, now_ms: i64, sample_bits: u64, seed: u64) -> Result<BitStats, StorageError> {
        self.sample(deduper, now_ms, sample_bits, seed)
    }

    /// Compare-and-set on the `ver` cell, retried (see `meta.rs`). A change
    /// that records a generation needs nothing more (its rows appear with
    /// its first write); one that drops generations first deletes their
    /// rows, and only then stores the config (`lifecycle.rs`). Such a drop
    /// waits (nothing stored, the config as read returned; the next
    /// retirement pass tries again) while the deduper is inactive or the
    /// generation's `retire_at_ms` is not past on this replica's clock
    /// before the read: what keeps delete markers off a later namesake's
    /// bits.
    fn update_deduper(
        &self,
        client_id: &str,
        name: &str,
        change: &Change<'_>,
    ) -> Result<Option<Deduper>, StorageError> {
        meta::update(
            &self.pool,
            &self.tables,
            client_id,
            name,
            change,
            now_ms(),
            &|old, changed, read_at| self.retire_filters(old, changed, read_at),
        )
    }

    /// Generations: `<name>~g<N>` rows beside the deduper's own, the list
    /// in the meta row's `C:ver` (`codec.rs`, `lifecycle.rs`). A scan of every client's meta table (`*_dedupers`, found with
    /// `getTableNames`) for configs with generations.
    fn resized_dedupers(&self) -> Result<Vec<Deduper>, StorageError> {
        meta::resized(&self.pool, &self.tables)
    }

    /// A `checkAndPut` row in the client's meta table (see `meta.rs`).
    fn remember_request(
        &self,
        key: &RequestKey,
        record: &[u8],
        expire_ms: i64,
    ) -> Result<Option<Vec<u8>>, StorageError> {
        meta::remember_request(&self.pool, key, record, expire_ms, now_ms())
    }

    fn recall_request(&self, key: &RequestKey) -> Result<Option<Vec<u8>>, StorageError> {
        meta::recall_request(&self.pool, key, now_ms())
    }

    /// Plain puts of `record|...` rows in the client's meta table (`records.rs`).
    fn remember_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        expire_ms: i64,
    ) -> Result<(), StorageError> {
        records::remember(
            &self.pool,
            deduper,
            records,
            expire_ms,
            now_ms(),
            self.config.max_request_bytes,
        )
    }

    fn recall_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError> {
        records::recall(&self.pool, deduper, records, now_ms, self.config.max_request_bytes)
    }

    /// The data table (`storage.table`, or `<table>_<farm>` for DC level).
    fn data_location(&self, deduper: &Deduper) -> Option<String> {
        Some(self.data_table(deduper))
    }

    fn get_deduper(&self, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError> {
        meta::get(&self.pool, &self.tables, client_id, name)
    }

    fn list_dedupers(
        &self,
        client_id: &str,
        active_only: bool,
    ) -> Result<(Vec<Deduper>, Vec<crate::storage::Unreadable>), StorageError> {
        meta::list(&self.pool, &self.tables, client_id, active_only)
    }

    /// A probe cell stamped by HBase, written and read back: see
    /// `clock_probe.rs`. Two Thrift calls per sample, up to three samples.
    fn clock_offset(&self) -> Result<Option<ClockOffset>, StorageError> {
        self.measure_clock().map(Some)
    }

    /// Checks the data tables if not done yet, then one `isTableEnabled` of
    /// the main data table; a data table HBase lost is re-created (with
    /// `create_tables`) and the probe repeated. Errors: `Unavailable`
    /// (unreachable, table missing and not re-created, or disabled).
    fn ping(&self) -> Result<(), StorageError> {
        self.tables.ensure_data(&self.pool)?;
        let table = layout::data_table(&self.table, &self.farm, false);
        let enabled = self
            .tables
            .on_table(&self.pool, &table, &format!("isTableEnabled {table}"), || {
                self.pool
                    .call(Retry::Idempotent, |c| c.is_table_enabled(table.as_bytes().to_vec()))
            })?;
        if enabled {
            Ok(())
        } else {
            Err(StorageError::Unavailable(format!("HBase table {table} is disabled")))
        }
    }

    /// Nothing to do: every write was in HBase's WAL before it was acknowledged.
    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn in_parallel_bounds_threads_keeps_order_and_reports_errors() {
        let (running, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let items: Vec<u32> = (0..1000).collect();
        let out = in_parallel(&items, MAX_PARALLEL_CALLS, OnError::Continue, |&i| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_micros(50));
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(i * 2)
        })
        .unwrap();
        assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let peak = peak.load(Ordering::SeqCst);
        assert!((2..=MAX_PARALLEL_CALLS).contains(&peak), "peak {peak} concurrent calls");
        let made = AtomicUsize::new(0);
        let failed = in_parallel(&items, MAX_PARALLEL_CALLS, OnError::Stop, |&i| {
            made.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_micros(50));
            if i % 300 == 7 {
                Err(StorageError::Unavailable(format!("call {i}")))
            } else {
                Ok(i)
            }
        });
        assert!(matches!(failed, Err(StorageError::Unavailable(m)) if m == "call 7"));
        // Calls not started when one failed are not made.
        let made = made.load(Ordering::SeqCst);
        assert!((8..=7 + 2 * MAX_PARALLEL_CALLS).contains(&made), "{made} calls made");
        let made = AtomicUsize::new(0);
        let failed = in_parallel(&items, MAX_PARALLEL_CALLS, OnError::Continue, |&i| {
            made.fetch_add(1, Ordering::SeqCst);
            if i == 7 {
                Err(StorageError::Unavailable("7".into()))
            } else {
                Ok(i)
            }
        });
        assert!(failed.is_err());
        assert_eq!(made.load(Ordering::SeqCst), 1000, "writes all made");
    }

    #[test]
    fn a_request_writes_at_most_two_calls_at_once() {
        assert_eq!([1, 2, 4, 16, 64].map(parallel_writes), [1, 1, 2, 2, 2]);
    }

    #[test]
    fn a_request_takes_at_most_half_the_pool() {
        assert_eq!(
            [1, 2, 4, 16, 64].map(parallel_calls),
            [1, 1, 2, MAX_PARALLEL_CALLS, MAX_PARALLEL_CALLS]
        );
        let (running, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
        in_parallel(&[0u8; 40], parallel_calls(4), OnError::Continue, |_| {
            peak.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_micros(200));
            running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        let peak = peak.load(Ordering::SeqCst);
        assert!((1..=2).contains(&peak), "peak {peak}");
    }
}
