//! Optional durability (`EmulatorBuilder::data_dir`, `--data-dir`): a
//! write-ahead log of what every mutating call changed, replayed on start.
//!
//! One file, `wal.log`: a 12-byte header (`HBEMUWAL` and a format version),
//! then one frame per mutating call, `u32 length | u32 crc32 | payload`
//! (little-endian), the payload being the call's [`Record`]s. Records hold
//! resolved effects - the timestamp actually stamped, the server time a put
//! was applied at, the cell TTL, delete markers, table descriptors - so a
//! replay rebuilds the same state whatever the clock says by then.
//!
//! A call's frame is written with one `write` before the call is answered:
//! it is then in the operating system's hands and survives the emulator
//! being killed (`kill -9`); with `fsync` each frame is also `fdatasync`ed,
//! to survive a machine crash. A torn last frame (a crash mid-write) is
//! ignored and cut off on start, so a call is replayed whole or not at all.
//! A bad frame followed by more data is corruption: the start fails rather
//! than silently dropping later calls.
//!
//! When a write fails (disk full...), the log is cut back to its last whole
//! frame and stays refused from then on: the failed call already changed
//! the in-memory state, so further logging could not be trusted, just as a
//! region server aborts when its WAL fails.
//!
//! On start, a log more than twice the size of the live state is rewritten
//! as a snapshot of that state (to a temporary file, synced, then renamed
//! over the log).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use hbase_thrift::hbase::ColumnDescriptor;

use crate::schema::FamilySchema;

const FILE_NAME: &str = "wal.log";
const COMPACT_NAME: &str = "wal.log.compact";
const MAGIC: &[u8; 8] = b"HBEMUWAL";
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: u64 = 12;
const FRAME_HEADER_LEN: u64 = 8;

/// One stored version, as the snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredVersion {
    pub ts: i64,
    pub value: Vec<u8>,
    pub ttl_ms: Option<i64>,
}

/// One resolved change of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    CreateTable {
        name: Vec<u8>,
        families: Vec<FamilySchema>,
        created_ms: i64,
    },
    /// Also what `clear_data` logs for every table.
    DeleteTable {
        name: Vec<u8>,
    },
    SetEnabled {
        name: Vec<u8>,
        enabled: bool,
    },
    /// `Table::put` with its resolved arguments (`now` decides which older
    /// versions had expired and were dropped).
    Put {
        table: Vec<u8>,
        row: Vec<u8>,
        family: Vec<u8>,
        qualifier: Vec<u8>,
        ts: i64,
        value: Vec<u8>,
        ttl_ms: Option<i64>,
        now: i64,
    },
    DeleteColumn {
        table: Vec<u8>,
        row: Vec<u8>,
        family: Vec<u8>,
        qualifier: Vec<u8>,
        upto: i64,
    },
    DeleteFamily {
        table: Vec<u8>,
        row: Vec<u8>,
        family: Vec<u8>,
        upto: i64,
    },
    MajorCompact {
        table: Vec<u8>,
        now: i64,
    },
    /// Snapshot: a row's family with its `DeleteFamily` marker.
    RestoreFamily {
        table: Vec<u8>,
        row: Vec<u8>,
        family: Vec<u8>,
        deleted_upto: Option<i64>,
    },
    /// Snapshot: one column exactly as stored (marker, versions newest first).
    RestoreColumn {
        table: Vec<u8>,
        row: Vec<u8>,
        family: Vec<u8>,
        qualifier: Vec<u8>,
        deleted_upto: Option<i64>,
        versions: Vec<StoredVersion>,
    },
}

/// Where tables note their changes until the call commits them to the log.
/// Disabled (the default) without a data directory: nothing is kept.
#[derive(Debug, Clone, Default)]
pub(crate) struct Journal(Option<Arc<Mutex<Vec<Record>>>>);

impl Journal {
    pub fn enabled() -> Self {
        Journal(Some(Arc::default()))
    }

    /// Notes a change; `make` only runs when journaling.
    pub fn record(&self, make: impl FnOnce() -> Record) {
        if let Some(pending) = &self.0 {
            pending.lock().unwrap_or_else(PoisonError::into_inner).push(make());
        }
    }

