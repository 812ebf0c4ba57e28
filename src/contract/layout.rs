//! HBase storage layout: row keys, qualifiers, cell values and table names.
//!
//! Row keys carry a one-byte hash prefix so that consecutive shards spread
//! over 256 regions: sematext HBaseWD `OneByteSimpleHash(256)`, i.e. Java's
//! `Arrays.hashCode(byte[])` over the key, `Math.abs(h) % 256` as one byte.

/// Column family of the data table.
pub const DATA_FAMILY: &str = "S";
/// Column family of the meta table.
pub const META_FAMILY: &str = "C";
/// Row-key prefix of a deduper's config row in the meta table.
pub const META_ROW_PREFIX: &str = "deDuperConfig";

/// The one-byte HBaseWD prefix of `key` (Java `Arrays.hashCode`, wrapping
/// `i32`, signed bytes; `Math.abs(i32::MIN)` stays negative as in Java, and
/// `%` truncates, so the cast keeps Java's `(byte)` result).
pub fn hash_prefix(key: &[u8]) -> u8 {
    let mut h: i32 = 1;
    for &b in key {
        h = h.wrapping_mul(31).wrapping_add(i32::from(b as i8));
    }
    (h.wrapping_abs() % 256) as u8
}

/// Prepends the hash prefix to `key`.
pub fn prefixed(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(hash_prefix(key));
    out.extend_from_slice(key);
    out
}

/// Data row key: `<prefix><shard>|<client_id>|<deduper>`, shard in decimal.
pub fn data_row_key(shard: u32, client_id: &str, deduper: &str) -> Vec<u8> {
    prefixed(format!("{shard}|{client_id}|{deduper}").as_bytes())
}

/// Guard row key of a deduper (Solus's own, not part of the shared
/// contract): `<prefix>solus#guard|<client_id>|<deduper>`, in the data
/// table beside the shard rows. Never a shard row: those have a decimal
/// shard right after the prefix. Holds the deduper's `AddIfAbsent` guard
/// cell (`storage/hbase/guard.rs`): a narrow row of its own, so a
/// `checkAndPut` of it does not read a wide shard row.
pub fn guard_row_key(client_id: &str, deduper: &str) -> Vec<u8> {
    prefixed(format!("solus#guard|{client_id}|{deduper}").as_bytes())
}

/// Meta row key: `<prefix>deDuperConfig|<client_id>|<name>`.
pub fn meta_row_key(client_id: &str, name: &str) -> Vec<u8> {
    prefixed(format!("{META_ROW_PREFIX}|{client_id}|{name}").as_bytes())
}

/// Qualifier of a bit's expiry cell: `<bit>#ttl`.
pub fn ttl_qualifier(bit: u32) -> String {
    format!("{bit}#ttl")
}

/// Qualifier of a bit's legacy boolean marker: `<bit>`.
pub fn legacy_qualifier(bit: u32) -> String {
    bit.to_string()
}

/// What a data-table qualifier names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qualifier {
    /// `<bit>#ttl`: holds the expiry time.
    Ttl(u32),
    /// `<bit>`: legacy boolean marker.
    Legacy(u32),
}

/// Parses a data-table qualifier; `None` for anything not in the contract.
pub fn parse_qualifier(q: &[u8]) -> Option<Qualifier> {
    let s = std::str::from_utf8(q).ok()?;
    let (digits, ttl) = match s.strip_suffix("#ttl") {
        Some(d) => (d, true),
        None => (s, false),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bit = digits.parse().ok()?;
    Some(if ttl {
        Qualifier::Ttl(bit)
    } else {
        Qualifier::Legacy(bit)
    })
}

/// `#ttl` cell value: expiry time in ms since the Unix epoch, 8-byte
/// big-endian two's complement (Java `Bytes.toBytes(long)`).
pub fn encode_expire_ms(expire_ms: i64) -> [u8; 8] {
    expire_ms.to_be_bytes()
}

/// Decodes a `#ttl` cell value; `None` unless exactly 8 bytes.
pub fn decode_expire_ms(value: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(value.try_into().ok()?))
}

/// Legacy marker value (Java `Bytes.toBytes(boolean)`): `0xFF` / `0x00`.
pub fn encode_legacy(set: bool) -> [u8; 1] {
    [if set { 0xFF } else { 0x00 }]
}

/// Decodes a legacy marker (Java `Bytes.toBoolean`): exactly one byte, any
/// non-zero byte is true; `None` for any other length.
pub fn decode_legacy(value: &[u8]) -> Option<bool> {
    match value {
        [b] => Some(*b != 0),
        _ => None,
    }
}

