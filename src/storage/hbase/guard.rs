//! The `AddIfAbsent` guard: a claim per shard row, so two replicas racing
//! on the same new entity do not both answer "absent", and neither answers
//! "present" for an entity only the other one sent.
//!
//! Each shard row has one guard cell, `S:solus#guard` in its own narrow
//! *guard row* ([`layout::guard_row_key`], beside the shard rows). Its value
//! is *free* (16 random bytes, or no cell) or *claimed* ([`CLAIM_TAG`] and
//! 16 random bytes: a request is writing the shard row). An `AddIfAbsent`:
//! 1. reads the guards of its touched rows (one call for the round, one per
//!    row read again), then their bits: a guard is read **no later than**
//!    its row's bits;
//! 2. claims every row: `checkAndPut` of its guard from the value it read
//!    to its own claim value (atomic per cell in HBase). A row found claimed
//!    is waited for; a row whose claim fails is read again (guard, then
//!    bits) and claimed again ([`claim`]);
//! 3. answers from what it read, writes its bits (`mutateRowsTs`, as any
//!    add), and
//! 4. releases each row: `checkAndPut` from its claim value to a fresh free
//!    value.
//!
//! Why it holds: a request only answers from a read whose guard value was
//! still in place when its claim landed. Every request that wrote bits
//! changed the guard before that read's bits could miss them (its claim),
//! and put a fresh value back only after its bits had landed (its release);
//! values are random, and the only value ever put back is one a request
//! gave back with nothing written under its claim, so a claim that succeeds
//! read every completed writer's bits. Two claims of a row never overlap,
//! so a request never writes under another's read. A request waits for one
//! row only while it holds no row after it in the rows' order (`claim`
//! gives those back first), so two requests never wait for each other; and
//! it holds rows for at most half a lease while waiting, then gives them
//! back.
//!
//! Why guard rows and not a cell in each shard row (as before 2026-12-05
//! evening): `checkAndPut` reads the row it checks, and a shard row is
//! wide (~10^6 bit cells); two of them per row and round cost HBase as much
//! as the round's reads (docs/hbase.md, "What the claim costs").
//!
//! A claim left by a replica that died (or stalled) is taken over once the
//! same claim value has been seen for [`CLAIM_LEASE`] on this process's
//! monotonic clock (no clock of another machine is involved; every claim
//! seen at the read is watched from then on, so several dead rows take one
//! lease, not one each; every claim attempt is a fresh value). The stalled
//! holder then fails its release, and answers "present" for that row: the
//! safe side, counted against p, logged. A release whose answer is lost is
//! checked by reading the guard. The guard cell's `_ttl` is the deduper's
//! expiry plus [`TTL_SLACK`].
//!
//! Cost: one guard read per round and two `checkAndPut`s of narrow rows per
//! touched row (`combine.rs`), plus re-reads only under contention
//! (docs/hbase.md, "The AddIfAbsent guard").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{THbaseSyncClient, TRowResult};

use super::codec::{self, Attributes};
use super::pool::{Pool, Retry};
use super::tables::Tables;
use crate::contract::layout;
use crate::storage::StorageError;

/// Qualifier of the guard cell in family `S` of a guard row.
pub const GUARD_QUALIFIER: &str = "solus#guard";

/// First byte of a claimed guard value (17 bytes long; free values, this
/// version's and earlier versions', are 16 bytes or empty).
pub const CLAIM_TAG: u8 = 0xC1;

/// How long a claim must be seen unchanged before it is taken over as
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
/// entries after 1 s), nor a free value come back as "no cell" while a read
/// made before it may still claim (within the budget).
pub const TTL_SLACK: Duration = Duration::from_secs(120);

/// Longest pause between two looks at a claimed row.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// `S:solus#guard` as a Thrift column.
pub fn column() -> Vec<u8> {
    codec::column(layout::DATA_FAMILY, GUARD_QUALIFIER)
}

/// Guard cell values by guard row key.
pub type GuardValues = BTreeMap<Vec<u8>, Vec<u8>>;

/// Guard values by guard row key, from rows HBase returned (rows without
/// one are left out: their value is empty, and `checkAndPut` with an empty
/// expected value matches an absent cell).
pub fn values(rows: &[TRowResult]) -> GuardValues {
    let col = column();
    rows.iter()
        .filter_map(|r| {
            let value = r.columns.as_ref()?.get(&col)?.value.clone()?;
            Some((r.row.clone()?, value))
        })
        .collect()
}

