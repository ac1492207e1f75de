//! Bad input to every subcommand, through the real binary: one clear error that
//! names the flag or file at fault, exit code ≠ 0, no panic, no hang, nothing run
//! or written before the error. Each case here once panicked, hung, aborted on a
//! failed allocation, ran on nonsense or named the wrong place.

mod common;

use common::Scratch;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs pacer; kills it after 60 s (a hang is a failure, not a stuck test run).
fn pacer(args: &[&str]) -> Output {
    let child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pacer runs");
    common::wait_bounded(child, Duration::from_secs(60)).unwrap_or_else(|out| {
        panic!(
            "pacer {args:?} hung; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A fresh scratch folder, removed when the returned guard drops.
fn tmp_dir(name: &str) -> Scratch {
    Scratch::dir(&format!("bad-input-{name}"))
}

/// A file `name` holding `text` in a fresh scratch folder, removed when the guard drops.
fn tmp(name: &str, text: &str) -> Scratch {
    Scratch::file("bad-input", name, text)
}

/// An interference file describing a single worker (slowdown 2 on iterations 1–4).
fn one_worker_plan(name: &str) -> Scratch {
    tmp(
        name,
        r#"{"workers": [{"interference": [{"start": 1, "end": 5, "slowdown": 2}]}]}"#,
    )
}

/// Fails unless the command succeeded, showing its stderr.
fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fails unless `args` exit ≠ 0 with exactly one `error` line containing `needle`.
fn fails_with(args: &[&str], needle: &str) -> String {
    let out = pacer(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "pacer {args:?}: expected failure; stderr: {err}"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "pacer {args:?}: exit code (101 = panic, none = signal/abort); stderr: {err}"
    );
    assert!(!err.contains("panicked"), "pacer {args:?}: panic: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "pacer {args:?}: one error line: {err}");
    assert!(
        errors[0].contains(needle),
        "pacer {args:?}: error should contain `{needle}`: {err}"
    );
    err
}

// ------------------------------------------------------------------- simulate

#[test]
fn simulate_round_too_short_to_advance_the_clock() {
    // Hung: `now + 1e-300 == now`.
    fails_with(
        &["simulate", "--policy", "fifo", "--round-s", "1e-300"],
        "--round-s",
    );
}

#[test]
fn simulate_arrival_rate_must_be_positive() {
    // Ran with every job "arriving" at NaN / never, printing NaN rows.
    for v in ["0", "NaN", "inf"] {
        fails_with(
            &[
                "simulate",
                "--policy",
                "fifo",
                "--trace",
                "synthetic:5",
                "--arrivals-per-hour",
                v,
            ],
            "--arrivals-per-hour",
        );
    }
}

#[test]
fn simulate_names_each_policy_and_workload_once() {
    fails_with(
        &["simulate", "--policy", "fifo,fifo"],
        "`fifo` is named twice",
    );
    // Two runs named `workload-1`: with --out the second's files replaced the first's.
    fails_with(
        &[
            "simulate",
            "--policy",
            "fifo",
            "--workload",
            "embedded:workload-1",
            "--workload",
            "embedded:workload-1",
        ],
        "workload `workload-1` is given twice",
    );
}

// ------------------------------------------------------------------- batching

#[test]
fn batching_eval_global_batch_beyond_2_pow_53() {
    // Hung in the uniform split (2^63 one-unit steps); with other minima it ran and
    // reported nonsense times.
    let s = tmp(
        "huge_batch.json",
        r#"{"global_batch": 18446744073709551615, "iterations": 5, "seed": 1,
            "workers": [{"samples_per_s": 100, "count": 3}]}"#,
    );
    fails_with(
        &[
            "batching",
            "eval",
            "--scenario",
            s.to_str().unwrap(),
            "--controller",
            "uniform",
            "--predictor",
            "last",
        ],
        "field `global_batch`",
    );
}

#[test]
fn batching_eval_names_the_flag_not_the_scenario() {
    let s = tmp(
        "ok.json",
        r#"{"global_batch": 64, "iterations": 5, "seed": 1,
            "workers": [{"samples_per_s": 100, "count": 2}]}"#,
    );
    let s = s.to_str().unwrap();
    // Was "ok.json: unknown controller ``", blaming the file.
    fails_with(
        &["batching", "eval", "--scenario", s, "--controller", ""],
        "--controller: unknown name ``",
    );
    fails_with(
        &[
            "batching",
            "eval",
            "--scenario",
            s,
            "--predictor",
            "ewma,ewma",
        ],
        "--predictor: `ewma` is named twice",
    );
}

#[test]
fn batching_bench_workers_and_reps() {
    // Panicked ("capacity overflow") or aborted on a failed allocation.
    fails_with(
        &["batching", "bench", "--workers", "18446744073709551615"],
        "--workers",
    );
    // Printed NaN µs.
    fails_with(&["batching", "bench", "--reps", "0"], "--reps");
    // Was "unknown controller `foo`" without the flag or the known names.
    fails_with(
        &["batching", "bench", "--controller", "foo"],
        "--controller: unknown controller `foo`; expected one of uniform",
    );
}

#[test]
fn batching_mixed_files() {
    let good = r#"{"type": "t4", "replicas": 2, "max_atomic": 64, "perf": {"alpha_c": 0.01, "beta_c": 0.001, "alpha_n": 0.02, "beta_n": 0.001, "alpha_r": 0.005, "beta_r": 0.0005, "gamma": 1.5}}"#;
    let bad_gamma = good.replace("\"gamma\": 1.5", "\"gamma\": 0.5");
    let cases = [
        (
            "missing",
            r#"{"nodes": 1, "groups": []}"#.to_string(),
            "missing field `global_batch`",
        ),
        (
            "nodes",
            format!(r#"{{"nodes": 3, "global_batch": 64, "groups": [{good}]}}"#),
            "nodes: expected 1 to 2",
        ),
        (
            "caps",
            format!(r#"{{"nodes": 1, "global_batch": 64, "min_local": 40, "groups": [{good}]}}"#),
            "global_batch: 64 is below the sum of the workers' min_batch (80)",
        ),
        (
            "gamma",
            format!(r#"{{"nodes": 1, "global_batch": 64, "groups": [{bad_gamma}]}}"#),
            "groups[0]: gamma must be finite and ≥ 1",
        ),
        (
            "extra",
            format!(r#"{{"nodes": 1, "global_batch": 64, "groups": [{good}], "speed": 2}}"#),
            "unknown field `speed`",
        ),
    ];
    for (name, text, needle) in cases {
        let f = tmp(&format!("mixed-{name}.json"), &text);
        let path = f.to_str().unwrap();
        fails_with(&["batching", "mixed", path], &format!("{path}: {needle}"));
    }
    fails_with(
        &["batching", "mixed", "/nonexistent/mixed.json"],
        "/nonexistent/mixed.json",
    );
}

// ------------------------------------------------------------------- bench

#[test]
fn bench_round_and_simulate_counts() {
    // Panicked ("capacity overflow").
    fails_with(
        &[
            "bench",
            "round",
            "--jobs",
            "18446744073709551615",
            "--gpus",
            "16",
        ],
        "--jobs",
    );
    // Printed NaN for the warm round.
    fails_with(
        &[
            "bench", "round", "--jobs", "10", "--gpus", "16", "--rounds", "0",
        ],
        "--rounds",
    );
    // Silently ran once.
    fails_with(&["bench", "simulate", "--repeat", "0"], "--repeat");
}

// ------------------------------------------------------------------- recommend

#[test]
fn recommend_flags_are_checked() {
    let app = tmp_dir("no-app");
    let app = app.to_str().unwrap();
    let base = ["recommend", "--app", app, "--slo-s", "3600"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    // Ran with 0, negative or NaN epochs (negative predicted times).
    for e in ["0", "NaN", "inf", "-3"] {
        let flag = format!("--epochs={e}");
        let args: Vec<&str> = base.iter().copied().chain([flag.as_str()]).collect();
        fails_with(&args, "--epochs");
    }
    // Printed NaN costs and times.
    fails_with(&with(&["--price", "t4=1:inf"]), "--price t4=1:inf");
    fails_with(&with(&["--price", "t4=inf"]), "--price t4=inf");
    // Which of the two prices held was unspecified.
    fails_with(
        &with(&["--price", "t4=1", "--price", "t4=2"]),
        "`t4` is priced twice",
    );
    fails_with(&with(&["--max-replicas", "0"]), "--max-replicas");
}

// ------------------------------------------------------------------- validate

#[test]
fn validate_names_the_results_file() {
    let data = tmp_dir("pollux-data");
    let dir = data.join("results-jobload").join("tiresias-1.0");
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("summary.json");
    let d = data.to_str().unwrap();
    // A zero mean gave an infinite difference.
    std::fs::write(&summary, r#"{"avgs": {"workload-1": 0}}"#).unwrap();
    fails_with(
        &["validate", "pollux", "--data", d],
        "summary.json: avgs.workload-1",
    );
    // Was "workload-1: Pollux's results cover 0 jobs", naming no file.
    std::fs::write(&summary, r#"{"avgs": {"workload-1": 3600}}"#).unwrap();
    fails_with(
        &["validate", "pollux", "--data", d],
        "summary.json: no `jcts.workload-1` object",
    );
}

// ------------------------------------------------------------------- runtime

const TINY: [&str; 4] = ["--dataset", "tiny", "--no-progress", "--normal-priority"];

fn train(extra: &[&str]) -> Vec<String> {
    ["train"]
        .iter()
        .chain(TINY.iter())
        .chain(extra.iter())
        .map(|s| s.to_string())
        .collect()
}

fn train_fails(extra: &[&str], needle: &str) {
    let args = train(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails_with(&args, needle);
}

#[test]
fn train_timeouts_and_limits() {
    // NaN, negative and huge timeouts panicked in Duration::from_secs_f64; 0 hung
    // (every worker declared dead, then a wait for joins).
    for v in ["NaN", "-1", "1e300", "0"] {
        train_fails(&[&format!("--worker-timeout-s={v}")], "--worker-timeout-s");
    }
    // Trained 0 iterations and printed an efficiency of 0.
    train_fails(&["--max-time-s=-1"], "--max-time-s");
    train_fails(&["--max-time-s", "NaN"], "--max-time-s");
    train_fails(&["--max-iterations", "0"], "--max-iterations");
    // Accepted and used.
    train_fails(&["--optimizer", "sgd", "--momentum", "NaN"], "--momentum");
}

#[test]
fn controller_join_timeout() {
    // Panicked in Duration::from_secs_f64 after printing "listening".
    for v in ["NaN", "-1"] {
        let t = format!("--join-timeout-s={v}");
        let err = fails_with(
            &[
                "controller",
                "--listen",
                "127.0.0.1:0",
                "--dataset",
                "tiny",
                "--normal-priority",
                &t,
            ],
            "--join-timeout-s",
        );
        assert!(!err.contains("listening"), "{err}");
    }
    // "only 0 of the 0 workers needed joined".
    fails_with(
        &[
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--dataset",
            "tiny",
            "--min-workers",
            "0",
        ],
        "--min-workers",
    );
}

#[test]
fn train_model_and_batch_sizes() {
    // Aborted: "memory allocation of 30000000040 bytes failed".
    train_fails(&["--hidden", "100000000"], "--hidden");
    // Ran for minutes (a million centroids for 2,000 samples).
    train_fails(
        &["--model", "kmeans", "--clusters", "1000000"],
        "--clusters",
    );
    // Hung splitting 2^64 - 1 samples.
    train_fails(
        &["--global-batch", "18446744073709551615"],
        "--global-batch",
    );
}

#[test]
fn train_libsvm_huge_index() {
    // Aborted: a dense matrix of 10^11 features.
    let f = tmp("huge.svm", "1 99999999999:0.5\n0 1:0.1\n");
    let spec = format!("libsvm:{}", f.display());
    let args: Vec<String> = ["train", "--dataset", &spec, "--model", "logreg"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails_with(&args, "line 1: index 99999999999");
}

#[test]
fn train_launch_flags() {
    // Silently ignored: slot 5 never exists with 2 workers.
    train_fails(&["--workers", "2", "--kill", "5@1"], "--kill: slot 5");
    // Was reported as "--speeds: entry 0".
    train_fails(&["--workers", "2", "--join", "1:0"], "--join: 1:0");
    // Hung until the join timeout: the worker could not bind, the controller waited.
    train_fails(
        &["--workers", "2", "--worker-ips", "192.0.2.1"],
        "--worker-ips: cannot use 192.0.2.1",
    );
}

#[test]
fn worker_flags_are_checked_before_connecting() {
    // Port 1 refuses: before, these got "connecting to controller …: Connection
    // refused", and with a controller the slot silently meant no interference.
    let plan = one_worker_plan("plan.json");
    let p = plan.to_str().unwrap();
    fails_with(
        &[
            "worker",
            "--connect",
            "127.0.0.1:1",
            "--interference",
            p,
            "--interference-slot",
            "3",
        ],
        "--interference-slot 3",
    );
    fails_with(
        &[
            "worker",
            "--connect",
            "127.0.0.1:1",
            "--interference-slot",
            "0",
        ],
        "--interference-slot: needs --interference",
    );
    fails_with(
        &["worker", "--connect", "127.0.0.1:1", "--dataset", "nope"],
        "dataset `nope`",
    );
}

#[test]
fn app_folder_errors_say_the_os_error_once() {
    // Was "…/placements.csv: No such file or directory (os error 2): No such file
    // or directory (os error 2)".
    let apps = tmp_dir("apps");
    let missing = apps.join("missing");
    let m = missing.to_str().unwrap();
    for args in [
        vec!["simulate", "--policy", "fifo", "--app-dir", m],
        vec!["recommend", "--app", m, "--slo-s", "3600"],
    ] {
        let err = fails_with(&args, "placements.csv");
        assert_eq!(err.matches("(os error 2)").count(), 1, "{err}");
    }
}

#[test]
fn output_folder_that_is_a_file_fails_before_the_runs() {
    // Reported only after every simulation ("File exists").
    let f = tmp("not-a-folder", "x");
    let f = f.to_str().unwrap();
    fails_with(
        &["simulate", "--policy", "fifo", "--out", f],
        "is a file; expected a folder",
    );
    // A CSV given as the cluster was read as a spec: "bad node group `….csv`".
    let csv = tmp("cluster.csv", "count,gpus,type\n2,4,t4\n");
    fails_with(
        &[
            "simulate",
            "--policy",
            "fifo",
            "--cluster",
            csv.to_str().unwrap(),
        ],
        "a cluster file must be TOML",
    );
}

#[test]
fn emulated_times_that_do_not_fit_are_refused() {
    // The compute thread panicked converting the padding sleep to a Duration, and
    // the run then waited for the worker.
    train_fails(&["--workers", "2", "--time-scale", "1e300"], "--speeds:");
    train_fails(
        &["--workers", "2", "--speeds", "1,1e-300"],
        "--speeds: speed 1e-300",
    );
    let plan = tmp(
        "slow.json",
        r#"{"workers": [{"interference": [{"start": 1, "end": 5, "slowdown": 1e308}]}]}"#,
    );
    train_fails(
        &["--workers", "1", "--interference", plan.to_str().unwrap()],
        "field `workers[0].interference[0].slowdown`",
    );
    fails_with(
        &["worker", "--connect", "127.0.0.1:1", "--speed", "1e-300"],
        "--speed: speed 1e-300",
    );
}

// ------------------------------------------------------------------- audit 2

/// Repository data the tests may use (not `../shared`).
fn repo_data(rel: &str) -> String {
    format!("{}/../sim/data/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn simulate_jobs_beyond_the_time_limit_are_refused() {
    // Left unfinished in silence: `0/1` (or `1/2`) and NaN columns, exit 0.
    let year_9999 = tmp(
        "late.csv",
        "timestamp,duration,num_gpus\n2017-10-09 07:01:55,66,1\n9999-10-09 07:01:55,66,1\n",
    );
    let long = tmp(
        "long.csv",
        "timestamp,duration,num_gpus\n2017-10-09 07:01:55,1e300,1\n",
    );
    let pollux = tmp(
        "late-pollux.csv",
        "name,time,application,num_replicas,batch_size\nearly,0,cifar10,1,128\nlate,1e300,cifar10,1,128\n",
    );
    for (flag, spec, needle) in [
        (
            "--trace",
            format!("philly:{}", year_9999.display()),
            "job `philly-1`: arrives at t = 2.5",
        ),
        (
            "--trace",
            format!("philly:{}", long.display()),
            "job `philly-0`: runs for 1.0",
        ),
        (
            "--workload",
            pollux.display().to_string(),
            "job `late`: arrives at t = 1.0",
        ),
    ] {
        let err = fails_with(&["simulate", "--policy", "fifo", flag, &spec], needle);
        assert!(
            err.contains(&format!("{flag} {spec}")),
            "names the flag: {err}"
        );
        assert!(
            err.contains("time limit (max_time_s) of 34560000 s (400 days)"),
            "{err}"
        );
    }
}

#[test]
fn controller_prints_the_port_the_os_chose() {
    use std::io::{BufRead, BufReader};
    // Printed "listening on 127.0.0.1:0": no worker could find it.
    let mut child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args([
            "controller",
            "--listen",
            "127.0.0.1:0",
            "--dataset",
            "tiny",
            "--normal-priority",
            "--no-progress",
            "--join-timeout-s",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pacer runs");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next().expect("a line").expect("utf-8");
    let addr = line
        .strip_prefix("pacer controller: listening on ")
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("{line}"));
    let addr: std::net::SocketAddr = addr.parse().unwrap_or_else(|_| panic!("{line}"));
    assert_ne!(addr.port(), 0, "{line}");
    let connected = std::net::TcpStream::connect(addr);
    child.kill().ok();
    child.wait().ok();
    connected.unwrap_or_else(|e| panic!("{line}: cannot connect: {e}"));
}

/// No number printed with dozens of digits (Rust's plain form of 1e-300).
fn assert_readable(text: &str) {
    let mut run = 0;
    for c in text.chars() {
        run = if c.is_ascii_digit() { run + 1 } else { 0 };
        assert!(run < 25, "a number with {run}+ digits: {text}");
    }
}

#[test]
fn recommend_slo_and_numbers() {
    let app = repo_data("pollux/cifar10");
    // Accepted, as if there were no time budget.
    for v in ["inf", "-inf", "NaN", "0"] {
        let flag = format!("--slo-s={v}");
        let err = fails_with(&["recommend", "--app", &app, &flag], "--slo-s");
        assert!(err.contains("finite number of seconds > 0"), "{err}");
    }
    // Printed "no configuration meets --slo-s 0.000…0001" (300 digits).
    let out = pacer(&["recommend", "--app", &app, "--slo-s", "1e-300"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--slo-s 1e-300"), "{err}");
    assert_readable(&err);
    // Predicted times of 10^200 s printed in full.
    let out = pacer(&[
        "recommend",
        "--app",
        &app,
        "--slo-s",
        "1e300",
        "--epochs",
        "1e200",
    ]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("predicted "), "{text}");
    assert_readable(&text);
}

#[test]
fn fit_names_the_scalability_row_at_fault() {
    // Was "…/placements.csv: fitting ernest: … did not converge" for an outlier in
    // the scalability file.
    let placements = repo_data("pollux/cifar10/placements.csv");
    let scal = tmp(
        "scalability.csv",
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n\
         1,1,32,0.043,0.0005\n1,1,64,0.07,0.0005\n1,1,32,1e300,0.0005\n",
    );
    let s = scal.to_str().unwrap();
    let err = fails_with(
        &[
            "fit",
            "--placements",
            &placements,
            "--scalability",
            s,
            "--model",
            "ernest",
            "--split",
            "extrapolate",
        ],
        &format!(
            "{s}:4: step time 1.0000e300 s with 1 replica(s) on 1 node(s) at local batch 32 is"
        ),
    );
    assert!(
        err.contains(&format!("the ernest model fitted to {placements} predicts")),
        "{err}"
    );
    // A bad placements row is blamed on the placements file.
    let text = std::fs::read_to_string(&placements).unwrap() + "1,32,1e300,0.0005\n";
    let bad = tmp("placements.csv", &text);
    let b = bad.to_str().unwrap();
    let good = repo_data("pollux/cifar10/scalability.csv");
    fails_with(
        &[
            "fit",
            "--placements",
            b,
            "--scalability",
            &good,
            "--model",
            "ernest",
            "--split",
            "extrapolate",
        ],
        &format!("fitting ernest to {b}: "),
    );
}

#[test]
fn train_worker_count_is_bounded_before_starting() {
    // Aborted ("failed to set up alternative stack guard page") thousands of
    // threads in.
    train_fails(&["--workers", "100000"], "--workers: 100000 local workers");
    train_fails(&["--workers", "1025"], "more than the 1024");
    let joins: Vec<String> = (0..2).map(|_| "--join=1".to_string()).collect();
    let mut args = vec!["--workers", "1023"];
    args.extend(joins.iter().map(String::as_str));
    train_fails(&args, "--join: 1023 workers + 2 joins");
}

#[test]
fn train_interference_file_must_cover_every_worker() {
    // Worker 1 silently ran without interference.
    let plan = one_worker_plan("one-worker.json");
    let p = plan.to_str().unwrap();
    train_fails(
        &["--workers", "2", "--interference", p],
        &format!("--interference {p}: describes 1 worker(s), fewer than the 2 of --workers"),
    );
    // More entries than workers stay allowed (a full scenario file, joiners).
    let out = pacer(&[
        "train",
        "--dataset",
        "tiny",
        "--no-progress",
        "--normal-priority",
        "--workers",
        "1",
        "--max-iterations",
        "3",
        "--interference",
        p,
    ]);
    assert_ok(&out);
}

#[test]
fn mixed_types_needs_per_type_applications() {
    // The embedded Pollux applications have one model for every device type.
    fails_with(
        &["simulate", "--mixed-types", "--policy", "sia-pacer-mix"],
        "--mixed-types: needs per-type applications (--apps sia:DIR)",
    );
    fails_with(
        &[
            "bench",
            "round",
            "--mixed-types",
            "--jobs",
            "4",
            "--gpus",
            "8",
        ],
        "--mixed-types: only with --workload",
    );
}

#[test]
fn shared_fabric_needs_per_type_applications_and_a_type_of_the_cluster() {
    fails_with(
        &["simulate", "--shared-fabric", "t4"],
        "--shared-fabric t4: needs per-type applications (--apps sia:DIR)",
    );
    // Checked before the applications are read: the folder need not exist.
    fails_with(
        &[
            "simulate",
            "--apps",
            "sia:/nonexistent",
            "--cluster",
            "2x2:aws,2x2:rtx",
            "--shared-fabric",
            "dgx",
        ],
        "--shared-fabric dgx: not a device type of the cluster (it has aws, rtx)",
    );
    fails_with(
        &["bench", "round", "--shared-fabric", "rtx"],
        "--shared-fabric: only with --workload and --apps sia:DIR",
    );
}

#[test]
fn submit_refuses_non_finite_goal_numbers_before_it_sends() {
    // Was: TOML's `nan` / `inf` (and `--target-metric nan`) went out as JSON `null`, so
    // the service planned the job with the default target, or no budget, as if the
    // field were absent. Checked before any connection: the server here is a closed
    // port, so reaching it would fail with another message.
    let head = "name = \"g\"\ncommand = [\"true\"]\nreplicas = 4\n";
    for (field, body) in [
        (
            "target_metric",
            "app = \"cifar10\"\ndeadline = \"30m\"\ngoal = \"time\"\ntarget_metric = nan\n",
        ),
        (
            "epochs",
            "app = \"cifar10\"\ndeadline = \"30m\"\nepochs = inf\n",
        ),
        (
            "budget_usd",
            "expected_runtime = \"1h\"\nbudget_usd = nan\n",
        ),
        (
            "budget_device_hours",
            "expected_runtime = \"1h\"\nbudget_device_hours = -inf\n",
        ),
    ] {
        let spec = tmp("job.toml", &format!("{head}{body}"));
        let err = fails_with(
            &[
                "submit",
                spec.to_str().unwrap(),
                "--server",
                "http://127.0.0.1:1",
            ],
            &format!("field `{field}`"),
        );
        assert!(!err.contains("127.0.0.1:1"), "{field}: {err}");
    }
    let spec = tmp("job.toml", head);
    let spec = spec.to_str().unwrap();
    for (args, field) in [
        (
            vec![
                "--app",
                "cifar10",
                "--deadline",
                "30m",
                "--goal",
                "time",
                "--target-metric",
                "nan",
            ],
            "target_metric",
        ),
        (
            vec!["--expected-runtime", "1h", "--budget-usd", "inf"],
            "budget_usd",
        ),
    ] {
        let mut all = vec!["submit", spec, "--server", "http://127.0.0.1:1"];
        all.extend(args);
        fails_with(&all, &format!("field `{field}`"));
    }
}
