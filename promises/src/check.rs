//! The checker: every promise of [`crate`] tested over one history, per
//! deduper and entity.

use std::collections::HashMap;

use crate::history::{Kind, Op, Outcome, Settings};
use crate::report::{At, Report, Violation};

/// One entity of one op: `op` indexes the history, `i` the entity.
#[derive(Debug, Clone, Copy)]
struct Occ {
    op: usize,
    i: usize,
}

/// Checks `history` against the promises; see the crate docs for each
/// rule and its window.
pub fn check(history: &[Op], s: &Settings) -> Report {
    let mut by_entity: HashMap<(&str, &[u8]), Vec<Occ>> = HashMap::new();
    for (op, o) in history.iter().enumerate() {
        for (i, e) in o.entities.iter().enumerate() {
            by_entity.entry((&o.deduper, e)).or_default().push(Occ { op, i });
        }
    }
    let mut report = Report {
        ops: history.len(),
        ..Report::default()
    };
    for o in history {
        match o.outcome {
            Outcome::Ok { .. } => report.acknowledged += 1,
            Outcome::Refused => report.refused += 1,
            Outcome::Unknown => report.unknown += 1,
        }
    }
    let mut keys: Vec<_> = by_entity.keys().copied().collect();
    keys.sort();
    for key in keys {
        let occs = &by_entity[&key];
        let entity = Entity { h: history, s, occs };
        entity.false_negatives(&mut report);
        entity.new_twice(&mut report);
        entity.replays(&mut report);
    }
    retries(history, s, &mut report);
    report
}

/// The occurrences of one entity in one deduper.
struct Entity<'a> {
    h: &'a [Op],
    s: &'a Settings,
    occs: &'a [Occ],
}

