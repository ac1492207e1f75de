//! End-to-end tests of `pacer simulate` through the real binary: the JSON keys
//! users script against, and one clear error (exit code ≠ 0, no panic) for every
//! kind of bad input.

mod common;

use common::Scratch;
use std::process::{Command, Output};

fn pacer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .output()
        .expect("pacer runs")
}

/// A file `name` holding `text` in a fresh scratch folder, removed when the guard drops.
fn tmp(name: &str, text: &str) -> Scratch {
    Scratch::file("cli-test", name, text)
}

const SMALL: &str = "name,time,application,num_replicas,batch_size\n\
cifar10-0,0,cifar10,2,256\nbert-1,30,bert,1,12\nncf-2,100,ncf,1,32768\ncifar10-3,400,cifar10,4,512\n";

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

#[test]
fn json_has_the_documented_keys_for_every_policy() {
    let w = tmp("small.csv", SMALL);
    let out = pacer(&[
        "simulate",
        "--workload",
        w.to_str().unwrap(),
        "--cluster",
        "2x4:t4",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), pacer_policy::default_policy_names().count());
    for r in rows {
        for key in [
            "policy",
            "avg_jct_s",
            "p99_jct_s",
            "makespan_s",
            "max_ftf_rho",
            "avg_ftf_rho",
            "utilization",
            "jobs",
            "wall_ms",
        ] {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert_eq!(r["jobs"], 4);
        assert_eq!(r["finished"], 4);
        let u = r["utilization"].as_f64().unwrap();
        assert!(u > 0.0 && u <= 1.0, "{u}");
    }
}

#[test]
fn out_dir_gets_csvs_and_a_plot() {
    let w = tmp("small2.csv", SMALL);
    let scratch = Scratch::dir("cli-out");
    let dir = scratch.join("out");
    let out = pacer(&[
        "simulate",
        "--workload",
        w.to_str().unwrap(),
        "--cluster",
        "2x4:t4",
        "--policy",
        "fair",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs = std::fs::read_to_string(dir.join("small2-fair-jobs.csv")).unwrap();
    assert!(jobs.starts_with("name,application,arrival_s"));
    assert_eq!(jobs.lines().count(), 5);
    let svg = std::fs::read_to_string(dir.join("allocation.svg")).unwrap();
    assert!(svg.contains("<svg"));
}

#[test]
fn malformed_workload_line_is_named() {
    let w = tmp(
        "bad.csv",
        "name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\nb,x,cifar10,1,128\n",
    );
    let out = pacer(&["simulate", "--workload", w.to_str().unwrap()]);
    assert_clean_error(&out, "bad.csv:3: column `time`");
}

#[test]
fn unknown_application_is_named() {
    let w = tmp(
        "app.csv",
        "name,time,application,num_replicas,batch_size\na,0,gpt5,1,128\n",
    );
    let out = pacer(&["simulate", "--workload", w.to_str().unwrap()]);
    assert_clean_error(
        &out,
        "app.csv:2: unknown application `gpt5`; expected one of bert",
    );
}

#[test]
fn unknown_policy_and_bad_cluster_and_trace_kind() {
    assert_clean_error(
        &pacer(&["simulate", "--policy", "fifo,sjf"]),
        "--policy: unknown policy `sjf`",
    );
    // A misspelt name gets the closest registered one.
    assert_clean_error(
        &pacer(&["simulate", "--policy", "tiresais"]),
        "--policy: unknown policy `tiresais` (did you mean `tiresias`?)",
    );
    assert_clean_error(
        &pacer(&["simulate", "--policy", "themis-g0.5"]),
        "(did you mean `themis`?)",
    );
    assert_clean_error(
        &pacer(&["simulate", "--cluster", "16x:t4"]),
        "--cluster: bad node group `16x:t4`",
    );
    assert_clean_error(
        &pacer(&["simulate", "--trace", "alibaba:x.csv"]),
        "unknown kind `alibaba`",
    );
    assert_clean_error(
        &pacer(&["simulate", "--trace", "philly:/no/such/file.csv"]),
        "cannot read /no/such/file.csv",
    );
    assert_clean_error(&pacer(&["simulate", "--round-s", "0"]), "--round-s");
    assert_clean_error(&pacer(&["simulate", "--restart-s=-1"]), "--restart-s");
    assert_clean_error(&pacer(&["simulate", "--restart-s", "NaN"]), "--restart-s");
    assert_clean_error(
        &pacer(&["simulate", "--workload", "embedded:workload-9"]),
        "unknown embedded workload",
    );
}

#[test]
fn cluster_toml_file() {
    let c = tmp("c.toml", "[[nodes]]\ncount = 1\ngpus = 4\ntype = \"V100\"\n\n[[nodes]]\ncount = 1\ngpus = 2\ntype = \"k80\"\n");
    // Duration-only jobs: they run on any device type (the Pollux applications were
    // measured on T4 only and are refused on V100/K80).
    let w = tmp(
        "toml-philly.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n\
         2017-10-09 07:03:00,600,4,2400,a\n",
    );
    let out = pacer(&[
        "simulate",
        "--trace",
        &format!("philly:{}", w.display()),
        "--cluster",
        c.to_str().unwrap(),
        "--policy",
        "fifo",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("cluster 1x4:v100,1x2:k80 (6 devices)"),
        "{text}"
    );
    let bad = tmp(
        "bad.toml",
        "[[nodes]]\ncount = 1\ngpu = 4\ntype = \"v100\"\n",
    );
    assert_clean_error(
        &pacer(&["simulate", "--cluster", bad.to_str().unwrap()]),
        "bad.toml:",
    );
    let zero = tmp(
        "zero.toml",
        "[[nodes]]\ncount = 0\ngpus = 4\ntype = \"v100\"\n",
    );
    assert_clean_error(
        &pacer(&["simulate", "--cluster", zero.to_str().unwrap()]),
        "counts must be ≥ 1",
    );
}

#[test]
fn malformed_philly_and_gavel_lines_are_named() {
    let p = tmp("philly.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 07:01:55,-3,1,66.0,a\n");
    assert_clean_error(
        &pacer(&["simulate", "--trace", &format!("philly:{}", p.display())]),
        "philly.csv:3: column `duration`",
    );
    let t = tmp(
        "tput.json",
        r#"{"v100": {"('A (batch size 1)', 1)": {"null": 2.0}}}"#,
    );
    let g = tmp(
        "g.trace",
        "A (batch size 1)\tcmd\t-n\t1\t100\t0\t1\nA (batch size 1)\tcmd\t-n\t1\t100\t0\n",
    );
    let out = pacer(&[
        "simulate",
        "--trace",
        &format!("gavel:{}", g.display()),
        "--gavel-throughputs",
        t.to_str().unwrap(),
    ]);
    assert_clean_error(&out, "g.trace:2: has 6 tab-separated fields; expected 7");
}
