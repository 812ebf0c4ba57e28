//! Keys and values of the embedded store's three fjall keyspaces:
//!
//! - `meta`:    `<client>\0<name>` -> deduper config as JSON
//! - `pages`:   (earlier versions only, read once to migrate)
//!   `<client>\0<name>\0<shard u32 BE><page u32 BE>` -> 1,024-bit pages of
//!   stamps, u32 LE seconds each
//! - `journal`: (earlier versions only, replayed once) `<seq u64 BE>` -> one
//!   write in the fixed form below
//!
//! A write (a record of our journal files, see `journal.rs`) in its compact
//! form: `0x01 <client>\0<name>\0<stamp u32 LE>` then per run of one shard
//! `<shard><count><bit>*count`, each a LEB128 varint as protobuf writes
//! them (a bit of a shard of up to 2^21 bits takes 3 bytes). Earlier
//! versions wrote the fixed form, `<client>\0<name>\0<stamp u32 LE>` then
//! per run `<shard u32 LE><count u32 LE><bit u32 LE>*count`, a third longer
//! at n = 5 x 10^7; both are read.
//!
//! Names never contain `\0` (deduper validation allows `[A-Za-z0-9_.-]`),
//! and a client id never begins with `0x01`: the first byte tells the forms
//! apart.

use integer_encoding::VarInt;

use crate::storage::{BitAddr, StorageError};

/// `<client>\0<name>`: identifies a deduper inside the store.
pub fn deduper_key(client_id: &str, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(client_id.len() + name.len() + 1);
    k.extend_from_slice(client_id.as_bytes());
    k.push(0);
    k.extend_from_slice(name.as_bytes());
    k
}

/// Prefix of all meta keys of one client.
pub fn client_prefix(client_id: &str) -> Vec<u8> {
    let mut k = client_id.as_bytes().to_vec();
    k.push(0);
    k
}

/// A legacy page key (tests write them to check the migration).
#[cfg(test)]
pub fn page_key(deduper: &[u8], shard: u32, page: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(deduper.len() + 9);
    k.extend_from_slice(deduper);
    k.push(0);
    k.extend_from_slice(&shard.to_be_bytes());
    k.extend_from_slice(&page.to_be_bytes());
    k
}

/// Splits a page key into (deduper key, shard, page).
pub fn parse_page_key(key: &[u8]) -> Result<(&[u8], u32, u32), StorageError> {
    let bad = || StorageError::Corrupt(format!("page key {key:x?}"));
    if key.len() < 10 || key[key.len() - 9] != 0 {
        return Err(bad());
    }
    let (deduper, rest) = key.split_at(key.len() - 9);
    let shard = u32::from_be_bytes(rest[1..5].try_into().map_err(|_| bad())?);
    let page = u32::from_be_bytes(rest[5..9].try_into().map_err(|_| bad())?);
    Ok((deduper, shard, page))
}

/// An expiry time in ms as the journal stores it: whole seconds since the
/// Unix epoch, rounded up (a bit may outlive its TTL by under a second,
/// never the reverse), at least 1.
pub fn expire_seconds(expire_ms: i64) -> u32 {
    let secs = expire_ms.max(1).div_euclid(1000) + i64::from(expire_ms.rem_euclid(1000) != 0);
    secs.clamp(1, i64::from(u32::MAX)) as u32
}

/// First byte of a write in the compact form (see the module docs).
const COMPACT: u8 = 0x01;

/// Encodes one write of `bits` (grouped by shard: one run per group)
/// expiring at `stamp` ([`expire_seconds`]), in the compact form.
pub fn encode_write(deduper: &[u8], stamp: u32, bits: &[BitAddr]) -> Vec<u8> {
    // Worst case: 5 bytes per bit, 10 per run header.
    let mut out = Vec::with_capacity(deduper.len() + 6 + bits.len() * 3 + 64);
    out.push(COMPACT);
    out.extend_from_slice(deduper);
    out.push(0);
    out.extend_from_slice(&stamp.to_le_bytes());
    let mut put = |v: u64| {
        let mut buf = [0u8; 10];
        let n = v.encode_var(&mut buf);
        out.extend_from_slice(&buf[..n]);
    };
    for run in bits.chunk_by(|a, b| a.shard == b.shard) {
        put(u64::from(run[0].shard));
        put(run.len() as u64);
        for a in run {
            put(u64::from(a.bit));
        }
    }
    out
}

