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

pub mod caller;
pub mod clock_bound;
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

/// The callback of [`Store::read_and_write_bits`], called between its read
/// and its write with the cells read.
pub type BeforeWrite<'a> = dyn FnMut(&[Cell]) -> Result<(), StorageError> + Send + 'a;

/// The change of [`Store::update_deduper`].
pub type Change<'a> = dyn Fn(&mut Deduper) + Sync + 'a;

/// Identifies one remembered request: `(client_id, deduper, request_id)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestKey {
    pub client_id: String,
    pub deduper: String,
    /// The client's opaque `request_id` bytes.
    pub request_id: Vec<u8>,
}

/// The 64-bit fingerprint of the entity a remembered record id belongs to
/// (see `engine::records`).
pub type RecordFingerprint = u64;

/// What a backend counted of one deduper's bits at one time (see
/// [`Store::bit_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BitStats {
    /// Bits set (expiry at or after the time asked) among those examined.
    pub set_bits: u64,
    /// Bits examined: every one of the m bits for an exact count, else the
    /// size of a uniform random sample.
    pub sampled_bits: u64,
}

/// This replica's clock against the clock of a storage that several
/// replicas share, from one measurement (see [`Store::clock_offset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// This replica's clock minus the storage's, in ms: positive when this
    /// replica is ahead.
    pub offset_ms: i64,
    /// Half the round trip of the measurement plus the clocks' 1 ms
    /// resolution, in ms: the true offset lies within `offset_ms +- error_ms`.
    pub error_ms: i64,
}

/// A stored deduper config that cannot be used: bytes that do not decode,
/// or a value no create accepts ([`Deduper::check_stored`]), e.g. one
/// overwritten by hand. Reads of it answer `Corrupt` with `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The deduper's name, from the config's key (row key).
    pub name: String,
    /// What is wrong, naming the row and the column (or field).
    pub error: String,
}

/// A storage failure.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The state of the stored data forbids the operation now; the message
    /// says why and what to do (gRPC `FAILED_PRECONDITION`).
    #[error("{0}")]
    Precondition(String),
    /// The backend has no room for this (e.g. the embedded store's memory
    /// budget); the message names the limit and what would fit.
    #[error("{0}")]
    Capacity(String),
}

/// How the engine lays out the `bits` of a request for a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitOrder {
    /// Sorted by (shard, bit) and free of duplicates: one grouped round trip
    /// per request for a remote backend (HBase).
    SortedUnique,
    /// Any order, repeats kept: reads come in entity order (an entity's `k`
    /// bits in a row), writes grouped by shard (the entities of one shard in
    /// request order). Saves the engine's sort for a backend that reaches
    /// each bit directly (the embedded store). A repeated address is read
    /// and raised once per occurrence, so in `read_then_write_bits` a later
    /// occurrence may read the raise of an earlier one: the engine counts
    /// the bits of earlier entities as set anyway, and an entity whose own
    /// bits repeat has its first occurrence read as it was.
    Any,
}

