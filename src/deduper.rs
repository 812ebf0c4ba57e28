//! The deduper model: a named, sized, time-windowed Bloom filter owned by a
//! client, and the validation of everything an operator can set on it.

use serde::{Deserialize, Serialize};

use crate::contract::sizing::{self, Geometry, SizingError, UNBIASED_BITS_PER_SHARD};
use crate::contract::{MAX_BITS_PER_SHARD, MAX_HASH_FUNCTIONS};

/// Longest client id or deduper name, in bytes.
pub const MAX_NAME_LEN: usize = 128;

/// Where a deduper's data lives on a multi-datacenter HBase deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Shared by every datacenter (the main data table).
    #[default]
    Global,
    /// Local to this datacenter (the `<table>_<farm>` data table).
    Dc,
}

/// A deduper's stored configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deduper {
    pub client_id: String,
    pub name: String,
    /// `k`, shards and bits per shard: fixed at creation, since changing them
    /// would orphan every stored bit.
    pub geometry: Geometry,
    /// Longest TTL an entity may have, and the default TTL, in seconds (> 0).
    pub expiry_seconds: u64,
    pub active: bool,
    pub level: Level,
    /// Milliseconds since the Unix epoch.
    pub create_time_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub update_time_ms: i64,
    /// `n`, when the deduper was sized from `n` and `p`.
    pub expected_insertions: Option<u64>,
    /// `p`, when the deduper was sized from `n` and `p`.
    pub false_positive_rate: Option<f64>,
    /// Where its bits live, as the backend named it at creation
    /// ([`crate::storage::Store::data_location`]; HBase: the data table).
    /// `None` for configs stored before this was recorded, which are taken
    /// to match the current settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_location: Option<String>,
    /// The longest `expiry_seconds` this deduper ever had, in seconds: its
    /// bits can carry expiry times up to this far past their write, so a
    /// delete must reach that far ([`Deduper::expiry_high_water_seconds`]).
    /// `None` for configs stored before this was recorded: then unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_expiry_seconds: Option<u64>,
    /// Whether its bits may carry legacy `<bit>` markers of the original
    /// Java service (HBase only): false for every deduper this Solus
    /// creates, true for configs that do not say (written by the original
    /// service or an older Solus). Reads of a deduper that may hold them ask
    /// for the marker columns too (`storage.hbase.read_legacy_markers`).
    #[serde(default)]
    pub may_hold_legacy_markers: bool,
    /// Its generations while it is or was resized ([`crate::generations`]):
    /// empty for a deduper never resized, which is its own generation 0
    /// (and is stored exactly as before). Otherwise sorted by id, and the
    /// top-level `geometry`, `expected_insertions` and
    /// `false_positive_rate` are the newest generation's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generations: Vec<crate::generations::Generation>,
}

impl Deduper {
    /// A new, active deduper created at `now_ms` (ms since the Unix epoch),
    /// without sizing inputs; `expiry_seconds` in seconds.
    pub fn new(
        client_id: impl Into<String>,
        name: impl Into<String>,
        geometry: Geometry,
        expiry_seconds: u64,
        level: Level,
        now_ms: i64,
    ) -> Deduper {
        Deduper {
            client_id: client_id.into(),
            name: name.into(),
            geometry,
            expiry_seconds,
            active: true,
            level,
            create_time_ms: now_ms,
            update_time_ms: now_ms,
            expected_insertions: None,
            false_positive_rate: None,
            data_location: None,
            max_expiry_seconds: Some(expiry_seconds),
            may_hold_legacy_markers: false,
            generations: Vec::new(),
        }
    }

    /// Sets `expiry_seconds` (seconds) and raises the recorded high-water
    /// mark to it; an unknown mark stays unknown (earlier expiries are not
    /// known, so recording this one alone would understate it).
    pub fn set_expiry(&mut self, expiry_seconds: u64) {
        self.expiry_seconds = expiry_seconds;
        self.max_expiry_seconds = self.max_expiry_seconds.map(|m| m.max(expiry_seconds));
    }

    /// The longest expiry, in seconds, any of this deduper's bits may have
    /// been written under: the recorded high-water mark (and at least the
    /// current expiry), or, for a config without one, the worst case
    /// [`MAX_EXPIRY_SECONDS`] (100 years), since any accepted expiry may
    /// have been set and lowered again before the mark was recorded.
    pub fn expiry_high_water_seconds(&self) -> u64 {
        self.max_expiry_seconds
            .map_or(MAX_EXPIRY_SECONDS, |m| m.max(self.expiry_seconds))
    }

