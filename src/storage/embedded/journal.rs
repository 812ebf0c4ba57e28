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
//! overwrites its remains.
//!
//! Reading: a frame that is short or fails its checksum with no valid frame
//! after it is a torn tail - only a write that was never acknowledged can be
//! there - and ends the file. One with valid frames after it is *damage*
//! (bit rot, a bad block) to acknowledged records: the reader skips to the
//! next valid frame (found byte by byte), replays everything after it, and
//! reports the region ([`Damage`]: file, offset, bytes and records lost).
//! [`Journal::open`] then refuses ([`OpenError::Damaged`]) unless allowed;
//! allowed, it copies the readable records of a damaged file into the new
//! generation (so they stay durable until the next checkpoint) and renames
//! the file aside to `<generation>.log.damaged`, which no checkpoint deletes.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

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
    /// Tests: every append's write takes this much longer (ms).
    #[cfg(test)]
    pub stall_ms: std::sync::atomic::AtomicU64,
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

/// A damaged region of a journal file (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The journal file as found.
    pub file: PathBuf,
    /// Where it was renamed aside to, when the store started anyway.
    pub kept_as: Option<PathBuf>,
    /// Byte offset of the first unreadable frame.
    pub offset: u64,
    /// Unreadable bytes, up to the next valid frame.
    pub bytes: u64,
    /// Records lost: exact when `exact` (the frame lengths in the region
    /// still chain to the next valid frame), else a lower bound of 1.
    pub records: u64,
    pub exact: bool,
}

