//! The `AddIfAbsent` guard: a claim on the shard rows a request writes, so
//! two replicas racing on the same new entity do not both answer "absent",
//! and neither answers "present" for an entity only the other one sent.
//!
//! A deduper has one guard cell, `S:solus#guard` in its own narrow *guard
//! row* ([`layout::guard_row_key`], beside the shard rows). It holds a
//! *slot* per shard row ever claimed: the row's latest claim token (12
//! random bytes) and whether that claim is *held* (a request is writing the
//! row) or *released* ([`encode`] gives the bytes). An `AddIfAbsent`:
//! 1. reads the guard cell, then the bits of its touched rows: the guard is
//!    read **no later than** the bits;
//! 2. claims all its rows in **one** `checkAndPut` of the whole cell, from
//!    the value last read to that value with its rows' slots held under a
//!    fresh token (atomic in HBase). Rows held by another request are
//!    waited for first; a row whose slot moved since its bits were read is
//!    read again (guard, then bits); a refused claim reads the guard and
//!    tries again ([`claim`]);
//! 3. answers from what it read, writes its bits (`mutateRowsTs`, as any
//!    add), and
//! 4. releases: one `checkAndPut` from the value it put to that value with
//!    its slots released (same token). Refused (another request changed
//!    other slots meanwhile), it reads the cell and tries again ([`release`]).
//!
//! Why it holds: a request answers only from bits read after a guard read in
//! which each of its rows' slots was free and unchanged until its claim
//! landed (the claim's expected value is the latest read, and each row's
//! slot in it equals the slot its bits were read under). Every request that
//! wrote a row changed that slot (held, its fresh token) before it read the
//! bits, and released it only after its bits had landed; tokens are random
//! and never reused, so an unchanged slot means no writer came and went
//! between the read and the claim. Two claims of a row never overlap, so a
//! request never writes under another's read. A request holds nothing
//! while it waits (claims are all-or-nothing), so two requests never wait
//! for each other.
//!
//! Why one cell per deduper, not one per shard row (as before commit 196765a):
//! Thrift1's `checkAndPut` swaps one cell, so per-row guards cost two calls
//! per touched row and round (claim and release: 20 for a 10-shard round,
//! against 1 read and 1 write for HBase's own client, docs/hbase.md "What
//! the claim costs"). One cell costs 2 per round. Replicas writing disjoint
//! rows then contend on one row lock, for one small `checkAndPut` each; a
//! claim refused because other slots moved costs one read and one retry.
//!
//! A claim this process's own request left held (its release did not
//! land: the Thrift server restarted, the connection dropped) is an
//! *orphan* ([`Orphans`]): that request has answered (its unreleased rows
//! as present) or failed, so nothing of it is still to come from this
//! process. The next guarded round of the deduper in this process releases
//! it first, and until then no request of this process waits for it.
//! Before, a request whose connection dropped between claim and release
//! left its rows held until another request had watched the token for a
//! whole lease, and with the watch starting anew in each request and
//! clients' deadlines at the lease, `AddIfAbsent` stayed unavailable
//! after a Thrift restart (issue 45, class 5).
//!
//! A claim left by a replica that died (or stalled) is taken over once the
//! same held token has been seen for [`CLAIM_LEASE`] on this process's
//! monotonic clock (no clock of another machine is involved): the lease
//! counts from this process's first sight of the token, whichever request
//! saw it ([`first_seen`]), so requests that give up at their deadline
//! still bring the takeover nearer for the next ones. The stalled holder then finds another token in
//! its slot when it releases, and answers "present" for that row: the safe
//! side, counted against p, logged. A row's answers stand only if the
//! request's release of it landed: the taker answers from bits it read
//! before its claim, which may predate the holder's write, so a holder that
//! cannot release a row (refused for half a lease) answers it "present" too.
//! The guard cell's `_ttl` is the deduper's expiry plus [`TTL_SLACK`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{THbaseSyncClient, TRowResult};

use super::codec::{self, Attributes};
use super::pool::{Pool, Retry};
use super::tables::Tables;
use crate::contract::layout;
use crate::storage::StorageError;

/// Qualifier of the guard cell in family `S` of a guard row.
pub const GUARD_QUALIFIER: &str = "solus#guard";

/// First byte of a guard cell value: its format (the slots follow).
pub const FORMAT: u8 = 0x02;

/// Bytes per slot: shard (`u32` big-endian), held (1) or released (0), token.
const SLOT_BYTES: usize = 4 + 1 + TOKEN_BYTES;

const TOKEN_BYTES: usize = 12;

