//! Mapping between Solus values and HBase Thrift1 structures: Java
//! `Bytes.toBytes` encodings, column names, mutations, and the meta-table
//! row of a deduper config. Row keys, qualifiers and bit-cell values come
//! from [`crate::contract::layout`]; this module only wraps them for Thrift.
//!
//! Meta row (`<client_id>_dedupers`, family `C`, row key
//! [`layout::meta_row_key`]); numbers as Java `Bytes.toBytes` writes them:
//!
//! | column   | type    | bytes                                        |
//! |----------|---------|----------------------------------------------|
//! | `name`   | String  | UTF-8                                        |
//! | `hf`     | int     | 4-byte big-endian: hash functions `k`        |
//! | `sh`     | int     | 4-byte big-endian: shards                    |
//! | `bps`    | int     | 4-byte big-endian: bits per shard            |
//! | `a`      | boolean | 1 byte, `0xFF` active / `0x00` inactive      |
//! | `level`  | String  | UTF-8 `GLOBAL` or `DC`                       |
//! | `ctime`  | long    | 8-byte big-endian, ms since the Unix epoch   |
//! | `utime`  | long    | 8-byte big-endian, ms since the Unix epoch   |
//! | `expiry` | long    | 8-byte big-endian, seconds                   |
//! | `n`      | long    | 8-byte big-endian; only when sized from n, p |
//! | `p`      | double  | 8-byte big-endian IEEE 754; only with `n`    |
//! | `loc`    | String  | UTF-8 data table of the bits (Solus only)    |
//! | `ver`    | bytes   | `utime` long, `a` byte, `expiry` long; then, for a resized deduper only, its generations (Solus only) |
//! | `maxexp` | long    | 8-byte big-endian, seconds: the longest `expiry` ever set (Solus only) |
//! | `legacy` | boolean | 1 byte: whether the bits may hold legacy `<bit>` markers (Solus only) |
//!
//! `legacy` is written `0x00` by every create of this Solus: bits it writes
//! are `#ttl` cells only, so reads need not ask for marker columns
//! (`storage.hbase.read_legacy_markers = "auto"`). A row without it was
//! written by the original service or an older Solus, whose tables may
//! hold markers: it reads as `true`.
//!
//! `maxexp` is the high-water mark of `expiry` that bounds a delete
//! (`lifecycle.rs`). Its cell timestamp is `ctime + maxexp` (a count, not
//! a time): HBase keeps the version with the highest timestamp, so of
//! racing updates the longest expiry stays, in any order, without a read;
//! and it is above the delete markers of a deleted namesake, whose `ctime`
//! was earlier. Written only by [`max_expiry_put`], never with the other
//! columns. A row without it (older writers) has an unknown mark.
//!
//! `ver` is the compare-and-set cell of updates (see `meta.rs`): it holds
//! the mutable settings of the latest update, and wins over `a`, `expiry`
//! and `utime` when its `utime` is not older than theirs. Rows without
//! `loc` or `ver` (older writers) read as before.
//!
//! # Generations in `ver`
//! A deduper resized online (`crate::generations`) records its generations
//! in `ver`, after the 17 bytes above: one encoding version byte
//! ([`GENERATIONS_V1`] = `0x01`), then the generations as a JSON array of
//! [`crate::generations::Generation`] (`id`, `geometry`, sizing and timing
//! in ms since the Unix epoch; oldest first). A deduper never resized has
//! no such suffix: its `ver` is the same 17 bytes as before generations.
//! The geometry and sizing of a resized deduper are then its newest
//! generation's; `hf`, `sh`, `bps`, `n`, `p` keep generation 0's (they are
//! written at creation only). Why `ver`: every update already swaps it, so
//! a resize and a retirement are one compare-and-set like any update; and
//! a replica from before generations requires exactly 17 bytes there and
//! refuses the config (`Corrupt`, naming `C:ver`) instead of reading only
//! generation 0 with the wrong geometry. A later encoding takes another
//! version byte, which this decoder refuses the same way.
//!
//! `hf`, `sh` and `bps` are `int`s because bits per shard is capped at
//! `i32::MAX`. A row holding `name` but no `hf` is a creation in progress
//! (see `meta.rs`).

use std::collections::BTreeMap;

use hbase_thrift::hbase::{Mutation, TCell};

use crate::contract::layout;
use crate::contract::sizing::Geometry;
use crate::deduper::{Deduper, Level};
use crate::generations::Generation;
use crate::storage::StorageError;

