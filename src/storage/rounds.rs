//! Reading a request's bits in two rounds: first a few bits of every
//! entity, then the rest of the bits of only the entities still undecided.
//! For a remote store the work of a read follows the cells asked for
//! (HBase: a ROWCOL bloom probe per asked column, a block read per present
//! one), and most entities of a stream are new: one unset bit answers them.
//! With fill `f` and `k` bits per entity, asking `j` bits first costs
//! `j + f^j (k - j)` cells per entity instead of `k` (k = 7, f = 0.57: 3.6
//! at j = 2; f = 0.2: 2.2).

use super::{BitAddr, Cell, StorageError};

/// The entities behind a request's sorted, unique `bits`: entity `i`'s `k`
/// bits are `bits[index[i * k + j]]`, `j` in `0..k`, in the order its hash
/// functions give them.
#[derive(Debug, Clone, Copy)]
pub struct Entities<'a> {
    /// Bits per entity (`k` >= 1).
    pub k: usize,
    /// `k` indexes into `bits` per entity, in request order.
    pub index: &'a [u32],
    /// When cells count as set (ms since the Unix epoch).
    pub now_ms: i64,
    /// The request adds its entities (AddIfAbsent): an entity's answer then
    /// counts the bits of earlier entities of the request as set, so a bit
    /// read unset decides an entity only when no earlier entity has it.
    pub earlier_count_as_set: bool,
}

impl Entities<'_> {
    /// Entities described.
    pub fn len(&self) -> usize {
        self.index.len() / self.k.max(1)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn bits_of(&self, i: usize) -> &[u32] {
        &self.index[i * self.k..(i + 1) * self.k]
    }
}

/// Bits of each entity asked in the first round: about 0.3 `k`, at least 1
/// (2 of 7; see the module docs).
pub fn first_round_bits(k: usize) -> usize {
    ((k * 3 + 5) / 10).clamp(1, k.max(1))
}

/// The cells of `bits` (`n_bits` of them) as two rounds of `read` find
/// them: `read` gets sorted indexes into `bits` and answers one cell per
/// index. Cells not read come back unset (`Cell::default()`); every entity
/// whose answer depends on them has a bit read unset that decides it absent
/// on its own, so the answer the caller computes from these cells (each
/// entity absent when one of its bits is unset, with
/// [`Entities::earlier_count_as_set`] the bits of earlier entities counted
/// as set) is the one it computes from every cell. Errors: `read`'s;
/// `Corrupt` when `read` answers another number of cells.
pub fn read_in_rounds(
    n_bits: usize,
    entities: &Entities<'_>,
    mut read: impl FnMut(&[usize]) -> Result<Vec<Cell>, StorageError>,
) -> Result<Vec<Cell>, StorageError> {
    let mut cells = vec![Cell::default(); n_bits];
    let mut asked = vec![false; n_bits];
    let j = first_round_bits(entities.k);
    let first = wanted(entities, &asked, |_| true, 0..j);
    fill(&mut cells, &mut asked, &first, read(&first)?)?;

    let mut covered = vec![false; n_bits];
    let mut undecided = vec![false; entities.len()];
    for (i, open) in undecided.iter_mut().enumerate() {
        let bits = entities.bits_of(i);
        // Open unless a first-round bit is unset and no earlier entity sets it.
        *open = bits[..j].iter().all(|&b| {
            let b = b as usize;
            cells[b].is_set(entities.now_ms) || (entities.earlier_count_as_set && covered[b])
        });
        if entities.earlier_count_as_set {
            bits.iter().for_each(|&b| covered[b as usize] = true);
        }
    }
    let second = wanted(entities, &asked, |i| undecided[i], j..entities.k);
    if !second.is_empty() {
        fill(&mut cells, &mut asked, &second, read(&second)?)?;
    }
    Ok(cells)
}

