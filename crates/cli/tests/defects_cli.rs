//! Small defects of issue 23, through the real binary: `controller --json` says which
//! port it chose, help and version printed where they cannot be written are errors,
//! and sizes a user asks for are bounded before anything is allocated.
//!
//! `PACER_TEST_BIN=/path/to/pacer` runs these against another build.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

#[test]
fn controller_json_prints_the_bound_address_first() {
    use std::io::{BufRead, BufReader};
    // Was: with --json nothing said which port `--listen 127.0.0.1:0` got (the
    // text line on stderr is skipped for --json), so no worker could find it.
    let mut child = Command::new(bin())
        .args([
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--dataset",
            "tiny",
            "--normal-priority",
            "--no-progress",
            "--join-timeout-s",
            "20",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("pacer runs");
    // Read the first line on a thread, so that a controller that prints nothing
    // fails the test at the join timeout instead of blocking it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_default();
    let event: Result<pacer_cli::json::Listening, _> = serde_json::from_str(&line);
    let connected = event.as_ref().ok().map(|e| {
        let addr: std::net::SocketAddr = e.listening.parse().expect("HOST:PORT");
        assert_ne!(addr.port(), 0, "{line}");
        std::net::TcpStream::connect(addr)
    });
    child.kill().ok();
    child.wait().ok();
    let event = event.unwrap_or_else(|e| panic!("first stdout line `{line}`: {e}"));
    connected
        .expect("parsed")
        .unwrap_or_else(|e| panic!("{}: cannot connect: {e}", event.listening));
}

#[cfg(unix)]
#[test]
fn help_and_version_that_cannot_be_written_are_errors() {
    // Was: exit 0 with nothing written (clap ignores the write error).
    for args in [
        vec!["--help"],
        vec!["simulate", "--help"],
        vec!["help", "simulate"],
        vec!["--version"],
        vec!["-V"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = Command::new(bin())
            .args(&args)
            .stdout(full)
            .output()
            .unwrap();
        let err = fails_with(&out, "cannot write to standard output");
        assert!(err.contains("No space left"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    }
    // Written normally, help and version still succeed, and usage errors keep
    // clap's status 2.
    let out = pacer(&["simulate", "--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--policy"));
    let out = pacer(&["--version"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("pacer "));
    let out = pacer(&["simulate", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `pacer ARGS`, killed after `secs` seconds (then the output says so on stderr).
fn pacer_within(args: &[&str], secs: u64) -> Output {
    let child = Command::new(bin())
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pacer runs");
    common::wait_bounded(child, std::time::Duration::from_secs(secs)).unwrap_or_else(|mut out| {
        out.stderr
            .extend_from_slice(format!("\n[test: killed after {secs} s]\n").as_bytes());
        out
    })
}

#[test]
fn sizes_a_user_asks_for_are_refused_before_allocating() {
    // Was: `synthetic:1000000000` aborted allocating 136 GB; a 10^9-device cluster
    // (flag or TOML file) simulated for minutes.
    let out = pacer_within(&["simulate", "--trace", "synthetic:1000000000"], 60);
    fails_with(&out, "JOBS 1000000000 is too many; at most 10000000 jobs");
    let out = pacer_within(&["simulate", "--cluster", "1000000x1000:t4"], 60);
    fails_with(
        &out,
        "cluster too large: 1000000 nodes, 1000000000 devices; at most 1048576 devices",
    );
    let dir = Scratch::dir("defects-test");
    let toml = dir.join("huge.toml");
    std::fs::write(
        &toml,
        "[[nodes]]\ncount = 1000000\ngpus = 1000\ntype = \"t4\"\n",
    )
    .unwrap();
    let out = pacer_within(&["simulate", "--cluster", toml.to_str().unwrap()], 60);
    fails_with(&out, "cluster too large: 1000000 nodes, 1000000000 devices");
}