/// Thrift attribute map (`Map<Text, Text>`).
pub type Attributes = BTreeMap<Vec<u8>, Vec<u8>>;

/// The mutation attribute HBase reads as a per-cell TTL (Java `Mutation.setTTL`).
pub const TTL_ATTRIBUTE: &str = "_ttl";

/// Meta-table qualifiers.
pub mod meta_col {
    pub const NAME: &str = "name";
    pub const HASH_FUNCTIONS: &str = "hf";
    pub const SHARDS: &str = "sh";
    pub const BITS_PER_SHARD: &str = "bps";
    pub const ACTIVE: &str = "a";
    pub const LEVEL: &str = "level";
    pub const CREATE_TIME: &str = "ctime";
    pub const UPDATE_TIME: &str = "utime";
    pub const EXPIRY: &str = "expiry";
    pub const EXPECTED_INSERTIONS: &str = "n";
    pub const FALSE_POSITIVE_RATE: &str = "p";
    pub const LOCATION: &str = "loc";
    pub const VERSION: &str = "ver";
    /// The creation claim's state (`claim.rs`): absent on rows created
    /// before claims had one, a creator's token while a create is in
    /// progress, [`super::CLAIM_DONE`] once it committed.
    pub const CLAIM: &str = "claim";
    /// A cell stamped by HBase on a create that meets another's claim,
    /// read back as HBase's "now" in that row (`claim.rs`).
    pub const SEEN: &str = "seen";
    pub const MAX_EXPIRY: &str = "maxexp";
    /// Whether the deduper's bits may hold legacy markers (see the module docs).
    pub const LEGACY_MARKERS: &str = "legacy";
    /// Every meta column, for reads that must not fetch anything else.
    pub const ALL: [&str; 17] = [
        NAME,
        HASH_FUNCTIONS,
        SHARDS,
        BITS_PER_SHARD,
        ACTIVE,
        LEVEL,
        CREATE_TIME,
        UPDATE_TIME,
        EXPIRY,
        EXPECTED_INSERTIONS,
        FALSE_POSITIVE_RATE,
        LOCATION,
        VERSION,
        CLAIM,
        SEEN,
        MAX_EXPIRY,
        LEGACY_MARKERS,
    ];
    /// Column of a remembered request's record, in its own row.
    pub const REQUEST: &str = "req";
    /// Column of a remembered record id, in its own row (`records.rs`).
    pub const RECORD: &str = "rec";
}

/// `family:qualifier`, the way Thrift1 names a column.
pub fn column(family: &str, qualifier: &str) -> Vec<u8> {
    format!("{family}:{qualifier}").into_bytes()
}

/// The value of `C:claim` once a create committed; a creator's token is
/// never these 4 bytes (tokens are 16).
pub const CLAIM_DONE: &[u8] = b"done";

/// A delete of every version of one column up to the call's timestamp.
pub fn delete(column: Vec<u8>) -> Mutation {
    Mutation {
        is_delete: Some(true),
        column: Some(column),
        value: None,
        write_to_w_a_l: Some(true),
    }
}

/// A put of one cell, written to the WAL (the generated `Default` has WAL off).
pub fn put(column: Vec<u8>, value: Vec<u8>) -> Mutation {
    Mutation::new(false, column, value, true)
}

/// Attributes giving every cell of a mutation call a TTL of `ttl_ms` ms:
/// `_ttl` = Java `Bytes.toBytes(long)` of the milliseconds.
pub fn ttl_attributes(ttl_ms: i64) -> Attributes {
    BTreeMap::from([(TTL_ATTRIBUTE.as_bytes().to_vec(), ttl_ms.to_be_bytes().to_vec())])
}

/// What a `#ttl` or legacy cell holds, `Corrupt` when its length is wrong.
pub fn decode_expire(value: &[u8]) -> Result<i64, StorageError> {
    layout::decode_expire_ms(value)
        .ok_or_else(|| StorageError::Corrupt(format!("#ttl cell of {} bytes, expected 8", value.len())))
}

pub fn decode_marker(value: &[u8]) -> Result<bool, StorageError> {
    layout::decode_legacy(value)
        .ok_or_else(|| StorageError::Corrupt(format!("legacy marker of {} bytes, expected 1", value.len())))
}

fn meta(qualifier: &str, value: Vec<u8>) -> Mutation {
    put(column(layout::META_FAMILY, qualifier), value)
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Global => "GLOBAL",
        Level::Dc => "DC",
    }
}