impl Entity<'_> {
    fn op(&self, o: Occ) -> &Op {
        &self.h[o.op]
    }

    fn at(&self, o: Occ) -> At {
        At {
            op: self.h[o.op].id,
            entity: o.i,
        }
    }

    /// Until when an acknowledged write keeps the entity present for every
    /// reader: `ack + ttl - answer_slack - clock_bound`.
    fn live_until(&self, w: &Op) -> i64 {
        w.complete_ms
            .saturating_add(i64::try_from(w.ttl_ms).unwrap_or(i64::MAX))
            .saturating_sub(self.s.answer_slack_ms + self.s.clock_bound_ms)
    }

    /// Whether `o`'s answer may legitimately repeat an earlier attempt's:
    /// a retried `request_id`, or a record id another `AddIfAbsent`
    /// may have remembered with this entity (a replay).
    fn may_repeat_an_attempt(&self, o: Occ) -> bool {
        let r = self.op(o);
        if let Some(id) = &r.request_id
            && self.h.iter().any(|x| {
                x.id != r.id
                    && x.deduper == r.deduper
                    && x.request_id.as_ref() == Some(id)
                    && x.invoke_ms <= r.invoke_ms
                    && !matches!(x.outcome, Outcome::Refused)
            })
        {
            return true;
        }
        let Some(rec) = r.record_id(o.i) else {
            return false;
        };
        self.occs.iter().any(|&x| {
            let xo = self.op(x);
            (x.op != o.op || x.i != o.i)
                && xo.kind == Kind::AddIfAbsent
                && xo.record_id(x.i) == Some(rec)
                && xo.invoke_ms <= r.complete_ms
                && (matches!(xo.outcome, Outcome::Unknown) || xo.answer(x.i) == Some(true))
        })
    }

    /// No false negative: a read invoked after an acknowledged write and
    /// completing within its live window answers present.
    fn false_negatives(&self, report: &mut Report) {
        let mut writes: Vec<(i64, i64, Occ)> = self
            .occs
            .iter()
            .filter(|&&o| self.op(o).kind.writes() && matches!(self.op(o).outcome, Outcome::Ok { .. }))
            .map(|&o| (self.op(o).complete_ms, self.live_until(self.op(o)), o))
            .collect();
        writes.sort_by_key(|w| w.0);
        // best[i]: the write among writes[..=i] that stays live the longest.
        let mut best: Vec<usize> = Vec::with_capacity(writes.len());
        for i in 0..writes.len() {
            let keep = match best.last() {
                Some(&b) if writes[b].1 >= writes[i].1 => b,
                _ => i,
            };
            best.push(keep);
        }
        for &o in self.occs {
            let r = self.op(o);
            if r.answer(o.i) != Some(true) {
                continue;
            }
            report.absent_answers += 1;
            let n = writes.partition_point(|w| w.0 <= r.invoke_ms);
            if n == 0 {
                continue;
            }
            let (_, live, w) = writes[best[n - 1]];
            if r.complete_ms < live && !self.may_repeat_an_attempt(o) {
                report.violations.push(Violation::FalseNegative {
                    write: self.at(w),
                    read: self.at(o),
                    entity: entity_text(&r.entities[o.i]),
                });
            }
        }
    }

    /// At most one new: two `AddIfAbsent` answers absent for one entity,
    /// each within the other's live window (so whichever ran second had
    /// the first's bits to see), are a duplicate passed as new - unless
    /// they are one record (the same record id) or one request retried.
    fn new_twice(&self, report: &mut Report) {
        let absents: Vec<Occ> = self
            .occs
            .iter()
            .copied()
            .filter(|&o| self.op(o).kind == Kind::AddIfAbsent && self.op(o).answer(o.i) == Some(true))
            .collect();
        for (x, &a) in absents.iter().enumerate() {
            for &b in &absents[x + 1..] {
                let (oa, ob) = (self.op(a), self.op(b));
                let one_record = oa.record_id(a.i).is_some() && oa.record_id(a.i) == ob.record_id(b.i);
                let one_request = a.op != b.op && oa.request_id.is_some() && oa.request_id == ob.request_id;
                if one_record || one_request {
                    continue;
                }
                let overlap = if a.op == b.op {
                    oa.ttl_ms > 0
                } else {
                    ob.complete_ms < self.live_until(oa) && oa.complete_ms < self.live_until(ob)
                };
                if overlap && !self.may_repeat_an_attempt(a) && !self.may_repeat_an_attempt(b) {
                    let (first, second) = if (oa.invoke_ms, a.op, a.i) <= (ob.invoke_ms, b.op, b.i) {
                        (a, b)
                    } else {
                        (b, a)
                    };
                    report.violations.push(Violation::NewTwice {
                        first: self.at(first),
                        second: self.at(second),
                        entity: entity_text(&oa.entities[a.i]),
                    });
                }
            }
        }
    }

    /// Whether a write of this entity that `o` need not answer absent
    /// against (another request and record, an earlier attempt of its own
    /// that answered present, or an earlier place in the same request) may
    /// have left its bits set when `o` read them.
    fn explained(&self, o: Occ) -> bool {
        let r = self.op(o);
        let rec = r.record_id(o.i);
        // A retry answers what its first attempt read: bits live at any
        // attempt's time explain it.
        let read_from = match &r.request_id {
            Some(id) => self
                .h
                .iter()
                .filter(|x| x.deduper == r.deduper && x.request_id.as_ref() == Some(id) && x.invoke_ms <= r.invoke_ms)
                .map(|x| x.invoke_ms)
                .min()
                .unwrap_or(r.invoke_ms),
            None => r.invoke_ms,
        };
        self.occs.iter().any(|&x| {
            let xo = self.op(x);
            if x.op == o.op {
                return r.kind == Kind::AddIfAbsent && x.i < o.i;
            }
            let same_request = r.request_id.is_some() && xo.request_id == r.request_id;
            let same_record = rec.is_some() && xo.record_id(x.i) == rec;
            // An earlier attempt of the same request or record explains a
            // present answer only when it answered present itself (its bits
            // then stay set, and its answer is the one to repeat), or failed
            // unanswered at a time another write was live (it may have read
            // present, then written without remembering an absent answer).
            if same_request || same_record {
                let explains = match xo.outcome {
                    Outcome::Ok { .. } => xo.answer(x.i) == Some(false),
                    Outcome::Unknown => self.live_during(o, xo.invoke_ms, xo.complete_ms),
                    Outcome::Refused => false,
                };
                if !explains {
                    return false;
                }
            }
            self.may_be_live(xo, read_from, r.complete_ms)
        })
    }

    /// Whether `w`'s bits may have been set at some moment of `[from, to]`:
    /// a write invoked by `to`, and acknowledged no longer than its TTL (and
    /// the clock bound and stamp rounding) before `from`, or unanswered (it
    /// may land at any time after its invoke).
    fn may_be_live(&self, w: &Op, from: i64, to: i64) -> bool {
        if !w.may_have_written() || w.invoke_ms > to {
            return false;
        }
        match w.outcome {
            Outcome::Unknown => true,
            _ => {
                let ttl = i64::try_from(w.ttl_ms).unwrap_or(i64::MAX);
                w.complete_ms.saturating_add(ttl) + self.s.clock_bound_ms + self.s.stamp_rounding_ms >= from
            }
        }
    }

    /// Whether a write of this entity by neither `o`'s request nor its
    /// record may have been live at some moment of `[from, to]`.
    fn live_during(&self, o: Occ, from: i64, to: i64) -> bool {
        let r = self.op(o);
        let rec = r.record_id(o.i);
        self.occs.iter().any(|&y| {
            let yo = self.op(y);
            let family = (r.request_id.is_some() && yo.request_id == r.request_id)
                || (rec.is_some() && yo.record_id(y.i) == rec);
            y.op != o.op && !family && self.may_be_live(yo, from, to)
        })
    }

    /// Replays and false positives: a present answer no other write
    /// explains is either dropped because of the entity's own earlier
    /// attempt (a violation: a retried request, or a record id remembered
    /// absent within the record window) or a Bloom false positive.
    fn replays(&self, report: &mut Report) {
        for &o in self.occs {
            let r = self.op(o);
            let Some(answer) = r.answer(o.i) else {
                continue;
            };
            if self.explained(o) {
                continue;
            }
            report.cold_reads += 1;
            if answer {
                continue;
            }
            let rec = r.record_id(o.i);
            let earlier = self.occs.iter().copied().find(|&x| {
                let xo = self.op(x);
                if x.op == o.op || xo.invoke_ms > r.complete_ms || !xo.may_have_written() {
                    return false;
                }
                let first_absent = matches!(xo.outcome, Outcome::Unknown) || xo.answer(x.i) == Some(true);
                let retried = r.request_id.is_some()
                    && xo.request_id == r.request_id
                    && xo.invoke_ms + self.s.request_window_ms >= r.invoke_ms;
                let replayed = rec.is_some()
                    && xo.kind == Kind::AddIfAbsent
                    && xo.record_id(x.i) == rec
                    && xo.complete_ms + self.s.record_window_ms >= r.invoke_ms;
                first_absent && (retried || replayed)
            });
            match earlier {
                Some(x) => report.violations.push(Violation::ReplayDropped {
                    earlier: self.at(x),
                    read: self.at(o),
                    entity: entity_text(&r.entities[o.i]),
                }),
                None => {
                    report.false_positives += 1;
                    if report.false_positive_examples.len() < 5 {
                        report.false_positive_examples.push(self.at(o));
                    }
                }
            }
        }
    }
}