/// Sorted, unique indexes of the bits `slots` of the entities `take`
/// selects, leaving out those already `asked`.
fn wanted(
    entities: &Entities<'_>,
    asked: &[bool],
    take: impl Fn(usize) -> bool,
    slots: std::ops::Range<usize>,
) -> Vec<usize> {
    let mut out: Vec<usize> = (0..entities.len())
        .filter(|&i| take(i))
        .flat_map(|i| entities.bits_of(i)[slots.clone()].iter().map(|&b| b as usize))
        .filter(|&b| !asked[b])
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn fill(cells: &mut [Cell], asked: &mut [bool], which: &[usize], got: Vec<Cell>) -> Result<(), StorageError> {
    if got.len() != which.len() {
        return Err(StorageError::Corrupt(format!(
            "storage answered {} cells for {} bits",
            got.len(),
            which.len()
        )));
    }
    for (&b, c) in which.iter().zip(got) {
        cells[b] = c;
        asked[b] = true;
    }
    Ok(())
}

/// The addresses of `which` (indexes into `bits`).
pub fn addrs_of(bits: &[BitAddr], which: &[usize]) -> Vec<BitAddr> {
    which.iter().map(|&i| bits[i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator (fixed seeds: the test is repeatable).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
    }

    fn answers(e: &Entities<'_>, cells: &[Cell]) -> Vec<bool> {
        let mut set: Vec<bool> = cells.iter().map(|c| c.is_set(e.now_ms)).collect();
        (0..e.len())
            .map(|i| {
                let absent = e.bits_of(i).iter().any(|&b| !set[b as usize]);
                if e.earlier_count_as_set {
                    e.bits_of(i).iter().for_each(|&b| set[b as usize] = true);
                }
                absent
            })
            .collect()
    }

    /// Random requests over a small bit space (so entities share bits and
    /// repeat), at fills from empty to full: the answers from the rounds'
    /// cells equal the answers from every cell, and fewer cells are read.
    #[test]
    fn rounds_answer_as_reading_every_cell() {
        let now = 1_000;
        let mut rng = Lcg(20261201);
        let (mut asked_total, mut all_total) = (0usize, 0usize);
        for case in 0..400 {
            let k = 1 + (case % 8);
            let n_bits = 20 + rng.next() as usize % 200;
            let fill_pct = rng.next() % 101;
            let stored: Vec<Cell> = (0..n_bits)
                .map(|_| Cell {
                    expire_ms: (rng.next() % 100 < fill_pct).then_some(now + 1),
                    legacy: None,
                })
                .collect();
            let entities = 1 + rng.next() as usize % 60;
            let index: Vec<u32> = (0..entities * k)
                .map(|_| (rng.next() as usize % n_bits) as u32)
                .collect();
            for earlier in [false, true] {
                let e = Entities {
                    k,
                    index: &index,
                    now_ms: now,
                    earlier_count_as_set: earlier,
                };
                let mut asked = 0;
                let cells = read_in_rounds(n_bits, &e, |which| {
                    assert!(which.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
                    asked += which.len();
                    Ok(which.iter().map(|&b| stored[b]).collect())
                })
                .unwrap();
                assert_eq!(
                    answers(&e, &cells),
                    answers(&e, &stored),
                    "case {case}, earlier {earlier}"
                );
                let used: std::collections::BTreeSet<u32> = index.iter().copied().collect();
                assert!(asked <= used.len(), "never asks a bit twice");
                asked_total += asked;
                all_total += used.len();
            }
        }
        // Over fills spread from 0 to 100%, the rounds ask well under every bit.
        assert!(asked_total * 10 < all_total * 8, "asked {asked_total} of {all_total}");
    }

    /// The case a naive second round gets wrong: an entity whose first bit
    /// is unset in storage but set by an earlier entity of the same request
    /// is not decided by that bit; its other bits are read.
    #[test]
    fn a_bit_an_earlier_entity_sets_does_not_decide() {
        let now = 10;
        // Bits 0..4; stored: 1 and 2 set, 0 and 3 unset. k = 2, first round 1 bit.
        let set = |on: bool| Cell {
            expire_ms: on.then_some(now + 1),
            legacy: None,
        };
        let stored = [set(false), set(true), set(true), set(false)];
        // Entity 0 = bits (0, 1): absent. Entity 1 = bits (0, 2): its first bit 0
        // is unset in storage but entity 0 sets it; bit 2 is set: present.
        let index = [0, 1, 0, 2];
        let e = Entities {
            k: 2,
            index: &index,
            now_ms: now,
            earlier_count_as_set: true,
        };
        let mut rounds = Vec::new();
        let cells = read_in_rounds(4, &e, |which| {
            rounds.push(which.to_vec());
            Ok(which.iter().map(|&b| stored[b]).collect())
        })
        .unwrap();
        assert_eq!(rounds, vec![vec![0], vec![2]]);
        assert_eq!(answers(&e, &cells), vec![true, false]);
    }

    #[test]
    fn first_round_is_about_three_tenths_of_k() {
        let got: Vec<usize> = (1..=10).map(first_round_bits).collect();
        assert_eq!(got, vec![1, 1, 1, 1, 2, 2, 2, 2, 3, 3]);
    }

    #[test]
    fn a_short_answer_is_corrupt() {
        let index = [0, 1];
        let e = Entities {
            k: 2,
            index: &index,
            now_ms: 0,
            earlier_count_as_set: false,
        };
        let err = read_in_rounds(2, &e, |_| Ok(Vec::new())).unwrap_err();
        assert!(
            matches!(err, StorageError::Corrupt(ref m) if m.contains("0 cells for 1 bits")),
            "{err:?}"
        );
    }
}
