use super::*;
use hbase_thrift::hbase::TCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

#[test]
fn the_guard_cell_is_read_from_its_row_and_an_absent_one_is_empty() {
    let cell = |v: &[u8]| TCell::new(v.to_vec(), 1);
    let rows = vec![TRowResult::new(
        b"g".to_vec(),
        BTreeMap::from([(column(), cell(b"\x02v"))]),
        None,
    )];
    assert_eq!(value(&rows), b"\x02v");
    assert_eq!(value(&[]), b"");
    assert_eq!(column(), b"S:solus#guard");
}

#[test]
fn slots_encode_to_their_documented_bytes_and_back() {
    let slots = Slots::from([(3, Slot::held([7; 12])), (0x0102_0304, Slot::released([9; 12]))]);
    let bytes = encode(&slots);
    let mut want = vec![FORMAT, 0, 0, 0, 3, 1];
    want.extend_from_slice(&[7; 12]);
    want.extend_from_slice(&[1, 2, 3, 4, 0]);
    want.extend_from_slice(&[9; 12]);
    assert_eq!(bytes, want);
    assert_eq!(decode(&bytes).unwrap(), slots);
    assert_eq!(decode(&[]).unwrap(), Slots::new());
    // Another version's guard values (a per-row claim of the 2026-12-05 guard, 17 bytes) are refused.
    let mut old = vec![0xC1];
    old.extend_from_slice(&[5; 16]);
    assert!(matches!(decode(&old), Err(StorageError::Corrupt(_))));
    assert!(matches!(
        decode(&bytes[..bytes.len() - 1]),
        Err(StorageError::Corrupt(_))
    ));
    assert_ne!(token(), token());
}

/// An in-memory HBase stand-in: per row a set of bits, and the deduper's
/// guard cell, swapped atomically (`checkAndPut`) and read before, not
/// with, the rows' bits (the guard row is another HBase row).
#[derive(Default)]
struct Table {
    rows: Mutex<Vec<BTreeSet<u32>>>,
    guard: Mutex<Vec<u8>>,
    /// `checkAndPut`s that found another value (contention happened).
    refused: AtomicUsize,
    /// `checkAndPut`s and bit reads made.
    swaps: AtomicUsize,
    rereads: AtomicUsize,
    /// The next this many `checkAndPut`s land but answer an error (a lost answer).
    lose_answers: AtomicUsize,
    /// Another request changes another slot (shard 99) just before every
    /// `checkAndPut` while set, so each is refused.
    churn: std::sync::atomic::AtomicBool,
    /// The next this many `checkAndPut`s answer an error without landing;
    /// with `land_late`, each lands at the next read instead (if the cell
    /// still holds its expected value, as HBase would check).
    drop_answers: AtomicUsize,
    land_late: std::sync::atomic::AtomicBool,
    late: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
    /// The next this many reads of the guard cell answer an error.
    fail_peeks: AtomicUsize,
}

impl Table {
    fn with_rows(n: usize) -> Table {
        let t = Table::default();
        *t.rows.lock().unwrap() = vec![BTreeSet::new(); n];
        t
    }

    fn slots(&self) -> Slots {
        decode(&self.guard.lock().unwrap()).unwrap()
    }

    /// Sets row `shard`'s slot as another request would.
    fn set_slot(&self, shard: u32, slot: Slot) {
        let mut slots = self.slots();
        slots.insert(shard, slot);
        *self.guard.lock().unwrap() = encode(&slots);
    }

    fn none_held(&self) -> bool {
        self.slots().values().all(|s| !s.held)
    }
}

/// One request's view of the table: the table rows it touches (its shards,
/// sorted) and the bits it asks for in each.
struct Request<'a> {
    table: &'a Table,
    shards: Vec<u32>,
    wanted: Vec<Vec<u32>>,
    /// Per row, which wanted bits were set at its latest read.
    seen: Vec<Vec<bool>>,
}

