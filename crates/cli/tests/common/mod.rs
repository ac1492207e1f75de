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

/// A fresh folder `pacer-<suite>-test-<pid>/<name>` under the system's temporary folder.
pub fn tmp_dir(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("pacer-{suite}-test-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