/// Why [`Journal::open`] failed.
#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    /// Damage was found and not allowed: nothing was changed on disk.
    Damaged(Vec<Damage>),
}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// `payload` framed: length, checksum, payload.
pub(super) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEADER + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    frame.extend_from_slice(payload);
    frame
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
    /// readable record already there, oldest first, to `replay`; new
    /// records go to a new generation. Damage (see the module docs) is
    /// returned with the journal when `allow_damage`, each file's readable
    /// records then copied forward and the file renamed aside. Errors:
    /// `Io`; `Damaged` when damage was found and not allowed (the files are
    /// left as they were).
    pub fn open(
        dir: &Path,
        fsync: bool,
        allow_damage: bool,
        mut replay: impl FnMut(&[u8]),
    ) -> Result<(Journal, Vec<Damage>), OpenError> {
        std::fs::create_dir_all(dir)?;
        let existing = generations(dir)?;
        let mut damage = Vec::new();
        // Readable records of damaged files, to copy forward.
        let mut salvaged: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
        for &g in &existing {
            let path = file_of(dir, g);
            let mut records = Vec::new();
            let found = read_records(&path, &mut |r: &[u8]| {
                replay(r);
                records.push(r.to_vec());
            })?;
            if !found.is_empty() {
                damage.extend(found.into_iter().map(|(offset, bytes, records, exact)| Damage {
                    file: path.clone(),
                    kept_as: None,
                    offset,
                    bytes,
                    records,
                    exact,
                }));
                salvaged.push((g, records));
            }
        }
        if !damage.is_empty() && !allow_damage {
            return Err(OpenError::Damaged(damage));
        }
        let generation = existing.last().map_or(0, |g| g + 1);
        let file = open_new(dir, generation)?;
        let journal = Journal {
            dir: dir.to_path_buf(),
            fsync,
            current: Mutex::new(Current {
                generation,
                file,
                len: 0,
            }),
            #[cfg(test)]
            stall_ms: std::sync::atomic::AtomicU64::new(0),
        };
        if !salvaged.is_empty() {
            for record in salvaged.iter().flat_map(|(_, r)| r) {
                journal.append(record)?;
            }
            journal
                .current
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .file
                .sync_data()?;
            for (g, _) in &salvaged {
                let aside = aside_path(dir, *g);
                std::fs::rename(file_of(dir, *g), &aside)?;
                for d in damage.iter_mut().filter(|d| d.file == file_of(dir, *g)) {
                    d.kept_as = Some(aside.clone());
                }
            }
        }
        if fsync || !salvaged.is_empty() {
            File::open(dir)?.sync_all()?;
        }
        Ok((journal, damage))
    }

    /// Appends one record; with `fsync`, `fdatasync`s it before returning.
    /// Returns how long the write itself took (not the wait for the file).
    /// Errors: the I/O error (the record then counts as never written).
    pub fn append(&self, payload: &[u8]) -> io::Result<Duration> {
        let frame = frame(payload);
        let c = self.current.lock().unwrap_or_else(|p| p.into_inner());
        self.append_locked(c, &frame)
    }

    /// [`Journal::append`] unless another append (or a switch) holds the
    /// file: then `None`, and nothing was written.
    pub fn try_append(&self, payload: &[u8]) -> Option<io::Result<Duration>> {
        let frame = frame(payload);
        let c = match self.current.try_lock() {
            Ok(c) => c,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(self.append_locked(c, &frame))
    }

    fn append_locked(&self, mut c: MutexGuard<'_, Current>, frame: &[u8]) -> io::Result<Duration> {
        let started = Instant::now();
        c.file.write_all_at(frame, c.len)?;
        #[cfg(test)]
        std::thread::sleep(Duration::from_millis(
            self.stall_ms.load(std::sync::atomic::Ordering::Relaxed),
        ));
        if self.fsync
            && let Err(e) = c.file.sync_data()
        {
            // Best effort: unmark the frame so a restart does not replay a
            // write its client was told failed.
            let _ = c.file.write_all_at(&[0; FRAME_HEADER], c.len);
            return Err(e);
        }
        c.len += frame.len() as u64;
        Ok(started.elapsed())
    }

    /// Holds the file as an append does (tests: another write appending).
    #[cfg(test)]
    pub fn hold(&self) -> MutexGuard<'_, impl Sized> {
        self.current.lock().unwrap()
    }

    /// End of the valid frames of the current file, in bytes (tests).
    #[cfg(test)]
    pub fn end(&self) -> u64 {
        self.current.lock().unwrap().len
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

/// `<generation>.log.damaged` (with `.<n>` when taken): outside
/// [`generations`], so never replayed again nor deleted.
fn aside_path(dir: &Path, generation: u64) -> PathBuf {
    let base = dir.join(format!("{generation:016}.log.damaged"));
    (1..)
        .map(|n| {
            if n == 1 {
                base.clone()
            } else {
                base.with_extension(format!("damaged.{n}"))
            }
        })
        .find(|p| !p.exists())
        .expect("a free name")
}

/// The payload of the valid frame at `at`, if one starts there.
fn frame_at(bytes: &[u8], at: usize) -> Option<&[u8]> {
    let header = bytes.get(at..at + FRAME_HEADER)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let payload = bytes.get(at + FRAME_HEADER..(at + FRAME_HEADER).checked_add(len)?)?;
    (len > 0 && crc32fast::hash(payload) == crc).then_some(payload)
}

/// Records in `bytes[from..to]` by their length fields, when they chain
/// exactly to `to` (only the payload of a frame was damaged).
fn chained_records(bytes: &[u8], from: usize, to: usize) -> Option<u64> {
    let (mut at, mut n) = (from, 0u64);
    while at < to {
        let header = bytes.get(at..at + FRAME_HEADER)?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        at = at.checked_add(FRAME_HEADER + len)?;
        n += 1;
    }
    (at == to).then_some(n)
}

/// Passes every valid record of one journal file to `each`, skipping
/// damaged regions; returns them as `(offset, bytes, records, exact)`
/// (empty for a clean file or one with only a torn tail).
fn read_records(path: &Path, each: &mut impl FnMut(&[u8])) -> io::Result<Vec<(u64, u64, u64, bool)>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut damage = Vec::new();
    let mut at = 0;
    while at + FRAME_HEADER <= bytes.len() {
        if let Some(payload) = frame_at(&bytes, at) {
            each(payload);
            at += FRAME_HEADER + payload.len();
            continue;
        }
        // No valid frame after it: a torn tail, which ends the file.
        let Some(next) = (at + 1..bytes.len()).find(|&p| frame_at(&bytes, p).is_some()) else {
            break;
        };
        let chained = chained_records(&bytes, at, next);
        damage.push((at as u64, (next - at) as u64, chained.unwrap_or(1), chained.is_some()));
        at = next;
    }
    Ok(damage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replayed(dir: &Path) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        Journal::open(dir, false, false, |r| out.push(r.to_vec())).unwrap();
        out
    }

    fn open(dir: &Path) -> Journal {
        Journal::open(dir, false, false, |_| {}).unwrap().0
    }

    /// Issue 21, class 4: one flipped byte in the middle of a file of 100
    /// records used to end the replay there, silently (50 of 100 lost).
    #[test]
    fn a_flipped_byte_mid_file_is_damage_not_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        let records: Vec<Vec<u8>> = (0..100u32).map(|i| format!("record-{i:03}").into_bytes()).collect();
        for r in &records {
            j.append(r).unwrap();
        }
        drop(j);
        let path = file_of(dir.path(), 0);
        let frame = FRAME_HEADER as u64 + 10;
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(50 * frame + FRAME_HEADER as u64 + 3) as usize] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();

        let mut seen = Vec::new();
        let refused = Journal::open(dir.path(), false, false, |r| seen.push(r.to_vec()));
        let Err(OpenError::Damaged(damage)) = refused else {
            panic!("damage not reported: {:?}", refused.map(|(_, d)| d))
        };
        let expected = Damage {
            file: path.clone(),
            kept_as: None,
            offset: 50 * frame,
            bytes: frame,
            records: 1,
            exact: true,
        };
        assert_eq!(damage, std::slice::from_ref(&expected));
        assert_eq!(seen.len(), 99, "every record after the damaged one is read");
        assert_eq!(
            generations(dir.path()).unwrap(),
            [0],
            "refused: nothing changed on disk"
        );

        let mut seen = Vec::new();
        let (j, damage) = Journal::open(dir.path(), false, true, |r| seen.push(r.to_vec())).unwrap();
        let aside = dir.path().join("0000000000000000.log.damaged");
        assert_eq!(
            damage,
            [Damage {
                kept_as: Some(aside.clone()),
                ..expected
            }]
        );
        assert_eq!(std::fs::read(&aside).unwrap(), bytes, "kept as found");
        // The readable records were copied forward into the new generation:
        // they replay from there, and a checkpoint's drop keeps the file aside.
        j.drop_before(1).unwrap();
        drop(j);
        let mut expected: Vec<Vec<u8>> = records.clone();
        expected.remove(50);
        assert_eq!(seen, expected);
        assert_eq!(replayed(dir.path()), expected);
        assert!(aside.exists(), "no checkpoint deletes the damaged file");
    }

    #[test]
    fn a_damaged_length_is_skipped_to_the_next_valid_frame() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
        for i in 0..10u8 {
            j.append(&[i + 1; 20]).unwrap();
        }
        drop(j);
        let path = file_of(dir.path(), 0);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3 * 28 + 1] = 0x7f; // record 3's length field
        std::fs::write(&path, &bytes).unwrap();
        let mut seen = Vec::new();
        let Err(OpenError::Damaged(damage)) = Journal::open(dir.path(), false, false, |r| seen.push(r[0])) else {
            panic!("damage not reported")
        };
        assert_eq!(seen, [1, 2, 3, 5, 6, 7, 8, 9, 10]);
        assert_eq!(
            (damage[0].offset, damage[0].bytes, damage[0].records, damage[0].exact),
            (84, 28, 1, false)
        );
    }

    #[test]
    fn records_replay_in_order_across_generations_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), true, false, |_| panic!("empty")).unwrap().0;
        j.append(b"one").unwrap();
        let keep = j.switch().unwrap();
        j.append(b"two").unwrap();
        drop(j);
        assert_eq!(replayed(dir.path()), vec![b"one".to_vec(), b"two".to_vec()]);
        let j = open(dir.path());
        j.drop_before(keep).unwrap();
        j.append(b"three").unwrap();
        drop(j);
        assert_eq!(replayed(dir.path()), vec![b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn a_torn_tail_ends_the_replay_and_later_appends_overwrite_it() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(dir.path());
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
        let damage = read_records(&path, &mut |r: &[u8]| out.push(r.to_vec())).unwrap();
        assert_eq!(out, vec![b"kept".to_vec()]);
        assert!(damage.is_empty(), "a torn tail is not damage");
    }
}
