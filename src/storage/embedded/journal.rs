//! The write journal: append-only files `<path>/journal/<generation>.log`
//! of framed records, one per write request, appended before the request's
//! bits are raised.
//!
//! A checkpoint starts a new generation (writers move to a new file), saves
//! the pages, then deletes the older files whole: disk holds only what
//! arrived since the last checkpoint, and nothing needs compacting.
//!
//! Frame: `<len u32 LE><crc32 u32 LE of the payload><payload>`. A record
//! is appended with one positioned write at the end of the valid data; a
//! failed write (a full disk) does not move the end, so the next record
//! overwrites its remains. Reading stops at the first frame that is short
//! or fails its checksum: only a write that was never acknowledged can be
//! there.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const FRAME_HEADER: usize = 8;

struct Current {
    generation: u64,
    file: File,
    /// End of the valid frames.
    len: u64,
}

/// The open journal; see the module docs.
pub struct Journal {
    dir: PathBuf,
    fsync: bool,
    current: Mutex<Current>,
}

fn file_of(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("{generation:016}.log"))
}

/// Generations present in `dir`, ascending.
fn generations(dir: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        if let Some(g) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse().ok())
        {
            out.push(g);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn open_new(dir: &Path, generation: u64) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(file_of(dir, generation))
}

impl Journal {
    /// Opens the journal under `dir` (created when missing), passing every
    /// record already there, oldest first, to `replay`; new records go to
    /// a new generation. Errors: the I/O error.
    pub fn open(dir: &Path, fsync: bool, mut replay: impl FnMut(&[u8])) -> io::Result<Journal> {
        std::fs::create_dir_all(dir)?;
        let existing = generations(dir)?;
        for &g in &existing {
            read_records(&file_of(dir, g), &mut replay)?;
        }
        let generation = existing.last().map_or(0, |g| g + 1);
        let file = open_new(dir, generation)?;
        if fsync {
            File::open(dir)?.sync_all()?;
        }
        Ok(Journal {
            dir: dir.to_path_buf(),
            fsync,
            current: Mutex::new(Current {
                generation,
                file,
                len: 0,
            }),
        })
    }

    /// Appends one record; with `fsync`, `fdatasync`s it before returning.
    /// Errors: the I/O error (the record then counts as never written).
    pub fn append(&self, payload: &[u8]) -> io::Result<()> {
        let mut frame = Vec::with_capacity(FRAME_HEADER + payload.len());
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        frame.extend_from_slice(payload);
        let mut c = self.current.lock().unwrap_or_else(|p| p.into_inner());
        c.file.write_all_at(&frame, c.len)?;
        if self.fsync
            && let Err(e) = c.file.sync_data()
        {
            // Best effort: unmark the frame so a restart does not replay a
            // write its client was told failed.
            let _ = c.file.write_all_at(&[0; FRAME_HEADER], c.len);
            return Err(e);
        }
        c.len += frame.len() as u64;
        Ok(())
    }

    /// Moves writers to a new generation; returns the first generation that
    /// must stay (pass it to [`Journal::drop_before`] once the pages are
    /// saved). Errors: the I/O error (writers stay where they were).
    pub fn switch(&self) -> io::Result<u64> {
        let mut c = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let next = c.generation + 1;
        let file = open_new(&self.dir, next)?;
        *c = Current {
            generation: next,
            file,
            len: 0,
        };
        Ok(next)
    }

    /// Deletes every generation below `keep`. Errors: the I/O error.
    pub fn drop_before(&self, keep: u64) -> io::Result<()> {
        for g in generations(&self.dir)? {
            if g < keep {
                match std::fs::remove_file(file_of(&self.dir, g)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }
}

/// Passes every valid record of one journal file to `each`.
fn read_records(path: &Path, each: &mut impl FnMut(&[u8])) -> io::Result<()> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut rest = &bytes[..];
    while rest.len() >= FRAME_HEADER {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        let Some(payload) = rest.get(FRAME_HEADER..FRAME_HEADER + len) else {
            break;
        };
        if len == 0 || crc32fast::hash(payload) != crc {
            break;
        }
        each(payload);
        rest = &rest[FRAME_HEADER + len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replayed(dir: &Path) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        Journal::open(dir, false, |r| out.push(r.to_vec())).unwrap();
        out
    }

    #[test]
    fn records_replay_in_order_across_generations_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), true, |_| panic!("empty")).unwrap();
        j.append(b"one").unwrap();
        let keep = j.switch().unwrap();
        j.append(b"two").unwrap();
        drop(j);
        assert_eq!(replayed(dir.path()), vec![b"one".to_vec(), b"two".to_vec()]);
        let j = Journal::open(dir.path(), false, |_| {}).unwrap();
        j.drop_before(keep).unwrap();
        j.append(b"three").unwrap();
        drop(j);
        assert_eq!(replayed(dir.path()), vec![b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn a_torn_tail_ends_the_replay_and_later_appends_overwrite_it() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), false, |_| {}).unwrap();
        j.append(b"kept").unwrap();
        let path = file_of(dir.path(), 0);
        // A write that failed half way: a frame header and part of a payload.
        let c = j.current.lock().unwrap();
        c.file.write_all_at(&[200, 0, 0, 0, 1, 2, 3, 4, 9, 9], c.len).unwrap();
        drop(c);
        drop(j);
        assert_eq!(replayed(dir.path()), vec![b"kept".to_vec()]);
        // The reopen started generation 1; generation 0 keeps its tail.
        assert!(path.exists());
        let mut bytes = Vec::new();
        let mut out = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut bytes).unwrap();
        read_records(&path, &mut |r: &[u8]| out.push(r.to_vec())).unwrap();
        assert_eq!(out, vec![b"kept".to_vec()]);
    }
}
