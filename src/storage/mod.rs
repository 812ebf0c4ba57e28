//! Storage backends behind one trait, at the level of "read these bits of
//! these shards / raise these bits' expiry times", plus deduper configs.
//!
//! Every backend keeps the semantics of the HBase layout: one cell per bit
//! holding an expiry time in ms, and optionally a legacy boolean marker. A
//! write never lowers a stored expiry time (the never-backwards rule), so
//! writes commute and can be replayed in any order.
//!
//! Calls are blocking; the engine runs them on tokio's blocking pool.

use crate::deduper::Deduper;

pub mod embedded;
pub mod hbase;
pub mod metered;

/// One bit of one shard row of a deduper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BitAddr {
    pub shard: u32,
    pub bit: u32,
}

/// What storage holds for one bit: the `<bit>#ttl` cell and the legacy
/// `<bit>` marker, each when present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cell {
    /// Expiry time, ms since the Unix epoch. A backend may round it up, never down.
    pub expire_ms: Option<i64>,
    /// Legacy marker value, when such a cell exists.
    pub legacy: Option<bool>,
}

impl Cell {
    /// Whether the bit counts as set at `now_ms`: the `#ttl` cell decides when
    /// present (`expire_ms >= now_ms`); otherwise a legacy marker reading true.
    pub fn is_set(&self, now_ms: i64) -> bool {
        match self.expire_ms {
            Some(expire) => expire >= now_ms,
            None => self.legacy == Some(true),
        }
    }
}

/// A storage failure.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The store cannot be reached or failed an operation; worth retrying later.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A deduper with this client id and name already exists.
    #[error("deduper already exists")]
    AlreadyExists,
    /// Stored data could not be decoded.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The backend has no room for this (e.g. the embedded store's memory
    /// budget); the message names the limit and what would fit.
    #[error("{0}")]
    Capacity(String),
}

/// A storage backend. `bits` slices are sorted and free of duplicates; read
/// results come back in the same order, one [`Cell`] per address.
pub trait Store: Send + Sync + 'static {
    /// Short name for logs: `embedded`, `hbase`.
    fn kind(&self) -> &'static str;

    /// Reads the cells of `bits`, in one storage round trip.
    fn read_bits(&self, deduper: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError>;

    /// Raises the expiry of every bit in `bits` to at least `expire_ms` (ms
    /// since the Unix epoch), in one storage round trip. Durable on return.
    fn write_bits(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError>;

    /// Reads the cells as they were, then writes as [`Store::write_bits`].
    /// Backends that can make this atomic against other `read_and_write_bits`
    /// calls on the same deduper do (the embedded store); the others document
    /// their race window.
    fn read_and_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Result<Vec<Cell>, StorageError>;

    /// Stores a new deduper config; [`StorageError::AlreadyExists`] when the
    /// client already has one with that name.
    fn create_deduper(&self, deduper: &Deduper) -> Result<(), StorageError>;

    /// Overwrites an existing deduper config.
    fn update_deduper(&self, deduper: &Deduper) -> Result<(), StorageError>;

    /// One deduper config, `None` when absent.
    fn get_deduper(&self, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError>;

    /// A client's deduper configs, sorted by name; only active ones when asked.
    fn list_dedupers(&self, client_id: &str, active_only: bool) -> Result<Vec<Deduper>, StorageError>;

    /// Cheap reachability check for health reporting.
    fn ping(&self) -> Result<(), StorageError>;

    /// Makes everything written so far durable (called on shutdown).
    fn flush(&self) -> Result<(), StorageError>;
}
