//! The clients of a history run: random data calls over a small entity
//! pool, with repeats inside a request, request ids, record ids, retries
//! of failed or answered calls, and deadlines.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use solus::api::pb;
use solus::api::pb::deduper_admin_service_client::DeduperAdminServiceClient;
use solus::api::pb::deduper_service_client::DeduperServiceClient;
use solus_promises::{Kind, Op, Outcome};
use tonic::Code;
use tonic::transport::Channel;

use super::{Plan, Recorder};

pub const CLIENT: &str = "promises";
pub const DEDUPER: &str = "d";

/// Creates the run's deduper.
pub async fn create(channel: &Channel, plan: &Plan) {
    let mut admin = DeduperAdminServiceClient::new(channel.clone());
    admin
        .create_deduper(pb::CreateDeduperRequest {
            client_id: CLIENT.into(),
            name: DEDUPER.into(),
            expected_insertions: plan.expected_insertions,
            false_positive_rate: plan.false_positive_rate,
            expiry_seconds: plan.expiry_seconds,
            ..Default::default()
        })
        .await
        .expect("creating the run's deduper");
}

/// One call as sent, kept for a retry.
#[derive(Clone)]
pub struct Call {
    pub kind: Kind,
    pub entities: Vec<Vec<u8>>,
    pub record_ids: Vec<Vec<u8>>,
    pub request_id: Option<Vec<u8>>,
    pub ttl_ms: u64,
}

impl Call {
    /// A `CheckAbsence` of `entities`.
    pub fn check(entities: Vec<Vec<u8>>) -> Call {
        Call {
            kind: Kind::CheckAbsence,
            entities,
            record_ids: Vec::new(),
            request_id: None,
            ttl_ms: 0,
        }
    }
}

/// Client `c`'s loop until the recorder says stop.
pub async fn client(c: u32, plan: &Plan, channel: Channel, rec: &Recorder) {
    let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_mul(1_000_003).wrapping_add(u64::from(c)));
    let mut data = DeduperServiceClient::new(channel);
    let mut last: Option<(Call, bool)> = None;
    let mut n = 0u64;
    let (mut recent, mut fresh) = (Recent::default(), 0u64);
    // Reads due near the end of acknowledged writes' TTLs: (due, entities).
    let mut due: Vec<(i64, Vec<Vec<u8>>)> = Vec::new();
    let slack = super::settings(&plan.nemesis, 0).answer_slack_ms;
    while !rec.stop.load(std::sync::atomic::Ordering::SeqCst) {
        n += 1;
        // A retry of the last call: always after a failure (as clients
        // do), sometimes after an answer (a replay after a restart).
        let retry = match &last {
            Some((call, failed)) if call.request_id.is_some() || !call.record_ids.is_empty() => {
                (*failed && rng.random_bool(0.8)) || rng.random_bool(0.1)
            }
            _ => false,
        };
        let now = solus::clock::now_ms();
        due.retain(|(at, _)| *at + slack > now);
        let call = if retry {
            last.take().unwrap().0
        } else if let Some(i) = due.iter().position(|(at, _)| *at <= now) {
            Call::check(due.swap_remove(i).1)
        } else {
            next_call(c, n, plan, &mut rng, &mut recent, &mut fresh)
        };
        let timeout = Duration::from_millis(rng.random_range(150..plan.max_deadline_ms));
        let (outcome, complete_ms) = perform(&mut data, &call, timeout, c, rec).await;
        let failed = matches!(outcome, Outcome::Unknown);
        // Read a sample of an acknowledged write again late in its window,
        // where a write lost to a retired generation shows.
        if let Some(check) = late_check(&call, &outcome, complete_ms, slack, &mut rng) {
            due.push(check);
        }
        last = Some((call, failed));
        if failed {
            tokio::time::sleep(Duration::from_millis(rng.random_range(5..50))).await;
        }
    }
}

