//! Wall-clock time as Solus counts it: milliseconds since the Unix epoch,
//! the unit of every expiry time, cell timestamp and create/update time.
//! One function, so the engine and every storage backend agree on "now".

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Milliseconds since the Unix epoch (0 if the system clock is before it),
/// plus the offset of [`shift_ms`].
pub fn now_ms() -> i64 {
    let real = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    real.saturating_add(OFFSET_MS.load(Ordering::SeqCst))
}

/// Shifts this process's Solus clock by `offset_ms` from the system clock
/// (replacing any earlier shift). For tests that must see a date far away
/// (e.g. expiry times after 2106); never set by the server itself.
pub fn shift_ms(offset_ms: i64) {
    OFFSET_MS.store(offset_ms, Ordering::SeqCst);
}