/// [`encode_write`] in the fixed form earlier versions wrote.
#[cfg(test)]
pub fn encode_write_fixed(deduper: &[u8], stamp: u32, bits: &[BitAddr]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(deduper);
    out.push(0);
    out.extend_from_slice(&stamp.to_le_bytes());
    for run in bits.chunk_by(|a, b| a.shard == b.shard) {
        out.extend_from_slice(&run[0].shard.to_le_bytes());
        out.extend_from_slice(&(run.len() as u32).to_le_bytes());
        for a in run {
            out.extend_from_slice(&a.bit.to_le_bytes());
        }
    }
    out
}

/// A decoded journal record.
pub struct Write<'a> {
    pub deduper: &'a [u8],
    pub stamp: u32,
    pub bits: Vec<BitAddr>,
}

/// Decodes a write in either form (see the module docs). Errors:
/// `Corrupt` naming what does not parse.
pub fn decode_write(value: &[u8]) -> Result<Write<'_>, StorageError> {
    let bad = |why: &str| StorageError::Corrupt(format!("journal record: {why}"));
    let (compact, value) = match value.split_first() {
        Some((&COMPACT, rest)) => (true, rest),
        _ => (false, value),
    };
    // The deduper key holds exactly one \0; the second ends it.
    let first = value.iter().position(|&b| b == 0).ok_or_else(|| bad("no name"))?;
    let end = first
        + 1
        + value[first + 1..]
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad("no name end"))?;
    let deduper = &value[..end];
    let mut rest = &value[end + 1..];
    let (stamp, runs) = rest.split_first_chunk::<4>().ok_or_else(|| bad("truncated"))?;
    let stamp = u32::from_le_bytes(*stamp);
    if compact {
        return Ok(Write {
            deduper,
            stamp,
            bits: decode_compact_runs(runs)?,
        });
    }
    rest = runs;
    let mut word = || -> Result<u32, StorageError> {
        let (w, r) = rest.split_first_chunk::<4>().ok_or_else(|| bad("truncated"))?;
        rest = r;
        Ok(u32::from_le_bytes(*w))
    };
    let mut bits = Vec::new();
    while let Ok(shard) = word() {
        let count = word()?;
        for _ in 0..count {
            bits.push(BitAddr { shard, bit: word()? });
        }
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(Write { deduper, stamp, bits })
}