/// Sends `call` as process `c` and records it: its outcome and completion
/// time (Solus clock, ms).
pub async fn perform(
    data: &mut DeduperServiceClient<Channel>,
    call: &Call,
    timeout: Duration,
    c: u32,
    rec: &Recorder,
) -> (Outcome, i64) {
    let (outcome, invoke_ms, complete_ms) = send(data, call, timeout, rec).await;
    rec.record(Op {
        id: rec.id(),
        process: c,
        kind: call.kind,
        deduper: format!("{CLIENT}/{DEDUPER}"),
        entities: call.entities.clone(),
        record_ids: call.record_ids.clone(),
        request_id: call.request_id.clone(),
        ttl_ms: call.ttl_ms,
        invoke_ms,
        complete_ms,
        outcome: outcome.clone(),
    })
    .await;
    (outcome, complete_ms)
}

/// For an acknowledged large write: a read of 200 of its entities at a
/// random moment in the second half of its live window (`slack` as the
/// model takes it), as (due, entities).
pub fn late_check(
    call: &Call,
    outcome: &Outcome,
    complete_ms: i64,
    slack: i64,
    rng: &mut StdRng,
) -> Option<(i64, Vec<Vec<u8>>)> {
    let window = call.ttl_ms as i64 - slack;
    if !call.kind.writes() || !matches!(outcome, Outcome::Ok { .. }) || window < 2 || call.entities.len() <= 100 {
        return None;
    }
    let at = complete_ms + rng.random_range(window / 2..window);
    let sample = (0..200)
        .map(|_| call.entities[rng.random_range(0..call.entities.len())].clone())
        .collect();
    Some((at, sample))
}

/// Entities a client wrote lately, which its later reads draw from.
#[derive(Default)]
struct Recent {
    ring: Vec<Vec<u8>>,
    next: usize,
}

impl Recent {
    const CAP: usize = 20_000;

    fn push(&mut self, e: &[u8]) {
        if self.ring.len() < Self::CAP {
            self.ring.push(e.to_vec());
        } else {
            self.ring[self.next] = e.to_vec();
            self.next = (self.next + 1) % Self::CAP;
        }
    }

    fn pick(&self, rng: &mut StdRng) -> Option<Vec<u8>> {
        (!self.ring.is_empty()).then(|| self.ring[rng.random_range(0..self.ring.len())].clone())
    }
}