/// The puts that store `d` in its meta row (every column but `n`/`p` when
/// the deduper was not sized from them).
pub fn deduper_mutations(d: &Deduper) -> Vec<Mutation> {
    use meta_col::*;
    let g = &d.geometry;
    let int = |v: u32| (v as i32).to_be_bytes().to_vec();
    let mut out = vec![
        meta(NAME, d.name.clone().into_bytes()),
        meta(HASH_FUNCTIONS, int(g.hash_functions)),
        meta(SHARDS, int(g.shards)),
        meta(BITS_PER_SHARD, int(g.bits_per_shard)),
        meta(ACTIVE, layout::encode_legacy(d.active).to_vec()),
        meta(LEVEL, level_name(d.level).as_bytes().to_vec()),
        meta(CREATE_TIME, d.create_time_ms.to_be_bytes().to_vec()),
        meta(UPDATE_TIME, d.update_time_ms.to_be_bytes().to_vec()),
        meta(EXPIRY, (d.expiry_seconds as i64).to_be_bytes().to_vec()),
        meta(
            LEGACY_MARKERS,
            layout::encode_legacy(d.may_hold_legacy_markers).to_vec(),
        ),
    ];
    if let (Some(n), Some(p)) = (d.expected_insertions, d.false_positive_rate) {
        out.push(meta(EXPECTED_INSERTIONS, (n as i64).to_be_bytes().to_vec()));
        out.push(meta(FALSE_POSITIVE_RATE, p.to_bits().to_be_bytes().to_vec()));
    }
    if let Some(loc) = &d.data_location {
        out.push(meta(LOCATION, loc.clone().into_bytes()));
    }
    out
}

/// The put of `C:maxexp` and the cell timestamp to write it at (see the
/// module docs); `None` when the mark is unknown (a config stored before it
/// was recorded keeps it unknown).
pub fn max_expiry_put(d: &Deduper) -> Option<(Mutation, i64)> {
    let max = d.max_expiry_seconds?.max(d.expiry_seconds);
    let seconds = i64::try_from(max).unwrap_or(i64::MAX / 4);
    Some((
        meta(meta_col::MAX_EXPIRY, seconds.to_be_bytes().to_vec()),
        d.create_time_ms.saturating_add(seconds),
    ))
}

/// The puts of an update's mutable columns (`a`, `expiry`, `utime`).
pub fn mutable_mutations(d: &Deduper) -> Vec<Mutation> {
    use meta_col::*;
    vec![
        meta(ACTIVE, layout::encode_legacy(d.active).to_vec()),
        meta(UPDATE_TIME, d.update_time_ms.to_be_bytes().to_vec()),
        meta(EXPIRY, (d.expiry_seconds as i64).to_be_bytes().to_vec()),
    ]
}

/// Length of the `ver` cell's settings: `utime`, `a`, `expiry`.
const VERSION_SETTINGS_LEN: usize = 17;

/// The version byte of the generations encoding in `ver` (see the module
/// docs): a JSON array of generations follows it.
pub const GENERATIONS_V1: u8 = 0x01;

/// The `ver` cell of `d`: `utime` (8 bytes BE), `a` (1 byte), `expiry`
/// seconds (8 bytes BE); for a deduper with generations, then
/// [`GENERATIONS_V1`] and the JSON array of its generations.
pub fn encode_version(d: &Deduper) -> Vec<u8> {
    let mut v = d.update_time_ms.to_be_bytes().to_vec();
    v.extend_from_slice(&layout::encode_legacy(d.active));
    v.extend_from_slice(&(d.expiry_seconds as i64).to_be_bytes());
    if !d.generations.is_empty() {
        v.push(GENERATIONS_V1);
        v.extend_from_slice(&serde_json::to_vec(&d.generations).expect("generations serialize"));
    }
    v
}

/// `(utime, active, expiry_seconds)` of a `ver` cell and the bytes after
/// them (the generations, when any); `None` when shorter than 17 bytes or
/// malformed.
fn decode_version(v: &[u8]) -> Option<(i64, bool, u64, &[u8])> {
    if v.len() < VERSION_SETTINGS_LEN {
        return None;
    }
    let utime = i64::from_be_bytes(v[0..8].try_into().ok()?);
    let active = layout::decode_legacy(&v[8..9])?;
    let expiry = u64::try_from(i64::from_be_bytes(v[9..17].try_into().ok()?)).ok()?;
    Some((utime, active, expiry, &v[VERSION_SETTINGS_LEN..]))
}