    pub fn take(&self) -> Vec<Record> {
        match &self.0 {
            Some(pending) => std::mem::take(&mut *pending.lock().unwrap_or_else(PoisonError::into_inner)),
            None => Vec::new(),
        }
    }
}

/// What a start found in the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Mutating calls (or snapshot entries) replayed.
    pub frames: u64,
    /// Bytes of a torn last frame that were cut off.
    pub torn_bytes: u64,
    /// Whether the log was rewritten as a snapshot of the live state.
    pub compacted: bool,
}

#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    dir: PathBuf,
    /// Length of the log up to its last whole frame.
    len: u64,
    fsync: bool,
    /// Set by a failed write: every later write is refused.
    broken: Option<String>,
}

impl Wal {
    /// Opens (creating it if needed) `dir/wal.log`, hands every record to
    /// `apply` in order and cuts a torn last frame off.
    pub fn open(
        dir: &Path,
        fsync: bool,
        mut apply: impl FnMut(Record) -> Result<(), String>,
    ) -> io::Result<(Wal, ReplayStats)> {
        fs::create_dir_all(dir)?;
        let path = dir.join(FILE_NAME);
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(&path)?;
        let file_len = file.metadata()?.len();
        let mut stats = ReplayStats::default();
        let valid_len = if file_len < HEADER_LEN {
            // New, or torn while its header was being written.
            let mut start = Vec::new();
            file.read_to_end(&mut start)?;
            if !header().starts_with(&start) {
                return Err(invalid(&path, 0, "not an hbase-emulator WAL (bad header)"));
            }
            file.set_len(0)?;
            file.write_all(&header())?;
            sync(&file, true)?;
            HEADER_LEN
        } else {
            let mut reader = BufReader::new(&file);
            let mut head = [0u8; HEADER_LEN as usize];
            reader.read_exact(&mut head)?;
            if head != header() {
                return Err(invalid(
                    &path,
                    0,
                    "not an hbase-emulator WAL of this version (bad header)",
                ));
            }
            replay(&mut reader, &path, file_len, &mut stats, &mut apply)?
        };
        if valid_len < file_len {
            stats.torn_bytes = file_len - valid_len;
            file.set_len(valid_len)?;
            sync(&file, true)?;
        }
        file.seek(SeekFrom::End(0))?;
        let wal = Wal {
            file,
            dir: dir.to_path_buf(),
            len: valid_len,
            fsync,
            broken: None,
        };
        Ok((wal, stats))
    }

    /// The error every write answers after one failed.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Appends one call's records as one frame.
    pub fn append(&mut self, records: &[Record]) -> io::Result<()> {
        if let Some(why) = &self.broken {
            return Err(io::Error::other(why.clone()));
        }
        let mut frame = Vec::new();
        push_frame(&mut frame, records);
        let written = self.file.write_all(&frame).and_then(|()| sync(&self.file, self.fsync));
        match written {
            Ok(()) => {
                self.len += frame.len() as u64;
                Ok(())
            }
            Err(e) => {
                // Cut a partial frame so later starts do not see it mid-log.
                let _ = self.file.set_len(self.len);
                self.broken = Some(format!(
                    "writing {} failed ({e}); restart the emulator",
                    self.dir.join(FILE_NAME).display()
                ));
                Err(e)
            }
        }
    }

    /// Rewrites the log as `snapshot` (the live state, one record per
    /// frame) when the log is more than twice its size.
    pub fn compact_if_larger(&mut self, snapshot: &[Record]) -> io::Result<bool> {
        let mut out = header().to_vec();
        for record in snapshot {
            push_frame(&mut out, std::slice::from_ref(record));
        }
        if self.len <= 2 * out.len() as u64 {
            return Ok(false);
        }
        let temp = self.dir.join(COMPACT_NAME);
        let mut file = File::create(&temp)?;
        file.write_all(&out)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, self.dir.join(FILE_NAME))?;
        // Make the rename itself durable.
        File::open(&self.dir)?.sync_all()?;
        self.file = OpenOptions::new().append(true).open(self.dir.join(FILE_NAME))?;
        self.len = out.len() as u64;
        Ok(true)
    }
}

