//! What the CLI's integration tests share: the binary under test, running it from the
//! repository root or a folder, scratch folders, and the two checks of an outcome.
//!
//! `PACER_TEST_BIN=/path/to/pacer` runs the tests against another build (e.g. one from
//! before a fix, to see a test fail). Each test file uses its own subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> PathBuf {
    std::env::var_os("PACER_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pacer")))
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs from the repository root, as the README's examples do.
pub fn pacer(args: &[&str]) -> Output {
    pacer_in(&repo(), args)
}

/// Runs in `dir`.
pub fn pacer_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("pacer runs")
}

/// A scratch path under the system's temporary folder: a fresh folder, or a file alone in
/// one. The folder and all in it are removed when this drops (also when the test panics),
/// so keep it alive while the test, and any `pacer` it started, uses the path.
pub struct Scratch {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh folder `pacer-<prefix>-<random>`.
    pub fn dir(prefix: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("pacer-{prefix}-"))
            .tempdir()
            .expect("a scratch folder");
        Scratch {
            path: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    /// A file `name` holding `text`, alone in a fresh folder `pacer-<prefix>-<random>`.
    pub fn file(prefix: &str, name: &str, text: &str) -> Scratch {
        let dir = Scratch::dir(prefix);
        let path = dir.path.join(name);
        std::fs::write(&path, text).unwrap();
        Scratch { path, ..dir }
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path.fmt(f)
    }
}

/// A fresh folder `pacer-<suite>-test-<random>/<name>` under the system's temporary folder,
/// removed when the returned guard drops.
pub fn tmp_dir(suite: &str, name: &str) -> Scratch {
    let root = Scratch::dir(&format!("{suite}-test"));
    let path = root.path.join(name);
    std::fs::create_dir_all(&path).unwrap();
    Scratch { path, ..root }
}

/// The names in `dir`, sorted.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Exit 0 and no panic.
pub fn assert_ok(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "expected success; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
}

/// Exit ≠ 0, one `error:` line containing `needle`, no panic. Returns stderr.
pub fn fails_with(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "expected failure; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(
        err.contains(needle),
        "stderr should contain `{needle}`: {err}"
    );
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "one error line: {err}"
    );
    err
}

/// Waits for `child` (its stdout and stderr piped) at most `limit`, reading both pipes
/// meanwhile: a child that writes more than a pipe holds (64 KiB here: a `--json`
/// report) would otherwise block and never exit. `Err(output so far)` when it ran
/// past `limit` (it is then killed).
pub fn wait_bounded(
    child: std::process::Child,
    limit: std::time::Duration,
) -> Result<Output, Output> {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Ok(out.expect("the child's output")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            Err(rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .ok()
                .and_then(Result::ok)
                .unwrap_or_else(|| Output {
                    status: std::os::unix::process::ExitStatusExt::from_raw(9),
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                }))
        }
    }
}