/// The generations after a `ver` cell's settings (empty: none); the error
/// says what is wrong, for a `Corrupt` naming `C:ver`.
fn decode_generations(rest: &[u8]) -> Result<Vec<Generation>, String> {
    let Some((&version, json)) = rest.split_first() else {
        return Ok(Vec::new());
    };
    if version != GENERATIONS_V1 {
        return Err(format!(
            "holds generations in encoding version {version}, but this Solus reads version {GENERATIONS_V1} \
             only: a newer Solus resized this deduper; serve it with that version"
        ));
    }
    let gens: Vec<Generation> =
        serde_json::from_slice(json).map_err(|e| format!("holds generations that are not valid JSON: {e}"))?;
    if gens.is_empty() || !gens.windows(2).all(|w| w[0].id < w[1].id) {
        return Err(format!(
            "holds generations {:?}: expected at least one, ids increasing",
            gens.iter().map(|g| g.id).collect::<Vec<_>>()
        ));
    }
    Ok(gens)
}

/// Row key of a remembered request in the client's meta table:
/// `<prefix>request|<client_id>|<deduper>|<request_id as hex>`.
pub fn request_row_key(client_id: &str, deduper: &str, request_id: &[u8]) -> Vec<u8> {
    let hex: String = request_id.iter().map(|b| format!("{b:02x}")).collect();
    layout::prefixed(format!("request|{client_id}|{deduper}|{hex}").as_bytes())
}

/// Row key of a remembered record id in the client's meta table:
/// `<prefix>record|<client_id>|<deduper>|<record_id as hex>`.
pub fn record_row_key(client_id: &str, deduper: &str, record_id: &[u8]) -> Vec<u8> {
    let hex: String = record_id.iter().map(|b| format!("{b:02x}")).collect();
    layout::prefixed(format!("record|{client_id}|{deduper}|{hex}").as_bytes())
}

/// The optional columns `d` does not have, and `ver`: a create deletes
/// them at its cell timestamp, so an abandoned creator's late write of
/// them cannot show through (`claim.rs`).
pub fn absent_columns(d: &Deduper) -> Vec<Mutation> {
    use meta_col::*;
    let mut out = vec![delete(column(layout::META_FAMILY, VERSION))];
    if d.expected_insertions.is_none() || d.false_positive_rate.is_none() {
        out.push(delete(column(layout::META_FAMILY, EXPECTED_INSERTIONS)));
        out.push(delete(column(layout::META_FAMILY, FALSE_POSITIVE_RATE)));
    }
    if d.data_location.is_none() {
        out.push(delete(column(layout::META_FAMILY, LOCATION)));
    }
    out
}