/// A storage backend. `bits` slices are sorted and free of duplicates
/// unless the backend's [`Store::bit_order`] is [`BitOrder::Any`]; read
/// results come back in the same order, one [`Cell`] per address.
pub trait Store: Send + Sync + 'static {
    /// Short name for logs: `embedded`, `hbase`.
    fn kind(&self) -> &'static str;

    /// The layout of `bits` this backend takes; sorted and unique unless it
    /// says otherwise.
    fn bit_order(&self) -> BitOrder {
        BitOrder::SortedUnique
    }

    /// Reads the cells of `bits`, in one storage round trip.
    fn read_bits(&self, deduper: &Deduper, bits: &[BitAddr]) -> Result<Vec<Cell>, StorageError>;

    /// Whether each entity of `bits` has a bit unset at `now_ms` (ms since
    /// the Unix epoch): `bits` holds `k` addresses per entity in entity order
    /// (a read plan for [`BitOrder::Any`]), the answer `bits.len() / k`
    /// booleans in that order. `k` is at least 1 and divides `bits.len()`.
    /// A backend may stop at an entity's first unset bit: the embedded store
    /// reads bit `j` only of the entities whose bits `0..j` are all set, so
    /// an absent entity usually costs one or two cache misses instead of
    /// `k`. The default reads every cell with [`Store::read_bits`]. Errors:
    /// those of `read_bits`; `Corrupt` when the backend answers another
    /// number of cells.
    fn entities_absent(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        k: usize,
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError> {
        let cells = self.read_bits(deduper, bits)?;
        if cells.len() != bits.len() {
            return Err(StorageError::Corrupt(format!(
                "storage answered {} cells for {} bits",
                cells.len(),
                bits.len()
            )));
        }
        Ok(cells
            .chunks(k.max(1))
            .map(|c| c.iter().any(|c| !c.is_set(now_ms)))
            .collect())
    }

    /// Whether [`Store::entities_absent_now`] may answer: the engine hashes a
    /// small read on an async worker only then. False by default; true for
    /// the embedded store.
    fn reads_from_memory(&self) -> bool {
        false
    }

    /// Whether [`Store::write_bits_now`] and
    /// [`Store::read_then_write_bits_now`] may answer at all: the engine
    /// hashes a small write on an async worker only then. False by
    /// default; true for the embedded store unless it syncs every write.
    fn writes_to_memory(&self) -> bool {
        false
    }

    /// [`Store::entities_absent`] when this backend can answer at once from
    /// this process's memory, without I/O and without waiting on a lock;
    /// `None` when it cannot (a remote store; the embedded store while the
    /// deduper's filter is being rewritten or the map of dedupers changed),
    /// and the caller reads with `entities_absent` on a blocking thread
    /// instead. The engine calls it on an async worker for small reads of a
    /// store that [`Store::reads_from_memory`]. Default `None`.
    fn entities_absent_now(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        k: usize,
        now_ms: i64,
    ) -> Option<Result<Vec<bool>, StorageError>> {
        let _ = (deduper, bits, k, now_ms);
        None
    }

    /// Raises the expiry of every bit in `bits` to at least `expire_ms` (ms
    /// since the Unix epoch), in one storage round trip. Durable on return.
    fn write_bits(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Result<(), StorageError>;

    /// Reads the cells as they were, calls `before_write` with them, then
    /// writes as [`Store::write_bits`]; an error of `before_write` stops
    /// before anything is written and is returned. Backends that can make
    /// this atomic against other `read_and_write_bits` calls on the same
    /// deduper do (the embedded store); the others document their race window.
    fn read_and_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
        before_write: &mut BeforeWrite<'_>,
    ) -> Result<Vec<Cell>, StorageError>;

    /// [`Store::read_and_write_bits`] with nothing to do between the read
    /// and the write: returns the cells as they were before the write.
    /// Backends may read and write each bit in one pass (the embedded store
    /// does); the default calls `read_and_write_bits`.
    fn read_then_write_bits(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Result<Vec<Cell>, StorageError> {
        self.read_and_write_bits(deduper, bits, expire_ms, &mut |_: &[Cell]| Ok(()))
    }

    /// [`Store::write_bits`] when this backend can do it at once, without
    /// waiting on a lock or a disk; `None` (nothing written) when it
    /// cannot, and the caller writes with `write_bits` on a blocking thread
    /// instead. The engine calls it on an async worker for small writes of
    /// a store that [`Store::writes_to_memory`]. Default `None`.
    fn write_bits_now(&self, deduper: &Deduper, bits: &[BitAddr], expire_ms: i64) -> Option<Result<(), StorageError>> {
        let _ = (deduper, bits, expire_ms);
        None
    }

    /// [`Store::read_then_write_bits`] under the terms of
    /// [`Store::write_bits_now`]. Default `None`.
    fn read_then_write_bits_now(
        &self,
        deduper: &Deduper,
        bits: &[BitAddr],
        expire_ms: i64,
    ) -> Option<Result<Vec<Cell>, StorageError>> {
        let _ = (deduper, bits, expire_ms);
        None
    }

    /// Whether other processes may read and change this store's configs
    /// (several replicas on one HBase): true by default. False for a store
    /// one process holds alone (the embedded store locks its directory):
    /// a resize there need not wait out other replicas' config caches.
    fn shared_by_replicas(&self) -> bool {
        true
    }

    /// Every deduper config that records generations (a resize under way
    /// or done), of every client: what a restarted server resumes
    /// retiring. Empty by default (test doubles).
    /// Errors: `Unavailable`, `Corrupt`.
    fn resized_dedupers(&self) -> Result<Vec<Deduper>, StorageError> {
        Ok(Vec::new())
    }

    /// Stores a new deduper config; [`StorageError::AlreadyExists`] when the
    /// client already has one with that name.
    fn create_deduper(&self, deduper: &Deduper) -> Result<(), StorageError>;

    /// Applies `change` to the stored config of one deduper atomically
    /// against concurrent updates (of this or any other replica) and returns
    /// the config as stored; `None` when the deduper does not exist. A
    /// change that records a generation (`crate::generations`) has its
    /// filter allocated; one that drops generations has their data freed
    /// (a backend may defer a drop, storing nothing and returning the
    /// config as it is: the engine's retirement pass asks again). `change`
    /// may run more than once (on each retry of a compare-and-set). Returns
    /// only once the changed config is stored. Errors: `Unavailable`
    /// (including too many concurrent updates in a row), `Corrupt`.
    fn update_deduper(&self, client_id: &str, name: &str, change: &Change<'_>)
    -> Result<Option<Deduper>, StorageError>;

    /// One deduper config, `None` when absent.
    fn get_deduper(&self, client_id: &str, name: &str) -> Result<Option<Deduper>, StorageError>;

    /// A client's deduper configs, sorted by name, only active ones when
    /// asked; and apart, sorted by name, the configs that cannot be used
    /// ([`Unreadable`], each with why): one damaged config is its deduper's
    /// error, never the whole list's. Unreadable configs are listed whatever
    /// `active_only` says (their `active` is not known).
    fn list_dedupers(
        &self,
        client_id: &str,
        active_only: bool,
    ) -> Result<(Vec<Deduper>, Vec<Unreadable>), StorageError>;

    /// Removes `deduper`'s bits and then its config, so an interrupted
    /// delete leaves the config in place and can be run again (the caller
    /// deactivates it first). `Ok(false)` when no config was there. Frees
    /// whatever the deduper held (the embedded memory budget). Errors:
    /// `Unavailable` (nothing or only some bits removed; run it again).
    fn delete_deduper(&self, deduper: &Deduper) -> Result<bool, StorageError>;

    /// Counts the bits of `deduper` set at `now_ms` (ms since the Unix
    /// epoch): exactly, or over a uniform random sample of
    /// `sample_bits` bit positions (drawn from `seed`) when the backend
    /// cannot count them all cheaply. Expensive (a pass over the filter or a
    /// read of the sample): called by the background statistics pass, never
    /// on a request. Errors: `Unavailable`, `Corrupt`.
    fn bit_stats(&self, deduper: &Deduper, now_ms: i64, sample_bits: u64, seed: u64) -> Result<BitStats, StorageError>;

    /// Records `record` for `key` until `expire_ms` (ms since the Unix
    /// epoch) unless an unexpired record is already there: `Ok(None)` when
    /// ours was stored, `Ok(Some(earlier))` when another attempt recorded
    /// first. Durable on return, and visible to every replica sharing the
    /// storage. Errors: `Unavailable`; `Capacity` when the backend's bound
    /// on remembered requests is reached.
    fn remember_request(
        &self,
        key: &RequestKey,
        record: &[u8],
        expire_ms: i64,
    ) -> Result<Option<Vec<u8>>, StorageError>;

    /// The unexpired record of `key`, if any. Errors: `Unavailable`.
    fn recall_request(&self, key: &RequestKey) -> Result<Option<Vec<u8>>, StorageError>;

    /// Remembers record ids of `deduper` until `expire_ms` (ms since the
    /// Unix epoch), each with its entity's fingerprint: a pair remembered
    /// before gets the later of the two expiries; an id sent with another
    /// entity is remembered beside it (a colliding id loses no record); one
    /// storage round trip where the backend allows. Durable
    /// and visible to every replica sharing the storage on return (the
    /// engine writes the bits only after). Errors: `Unavailable`; `Capacity`
    /// when the backend's bound on remembered records has no room for the
    /// pairs not remembered yet (nothing of this call is remembered then):
    /// a pair remembered already (a replay) takes no room.
    fn remember_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        expire_ms: i64,
    ) -> Result<(), StorageError>;

    /// Whether each `(record id, fingerprint)` of `records` is remembered
    /// for `deduper` and not expired at `now_ms`, one per record in order.
    /// Errors: `Unavailable`, `Corrupt`.
    fn recall_records(
        &self,
        deduper: &Deduper,
        records: &[(&[u8], RecordFingerprint)],
        now_ms: i64,
    ) -> Result<Vec<bool>, StorageError>;

    /// Records the backend holds in memory now, when it keeps them there
    /// (the embedded store), for the `solus_records_held` gauge.
    fn records_held(&self) -> Option<u64> {
        None
    }

    /// Latest expiry time the backend stores without shortening, in ms
    /// since the Unix epoch.
    fn max_expire_ms(&self) -> i64 {
        i64::MAX
    }

    /// Where this backend keeps the bits of `deduper` under the current
    /// settings (HBase: the data table name; embedded: the data directory
    /// is the only place, so `None`). Recorded in a deduper's config at
    /// creation and compared at every lookup, so a changed setting refuses
    /// the deduper instead of serving it empty.
    fn data_location(&self, deduper: &Deduper) -> Option<String> {
        let _ = deduper;
        None
    }

    /// Measures this replica's clock ([`crate::clock::now_ms`]) against the
    /// storage's own clock, the one every replica sharing the storage can
    /// agree on (HBase: a probe cell stamped by the region server). `None`
    /// for backends no other replica shares (the embedded store). A few
    /// storage round trips: called on the health probe's schedule, never on
    /// a request. Errors: `Unavailable`.
    fn clock_offset(&self) -> Result<Option<ClockOffset>, StorageError> {
        Ok(None)
    }

    /// Shortest TTL (ms) this store honours: an expiry may be judged up to
    /// this much early by some replica (see `clock_bound.rs`); 0 when none.
    fn min_ttl_ms(&self) -> u64 {
        0
    }

    /// Health check for readiness: storage is reachable and, when the last
    /// write failed, a probe write succeeds again.
    fn ping(&self) -> Result<(), StorageError>;

    /// Damage recovery kept aside, for health (`solus.v1.Journal`): a
    /// sentence naming it while there is any, else `None`. Embedded: the
    /// damaged journal files kept as `*.log.damaged` and the records lost
    /// at this start-up; checkpoints failing persistently (the journal they
    /// should drop grows meanwhile).
    fn damage(&self) -> Option<String> {
        None
    }

    /// Makes everything written so far durable (called on shutdown).
    fn flush(&self) -> Result<(), StorageError>;
}
