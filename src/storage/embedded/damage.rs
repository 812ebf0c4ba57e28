//! What start-up does about a damaged journal (see `journal.rs`): refuse
//! with a message naming the damage and the setting to start anyway, or,
//! started anyway, log each damaged region and export the records lost.

use std::path::{Path, PathBuf};

use super::journal::Damage;
use crate::storage::StorageError;

/// The setting that starts the store despite damage.
pub const SETTING: &str = "storage.embedded.start_with_damaged_journal";

fn records(d: &Damage) -> String {
    if d.exact {
        format!("{} record(s)", d.records)
    } else {
        format!("at least {} record(s)", d.records)
    }
}

/// Records lost in `damage`, counting lower bounds as such.
pub fn lost(damage: &[Damage]) -> u64 {
    damage.iter().map(|d| d.records).sum()
}

/// The refusal to start: every damaged region, what it means, and what to
/// do (`Corrupt`, so the server exits with it).
pub fn refusal(damage: &[Damage]) -> StorageError {
    let regions: Vec<String> = damage
        .iter()
        .map(|d| {
            format!(
                "{} at byte offset {}: {} ({} bytes) unreadable",
                d.file.display(),
                d.offset,
                records(d),
                d.bytes
            )
        })
        .collect();
    StorageError::Corrupt(format!(
        "the journal holds damaged records with valid ones after them - damage to acknowledged writes (bit rot, \
         a bad block), not a torn write: {}. Restore the file from a backup if you have one; or start anyway with \
         {SETTING} = true (SOLUS__STORAGE__EMBEDDED__START_WITH_DAMAGED_JOURNAL=true): every readable record is \
         replayed, the damaged file is kept as <file>.damaged, and the {} record(s) are lost (their entities answer \
         absent until added again); see docs/operations.md",
        regions.join("; "),
        lost(damage)
    ))
}

/// Started anyway: logs each region (file, offset, bytes, records, where
/// the file was kept), sets `solus_journal_unreadable_records`, and returns
/// the records lost.
pub fn report(damage: &[Damage]) -> u64 {
    for d in damage {
        tracing::error!(
            file = %d.file.display(),
            kept_as = %d.kept_as.as_ref().map_or("-".into(), |p| p.display().to_string()),
            offset = d.offset,
            bytes = d.bytes,
            records = d.records,
            exact = d.exact,
            "journal damage: acknowledged records could not be read and are lost (started with {SETTING})"
        );
    }
    let lost = lost(damage);
    crate::metrics::set_journal_unreadable_records(lost);
    lost
}

/// The damaged journal files kept in `dir` (`*.log.damaged*`), sorted.
pub fn kept_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".log.damaged"))
        })
        .collect();
    out.sort();
    out
}

/// The health sentence for `kept` files and `lost` records; `None` when
/// nothing is kept.
pub fn describe(kept: &[PathBuf], lost: u64) -> Option<String> {
    if kept.is_empty() {
        return None;
    }
    let names: Vec<String> = kept.iter().map(|p| p.display().to_string()).collect();
    Some(format!(
        "damaged journal file(s) kept aside: {}; {lost} record(s) could not be read at this start-up; archive or \
         remove the file(s) once examined (docs/operations.md)",
        names.join(", ")
    ))
}