/// Reads a meta row's columns (keyed `C:<qualifier>` as Thrift returns
/// them). `Ok(None)` for a row whose creation has not finished (no `hf`,
/// or a `claim` cell holding a creator's token rather than [`CLAIM_DONE`]);
/// `Corrupt` naming the column when a value cannot be decoded.
pub fn decode_deduper(client_id: &str, columns: &BTreeMap<Vec<u8>, TCell>) -> Result<Option<Deduper>, StorageError> {
    use meta_col::*;
    let get = |q: &str| {
        columns
            .get(&column(layout::META_FAMILY, q))
            .and_then(|c| c.value.as_deref())
    };
    if get(HASH_FUNCTIONS).is_none() || get(CLAIM).is_some_and(|c| c != CLAIM_DONE) {
        return Ok(None);
    }
    let shown_name = get(NAME).map(String::from_utf8_lossy);
    let bad = |q: &str, why: &str| {
        StorageError::Corrupt(format!(
            "{}: column C:{q} {why}; {DAMAGED_ROW_FIX}",
            describe_row(client_id, shown_name.as_deref())
        ))
    };
    let need = |q: &'static str| get(q).ok_or_else(|| bad(q, "is missing"));
    let fixed = |q: &'static str, len: usize| -> Result<&[u8], StorageError> {
        let v = need(q)?;
        if v.len() == len {
            Ok(v)
        } else {
            Err(bad(q, &format!("holds {} bytes, expected {len}", v.len())))
        }
    };
    let int = |q| -> Result<u32, StorageError> {
        let v = i32::from_be_bytes(fixed(q, 4)?.try_into().expect("4 bytes"));
        u32::try_from(v).map_err(|_| bad(q, &format!("is negative ({v})")))
    };
    let long = |q| -> Result<i64, StorageError> { Ok(i64::from_be_bytes(fixed(q, 8)?.try_into().expect("8 bytes"))) };
    let text = |q| -> Result<String, StorageError> {
        String::from_utf8(need(q)?.to_vec()).map_err(|_| bad(q, "is not UTF-8"))
    };
    let level = match text(LEVEL)?.as_str() {
        "GLOBAL" => Level::Global,
        "DC" => Level::Dc,
        other => return Err(bad(LEVEL, &format!("holds {other:?}, expected GLOBAL or DC"))),
    };
    let expiry = long(EXPIRY)?;
    let (n, p) = match get(EXPECTED_INSERTIONS) {
        Some(_) => {
            let n = long(EXPECTED_INSERTIONS)?;
            let p = f64::from_bits(long(FALSE_POSITIVE_RATE)? as u64);
            (Some(n as u64), Some(p))
        }
        None => (None, None),
    };
    let mut active = layout::decode_legacy(fixed(ACTIVE, 1)?).expect("1 byte");
    let mut expiry_seconds = u64::try_from(expiry).map_err(|_| bad(EXPIRY, "is negative"))?;
    let mut update_time_ms = long(UPDATE_TIME)?;
    let mut generations = Vec::new();
    let mut expiry_column = EXPIRY;
    if let Some(v) = get(VERSION) {
        let (utime, a, e, rest) =
            decode_version(v).ok_or_else(|| bad(VERSION, &format!("holds {} bytes, expected 17 or more", v.len())))?;
        if utime >= update_time_ms {
            (update_time_ms, active, expiry_seconds) = (utime, a, e);
            expiry_column = VERSION;
        }
        // From `ver` whatever its age: no other column records them.
        generations = decode_generations(rest).map_err(|why| bad(VERSION, &why))?;
    }
    let mut geometry = Geometry {
        hash_functions: int(HASH_FUNCTIONS)?,
        shards: int(SHARDS)?,
        bits_per_shard: int(BITS_PER_SHARD)?,
    };
    let (mut n, mut p) = (n, p);
    // A resized deduper's geometry and sizing are its newest generation's.
    if let Some(newest) = generations.last() {
        (geometry, n, p) = (newest.geometry, newest.expected_insertions, newest.false_positive_rate);
    }
    let data_location = get(LOCATION)
        .map(|v| String::from_utf8(v.to_vec()).map_err(|_| bad(LOCATION, "is not UTF-8")))
        .transpose()?;
    let max_expiry_seconds = match get(MAX_EXPIRY) {
        Some(_) => Some(u64::try_from(long(MAX_EXPIRY)?).map_err(|_| bad(MAX_EXPIRY, "is negative"))?),
        None => None,
    };
    let may_hold_legacy_markers = match get(LEGACY_MARKERS) {
        Some(_) => layout::decode_legacy(fixed(LEGACY_MARKERS, 1)?).expect("1 byte"),
        None => true,
    };
    let d = Deduper {
        client_id: client_id.to_string(),
        name: text(NAME)?,
        geometry,
        expiry_seconds,
        active,
        level,
        create_time_ms: long(CREATE_TIME)?,
        update_time_ms,
        expected_insertions: n,
        false_positive_rate: p,
        data_location,
        max_expiry_seconds,
        may_hold_legacy_markers,
        generations,
    };
    // Values out of every create's bounds (a hand `put`): refused here, so
    // no caller computes with them (issue 45, class 6).
    if let Err(e) = d.check_stored() {
        use crate::deduper::StoredField as F;
        let column = match (e.field, e.generation) {
            (F::Name, _) => NAME,
            (F::ExpirySeconds, _) => expiry_column,
            (_, Some(_)) => VERSION,
            (F::HashFunctions, None) => HASH_FUNCTIONS,
            (F::Shards, None) => SHARDS,
            (F::BitsPerShard, None) => BITS_PER_SHARD,
            (F::ExpectedInsertions, None) => EXPECTED_INSERTIONS,
            (F::FalsePositiveRate, None) => FALSE_POSITIVE_RATE,
        };
        let generation = e.generation.map(|g| format!("generation {g}'s ")).unwrap_or_default();
        return Err(bad(
            column,
            &format!("holds a value no create accepts: {generation}{}", e.why),
        ));
    }
    Ok(Some(d))
}

/// What the operator is told to do about a config row that cannot be used.
pub const DAMAGED_ROW_FIX: &str = "this deduper is refused until the cell is put back to a valid value \
     (or the row deleted) in HBase; the client's other dedupers are served (docs/hbase.md, \"A damaged config row\")";