fn header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h
}

fn sync(file: &File, fsync: bool) -> io::Result<()> {
    if fsync { file.sync_data() } else { Ok(()) }
}

fn invalid(path: &Path, offset: u64, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} at byte {offset}: {why}", path.display()),
    )
}

/// Replays every whole frame; returns the length of the valid prefix.
fn replay(
    reader: &mut impl Read,
    path: &Path,
    file_len: u64,
    stats: &mut ReplayStats,
    apply: &mut impl FnMut(Record) -> Result<(), String>,
) -> io::Result<u64> {
    let mut pos = HEADER_LEN;
    let mut payload = Vec::new();
    let mut progress = Progress::new(path, file_len);
    loop {
        progress.at(pos, stats.frames);
        if file_len - pos < FRAME_HEADER_LEN {
            // Nothing left, or a frame header torn mid-write.
            return Ok(pos);
        }
        let mut head = [0u8; FRAME_HEADER_LEN as usize];
        reader.read_exact(&mut head)?;
        let len = u32::from_le_bytes(head[..4].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(head[4..].try_into().unwrap_or_default());
        let end = pos + FRAME_HEADER_LEN + u64::from(len);
        if end > file_len {
            // The frame runs past the end of the file: torn.
            return Ok(pos);
        }
        payload.resize(len as usize, 0);
        reader.read_exact(&mut payload)?;
        if crc32fast::hash(&payload) != crc {
            if end == file_len {
                // The last frame, garbled by a crash mid-write.
                return Ok(pos);
            }
            return Err(invalid(path, pos, "checksum mismatch before the end of the log"));
        }
        let records = decode_frame(&payload).map_err(|e| invalid(path, pos, &e))?;
        for record in records {
            apply(record).map_err(|e| invalid(path, pos, &format!("cannot replay: {e}")))?;
        }
        stats.frames += 1;
        pos = end;
    }
}

/// Progress of a long replay on stderr: silent for the first second (small
/// logs), then one line every two seconds, and one at the end.
struct Progress<'a> {
    path: &'a Path,
    file_len: u64,
    start: std::time::Instant,
    next: std::time::Duration,
    shown: bool,
}

impl<'a> Progress<'a> {
    fn new(path: &'a Path, file_len: u64) -> Self {
        Progress {
            path,
            file_len,
            start: std::time::Instant::now(),
            next: std::time::Duration::from_secs(1),
            shown: false,
        }
    }

    fn at(&mut self, pos: u64, frames: u64) {
        // One clock read per frame: small next to decoding and applying it.
        if self.start.elapsed() < self.next {
            return;
        }
        self.next += std::time::Duration::from_secs(2);
        self.shown = true;
        eprintln!(
            "hbase-emulator: replaying {}: {} of {} MiB ({:.0}%), {frames} records, {:.0} s",
            self.path.display(),
            pos >> 20,
            self.file_len >> 20,
            100.0 * pos as f64 / self.file_len.max(1) as f64,
            self.start.elapsed().as_secs_f64()
        );
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        if self.shown {
            eprintln!(
                "hbase-emulator: replayed {} in {:.1} s",
                self.path.display(),
                self.start.elapsed().as_secs_f64()
            );
        }
    }
}

