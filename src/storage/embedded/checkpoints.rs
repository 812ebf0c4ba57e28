//! What the embedded store tells about its checkpoints (issue 45: with the
//! journal directory read-only, checkpoints failed every ~200 ms for as
//! long as it lasted, the journal grew, health stayed SERVING and only the
//! log said so):
//!
//! - `solus_checkpoint_consecutive_failures` and
//!   `solus_checkpoint_last_success_timestamp_seconds`;
//! - once [`PERSISTENT`] checkpoints failed in a row, a sentence in the
//!   store's damage report, so the `solus.v1.Journal` health service turns
//!   NOT_SERVING (readiness is untouched: writes still reach the journal);
//! - one log line per change of state (the first failure, a different
//!   error, the recovery), not one per attempt;
//! - a backoff for the checkpoint loop: after `n` failures in a row the
//!   next attempt waits [`retry_delay`]`(n)`, 1 s doubling up to
//!   [`MAX_RETRY_DELAY`], instead of retrying at every wake-up.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::storage::StorageError;

/// Failures in a row that make the failure persistent (health, alert).
pub const PERSISTENT: u64 = 3;

/// The longest wait between two attempts of a failing checkpoint.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// The wait after `failures` failures in a row: none after none, then 1 s,
/// 2 s, 4 s, ... up to [`MAX_RETRY_DELAY`].
pub fn retry_delay(failures: u64) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let doublings = (failures - 1).min(16) as u32;
    Duration::from_secs(1u64 << doublings).min(MAX_RETRY_DELAY)
}

#[derive(Default)]
struct State {
    failures: u64,
    /// When the first failure of the current run happened (ms since the epoch).
    since_ms: i64,
    /// The error of the latest failure.
    error: String,
    /// When the latest failure happened.
    last_failure: Option<Instant>,
}

/// The checkpoints' record of success and failure; see the module docs.
#[derive(Default)]
pub struct Checkpoints {
    state: Mutex<State>,
}

impl Checkpoints {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A checkpoint succeeded: the failures (if any) are over.
    pub fn succeeded(&self) {
        let mut s = self.state();
        if s.failures > 0 {
            tracing::info!(
                failures = s.failures,
                failing_for_s = (now_ms() - s.since_ms).max(0) / 1000,
                "embedded store checkpoints succeed again; the journal they kept is dropped"
            );
        }
        *s = State::default();
        crate::metrics::set_checkpoint_failures(0);
        crate::metrics::set_checkpoint_last_success(now_ms().div_euclid(1000));
    }

    /// A checkpoint failed with `error`. Logged when the run of failures
    /// starts and when its error changes.
    pub fn failed(&self, error: &StorageError) {
        let mut s = self.state();
        let error = error.to_string();
        if s.failures == 0 || s.error != error {
            tracing::error!(
                error = %error,
                failures = s.failures + 1,
                "embedded store checkpoint failed; the journal is kept (and grows) and the checkpoint is retried \
                 with a backoff up to 30 s; logged again when the error changes or checkpoints succeed"
            );
        }
        if s.failures == 0 {
            s.since_ms = now_ms();
        }
        s.failures += 1;
        s.error = error;
        s.last_failure = Some(Instant::now());
        crate::metrics::set_checkpoint_failures(s.failures);
    }

    /// Failures in a row now.
    #[cfg(test)]
    pub fn failures(&self) -> u64 {
        self.state().failures
    }

    /// Whether the backoff lets a checkpoint be tried at `now`.
    pub fn may_try(&self, now: Instant) -> bool {
        let s = self.state();
        s.last_failure
            .is_none_or(|at| now.saturating_duration_since(at) >= retry_delay(s.failures))
    }

    /// A sentence for the damage report once the failure is persistent
    /// (it names the first failure's time and the error, so it changes only
    /// when they do), else `None`.
    pub fn describe(&self) -> Option<String> {
        let s = self.state();
        (s.failures >= PERSISTENT).then(|| {
            format!(
                "checkpoints have failed since {} (Unix seconds; {PERSISTENT} or more in a row), last with: {}; the \
                 journal is kept and grows until one succeeds, and a restart replays it all (docs/operations.md, \
                 \"Alert: SolusCheckpointFailing\")",
                s.since_ms.div_euclid(1000),
                s.error
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let delays: Vec<u64> = (0..8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [0, 1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry_delay(u64::MAX), MAX_RETRY_DELAY);
    }

    #[test]
    fn persistent_failures_are_described_until_a_success() {
        let c = Checkpoints::default();
        let now = Instant::now();
        assert!(c.may_try(now));
        let e = StorageError::Unavailable("starting a journal file: Read-only file system (os error 30)".into());
        c.failed(&e);
        assert!(!c.may_try(Instant::now()), "no retry before 1 s");
        assert!(c.may_try(Instant::now() + Duration::from_millis(1001)));
        c.failed(&e);
        assert_eq!(c.describe(), None, "two failures are not persistent yet");
        c.failed(&e);
        let d = c.describe().expect("described after 3");
        assert!(
            d.contains("Read-only file system") && d.contains("checkpoints have failed since"),
            "{d}"
        );
        c.failed(&e);
        assert_eq!(c.describe(), Some(d), "the same sentence while nothing changes");
        assert_eq!(c.failures(), 4);
        assert!(!c.may_try(Instant::now() + Duration::from_secs(7)), "8 s after the 4th");
        c.succeeded();
        assert_eq!((c.failures(), c.describe()), (0, None));
        assert!(c.may_try(Instant::now()));
    }
}
