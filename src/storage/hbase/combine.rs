//! Group commit for guarded `AddIfAbsent` without a request id, and for
//! plain reads (`CheckAbsence`) and writes (`Add`) of one deduper.
//!
//! Guarded requests of one process that touch the same shard rows run one
//! after another anyway (`row_locks.rs`): with a batch of more than a few
//! entities every request touches every row of its deduper. So instead of
//! queueing behind each other, the requests that wait for one deduper are
//! served together: one read of the union of their bits (each row read once,
//! after its guard), each member's own write (its own expiry: `mutateRowsTs`
//! has one timestamp per call), and one guard claim and release (a
//! `checkAndPut` each). HBase decodes a wide row once per round instead of
//! once per request: measured on real HBase 2.6.1, docs/hbase.md "Group
//! commit".
//!
//! Reads and writes of one deduper are combined the same way, each kind in
//! its own queue: a round of reads makes one `getRowWithColumns` per row for
//! all its members (a get of a wide row has a fixed cost - a scanner on every
//! store file - whatever its columns), a round of writes one `mutateRowsTs`
//! per group of expiries (no concurrent inserts into the same rows). A
//! member joins before its round reads, so it sees every write acknowledged
//! before it arrived.
//!
//! A round waits briefly for stragglers ([`linger_until`]): with clients
//! that each send their next request as soon as they have an answer, rounds
//! otherwise settle into alternating groups (one client, then the other
//! three, ...), each paying the round's fixed costs - the shard-row gets,
//! the guard read and its two `checkAndPut`s - for part of the clients.
//!
//! Each member is answered as if the members had run one after another in
//! arrival order: a member sees the bits of the members before it as set,
//! with the expiry they wrote ([`answers`]). A refused release sets the row's
//! bits for every member, as it would for each of them alone (`guarded_round`).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::storage::{BitAddr, Cell, StorageError};

/// Most bits one round takes (the first member always goes, whatever its
/// size): about 37 requests of 1,000 entities at k = 7, or 3 of 10,000. A
/// round's reads are sliced per row (`max_cells_per_read`) like any read.
pub const MAX_ROUND_BITS: usize = 262_144;

/// One request of a round: its bits (sorted, unique) and the expiry it writes.
#[derive(Debug, Clone)]
pub struct Member {
    pub bits: Vec<BitAddr>,
    pub expire_ms: i64,
}

/// Longest a round waits for stragglers after the last one ended
/// ([`linger_until`]).
pub const MAX_LINGER: Duration = Duration::from_millis(10);

/// The requests waiting per deduper, and which deduper has a round running.
#[derive(Default)]
pub struct Combiner {
    queues: Mutex<HashMap<String, Queue>>,
    finished: Condvar,
    /// Signalled when a request joins a queue (a lingering round counts them).
    arrived: Condvar,
    /// Rounds start at once, never waiting for stragglers ([`Combiner::eager`]).
    eager: bool,
}

#[derive(Default)]
struct Queue {
    running: bool,
    next_id: u64,
    pending: VecDeque<(u64, Member)>,
    results: HashMap<u64, Result<Vec<Cell>, StorageError>>,
    last: Option<LastRound>,
}

impl Queue {
    /// Nothing running, waiting or to be picked up.
    fn idle(&self) -> bool {
        !self.running && self.pending.is_empty() && self.results.is_empty()
    }

    /// Idle, and its last round can no longer make a round linger (the
    /// queue, and with it that round, can go).
    fn done_at(&self, now: Instant) -> bool {
        self.idle() && self.last.is_none_or(|l| l.linger_end() <= now)
    }
}

/// What a queue remembers of its last round (for [`linger_until`]).
#[derive(Debug, Clone, Copy)]
pub struct LastRound {
    /// The requests it served plus those that arrived while it ran (waiting
    /// at its end): the clients likely active. Its members alone would
    /// ratchet down - after one round of half the clients (a hiccup), the
    /// halves alternate for good, each round starting as soon as the other
    /// half has queued behind it.
    pub clients: usize,
    pub took: Duration,
    pub ended: Instant,
}

/// Until when a round about to start with `pending` members waits for
/// more: while fewer requests wait than the last round's clients, those
/// are likely sending their next ones right after their answers. Until the
/// last round's end plus [`MAX_LINGER`] or a quarter of its duration,
/// whichever is less (fast rounds never wait long, and a request arriving
/// well after that round does not wait at all); `None` when as many wait
/// already, or with no round before.
pub fn linger_until(pending: usize, last: Option<LastRound>) -> Option<Instant> {
    Some(last.filter(|l| pending < l.clients)?.linger_end())
}

