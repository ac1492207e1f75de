//! Hardening issue #19: simulator inputs that hung, ran for minutes, or ran
//! silently on numbers measured for another device type.

mod common;

use common::Scratch;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs `pacer` with a time limit: a hang fails the test instead of the suite.
fn pacer_within(limit_s: u64, args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pacer runs");
    common::wait_bounded(child, Duration::from_secs(limit_s))
        .unwrap_or_else(|_| panic!("pacer {args:?} still running after {limit_s} s"))
}

/// A file `name` holding `text` in a fresh scratch folder, removed when the guard drops.
fn tmp(name: &str, text: &str) -> Scratch {
    Scratch::file("sim-defects", name, text)
}

fn assert_clean_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert!(
        err.contains(needle),
        "stderr should contain `{needle}`: {err}"
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error")).count(),
        1,
        "one error line: {err}"
    );
}

const HEADER: &str = "name,time,application,num_replicas,batch_size\n";

/// `num_replicas` above 2^31 hung every policy (growing memory); 100 k or 10 M
/// replicas on 64 GPUs took 30 s to minutes. Now: one error before any run.
#[test]
fn requests_beyond_the_cluster_are_refused_at_once() {
    for req in ["2147483649", "4294967295", "10000000", "100000", "65"] {
        let w = tmp(
            &format!("huge-{req}.csv"),
            &format!("{HEADER}small,0,cifar10,2,256\nhuge,30,cifar10,{req},256\n"),
        );
        let out = pacer_within(
            60,
            &["simulate", "--workload", w.to_str().unwrap(), "--json"],
        );
        assert_clean_error(
            &out,
            &format!(
                "--workload {} on --cluster 16x4:t4: job `huge` (application `cifar10`) asks \
                 for {req} devices; the cluster has 64 it can run on (t4)",
                w.display()
            ),
        );
    }
    // Exactly the cluster's size is fine.
    let w = tmp("whole.csv", &format!("{HEADER}whole,0,cifar10,8,256\n"));
    let out = pacer_within(
        120,
        &[
            "simulate",
            "--workload",
            w.to_str().unwrap(),
            "--cluster",
            "2x4:t4",
            "--policy",
            "fifo,pollux",
            "--json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The embedded Pollux applications were measured on T4 only; a V100/K80 cluster
/// (a former README example) gave T4's numbers under other labels, and an unknown
/// type was accepted.
#[test]
fn pollux_apps_run_only_on_the_types_they_were_measured_on() {
    for (cluster, types, them) in [
        ("8x4:v100,8x4:k80", "types v100, k80", "them"),
        ("4x4:unknowngpu", "type unknowngpu", "it"),
        ("4x4:t4,4x4:v100", "type v100", "it"),
    ] {
        let out = pacer_within(60, &["simulate", "--cluster", cluster, "--policy", "fifo"]);
        assert_clean_error(
            &out,
            &format!(
                "--workload embedded:workload-1 on --cluster {cluster}: device {types} in the \
                 cluster: no job of the workload has measurements for {them}; the workload's \
                 jobs were measured on t4"
            ),
        );
    }
    // Upper-case T4 is T4.
    let w = tmp("t4.csv", &format!("{HEADER}a,0,cifar10,2,256\n"));
    let out = pacer_within(
        60,
        &[
            "simulate",
            "--workload",
            w.to_str().unwrap(),
            "--cluster",
            "2x4:T4",
            "--policy",
            "fifo",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Gavel job runs at its throughput on each type it was measured on, and only
/// there (it ran on the default T4 cluster at V100 speed); `--gavel-device` pins
/// it to one of them.
#[test]
fn gavel_durations_hold_on_their_device_type_only() {
    let t = tmp(
        "tput.json",
        r#"{"v100": {"('A (batch size 1)', 1)": {"null": 2.0}},
            "k80": {"('A (batch size 1)', 1)": {"null": 0.5}}}"#,
    );
    let g = tmp("g.trace", "A (batch size 1)\tcmd\t-n\t1\t100\t0\t1\n");
    let trace = format!("gavel:{}", g.display());
    let base = [
        "simulate",
        "--trace",
        &trace,
        "--gavel-throughputs",
        t.to_str().unwrap(),
        "--policy",
        "fifo",
    ];
    let out = pacer_within(60, &base);
    assert_clean_error(
        &out,
        "on --cluster 16x4:t4: device type t4 in the cluster: no job of the workload has \
         measurements for it; the workload's jobs were measured on k80, v100",
    );
    let mut pinned = base.to_vec();
    pinned.extend(["--cluster", "1x4:v100,1x4:k80", "--gavel-device", "v100"]);
    assert_clean_error(
        &pacer_within(60, &pinned),
        "device type k80 in the cluster: no job of the workload has measurements for it; \
         the workload's jobs were measured on v100",
    );
    for (cluster, device) in [("1x4:v100", "v100"), ("1x4:k80", "k80")] {
        let mut args = base.to_vec();
        args.extend(["--cluster", cluster, "--gavel-device", device, "--json"]);
        let out = pacer_within(60, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
