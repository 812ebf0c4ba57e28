//! One file per deduper, `<path>/filters/<client>/<name>.bits`, holding its
//! pages at fixed offsets and rewritten in place: disk keeps exactly one
//! version of each page, and pages never written stay holes (a sparse file
//! takes no blocks for them).
//!
//! Page `p` of shard `s` lives at slot `s * pages_per_shard + p`, each slot
//! [`HEADER_BYTES`] + `page_len` bytes (4,096 for shards of 4,080 bits or
//! more, so a slot is one aligned filesystem block and one `pwrite`). Each
//! slot carries its own base tick, tick length and crc32, so a page can be
//! read back on its own and a torn one is recognised (see
//! [`super::filter::Filter::load_page`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::filter::HEADER_BYTES;

/// An open page file.
pub struct PageFile {
    file: File,
    slot_bytes: u64,
}

/// Path of a deduper's page file under the data directory.
pub fn path(data_dir: &Path, client_id: &str, name: &str) -> PathBuf {
    data_dir.join("filters").join(client_id).join(format!("{name}.bits"))
}

/// Bytes of one slot for pages of `page_len` stamps.
pub fn slot_bytes(page_len: u32) -> u64 {
    HEADER_BYTES as u64 + u64::from(page_len)
}

impl PageFile {
    /// Opens (creating it and its directories when missing) the page file
    /// at `path` for pages of `page_len` stamps. Errors: the I/O error.
    pub fn open(path: &Path, page_len: u32) -> io::Result<PageFile> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(PageFile {
            file,
            slot_bytes: slot_bytes(page_len),
        })
    }

    /// Writes one stored page (exactly one slot's bytes) in place.
    pub fn write(&self, slot: u64, bytes: &[u8]) -> io::Result<()> {
        debug_assert_eq!(bytes.len() as u64, self.slot_bytes);
        self.file.write_all_at(bytes, slot * self.slot_bytes)
    }

    /// `fdatasync`s the file: every page written before is durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// Reads every slot of the page file at `path` in order, calling
/// `each(slot, bytes)`; a short last slot (a torn extension) is passed as
/// it is. A missing file has no slots. Errors: the I/O error.
pub fn read_slots(path: &Path, page_len: u32, mut each: impl FnMut(u64, &[u8])) -> io::Result<()> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let slot = slot_bytes(page_len) as usize;
    let mut reader = io::BufReader::with_capacity(1 << 20, file);
    let mut buf = vec![0u8; slot];
    for index in 0u64.. {
        let mut filled = 0;
        while filled < slot {
            match reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if filled == 0 {
            break;
        }
        each(index, &buf[..filled]);
        if filled < slot {
            break;
        }
    }
    Ok(())
}

/// Allocated bytes (blocks, not apparent length) and apparent bytes of
/// every file under `dir`.
pub fn dir_usage(dir: &Path) -> (u64, u64) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    rd.flatten().fold((0, 0), |(alloc, apparent), e| match e.metadata() {
        Ok(m) if m.is_dir() => {
            let (a, b) = dir_usage(&e.path());
            (alloc + a, apparent + b)
        }
        Ok(m) => (
            alloc + std::os::unix::fs::MetadataExt::blocks(&m) * 512,
            apparent + m.len(),
        ),
        Err(_) => (alloc, apparent),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_written_in_place_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "c", "d");
        let f = PageFile::open(&p, 16).unwrap();
        f.write(2, &[7; 32]).unwrap();
        f.write(0, &[1; 32]).unwrap();
        f.write(2, &[9; 32]).unwrap();
        f.sync().unwrap();
        let mut seen = Vec::new();
        read_slots(&p, 16, |i, b| seen.push((i, b.to_vec()))).unwrap();
        assert_eq!(seen, vec![(0, vec![1; 32]), (1, vec![0; 32]), (2, vec![9; 32])]);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 96);
        read_slots(&dir.path().join("missing"), 16, |_, _| panic!("no slots")).unwrap();
    }

    #[test]
    fn unwritten_pages_take_no_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "c", "sparse");
        let f = PageFile::open(&p, 4080).unwrap();
        f.write(10_000, &[1; 4096]).unwrap();
        let (alloc, apparent) = dir_usage(dir.path());
        assert_eq!(apparent, 10_001 * 4096);
        assert!(alloc <= 64 * 1024, "{alloc} bytes allocated for one page");
    }
}
