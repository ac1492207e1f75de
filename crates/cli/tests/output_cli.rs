//! Output a person can read and errors that don't lie (issue #19), through the real
//! binary: stdout write errors, files written whole or not at all with their path
//! in every error, experiment outputs outside the source tree, integer limits,
//! non-finite numbers, infeasible recommendations, and the `simulate` table.
//!
//! `PACER_TEST_BIN=/path/to/pacer` runs these against another build (e.g. the
//! release binary from before a fix, to see a test fail).

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};

fn repo_path(p: &str) -> String {
    repo().join(p).to_str().unwrap().to_string()
}

// ------------------------------------------------------------------ 1. stdout

/// The offline commands, each with arguments that succeed.
fn offline_commands() -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let app = repo_path("crates/sim/data/pollux/cifar10");
    let scenario = repo_path("scenarios/worker/static_6_6_4_32.json");
    vec![
        s(&["simulate", "--policy", "fifo"]),
        s(&["simulate", "--policy", "fifo", "--json"]),
        s(&["batching", "eval", "--scenario", &scenario]),
        s(&["batching", "bench", "--workers", "10", "--reps", "2"]),
        s(&[
            "batching",
            "mixed",
            &repo_path("examples/mixed/two-types.json"),
        ]),
        s(&[
            "fit",
            "--placements",
            &format!("{app}/placements.csv"),
            "--model",
            "pollux",
        ]),
        s(&["recommend", "--app", &app, "--slo-s", "36000"]),
        s(&["recommend", "--app", &app, "--slo-s", "36000", "--json"]),
        s(&[
            "bench", "round", "--jobs", "10", "--gpus", "16", "--policy", "fifo",
        ]),
        s(&["bench", "simulate", "--policy", "fifo", "--repeat", "1"]),
        s(&[
            "train",
            "--dataset",
            "tiny",
            "--workers",
            "2",
            "--max-iterations",
            "20",
        ]),
    ]
}

#[test]
fn stdout_that_cannot_be_written_is_an_error_not_a_panic() {
    // Was: "thread 'main' panicked … failed printing to stdout: No space left on
    // device", exit 101.
    for args in offline_commands() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let out = Command::new(bin())
            .args(&args)
            .current_dir(repo())
            .stdout(full)
            .output()
            .unwrap();
        let err = fails_with(&out, "cannot write to standard output");
        assert!(err.contains("No space left"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    }
}

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    // `pacer simulate --json | true`: the reader is gone before the first write.
    // Documented behaviour: the process ends quietly (SIGPIPE on Unix, as `cat`
    // or `seq` do; exit 0 where there is no SIGPIPE), with nothing on stderr.
    let mut child = Command::new(bin())
        .args(["simulate", "--policy", "fifo,fair", "--json"])
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty(), "stderr: {err}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{:?}",
            out.status
        );
    }
}

#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13
}

// ------------------------------------------------------------- 2. files written

#[test]
fn simulate_out_fails_before_writing_when_a_target_is_a_folder() {
    // Was: the CSVs written, then "error: plot: backend error: Drawing backend
    // error: Is a directory (os error 21)" — no path, and a half-written --out.
    let dir = tmp_dir("output", "sim-out");
    std::fs::create_dir(dir.join("allocation.svg")).unwrap();
    let d = dir.to_str().unwrap();
    let out = pacer(&["simulate", "--policy", "fifo", "--out", d]);
    let err = fails_with(&out, &dir.join("allocation.svg").display().to_string());
    assert!(err.contains("it is a folder"), "{err}");
    assert_eq!(
        files_in(&dir),
        vec!["allocation.svg"],
        "nothing else written"
    );
    // A CSV target that is a folder, likewise.
    let dir = tmp_dir("output", "sim-out-csv");
    std::fs::create_dir(dir.join("workload-1-fifo-timeline.csv")).unwrap();
    let out = pacer(&[
        "simulate",
        "--policy",
        "fifo",
        "--out",
        dir.to_str().unwrap(),
    ]);
    fails_with(&out, "workload-1-fifo-timeline.csv: it is a folder");
    assert_eq!(files_in(&dir), vec!["workload-1-fifo-timeline.csv"]);
}

