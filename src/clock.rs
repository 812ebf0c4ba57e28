//! Wall-clock time as Solus counts it: milliseconds since the Unix epoch,
//! the unit of every expiry time, cell timestamp and create/update time.
//! One function, so the engine and every storage backend agree on "now".

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the system clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
