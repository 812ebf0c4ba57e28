//! What a history is: the operations clients invoked, when, and what they
//! were answered. Times are ms since the Unix epoch on the clock the
//! server stamps with (a runner that shifts the server's clock records the
//! shifted time).

/// The data calls of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `Add(entities, ttl)`: writes, answers nothing per entity.
    Add,
    /// `AddIfAbsent`: reads, then writes; answers absent/present per entity.
    AddIfAbsent,
    /// `CheckAbsence`: reads; answers absent/present per entity.
    CheckAbsence,
}

impl Kind {
    /// Whether the call may set bits.
    pub fn writes(self) -> bool {
        !matches!(self, Kind::CheckAbsence)
    }

    /// Whether the call answers absent/present per entity.
    pub fn reads(self) -> bool {
        !matches!(self, Kind::Add)
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged. For `AddIfAbsent` and `CheckAbsence`, `absent[i]` is
    /// the answer for entity `i` (true = definitely new); empty for `Add`.
    Ok { absent: Vec<bool> },
    /// Refused before storage was touched (INVALID_ARGUMENT, NOT_FOUND,
    /// FAILED_PRECONDITION for an inactive deduper...): had no effect.
    Refused,
    /// Failed in a way that may or may not have reached storage
    /// (UNAVAILABLE, DEADLINE_EXCEEDED, a dropped connection): its writes
    /// may land at any time after its invoke.
    Unknown,
}

/// One call, as a client saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    /// Unique within the history; names the op in violations.
    pub id: u64,
    /// Which process (client thread) made it: ops of one process never
    /// overlap in time.
    pub process: u32,
    pub kind: Kind,
    /// `client_id/deduper`: promises hold per deduper.
    pub deduper: String,
    pub entities: Vec<Vec<u8>>,
    /// Empty, or one per entity (an empty id = none for that entity).
    pub record_ids: Vec<Vec<u8>>,
    /// `request_id`, when the call carried one.
    pub request_id: Option<Vec<u8>>,
    /// The TTL the writes carry, in ms, resolved (a request's `ttl_ms = 0`
    /// is the deduper's expiry at the time); 0 for `CheckAbsence`.
    pub ttl_ms: u64,
    /// When the client sent it.
    pub invoke_ms: i64,
    /// When the client had its answer (or its failure).
    pub complete_ms: i64,
    pub outcome: Outcome,
}

impl Op {
    /// The answer for entity `i`, when acknowledged and answered per entity.
    pub fn answer(&self, i: usize) -> Option<bool> {
        match &self.outcome {
            Outcome::Ok { absent } => absent.get(i).copied(),
            _ => None,
        }
    }

    /// The record id of entity `i`, when it has one.
    pub fn record_id(&self, i: usize) -> Option<&[u8]> {
        self.record_ids.get(i).map(Vec::as_slice).filter(|r| !r.is_empty())
    }

    /// Whether its writes may have reached storage.
    pub fn may_have_written(&self) -> bool {
        self.kind.writes() && !matches!(self.outcome, Outcome::Refused)
    }
}

/// The promises' parameters: the server's settings the model depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// How far the clocks of the replicas sharing a store may differ
    /// (`storage.hbase.max_clock_offset_ms`; 0 for one embedded server):
    /// every TTL window is shortened by it.
    pub clock_bound_ms: i64,
    /// The longest a server may take between reading its clock for a
    /// request's expiry stamps and the client having the answer: the TTL
    /// runs from that clock read, so a window ends this much before
    /// `ack + ttl`.
    pub answer_slack_ms: i64,
    /// How much later than `ttl` after its clock read a bit may stay set:
    /// the embedded store keeps expiry stamps as whole seconds, rounded
    /// up (1,000); HBase keeps ms (0). Only widens what explains a present
    /// answer; never shortens a live window.
    pub stamp_rounding_ms: i64,
    /// `limits.record_id_window_seconds`, in ms.
    pub record_window_ms: i64,
    /// `limits.request_id_window_seconds`, in ms.
    pub request_window_ms: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            clock_bound_ms: 0,
            answer_slack_ms: 1000,
            stamp_rounding_ms: 1000,
            record_window_ms: 3_600_000,
            request_window_ms: 300_000,
        }
    }
}
