//! The nemesis of a history run: resizes (grow and shrink), expiry
//! changes, and forward steps of the Solus clock (what a stalled process,
//! a slow disk or a stepped wall clock look like to the server: time
//! passes while requests wait).

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use tonic::transport::Channel;

use super::workload::{CLIENT, DEDUPER};
use super::{Plan, Recorder};

/// Which faults a run injects, and how hard.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Real time between two nemesis steps.
    pub interval: Duration,
    /// Chance per step of a resize (refused while one is under way).
    pub resize: f64,
    /// Chance per step of an expiry change.
    pub expiry: f64,
    /// Largest forward step of the Solus clock per nemesis step, in ms
    /// (0 = none).
    pub max_clock_step_ms: i64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            interval: Duration::from_millis(150),
            resize: 0.08,
            expiry: 0.01,
            max_clock_step_ms: 600,
        }
    }
}

/// What the nemesis did.
#[derive(Debug, Default, Clone)]
pub struct Done {
    pub resizes: u32,
    pub resizes_refused: u32,
    pub expiry_changes: u32,
    pub clock_steps: u32,
    pub clock_stepped_ms: i64,
}

impl fmt::Display for Done {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resizes ({} refused: one under way), {} expiry changes, {} clock steps (+{} ms)",
            self.resizes, self.resizes_refused, self.expiry_changes, self.clock_steps, self.clock_stepped_ms
        )
    }
}

/// Acts every `plan.nemesis.interval` until the recorder says stop; leaves
/// the clock stepped (the history is in the stepped clock).
pub async fn run(plan: &Plan, channel: Channel, rec: &Recorder) -> Done {
    let f = &plan.nemesis;
    let mut rng = StdRng::seed_from_u64(plan.seed ^ 0x6e65_6d65_7369_73);
    let mut admin = DeduperAdminServiceClient::new(channel);
    let mut done = Done::default();
    let mut offset = 0i64;
    while !rec.stop.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(f.interval).await;
        if f.max_clock_step_ms > 0 {
            let step = rng.random_range(0..=f.max_clock_step_ms);
            offset += step;
            solus::clock::shift_ms(offset);
            done.clock_steps += 1;
            done.clock_stepped_ms += step;
        }
        if rng.random_bool(f.resize) {
            // Grow or shrink around the created size.
            let n = plan.expected_insertions / 2 + rng.random_range(0..plan.expected_insertions * 2);
            let resized = admin
                .update_deduper(pb::UpdateDeduperRequest {
                    client_id: CLIENT.into(),
                    name: DEDUPER.into(),
                    expected_insertions: Some(n),
                    ..Default::default()
                })
                .await;
            match resized {
                Ok(d) => {
                    done.resizes += 1;
                    let d = d.into_inner();
                    rec.event(format!("resized to n = {n}: generations {:?}", d.generations.iter().map(|g| (g.id, g.writes_from_ms, g.retire_at_ms)).collect::<Vec<_>>()));
                }
                Err(s) if s.code() == tonic::Code::FailedPrecondition => done.resizes_refused += 1,
                Err(s) => panic!("resize failed: {s:?}"),
            }
        }
        if rng.random_bool(f.expiry) {
            // Never below the plan's: the clients' TTLs stay within it.
            let e = plan.expiry_seconds + rng.random_range(0..=1);
            admin
                .update_deduper(pb::UpdateDeduperRequest {
                    client_id: CLIENT.into(),
                    name: DEDUPER.into(),
                    expiry_seconds: Some(e),
                    ..Default::default()
                })
                .await
                .expect("expiry change");
            done.expiry_changes += 1;
        }
    }
    done
}