/// A fresh free guard value.
pub fn free_value() -> Vec<u8> {
    rand::random::<[u8; 16]>().to_vec()
}

/// A fresh claim value.
pub fn claim_value() -> Vec<u8> {
    let mut v = vec![CLAIM_TAG];
    v.extend_from_slice(&rand::random::<[u8; 16]>());
    v
}

/// Whether `value` is a claim (some request is writing the row).
pub fn is_claimed(value: &[u8]) -> bool {
    value.len() == 17 && value[0] == CLAIM_TAG
}

/// Swaps the guard in guard row `row` from `expected` to `new` with
/// `checkAndPut` (the cell's `_ttl` `ttl_ms`). Ok(false) when the guard
/// held something else. Made once: a lost answer is an error, and the
/// caller reads the guard to learn what happened.
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

/// What [`claim`] needs of the touched rows, by index in the order rows are
/// claimed (the same order in every replica: shard order).
pub trait Rows {
    /// Reads row `i`'s guard, then its bits again (the guard no later than
    /// the bits), keeping the cells for the answer; returns the guard value.
    fn reread(&mut self, i: usize) -> Result<Vec<u8>, StorageError>;
    /// Row `i`'s guard value alone.
    fn peek(&self, i: usize) -> Result<Vec<u8>, StorageError>;
    /// `checkAndPut` of each `(i, expected, new)`, in parallel; each answer
    /// on its own (an error says nothing about the others).
    fn swap_many(&self, swaps: &[(usize, Vec<u8>, Vec<u8>)]) -> Vec<Result<bool, StorageError>>;
}

/// How long [`claim`] waits, lets wait and holds (the constants above;
/// tests shorten them).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// [`CLAIM_LEASE`].
    pub lease: Duration,
    /// Longest a request holds rows while waiting for another, counted from
    /// its earliest held claim ([`CLAIM_LEASE`] / 2): past it the held rows
    /// are given back, so a wait for a dead replica's claim does not get this
    /// request's own claims taken over.
    pub patience: Duration,
    /// [`CLAIM_BUDGET`].
    pub budget: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            lease: CLAIM_LEASE,
            patience: CLAIM_LEASE / 2,
            budget: CLAIM_BUDGET,
        }
    }
}

