//! A wall-clock shift below Solus for tests: `faketime.c`, compiled here
//! with the system's `cc` and loaded into a `solus serve` child with
//! `LD_PRELOAD`, shifts `clock_gettime(CLOCK_REALTIME)`, `gettimeofday` and
//! `time` by an offset the test can change while the child runs (an int64
//! of ms in a file the shim maps). Without a C compiler the tests using it
//! print one `skipped:` line and pass without running.
#![allow(dead_code)]

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The compiled shim library, or `None` (with one printed line) without `cc`.
pub fn library() -> Option<&'static Path> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIB.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clock_shim/faketime.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("solus-faketime-{}.so", std::process::id()));
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&out)
            .arg(&source)
            .arg("-ldl")
            .status();
        match built {
            Ok(status) if status.success() => Some(out),
            Ok(status) => panic!("cc failed on {} ({status})", source.display()),
            Err(e) => {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: clock-shift tests: no C compiler (`cc`: {e}) to build the LD_PRELOAD clock shim"
                );
                None
            }
        }
    })
    .as_deref()
}

/// One child's clock shift, changeable while the child runs.
pub struct ShiftedClock {
    _dir: tempfile::TempDir,
    file: PathBuf,
    lib: &'static Path,
}

impl ShiftedClock {
    /// A shift of `offset_ms` (positive: ahead); `None` without a C compiler.
    pub fn new(offset_ms: i64) -> Option<ShiftedClock> {
        let lib = library()?;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("offset");
        std::fs::write(&file, offset_ms.to_le_bytes()).unwrap();
        Some(ShiftedClock { _dir: dir, file, lib })
    }

    /// Moves the child's clock to `offset_ms` from the real one, at once
    /// (written in place: the shim maps the file).
    pub fn set(&self, offset_ms: i64) {
        let f = std::fs::OpenOptions::new().write(true).open(&self.file).unwrap();
        f.write_all_at(&offset_ms.to_le_bytes(), 0).unwrap();
    }

    /// The environment that loads the shim into a child.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", self.lib.display().to_string()),
            ("SOLUS_TEST_CLOCK_OFFSET_FILE", self.file.display().to_string()),
        ]
    }
}
