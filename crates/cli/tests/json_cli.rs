//! Every `pacer … --json` output parses back into its type in `pacer_cli::json`, and
//! the type writes it again key for key and value for value: nothing in the output
//! is outside the type, nothing in the type is missing from the output (the field
//! lists in docs/json.md are these types).

use pacer_cli::json::{
    BatchingEval, BenchRound, FitReport, Recommendation, ScaleReport, SimReport, SimRoundReport,
    SimulateRow, ValidateRow,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `pacer ARGS` in the repository root; its stdout.
fn pacer(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("pacer runs");
    assert!(
        out.status.success(),
        "pacer {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Parses `text` into `T` and checks that `T` writes exactly the JSON it read.
fn round_trip<T: DeserializeOwned + Serialize>(what: &str, text: &str) -> T {
    let value: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}\n{text}"));
    let typed: T = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{what}: does not parse into its type: {e}\n{text}"));
    let again = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        again, value,
        "{what}: the type does not write what was printed"
    );
    typed
}

#[test]
fn simulate() {
    let text = pacer(&["simulate", "--policy", "fifo,tiresias", "--json"]);
    let rows: Vec<SimulateRow> = round_trip("simulate", &text);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].summary.policy, "tiresias");
    // Key order: the row's own, then the summary's.
    assert!(text.find("\"workload\"").unwrap() < text.find("\"policy\"").unwrap());
}

#[test]
fn recommend_courier_and_search() {
    let app = "crates/sim/data/pollux/cifar10";
    let text = pacer(&["recommend", "--app", app, "--slo-s", "3600", "--json"]);
    let r: Recommendation = round_trip("recommend accuracy", &text);
    assert!(matches!(r, Recommendation::Accuracy(_)), "{r:?}");
    assert!(r.choice().is_some());
    assert!(text
        .trim_start()
        .starts_with("{\n  \"objective\": \"accuracy\""));
    for objective in ["time", "cost"] {
        let text = pacer(&[
            "recommend",
            "--app",
            app,
            "--slo-s",
            "3600",
            "--objective",
            objective,
            "--price",
            "t4=0.53",
            "--price",
            "v100=3.06:2.5",
            "--json",
        ]);
        let r: Recommendation = round_trip(objective, &text);
        let (Recommendation::Time(s) | Recommendation::Cost(s)) = &r else {
            panic!("{objective}: {r:?}");
        };
        assert!(!s.pareto.is_empty());
        assert_eq!(
            matches!(r, Recommendation::Cost(_)),
            objective == "cost",
            "{r:?}"
        );
    }
}

#[test]
fn fit() {
    let d = "crates/sim/data/pollux/cifar10";
    let text = pacer(&[
        "fit",
        "--placements",
        &format!("{d}/placements.csv"),
        "--scalability",
        &format!("{d}/scalability.csv"),
        "--json",
    ]);
    let reports: Vec<FitReport> = round_trip("fit", &text);
    assert!(!reports.is_empty());
}

#[test]
fn batching_eval_one_and_many() {
    let sc = "scenarios/worker/static_6_6_4_32.json";
    let one = pacer(&["batching", "eval", "--scenario", sc, "--json"]);
    assert!(matches!(
        round_trip::<BatchingEval>("batching eval", &one),
        BatchingEval::One(_)
    ));
    let many = pacer(&[
        "batching",
        "eval",
        "--scenario",
        sc,
        "--controller",
        "uniform,lbbsp",
        "--json",
    ]);
    let BatchingEval::Many(v) = round_trip::<BatchingEval>("batching eval", &many) else {
        panic!("two controllers: a list");
    };
    assert_eq!(v.len(), 2);
}

#[test]
fn bench_round_with_the_gavel_lp() {
    let text = pacer(&[
        "bench",
        "round",
        "--jobs",
        "64",
        "--gpus",
        "32",
        "--types",
        "2",
        "--rounds",
        "1",
        "--policy",
        "fifo,gavel-maxmin",
        "--json",
    ]);
    let b: BenchRound = round_trip("bench round", &text);
    assert_eq!(b.rounds.len(), 2);
    assert_eq!(b.gavel_lp.expect("a gavel policy ran").jobs, 64);
}

#[test]
fn bench_round_on_a_workload() {
    let text = pacer(&[
        "bench",
        "round",
        "--workload",
        "data/pollux/workloads/workload-1.csv",
        "--cluster",
        "16x4:t4",
        "--policy",
        "fifo",
        "--json",
    ]);
    let r: Vec<SimRoundReport> = round_trip("bench round --workload", &text);
    assert_eq!(r.len(), 1);
}

/// `bench round --workload` times the run `pacer simulate` makes: the same average JCT
/// for a policy with simulator hooks (`dlas-gpu` wakes rounds up on the event clock; the
/// timing wrapper once dropped its hooks, 2,787 s against 2,488 s), under either profiles
/// setting.
#[test]
fn bench_round_on_a_workload_runs_what_simulate_runs() {
    for profiles in ["fitted", "online"] {
        let common = [
            "--workload",
            "data/pollux/workloads/workload-1.csv",
            "--cluster",
            "16x4:t4",
            "--policy",
            "dlas-gpu",
            "--profiles",
            profiles,
            "--json",
        ];
        let bench: Vec<SimRoundReport> = round_trip(
            "bench round --workload --profiles",
            &pacer(&[&["bench", "round"][..], &common].concat()),
        );
        let sim: Vec<SimulateRow> =
            round_trip("simulate", &pacer(&[&["simulate"][..], &common].concat()));
        let (b, s) = (bench[0].avg_jct_h * 3600.0, sim[0].summary.avg_jct_s);
        assert!(
            (b - s).abs() <= 1e-6 * s,
            "{profiles}: bench {b} s, simulate {s} s"
        );
    }
}

#[test]
fn bench_simulate_and_scale() {
    let text = pacer(&[
        "bench",
        "simulate",
        "--policy",
        "fifo",
        "--workload",
        "workload-1",
        "--repeat",
        "1",
        "--json",
    ]);
    let r: Vec<SimReport> = round_trip("bench simulate", &text);
    assert_eq!(r.len(), 1);
    let text = pacer(&[
        "bench", "scale", "--jobs", "50", "--policy", "fifo", "--quiet", "--json",
    ]);
    let r: Vec<ScaleReport> = round_trip("bench scale", &text);
    assert_eq!(r[0].jobs, 50);
}

#[test]
fn validate_pollux() {
    let text = pacer(&["validate", "pollux", "--json"]);
    let rows: Vec<ValidateRow> = round_trip("validate pollux", &text);
    assert!(!rows.is_empty());
}

/// The check itself can fail: a key the type does not have is caught.
#[test]
#[should_panic(expected = "the type does not write what was printed")]
fn a_key_outside_the_type_is_caught() {
    let text = r#"[{"policy": "fifo", "load": 1.0, "workload": "w", "pacer_avg_jct_h": 1.0,
        "pollux_sim_avg_jct_h": 1.0, "diff_pct": 0.0, "pacer_wall_ms": 1.0, "extra": 2}]"#;
    let _: Vec<ValidateRow> = round_trip("synthetic", text);
}
