//! The Java and Python clients' own test suites (clients/java, clients/python), run against
//! this build's `solus` binary. A machine without Java/Maven or Python prints one
//! `skipped: <reason>` line per client and passes; CI (`.ci/run`) has them.
//!
//! Maven keeps its jars in ~/.m2 and pip its wheels in ~/.cache/pip (outside the repository);
//! the Python virtualenv lives under target/ (CARGO_TARGET_TMPDIR).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::skipped;

const SOLUS_BIN: &str = env!("CARGO_BIN_EXE_solus");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether `program args` runs and exits 0 (the tool is installed and works).
fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .env("SOLUS_BIN", SOLUS_BIN)
        .env_remove("RUST_LOG")
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(300)..].join("\n");
        panic!("{what} failed ({}):\n{tail}", out.status);
    }
    out
}

/// Lines of `out` that summarise the test runs (surefire's `Tests run:`, pytest's `N passed`).
fn summary(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.contains("Tests run:") || l.contains(" passed"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn java_client_tests() {
    if !works("java", &["-version"]) || !works("mvn", &["-v"]) {
        skipped(
            "java_client_tests",
            "Java and Maven are needed for the Java client's tests (clients/java): install a JDK 17 and Maven",
        );
        return;
    }
    let out = run(
        Command::new("mvn")
            .args(["-B", "-ntp", "verify"])
            .current_dir(repo().join("clients/java")),
        "mvn verify in clients/java",
    );
    println!("{}", summary(&out));
}

#[test]
fn python_client_tests() {
    if !works("python3", &["--version"]) {
        skipped(
            "python_client_tests",
            "python3 is needed for the Python client's tests (clients/python)",
        );
        return;
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("solus-python-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).output();
        if !matches!(&made, Ok(o) if o.status.success()) {
            let _ = std::fs::remove_dir_all(&venv);
            skipped(
                "python_client_tests",
                "python3 cannot create a virtualenv here (Debian: apt-get install python3-venv), needed for the Python client's tests",
            );
            return;
        }
    }
    let pkg = repo().join("clients/python");
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .arg(format!("{}[test]", pkg.display())),
        "pip install clients/python[test]",
    );
    let out = run(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .current_dir(&pkg),
        "pytest in clients/python",
    );
    println!("{}", summary(&out));
}