/// Data table of a deduper: `table` for global dedupers, `<table>_<farm>`
/// for datacenter-level ones.
pub fn data_table(table: &str, farm: &str, dc_level: bool) -> String {
    if dc_level {
        format!("{table}_{farm}")
    } else {
        table.to_string()
    }
}

/// Meta table holding one client's deduper configs: `<client_id>_dedupers`.
pub fn meta_table(client_id: &str) -> String {
    format!("{client_id}_dedupers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::test_vectors::{cases, encodings, hex};

    #[test]
    fn row_keys_and_qualifiers_match_reference_vectors() {
        for case in cases() {
            let shard = case["shard"].as_u64().unwrap() as u32;
            let key = data_row_key(
                shard,
                case["client_id"].as_str().unwrap(),
                case["deduper"].as_str().unwrap(),
            );
            assert_eq!(key, hex(&case["row_key_hex"]), "row key of shard {shard}");
            let bits = case["bits"].as_array().unwrap();
            for (bit, q) in bits.iter().zip(case["qualifiers"].as_array().unwrap()) {
                let bit = bit.as_u64().unwrap() as u32;
                assert_eq!(ttl_qualifier(bit), q.as_str().unwrap());
                assert_eq!(
                    parse_qualifier(q.as_str().unwrap().as_bytes()),
                    Some(Qualifier::Ttl(bit))
                );
            }
        }
    }

    #[test]
    fn hash_prefix_matches_hbasewd_examples() {
        // From the HBaseWD notes: "" -> 0x01, "a" -> 0x80, "0|client|dedup" -> 0xFA, [0xFF] -> 0x1E.
        assert_eq!(hash_prefix(b""), 0x01);
        assert_eq!(hash_prefix(b"a"), 0x80);
        assert_eq!(hash_prefix(b"0|client|dedup"), 0xFA);
        assert_eq!(hash_prefix(&[0xFF]), 0x1E);
    }

    #[test]
    fn cell_values_match_reference_encodings() {
        for e in encodings() {
            if let Some(ms) = e.get("expire_time_ms") {
                let ms = ms.as_i64().unwrap();
                let bytes = hex(&e["cell_value_hex"]);
                assert_eq!(encode_expire_ms(ms).to_vec(), bytes);
                assert_eq!(decode_expire_ms(&bytes), Some(ms));
            } else {
                assert_eq!(encode_legacy(true).to_vec(), hex(&e["legacy_true_hex"]));
                assert_eq!(encode_legacy(false).to_vec(), hex(&e["legacy_false_hex"]));
            }
        }
        assert_eq!(decode_legacy(&[0x01]), Some(true));
        assert_eq!(decode_legacy(&[0x00]), Some(false));
        assert_eq!(decode_legacy(&[]), None);
        assert_eq!(decode_expire_ms(&[0; 7]), None);
    }

    #[test]
    fn qualifier_parsing_rejects_foreign_columns() {
        assert_eq!(parse_qualifier(b"17"), Some(Qualifier::Legacy(17)));
        assert_eq!(parse_qualifier(b"17#ttl"), Some(Qualifier::Ttl(17)));
        for bad in [&b""[..], b"#ttl", b"a#ttl", b"-1", b"1 #ttl", b"99999999999"] {
            assert_eq!(parse_qualifier(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn table_names() {
        assert_eq!(data_table("solus_deduper", "dc1", false), "solus_deduper");
        assert_eq!(data_table("solus_deduper", "dc1", true), "solus_deduper_dc1");
        assert_eq!(meta_table("client-a"), "client-a_dedupers");
        let key = meta_row_key("c", "d");
        assert_eq!(&key[1..], b"deDuperConfig|c|d");
        assert_eq!(key[0], hash_prefix(b"deDuperConfig|c|d"));
    }

    #[test]
    fn the_guard_row_is_never_a_shard_row() {
        let key = guard_row_key("c", "d");
        assert_eq!(&key[1..], b"solus#guard|c|d");
        assert_eq!(key[0], hash_prefix(b"solus#guard|c|d"));
        // Shard rows have a decimal shard after the prefix, whatever the names.
        for shard in [0, 9, 4_294_967_295] {
            assert!(data_row_key(shard, "c", "d")[1].is_ascii_digit());
        }
        assert!(!key[1].is_ascii_digit());
    }
}
