//! Fault injection and call accounting, shared by every connection.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The calls HBase 2.6's access control answers for a principal granted
/// nothing (seen on Kerberized HBase: `getTableNames` and
/// `getColumnDescriptors` answered, the first row read or write did not).
pub(crate) const SCHEMA_CALLS: &[&str] = &[
    "getTableNames",
    "getColumnDescriptors",
    "getTableRegions",
    "isTableEnabled",
    "getThriftServerType",
    "getClusterId",
];

#[derive(Debug, Default)]
pub(crate) struct Faults {
    latency_micros: AtomicU64,
    fail_next: AtomicU64,
    /// Pending failures of one named call each (`fail_calls`).
    fail_named: Mutex<BTreeMap<String, u64>>,
    /// Pending delays of one named call each (`delay_calls`): how many, how long.
    delay_named: Mutex<BTreeMap<String, (u64, Duration)>>,
    /// While set, every call on rows answers an `IOError` with this
    /// message (`deny_row_access_with`).
    deny_rows: Mutex<Option<String>>,
    total_calls: AtomicU64,
    per_call: Mutex<BTreeMap<String, u64>>,
}

impl Faults {
    pub fn new(latency: Duration) -> Self {
        let faults = Self::default();
        faults.set_latency(latency);
        faults
    }

    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency_micros.store(micros, Ordering::SeqCst);
    }

    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_micros.load(Ordering::SeqCst))
    }

    /// The next `n` calls fail (replacing any failures still pending).
    pub fn fail_next(&self, n: u64) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    /// The next `n` calls of `method` (e.g. `mutateRowsTs`) fail, other
    /// calls are unaffected (replacing any such failures still pending).
    pub fn fail_calls(&self, method: &str, n: u64) {
        self.fail_named
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(method.to_owned(), n);
    }

    /// The next `n` calls of `method` wait `delay` before they are served
    /// (replacing any such delays still pending).
    pub fn delay_calls(&self, method: &str, n: u64, delay: Duration) {
        self.delay_named
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(method.to_owned(), (n, delay));
    }

    /// Consumes one pending delay of `method`, if any.
    pub fn take_delay(&self, method: &str) -> Option<Duration> {
        let mut named = self.delay_named.lock().unwrap_or_else(PoisonError::into_inner);
        let (n, delay) = named.get_mut(method)?;
        let left = n.checked_sub(1)?;
        *n = left;
        Some(*delay)
    }

    /// While `message` is `Some`, every call on rows (all but the
    /// [`SCHEMA_CALLS`]) answers an `IOError` with that message and
    /// `canRetry` false; `None` ends it.
    pub fn deny_row_access_with(&self, message: Option<String>) {
        *self.deny_rows.lock().unwrap_or_else(PoisonError::into_inner) = message;
    }

    /// The message `method` is denied with now, if any (`deny_row_access_with`).
    pub fn row_access_denial(&self, method: &str) -> Option<String> {
        if SCHEMA_CALLS.contains(&method) {
            return None;
        }
        self.deny_rows.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Consumes one pending failure of `method` or of any call, if any.
    pub fn take_failure(&self, method: &str) -> bool {
        {
            let mut named = self.fail_named.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(n) = named.get_mut(method)
                && *n > 0
            {
                *n -= 1;
                return true;
            }
        }
        self.fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    pub fn record_call(&self, name: &str) {
        self.total_calls.fetch_add(1, Ordering::SeqCst);
        *self.counts().entry(name.to_owned()).or_default() += 1;
    }

    pub fn total_calls(&self) -> u64 {
        self.total_calls.load(Ordering::SeqCst)
    }

    pub fn calls(&self, name: &str) -> u64 {
        self.counts().get(name).copied().unwrap_or(0)
    }

    pub fn call_counts(&self) -> BTreeMap<String, u64> {
        self.counts().clone()
    }

    pub fn reset_counts(&self) {
        let mut counts = self.counts();
        counts.clear();
        // Reset the total while holding the map lock so both stay consistent.
        self.total_calls.store(0, Ordering::SeqCst);
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.per_call.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_consumed_one_per_call() {
        let faults = Faults::default();
        faults.fail_next(2);
        assert!(faults.take_failure("get"));
        assert!(faults.take_failure("get"));
        assert!(!faults.take_failure("get"));
        faults.fail_calls("mutateRowsTs", 1);
        assert!(!faults.take_failure("get"));
        assert!(faults.take_failure("mutateRowsTs"));
        assert!(!faults.take_failure("mutateRowsTs"));
    }

    #[test]
    fn row_calls_are_denied_until_cleared_schema_calls_never() {
        let faults = Faults::default();
        assert_eq!(faults.row_access_denial("getRowWithColumns"), None);
        faults.deny_row_access_with(Some("denied\n\tat x".into()));
        assert_eq!(
            faults.row_access_denial("getRowWithColumns").as_deref(),
            Some("denied\n\tat x")
        );
        assert_eq!(faults.row_access_denial("mutateRow").as_deref(), Some("denied\n\tat x"));
        assert_eq!(faults.row_access_denial("getTableNames"), None);
        faults.deny_row_access_with(None);
        assert_eq!(faults.row_access_denial("mutateRow"), None);
    }

    #[test]
    fn counts_per_call() {
        let faults = Faults::default();
        faults.record_call("get");
        faults.record_call("get");
        faults.record_call("getRow");
        assert_eq!(faults.total_calls(), 3);
        assert_eq!(faults.calls("get"), 2);
        faults.reset_counts();
        assert_eq!(faults.total_calls(), 0);
        assert_eq!(faults.calls("get"), 0);
    }
}
