//! Heap settings for the request path (glibc only; elsewhere no-ops).
//!
//! A batch of 1,000 entities allocates a few buffers of 100-200 KB (bit
//! addresses, cells, the answer), just above glibc's default 128 KiB
//! `mmap` threshold and trim threshold. glibc then maps and unmaps them, or
//! hands freed heap back with `madvise(MADV_DONTNEED)`, on nearly every
//! request, and each new buffer page-faults its pages in again: about a
//! tenth of the server's CPU under load. Raising both thresholds
//! (`mallopt(3)`, `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD`) keeps freed
//! buffers for reuse; [`spawn_trimmer`] returns what stays unused to the
//! OS every few seconds (`malloc_trim(3)`), so an idle server's resident
//! memory still falls back.

use std::time::Duration;

/// Allocations from this size (bytes) get their own mapping.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 4 << 20;
/// Free heap above this (bytes) is returned to the OS at once.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: i32 = 64 << 20;
/// How often free heap below [`TRIM_THRESHOLD`] is returned anyway.
pub const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Sets the thresholds above; process-wide, call once at start-up.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; both values are
    // in the ranges mallopt(3) documents.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}

/// Returns unused heap to the OS every [`TRIM_EVERY`], on the blocking pool.
pub fn spawn_trimmer() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(TRIM_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    })
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}