/// A claim token: random, one per claim attempt, never reused.
pub type Token = [u8; TOKEN_BYTES];

/// How long a held slot must be seen unchanged before it is taken over as
/// abandoned. A live holder keeps a row for one write of its bits (tens of
/// ms; a write call may take up to 21 s on an overloaded HBase, see
/// `data::write_read_timeout_ms`, and then answers "present" for the row).
pub const CLAIM_LEASE: Duration = Duration::from_secs(10);

/// Longest a request waits for its rows in all before failing `Unavailable`
/// with nothing written: past one lease, so an abandoned claim is taken over
/// first.
pub const CLAIM_BUDGET: Duration = Duration::from_secs(25);

/// How much longer than the deduper's expiry a guard cell lives (its cell
/// TTL): a claim must not vanish under a live holder (a deduper may expire
/// entries after 1 s), nor the cell come back empty while a read made
/// before it may still claim (within the budget).
pub const TTL_SLACK: Duration = Duration::from_secs(120);

/// Longest pause between two looks at a held row.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Failed `checkAndPut`s in a row (no answer, or a call error) after which
/// [`claim`] fails the request.
const MAX_SWAP_ERRORS: u32 = 3;

/// When this process first saw each held token (see [`first_seen`]).
static SIGHTINGS: std::sync::LazyLock<Mutex<HashMap<Token, Instant>>> = std::sync::LazyLock::new(Default::default);

/// When this process first saw `token` held (now, the first time). Tokens
/// are random and never reused, so one map serves every guard row.
/// Sightings older than a few leases are dropped as new ones come.
pub fn first_seen(token: Token) -> Instant {
    let mut seen = SIGHTINGS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(at) = seen.get(&token) {
        return *at;
    }
    if seen.len() >= 4096 {
        seen.retain(|_, at| at.elapsed() < CLAIM_LEASE * 4);
    }
    *seen.entry(token).or_insert_with(Instant::now)
}

/// Claims of this process's own requests left held after the request
/// ended (a release or give-back that did not land), by (table, guard
/// row): released by the next guarded round of that deduper
/// ([`Orphans::settle`]), and never waited for meanwhile.
#[derive(Default)]
pub struct Orphans(Mutex<HashMap<GuardCellKey, Vec<Orphan>>>);

/// (table, guard row) of a deduper's guard cell.
type GuardCellKey = (String, Vec<u8>);

/// The shards an orphan claim may hold, and its token.
type Orphan = (Vec<u32>, Token);

impl Orphans {
    /// Notes that `tokens` may still hold rows of `shards` in the guard
    /// cell of (`table`, `row`).
    pub fn add(&self, table: &str, row: &[u8], shards: &[u32], tokens: &[Token]) {
        if tokens.is_empty() {
            return;
        }
        tracing::warn!(
            table,
            rows = shards.len(),
            "AddIfAbsent claim left held (its release did not land): released by this deduper's next AddIfAbsent"
        );
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let list = all.entry((table.to_string(), row.to_vec())).or_default();
        list.extend(tokens.iter().map(|t| (shards.to_vec(), *t)));
    }

    /// The orphan tokens of (`table`, `row`).
    pub fn tokens(&self, table: &str, row: &[u8]) -> Vec<Token> {
        let all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        all.get(&(table.to_string(), row.to_vec()))
            .map(|l| l.iter().map(|(_, t)| *t).collect())
            .unwrap_or_default()
    }

    /// Releases the orphans of (`table`, `row`) through `cell`; those whose
    /// release landed (or whose rows another request took over) are
    /// forgotten, the rest kept for the next round.
    pub fn settle(&self, table: &str, row: &[u8], cell: &impl Rows) {
        let list = {
            let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
            if all.is_empty() {
                return;
            }
            all.remove(&(table.to_string(), row.to_vec()))
        };
        let Some(list) = list else { return };
        let key = (table.to_string(), row.to_vec());
        let kept: Vec<Orphan> = list
            .into_iter()
            .filter(|(shards, token)| !give_back(cell, shards, &[*token]))
            .collect();
        if !kept.is_empty() {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key)
                .or_default()
                .extend(kept);
        }
    }
}

/// `S:solus#guard` as a Thrift column.
pub fn column() -> Vec<u8> {
    codec::column(layout::DATA_FAMILY, GUARD_QUALIFIER)
}

/// One shard row's slot in the guard cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// A request is writing the row under this claim.
    pub held: bool,
    /// The row's latest claim token.
    pub token: Token,
}

impl Slot {
    fn held(token: Token) -> Slot {
        Slot { held: true, token }
    }

    fn released(token: Token) -> Slot {
        Slot { held: false, token }
    }
}