/// Claims every row, given `expected[i]`, the guard value read before row
/// `i`'s bits (updated as rows are read again). Returns this request's
/// claim value per row, all held. First all free rows at once (the usual,
/// uncontended case: one parallel round of `checkAndPut`s); if one is
/// missing, the rows held after the first missing one are given back
/// (nothing was written under them), and the rest are taken one by one in
/// order, waiting for claimed rows. Once rows have been held for
/// `timing.patience` while waiting for another, they are all given back;
/// the request waits for that row holding nothing and starts over in order.
/// Every claim is a fresh value, so a watcher never takes a claim given
/// back and taken again for one it has watched for a lease. Errors:
/// `Unavailable` past `timing.budget` or on failing calls, after giving
/// back every row held.
pub fn claim(rows: &mut impl Rows, expected: &mut [Vec<u8>], timing: Timing) -> Result<Vec<Vec<u8>>, StorageError> {
    let started = Instant::now();
    let n = expected.len();
    let mut c = Claims {
        mine: (0..n).map(|_| claim_value()).collect(),
        old: vec![Vec::new(); n],
        held: vec![false; n],
        held_since: None,
        // Claims seen at the read are watched from now on, all at once, so
        // several rows a dead replica left are taken over after one lease.
        seen: expected
            .iter()
            .map(|v| is_claimed(v).then(|| (v.clone(), started)))
            .collect(),
    };
    let free: Vec<(usize, Vec<u8>, Vec<u8>)> = (0..n)
        .filter(|&i| !is_claimed(&expected[i]))
        .map(|i| (i, expected[i].clone(), c.mine[i].clone()))
        .collect();
    let sent = Instant::now();
    let mut failed = None;
    for ((i, ..), won) in free.iter().zip(rows.swap_many(&free)) {
        match won {
            Ok(won) => c.held[*i] = won,
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed {
        return Err(c.abandon(rows, expected, e));
    }
    let Some(first) = c.held.iter().position(|h| !h) else {
        return Ok(c.mine);
    };
    c.give_back_from(rows, expected, first);
    if c.held.iter().any(|h| *h) {
        c.held_since = Some(sent);
    }
    let mut i = first;
    while i < n {
        let wait = Wait {
            take: true,
            give_up_at: c.held_since.map(|t| t + timing.patience),
            started,
            timing,
        };
        let taking = Instant::now();
        match acquire(rows, i, &mut expected[i], &c.mine[i], &c.old[i], &mut c.seen[i], wait) {
            Ok(true) => {
                c.held[i] = true;
                c.held_since.get_or_insert(taking);
                i += 1;
            }
            Ok(false) => {
                // Held rows too long while waiting: give them back, wait holding nothing.
                c.give_back_from(rows, expected, 0);
                let wait = Wait {
                    take: false,
                    give_up_at: None,
                    ..wait
                };
                if let Err(e) = acquire(rows, i, &mut expected[i], &c.mine[i], &c.old[i], &mut c.seen[i], wait) {
                    return Err(c.abandon(rows, expected, e));
                }
                i = 0;
            }
            Err(e) => return Err(c.abandon(rows, expected, e)),
        }
    }
    Ok(c.mine)
}

/// What [`claim`] keeps per row.
struct Claims {
    /// The claim value each row is (to be) held with.
    mine: Vec<Vec<u8>>,
    /// Earlier claim values of this request per row, given back (a give-back
    /// whose answer was lost may have left one in place: still ours).
    old: Vec<Vec<Vec<u8>>>,
    held: Vec<bool>,
    /// When the earliest row still held was claimed (patience runs from it).
    held_since: Option<Instant>,
    /// Per row, the claim last seen on it and since when.
    seen: Vec<Option<(Vec<u8>, Instant)>>,
}

impl Claims {
    /// Gives back the rows held from `from` on (nothing written under
    /// them); each gets a fresh claim value for next time.
    fn give_back_from(&mut self, rows: &impl Rows, expected: &mut [Vec<u8>], from: usize) {
        let back: Vec<(usize, Vec<u8>, Vec<u8>)> = (from..self.held.len())
            .filter(|&j| self.held[j])
            .map(|j| (j, self.mine[j].clone(), restored(&mut expected[j])))
            .collect();
        cleanup(|| rows.swap_many(&back));
        for (j, ..) in back {
            self.held[j] = false;
            let fresh = claim_value();
            self.old[j].push(std::mem::replace(&mut self.mine[j], fresh));
        }
        if !self.held.iter().any(|h| *h) {
            self.held_since = None;
        }
    }

    /// Gives back every row this request may hold, and returns `e`.
    fn abandon(&mut self, rows: &impl Rows, expected: &mut [Vec<u8>], e: StorageError) -> StorageError {
        let to: Vec<Vec<u8>> = expected.iter_mut().map(restored).collect();
        let mut swaps = Vec::new();
        for (j, to) in to.iter().enumerate() {
            for value in self.old[j].iter().chain([&self.mine[j]]) {
                swaps.push((j, value.clone(), to.clone()));
            }
        }
        cleanup(|| rows.swap_many(&swaps));
        e
    }
}

/// How [`acquire`] waits.
#[derive(Clone, Copy)]
struct Wait {
    /// Claim the row (else only wait until it can be claimed).
    take: bool,
    /// Give up (Ok(false)) once waiting past this instant.
    give_up_at: Option<Instant>,
    started: Instant,
    timing: Timing,
}

/// Failed `checkAndPut`s in a row (no answer, or a call error) after which
/// [`acquire`] fails the request.
const MAX_SWAP_ERRORS: u32 = 3;

/// Takes row `i` alone: waits while another request's claim is on it
/// (taking it over once the same claim has been seen for the lease), and
/// reads it again after a lost `checkAndPut`. A claim value in `old` is
/// this request's own, given back unanswered: taken at once. Ok(false)
/// past the wait's `give_up_at`; with `take` false, Ok(true) as soon as it
/// could be taken.
fn acquire(
    rows: &mut impl Rows,
    i: usize,
    expected: &mut Vec<u8>,
    mine: &[u8],
    old: &[Vec<u8>],
    seen: &mut Option<(Vec<u8>, Instant)>,
    wait: Wait,
) -> Result<bool, StorageError> {
    let mut pause = Duration::from_millis(1);
    let mut errors = 0;
    loop {
        if expected.as_slice() == mine {
            return Ok(true); // an earlier swap landed though its answer was lost
        }
        if wait.started.elapsed() > wait.timing.budget {
            return Err(StorageError::Unavailable(format!(
                "AddIfAbsent could not claim a shard row within {} s: other replicas kept it \
                 (nothing was written; retry)",
                wait.timing.budget.as_secs()
            )));
        }
        if !is_claimed(expected) {
            *seen = None; // a claim seen after this one is a new one
        }
        let others = is_claimed(expected) && !old.contains(expected);
        if others && !abandoned(expected, seen, wait.timing.lease) {
            if wait.give_up_at.is_some_and(|t| Instant::now() >= t) {
                return Ok(false);
            }
            std::thread::sleep(jittered(pause));
            pause = (pause * 2).min(MAX_PAUSE);
            if rows.peek(i)? != *expected {
                *expected = rows.reread(i)?;
            }
            continue;
        }
        if !wait.take {
            return Ok(true);
        }
        let swap = [(i, expected.clone(), mine.to_vec())];
        match rows.swap_many(&swap).pop() {
            Some(Ok(true)) => return Ok(true),
            Some(Ok(false)) => errors = 0,
            Some(Err(e)) => {
                errors += 1;
                if errors >= MAX_SWAP_ERRORS {
                    return Err(e);
                }
                std::thread::sleep(jittered(pause));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            None => return Err(StorageError::Unavailable("checkAndPut answered nothing".into())),
        }
        *expected = rows.reread(i)?;
    }
}

/// Whether the claim `value` has been seen unchanged for `lease`: `seen`
/// remembers the claim last seen and since when.
fn abandoned(value: &[u8], seen: &mut Option<(Vec<u8>, Instant)>, lease: Duration) -> bool {
    match seen {
        Some((v, since)) if v.as_slice() == value => {
            let over = since.elapsed() >= lease;
            if over {
                tracing::warn!(
                    lease_ms = lease.as_millis() as u64,
                    "AddIfAbsent taking over a shard row claimed by a replica that held it past the guard \
                     lease (died or stalled mid-write); that replica answers the row present if it comes back"
                );
            }
            over
        }
        _ => {
            *seen = Some((value.to_vec(), Instant::now()));
            false
        }
    }
}

/// Between half and all of `pause`, so racing requests drift apart.
fn jittered(pause: Duration) -> Duration {
    pause / 2 + pause.mul_f64(rand::random::<f64>() / 2.0)
}

/// What a row given back with nothing written gets: the value read with its
/// bits, or a fresh free value (then also the new `expected`) when that was
/// a claim this request took over, so the row is not handed back to a dead
/// replica (the others would wait a lease again). A holder of that old
/// claim that comes back fails its release either way.
fn restored(expected: &mut Vec<u8>) -> Vec<u8> {
    if is_claimed(expected) {
        *expected = free_value();
    }
    expected.clone()
}

/// Gives back every row this request may hold (a `checkAndPut` from its
/// claim value matches only rows it holds), restoring `to[i]`. Best effort:
/// a row left claimed is taken over after the lease.
pub fn give_back(rows: &impl Rows, mine: &[Vec<u8>], to: &[Vec<u8>]) {
    let swaps: Vec<(usize, Vec<u8>, Vec<u8>)> = (0..mine.len()).map(|i| (i, mine[i].clone(), to[i].clone())).collect();
    cleanup(|| rows.swap_many(&swaps));
}

/// Runs `f` even if the gRPC caller has left (the pool skips a gone
/// caller's calls): a claim left behind stalls every replica for a lease.
fn cleanup<T>(f: impl FnOnce() -> T) -> T {
    crate::storage::caller::run_for(None, f)
}

/// Releases every row after the bits are written: each guard from this
/// request's claim value to a fresh free value. Per row, whether the release
/// landed; a row taken over is `false`, and its bits must be answered as
/// set. A release that failed without an answer is checked by reading the
/// guard: the fresh value means it landed, this request's claim is released
/// again once, anything else is `false`.
pub fn release(rows: &impl Rows, mine: &[Vec<u8>]) -> Vec<bool> {
    cleanup(|| {
        let swaps: Vec<(usize, Vec<u8>, Vec<u8>)> =
            (0..mine.len()).map(|i| (i, mine[i].clone(), free_value())).collect();
        let answers = rows.swap_many(&swaps);
        swaps
            .iter()
            .zip(answers)
            .map(|((i, mine, fresh), answer)| match answer {
                Ok(released) => released,
                Err(_) => match rows.peek(*i) {
                    Ok(now) if now == *fresh => true,
                    Ok(now) if now == *mine => {
                        let again = [(*i, mine.clone(), free_value())];
                        matches!(rows.swap_many(&again).pop(), Some(Ok(true)))
                    }
                    _ => false,
                },
            })
            .collect()
    })
}

#[cfg(test)]
mod tests;
