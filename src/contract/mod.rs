//! The byte-exact contract shared with other Solus clients and with existing
//! HBase data: how an entity maps to a shard and bit positions, how rows,
//! qualifiers and cell values are encoded, and how a deduper is sized.
//!
//! Nothing here does I/O; every function is checked against the reference
//! vectors in `tests/data/test-vectors.json` (an independent implementation;
//! a copy of `../shared/test-vectors.json`, checked equal when that exists).

pub mod hashing;
pub mod layout;
pub mod sizing;

/// Largest `bits_per_shard`: bit positions are Java `int`s in the contract.
pub const MAX_BITS_PER_SHARD: u32 = i32::MAX as u32;
/// Largest `k`: at most 16 salted MD5 digests per entity.
pub const MAX_HASH_FUNCTIONS: u32 = 64;

#[cfg(test)]
pub(crate) mod test_vectors {
    //! Loads `tests/data/test-vectors.json`, produced by an independent
    //! implementation of the contract (the repository's copy of
    //! `../shared/test-vectors.json`, so the tests need nothing beside the clone).
    use serde_json::Value;

    /// The vectors travel with the repository.
    pub const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/test-vectors.json");

    fn load() -> Value {
        let text = std::fs::read_to_string(PATH).unwrap_or_else(|e| panic!("reading {PATH}: {e}"));
        serde_json::from_str(&text).expect("test-vectors.json is valid JSON")
    }

    pub fn cases() -> Vec<Value> {
        load()["cases"].as_array().unwrap().clone()
    }
    pub fn encodings() -> Vec<Value> {
        load()["encodings"].as_array().unwrap().clone()
    }
    pub fn sizing_cases() -> Vec<Value> {
        load()["sizing"].as_array().unwrap().clone()
    }
    pub fn hex(v: &Value) -> Vec<u8> {
        let s = v.as_str().unwrap();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }
}