impl Request<'_> {
    /// A request that has read the guard, then its rows' bits; with the
    /// guard value read.
    fn at(table: &Table, shards: Vec<u32>, wanted: Vec<Vec<u32>>) -> (Request<'_>, Vec<u8>) {
        let mut r = Request {
            table,
            shards,
            seen: vec![Vec::new(); wanted.len()],
            wanted,
        };
        let all: Vec<usize> = (0..r.wanted.len()).collect();
        let first = r.reread(&all).unwrap();
        (r, first)
    }
}

impl Rows for Request<'_> {
    fn peek(&self) -> Result<Vec<u8>, StorageError> {
        if self
            .table
            .fail_peeks
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StorageError::Unavailable("guard row read failed".into()));
        }
        let mut guard = self.table.guard.lock().unwrap();
        for (expected, new) in self.table.late.lock().unwrap().drain(..) {
            if *guard == expected {
                *guard = new;
            }
        }
        Ok(guard.clone())
    }
    fn reread(&mut self, which: &[usize]) -> Result<Vec<u8>, StorageError> {
        self.table.rereads.fetch_add(1, SeqCst);
        let guard = self.peek()?;
        std::thread::yield_now(); // another request may write in between
        let rows = self.table.rows.lock().unwrap();
        for &i in which {
            let row = &rows[self.shards[i] as usize];
            self.seen[i] = self.wanted[i].iter().map(|b| row.contains(b)).collect();
        }
        Ok(guard)
    }
    fn swap(&self, expected: &[u8], new: &[u8]) -> Result<bool, StorageError> {
        std::thread::yield_now();
        self.table.swaps.fetch_add(1, SeqCst);
        if self.table.churn.load(SeqCst) {
            self.table.set_slot(99, Slot::released(token()));
        }
        if self
            .table
            .drop_answers
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            if self.table.land_late.load(SeqCst) {
                self.table.late.lock().unwrap().push((expected.to_vec(), new.to_vec()));
            }
            return Err(StorageError::Unavailable("no answer".into()));
        }
        let won = {
            let mut guard = self.table.guard.lock().unwrap();
            let won = *guard == expected;
            if won {
                *guard = new.to_vec();
            } else {
                self.table.refused.fetch_add(1, SeqCst);
            }
            won
        };
        if self
            .table
            .lose_answers
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(StorageError::Unavailable("answer lost".into()));
        }
        Ok(won)
    }
}

/// A lease of milliseconds, with a 20 s budget.
fn short(lease_ms: u64) -> Timing {
    Timing {
        lease: Duration::from_millis(lease_ms),
        budget: Duration::from_secs(20),
    }
}

/// One guarded AddIfAbsent of `entities` (each a bit per row, rows
/// `0..n`): claim, answer from the reads, write, release. Per entity,
/// whether it was answered absent.
fn add_if_absent(table: &Table, entities: &[Vec<u32>]) -> Vec<bool> {
    let shards = (0..entities[0].len() as u32).collect();
    add_if_absent_at(table, shards, entities, Timing::default())
}

/// [`add_if_absent`] on table rows `shards` (entity bit `r` in row
/// `shards[r]`).
fn add_if_absent_at(table: &Table, shards: Vec<u32>, entities: &[Vec<u32>], timing: Timing) -> Vec<bool> {
    let rows = shards.len();
    let wanted: Vec<Vec<u32>> = (0..rows).map(|r| entities.iter().map(|e| e[r]).collect()).collect();
    let (mut req, first) = Request::at(table, shards.clone(), wanted);
    let claim = claim(&mut req, &shards, first, timing, &[], &mut Vec::new()).expect("claimed");
    let absent: Vec<bool> = (0..entities.len())
        .map(|e| (0..rows).any(|r| !req.seen[r][e]))
        .collect();
    {
        let slots = table.slots();
        let mut t = table.rows.lock().unwrap();
        for (r, bits) in req.wanted.iter().enumerate() {
            let s = shards[r];
            assert_eq!(slots[&s], Slot::held(claim.token), "written without holding row {s}");
            t[s as usize].extend(bits);
        }
    }
    let kept = release(&req, &shards, &claim, Timing::default());
    assert!(kept.iter().all(|k| *k), "a live claim was taken over");
    absent
}

