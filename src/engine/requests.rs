//! Records of requests sent with a `request_id`: what the first attempt
//! answered, written to storage before its bits, so that a retry (on any
//! replica, within `limits.request_id_window_seconds`) answers the same and
//! completes the writes.
//!
//! Encoding, version 1: `1`, kind (`0` Add, `1` AddIfAbsent), SHA-256 of the
//! request (32 bytes), expiry time of its bits (8 bytes BE, ms since the
//! Unix epoch), entity count (4 bytes BE), then for AddIfAbsent one bit per
//! entity, `absent`, LSB first: `46 + ceil(n / 8)` bytes.

use sha2::{Digest, Sha256};

use super::EngineError;
use crate::storage::StorageError;

/// Longest `request_id`, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// Bytes of a record before its answer bits.
pub const HEADER_BYTES: usize = 46;

/// The RPC a record answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Add = 0,
    AddIfAbsent = 1,
}

/// One remembered answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub digest: [u8; 32],
    /// Expiry time of the request's bits, ms since the Unix epoch.
    pub expire_ms: i64,
    pub count: u32,
    /// AddIfAbsent: `absent` per entity; empty for Add.
    pub absent: Vec<bool>,
}

/// SHA-256 over `ttl_ms` and the length-prefixed entities: two attempts of
/// one request have the same digest, and a different request almost never.
pub fn digest(ttl_ms: u64, entities: &[impl AsRef<[u8]>]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(ttl_ms.to_be_bytes());
    h.update((entities.len() as u64).to_be_bytes());
    for e in entities {
        let e = e.as_ref();
        h.update((e.len() as u64).to_be_bytes());
        h.update(e);
    }
    h.finalize().into()
}

/// The `request_id` a request really carries: an empty one is none. The
/// field is `optional bytes`, and JSON gateways and some clients send ""
/// for "not set"; taken as an id it would be one key shared by every
/// caller, so unrelated requests would be refused as reuses of it.
pub fn given_id(id: Option<Vec<u8>>) -> Option<Vec<u8>> {
    id.filter(|id| !id.is_empty())
}

/// Checks a `request_id`: at most [`MAX_REQUEST_ID_BYTES`].
pub fn validate_id(id: &[u8]) -> Result<(), EngineError> {
    if id.len() > MAX_REQUEST_ID_BYTES {
        return Err(EngineError::Invalid(format!(
            "request_id is {} bytes; at most {MAX_REQUEST_ID_BYTES} are allowed",
            id.len()
        )));
    }
    Ok(())
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES + self.absent.len().div_ceil(8));
        out.push(1);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.digest);
        out.extend_from_slice(&self.expire_ms.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        let mut bits = vec![0u8; self.absent.len().div_ceil(8)];
        for (i, &a) in self.absent.iter().enumerate() {
            bits[i / 8] |= u8::from(a) << (i % 8);
        }
        out.extend_from_slice(&bits);
        out
    }

    /// Errors: `Corrupt` when the bytes are not a version-1 record.
    pub fn decode(bytes: &[u8]) -> Result<Record, StorageError> {
        let bad = || StorageError::Corrupt(format!("request record of {} bytes", bytes.len()));
        if bytes.len() < HEADER_BYTES || bytes[0] != 1 {
            return Err(bad());
        }
        let kind = match bytes[1] {
            0 => Kind::Add,
            1 => Kind::AddIfAbsent,
            _ => return Err(bad()),
        };
        let digest: [u8; 32] = bytes[2..34].try_into().map_err(|_| bad())?;
        let expire_ms = i64::from_be_bytes(bytes[34..42].try_into().map_err(|_| bad())?);
        let count = u32::from_be_bytes(bytes[42..46].try_into().map_err(|_| bad())?);
        let absent = match kind {
            Kind::Add => Vec::new(),
            Kind::AddIfAbsent => {
                let bits = &bytes[HEADER_BYTES..];
                if bits.len() != (count as usize).div_ceil(8) {
                    return Err(bad());
                }
                (0..count as usize).map(|i| bits[i / 8] >> (i % 8) & 1 == 1).collect()
            }
        };
        Ok(Record {
            kind,
            digest,
            expire_ms,
            count,
            absent,
        })
    }

    /// Checks that a retry is the same request as the recorded one:
    /// `INVALID_ARGUMENT` otherwise.
    pub fn check_same(&self, kind: Kind, digest: &[u8; 32]) -> Result<(), EngineError> {
        if self.kind != kind {
            return Err(EngineError::Invalid(format!(
                "request_id was first used for {:?}, not {kind:?}; use a new request_id for a new request",
                self.kind
            )));
        }
        if &self.digest != digest {
            return Err(EngineError::Invalid(
                "request_id was first used with different entities or ttl_ms; a retry must repeat the request \
                 exactly, a new request needs a new request_id"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_take_46_bytes_plus_a_bit_per_entity() {
        let absent: Vec<bool> = (0..10_000).map(|i| i % 3 == 0).collect();
        let r = Record {
            kind: Kind::AddIfAbsent,
            digest: digest(0, &[b"a"]),
            expire_ms: 1_700_000_000_000,
            count: 10_000,
            absent,
        };
        let bytes = r.encode();
        assert_eq!(bytes.len(), HEADER_BYTES + 1250);
        assert_eq!(Record::decode(&bytes).unwrap(), r);
        let add = Record {
            kind: Kind::Add,
            absent: Vec::new(),
            ..r.clone()
        };
        assert_eq!(add.encode().len(), HEADER_BYTES);
        assert_eq!(Record::decode(&add.encode()).unwrap(), add);
        assert!(Record::decode(&bytes[..40]).is_err());
    }

    #[test]
    fn digests_tell_requests_apart() {
        assert_eq!(digest(0, &[b"a", b"b"]), digest(0, &[b"a", b"b"]));
        assert_ne!(digest(0, &[b"a", b"b"]), digest(0, &[b"ab"]));
        assert_ne!(digest(0, &[b"a"]), digest(1, &[b"a"]));
        let r = Record {
            kind: Kind::Add,
            digest: digest(0, &[b"a"]),
            expire_ms: 0,
            count: 1,
            absent: Vec::new(),
        };
        assert!(r.check_same(Kind::Add, &digest(0, &[b"a"])).is_ok());
        assert!(r.check_same(Kind::Add, &digest(0, &[b"b"])).is_err());
        assert!(r.check_same(Kind::AddIfAbsent, &digest(0, &[b"a"])).is_err());
    }
}
