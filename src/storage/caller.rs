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
pub fn run_for<T>(gone: Option<Arc<AtomicBool>>, f: impl FnOnce() -> T) -> T {
    let before = CALLER.with(|c| c.replace(gone));
    let out = f();
    CALLER.with(|c| *c.borrow_mut() = before);
    out
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
}