/// Slots by shard.
pub type Slots = BTreeMap<u32, Slot>;

/// The guard cell's value for `slots`: [`FORMAT`], then per slot in shard
/// order the shard (`u32` big-endian), 1 if held else 0, and the token.
pub fn encode(slots: &Slots) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + slots.len() * SLOT_BYTES);
    out.push(FORMAT);
    for (shard, slot) in slots {
        out.extend_from_slice(&shard.to_be_bytes());
        out.push(u8::from(slot.held));
        out.extend_from_slice(&slot.token);
    }
    out
}

/// The slots of a guard cell value (empty: no cell, no slot). Errors:
/// `Corrupt` for any other format (a guard cell another Solus version
/// wrote: cross versions with a recreate, docs/operations.md).
pub fn decode(value: &[u8]) -> Result<Slots, StorageError> {
    let Some((&format, body)) = value.split_first() else {
        return Ok(Slots::new());
    };
    if format != FORMAT || body.len() % SLOT_BYTES != 0 {
        return Err(StorageError::Corrupt(format!(
            "AddIfAbsent guard cell of {} bytes in an unknown format (first byte {format:#04x}, expected \
             {FORMAT:#04x}): written by another Solus version? Cross versions with a recreate, see \
             docs/operations.md",
            value.len()
        )));
    }
    let mut slots = Slots::new();
    for s in body.chunks_exact(SLOT_BYTES) {
        let shard = u32::from_be_bytes(s[..4].try_into().expect("4 bytes"));
        let token = s[5..].try_into().expect("token bytes");
        slots.insert(shard, Slot { held: s[4] == 1, token });
    }
    Ok(slots)
}

/// The guard cell's value in the rows HBase returned for the guard row
/// (empty when there is no cell: `checkAndPut` with an empty expected value
/// matches an absent cell).
pub fn value(rows: &[TRowResult]) -> Vec<u8> {
    let col = column();
    rows.iter()
        .find_map(|r| r.columns.as_ref()?.get(&col)?.value.clone())
        .unwrap_or_default()
}

/// A fresh claim token.
pub fn token() -> Token {
    rand::random()
}

/// Swaps the guard cell in guard row `row` from `expected` to `new` with
/// `checkAndPut` (the cell's `_ttl` `ttl_ms`). Ok(false) when the cell held
/// something else. Made once: a lost answer is an error, and the caller
/// reads the cell to learn what happened.
pub fn swap(
    pool: &Pool,
    tables: &Tables,
    table: &str,
    row: &[u8],
    expected: &[u8],
    new: &[u8],
    ttl_ms: i64,
) -> Result<bool, StorageError> {
    let what = format!("checkAndPut {table} (AddIfAbsent guard)");
    let attributes: Attributes = codec::ttl_attributes(ttl_ms);
    tables.on_table(pool, table, &what, || {
        pool.call(Retry::Once, |c| {
            c.check_and_put(
                table.as_bytes().to_vec(),
                row.to_vec(),
                column(),
                expected.to_vec(),
                codec::put(column(), new.to_vec()),
                attributes.clone(),
            )
        })
    })
}

/// What [`claim`] and [`release`] need of a round's rows (row `i` is the
/// round's `i`-th shard) and of its deduper's guard cell.
pub trait Rows {
    /// The guard cell's value alone (one read).
    fn peek(&self) -> Result<Vec<u8>, StorageError>;
    /// Reads the guard cell, then the bits of rows `which` again (the guard
    /// no later than the bits), keeping the cells for the answer; returns
    /// the guard cell's value.
    fn reread(&mut self, which: &[usize]) -> Result<Vec<u8>, StorageError>;
    /// `checkAndPut` of the guard cell from `expected` to `new`.
    fn swap(&self, expected: &[u8], new: &[u8]) -> Result<bool, StorageError>;
}

/// How long [`claim`] waits and lets wait (the constants above; tests
/// shorten them).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// [`CLAIM_LEASE`].
    pub lease: Duration,
    /// [`CLAIM_BUDGET`].
    pub budget: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease: CLAIM_LEASE,
            budget: CLAIM_BUDGET,
        }
    }
}

/// A held claim: its token and the cell value its `checkAndPut` put (or, for
/// a claim whose answer was lost, the value read that showed it in place).
#[derive(Debug, Clone)]
pub struct Claim {
    pub token: Token,
    pub value: Vec<u8>,
}

/// The guard cell as last read: its bytes (the next `checkAndPut`'s
/// expected value) and its slots.
struct Look {
    raw: Vec<u8>,
    slots: Slots,
}

