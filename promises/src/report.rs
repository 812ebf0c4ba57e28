//! What a check found: counts, violations with the ops that witness them,
//! and the shrunk history that still violates.

use std::fmt;

use crate::history::Op;

/// Entity `entity` (its index) of op `op` (its id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub op: u64,
    pub entity: usize,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op {} entity #{}", self.op, self.entity)
    }
}

/// A broken promise, with the ops that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// An acknowledged write, then a read within its live window that
    /// answered absent.
    FalseNegative { write: At, read: At, entity: String },
    /// Two `AddIfAbsent` answers absent for one entity, each within the
    /// other's live window (or twice in one request): a duplicate passed
    /// as new.
    NewTwice { first: At, second: At, entity: String },
    /// An entity answered present only because of its own earlier attempt
    /// (the same `request_id` retried, or the same record id replayed),
    /// which answered absent or failed: a new event dropped.
    ReplayDropped { earlier: At, read: At, entity: String },
    /// A retried `request_id` answered otherwise than its first attempt.
    RetryAnswerChanged { first: u64, retry: u64 },
}

impl Violation {
    /// The ids of the ops that witness it: a history of these alone still
    /// has this violation.
    pub fn witnesses(&self) -> Vec<u64> {
        match self {
            Violation::FalseNegative { write, read, .. } => vec![write.op, read.op],
            Violation::NewTwice { first, second, .. } => vec![first.op, second.op],
            Violation::ReplayDropped { earlier, read, .. } => vec![earlier.op, read.op],
            Violation::RetryAnswerChanged { first, retry } => vec![*first, *retry],
        }
    }

    /// The read that broke the promise, when there is one.
    pub fn read(&self) -> Option<At> {
        match self {
            Violation::FalseNegative { read, .. } | Violation::ReplayDropped { read, .. } => Some(*read),
            Violation::NewTwice { second, .. } => Some(*second),
            Violation::RetryAnswerChanged { .. } => None,
        }
    }

    /// Its kind, for counts.
    pub fn name(&self) -> &'static str {
        match self {
            Violation::FalseNegative { .. } => "false negative",
            Violation::NewTwice { .. } => "new twice",
            Violation::ReplayDropped { .. } => "replay dropped",
            Violation::RetryAnswerChanged { .. } => "retry answer changed",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::FalseNegative { write, read, entity } => {
                write!(
                    f,
                    "false negative: {entity:?} written by {write}, read absent by {read}"
                )
            }
            Violation::NewTwice { first, second, entity } => {
                write!(f, "new twice: {entity:?} answered absent by {first} and by {second}")
            }
            Violation::ReplayDropped { earlier, read, entity } => write!(
                f,
                "replay dropped: {entity:?} answered present by {read}, set only by its own earlier attempt {earlier}"
            ),
            Violation::RetryAnswerChanged { first, retry } => {
                write!(
                    f,
                    "retry answer changed: op {retry} answered otherwise than op {first}, its first attempt"
                )
            }
        }
    }
}

/// What one check counted and found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub ops: usize,
    pub acknowledged: usize,
    pub refused: usize,
    pub unknown: usize,
    /// Answers "absent" (per entity) among acknowledged reads.
    pub absent_answers: usize,
    /// Answers (per entity) for which no write of another request or
    /// record could have set the entity's bits: where a present answer is
    /// a false positive.
    pub cold_reads: usize,
    /// Present answers among the cold reads that no earlier attempt of the
    /// same request or record explains either: Bloom false positives.
    pub false_positives: usize,
    /// The first few false positives, to look at.
    pub false_positive_examples: Vec<At>,
    pub violations: Vec<Violation>,
}

impl Report {
    /// `false_positives / cold_reads`, 0 without cold reads.
    pub fn false_positive_rate(&self) -> f64 {
        if self.cold_reads == 0 {
            0.0
        } else {
            self.false_positives as f64 / self.cold_reads as f64
        }
    }

    /// Violations counted by kind, in a fixed order.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        let mut out: Vec<(&'static str, usize)> = Vec::new();
        for v in &self.violations {
            match out.iter_mut().find(|(n, _)| *n == v.name()) {
                Some((_, c)) => *c += 1,
                None => out.push((v.name(), 1)),
            }
        }
        out
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops ({} acknowledged, {} refused, {} unknown), {} violations",
            self.ops,
            self.acknowledged,
            self.refused,
            self.unknown,
            self.violations.len()
        )?;
        for (name, n) in self.counts() {
            write!(f, " [{name}: {n}]")?;
        }
        write!(
            f,
            "; false positives {} of {} cold reads ({:.2e})",
            self.false_positives,
            self.cold_reads,
            self.false_positive_rate()
        )
    }
}

/// The fewest ops of `history` that still show `v`: its witnesses, in
/// history order. [`crate::check`] of the result reports `v` again.
pub fn shrink(history: &[Op], v: &Violation) -> Vec<Op> {
    let keep = v.witnesses();
    history.iter().filter(|o| keep.contains(&o.id)).cloned().collect()
}