fn push_frame(out: &mut Vec<u8>, records: &[Record]) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_LEN as usize]);
    let mut enc = Enc(out);
    enc.u32(u32::try_from(records.len()).unwrap_or(u32::MAX));
    for record in records {
        enc.record(record);
    }
    let payload = &out[start + FRAME_HEADER_LEN as usize..];
    let len = u32::try_from(payload.len()).expect("a WAL frame is below 4 GiB");
    let crc = crc32fast::hash(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

fn decode_frame(payload: &[u8]) -> Result<Vec<Record>, String> {
    let mut dec = Dec(payload);
    let count = dec.u32()?;
    let records = (0..count).map(|_| dec.record()).collect::<Result<Vec<_>, _>>()?;
    if !dec.0.is_empty() {
        return Err(format!("{} stray bytes after the records", dec.0.len()));
    }
    Ok(records)
}

mod tag {
    pub const CREATE_TABLE: u8 = 1;
    pub const DELETE_TABLE: u8 = 2;
    pub const SET_ENABLED: u8 = 3;
    pub const PUT: u8 = 4;
    pub const DELETE_COLUMN: u8 = 5;
    pub const DELETE_FAMILY: u8 = 6;
    pub const MAJOR_COMPACT: u8 = 7;
    pub const RESTORE_FAMILY: u8 = 8;
    pub const RESTORE_COLUMN: u8 = 9;
}

struct Enc<'a>(&'a mut Vec<u8>);

impl Enc<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }

    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }

    fn bytes(&mut self, v: &[u8]) {
        self.u32(u32::try_from(v.len()).expect("a WAL field is below 4 GiB"));
        self.0.extend_from_slice(v);
    }

    fn opt(&mut self, v: Option<i64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.i64(v);
            }
        }
    }

    fn family(&mut self, f: &FamilySchema) {
        let cd = f.to_thrift();
        self.bytes(cd.name.as_deref().unwrap_or_default());
        self.i64(i64::from(cd.max_versions.unwrap_or(0)));
        self.bytes(cd.compression.as_deref().unwrap_or_default().as_bytes());
        self.bool(cd.in_memory.unwrap_or(false));
        self.bytes(cd.bloom_filter_type.as_deref().unwrap_or_default().as_bytes());
        self.bool(cd.block_cache_enabled.unwrap_or(false));
        self.i64(i64::from(cd.time_to_live.unwrap_or(0)));
    }

    fn record(&mut self, r: &Record) {
        match r {
            Record::CreateTable {
                name,
                families,
                created_ms,
            } => {
                self.u8(tag::CREATE_TABLE);
                self.bytes(name);
                self.i64(*created_ms);
                self.u32(u32::try_from(families.len()).unwrap_or(u32::MAX));
                families.iter().for_each(|f| self.family(f));
            }
            Record::DeleteTable { name } => {
                self.u8(tag::DELETE_TABLE);
                self.bytes(name);
            }
            Record::SetEnabled { name, enabled } => {
                self.u8(tag::SET_ENABLED);
                self.bytes(name);
                self.bool(*enabled);
            }
            Record::Put {
                table,
                row,
                family,
                qualifier,
                ts,
                value,
                ttl_ms,
                now,
            } => {
                self.u8(tag::PUT);
                for b in [table, row, family, qualifier] {
                    self.bytes(b);
                }
                self.i64(*ts);
                self.bytes(value);
                self.opt(*ttl_ms);
                self.i64(*now);
            }
            Record::DeleteColumn {
                table,
                row,
                family,
                qualifier,
                upto,
            } => {
                self.u8(tag::DELETE_COLUMN);
                for b in [table, row, family, qualifier] {
                    self.bytes(b);
                }
                self.i64(*upto);
            }
            Record::DeleteFamily {
                table,
                row,
                family,
                upto,
            } => {
                self.u8(tag::DELETE_FAMILY);
                for b in [table, row, family] {
                    self.bytes(b);
                }
                self.i64(*upto);
            }
            Record::MajorCompact { table, now } => {
                self.u8(tag::MAJOR_COMPACT);
                self.bytes(table);
                self.i64(*now);
            }
            Record::RestoreFamily {
                table,
                row,
                family,
                deleted_upto,
            } => {
                self.u8(tag::RESTORE_FAMILY);
                for b in [table, row, family] {
                    self.bytes(b);
                }
                self.opt(*deleted_upto);
            }
            Record::RestoreColumn {
                table,
                row,
                family,
                qualifier,
                deleted_upto,
                versions,
            } => {
                self.u8(tag::RESTORE_COLUMN);
                for b in [table, row, family, qualifier] {
                    self.bytes(b);
                }
                self.opt(*deleted_upto);
                self.u32(u32::try_from(versions.len()).unwrap_or(u32::MAX));
                for v in versions {
                    self.i64(v.ts);
                    self.bytes(&v.value);
                    self.opt(v.ttl_ms);
                }
            }
        }
    }
}