    /// The TTL to use for an add, in ms: `ttl_ms`, or `expiry_seconds` when 0.
    ///
    /// Errors with [`ModelError::TtlTooLong`] when `ttl_ms` exceeds
    /// `expiry_seconds * 1000`.
    pub fn effective_ttl_ms(&self, ttl_ms: u64) -> Result<u64, ModelError> {
        let max = self.expiry_seconds.saturating_mul(1000);
        match ttl_ms {
            0 => Ok(max),
            t if t <= max => Ok(t),
            t => Err(ModelError::TtlTooLong {
                ttl_ms: t,
                max_ms: max,
                deduper: self.name.clone(),
            }),
        }
    }
}

/// A value of a stored config that no create accepts (see
/// [`Deduper::check_stored`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BadStoredValue {
    /// Which value.
    pub field: StoredField,
    /// The generation whose geometry or sizing it is, for a resized deduper
    /// (`None`: the deduper's own fields).
    pub generation: Option<u32>,
    /// What it holds and what is allowed.
    pub why: String,
}

/// The fields of a stored config that [`Deduper::check_stored`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredField {
    Name,
    HashFunctions,
    Shards,
    BitsPerShard,
    ExpirySeconds,
    ExpectedInsertions,
    FalsePositiveRate,
}

impl StoredField {
    /// The field's name in [`Deduper`] (and in the embedded store's JSON).
    pub fn name(self) -> &'static str {
        match self {
            StoredField::Name => "name",
            StoredField::HashFunctions => "hash_functions",
            StoredField::Shards => "shards",
            StoredField::BitsPerShard => "bits_per_shard",
            StoredField::ExpirySeconds => "expiry_seconds",
            StoredField::ExpectedInsertions => "expected_insertions",
            StoredField::FalsePositiveRate => "false_positive_rate",
        }
    }
}

impl Deduper {
    /// Checks a config read from storage against the bounds every create
    /// applies whatever the settings (`resolve_geometry` with any `limits`):
    /// a valid name; `hash_functions` 1 to [`MAX_HASH_FUNCTIONS`]; `shards`
    /// and `bits_per_shard` 1 to 2^31-1 (any `limits.max_shards`, and
    /// `bits_per_shard` above 2^30 as `limits.allow_biased_bits_per_shard`
    /// accepts it: lowering a limit later does not orphan dedupers made
    /// under it); `expiry_seconds` 1 to [`MAX_EXPIRY_SECONDS`]; sizing
    /// inputs, when recorded, n >= 1 and p in (0, 1). The same for each
    /// generation's geometry and sizing. Both stores call it on every config
    /// they decode, so a value overwritten by hand (a zero modulus, zero
    /// or 2^31-1 hash functions) is refused as that deduper's error, never
    /// used. Errors: the first bad value.
    pub fn check_stored(&self) -> Result<(), BadStoredValue> {
        let bad = |field, generation, why: String| Err(BadStoredValue { field, generation, why });
        if let Err(e) = validate_name("name", &self.name) {
            return bad(StoredField::Name, None, e.to_string());
        }
        if let Err(e) = validate_expiry(self.expiry_seconds) {
            return bad(StoredField::ExpirySeconds, None, e.to_string());
        }
        let check = |g: &Geometry, n: Option<u64>, p: Option<f64>, generation: Option<u32>| {
            if !(1..=MAX_HASH_FUNCTIONS).contains(&g.hash_functions) {
                return bad(
                    StoredField::HashFunctions,
                    generation,
                    ModelError::BadHashFunctions(g.hash_functions).to_string(),
                );
            }
            if !(1..=MAX_BITS_PER_SHARD).contains(&g.shards) {
                return bad(
                    StoredField::Shards,
                    generation,
                    ModelError::BadShards {
                        got: g.shards,
                        max: MAX_BITS_PER_SHARD,
                    }
                    .to_string(),
                );
            }
            if !(1..=MAX_BITS_PER_SHARD).contains(&g.bits_per_shard) {
                return bad(
                    StoredField::BitsPerShard,
                    generation,
                    ModelError::BadBitsPerShard(g.bits_per_shard).to_string(),
                );
            }
            if let Some(n) = n
                && n == 0
            {
                return bad(
                    StoredField::ExpectedInsertions,
                    generation,
                    "expected_insertions must be at least 1, got 0".into(),
                );
            }
            if let Some(p) = p
                && !(p > 0.0 && p < 1.0)
            {
                return bad(
                    StoredField::FalsePositiveRate,
                    generation,
                    format!("false_positive_rate must be above 0 and below 1, got {p}"),
                );
            }
            Ok(())
        };
        if self.generations.is_empty() {
            return check(&self.geometry, self.expected_insertions, self.false_positive_rate, None);
        }
        for g in &self.generations {
            check(&g.geometry, g.expected_insertions, g.false_positive_rate, Some(g.id))?;
        }
        Ok(())
    }
}

