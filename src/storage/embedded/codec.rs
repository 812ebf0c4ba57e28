//! Keys and values of the embedded store's three fjall keyspaces:
//!
//! - `meta`:    `<client>\0<name>` -> deduper config as JSON
//! - `pages`:   (earlier versions only, read once to migrate)
//!   `<client>\0<name>\0<shard u32 BE><page u32 BE>` -> 1,024-bit pages of
//!   stamps, u32 LE seconds each
//! - `journal`: `<seq u64 BE>` -> one write: `<client>\0<name>\0<stamp u32 LE>`
//!   then per touched shard `<shard u32 LE><count u32 LE><bit u32 LE>*count`
//!
//! Names never contain `\0` (deduper validation allows `[A-Za-z0-9_.-]`).

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

/// Encodes one write of `bits` (sorted) expiring at `stamp` ([`expire_seconds`]).
pub fn encode_write(deduper: &[u8], stamp: u32, bits: &[BitAddr]) -> Vec<u8> {
    let mut out = Vec::with_capacity(deduper.len() + 5 + bits.len() * 4 + 64);
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

pub fn decode_write(value: &[u8]) -> Result<Write<'_>, StorageError> {
    let bad = |why: &str| StorageError::Corrupt(format!("journal record: {why}"));
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
    let mut word = || -> Result<u32, StorageError> {
        let (w, r) = rest.split_first_chunk::<4>().ok_or_else(|| bad("truncated"))?;
        rest = r;
        Ok(u32::from_le_bytes(*w))
    };
    let stamp = word()?;
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
        let enc = encode_write(&key, 1_700_000_000, &bits);
        // 15 key bytes + \0 + stamp + (shard, count, 2 bits) + (shard, count, 1 bit)
        assert_eq!(enc.len(), 15 + 1 + 4 + 16 + 12);
        let w = decode_write(&enc).unwrap();
        assert_eq!(w.deduper, &key[..]);
        assert_eq!(w.stamp, 1_700_000_000);
        assert_eq!(w.bits, bits);
        assert!(decode_write(&enc[..enc.len() - 2]).is_err());
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