/// A retried `request_id` gets its first answers: every acknowledged
/// attempt within the window answers the same.
fn retries(history: &[Op], s: &Settings, report: &mut Report) {
    let mut by_id: HashMap<(&str, &[u8]), Vec<&Op>> = HashMap::new();
    for o in history {
        if let (Some(id), Outcome::Ok { .. }) = (&o.request_id, &o.outcome) {
            by_id.entry((&o.deduper, id)).or_default().push(o);
        }
    }
    let mut groups: Vec<_> = by_id.into_values().collect();
    groups.sort_by_key(|g| g.iter().map(|o| o.id).min());
    for mut ops in groups {
        ops.sort_by_key(|o| (o.invoke_ms, o.id));
        let first = ops[0];
        for retry in &ops[1..] {
            if retry.invoke_ms > first.complete_ms + s.request_window_ms || retry.kind != first.kind {
                continue;
            }
            if retry.outcome != first.outcome {
                report.violations.push(Violation::RetryAnswerChanged {
                    first: first.id,
                    retry: retry.id,
                });
            }
        }
    }
}

/// An entity as text for a report: UTF-8 when it is, else hex.
fn entity_text(e: &[u8]) -> String {
    match std::str::from_utf8(e) {
        Ok(t) if t.chars().all(|c| !c.is_control()) => t.to_string(),
        _ => e.iter().map(|b| format!("{b:02x}")).collect(),
    }
}