/// How a new deduper is sized.
#[derive(Debug, Clone, PartialEq)]
pub enum Sizing {
    /// From expected insertions `n` and false-positive rate `p`.
    Expected { n: u64, p: f64 },
    /// Explicit geometry.
    Explicit(Geometry),
}

/// Bounds that protect storage from absurd dedupers.
#[derive(Debug, Clone, Copy)]
pub struct SizeLimits {
    /// Largest `bits_per_shard` chosen when sizing from `n` and `p`.
    pub max_bits_per_shard: u32,
    /// Largest number of shards a deduper may have.
    pub max_shards: u32,
    /// Accept explicit geometries with `bits_per_shard` above 2^30, whose
    /// bit positions are biased (see [`sizing::UNBIASED_BITS_PER_SHARD`]);
    /// only to attach to existing data of that geometry. Sizing from `n`
    /// and `p` never picks one either way.
    pub allow_biased_bits_per_shard: bool,
}

impl Default for SizeLimits {
    fn default() -> Self {
        SizeLimits {
            max_bits_per_shard: 1 << 20,
            max_shards: 65_536,
            allow_biased_bits_per_shard: false,
        }
    }
}

/// A refused model input; every message says what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("{field} must be 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -, got {value:?}")]
    BadName { field: &'static str, value: String },
    #[error(transparent)]
    Sizing(#[from] SizingError),
    #[error(
        "give either expected_insertions and false_positive_rate, or all of hash_functions, shards and bits_per_shard; got {0}"
    )]
    AmbiguousSizing(String),
    #[error("hash_functions must be 1 to {MAX_HASH_FUNCTIONS}, got {0}")]
    BadHashFunctions(u32),
    #[error("shards must be 1 to {max}, got {got}")]
    BadShards { got: u32, max: u32 },
    #[error("bits_per_shard must be 1 to {MAX_BITS_PER_SHARD}, got {0}")]
    BadBitsPerShard(u32),
    #[error(
        "bits_per_shard {0} is above 2^30 = {UNBIASED_BITS_PER_SHARD}: bit positions are abs(v % bits_per_shard) of a \
         uniform signed 32-bit v, which is not uniform when bits_per_shard does not divide 2^31 (none above 2^30 does): \
         some bits are chosen twice as often as others, which raises the false-positive rate; \
         use more shards of at most {UNBIASED_BITS_PER_SHARD} bits, or, only to attach to existing data of this geometry, \
         set limits.allow_biased_bits_per_shard = true"
    )]
    BiasedBitsPerShard(u32),
    #[error("expiry_seconds must be 1 to {max} (100 years), got {got}")]
    BadExpiry { got: u64, max: u64 },
    #[error(
        "ttl_ms {ttl_ms} exceeds deduper {deduper:?}'s expiry of {max_ms} ms; use 0 for the default or at most {max_ms}"
    )]
    TtlTooLong { ttl_ms: u64, max_ms: u64, deduper: String },
}

/// Longest `expiry_seconds`: 100 years keeps `now + ttl` far from `i64` ms overflow.
pub const MAX_EXPIRY_SECONDS: u64 = 100 * 365 * 24 * 3600;

/// Checks a client id or deduper name: 1..=128 bytes of `[A-Za-z0-9_.-]`
/// (safe inside row keys, which use `|`, and HBase table names).
pub fn validate_name(field: &'static str, value: &str) -> Result<(), ModelError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_NAME_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ModelError::BadName {
            field,
            value: value.chars().take(MAX_NAME_LEN + 1).collect(),
        })
    }
}

/// Checks `expiry_seconds` is in `1..=MAX_EXPIRY_SECONDS`.
pub fn validate_expiry(expiry_seconds: u64) -> Result<(), ModelError> {
    if (1..=MAX_EXPIRY_SECONDS).contains(&expiry_seconds) {
        Ok(())
    } else {
        Err(ModelError::BadExpiry {
            got: expiry_seconds,
            max: MAX_EXPIRY_SECONDS,
        })
    }
}