#[test]
fn simulate_out_writes_whole_files_and_no_temporaries() {
    let dir = tmp_dir("output", "sim-out-ok");
    let out = pacer(&[
        "simulate",
        "--policy",
        "fifo",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_ok(&out);
    assert_eq!(
        files_in(&dir),
        vec![
            "allocation.svg",
            "workload-1-fifo-jobs.csv",
            "workload-1-fifo-timeline.csv"
        ]
    );
    let svg = std::fs::read_to_string(dir.join("allocation.svg")).unwrap();
    assert!(svg.trim_end().ends_with("</svg>"), "complete SVG");
    let jobs = std::fs::read_to_string(dir.join("workload-1-fifo-jobs.csv")).unwrap();
    assert_eq!(jobs.lines().count(), 161, "header + 160 jobs");
}

#[test]
fn simulate_out_under_a_file_names_the_file() {
    let dir = tmp_dir("output", "sim-out-file");
    let file = dir.join("plain");
    std::fs::write(&file, "x").unwrap();
    let target = file.join("sub");
    let out = pacer(&[
        "simulate",
        "--policy",
        "fifo",
        "--out",
        target.to_str().unwrap(),
    ]);
    fails_with(&out, &format!("{} is a file", file.display()));
}

#[test]
fn validate_markdown_under_a_file_names_the_path() {
    let dir = tmp_dir("output", "validate-md");
    std::fs::write(dir.join("plain"), "x").unwrap();
    let target = dir.join("plain").join("out.md");
    let out = pacer(&["validate", "pollux", "--markdown", target.to_str().unwrap()]);
    fails_with(&out, &target.display().to_string());
}

// ------------------------------------------------------- 4. whole-number limits

fn tmp_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn whole_numbers_too_large_are_not_called_not_whole() {
    // Was "COUNT is not a whole number" / "`…` is not a whole number ≥ 1" for
    // values that are whole but beyond the type.
    let err = fails_with(
        &pacer(&["simulate", "--cluster", "99999999999x4:t4"]),
        "COUNT `99999999999` is too large (at most 4294967295)",
    );
    assert!(!err.contains("not a whole number"), "{err}");
    fails_with(
        &pacer(&["simulate", "--cluster", "4x4.5:t4"]),
        "GPUS `4.5` is not a whole number",
    );
    let dir = tmp_dir("output", "whole");
    let head = "name,time,application,num_replicas,batch_size\n";
    for (value, needle) in [
        (
            "99999999999",
            "column `num_replicas`: `99999999999` is too large (at most 4294967295)",
        ),
        ("0", "column `num_replicas`: `0` must be ≥ 1"),
        ("-2", "column `num_replicas`: `-2` must be ≥ 1"),
        ("two", "column `num_replicas`: `two` is not a whole number"),
    ] {
        let w = tmp_file(&dir, "w.csv", &format!("{head}a,0,cifar10,{value},256\n"));
        fails_with(
            &pacer(&["simulate", "--workload", &w]),
            &format!("{w}:2: {needle}"),
        );
    }
    fails_with(
        &pacer(&["simulate", "--trace", "synthetic:99999999999999999999999"]),
        "is too large (at most 18446744073709551615)",
    );
    // Step-time tables (pacer-model's profile parser).
    let s = tmp_file(
        &dir,
        "scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,5000000000,32,0.04,0.0005\n",
    );
    let p = repo_path("crates/sim/data/pollux/cifar10/placements.csv");
    fails_with(
        &pacer(&["fit", "--placements", &p, "--scalability", &s]),
        &format!("{s}:2: column `num_replicas`: `5000000000` is too large (at most 4294967295)"),
    );
    // Gavel traces' scale factor.
    let t = tmp_file(
        &dir,
        "g.trace",
        "ResNet-18 (batch size 16)\tcmd\t-n\t1\t100\t0\t9999999999\n",
    );
    let tp = repo_path("data/gavel/simulation_throughputs.json");
    fails_with(
        &pacer(&[
            "simulate",
            "--trace",
            &format!("gavel:{t}"),
            "--gavel-throughputs",
            &tp,
        ]),
        &format!("{t}:1: column `scale_factor`: `9999999999` is too large (at most 4294967295)"),
    );
}

// ------------------------------------------------------ 5. finite numbers only

#[test]
fn batching_scenarios_with_extreme_speeds_are_refused_by_field() {
    // Was: rows of `inf` / `NaN` with exit 0.
    let dir = tmp_dir("output", "scenario");
    let cases = [
        (
            r#"{"samples_per_s": 1e-308}"#,
            "field `workers[0].samples_per_s`: must be in [1e-6, 1e12] samples/s, got 1e-308",
        ),
        (
            r#"{"samples_per_s": 1e300}"#,
            "field `workers[0].samples_per_s`: must be in [1e-6, 1e12] samples/s",
        ),
        (
            r#"{"curve": [[1, 1e-300], [2, 1e300]]}"#,
            "field `workers[0].curve[0][1]`: seconds must be in [1e-9, 1e6] s",
        ),
        (
            r#"{"samples_per_s": 10, "interference": [{"start": 0, "end": 5, "slowdown": 1e300}]}"#,
            "field `workers[0].interference[0].slowdown`: must be in [1e0, 1e6]",
        ),
        (
            r#"{"samples_per_s": 10, "drift": {"start": 0, "end": 5, "slowdown": 1e-300}}"#,
            "field `workers[0].drift.slowdown`: must be in [1e-6, 1e6]",
        ),
    ];
    for (worker, needle) in cases {
        let f = tmp_file(
            &dir,
            "s.json",
            &format!(
                r#"{{"global_batch": 64, "iterations": 20, "seed": 1, "workers": [{worker}, {{"samples_per_s": 100}}]}}"#
            ),
        );
        let out = pacer(&["batching", "eval", "--scenario", &f, "--controller", "all"]);
        fails_with(&out, &format!("{f}: {needle}"));
        assert!(out.stdout.is_empty(), "no rows printed");
    }
    let f = tmp_file(
        &dir,
        "s.json",
        r#"{"global_batch": 64, "iterations": 20, "seed": 1, "sync_s": 1e308, "workers": [{"samples_per_s": 100}]}"#,
    );
    fails_with(
        &pacer(&["batching", "eval", "--scenario", &f]),
        "field `sync_s`: must be in [0e0, 1e6] s, got 1e308",
    );
    // The extremes of the ranges still give finite rows.
    let f = tmp_file(
        &dir,
        "s.json",
        r#"{"global_batch": 9007199254740992, "iterations": 20, "seed": 1, "sync_s": 1e6,
            "workers": [{"samples_per_s": 1e-6, "interference": [{"start": 0, "end": 20, "slowdown": 1e6}],
                         "drift": {"start": 0, "end": 2, "slowdown": 1e6}, "noise": 2},
                        {"samples_per_s": 1e12}]}"#,
    );
    let out = pacer(&[
        "batching",
        "eval",
        "--scenario",
        &f,
        "--controller",
        "all",
        "--predictor",
        "all",
    ]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("inf") && !text.contains("NaN"), "{text}");
}

#[test]
fn recommend_without_an_answer_fails() {
    let app = repo_path("crates/sim/data/pollux/cifar10");
    // Was: "no configuration meets …" on stderr, nothing on stdout, exit 0.
    for objective in ["accuracy", "time"] {
        let out = pacer(&[
            "recommend",
            "--app",
            &app,
            "--slo-s",
            "10",
            "--objective",
            objective,
        ]);
        fails_with(&out, "no configuration meets --slo-s 10");
        assert!(out.stdout.is_empty());
    }
    // Was: "cost $0.00" for every configuration.
    let out = pacer(&[
        "recommend",
        "--app",
        &app,
        "--slo-s",
        "36000",
        "--objective",
        "cost",
    ]);
    fails_with(
        &out,
        "--objective cost: no prices given; add --price TYPE=USD_PER_GPU_H",
    );
    // Without prices, other objectives print no made-up cost.
    let out = pacer(&["recommend", "--app", &app, "--slo-s", "36000"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("$0.00"), "{text}");
    assert!(text.contains("cost - (no --price)"), "{text}");
    let out = pacer(&[
        "recommend",
        "--app",
        &app,
        "--slo-s",
        "36000",
        "--objective",
        "cost",
        "--price",
        "t4=0.53",
    ]);
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("cost $0.41"));
}

// ------------------------------------------------------- 6. the simulate table

#[test]
fn simulate_help_defines_every_column_and_lists_every_policy() {
    let out = pacer(&["simulate", "--help"]);
    assert_ok(&out);
    let help = String::from_utf8_lossy(&out.stdout);
    // Every registered policy, each with a line carrying its registry entry's summary
    // (the help is built from pacer_policy::POLICIES, not written beside it).
    for e in &pacer_policy::POLICIES {
        let line = help
            .lines()
            .find(|l| {
                l.trim_start()
                    .trim_start_matches('+')
                    .starts_with(&format!("{} ", e.name))
            })
            .unwrap_or_else(|| panic!("--help lists no `{}`: {help}", e.name));
        let first_words: String = e
            .summary
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            line.contains(&first_words),
            "`{}`'s help line does not carry its registry summary `{first_words}`: {line}",
            e.name
        );
        if let Some(k) = e.knob {
            assert!(help.contains(k), "--help lacks the knob `{k}`: {help}");
        }
    }
    // Every column of the table has a definition line.
    let table =
        String::from_utf8_lossy(&pacer(&["simulate", "--policy", "fifo"]).stdout).to_string();
    let header = table
        .lines()
        .find(|l| l.starts_with("workload "))
        .expect("header");
    for col in header.split_whitespace().skip(2) {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{col} "))),
            "column `{col}` is not defined in --help: {help}"
        );
    }
}

