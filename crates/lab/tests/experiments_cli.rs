//! Bad input and output safety of the experiments (`pacer-lab slaq|themis`), through
//! the real binary: one clear error that names the flag or file at fault, exit code 1,
//! no panic, no hang, nothing simulated or written before the error; results written
//! whole or not at all, by default outside the committed `experiments/`. Each case
//! here once panicked, hung, ran on nonsense or named the wrong place (they ran as
//! `pacer experiment …` before the experiments moved to pacer-lab).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs pacer-lab in `dir`; kills it after 120 s (a hang is a failure, not a stuck
/// test run).
fn lab_in(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pacer-lab"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pacer-lab runs");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().ok();
            let out = child.wait_with_output().expect("output");
            panic!(
                "pacer-lab {args:?} hung; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Runs pacer-lab from the repository root (as the README's examples do).
fn lab_out(args: &[&str]) -> Output {
    lab_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), args)
}

/// A fresh scratch folder, removed when the returned guard drops.
fn tmp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("pacer-lab-experiments-{name}-"))
        .tempdir()
        .unwrap()
}

/// A file `name` holding `text` in a fresh scratch folder (removed when the guard drops).
fn tmp(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tmp_dir("files");
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

fn assert_ok(out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "expected success; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
}

/// Exit code 1, one `error` line containing `needle`, no panic. Returns stderr.
fn fails_with_out(out: &Output, what: &str, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "pacer-lab {what}: exit code (101 = panic, none = signal/abort); stderr: {err}"
    );
    assert!(!err.contains("panicked"), "pacer-lab {what}: panic: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "pacer-lab {what}: one error line: {err}");
    assert!(
        errors[0].contains(needle),
        "pacer-lab {what}: error should contain `{needle}`: {err}"
    );
    err
}

fn fails_with(args: &[&str], needle: &str) -> String {
    fails_with_out(&lab_out(args), &format!("{args:?}"), needle)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn output_folder_that_is_a_file_fails_before_the_runs() {
    // Reported only after every simulation ("File exists").
    let (_tmp, f) = tmp("not-a-folder", "x");
    let f = f.to_str().unwrap();
    let err = fails_with(
        &[
            "themis",
            "--out",
            f,
            "--pollux",
            "workload-1",
            "--policies",
            "fair",
        ],
        "is a file; expected a folder",
    );
    assert!(!err.contains("fair:"), "simulated first: {err}");
    fails_with(
        &["slaq", "--out", f, "--jobs", "5"],
        "is a file; expected a folder",
    );
}

#[test]
fn slaq_empty_profiles_folder() {
    // Panicked: "cannot sample empty range".
    let dir_tmp = tmp_dir("no-profiles");
    let dir = dir_tmp.path();
    let out_tmp = tmp_dir("slaq-out");
    let out = out_tmp.path().join("out");
    fails_with(
        &[
            "slaq",
            "--out",
            out.to_str().unwrap(),
            "--jobs",
            "5",
            "--profiles",
            dir.to_str().unwrap(),
        ],
        "no profiles here",
    );
    assert!(!out.exists());
}

#[test]
fn slaq_infinite_times() {
    // Simulated, wrote results.md, then hung drawing a plot with infinite axes.
    let out_tmp = tmp_dir("slaq-inf");
    let out = out_tmp.path().join("out");
    for (flag, v) in [("--interarrival-s", "inf"), ("--round-s", "inf")] {
        fails_with(
            &[
                "slaq",
                "--out",
                out.to_str().unwrap(),
                "--jobs",
                "5",
                flag,
                v,
            ],
            flag,
        );
    }
    assert!(!out.exists(), "nothing written");
}

/// A Gavel data folder with one job type measured on the three device types (removed when
/// the returned guard drops).
fn tiny_gavel() -> tempfile::TempDir {
    let dir_tmp = tmp_dir("gavel");
    let dir = dir_tmp.path();
    let entry = r#"{"('ResNet-18 (batch size 16)', 1)": {"null": 10.0}}"#;
    std::fs::write(
        dir.join("simulation_throughputs.json"),
        format!(r#"{{"v100": {entry}, "p100": {entry}, "k80": {entry}}}"#),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("msr-seed0")).unwrap();
    std::fs::write(
        dir.join("msr-seed0").join("t.trace"),
        "ResNet-18 (batch size 16)\tcmd\t1\t1\t3600\t0\t1\n",
    )
    .unwrap();
    dir_tmp
}

#[test]
fn themis_checks_every_flag_before_simulating() {
    let gavel_tmp = tiny_gavel();
    let gavel = gavel_tmp.path();
    let out_tmp = tmp_dir("themis");
    let out = out_tmp.path().join("out");
    let base = [
        "themis",
        "--out",
        out.to_str().unwrap(),
        "--gavel",
        gavel.to_str().unwrap(),
        "--traces",
        "t",
        "--policies",
        "fair",
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    // Was reported only after the Gavel runs (their progress lines printed first);
    // in a list, an unknown name was silently dropped.
    for pollux in ["nope", "workload-1,nope"] {
        let err = fails_with(&with(&["--pollux", pollux]), "unknown workload `nope`");
        assert!(!err.contains("fair:"), "simulated before the error: {err}");
    }
    // Hung (0) or ran with NaN rounds / leases.
    fails_with(
        &with(&["--pollux", "none", "--gavel-round-s", "0"]),
        "--gavel-round-s",
    );
    fails_with(
        &with(&["--pollux", "none", "--lease-s", "NaN"]),
        "--lease-s",
    );
    fails_with(
        &with(&["--pollux", "none", "--long-rounds", "NaN"]),
        "--long-rounds",
    );
    // Was "t.trace: no jobs".
    fails_with(
        &with(&["--pollux", "none", "--max-jobs", "0"]),
        "--max-jobs",
    );
    assert!(!out.exists(), "nothing written");
}

#[test]
fn themis_policy_list() {
    let out_tmp = tmp_dir("themis-p");
    let out = out_tmp.path().join("out");
    let o = out.to_str().unwrap();
    // Was "nothing ran: no Gavel data and --pollux none".
    fails_with(
        &["themis", "--out", o, "--policies", ""],
        "--policies: expected at least one",
    );
    fails_with(
        &["themis", "--out", o, "--policies", "fair,fair"],
        "`fair` is named twice",
    );
}

#[test]
fn experiment_outputs_fail_first_and_leave_old_results_alone() {
    // Was: 20 s of simulation, then results.md written over, then
    // "error: Is a directory (os error 21)" with no path.
    for (what, file) in [("slaq", "quality.svg"), ("themis", "themis.svg")] {
        let dir_tmp = tmp_dir(&format!("exp-{what}"));
        let dir = dir_tmp.path();
        std::fs::write(dir.join("results.md"), "old results\n").unwrap();
        std::fs::create_dir(dir.join(file)).unwrap();
        let out = lab_out(&[what, "--out", dir.to_str().unwrap()]);
        fails_with_out(
            &out,
            what,
            &format!("{}: it is a folder", dir.join(file).display()),
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("results.md")).unwrap(),
            "old results\n"
        );
        let mut want = vec![file.to_string(), "results.md".into()];
        want.sort();
        assert_eq!(files_in(dir), want);
    }
}

#[test]
fn experiment_defaults_write_outside_the_committed_results() {
    // Was: `pacer experiment slaq` (as the README showed it; now `pacer-lab slaq`) overwrote the
    // committed experiments/slaq/. Run from a scratch folder holding a copy of
    // the committed layout: the default must not touch experiments/.
    let dir_tmp = tmp_dir("exp-default");
    let dir = dir_tmp.path();
    std::fs::create_dir_all(dir.join("experiments/slaq")).unwrap();
    std::fs::write(dir.join("experiments/slaq/results.md"), "committed\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pacer-lab"))
        .args(["slaq", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("[default: pacer-out/experiment-slaq]"),
        "{help}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pacer-lab"))
        .args(["themis", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("[default: pacer-out/experiment-themis]"),
        "{help}"
    );
    let out = lab_in(dir, &["slaq", "--jobs", "20"]);
    assert_ok(&out);
    assert_eq!(
        std::fs::read_to_string(dir.join("experiments/slaq/results.md")).unwrap(),
        "committed\n"
    );
    assert_eq!(
        files_in(&dir.join("pacer-out/experiment-slaq")),
        vec!["quality.svg", "results.json", "results.md"]
    );
    let md = std::fs::read_to_string(dir.join("pacer-out/experiment-slaq/results.md")).unwrap();
    assert!(
        md.contains("Regenerate: `pacer-lab slaq --out pacer-out/experiment-slaq"),
        "{md}"
    );
}
