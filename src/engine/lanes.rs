//! Per-deduper lanes onto the blocking pool. Storage work runs on tokio's
//! blocking pool ([`BLOCKING_THREADS`] threads); each deduper may have at
//! most `limits.max_storage_tasks_per_deduper` of its data requests there
//! (running or queued), and its further requests wait here, asynchronously,
//! holding no thread. Without the lanes, one deduper whose storage is slow
//! (a contended HBase guard, a round queue behind a big batch, a region in
//! recovery) or simply flooded filled every thread with its waiting
//! requests, and every other deduper's requests queued behind them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Threads of the blocking pool the server runs storage work on (`main`):
/// tokio's default of 512 lets a burst of slow calls (HBase timing out)
/// pile up threads and memory; 64 keep both cores busy.
pub const BLOCKING_THREADS: usize = 64;

/// Default of `limits.max_storage_tasks_per_deduper`: a quarter of the
/// pool, so three flooded dedupers still leave a quarter to the rest. A
/// deduper's concurrent requests still share HBase read rounds up to this
/// many at once.
pub const DEFAULT_TASKS_PER_DEDUPER: usize = BLOCKING_THREADS / 4;

/// One lane per deduper (client id, name) with work on the pool.
pub struct Lanes {
    max: usize,
    lanes: Mutex<HashMap<(String, String), Arc<Semaphore>>>,
}

/// A place in a deduper's lane, held until its storage work ends.
pub type Place = OwnedSemaphorePermit;

impl Lanes {
    /// Lanes of `max` places each (at least 1).
    pub fn new(max: usize) -> Lanes {
        Lanes {
            max: max.max(1),
            lanes: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a place in the deduper's lane. A caller that goes away
    /// while waiting (its future dropped) takes no place.
    pub async fn enter(&self, client_id: &str, name: &str) -> Place {
        let lane = {
            let mut lanes = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
            let key = (client_id.to_string(), name.to_string());
            match lanes.get(&key) {
                Some(lane) => lane.clone(),
                None => {
                    // A lane nobody holds or waits for is only a count of
                    // free places: sweep those out as new dedupers arrive.
                    lanes.retain(|_, l| Arc::strong_count(l) > 1);
                    lanes
                        .entry(key)
                        .or_insert_with(|| Arc::new(Semaphore::new(self.max)))
                        .clone()
                }
            }
        };
        lane.acquire_owned().await.expect("lanes are never closed")
    }

    /// Dedupers with a lane kept (holding or waiting for places, or not yet swept).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lanes.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_lane_holds_at_most_max_places_and_frees_them_on_drop() {
        let lanes = Lanes::new(2);
        let a = lanes.enter("c", "d").await;
        let _b = lanes.enter("c", "d").await;
        let third = tokio::time::timeout(Duration::from_millis(50), lanes.enter("c", "d")).await;
        assert!(third.is_err(), "a third place in a lane of 2");
        // Another deduper's lane is its own.
        let _other = lanes.enter("c", "e").await;
        drop(a);
        let third = tokio::time::timeout(Duration::from_millis(50), lanes.enter("c", "d")).await;
        assert!(third.is_ok(), "a freed place is taken");
    }

    #[tokio::test]
    async fn idle_lanes_are_swept_when_a_new_deduper_arrives() {
        let lanes = Lanes::new(1);
        drop(lanes.enter("c", "a").await);
        let held = lanes.enter("c", "b").await;
        assert_eq!(lanes.kept(), 1, "a's idle lane swept as b arrived");
        let _c = lanes.enter("c", "c").await;
        assert_eq!(lanes.kept(), 2, "b's held lane kept as c arrived");
        drop(held);
        assert_eq!(Lanes::new(0).max, 1, "at least one place");
    }
}
