use super::*;
use hbase_thrift::hbase::TCell;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

#[test]
fn guard_values_by_row_and_absent_ones_left_out() {
    let cell = |v: &[u8]| TCell::new(v.to_vec(), 1);
    let rows = vec![
        TRowResult::new(b"r1".to_vec(), BTreeMap::from([(column(), cell(b"n1"))]), None),
        TRowResult::new(
            b"r2".to_vec(),
            BTreeMap::from([(b"S:7#ttl".to_vec(), cell(&[0; 8]))]),
            None,
        ),
    ];
    let got = values(&rows);
    assert_eq!(got, BTreeMap::from([(b"r1".to_vec(), b"n1".to_vec())]));
    assert_eq!(column(), b"S:solus#guard");
}

#[test]
fn claim_values_are_told_from_free_ones_old_and_new() {
    assert!(is_claimed(&claim_value()));
    assert!(!is_claimed(&free_value()));
    assert!(!is_claimed(&[]));
    // An earlier version's free value is 16 random bytes, whatever its first byte.
    assert!(!is_claimed(&[CLAIM_TAG; 16]));
    assert_ne!(claim_value(), claim_value());
}

/// An in-memory HBase stand-in: per row a set of bits and a guard value;
/// a guard is swapped atomically (`checkAndPut`), and read before, not
/// with, its row's bits (the guard row is another HBase row).
#[derive(Default)]
struct Table {
    rows: Mutex<Vec<(BTreeSet<u32>, Vec<u8>)>>,
    /// `checkAndPut`s that found another value (contention happened).
    refused: std::sync::atomic::AtomicUsize,
    /// The next this many `checkAndPut`s land but answer an error (a lost answer).
    lose_answers: std::sync::atomic::AtomicUsize,
}

/// One request's view of the table: the table rows it touches (in order)
/// and the bits it asks for in each.
struct Request<'a> {
    table: &'a Table,
    at: Vec<usize>,
    wanted: Vec<Vec<u32>>,
    /// Per row, which wanted bits were set at its latest read.
    seen: Vec<Vec<bool>>,
}

impl Request<'_> {
    fn new(table: &Table, wanted: Vec<Vec<u32>>) -> (Request<'_>, Vec<Vec<u8>>) {
        Request::at(table, (0..wanted.len()).collect(), wanted)
    }

    fn at(table: &Table, at: Vec<usize>, wanted: Vec<Vec<u32>>) -> (Request<'_>, Vec<Vec<u8>>) {
        let mut r = Request {
            table,
            at,
            seen: vec![Vec::new(); wanted.len()],
            wanted,
        };
        let expected = (0..r.wanted.len()).map(|i| r.reread(i).unwrap()).collect();
        (r, expected)
    }
}

impl Rows for Request<'_> {
    fn reread(&mut self, i: usize) -> Result<Vec<u8>, StorageError> {
        let guard = self.table.rows.lock().unwrap()[self.at[i]].1.clone();
        std::thread::yield_now(); // another request may write in between
        let rows = self.table.rows.lock().unwrap();
        let row = &rows[self.at[i]];
        self.seen[i] = self.wanted[i].iter().map(|b| row.0.contains(b)).collect();
        Ok(guard)
    }
    fn peek(&self, i: usize) -> Result<Vec<u8>, StorageError> {
        Ok(self.table.rows.lock().unwrap()[self.at[i]].1.clone())
    }
    fn swap_many(&self, swaps: &[(usize, Vec<u8>, Vec<u8>)]) -> Vec<Result<bool, StorageError>> {
        swaps
            .iter()
            .map(|(i, expected, new)| {
                std::thread::yield_now();
                let mut rows = self.table.rows.lock().unwrap();
                let row = &mut rows[self.at[*i]];
                let won = row.1 == *expected;
                if won {
                    row.1 = new.clone();
                } else {
                    self.table.refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                let lose = &self.table.lose_answers;
                if lose
                    .fetch_update(
                        std::sync::atomic::Ordering::SeqCst,
                        std::sync::atomic::Ordering::SeqCst,
                        |n| n.checked_sub(1),
                    )
                    .is_ok()
                {
                    return Err(StorageError::Unavailable("answer lost".into()));
                }
                Ok(won)
            })
            .collect()
    }
}