#[test]
fn simulate_marks_policies_that_cannot_act_and_says_why_once() {
    // Was: a stderr note for SLAQ only, identical gavel rows unexplained.
    let out = pacer(&["simulate"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty(), "{err}");
    let row = |p: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(p))
            .unwrap_or_else(|| panic!("no row `{p}`: {text}"))
            .to_string()
    };
    // Rows without wall_ms (the last column).
    let numbers = |l: String| {
        let f: Vec<String> = l.split_whitespace().skip(2).map(String::from).collect();
        f[..f.len() - 1].to_vec()
    };
    assert_eq!(numbers(row("slaq*")), numbers(row("fair")));
    assert_eq!(numbers(row("gavel-ftf*")), numbers(row("gavel-maxmin")));
    for (p, why) in [
        ("slaq", "these jobs carry none"),
        ("gavel-ftf", "one speed on every device type"),
    ] {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("* {p}:")))
            .collect();
        assert_eq!(lines.len(), 1, "one footnote for {p}: {text}");
        assert!(lines[0].contains(why), "{text}");
    }
    assert_eq!(
        text.matches('*').count(),
        4,
        "two rows, two footnotes: {text}"
    );
    // Two device types but jobs with one speed on both: still the same rows.
    let out = pacer(&[
        "simulate",
        "--policy",
        "gavel-maxmin,gavel-ftf",
        "--cluster",
        "8x4:t4,8x4:v100",
        "--trace",
        "synthetic-philly:40",
    ]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gavel-ftf*"), "{text}");
}

#[cfg(unix)]
#[test]
fn a_write_that_fails_midway_leaves_no_partial_file() {
    // A file-size limit of 1 KiB (SIGXFSZ ignored, so write() fails with EFBIG)
    // makes the 160-job CSV fail part-way. Was: a 1 KiB truncated CSV left in
    // --out. Now: the error names the file, and neither it nor a temporary is left.
    let dir = tmp_dir("output", "sim-out-efbig");
    let script = format!(
        "trap '' XFSZ; ulimit -f 1; exec '{}' simulate --policy fifo --out '{}'",
        bin().display(),
        dir.display()
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(repo())
        .output()
        .unwrap();
    let err = fails_with(
        &out,
        &format!(
            "cannot write {}",
            dir.join("workload-1-fifo-jobs.csv").display()
        ),
    );
    assert!(err.contains("File too large"), "{err}");
    assert_eq!(files_in(&dir), Vec::<String>::new(), "nothing half-written");
}