impl LastRound {
    /// The latest a round after this one lingers until.
    fn linger_end(&self) -> Instant {
        self.ended + MAX_LINGER.min(self.took / 4)
    }
}

impl Combiner {
    /// A combiner whose rounds never linger: for rounds without fixed costs
    /// worth sharing (writes), where a lingering round only idles HBase.
    pub fn eager() -> Combiner {
        Combiner {
            eager: true,
            ..Combiner::default()
        }
    }

    /// Serves `member` in a round of the requests waiting under `key` (one
    /// deduper's rows). The caller that finds no round running runs the next
    /// one with `round`, for up to [`MAX_ROUND_BITS`] of the waiting members
    /// in arrival order; `round` answers each member's cells, in the order
    /// of its bits. A failed round fails each of its members with the error.
    pub fn serve(
        &self,
        key: &str,
        member: Member,
        round: impl Fn(&[Member]) -> Result<Vec<Vec<Cell>>, StorageError>,
    ) -> Result<Vec<Cell>, StorageError> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if !queues.contains_key(key) {
            // Idle queues stay while their last round can still make a
            // round linger; a new key sweeps out the ones past that.
            let now = Instant::now();
            queues.retain(|_, q| !q.done_at(now));
        }
        let q = queues.entry(key.to_string()).or_default();
        let id = q.next_id;
        q.next_id += 1;
        q.pending.push_back((id, member));
        self.arrived.notify_all();
        loop {
            let q = queues.get_mut(key).expect("a queue lives while it has members");
            if let Some(result) = q.results.remove(&id) {
                // Kept while its last round may make the next one linger
                // (the clients' next requests are on their way).
                if q.done_at(Instant::now()) {
                    queues.remove(key);
                }
                return result;
            }
            if q.running {
                queues = self.finished.wait(queues).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            q.running = true;
            let last = q.last;
            queues = self.gather(queues, key, last);
            let q = queues.get_mut(key).expect("a queue lives while it has members");
            let (ids, members) = take_round(&mut q.pending);
            drop(queues);
            let started = Instant::now();
            // A round serving others (several, or another's alone) must not
            // stop when the caller running it leaves (the pool skips a gone
            // caller's calls).
            let run = || {
                if members.len() > 1 || ids[0] != id {
                    crate::storage::caller::run_for(None, || round(&members))
                } else {
                    round(&members)
                }
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            let q = queues.get_mut(key).expect("a queue lives while it has members");
            q.running = false;
            q.last = Some(LastRound {
                clients: ids.len() + q.pending.len(),
                took: started.elapsed(),
                ended: Instant::now(),
            });
            let panicked = outcome.is_err();
            match outcome {
                Ok(Ok(cells)) if cells.len() == ids.len() => {
                    q.results.extend(ids.into_iter().zip(cells.into_iter().map(Ok)))
                }
                Ok(Ok(cells)) => {
                    let e =
                        StorageError::Corrupt(format!("a round answered {} of {} requests", cells.len(), ids.len()));
                    q.results.extend(ids.into_iter().map(|i| (i, Err(e.clone()))));
                }
                Ok(Err(e)) => q.results.extend(ids.into_iter().map(|i| (i, Err(e.clone())))),
                Err(_) => {
                    let e = StorageError::Unavailable("a round of requests served together panicked".into());
                    q.results.extend(ids.into_iter().map(|i| (i, Err(e.clone()))));
                }
            }
            self.finished.notify_all();
            if panicked {
                tracing::error!("a round of requests served together panicked; its requests fail UNAVAILABLE");
            }
        }
    }
}

impl Combiner {
    /// Waits (queue lock released meanwhile) while [`linger_until`] says
    /// so and the pending members fit in one round.
    fn gather<'a>(
        &self,
        mut queues: MutexGuard<'a, HashMap<String, Queue>>,
        key: &str,
        last: Option<LastRound>,
    ) -> MutexGuard<'a, HashMap<String, Queue>> {
        loop {
            let q = queues.get(key).expect("a queue lives while it has members");
            let bits: usize = q.pending.iter().map(|(_, m)| m.bits.len()).sum();
            let until = if self.eager {
                None
            } else {
                linger_until(q.pending.len(), last)
            };
            let wait = until.map_or(Duration::ZERO, |t| t.saturating_duration_since(Instant::now()));
            if wait.is_zero() || bits >= MAX_ROUND_BITS {
                return queues;
            }
            queues = self
                .arrived
                .wait_timeout(queues, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// The next round: the first waiting member, then the following ones while
/// the round stays within [`MAX_ROUND_BITS`].
fn take_round(pending: &mut VecDeque<(u64, Member)>) -> (Vec<u64>, Vec<Member>) {
    let (mut ids, mut members, mut bits) = (Vec::new(), Vec::new(), 0);
    while let Some((_, m)) = pending.front() {
        if !members.is_empty() && bits + m.bits.len() > MAX_ROUND_BITS {
            break;
        }
        let (id, m) = pending.pop_front().expect("front exists");
        bits += m.bits.len();
        ids.push(id);
        members.push(m);
    }
    (ids, members)
}

/// Expiries at most this far apart (ms) are written as one, the latest of
/// them: a backend may round an expiry up, never down (`Cell`), and a bit
/// living up to a second longer changes no answer within its TTL.
pub const MERGE_WITHIN_MS: i64 = 1000;

/// What a round writes: the members grouped by expiry (each group's
/// expiries within [`MERGE_WITHIN_MS`] of its earliest), each group as the
/// sorted, unique union of its bits at the group's latest expiry. One
/// `mutateRowsTs` per row per group instead of one per member: parallel
/// writes into the same rows cost the region server memstore contention
/// (docs/hbase.md "Where the region server spends it"). Borrowed for a
/// group of one.
pub fn writes(members: &[Member]) -> Vec<(Cow<'_, [BitAddr]>, i64)> {
    let mut order: Vec<&Member> = members.iter().collect();
    order.sort_by_key(|m| m.expire_ms);
    let mut out = Vec::new();
    let mut rest = order.as_slice();
    while let Some(first) = rest.first() {
        let n = rest
            .iter()
            .take_while(|m| m.expire_ms - first.expire_ms <= MERGE_WITHIN_MS)
            .count();
        let (group, after) = rest.split_at(n);
        let latest = group[n - 1].expire_ms;
        let bits = match group {
            [one] => Cow::Borrowed(one.bits.as_slice()),
            _ => Cow::Owned(sorted_unique(group.iter().flat_map(|m| &m.bits))),
        };
        out.push((bits, latest));
        rest = after;
    }
    out
}

/// The sorted, unique union of the members' bits: what a round reads.
pub fn union(members: &[Member]) -> Vec<BitAddr> {
    if let [one] = members {
        return one.bits.clone(); // already sorted and unique
    }
    sorted_unique(members.iter().flat_map(|m| &m.bits))
}

fn sorted_unique<'a>(bits: impl Iterator<Item = &'a BitAddr>) -> Vec<BitAddr> {
    let mut all: Vec<BitAddr> = bits.copied().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// Each member's cells from one read of `union` (`cells[i]` is
/// `union[i]`), as HBase held them: what a round of reads answers.
pub fn each(members: &[Member], union: &[BitAddr], cells: &[Cell]) -> Vec<Vec<Cell>> {
    if let [_] = members {
        return vec![cells.to_vec()];
    }
    members
        .iter()
        .map(|m| {
            m.bits
                .iter()
                .map(|a| union.binary_search(a).map(|i| cells[i]).unwrap_or_default())
                .collect()
        })
        .collect()
}

/// Each member's cells from the round's read of `union` (`cells[i]` is
/// `union[i]`), as if the members had run one after another: a bit an
/// earlier member wrote reads as the later of what HBase held and that
/// member's expiry (cell timestamps are expiry times; HBase returns the
/// newest).
pub fn answers(members: &[Member], union: &[BitAddr], cells: &[Cell]) -> Vec<Vec<Cell>> {
    let mut out = each(members, union, cells);
    let mut written: HashMap<BitAddr, i64> = HashMap::new();
    let last = members.len() - 1;
    for (i, (m, mine)) in members.iter().zip(&mut out).enumerate() {
        for (a, c) in m.bits.iter().zip(mine.iter_mut()) {
            if let Some(&e) = written.get(a) {
                c.expire_ms = Some(c.expire_ms.map_or(e, |x| x.max(e)));
            }
        }
        if i == last {
            break; // only later members read what a member wrote (none after a round of one)
        }
        for a in &m.bits {
            let e = written.entry(*a).or_insert(m.expire_ms);
            *e = (*e).max(m.expire_ms);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn addr(shard: u32, bit: u32) -> BitAddr {
        BitAddr { shard, bit }
    }

    fn member(bits: &[(u32, u32)], expire_ms: i64) -> Member {
        Member {
            bits: bits.iter().map(|&(s, b)| addr(s, b)).collect(),
            expire_ms,
        }
    }

    #[test]
    fn later_members_see_earlier_members_bits() {
        let members = [member(&[(0, 1), (1, 5)], 500), member(&[(0, 1), (0, 2), (1, 5)], 400)];
        let all = union(&members);
        assert_eq!(all, vec![addr(0, 1), addr(0, 2), addr(1, 5)]);
        // HBase held bit 0/2 until 450, nothing else.
        let at = |e: Option<i64>| Cell {
            expire_ms: e,
            legacy: None,
        };
        let read = [at(None), at(Some(450)), at(None)];
        let got = answers(&members, &all, &read);
        assert_eq!(
            got[0],
            vec![at(None), at(None)],
            "the first member reads HBase as it was"
        );
        assert_eq!(
            got[1],
            vec![at(Some(500)), at(Some(450)), at(Some(500))],
            "the second reads the first's writes"
        );
        let one = &members[..1];
        assert_eq!(union(one), members[0].bits, "a round of one reads its own bits");
        assert_eq!(answers(one, &union(one), &read[..2]), vec![read[..2].to_vec()]);
    }

    #[test]
    fn reads_answer_each_member_what_hbase_held() {
        // Expiries as a write round would carry them: a read must not apply them.
        let members = [member(&[(0, 1), (1, 5)], 900), member(&[(0, 1), (0, 2), (1, 5)], 900)];
        let all = union(&members);
        let at = |e: Option<i64>| Cell {
            expire_ms: e,
            legacy: None,
        };
        let read = [at(None), at(None), at(Some(450))];
        let got = each(&members, &all, &read);
        assert_eq!(got[0], vec![at(None), at(Some(450))]);
        assert_eq!(
            got[1],
            vec![at(None), at(None), at(Some(450))],
            "no member sees another's bits as set"
        );
        assert_ne!(got, answers(&members, &all, &read), "answers() would set them");
    }

    #[test]
    fn writes_merge_expiries_within_a_second_upward_and_never_down() {
        let members = [
            member(&[(0, 3), (1, 1)], 10_000),
            member(&[(0, 3), (0, 7)], 10_900),
            member(&[(2, 2)], 12_500),
            member(&[(0, 1)], 10_400),
        ];
        let got: Vec<(Vec<BitAddr>, i64)> = writes(&members).into_iter().map(|(b, e)| (b.into_owned(), e)).collect();
        assert_eq!(
            got,
            vec![
                (vec![addr(0, 1), addr(0, 3), addr(0, 7), addr(1, 1)], 10_900),
                (vec![addr(2, 2)], 12_500),
            ]
        );
        // Every member's bits are written at its own expiry or later.
        for m in &members {
            for a in &m.bits {
                assert!(got.iter().any(|(b, e)| b.contains(a) && *e >= m.expire_ms), "{a:?}");
            }
        }
        // A chain of expiries 600 ms apart is cut where the group's span would pass a second.
        let chain = [member(&[(0, 1)], 0), member(&[(0, 2)], 600), member(&[(0, 3)], 1200)];
        let spans: Vec<i64> = writes(&chain).into_iter().map(|(_, e)| e).collect();
        assert_eq!(spans, vec![600, 1200]);
        let one = &members[..1];
        assert!(
            matches!(writes(one)[0].0, Cow::Borrowed(_)),
            "a round of one writes its own bits"
        );
    }

    #[test]
    fn waiting_requests_share_rounds_and_each_gets_its_own_answer() {
        let combiner = Arc::new(Combiner::default());
        let rounds = Arc::new(AtomicUsize::new(0));
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let (combiner, rounds, inside) = (combiner.clone(), rounds.clone(), inside.clone());
                std::thread::spawn(move || {
                    for i in 0..50u32 {
                        let m = member(&[(t, i)], i64::from(t * 1000 + i));
                        let got = combiner
                            .serve("d", m, |members| {
                                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two rounds at once");
                                rounds.fetch_add(1, Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_millis(1));
                                inside.fetch_sub(1, Ordering::SeqCst);
                                // Answer each member with its own expiry, to check the routing.
                                Ok(members
                                    .iter()
                                    .map(|m| {
                                        vec![Cell {
                                            expire_ms: Some(m.expire_ms),
                                            legacy: None,
                                        }]
                                    })
                                    .collect())
                            })
                            .unwrap();
                        assert_eq!(got[0].expire_ms, Some(i64::from(t * 1000 + i)));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let rounds = rounds.load(Ordering::SeqCst);
        assert!(
            rounds < 400,
            "{rounds} rounds for 400 requests from 8 threads: none shared"
        );
        assert!(
            combiner.queues.lock().unwrap().values().all(Queue::idle),
            "a queue left busy"
        );
    }

    #[test]
    fn a_round_lingers_only_for_fewer_than_the_last_rounds_clients() {
        let ended = Instant::now();
        let last = |clients, took_ms| {
            Some(LastRound {
                clients,
                took: Duration::from_millis(took_ms),
                ended,
            })
        };
        assert_eq!(linger_until(1, None), None);
        assert_eq!(linger_until(4, last(4, 400)), None);
        assert_eq!(linger_until(1, last(1, 400)), None, "a lone client never waits");
        assert_eq!(linger_until(1, last(4, 400)), Some(ended + MAX_LINGER));
        assert_eq!(linger_until(3, last(4, 8)), Some(ended + Duration::from_millis(2)));
    }

    /// Four clients, each sending its next request 1 ms after its answer,
    /// rounds of 20 ms: without the linger the rounds alternate between
    /// part of the clients (1 and 3, ~2 a round; also when the queue, and
    /// with it the last round, was dropped as soon as the answers were
    /// picked up, as first built); with it nearly every round serves all four.
    #[test]
    fn closed_loop_clients_share_whole_rounds() {
        let sizes = closed_loop_round_sizes(|_, _| Duration::from_millis(1));
        assert_eq!(sizes.iter().sum::<usize>(), 100);
        let mean = 100.0 / sizes.len() as f64;
        assert!(
            mean >= 3.3,
            "{mean:.2} requests a round over {} rounds: {sizes:?}",
            sizes.len()
        );
    }

    /// Two of the four clients stall 15 ms once (a GC pause, a busy core:
    /// how CI found it). While a round's lingering target was its last
    /// round's members alone, the next round served the other two, the
    /// stalled pair queued behind it and started as soon as it ended, and
    /// the halves alternated in rounds of 2 for the rest of the run (mean
    /// 2.27 on CI).
    #[test]
    fn rounds_grow_back_after_a_hiccup_splits_the_clients() {
        let sizes = closed_loop_round_sizes(|t, i| Duration::from_millis(if t < 2 && i == 3 { 15 } else { 1 }));
        let after = &sizes[sizes.len() / 2..];
        let mean = after.iter().sum::<usize>() as f64 / after.len() as f64;
        assert!(
            mean >= 3.3,
            "{mean:.2} requests a round in the run's second half: {sizes:?}"
        );
    }

    /// Round sizes of four closed-loop clients (25 requests each, rounds of
    /// 20 ms), client `t` waiting `pause(t, i)` after its `i`th answer (the
    /// answer's way back and the next request's way in).
    fn closed_loop_round_sizes(pause: fn(u32, u32) -> Duration) -> Vec<usize> {
        let combiner = Arc::new(Combiner::default());
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let (combiner, sizes) = (combiner.clone(), sizes.clone());
                std::thread::spawn(move || {
                    for i in 0..25u32 {
                        combiner
                            .serve("d", member(&[(t, i)], 1), |members| {
                                sizes.lock().unwrap().push(members.len());
                                std::thread::sleep(Duration::from_millis(20));
                                Ok(members.iter().map(|_| vec![Cell::default()]).collect())
                            })
                            .unwrap();
                        std::thread::sleep(pause(t, i));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let sizes = sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 100);
        sizes
    }

    #[test]
    fn a_failed_round_fails_each_member_and_the_next_round_runs() {
        let combiner = Combiner::default();
        let err = combiner.serve("d", member(&[(0, 1)], 1), |_| {
            Err(StorageError::Unavailable("down".into()))
        });
        assert!(
            matches!(err, Err(StorageError::Unavailable(ref s)) if s == "down"),
            "{err:?}"
        );
        let ok = combiner.serve("d", member(&[(0, 1)], 1), |m| {
            Ok(vec![vec![Cell::default(); m[0].bits.len()]])
        });
        assert_eq!(ok.unwrap().len(), 1);
    }

    #[test]
    fn a_round_takes_members_up_to_the_bit_limit_and_at_least_one() {
        let big = |n: usize| Member {
            bits: (0..n as u32).map(|b| addr(0, b)).collect(),
            expire_ms: 1,
        };
        let mut pending: VecDeque<(u64, Member)> = [(1, big(MAX_ROUND_BITS + 1)), (2, big(10))].into_iter().collect();
        assert_eq!(take_round(&mut pending).0, vec![1]);
        assert_eq!(take_round(&mut pending).0, vec![2]);
        let mut pending: VecDeque<(u64, Member)> =
            [(1, big(MAX_ROUND_BITS / 2)), (2, big(MAX_ROUND_BITS / 2)), (3, big(1))]
                .into_iter()
                .collect();
        assert_eq!(take_round(&mut pending).0, vec![1, 2]);
    }
}
