//! Whether the caller of the storage work running on this thread is still
//! waiting: the engine marks a request's work with a flag that turns true
//! when the gRPC caller goes away (deadline passed, cancelled); backends
//! check it before each remote call, so work for a caller that has gone
//! stops taking connections from pools other callers wait on.
//!
//! Work already inside a call finishes it: only calls not yet made are
//! skipped. Skipping is safe because every write is idempotent and the
//! caller was answered `DEADLINE_EXCEEDED`/`CANCELLED`, which promises
//! nothing (README, "what a failed call leaves behind").

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static CALLER: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread with `gone` as its caller's flag (`None`: no
/// caller, e.g. the health probe; never gone).
/// The flag before is restored however `f` ends, a panic included (a
/// round of combined requests catches its panic and the thread serves on).
pub fn run_for<T>(gone: Option<Arc<AtomicBool>>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Arc<AtomicBool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            CALLER.with(|c| *c.borrow_mut() = before);
        }
    }
    let _restore = Restore(CALLER.with(|c| c.replace(gone)));
    f()
}

/// The current thread's caller flag, to hand to threads the work starts.
pub fn current() -> Option<Arc<AtomicBool>> {
    CALLER.with(|c| c.borrow().clone())
}

/// True when the caller of this thread's work has gone.
pub fn gone() -> bool {
    CALLER.with(|c| c.borrow().as_ref().is_some_and(|g| g.load(Ordering::SeqCst)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_is_per_thread_and_restored() {
        let flag = Arc::new(AtomicBool::new(false));
        assert!(!gone());
        run_for(Some(flag.clone()), || {
            assert!(!gone());
            flag.store(true, Ordering::SeqCst);
            assert!(gone());
            let handed = current();
            std::thread::spawn(move || {
                assert!(!gone(), "other threads are not marked by themselves");
                run_for(handed, || assert!(gone()));
            })
            .join()
            .unwrap();
        });
        assert!(!gone(), "restored after run_for");
    }

    /// Found reviewing the combined rounds: a round that panicked left the
    /// thread marked with the round's flag (none) instead of its request's.
    #[test]
    fn flag_is_restored_after_a_panic() {
        let flag = Arc::new(AtomicBool::new(true));
        run_for(Some(flag), || {
            assert!(gone());
            let caught = std::panic::catch_unwind(|| run_for(None, || panic!("a round panics")));
            assert!(caught.is_err());
            assert!(gone(), "the request's flag is back after the inner run_for panicked");
        });
    }
}