/// A lease and patience of milliseconds, with a 20 s budget.
fn short(lease_ms: u64, patience_ms: u64) -> Timing {
    Timing {
        lease: Duration::from_millis(lease_ms),
        patience: Duration::from_millis(patience_ms),
        budget: Duration::from_secs(20),
    }
}

/// One guarded AddIfAbsent of `entities` (each a bit per row) against
/// `table`: claim, answer from the reads, write, release. Per entity, whether
/// it was answered absent.
fn add_if_absent(table: &Table, entities: &[Vec<u32>]) -> Vec<bool> {
    add_if_absent_at(table, (0..entities[0].len()).collect(), entities, Timing::default())
}

/// [`add_if_absent`] on table rows `at` (entity bit `r` in row `at[r]`).
fn add_if_absent_at(table: &Table, at: Vec<usize>, entities: &[Vec<u32>], timing: Timing) -> Vec<bool> {
    let rows = at.len();
    let wanted: Vec<Vec<u32>> = (0..rows).map(|r| entities.iter().map(|e| e[r]).collect()).collect();
    let (mut req, mut expected) = Request::at(table, at.clone(), wanted);
    let mine = claim(&mut req, &mut expected, timing).expect("claimed");
    let absent: Vec<bool> = (0..entities.len())
        .map(|e| (0..rows).any(|r| !req.seen[r][e]))
        .collect();
    {
        let mut t = table.rows.lock().unwrap();
        for (r, bits) in req.wanted.iter().enumerate() {
            assert_eq!(t[at[r]].1, mine[r], "written without holding row {}", at[r]);
            t[at[r]].0.extend(bits);
        }
    }
    let released = release(&req, &mine);
    assert!(released.iter().all(|r| *r), "a live claim was taken over");
    absent
}

/// The protocol's promise, checked on the stand-in with 6 threads x 30
/// requests racing on 4 rows (fixed seeds): each entity sent by several
/// requests is answered "absent" exactly once, and an entity sent by one
/// request only is answered "absent" (the loser of a row no longer takes
/// the row as set: nothing here collides but identical entities).
#[test]
fn racing_requests_answer_each_entity_absent_exactly_once_and_new_ones_absent() {
    let table = Arc::new(Table::default());
    *table.rows.lock().unwrap() = vec![(BTreeSet::new(), Vec::new()); 4];
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
    let rows = table.rows.lock().unwrap();
    assert!(rows.iter().all(|(_, g)| !is_claimed(g)), "a row left claimed");
    let refused = table.refused.load(std::sync::atomic::Ordering::SeqCst);
    assert!(refused > 0, "no claim was ever refused: the race did not happen");
}