/// A new call: small ones draw from the shared pool (collisions) and this
/// client's recent writes; large ones are mostly entities never sent
/// before (each written once: what a lost write would leave absent).
fn next_call(c: u32, n: u64, plan: &Plan, rng: &mut StdRng, recent: &mut Recent, fresh: &mut u64) -> Call {
    let kind = match rng.random_range(0..100) {
        0..55 => Kind::AddIfAbsent,
        55..80 => Kind::CheckAbsence,
        _ => Kind::Add,
    };
    let large = rng.random_bool(plan.large_share);
    let len = if large {
        rng.random_range(plan.large_batch / 2..=plan.large_batch)
    } else {
        rng.random_range(1..=40)
    };
    let mut entities: Vec<Vec<u8>> = (0..len)
        .map(|_| {
            let roll = rng.random_range(0..100);
            if large && roll < 60 && kind.writes() {
                *fresh += 1;
                return format!("n{c}.{fresh}").into_bytes();
            }
            if roll % 2 == 0
                && let Some(e) = recent.pick(rng)
            {
                return e;
            }
            format!("e{}", rng.random_range(0..plan.pool)).into_bytes()
        })
        .collect();
    // Repeats inside one request.
    if len > 1 && rng.random_bool(0.3) {
        let (a, b) = (rng.random_range(0..len), rng.random_range(0..len));
        entities[b] = entities[a].clone();
    }
    if kind.writes() {
        entities.iter().for_each(|e| recent.push(e));
    }
    // Record ids name a (entity, attempt epoch): a few epochs per entity, so
    // the same record recurs in later requests (replays).
    let record_ids = if kind != Kind::Add && rng.random_bool(0.3) {
        entities
            .iter()
            .map(|e| {
                if rng.random_bool(0.1) {
                    Vec::new()
                } else {
                    let mut r = e.clone();
                    r.extend_from_slice(format!("#{}", rng.random_range(0..3)).as_bytes());
                    r
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let request_id = (kind != Kind::CheckAbsence && rng.random_bool(0.3)).then(|| format!("q{c}.{n}").into_bytes());
    let max = plan.expiry_seconds * 1000;
    let ttl_ms = if kind == Kind::CheckAbsence {
        0
    } else if rng.random_bool(0.5) {
        max
    } else {
        rng.random_range(max / 4..=max)
    };
    Call {
        kind,
        entities,
        record_ids,
        request_id,
        ttl_ms,
    }
}

/// Sends `call` with deadline `timeout`: its outcome, invoke and completion
/// times (Solus clock, ms).
async fn send(
    data: &mut DeduperServiceClient<Channel>,
    call: &Call,
    timeout: Duration,
    rec: &Recorder,
) -> (Outcome, i64, i64) {
    let entities: Vec<prost::bytes::Bytes> = call.entities.iter().map(|e| e.clone().into()).collect();
    let record_ids: Vec<prost::bytes::Bytes> = call.record_ids.iter().map(|e| e.clone().into()).collect();
    let request_id = call.request_id.clone().map(Into::into);
    let (client_id, deduper) = (CLIENT.to_string(), DEDUPER.to_string());
    let invoke = solus::clock::now_ms();
    let answer: Result<Vec<bool>, tonic::Status> = match call.kind {
        Kind::Add => {
            let mut req = tonic::Request::new(pb::AddRequest {
                client_id,
                deduper,
                entities,
                ttl_ms: call.ttl_ms,
                request_id,
            });
            req.set_timeout(timeout);
            data.add(req).await.map(|_| Vec::new())
        }
        Kind::AddIfAbsent => {
            let mut req = tonic::Request::new(pb::AddIfAbsentRequest {
                client_id,
                deduper,
                entities,
                ttl_ms: call.ttl_ms,
                request_id,
                record_ids,
            });
            req.set_timeout(timeout);
            data.add_if_absent(req).await.map(|r| r.into_inner().absent)
        }
        Kind::CheckAbsence => {
            let mut req = tonic::Request::new(pb::CheckAbsenceRequest {
                client_id,
                deduper,
                entities,
                record_ids,
            });
            req.set_timeout(timeout);
            data.check_absence(req).await.map(|r| r.into_inner().absent)
        }
    };
    let complete = solus::clock::now_ms();
    if let Err(s) = &answer {
        rec.failure(s);
    }
    let outcome = match answer {
        Ok(absent) => Outcome::Ok { absent },
        // Refused before storage: the request, the deduper's state or a
        // full budget.
        Err(s)
            if matches!(
                s.code(),
                Code::InvalidArgument | Code::NotFound | Code::ResourceExhausted
            ) =>
        {
            Outcome::Refused
        }
        Err(s) if s.code() == Code::FailedPrecondition => Outcome::Refused,
        Err(_) => Outcome::Unknown,
    };
    (outcome, invoke, complete)
}

/// One line for an op of a shrunk history.
pub fn describe(op: &Op) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let entities: Vec<String> = op.entities.iter().map(|e| text(e)).collect();
    let shown = if entities.len() > 8 {
        format!("{} entities [{}, ...]", entities.len(), entities[..8].join(", "))
    } else {
        format!("[{}]", entities.join(", "))
    };
    format!(
        "op {} client {} {:?} {} ttl {} ms request_id {:?} record_ids {} invoked {} completed {} ({} ms): {:?}",
        op.id,
        op.process,
        op.kind,
        shown,
        op.ttl_ms,
        op.request_id.as_deref().map(text),
        if op.record_ids.is_empty() { "none" } else { "given" },
        op.invoke_ms,
        op.complete_ms,
        op.complete_ms - op.invoke_ms,
        match &op.outcome {
            Outcome::Ok { absent } if absent.len() > 8 => format!("{} answers", absent.len()),
            other => format!("{other:?}"),
        }
    )
}