/// Resolves a sizing request to a geometry within `limits`: from `n` and
/// `p` by [`sizing::size_for`] (never above 2^30 bits per shard); an
/// explicit one checked against the bounds. Errors: `Sizing` from
/// `size_for`, `BadHashFunctions`, `BadShards`, `BadBitsPerShard`, and
/// `BiasedBitsPerShard` for `bits_per_shard` above 2^30 unless
/// `limits.allow_biased_bits_per_shard`.
pub fn resolve_geometry(sizing: &Sizing, limits: &SizeLimits) -> Result<Geometry, ModelError> {
    match sizing {
        Sizing::Expected { n, p } => Ok(sizing::size_for(
            *n,
            *p,
            u64::from(limits.max_bits_per_shard),
            limits.max_shards,
        )?),
        Sizing::Explicit(g) => {
            if g.hash_functions == 0 || g.hash_functions > MAX_HASH_FUNCTIONS {
                return Err(ModelError::BadHashFunctions(g.hash_functions));
            }
            if g.shards == 0 || g.shards > limits.max_shards {
                return Err(ModelError::BadShards {
                    got: g.shards,
                    max: limits.max_shards,
                });
            }
            if g.bits_per_shard == 0 || g.bits_per_shard > MAX_BITS_PER_SHARD {
                return Err(ModelError::BadBitsPerShard(g.bits_per_shard));
            }
            if g.bits_per_shard > UNBIASED_BITS_PER_SHARD && !limits.allow_biased_bits_per_shard {
                return Err(ModelError::BiasedBitsPerShard(g.bits_per_shard));
            }
            Ok(*g)
        }
    }
}