/// A row found claimed is waited for, and taken once its holder releases
/// it; the bits its holder wrote meanwhile are in the answer.
#[test]
fn a_claimed_row_is_waited_for_and_read_after_its_holder_writes() {
    let table = Arc::new(Table::default());
    let held = claim_value();
    *table.rows.lock().unwrap() = vec![(BTreeSet::new(), held.clone())];
    let writer = {
        let table = table.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut rows = table.rows.lock().unwrap();
            rows[0].0.insert(7);
            rows[0].1 = free_value();
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
/// its release refused, so its caller answers that row as set.
#[test]
fn a_release_after_a_takeover_is_refused() {
    let table = Table::default();
    *table.rows.lock().unwrap() = vec![(BTreeSet::new(), Vec::new()), (BTreeSet::new(), Vec::new())];
    let (mut req, mut expected) = Request::new(&table, vec![vec![1], vec![2]]);
    let mine = claim(&mut req, &mut expected, Timing::default()).unwrap();
    table.rows.lock().unwrap()[1].1 = claim_value(); // another replica took row 1 over
    assert_eq!(release(&req, &mine), vec![true, false]);
    assert!(!is_claimed(&table.rows.lock().unwrap()[0].1));
}

/// A holder that stalls between claim and write (H), and a request for the
/// same entity that takes H's claim over after the lease (T), answering
/// from what it read before the takeover: T answers "absent", H writes
/// after all, and its release is refused, so H answers the row "present":
/// the entity is "absent" once, and the row ends free.
#[test]
fn a_stalled_holder_and_its_taker_answer_absent_once() {
    let table = Table::default();
    *table.rows.lock().unwrap() = vec![(BTreeSet::new(), Vec::new())];
    let (mut h, mut h_expected) = Request::new(&table, vec![vec![9]]);
    let h_mine = claim(&mut h, &mut h_expected, Timing::default()).unwrap();
    let h_absent = !h.seen[0][0];
    let t_absent = add_if_absent_at(&table, vec![0], &[vec![9]], short(300, 150));
    table.rows.lock().unwrap()[0].0.insert(9); // H's write lands late
    let h_released = release(&h, &h_mine);
    assert_eq!(t_absent, vec![true]);
    assert!(h_absent, "H read the bit unset");
    assert_eq!(h_released, vec![false], "H's release refused: it answers present");
    assert!(!is_claimed(&table.rows.lock().unwrap()[0].1));
}

/// A request waiting for a dead replica's claim (row 1) while holding a
/// lower row (row 0) gives row 0 back after its patience, so another
/// request needing only row 0 gets it long before the lease runs out; the
/// first one takes row 1 over after the lease and answers from the rows.
#[test]
fn a_wait_for_a_dead_claim_gives_back_the_rows_held_meanwhile() {
    let timing = short(2_000, 200);
    let table = Arc::new(Table::default());
    *table.rows.lock().unwrap() = vec![(BTreeSet::new(), Vec::new()), (BTreeSet::from([5]), claim_value())];
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
        second_done < Duration::from_millis(1_500),
        "row 0 was held while waiting for the dead claim: {second_done:?}"
    );
    assert_eq!(
        first.join().unwrap(),
        vec![true, true],
        "bit 5 alone does not make an entity present"
    );
    assert!(started.elapsed() >= timing.lease, "row 1 taken over before the lease");
}

/// A row taken over from a dead replica and then given back (its taker lost
/// patience on a later row) gets a fresh free value, not the dead claim: a
/// third request then takes it at once instead of waiting a lease again.
#[test]
fn a_row_taken_over_and_given_back_is_left_free() {
    let mut v = claim_value();
    let before = v.clone();
    let to = restored(&mut v);
    assert!(!is_claimed(&to) && to == v && v != before);
    let mut free = free_value();
    let kept = free.clone();
    assert_eq!(
        restored(&mut free),
        kept,
        "a free value read with the bits is restored as it was"
    );
}

/// A release whose answer was lost is checked by reading the guard: it
/// landed, so the row is released and its answers stand.
#[test]
fn a_release_whose_answer_was_lost_is_checked_not_taken_as_refused() {
    let table = Table::default();
    *table.rows.lock().unwrap() = vec![(BTreeSet::new(), Vec::new())];
    let (mut req, mut expected) = Request::new(&table, vec![vec![1]]);
    let mine = claim(&mut req, &mut expected, Timing::default()).unwrap();
    table.lose_answers.store(1, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(release(&req, &mine), vec![true]);
    assert!(!is_claimed(&table.rows.lock().unwrap()[0].1));
}

/// Claims a dead replica left on three rows are all watched from the read
/// on, so the request takes them over after about one lease, not three.
#[test]
fn several_dead_claims_are_taken_over_after_one_lease() {
    let timing = short(600, 300);
    let table = Table::default();
    *table.rows.lock().unwrap() = (0..3).map(|_| (BTreeSet::new(), claim_value())).collect();
    let started = Instant::now();
    let answers = add_if_absent_at(&table, vec![0, 1, 2], &[vec![1, 2, 3]], timing);
    let took = started.elapsed();
    assert_eq!(answers, vec![true]);
    assert!(took >= timing.lease, "taken over after {took:?}");
    assert!(took < timing.lease * 2, "one lease per dead row: {took:?}");
}
