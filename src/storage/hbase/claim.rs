//! Creating a deduper: claims in the meta row, decided by HBase alone.
//!
//! Thrift1's `checkAndPut` compares one cell and puts one cell, so a config
//! cannot be written whole and conditionally. A create therefore runs a
//! small state machine on one cell, `C:claim`, every transition a
//! `checkAndPut` on that cell's exact current value:
//!
//! 1. **Claim the name**: `checkAndPut(C:name, expected empty, put name)`;
//!    exactly one of the creators racing on a fresh row wins (the others
//!    go to 3).
//! 2. **Hold a token**: `checkAndPut(C:claim, expected empty, put token)`,
//!    16 random bytes of this create. Losing it means another create took
//!    the claim over meanwhile: `Unavailable`.
//! 3. **Meeting another's claim**: read the row; a committed config is
//!    `AlreadyExists`. Otherwise put `C:seen` without a timestamp, so HBase
//!    stamps it with its own current time, and read the row again: the
//!    claim's age is `seen - claim`, both timestamps from the clock of the
//!    region server holding that row. This replica's clock is never
//!    consulted, so a claim younger than [`CLAIM_TAKEOVER_MS`] is never
//!    taken, whatever this replica's clock says. Old enough, the claim is
//!    taken over with `checkAndPut(C:claim, expected = the value read, put
//!    our token)`: of several takers of one claim exactly one wins, the
//!    others answer `Unavailable`.
//! 4. **Write the config**: read our token's cell back for its HBase
//!    timestamp `T`, then one `mutateRowTs` at `T` of every config column
//!    (and deletes at `T` of the optional ones this config lacks). A later
//!    taker's `T` is larger (its claim was stamped at least
//!    [`CLAIM_TAKEOVER_MS`] later by HBase), so whatever an overtaken
//!    creator still writes afterwards is hidden behind the taker's versions.
//! 5. **Commit**: `checkAndPut(C:claim, expected = our token, put
//!    CLAIM_DONE)`. Only the current holder can commit, and once committed
//!    no takeover can match the claim any more: of all creators of a name
//!    exactly one is answered OK, and the config stored is its config.
//!    A lost commit answers `Unavailable` (a retry then finds the winner's
//!    config: `AlreadyExists`), and so does a commit whose answer was lost
//!    on the way back (not retried blindly: the retry finds it committed).
//!
//! Readers treat a row with a token in `C:claim` as not created yet
//! (`codec::decode_deduper`); rows written before claims had a `C:claim`
//! cell have none and read as before. Every replica sharing the tables must
//! run this protocol: an older replica's takeover writes unconditionally.

use hbase_thrift::hbase::{Mutation, TCell, THbaseSyncClient};

use super::codec::{self, Attributes, meta_col};
use super::meta::read_row;
use super::pool::{Pool, Retry};
use super::tables::Tables;
use crate::contract::layout;
use crate::deduper::Deduper;
use crate::storage::StorageError;

/// How old (by HBase's timestamps, ms) an unfinished claim must be before
/// another create may take it over.
pub const CLAIM_TAKEOVER_MS: i64 = 30_000;

type Row = std::collections::BTreeMap<Vec<u8>, TCell>;

/// The cells of one meta row this protocol works on.
struct MetaRow<'a> {
    pool: &'a Pool,
    tables: &'a Tables,
    d: &'a Deduper,
    table: String,
    row: Vec<u8>,
}

fn col(qualifier: &str) -> Vec<u8> {
    codec::column(layout::META_FAMILY, qualifier)
}

fn value<'r>(row: &'r Row, qualifier: &str) -> Option<&'r [u8]> {
    row.get(&col(qualifier)).and_then(|c| c.value.as_deref())
}

fn timestamp(row: &Row, qualifier: &str) -> Option<i64> {
    row.get(&col(qualifier)).and_then(|c| c.timestamp)
}

