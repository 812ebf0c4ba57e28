//! The nemesis of a history run: resizes (grow and shrink), expiry
//! changes, and forward steps of the Solus clock (what a stalled process,
//! a slow disk or a stepped wall clock look like to the server: time
//! passes while requests wait).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use solus_promises::Kind;
use tonic::transport::Channel;

use super::workload::{CLIENT, Call, DEDUPER, late_check, perform};
use super::{Plan, Recorder};

/// Which faults a run injects, and how hard.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Real time between two nemesis steps.
    pub interval: Duration,
    /// Chance per step of a resize (refused while one is under way).
    pub resize: f64,
    /// Chance per step of a burst: `burst_requests` large `AddIfAbsent`s of
    /// new entities sent at once, then a resize while they wait in the
    /// deduper's lane (what `resize.auto` does: it resizes a busy deduper).
    pub burst: f64,
    pub burst_requests: u32,
    /// Chance per step of an expiry change.
    pub expiry: f64,
    /// Chance per step of a restart of the storage below Solus (`kill -9`
    /// of HBase's Thrift server, started again on the same data), where
    /// the run has a hook for it ([`Restart`]). Off unless
    /// `PROMISES_STORAGE_RESTARTS` sets it (0.005: one per ~20 s): its first
    /// run found one entity answered absent twice by one replica after a
    /// restart, not yet explained (docs/operations.md).
    pub storage_restart: f64,
    /// Largest forward step of the Solus clock per nemesis step, in ms
    /// (0 = none).
    pub max_clock_step_ms: i64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            interval: Duration::from_millis(100),
            resize: 0.08,
            burst: 0.03,
            burst_requests: 16,
            expiry: 0.01,
            storage_restart: 0.0,
            max_clock_step_ms: 400,
        }
    }
}

/// What the nemesis did.
#[derive(Debug, Default, Clone)]
pub struct Done {
    pub resizes: u32,
    pub resizes_refused: u32,
    pub bursts: u32,
    pub expiry_changes: u32,
    pub storage_restarts: u32,
    pub clock_steps: u32,
    pub clock_stepped_ms: i64,
}

impl fmt::Display for Done {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resizes ({} refused: one under way), {} bursts, {} expiry changes, {} storage restarts, {} clock \
             steps (+{} ms)",
            self.resizes,
            self.resizes_refused,
            self.bursts,
            self.expiry_changes,
            self.storage_restarts,
            self.clock_steps,
            self.clock_stepped_ms
        )
    }
}

/// Acts every `plan.nemesis.interval` until the recorder says stop; leaves
/// the clock stepped (the history is in the stepped clock).
/// Restarts the storage below Solus and returns once it answers again (a
/// blocking call: run on the blocking pool).
pub type Restart = Arc<dyn Fn() + Send + Sync>;

pub async fn run(plan: &Plan, channel: Channel, rec: Arc<Recorder>, restart: Option<Restart>) -> Done {
    let f = &plan.nemesis;
    let mut rng = StdRng::seed_from_u64(plan.seed ^ 0x006e_656d_6573_6973);
    let mut admin = DeduperAdminServiceClient::new(channel.clone());
    let mut bursts = Vec::new();
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
        let burst = rng.random_bool(f.burst);
        if burst {
            done.bursts += 1;
            for r in 0..f.burst_requests {
                let seed = rng.random();
                let (rec, channel, plan) = (rec.clone(), channel.clone(), plan.clone());
                let id = (done.bursts, r);
                bursts.push(tokio::spawn(async move {
                    burst_request(id, seed, &plan, channel, &rec).await
                }));
            }
            // Let them reach the lane.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if burst || rng.random_bool(f.resize) {
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
                    rec.event(format!(
                        "resized to n = {n}: generations {:?}",
                        d.generations
                            .iter()
                            .map(|g| (g.id, g.writes_from_ms, g.retire_at_ms))
                            .collect::<Vec<_>>()
                    ));
                }
                Err(s) if s.code() == tonic::Code::FailedPrecondition => done.resizes_refused += 1,
                Err(s) => panic!("resize failed: {s:?}"),
            }
        }
        if let Some(restart) = restart.as_ref().filter(|_| rng.random_bool(f.storage_restart)) {
            rec.event("storage restart: kill -9".into());
            let restart = restart.clone();
            tokio::task::spawn_blocking(move || restart())
                .await
                .expect("storage restart");
            rec.event("storage restart: answering again".into());
            done.storage_restarts += 1;
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
    for b in bursts {
        b.await.expect("burst request");
    }
    done
}

/// One request of burst `id`: a large `AddIfAbsent` of new entities with
/// the deduper's whole TTL and a long deadline, then, once answered, two
/// reads of a sample of it late in its live window.
async fn burst_request(id: (u32, u32), seed: u64, plan: &Plan, channel: Channel, rec: &Recorder) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut data = DeduperServiceClient::new(channel);
    let process = 10_000 + id.0 * 100 + id.1;
    let call = Call {
        kind: Kind::AddIfAbsent,
        entities: (0..plan.large_batch)
            .map(|i| format!("b{}.{}.{i}", id.0, id.1).into_bytes())
            .collect(),
        record_ids: Vec::new(),
        request_id: None,
        ttl_ms: plan.expiry_seconds * 1000,
    };
    let (outcome, complete_ms) = perform(&mut data, &call, Duration::from_secs(30), process, rec).await;
    let slack = super::settings(&plan.nemesis, 0).answer_slack_ms;
    for _ in 0..2 {
        let Some((at, sample)) = late_check(&call, &outcome, complete_ms, slack, &mut rng) else {
            return;
        };
        while solus::clock::now_ms() < at {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        perform(&mut data, &Call::check(sample), Duration::from_secs(30), process, rec).await;
    }
}