/// Reads the sizing form from raw request fields (zero = not given).
pub fn sizing_from_fields(n: u64, p: f64, k: u32, shards: u32, bits_per_shard: u32) -> Result<Sizing, ModelError> {
    let expected = n != 0 || p != 0.0;
    let explicit = k != 0 || shards != 0 || bits_per_shard != 0;
    match (expected, explicit) {
        (true, false) => Ok(Sizing::Expected { n, p }),
        (false, true) => Ok(Sizing::Explicit(Geometry {
            hash_functions: k,
            shards,
            bits_per_shard,
        })),
        (true, true) => Err(ModelError::AmbiguousSizing("both forms".into())),
        (false, false) => Err(ModelError::AmbiguousSizing("neither".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_restricted_to_row_key_safe_characters() {
        for ok in ["a", "client-a", "orders_v2.eu", &"x".repeat(128)] {
            assert!(validate_name("name", ok).is_ok(), "{ok}");
        }
        for bad in ["", "a|b", "a b", "ü", &"x".repeat(129), "a:b", "a/b"] {
            assert!(validate_name("name", bad).is_err(), "{bad}");
        }
    }

    /// Issue 45, class 6: the values a hand `put` left in a config row.
    #[test]
    fn stored_configs_are_held_to_the_bounds_of_every_create() {
        let geometry = Geometry {
            hash_functions: 7,
            shards: 2,
            bits_per_shard: 1000,
        };
        let good = Deduper::new("c", "d", geometry, 60, Level::Global, 1);
        assert_eq!(good.check_stored(), Ok(()));
        let biased = Deduper {
            geometry: Geometry {
                bits_per_shard: MAX_BITS_PER_SHARD,
                shards: MAX_BITS_PER_SHARD,
                ..geometry
            },
            ..good.clone()
        };
        assert_eq!(biased.check_stored(), Ok(()), "any limits a create may have had");
        let refused = |f: &dyn Fn(&mut Deduper)| {
            let mut d = good.clone();
            f(&mut d);
            d.check_stored().unwrap_err()
        };
        for (k, field) in [
            (0, StoredField::HashFunctions),
            (i32::MAX as u32, StoredField::HashFunctions),
        ] {
            let e = refused(&|d| d.geometry.hash_functions = k);
            assert_eq!((e.field, e.generation), (field, None));
            assert!(e.why.contains(&format!("got {k}")), "{}", e.why);
        }
        assert_eq!(refused(&|d| d.geometry.shards = 0).field, StoredField::Shards);
        assert_eq!(
            refused(&|d| d.geometry.bits_per_shard = 0).field,
            StoredField::BitsPerShard
        );
        assert_eq!(refused(&|d| d.expiry_seconds = 0).field, StoredField::ExpirySeconds);
        assert_eq!(refused(&|d| d.name = "a|b".into()).field, StoredField::Name);
        assert_eq!(
            refused(&|d| d.expected_insertions = Some(0)).field,
            StoredField::ExpectedInsertions
        );
        assert_eq!(
            refused(&|d| d.false_positive_rate = Some(f64::NAN)).field,
            StoredField::FalsePositiveRate
        );
    }

    #[test]
    fn sizing_forms_are_exclusive() {
        assert_eq!(
            sizing_from_fields(10, 0.1, 0, 0, 0).unwrap(),
            Sizing::Expected { n: 10, p: 0.1 }
        );
        assert!(matches!(
            sizing_from_fields(0, 0.0, 3, 2, 100).unwrap(),
            Sizing::Explicit(_)
        ));
        assert!(sizing_from_fields(10, 0.1, 3, 0, 0).is_err());
        assert!(sizing_from_fields(0, 0.0, 0, 0, 0).is_err());
    }

    #[test]
    fn explicit_geometry_bounds() {
        let limits = SizeLimits::default();
        let g = |k, s, b| {
            Sizing::Explicit(Geometry {
                hash_functions: k,
                shards: s,
                bits_per_shard: b,
            })
        };
        assert!(resolve_geometry(&g(7, 10, 1000), &limits).is_ok());
        assert!(resolve_geometry(&g(64, 65_536, UNBIASED_BITS_PER_SHARD), &limits).is_ok());
        // Above 2^30 bits per shard, bit positions are biased: refused unless allowed.
        let biased = resolve_geometry(&g(7, 2, UNBIASED_BITS_PER_SHARD + 1), &limits);
        assert_eq!(biased, Err(ModelError::BiasedBitsPerShard(UNBIASED_BITS_PER_SHARD + 1)));
        let message = biased.unwrap_err().to_string();
        assert!(
            message.contains("limits.allow_biased_bits_per_shard") && message.contains("not uniform"),
            "{message}"
        );
        let allowing = SizeLimits {
            allow_biased_bits_per_shard: true,
            ..limits
        };
        assert!(resolve_geometry(&g(64, 65_536, MAX_BITS_PER_SHARD), &allowing).is_ok());
        assert_eq!(
            resolve_geometry(&g(65, 1, 1), &limits),
            Err(ModelError::BadHashFunctions(65))
        );
        assert_eq!(
            resolve_geometry(&g(0, 1, 1), &limits),
            Err(ModelError::BadHashFunctions(0))
        );
        assert_eq!(
            resolve_geometry(&g(1, 65_537, 1), &limits),
            Err(ModelError::BadShards {
                got: 65_537,
                max: 65_536
            })
        );
        assert_eq!(
            resolve_geometry(&g(1, 1, 1 << 31), &limits),
            Err(ModelError::BadBitsPerShard(1 << 31))
        );
    }

    #[test]
    fn ttl_defaults_to_expiry_and_is_capped_by_it() {
        let d = Deduper::new(
            "c",
            "d",
            Geometry {
                hash_functions: 1,
                shards: 1,
                bits_per_shard: 1,
            },
            60,
            Level::Global,
            0,
        );
        assert_eq!(d.effective_ttl_ms(0), Ok(60_000));
        assert_eq!(d.effective_ttl_ms(60_000), Ok(60_000));
        assert!(matches!(d.effective_ttl_ms(60_001), Err(ModelError::TtlTooLong { .. })));
    }

    #[test]
    fn expiry_high_water_mark_only_rises_and_is_worst_case_when_unknown() {
        let g = Geometry {
            hash_functions: 1,
            shards: 1,
            bits_per_shard: 1,
        };
        let mut d = Deduper::new("c", "d", g, 3600, Level::Global, 0);
        d.set_expiry(1);
        assert_eq!((d.expiry_seconds, d.expiry_high_water_seconds()), (1, 3600));
        d.set_expiry(7200);
        d.set_expiry(60);
        assert_eq!(d.expiry_high_water_seconds(), 7200);
        // A config stored before the mark was recorded reads without it.
        let legacy: Deduper = serde_json::from_value({
            let mut v = serde_json::to_value(&d).unwrap();
            v.as_object_mut().unwrap().remove("max_expiry_seconds");
            v
        })
        .unwrap();
        assert_eq!(legacy.max_expiry_seconds, None);
        assert_eq!(legacy.expiry_high_water_seconds(), MAX_EXPIRY_SECONDS);
        let mut raised = legacy.clone();
        raised.set_expiry(90_000);
        assert_eq!(
            raised.max_expiry_seconds, None,
            "still unknown: earlier expiries are not known"
        );
    }
}