struct Dec<'a>(&'a [u8]);

impl Dec<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("record cut short".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }

    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }

    fn bool(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bad boolean {b}")),
        }
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }

    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "a name is not UTF-8".to_string())
    }

    fn opt(&mut self) -> Result<Option<i64>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.i64()?)),
            b => Err(format!("bad option tag {b}")),
        }
    }

    fn i32(&mut self) -> Result<i32, String> {
        let v = self.i64()?;
        i32::try_from(v).map_err(|_| format!("{v} is out of range"))
    }

    fn family(&mut self) -> Result<FamilySchema, String> {
        let name = self.bytes()?;
        let max_versions = self.i32()?;
        let compression = self.string()?;
        let in_memory = self.bool()?;
        let bloom = self.string()?;
        let block_cache = self.bool()?;
        let ttl = self.i32()?;
        let cd = ColumnDescriptor::new(
            name,
            max_versions,
            compression,
            in_memory,
            bloom,
            0,
            0,
            block_cache,
            ttl,
        );
        FamilySchema::from_thrift(&cd).map_err(|e| format!("bad family descriptor: {}", e.message()))
    }

    fn record(&mut self) -> Result<Record, String> {
        Ok(match self.u8()? {
            tag::CREATE_TABLE => {
                let name = self.bytes()?;
                let created_ms = self.i64()?;
                let count = self.u32()?;
                let families = (0..count).map(|_| self.family()).collect::<Result<_, _>>()?;
                Record::CreateTable {
                    name,
                    families,
                    created_ms,
                }
            }
            tag::DELETE_TABLE => Record::DeleteTable { name: self.bytes()? },
            tag::SET_ENABLED => Record::SetEnabled {
                name: self.bytes()?,
                enabled: self.bool()?,
            },
            tag::PUT => Record::Put {
                table: self.bytes()?,
                row: self.bytes()?,
                family: self.bytes()?,
                qualifier: self.bytes()?,
                ts: self.i64()?,
                value: self.bytes()?,
                ttl_ms: self.opt()?,
                now: self.i64()?,
            },
            tag::DELETE_COLUMN => Record::DeleteColumn {
                table: self.bytes()?,
                row: self.bytes()?,
                family: self.bytes()?,
                qualifier: self.bytes()?,
                upto: self.i64()?,
            },
            tag::DELETE_FAMILY => Record::DeleteFamily {
                table: self.bytes()?,
                row: self.bytes()?,
                family: self.bytes()?,
                upto: self.i64()?,
            },
            tag::MAJOR_COMPACT => Record::MajorCompact {
                table: self.bytes()?,
                now: self.i64()?,
            },
            tag::RESTORE_FAMILY => Record::RestoreFamily {
                table: self.bytes()?,
                row: self.bytes()?,
                family: self.bytes()?,
                deleted_upto: self.opt()?,
            },
            tag::RESTORE_COLUMN => {
                let (table, row, family, qualifier) = (self.bytes()?, self.bytes()?, self.bytes()?, self.bytes()?);
                let deleted_upto = self.opt()?;
                let count = self.u32()?;
                let versions = (0..count)
                    .map(|_| {
                        Ok(StoredVersion {
                            ts: self.i64()?,
                            value: self.bytes()?,
                            ttl_ms: self.opt()?,
                        })
                    })
                    .collect::<Result<_, String>>()?;
                Record::RestoreColumn {
                    table,
                    row,
                    family,
                    qualifier,
                    deleted_upto,
                    versions,
                }
            }
            other => return Err(format!("unknown record type {other}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family() -> FamilySchema {
        let cd = ColumnDescriptor::new(
            b"cf:".to_vec(),
            2,
            "gz".to_owned(),
            true,
            "ROWCOL".to_owned(),
            0,
            0,
            false,
            3600,
        );
        FamilySchema::from_thrift(&cd).unwrap()
    }

    fn samples() -> Vec<Record> {
        let b = |s: &str| s.as_bytes().to_vec();
        vec![
            Record::CreateTable {
                name: b("t"),
                families: vec![family()],
                created_ms: 7,
            },
            Record::SetEnabled {
                name: b("t"),
                enabled: false,
            },
            Record::Put {
                table: b("t"),
                row: vec![0xFF, 0],
                family: b("cf"),
                qualifier: b("q"),
                ts: 5,
                value: vec![],
                ttl_ms: Some(-1),
                now: i64::MAX,
            },
            Record::DeleteColumn {
                table: b("t"),
                row: b("r"),
                family: b("cf"),
                qualifier: b("q"),
                upto: 9,
            },
            Record::DeleteFamily {
                table: b("t"),
                row: b("r"),
                family: b("cf"),
                upto: 10,
            },
            Record::MajorCompact { table: b("t"), now: 11 },
            Record::RestoreFamily {
                table: b("t"),
                row: b("r"),
                family: b("cf"),
                deleted_upto: None,
            },
            Record::RestoreColumn {
                table: b("t"),
                row: b("r"),
                family: b("cf"),
                qualifier: b("q"),
                deleted_upto: Some(3),
                versions: vec![StoredVersion {
                    ts: 4,
                    value: b("v"),
                    ttl_ms: None,
                }],
            },
            Record::DeleteTable { name: b("t") },
        ]
    }

    #[test]
    fn frames_round_trip() {
        let records = samples();
        let mut frame = Vec::new();
        push_frame(&mut frame, &records);
        let payload = &frame[FRAME_HEADER_LEN as usize..];
        assert_eq!(
            u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize,
            payload.len()
        );
        assert_eq!(decode_frame(payload).unwrap(), records);
        assert!(decode_frame(&payload[..payload.len() - 1]).is_err());
    }

    #[test]
    fn torn_tails_are_cut_and_corruption_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let replay_all = |dir: &Path| {
            let mut seen = Vec::new();
            let (wal, stats) = Wal::open(dir, false, |r| {
                seen.push(r);
                Ok(())
            })?;
            Ok::<_, io::Error>((wal, stats, seen))
        };
        let (mut wal, _, seen) = replay_all(dir.path()).unwrap();
        assert!(seen.is_empty());
        let records = samples();
        wal.append(&records[..2]).unwrap();
        wal.append(&records[2..]).unwrap();
        drop(wal);
        let path = dir.path().join(FILE_NAME);
        let whole = fs::read(&path).unwrap();

        // Every cut inside the second frame replays the first one only.
        let first_end = {
            let mut f = Vec::new();
            push_frame(&mut f, &records[..2]);
            HEADER_LEN as usize + f.len()
        };
        for cut in [first_end, first_end + 3, first_end + 8, whole.len() - 1] {
            fs::write(&path, &whole[..cut]).unwrap();
            let (_, stats, seen) = replay_all(dir.path()).unwrap();
            assert_eq!(seen, records[..2], "cut at {cut}");
            assert_eq!(stats.torn_bytes, (cut - first_end) as u64);
            assert_eq!(fs::metadata(&path).unwrap().len(), first_end as u64, "tail cut off");
        }
        // A garbled last frame is torn too; a garbled earlier one is corruption.
        let mut garbled = whole.clone();
        *garbled.last_mut().unwrap() ^= 1;
        fs::write(&path, &garbled).unwrap();
        assert_eq!(replay_all(dir.path()).unwrap().2, records[..2]);
        let mut garbled = whole.clone();
        garbled[HEADER_LEN as usize + 9] ^= 1;
        fs::write(&path, &garbled).unwrap();
        let err = replay_all(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("checksum"), "{err}");
        // A torn header is a new log; a foreign file is refused.
        fs::write(&path, &header()[..5]).unwrap();
        assert!(replay_all(dir.path()).unwrap().2.is_empty());
        fs::write(&path, b"hello").unwrap();
        assert!(replay_all(dir.path()).is_err());
    }
}