/// The protocol's promise, checked on the stand-in with 6 threads x 30
/// requests racing on 4 rows (fixed entities): each entity sent by several
/// requests is answered "absent" exactly once, and an entity sent by one
/// request only is answered "absent" (the loser of a claim no longer takes
/// the row as set: nothing here collides but identical entities).
#[test]
fn racing_requests_answer_each_entity_absent_exactly_once_and_new_ones_absent() {
    let table = Arc::new(Table::with_rows(4));
    let threads: Vec<_> = (0..6u32)
        .map(|t| {
            let table = table.clone();
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                for r in 0..30u32 {
                    // Shared entities s0..s9 of this request number (every thread sends them),
                    // and 10 of the thread's own; an entity's bit in row i is distinct per entity.
                    let shared = (0..10u32).map(|e| (r * 10 + e, true));
                    let own = (0..10u32).map(|e| (100_000 + t * 10_000 + r * 10 + e, false));
                    let entities: Vec<(u32, bool)> = shared.chain(own).collect();
                    let bits: Vec<Vec<u32>> = entities.iter().map(|(id, _)| vec![*id; 4]).collect();
                    let got = add_if_absent(&table, &bits);
                    answers.extend(entities.into_iter().zip(got));
                }
                answers
            })
        })
        .collect();
    let mut absent_count: BTreeMap<u32, usize> = BTreeMap::new();
    for t in threads {
        for ((id, shared), absent) in t.join().unwrap() {
            let n = absent_count.entry(id).or_default();
            *n += usize::from(absent);
            if !shared {
                assert!(absent, "entity {id}, sent once, answered present");
            }
        }
    }
    let shared: Vec<_> = absent_count.iter().filter(|(id, _)| **id < 100_000).collect();
    assert_eq!(shared.len(), 300);
    for (id, n) in shared {
        assert_eq!(*n, 1, "shared entity {id} answered absent {n} times");
    }
    assert!(table.none_held(), "a row left claimed");
    assert!(
        table.refused.load(SeqCst) > 0,
        "no claim was ever refused: the race did not happen"
    );
}

/// Requests on disjoint rows racing for the one cell: each still answers
/// its own new entities absent, and a claim refused only because another
/// row's slot moved does not read its rows again (3 threads x 40 requests,
/// one row each).
#[test]
fn requests_on_other_rows_do_not_make_a_request_read_again() {
    let table = Arc::new(Table::with_rows(3));
    let threads: Vec<_> = (0..3u32)
        .map(|t| {
            let table = table.clone();
            std::thread::spawn(move || {
                (0..40u32)
                    .flat_map(|r| add_if_absent_at(&table, vec![t], &[vec![r], vec![1_000 + r]], Timing::default()))
                    .collect::<Vec<bool>>()
            })
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap().iter().all(|a| *a), "a new entity answered present");
    }
    assert_eq!(table.rereads.load(SeqCst), 120, "one read per request, none again");
    assert!(table.refused.load(SeqCst) > 0, "the race did not happen");
    assert!(table.none_held());
}

/// A row claimed, written and released by another request between this
/// request's read and its claim (a released slot looks like the free one it
/// read but for its token) is read again: the other's bit is in the answer.
#[test]
fn a_row_written_between_the_read_and_the_claim_is_read_again() {
    let table = Table::with_rows(1);
    let (mut late, first) = Request::at(&table, vec![0], vec![vec![4]]);
    assert_eq!(add_if_absent(&table, &[vec![4]]), vec![true]);
    let claim = claim(&mut late, &[0], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    assert_eq!(late.seen[0], vec![true], "the other request's bit 4 seen");
    assert_eq!(release(&late, &[0], &claim, Timing::default()), vec![true]);
}

/// A row found held is waited for, and claimed once its holder releases
/// it; the bits its holder wrote meanwhile are in the answer.
#[test]
fn a_held_row_is_waited_for_and_read_after_its_holder_writes() {
    let table = Arc::new(Table::with_rows(1));
    let holder = token();
    table.set_slot(0, Slot::held(holder));
    let writer = {
        let table = table.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            table.rows.lock().unwrap()[0].insert(7);
            table.set_slot(0, Slot::released(holder));
        })
    };
    let started = Instant::now();
    let answers = add_if_absent(&table, &[vec![7], vec![8]]);
    writer.join().unwrap();
    assert_eq!(answers, vec![false, true], "the holder's bit 7 seen, bit 8 new");
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(started.elapsed() < CLAIM_LEASE, "waited for the holder, not the lease");
}