impl Look {
    fn new(raw: Vec<u8>) -> Result<Look, StorageError> {
        Ok(Look {
            slots: decode(&raw)?,
            raw,
        })
    }

    fn slot(&self, shard: u32) -> Option<Slot> {
        self.slots.get(&shard).copied()
    }

    /// The cell's value with the slots of `shards` held under one of
    /// `tokens` released (same token); `None` when none is.
    fn releasing(&self, shards: &[u32], tokens: &[Token]) -> Option<Vec<u8>> {
        let mut next = self.slots.clone();
        let mut any = false;
        for &s in shards {
            if let Some(slot) = self.slot(s).filter(|s| s.held && tokens.contains(&s.token)) {
                next.insert(s, Slot::released(slot.token));
                any = true;
            }
        }
        any.then(|| encode(&next))
    }
}

/// Claims the rows of `shards` (sorted, distinct) in one `checkAndPut`,
/// given `first`, the guard cell read before every row's bits. Waits while
/// another request holds one of them (taking a slot over once its held
/// token has been seen by this process for the lease; slots held by one
/// of `orphans`, this process's ended requests, are not waited for), reads
/// again the rows whose slots moved, and tries again when the claim is
/// refused. Errors: `Unavailable` past `timing.budget` or after
/// [`MAX_SWAP_ERRORS`] failing claims, `Corrupt` for a guard cell it
/// cannot read; a claim of this request that may have landed is given back
/// first, and the tokens whose give-back did not land are pushed to
/// `left_held` (orphans for the caller to note).
pub fn claim(
    rows: &mut impl Rows,
    shards: &[u32],
    first: Vec<u8>,
    timing: Timing,
    orphans: &[Token],
    left_held: &mut Vec<Token>,
) -> Result<Claim, StorageError> {
    let mut tried = Vec::new();
    let claimed = claim_tracked(rows, shards, first, timing, orphans, &mut tried);
    if claimed.is_err() && !tried.is_empty() && !give_back(rows, shards, &tried) {
        left_held.extend(tried);
    }
    claimed
}

/// [`claim`], noting in `tried` every token whose `checkAndPut` answer was
/// lost (it may have landed).
fn claim_tracked(
    rows: &mut impl Rows,
    shards: &[u32],
    first: Vec<u8>,
    timing: Timing,
    orphans: &[Token],
    tried: &mut Vec<Token>,
) -> Result<Claim, StorageError> {
    let started = Instant::now();
    let mut now = Look::new(first)?;
    // Per row, the slot its bits were read under.
    let mut basis: Vec<Option<Slot>> = shards.iter().map(|&s| now.slot(s)).collect();
    // Held slots seen at the read are watched from their first sight by
    // this process, all at once, so several rows a dead replica left are
    // taken over after one lease.
    for s in basis.iter().flatten().filter(|s| s.held) {
        first_seen(s.token);
    }
    let mut pause = Backoff::new();
    let mut errors = 0;
    loop {
        // A claim whose answer was lost, found in place: ours.
        if let Some(t) = tried
            .iter()
            .find(|t| shards.iter().all(|&s| now.slot(s) == Some(Slot::held(**t))))
        {
            return Ok(Claim {
                token: *t,
                value: now.raw,
            });
        }
        if started.elapsed() > timing.budget {
            return Err(StorageError::Unavailable(format!(
                "AddIfAbsent could not claim its shard rows within {} s: other replicas kept them \
                 (nothing was written; retry)",
                timing.budget.as_secs()
            )));
        }
        // Rows whose slot moved since their bits were read: read again.
        let stale: Vec<usize> = (0..shards.len()).filter(|&i| now.slot(shards[i]) != basis[i]).collect();
        if !stale.is_empty() {
            now = Look::new(rows.reread(&stale)?)?;
            for &i in &stale {
                basis[i] = now.slot(shards[i]);
            }
            continue;
        }
        // Every row looked at (no short cut), so each held slot is watched
        // from when it is first seen.
        let blocked: Vec<bool> = (0..shards.len())
            .map(|i| match now.slot(shards[i]) {
                Some(s) if s.held && !tried.contains(&s.token) && !orphans.contains(&s.token) => {
                    !abandoned(s.token, timing.lease)
                }
                _ => false,
            })
            .collect();
        if blocked.contains(&true) {
            pause.wait();
            now = Look::new(rows.peek()?)?;
            continue;
        }
        let token = token();
        let mut next = now.slots.clone();
        for &s in shards {
            next.insert(s, Slot::held(token));
        }
        let value = encode(&next);
        match rows.swap(&now.raw, &value) {
            Ok(true) => return Ok(Claim { token, value }),
            Ok(false) => {
                // Lost to another claim or release: let it through first.
                errors = 0;
                pause.wait();
            }
            Err(e) => {
                tried.push(token);
                errors += 1;
                if errors >= MAX_SWAP_ERRORS {
                    return Err(e);
                }
                pause.wait();
            }
        }
        now = Look::new(rows.peek()?)?;
    }
}