impl MetaRow<'_> {
    fn read(&self) -> Result<Row, StorageError> {
        Ok(read_row(self.pool, self.tables, &self.d.client_id, &self.d.name)?.unwrap_or_default())
    }

    /// One `checkAndPut` of `C:claim` (never retried blindly: a lost answer
    /// is settled by what the next read finds).
    fn swap_claim(&self, expected: &[u8], new: &[u8]) -> Result<bool, StorageError> {
        self.pool
            .call(Retry::Once, |c| {
                c.check_and_put(
                    self.table.clone().into_bytes(),
                    self.row.clone(),
                    col(meta_col::CLAIM),
                    expected.to_vec(),
                    codec::put(col(meta_col::CLAIM), new.to_vec()),
                    Attributes::new(),
                )
            })
            .map_err(|e| e.into_storage(&format!("checkAndPut {}", self.table)))
    }

    /// HBase's current time in this row: the timestamp HBase gives a cell
    /// put now, read back together with the rest of the row.
    fn read_with_hbase_now(&self) -> Result<(Row, i64), StorageError> {
        self.pool
            .call(Retry::Idempotent, |c| {
                c.mutate_row(
                    self.table.clone().into_bytes(),
                    self.row.clone(),
                    vec![codec::put(col(meta_col::SEEN), Vec::new())],
                    Attributes::new(),
                )
            })
            .map_err(|e| e.into_storage(&format!("mutateRow {}", self.table)))?;
        let row = self.read()?;
        let seen = timestamp(&row, meta_col::SEEN).ok_or_else(|| {
            StorageError::Unavailable(format!("{}: the C:seen cell just put is not there; retry", self.table))
        })?;
        Ok((row, seen))
    }

    fn busy(&self, why: &str) -> StorageError {
        StorageError::Unavailable(format!(
            "deduper {:?} of client {:?} {why}; retry in a few seconds",
            self.d.name, self.d.client_id
        ))
    }

    /// Steps 4 and 5 with our `token` in `C:claim`; `before_config` runs
    /// first (an error leaves the claim to be taken over, nothing written).
    fn write_and_commit(&self, token: &[u8], before_config: BeforeConfig<'_>) -> Result<(), StorageError> {
        let row = self.read()?;
        let claimed_at = match (value(&row, meta_col::CLAIM), timestamp(&row, meta_col::CLAIM)) {
            (Some(v), Some(ts)) if v == token => ts,
            _ => return Err(self.busy("was taken over by another create")),
        };
        before_config()?;
        // The expiry high-water mark first (its own cell timestamp): a create
        // cut short here leaves a claim, never a config without its mark.
        super::meta::put_max_expiry(self.pool, self.tables, self.d)?;
        let mut mutations: Vec<Mutation> = codec::deduper_mutations(self.d);
        mutations.extend(codec::absent_columns(self.d));
        self.pool
            .call(Retry::Idempotent, |c| {
                c.mutate_row_ts(
                    self.table.clone().into_bytes(),
                    self.row.clone(),
                    mutations.clone(),
                    claimed_at,
                    Attributes::new(),
                )
            })
            .map_err(|e| e.into_storage(&format!("mutateRowTs {}", self.table)))?;
        if self.swap_claim(token, codec::CLAIM_DONE)? {
            Ok(())
        } else {
            Err(self.busy("was taken over by another create before this one committed"))
        }
    }
}

/// A check a create runs once its claim is held, before the config is written.
pub type BeforeConfig<'a> = &'a dyn Fn() -> Result<(), StorageError>;

/// A fresh 16-byte creation token.
fn new_token() -> Vec<u8> {
    rand::random::<[u8; 16]>().to_vec()
}

/// Creates `d` by the protocol of the module docs, running `before_config`
/// once the claim is held. Errors: `AlreadyExists`; `Unavailable` when HBase
/// fails, another create of the name is in progress (its claim younger than
/// [`CLAIM_TAKEOVER_MS`] by HBase's clock), or another create took this
/// one's claim over; whatever `before_config` returns.
pub fn create(pool: &Pool, tables: &Tables, d: &Deduper, before_config: BeforeConfig<'_>) -> Result<(), StorageError> {
    let m = MetaRow {
        pool,
        tables,
        d,
        table: layout::meta_table(&d.client_id),
        row: layout::meta_row_key(&d.client_id, &d.name),
    };
    let name_col = col(meta_col::NAME);
    // Not retried: had a lost answer hidden a successful claim, the retry
    // would see our own claim and report it busy. Except after a missing
    // table, when nothing was claimed: re-created, then tried again.
    let claimed = tables.on_table(pool, &m.table, &format!("checkAndPut {}", m.table), || {
        pool.call(Retry::Once, |c| {
            c.check_and_put(
                m.table.clone().into_bytes(),
                m.row.clone(),
                name_col.clone(),
                Vec::new(),
                codec::put(name_col.clone(), d.name.clone().into_bytes()),
                Attributes::new(),
            )
        })
    })?;
    let token = new_token();
    if claimed {
        if !m.swap_claim(&[], &token)? {
            return Err(m.busy("was taken over by another create"));
        }
        return m.write_and_commit(&token, before_config);
    }
    if codec::decode_deduper(&d.client_id, &m.read()?)?.is_some() {
        return Err(StorageError::AlreadyExists);
    }
    let (row, hbase_now) = m.read_with_hbase_now()?;
    if codec::decode_deduper(&d.client_id, &row)?.is_some() {
        return Err(StorageError::AlreadyExists);
    }
    let current = value(&row, meta_col::CLAIM).unwrap_or_default().to_vec();
    if current == codec::CLAIM_DONE {
        // Committed, but the config is not readable: not ours to overwrite.
        return Err(StorageError::Corrupt(format!(
            "deduper {:?} of client {:?}: committed claim without a complete config",
            d.name, d.client_id
        )));
    }
    let claimed_at = [meta_col::CLAIM, meta_col::NAME]
        .iter()
        .filter_map(|q| timestamp(&row, q))
        .max()
        .unwrap_or(i64::MIN);
    let age = hbase_now.saturating_sub(claimed_at);
    if age < CLAIM_TAKEOVER_MS {
        return Err(m.busy(&format!(
            "is being created by another request (its claim is {age} ms old by HBase's clock; abandoned claims are \
             taken over after {CLAIM_TAKEOVER_MS} ms)"
        )));
    }
    if !m.swap_claim(&current, &token)? {
        return Err(m.busy("is being taken over by another create"));
    }
    tracing::warn!(
        client_id = %d.client_id,
        name = %d.name,
        claim_age_ms = age,
        "took over an abandoned deduper creation"
    );
    m.write_and_commit(&token, before_config)
}