/// A holder whose claim was taken over (it stalled past the lease) finds
/// another token in its slot when it releases, so its caller answers that
/// row as set; its other row is released.
#[test]
fn a_release_after_a_takeover_keeps_only_the_rows_still_held() {
    let table = Table::with_rows(2);
    let (mut req, first) = Request::at(&table, vec![0, 1], vec![vec![1], vec![2]]);
    let mine = claim(&mut req, &[0, 1], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    table.set_slot(1, Slot::held(token())); // another replica took row 1 over
    assert_eq!(release(&req, &[0, 1], &mine, Timing::default()), vec![true, false]);
    assert_eq!(table.slots()[&0], Slot::released(mine.token));
}

/// A holder that stalls between claim and write (H), and a request for the
/// same entity that takes H's claim over after the lease (T), answering
/// from what it read before the takeover: T answers "absent", H writes
/// after all, and its release finds T's token, so H answers the row
/// "present": the entity is "absent" once, and the row ends released.
#[test]
fn a_stalled_holder_and_its_taker_answer_absent_once() {
    let table = Table::with_rows(1);
    let (mut h, first) = Request::at(&table, vec![0], vec![vec![9]]);
    let h_claim = claim(&mut h, &[0], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    let h_absent = !h.seen[0][0];
    let t_absent = add_if_absent_at(&table, vec![0], &[vec![9]], short(300));
    table.rows.lock().unwrap()[0].insert(9); // H's write lands late
    let h_kept = release(&h, &[0], &h_claim, Timing::default());
    assert_eq!(t_absent, vec![true]);
    assert!(h_absent, "H read the bit unset");
    assert_eq!(h_kept, vec![false], "H's row taken over: it answers present");
    assert!(table.none_held());
}

/// A request waiting for a dead replica's claim (row 1) holds nothing
/// meanwhile, so another request needing only row 0 goes at once; the first
/// one takes row 1 over after the lease and answers from the rows.
#[test]
fn a_wait_for_a_dead_claim_holds_no_row() {
    let timing = short(2_000);
    let table = Arc::new(Table::with_rows(2));
    table.rows.lock().unwrap()[1].insert(5);
    table.set_slot(1, Slot::held(token()));
    let started = Instant::now();
    let first = {
        let table = table.clone();
        std::thread::spawn(move || add_if_absent_at(&table, vec![0, 1], &[vec![1, 5], vec![2, 6]], timing))
    };
    std::thread::sleep(Duration::from_millis(400));
    let second = add_if_absent_at(&table, vec![0], &[vec![3]], timing);
    let second_done = started.elapsed();
    assert_eq!(second, vec![true]);
    assert!(
        second_done < Duration::from_millis(1_000),
        "row 0 was held while waiting for the dead claim: {second_done:?}"
    );
    assert_eq!(
        first.join().unwrap(),
        vec![true, true],
        "bit 5 alone does not make an entity present"
    );
    assert!(started.elapsed() >= timing.lease, "row 1 taken over before the lease");
}

/// A claim whose answer was lost but which landed is found in place by the
/// next read: the request goes on with it instead of waiting a lease for
/// its own claim.
#[test]
fn a_claim_whose_answer_was_lost_is_found_in_place() {
    let table = Table::with_rows(2);
    let (mut req, first) = Request::at(&table, vec![0, 1], vec![vec![1], vec![2]]);
    table.lose_answers.store(1, SeqCst);
    let started = Instant::now();
    let claim = claim(&mut req, &[0, 1], first, short(5_000), &[], &mut Vec::new()).unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "waited for its own claim");
    assert_eq!(table.swaps.load(SeqCst), 1, "claimed once");
    assert_eq!(table.slots()[&1], Slot::held(claim.token));
    assert_eq!(release(&req, &[0, 1], &claim, Timing::default()), vec![true, true]);
    assert!(table.none_held());
}

/// A release whose answer was lost is checked by reading the cell: it
/// landed, so the rows are released and their answers stand.
#[test]
fn a_release_whose_answer_was_lost_is_checked_not_taken_as_refused() {
    let table = Table::with_rows(1);
    let (mut req, first) = Request::at(&table, vec![0], vec![vec![1]]);
    let mine = claim(&mut req, &[0], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    table.lose_answers.store(1, SeqCst);
    assert_eq!(release(&req, &[0], &mine, Timing::default()), vec![true]);
    assert!(table.none_held());
}

/// A claim given back (its write failed) leaves its rows released under its
/// own token: the next request claims at once and reads the rows again.
#[test]
fn a_claim_given_back_leaves_its_rows_released() {
    let table = Table::with_rows(2);
    let (mut req, first) = Request::at(&table, vec![0, 1], vec![vec![1], vec![2]]);
    let mine = claim(&mut req, &[0, 1], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    give_back(&req, &[0, 1], &[mine.token]);
    assert_eq!(table.slots()[&0], Slot::released(mine.token));
    let started = Instant::now();
    assert_eq!(add_if_absent(&table, &[vec![1, 2]]), vec![true]);
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Claims a dead replica left on three rows are all watched from the read
/// on, so the request takes them over after about one lease, not three.
#[test]
fn several_dead_claims_are_taken_over_after_one_lease() {
    let timing = short(600);
    let table = Table::with_rows(3);
    for s in 0..3 {
        table.set_slot(s, Slot::held(token()));
    }
    let started = Instant::now();
    let answers = add_if_absent_at(&table, vec![0, 1, 2], &[vec![1, 2, 3]], timing);
    let took = started.elapsed();
    assert_eq!(answers, vec![true]);
    assert!(took >= timing.lease, "taken over after {took:?}");
    assert!(took < timing.lease * 2, "one lease per dead row: {took:?}");
}

/// A guard cell this version cannot read fails the request `Corrupt` with
/// nothing written.
#[test]
fn an_unreadable_guard_cell_fails_the_claim() {
    let table = Table::with_rows(1);
    *table.guard.lock().unwrap() = vec![0xC1; 17];
    let (mut req, first) = Request::at(&table, vec![0], vec![vec![1]]);
    assert!(matches!(
        claim(&mut req, &[0], first, Timing::default(), &[], &mut Vec::new()),
        Err(StorageError::Corrupt(_))
    ));
    assert_eq!(table.swaps.load(SeqCst), 0);
}

/// A release refused again and again (other requests keep changing the
/// cell) gives up after half a lease and answers its rows "present": a
/// request that takes them over later answers from bits it read before this
/// one's write, so only one of the two may say "absent". Found in review:
/// a release that gave up used to answer its rows as kept, and here both
/// said "absent".
#[test]
fn a_release_that_cannot_land_answers_its_rows_present() {
    let timing = short(400);
    let table = Table::with_rows(1);
    let (mut a, first) = Request::at(&table, vec![0], vec![vec![9]]);
    let a_claim = claim(&mut a, &[0], first, timing, &[], &mut Vec::new()).unwrap();
    let (mut b, b_first) = Request::at(&table, vec![0], vec![vec![9]]); // reads before A's write
    table.rows.lock().unwrap()[0].insert(9); // A's write
    table.churn.store(true, SeqCst);
    let started = Instant::now();
    let a_kept = release(&a, &[0], &a_claim, timing);
    table.churn.store(false, SeqCst);
    assert!(started.elapsed() >= timing.lease / 2, "gave up early");
    assert_eq!(a_kept, vec![false]);
    let b_claim = claim(&mut b, &[0], b_first, timing, &[], &mut Vec::new()).unwrap(); // takes A's claim over
    let a_absent = a_kept[0] && !a.seen[0][0];
    let b_absent = !b.seen[0][0];
    assert_eq!(release(&b, &[0], &b_claim, timing), vec![true]);
    assert_eq!(
        u8::from(a_absent) + u8::from(b_absent),
        1,
        "entity 9 answered absent by both"
    );
}

/// Claims a dead replica left after this request's read (found when its
/// claim is refused) are all watched from when they are first seen: taken
/// over after about one lease, not one per row. Found in review: the wait
/// stopped at the first held row, so each later row started its lease only
/// once the ones before it were taken.
#[test]
fn dead_claims_found_after_the_read_are_taken_over_after_one_lease() {
    let timing = short(600);
    let table = Table::with_rows(3);
    let (mut req, first) = Request::at(&table, vec![0, 1, 2], vec![vec![1], vec![2], vec![3]]);
    for s in 0..3 {
        table.set_slot(s, Slot::held(token()));
    }
    let started = Instant::now();
    let claim = claim(&mut req, &[0, 1, 2], first, timing, &[], &mut Vec::new()).unwrap();
    let took = started.elapsed();
    assert!(took >= timing.lease, "taken over after {took:?}");
    assert!(took < timing.lease * 2, "one lease per dead row: {took:?}");
    assert_eq!(release(&req, &[0, 1, 2], &claim, timing), vec![true; 3]);
}

/// A release whose call failed but which lands later (here: by the next
/// read) is found released under this request's token: its rows are kept,
/// not answered "present", and none is left held.
#[test]
fn a_release_that_lands_after_its_call_failed_keeps_its_rows() {
    let table = Table::with_rows(2);
    let (mut req, first) = Request::at(&table, vec![0, 1], vec![vec![1], vec![2]]);
    let claim = claim(&mut req, &[0, 1], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    table.land_late.store(true, SeqCst);
    table.drop_answers.store(1, SeqCst);
    assert_eq!(release(&req, &[0, 1], &claim, Timing::default()), vec![true, true]);
    assert_eq!(table.slots()[&1], Slot::released(claim.token));
    assert_eq!(
        table.swaps.load(SeqCst),
        2,
        "claim, then the one release that landed late"
    );
}

/// A claim whose call failed and which never lands is not taken for held:
/// the request claims again under a fresh token and goes on.
#[test]
fn a_claim_that_failed_and_never_landed_is_claimed_again() {
    let table = Table::with_rows(1);
    let (mut req, first) = Request::at(&table, vec![0], vec![vec![1]]);
    table.drop_answers.store(1, SeqCst);
    let claim = claim(&mut req, &[0], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    assert_eq!(table.swaps.load(SeqCst), 2);
    assert_eq!(table.slots()[&0], Slot::held(claim.token));
    assert_eq!(release(&req, &[0], &claim, Timing::default()), vec![true]);
    assert!(table.none_held());
}

/// A release whose `checkAndPut` failed without landing, followed by a
/// failed read of the guard cell (one RPC blip after another), reads again
/// and releases: its rows' answers stand. Found in review: the first failed
/// read answered every row "present", on an OK response, for entities no
/// other request had sent.
#[test]
fn a_failed_read_during_a_release_is_tried_again() {
    let table = Table::with_rows(2);
    let (mut req, first) = Request::at(&table, vec![0, 1], vec![vec![1], vec![2]]);
    let claim = claim(&mut req, &[0, 1], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    table.drop_answers.store(1, SeqCst);
    table.fail_peeks.store(2, SeqCst);
    assert_eq!(release(&req, &[0, 1], &claim, Timing::default()), vec![true, true]);
    assert!(table.none_held());
    assert_eq!(table.fail_peeks.load(SeqCst), 0, "both failed reads were made");
}

/// Reads that keep failing for half a lease leave the rows "present" (the
/// safe side: a taker may answer from bits read before this write).
#[test]
fn a_release_whose_reads_keep_failing_answers_present_after_half_a_lease() {
    let timing = short(400);
    let table = Table::with_rows(1);
    let (mut req, first) = Request::at(&table, vec![0], vec![vec![1]]);
    let claim = claim(&mut req, &[0], first, timing, &[], &mut Vec::new()).unwrap();
    table.drop_answers.store(1, SeqCst);
    table.fail_peeks.store(usize::MAX, SeqCst);
    let started = Instant::now();
    assert_eq!(release(&req, &[0], &claim, timing), vec![false]);
    assert!(started.elapsed() >= timing.lease / 2, "gave up early");
    table.fail_peeks.store(0, SeqCst);
}

/// Issue 45, class 5: a request whose release did not land (the Thrift
/// server restarted between its claim and its release) leaves its rows
/// held. This process knows the claim is its own and ended: the next
/// request does not wait a lease for it, and `Orphans::settle` releases it
/// once the guard cell answers again.
#[test]
fn a_claim_this_process_left_held_is_neither_waited_for_nor_kept() {
    let table = Table::with_rows(2);
    let (mut req, first) = Request::at(&table, vec![0, 1], vec![vec![1], vec![2]]);
    let mine = claim(&mut req, &[0, 1], first, Timing::default(), &[], &mut Vec::new()).unwrap();
    // The release meets a guard that does not answer for half a lease.
    table.fail_peeks.store(usize::MAX, SeqCst);
    table.drop_answers.store(usize::MAX, SeqCst);
    let quick = Timing {
        lease: Duration::from_millis(200),
        budget: CLAIM_BUDGET,
    };
    assert_eq!(release(&req, &[0, 1], &mine, quick), vec![false, false]);
    table.fail_peeks.store(0, SeqCst);
    table.drop_answers.store(0, SeqCst);
    assert!(!table.none_held(), "left held");
    let orphans = Orphans::default();
    orphans.add("t", b"g", &[0, 1], &[mine.token]);
    // The next request of this process claims at once (no lease).
    let started = Instant::now();
    let (mut next, first) = Request::at(&table, vec![0], vec![vec![3]]);
    let theirs = claim(
        &mut next,
        &[0],
        first,
        Timing::default(),
        &orphans.tokens("t", b"g"),
        &mut Vec::new(),
    )
    .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    assert_eq!(release(&next, &[0], &theirs, Timing::default()), vec![true]);
    // Settling releases what is still the orphan's (row 1) and forgets it.
    orphans.settle("t", b"g", &next);
    assert!(table.none_held(), "{:?}", table.slots());
    assert!(orphans.tokens("t", b"g").is_empty());
}

/// The lease of another process's dead claim counts from this process's
/// first sight of its token, not anew in each request: requests that give
/// up at their deadline (here a budget shorter than the lease) still bring
/// the takeover nearer, and a later one takes it over once the lease has
/// passed since the first sight.
#[test]
fn the_lease_counts_from_this_process_first_sight_of_a_token() {
    let lease = Duration::from_millis(600);
    let table = Table::with_rows(1);
    table.set_slot(0, Slot::held(token()));
    let started = Instant::now();
    let impatient = Timing {
        lease,
        budget: Duration::from_millis(250),
    };
    for _ in 0..2 {
        let (mut req, first) = Request::at(&table, vec![0], vec![vec![1]]);
        assert!(matches!(
            claim(&mut req, &[0], first, impatient, &[], &mut Vec::new()),
            Err(StorageError::Unavailable(_))
        ));
    }
    let (mut req, first) = Request::at(&table, vec![0], vec![vec![1]]);
    let third = Instant::now();
    let claimed = claim(&mut req, &[0], first, impatient, &[], &mut Vec::new()).unwrap();
    assert!(started.elapsed() >= lease, "taken over before the lease");
    assert!(
        third.elapsed() < Duration::from_millis(250),
        "the third request waited its own lease: {:?}",
        third.elapsed()
    );
    assert_eq!(release(&req, &[0], &claimed, impatient), vec![true]);
}