/// The runs of a compact write.
fn decode_compact_runs(mut rest: &[u8]) -> Result<Vec<BitAddr>, StorageError> {
    fn varint(rest: &mut &[u8], what: &str) -> Result<u32, StorageError> {
        let bad = |why: String| StorageError::Corrupt(format!("journal record: {why}"));
        let (v, n) = u64::decode_var(rest).ok_or_else(|| bad(format!("truncated {what}")))?;
        *rest = &rest[n..];
        u32::try_from(v).map_err(|_| bad(format!("{what} {v} out of range")))
    }
    // Sized by the bytes, not by a count read from them.
    let mut bits = Vec::with_capacity(rest.len() / 3);
    while !rest.is_empty() {
        let shard = varint(&mut rest, "shard")?;
        let count = varint(&mut rest, "count")?;
        for _ in 0..count {
            bits.push(BitAddr {
                shard,
                bit: varint(&mut rest, "bit")?,
            });
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_records_round_trip() {
        let key = deduper_key("client-a", "orders");
        let bits = vec![
            BitAddr { shard: 0, bit: 5 },
            BitAddr { shard: 0, bit: 9 },
            BitAddr { shard: 7, bit: 1 },
        ];
        let enc = encode_write_fixed(&key, 1_700_000_000, &bits);
        // 15 key bytes + \0 + stamp + (shard, count, 2 bits) + (shard, count, 1 bit)
        assert_eq!(enc.len(), 15 + 1 + 4 + 16 + 12);
        let w = decode_write(&enc).unwrap();
        assert_eq!(w.deduper, &key[..]);
        assert_eq!(w.stamp, 1_700_000_000);
        assert_eq!(w.bits, bits);
        assert!(decode_write(&enc[..enc.len() - 2]).is_err());
    }

    /// The compact form: one byte per varint under 128, three for bits up
    /// to 2^21, five for the largest; read back exactly, and a record cut
    /// inside a run is refused, not read short. (Cut where a run ends, it
    /// is a shorter record, as in the fixed form: the journal's frame
    /// checksum catches those.)
    #[test]
    fn compact_write_records_round_trip() {
        let key = deduper_key("client-a", "orders");
        let bits = vec![
            BitAddr { shard: 0, bit: 5 },
            BitAddr {
                shard: 0,
                bit: 1_048_575,
            },
            BitAddr {
                shard: 300,
                bit: 2_097_151,
            },
            BitAddr {
                shard: u32::MAX,
                bit: u32::MAX,
            },
        ];
        let enc = encode_write(&key, 1_700_000_000, &bits);
        // 0x01 + 15 key bytes + \0 + stamp, then (shard 1, count 1, 1 + 3)
        // + (shard 2, count 1, 3) + (shard 5, count 1, 5).
        assert_eq!(enc.len(), 1 + 15 + 1 + 4 + (1 + 1 + 1 + 3) + (2 + 1 + 3) + (5 + 1 + 5));
        assert_eq!(enc[0], 0x01);
        let w = decode_write(&enc).unwrap();
        assert_eq!(w.deduper, &key[..]);
        assert_eq!(w.stamp, 1_700_000_000);
        assert_eq!(w.bits, bits);
        for cut in (22..enc.len()).filter(|c| ![27, 33].contains(c)) {
            if let Ok(w) = decode_write(&enc[..cut]) {
                panic!("a record cut at {cut} of {} read as {:?}", enc.len(), w.bits);
            }
        }
        // A count past the bytes left allocates nothing and is refused.
        let mut huge = enc[..21].to_vec();
        huge.extend_from_slice(&[0x00, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(decode_write(&huge).is_err());
    }

    /// At n = 5 x 10^7 (shards of about 10^6 bits, k = 7), an entity's run
    /// takes 3 bytes per bit where the fixed form took 4, and its header 3
    /// where it took 8.
    #[test]
    fn compact_records_are_shorter_at_a_large_deduper() {
        let key = deduper_key("c", "d");
        let bits: Vec<BitAddr> = (0..1_000u32)
            .flat_map(|e| {
                (0..7).map(move |j| BitAddr {
                    shard: e % 479 + 1,
                    bit: 600_000 + e * 7 + j,
                })
            })
            .collect();
        let mut grouped = bits.clone();
        grouped.sort_by_key(|a| a.shard);
        let (compact, fixed) = (encode_write(&key, 1, &grouped), encode_write_fixed(&key, 1, &grouped));
        assert_eq!(decode_write(&compact).unwrap().bits, grouped);
        assert_eq!(decode_write(&fixed).unwrap().bits, grouped);
        // 479 runs (shards 1..479): 7,000 bits of 3 bytes; headers of 2-3 bytes.
        let (key_and_stamp, runs) = (key.len() + 1 + 4, 479);
        assert_eq!(fixed.len(), key_and_stamp + runs * 8 + 7_000 * 4);
        let shard_bytes = 127 + (runs - 127) * 2; // shards 1..=127 take one byte
        assert_eq!(compact.len(), 1 + key_and_stamp + shard_bytes + runs + 7_000 * 3);
    }

    #[test]
    fn journal_expiries_round_up_to_whole_seconds() {
        assert_eq!(expire_seconds(1_764_460_800_000), 1_764_460_800);
        assert_eq!(expire_seconds(1_764_460_800_001), 1_764_460_801);
        assert_eq!(expire_seconds(999), 1);
        assert_eq!(expire_seconds(0), 1);
    }

    #[test]
    fn page_keys_round_trip() {
        let key = deduper_key("c", "d");
        let pk = page_key(&key, 70_000, 3);
        assert_eq!(parse_page_key(&pk).unwrap(), (&key[..], 70_000, 3));
        assert!(parse_page_key(b"short").is_err());
    }
}
