//! A model of the promises Solus exists for, checked over recorded
//! histories (in the manner of Jepsen's checkers): clients record every
//! data call with its invoke and completion times and its answer
//! ([`Op`]), a nemesis disturbs the server meanwhile, and [`check`] says
//! which promise, if any, the answers broke, naming the ops that show it.
//!
//! The rules, per deduper and entity. A write's *live window* is
//! `[ack, ack + ttl - answer_slack - clock_bound)`: the server stamps a
//! write's bits with the clock it reads before answering, at most
//! [`Settings::answer_slack_ms`] before the client has the answer, and
//! replicas' clocks differ by up to [`Settings::clock_bound_ms`].
//!
//! 1. **No false negative** ([`Violation::FalseNegative`]): a read
//!    (`CheckAbsence` or `AddIfAbsent`) invoked after an acknowledged
//!    write of the entity and completed inside its live window answers
//!    present - unless the answer repeats an attempt (a retried
//!    `request_id`, or a record id remembered absent: rule 3).
//! 2. **At most one new** ([`Violation::NewTwice`]): two `AddIfAbsent`
//!    answers absent for one entity, each completed inside the other's
//!    live window (whichever ran second had the first's bits to see), or
//!    two places of one request, are a duplicate passed as new - unless
//!    both carry the same record id (one record) or are attempts of one
//!    `request_id`.
//! 3. **No event dropped because of its own earlier attempt**
//!    ([`Violation::ReplayDropped`]): a present answer that no write of
//!    another request or record explains (none could have left the bits
//!    set), while an earlier attempt of the same `request_id`, or an
//!    `AddIfAbsent` of the same record id within the record window,
//!    answered absent or failed without an answer.
//! 4. **A retried request gets its first answers**
//!    ([`Violation::RetryAnswerChanged`]): acknowledged attempts of one
//!    `request_id` within its window answer alike.
//!
//! False positives are not violations: a present answer that nothing
//! explains, with no earlier attempt of its own, is counted
//! ([`Report::false_positives`] of [`Report::cold_reads`]) so a run can
//! report its rate beside the `p` the deduper was sized for.
//!
//! Failed calls whose effect is unknown ([`Outcome::Unknown`]) may have
//! written at any time after their invoke: they explain present answers
//! but never demand one.

mod check;
mod history;
mod report;

pub use check::check;
pub use history::{Kind, Op, Outcome, Settings};
pub use report::{At, Report, Violation, shrink};

#[cfg(test)]
mod tests;