/// Whether the held `token` has been seen by this process for `lease`.
fn abandoned(token: Token, lease: Duration) -> bool {
    let over = first_seen(token).elapsed() >= lease;
    if over {
        tracing::warn!(
            lease_ms = lease.as_millis() as u64,
            "AddIfAbsent taking over a shard row claimed by a replica that held it past the guard \
             lease (died or stalled mid-write); that replica answers the row present if it comes back"
        );
    }
    over
}

/// Pauses between tries on the contended guard cell: 1 ms, doubling up to
/// [`MAX_PAUSE`], each between half and all of that (so racing requests
/// drift apart).
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(Duration::from_millis(1))
    }

    fn wait(&mut self) {
        std::thread::sleep(self.0 / 2 + self.0.mul_f64(rand::random::<f64>() / 2.0));
        self.0 = (self.0 * 2).min(MAX_PAUSE);
    }
}

/// Runs `f` even if the gRPC caller has left (the pool skips a gone
/// caller's calls): a claim left behind stalls every replica for a lease.
fn cleanup<T>(f: impl FnOnce() -> T) -> T {
    crate::storage::caller::run_for(None, f)
}

/// Releases every slot of `shards` held under one of `tokens` (a claim that
/// wrote nothing, or whose write failed). Best effort: true when no slot
/// is left held under them (released, or never or no longer theirs);
/// false when the guard cell could not be read or swapped, and the caller
/// notes the tokens as [`Orphans`].
pub fn give_back(rows: &impl Rows, shards: &[u32], tokens: &[Token]) -> bool {
    cleanup(|| {
        for _ in 0..MAX_SWAP_ERRORS {
            let Ok(now) = rows.peek().and_then(Look::new) else {
                continue;
            };
            match now.releasing(shards, tokens) {
                Some(next) if !matches!(rows.swap(&now.raw, &next), Ok(true)) => {}
                _ => return true,
            }
        }
        false
    })
}

/// Releases `claim` after its bits landed. Per row of `shards`, whether
/// this request's release of it landed: only then may the row's answers
/// stand. A row not released (taken over by another request after the
/// lease, or still held when the release gives up) must be answered as
/// set: a request that took it over answers from bits it read before its
/// claim, which may predate this request's write. Refused because other
/// slots moved, the release reads the cell and tries again, for up to half
/// a lease (the slots stay this request's that long); a read of the cell
/// that fails is tried again within the same half lease (a blip of the
/// guard row must not turn a round's new entities into "present"), and
/// only when none succeeds are the rows not known released `false` (the
/// safe side).
pub fn release(rows: &impl Rows, shards: &[u32], claim: &Claim, timing: Timing) -> Vec<bool> {
    cleanup(|| {
        let mine = Slot::held(claim.token);
        let done = Slot::released(claim.token);
        let until = Instant::now() + timing.lease / 2;
        let mut raw = claim.value.clone();
        let mut pause = Backoff::new();
        loop {
            let Ok(now) = Look::new(raw) else {
                return vec![false; shards.len()];
            };
            // Released by an earlier try whose answer was lost.
            let landed = |s: &u32| now.slot(*s) == Some(done);
            let Some(next) = now.releasing(shards, &[claim.token]) else {
                return shards.iter().map(landed).collect();
            };
            if matches!(rows.swap(&now.raw, &next), Ok(true)) {
                return shards.iter().map(|s| landed(s) || now.slot(*s) == Some(mine)).collect();
            }
            if Instant::now() >= until {
                tracing::warn!(
                    "AddIfAbsent release refused for half the guard lease: the rows still held answer present \
                     and are left to the lease"
                );
                return shards.iter().map(landed).collect();
            }
            // Pause before the look, not between the look and the swap.
            pause.wait();
            loop {
                match rows.peek() {
                    Ok(now) => {
                        raw = now;
                        break;
                    }
                    Err(e) if Instant::now() >= until => {
                        tracing::warn!(
                            "AddIfAbsent release not confirmed for half the guard lease (reading the guard cell: \
                             {e}): its rows answer present and are left to the lease"
                        );
                        return vec![false; shards.len()];
                    }
                    Err(_) => {
                        pause.wait();
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests;
