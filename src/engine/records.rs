//! Per-record identity (`record_ids` on `AddIfAbsent` and `CheckAbsence`):
//! a record id whose entity was answered `absent` is remembered, before the
//! entity's bits are written, for `limits.record_id_window_seconds`; when the
//! same record id comes back with the same entity - in any request, batch or
//! replica - it is answered `absent` again, and (by `AddIfAbsent`) remembered
//! for another window from then, so the window bounds the time between two
//! attempts of a record, not between its first and its last. That is what a stream processor
//! needs for a replay (a Kafka offset re-read after a task close, a Flink
//! element replayed from a checkpoint): the replayed record's own earlier
//! attempt set its bits, and without its id it would read `present` and be
//! dropped as a duplicate of itself.
//!
//! Only `absent` answers are remembered: a `present` answer stays present on
//! a replay by itself (bits only rise until they expire). A replay is
//! recognised by the id *and* the entity's fingerprint, so an id reused for
//! another entity is a new record, remembered beside the first: a client
//! whose ids collide (a Kafka offset without its partition) loses no
//! record's replay to the other's.
//!
//! Ordering, so that no replay can miss its memory: the record is durable
//! before the bits are written, and a request reads the records of the
//! entities it found present *after* reading their bits. An attempt that
//! sees another attempt's bits therefore also sees that attempt's record.

use super::EngineError;
use crate::storage::{RecordFingerprint, StorageError};

/// Longest record id, in bytes.
pub const MAX_RECORD_ID_BYTES: usize = 128;

/// Seed of the entity fingerprint (`murmur3_x64_128`, low 64 bits): any
/// fixed value; this one spells "RECO".
const FINGERPRINT_SEED: u32 = 0x5245_434f;

/// The 64-bit fingerprint of an entity that a remembered record holds.
pub fn fingerprint(entity: &[u8]) -> RecordFingerprint {
    crate::contract::hashing::murmur3_x64_128_seeded(entity, FINGERPRINT_SEED) as u64
}

/// Checks `record_ids` against `entities` entities: none, or exactly one
/// per entity, each at most [`MAX_RECORD_ID_BYTES`] (an empty id means "no
/// id for this entity"). Errors: `Invalid`, naming the rule.
pub fn validate(record_ids: &[impl AsRef<[u8]>], entities: usize) -> Result<(), EngineError> {
    if record_ids.is_empty() {
        return Ok(());
    }
    if record_ids.len() != entities {
        return Err(EngineError::Invalid(format!(
            "{} record_ids for {entities} entities; send none, or exactly one per entity (an empty one for an \
             entity without an id)",
            record_ids.len()
        )));
    }
    if let Some((i, id)) = record_ids
        .iter()
        .enumerate()
        .find(|(_, id)| id.as_ref().len() > MAX_RECORD_ID_BYTES)
    {
        return Err(EngineError::Invalid(format!(
            "record_ids #{i} is {} bytes; at most {MAX_RECORD_ID_BYTES} are allowed",
            id.as_ref().len()
        )));
    }
    Ok(())
}

/// The entities (by index) of a request that carry a record id.
pub fn with_ids(record_ids: &[impl AsRef<[u8]>]) -> Vec<usize> {
    (0..record_ids.len())
        .filter(|&i| !record_ids[i].as_ref().is_empty())
        .collect()
}

/// Turns `absent` (from the bits) into the answer a replay must get: an
/// entity read present whose record id was remembered with its fingerprint
/// is absent again. `recall(records)` says which `(id, fingerprint)` pairs
/// are remembered. Returns how many answers it changed.
pub fn apply_replays<E: AsRef<[u8]>, R: AsRef<[u8]>>(
    entities: &[E],
    record_ids: &[R],
    absent: &mut [bool],
    recall: impl FnOnce(&[(&[u8], RecordFingerprint)]) -> Result<Vec<bool>, StorageError>,
) -> Result<usize, StorageError> {
    let present: Vec<usize> = with_ids(record_ids).into_iter().filter(|&i| !absent[i]).collect();
    if present.is_empty() {
        return Ok(0);
    }
    let asked: Vec<(&[u8], RecordFingerprint)> = present
        .iter()
        .map(|&i| (record_ids[i].as_ref(), fingerprint(entities[i].as_ref())))
        .collect();
    let remembered = recall(&asked)?;
    if remembered.len() != asked.len() {
        return Err(StorageError::Corrupt(format!(
            "storage answered {} records for {} record ids",
            remembered.len(),
            asked.len()
        )));
    }
    let mut replays = 0;
    for (&i, known) in present.iter().zip(remembered) {
        if known {
            absent[i] = true;
            replays += 1;
        }
    }
    Ok(replays)
}

/// The records to remember for an answer: `(record id, fingerprint)` of
/// every entity with an id answered absent.
pub fn first_occurrences<'a, E: AsRef<[u8]>, R: AsRef<[u8]>>(
    entities: &[E],
    record_ids: &'a [R],
    absent: &[bool],
) -> Vec<(&'a [u8], RecordFingerprint)> {
    with_ids(record_ids)
        .into_iter()
        .filter(|&i| absent[i])
        .map(|i| (record_ids[i].as_ref(), fingerprint(entities[i].as_ref())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_rule() {
        let none: [&[u8]; 0] = [];
        assert!(validate(&none, 3).is_ok());
        assert!(validate(&[b"a".as_slice(), b"", b"c"], 3).is_ok());
        let e = validate(&[b"a".as_slice()], 2).unwrap_err().to_string();
        assert!(e.contains("1 record_ids for 2 entities"), "{e}");
        let long = vec![7u8; 129];
        let e = validate(&[b"a".to_vec(), long], 2).unwrap_err().to_string();
        assert!(e.contains("record_ids #1 is 129 bytes"), "{e}");
    }

    #[test]
    fn replays_need_the_same_entity_and_only_present_answers_are_looked_up() {
        let entities = [b"x".as_slice(), b"y", b"z", b"w"];
        let ids = [b"1".as_slice(), b"2", b"", b"4"];
        let mut absent = [false, false, false, true];
        let mut asked = Vec::new();
        let changed = apply_replays(&entities, &ids, &mut absent, |records| {
            asked = records.iter().map(|(i, fp)| (i.to_vec(), *fp)).collect();
            // "1" remembered for x (a replay), "2" only for another entity.
            Ok(records
                .iter()
                .map(|r| *r == (b"1".as_slice(), fingerprint(b"x")))
                .collect())
        })
        .unwrap();
        assert_eq!(
            asked,
            vec![(b"1".to_vec(), fingerprint(b"x")), (b"2".to_vec(), fingerprint(b"y"))]
        );
        assert_eq!(changed, 1);
        assert_eq!(absent, [true, false, false, true]);
        let firsts = first_occurrences(&entities, &ids, &absent);
        assert_eq!(
            firsts,
            vec![
                (b"1".as_slice(), fingerprint(b"x")),
                (b"4".as_slice(), fingerprint(b"w"))
            ]
        );
    }

    #[test]
    fn fingerprints_differ_between_entities() {
        assert_eq!(fingerprint(b"abc"), fingerprint(b"abc"));
        assert_ne!(fingerprint(b"abc"), fingerprint(b"abd"));
    }
}
