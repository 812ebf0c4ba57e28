//! The config a data request acts on, no older at its storage call than a
//! resize's timing allows.
//!
//! A request reads its deduper's config when it arrives, then may wait: in
//! the deduper's lane ([`super::lanes`], up to its deadline) and for a
//! thread of the blocking pool. A resize moves writes to the successor
//! generation a grace after it is recorded ([`crate::generations`]), and
//! the older generation takes its last write a grace later; the grace
//! allows [`super::resize::RESIZE_MARGIN_MS`] between a request's config
//! lookup and its storage call. A request that waited longer on a config
//! from before the resize wrote the older generation after its last write
//! time, and its acknowledged entities read absent once that generation
//! retired (issue 45: a false negative), or found the generation's filter
//! deleted. So at the storage call, where the request reads its clock for
//! the generation to write and the expiry of its bits, a config held
//! longer than [`MAX_CONFIG_AGE`] is read again from the store. Held time
//! counts on the monotonic clock and on the Solus clock
//! ([`crate::clock::now_ms`], which a wall-clock step moves), whichever
//! says longer: generations' times are on the latter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::EngineError;
use super::resize::RESIZE_MARGIN_MS;
use crate::clock::now_ms;
use crate::deduper::Deduper;
use crate::storage::Store;

/// The longest a request acts on a config it looked up, measured from the
/// lookup to its storage call's clock read: half the resize margin, the
/// other half left for the clock read itself on a loaded machine.
pub const MAX_CONFIG_AGE: Duration = Duration::from_millis(RESIZE_MARGIN_MS as u64 / 2);

/// A deduper config and when this request looked it up.
#[derive(Debug, Clone)]
pub struct Held {
    pub d: Arc<Deduper>,
    since: Instant,
    since_ms: i64,
}

impl Held {
    /// `d`, looked up now.
    pub fn new(d: Arc<Deduper>) -> Held {
        Held {
            d,
            since: Instant::now(),
            since_ms: now_ms(),
        }
    }

    /// The config to act on now: the one held while younger than
    /// [`MAX_CONFIG_AGE`], else the store's (a blocking read: call it on
    /// the blocking pool). Errors: `NotFound` (deleted meanwhile),
    /// `Inactive` (deactivated meanwhile), `Misplaced` (re-created with its
    /// bits elsewhere), `Storage`.
    pub fn current(self, store: &dyn Store) -> Result<Arc<Deduper>, EngineError> {
        let max = MAX_CONFIG_AGE.as_millis() as i64;
        if self.since.elapsed() <= MAX_CONFIG_AGE && now_ms() - self.since_ms <= max {
            return Ok(self.d);
        }
        reread(store, &self.d)
    }
}

/// `held`'s config as the store has it now (a blocking read), checked as a
/// lookup would: the current config of a request that has waited. Errors:
/// as [`Held::current`].
pub fn reread(store: &dyn Store, held: &Deduper) -> Result<Arc<Deduper>, EngineError> {
    let Some(d) = store.get_deduper(&held.client_id, &held.name)? else {
        return Err(EngineError::NotFound {
            client_id: held.client_id.clone(),
            name: held.name.clone(),
        });
    };
    if !d.active {
        return Err(EngineError::Inactive { name: d.name });
    }
    if let (Some(recorded), Some(current)) = (&d.data_location, &held.data_location)
        && recorded != current
    {
        return Err(EngineError::Misplaced {
            name: d.name.clone(),
            recorded: recorded.clone(),
            current: current.clone(),
        });
    }
    crate::metrics::config_reread();
    Ok(Arc::new(d))
}