/// A meta row as an operator finds it in the HBase shell: the deduper (when
/// its `C:name` reads), the table and the row key (non-printable bytes as
/// `\xNN`, as the shell writes them).
pub fn describe_row(client_id: &str, name: Option<&str>) -> String {
    let table = layout::meta_table(client_id);
    match name {
        Some(name) => format!(
            "config row of deduper {name:?} of client {client_id:?} (table {table}, row \"{}\")",
            layout::meta_row_key(client_id, name).escape_ascii()
        ),
        None => format!("a config row of client {client_id:?} (table {table})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sized: bool) -> Deduper {
        Deduper {
            client_id: "client-a".into(),
            name: "orders".into(),
            geometry: Geometry {
                hash_functions: 7,
                shards: 10,
                bits_per_shard: 958_506,
            },
            expiry_seconds: 3600,
            active: false,
            level: Level::Dc,
            create_time_ms: 1_700_000_000_123,
            update_time_ms: 1_700_000_000_456,
            expected_insertions: sized.then_some(1_000_000),
            false_positive_rate: sized.then_some(0.01),
            data_location: sized.then(|| "solus_deduper_dc1".to_string()),
            max_expiry_seconds: None,
            may_hold_legacy_markers: sized,
            generations: Vec::new(),
        }
    }

    fn as_row(muts: &[Mutation]) -> BTreeMap<Vec<u8>, TCell> {
        muts.iter()
            .map(|m| (m.column.clone().unwrap(), TCell::new(m.value.clone().unwrap(), 1_i64)))
            .collect()
    }

    #[test]
    fn meta_rows_round_trip_with_java_encodings() {
        for sized in [true, false] {
            let d = sample(sized);
            let muts = deduper_mutations(&d);
            assert!(
                muts.iter()
                    .all(|m| m.write_to_w_a_l == Some(true) && m.is_delete == Some(false))
            );
            let row = as_row(&muts);
            assert_eq!(row[&b"C:hf".to_vec()].value.as_deref(), Some(&[0, 0, 0, 7][..]));
            assert_eq!(row[&b"C:a".to_vec()].value.as_deref(), Some(&[0x00][..]));
            assert_eq!(
                row[&b"C:ctime".to_vec()].value.as_deref(),
                Some(&1_700_000_000_123_i64.to_be_bytes()[..])
            );
            assert_eq!(row[&b"C:level".to_vec()].value.as_deref(), Some(&b"DC"[..]));
            assert_eq!(row.contains_key(b"C:p".as_slice()), sized);
            assert_eq!(decode_deduper("client-a", &row).unwrap(), Some(d));
        }
    }

    #[test]
    fn legacy_markers_are_assumed_unless_the_row_says_none() {
        let d = Deduper {
            max_expiry_seconds: None, // its own cell, not in deduper_mutations
            ..Deduper::new("client-a", "orders", sample(true).geometry, 60, Level::Global, 5)
        };
        assert!(!d.may_hold_legacy_markers, "a new deduper holds none");
        let mut row = as_row(&deduper_mutations(&d));
        assert_eq!(row[&b"C:legacy".to_vec()].value.as_deref(), Some(&[0x00][..]));
        assert_eq!(decode_deduper("client-a", &row).unwrap(), Some(d.clone()));
        // The original service's and older Solus' rows have no such column.
        row.remove(b"C:legacy".as_slice());
        let old = decode_deduper("client-a", &row).unwrap().unwrap();
        assert!(old.may_hold_legacy_markers);
        row.insert(b"C:legacy".to_vec(), TCell::new(vec![0, 0], 1_i64));
        let err = decode_deduper("client-a", &row).unwrap_err().to_string();
        assert!(err.contains("C:legacy") && err.contains("2 bytes"), "{err}");
    }

    /// `d` resized at `now_ms` to `bits` bits per shard, n = 4e6, p = 0.001.
    fn resized(d: &Deduper, bits: u32, now_ms: i64) -> Deduper {
        let mut r = d.clone();
        let timing = crate::generations::Timing {
            config_cache_ms: 2000,
            clock_bound_ms: 1000,
            margin_ms: 1000,
        };
        let g = Geometry {
            hash_functions: 10,
            shards: 20,
            bits_per_shard: bits,
        };
        crate::generations::start_successor(&mut r, g, Some(4_000_000), Some(0.001), now_ms, timing).unwrap();
        r.update_time_ms = now_ms;
        r
    }

    /// The row of `d` as created, with `ver` of `now`.
    fn row_with_version(created: &Deduper, now: &Deduper) -> BTreeMap<Vec<u8>, TCell> {
        let mut row = as_row(&deduper_mutations(created));
        row.insert(b"C:ver".to_vec(), TCell::new(encode_version(now), 1_i64));
        row
    }

    #[test]
    fn a_deduper_never_resized_keeps_the_17_byte_version_cell() {
        let d = sample(true);
        let mut want = 1_700_000_000_456_i64.to_be_bytes().to_vec();
        want.push(0x00);
        want.extend_from_slice(&3600_i64.to_be_bytes());
        assert_eq!(encode_version(&d), want, "byte for byte as before generations");
    }

    #[test]
    fn generations_round_trip_in_the_version_cell_after_its_17_bytes() {
        let d = sample(true);
        let r = resized(&d, 2_000_000, d.update_time_ms + 10);
        let ver = encode_version(&r);
        assert_eq!(
            ver[..17],
            encode_version(&Deduper {
                generations: Vec::new(),
                ..r.clone()
            })[..]
        );
        assert_eq!(ver[17], GENERATIONS_V1);
        let json: serde_json::Value = serde_json::from_slice(&ver[18..]).unwrap();
        assert_eq!(json[1]["id"], 1);
        assert_eq!(json[1]["geometry"]["bits_per_shard"], 2_000_000);
        let back = decode_deduper("client-a", &row_with_version(&d, &r)).unwrap().unwrap();
        assert_eq!(back, r);
        // Geometry and sizing are the newest generation's, though `hf`,
        // `sh`, `bps`, `n`, `p` still hold generation 0's.
        assert_eq!(
            (back.geometry.bits_per_shard, back.expected_insertions),
            (2_000_000, Some(4_000_000))
        );
        // Retired down to generation 1 alone: still a resized deduper.
        let mut one = r.clone();
        one.generations.remove(0);
        let back = decode_deduper("client-a", &row_with_version(&d, &one))
            .unwrap()
            .unwrap();
        assert_eq!(back.generations.iter().map(|g| g.id).collect::<Vec<_>>(), [1]);
        assert_eq!(back.geometry, one.generations[0].geometry);
        // Older mutable columns do not take the generations away.
        let mut row = row_with_version(&d, &r);
        let later = Deduper {
            update_time_ms: r.update_time_ms + 5,
            generations: Vec::new(),
            ..d.clone()
        };
        for m in mutable_mutations(&later) {
            row.insert(m.column.clone().unwrap(), TCell::new(m.value.clone().unwrap(), 1_i64));
        }
        assert_eq!(
            decode_deduper("client-a", &row).unwrap().unwrap().generations,
            r.generations
        );
    }

    /// The decoding of `C:ver` by every Solus before generations, verbatim
    /// (commit 13b65fc, `decode_version` and its caller's error): exactly
    /// 17 bytes, else `Corrupt` naming the column.
    fn decode_version_before_generations(v: &[u8]) -> Result<(i64, bool, u64), String> {
        let refused = || {
            format!(
                "deduper config of \"client-a\": column C:ver holds {} bytes, expected 17",
                v.len()
            )
        };
        if v.len() != 17 {
            return Err(refused());
        }
        let utime = i64::from_be_bytes(v[0..8].try_into().unwrap());
        let active = layout::decode_legacy(&v[8..9]).ok_or_else(refused)?;
        let expiry = u64::try_from(i64::from_be_bytes(v[9..17].try_into().unwrap())).map_err(|_| refused())?;
        Ok((utime, active, expiry))
    }

    /// Mixed-version replicas: a replica that does not understand
    /// generations refuses a resized deduper, naming `C:ver`, instead of
    /// reading only generation 0 (with the newest generation's geometry
    /// nowhere in its columns) - and reads a deduper never resized as ever.
    #[test]
    fn a_replica_before_generations_refuses_a_resized_deduper_clearly() {
        let d = sample(true);
        let r = resized(&d, 2_000_000, d.update_time_ms + 10);
        let err = decode_version_before_generations(&encode_version(&r)).unwrap_err();
        assert!(err.contains("C:ver") && err.contains("expected 17"), "{err}");
        let mut one = r.clone();
        one.generations.remove(0);
        assert!(decode_version_before_generations(&encode_version(&one)).is_err());
        assert_eq!(
            decode_version_before_generations(&encode_version(&d)),
            Ok((d.update_time_ms, d.active, d.expiry_seconds))
        );
    }

    #[test]
    fn unknown_or_damaged_generations_are_refused_naming_the_column() {
        let d = sample(true);
        let mut row = as_row(&deduper_mutations(&d));
        let mut refused = |suffix: &[u8]| {
            let mut ver = encode_version(&d);
            ver.extend_from_slice(suffix);
            row.insert(b"C:ver".to_vec(), TCell::new(ver, 1_i64));
            let err = decode_deduper("client-a", &row).unwrap_err();
            assert!(matches!(err, StorageError::Corrupt(_)), "{err:?}");
            err.to_string()
        };
        let newer = refused(b"\x02[]");
        assert!(
            newer.contains("C:ver") && newer.contains("encoding version 2"),
            "{newer}"
        );
        let damaged = refused(b"\x01[{\"id\":");
        assert!(
            damaged.contains("C:ver") && damaged.contains("not valid JSON"),
            "{damaged}"
        );
        let empty = refused(b"\x01[]");
        assert!(empty.contains("C:ver") && empty.contains("at least one"), "{empty}");
        row.insert(b"C:ver".to_vec(), TCell::new(vec![0; 16], 1_i64));
        let err = decode_deduper("client-a", &row).unwrap_err().to_string();
        assert!(err.contains("C:ver") && err.contains("16 bytes"), "{err}");
    }

    #[test]
    fn the_version_cell_wins_over_older_mutable_columns() {
        let d = sample(true);
        let mut row = as_row(&deduper_mutations(&d));
        let newer = Deduper {
            active: true,
            expiry_seconds: 200,
            update_time_ms: d.update_time_ms + 5,
            ..d.clone()
        };
        row.insert(b"C:ver".to_vec(), TCell::new(encode_version(&newer), 1_i64));
        assert_eq!(decode_deduper("client-a", &row).unwrap(), Some(newer.clone()));
        // Columns written after the version cell (a later mirror) win.
        let latest = Deduper {
            active: false,
            update_time_ms: newer.update_time_ms + 1,
            ..newer.clone()
        };
        for m in mutable_mutations(&latest) {
            row.insert(m.column.clone().unwrap(), TCell::new(m.value.clone().unwrap(), 1_i64));
        }
        assert_eq!(decode_deduper("client-a", &row).unwrap(), Some(latest));
    }

    #[test]
    fn incomplete_and_corrupt_meta_rows() {
        let mut row = as_row(&deduper_mutations(&sample(true)));
        let claim_only: BTreeMap<_, _> = row
            .iter()
            .filter(|(k, _)| k == &b"C:name")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(decode_deduper("c", &claim_only).unwrap(), None);
        row.insert(b"C:sh".to_vec(), TCell::new(vec![1, 2], 1_i64));
        let err = decode_deduper("c", &row).unwrap_err().to_string();
        assert!(err.contains("C:sh") && err.contains("2 bytes"), "{err}");
        row.remove(b"C:sh".as_slice());
        let err = decode_deduper("c", &row).unwrap_err().to_string();
        assert!(err.contains("C:sh is missing"), "{err}");
    }

    #[test]
    fn the_expiry_high_water_mark_is_its_own_cell_timestamped_above_ctime() {
        let d = Deduper {
            max_expiry_seconds: Some(7200),
            ..sample(true)
        };
        assert!(
            deduper_mutations(&d)
                .iter()
                .all(|m| m.column.as_deref() != Some(b"C:maxexp"))
        );
        let (put, ts) = max_expiry_put(&d).unwrap();
        assert_eq!(ts, d.create_time_ms + 7200);
        let mut row = as_row(&deduper_mutations(&d));
        row.insert(put.column.unwrap(), TCell::new(put.value.unwrap(), ts));
        assert_eq!(decode_deduper("client-a", &row).unwrap(), Some(d.clone()));
        assert_eq!(max_expiry_put(&sample(true)), None, "unknown stays unknown");
        // Never below the current expiry, even if the stored mark were.
        let (_, ts) = max_expiry_put(&Deduper {
            max_expiry_seconds: Some(10),
            ..d.clone()
        })
        .unwrap();
        assert_eq!(ts, d.create_time_ms + 3600);
    }

    #[test]
    fn ttl_attribute_is_big_endian_ms() {
        let attrs = ttl_attributes(3_600_000);
        assert_eq!(attrs[&b"_ttl".to_vec()], 3_600_000_i64.to_be_bytes().to_vec());
        assert_eq!(
            decode_expire(&[0; 7]).unwrap_err().to_string(),
            "corrupt stored data: #ttl cell of 7 bytes, expected 8"
        );
        assert!(decode_marker(&[0xFF]).unwrap());
    }
}
