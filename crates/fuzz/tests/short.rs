//! The short fuzz pass run by `cargo test` (CI): every seed, then
//! `PACER_FUZZ_CASES` (default 2000) generated inputs per target. The long pass is
//! the `pacer-fuzz` binary (`crates/fuzz/README.md`).

use pacer_fuzz::harness::{self, Budget, Limits, RunConfig, Watchdog};
use pacer_fuzz::targets;
use std::time::Duration;

fn short(name: &str) {
    targets::warm_up();
    let t = targets::by_name(name).expect("target");
    let cases = std::env::var("PACER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let cfg = RunConfig {
        // Debug builds are slower; still a hang detector, not a benchmark.
        limits: Limits {
            time: Duration::from_secs(5),
            ..Limits::default()
        },
        budget: Budget::Cases(cases),
        seed: 19,
        max_shrink: 500,
    };
    let dog = Watchdog::start(Duration::from_secs(60), harness::hang_exit);
    let rep = harness::fuzz(&t, &cfg, Some(&dog));
    println!("{rep}");
    assert!(rep.failure.is_none(), "{rep}");
}

macro_rules! short_pass {
    ($($name:ident)*) => {
        $(#[test] fn $name() { short(stringify!($name)); })*

        #[test]
        fn every_target_has_a_short_pass() {
            let mut listed = vec![$(stringify!($name)),*];
            let mut all: Vec<&str> = targets::all().iter().map(|t| t.name).collect();
            listed.sort();
            all.sort();
            assert_eq!(listed, all);
        }
    };
}

short_pass! {
    cluster_spec cluster_toml placements scalability validation pollux_workload philly
    gavel_throughputs gavel_trace gavel_trace_hetero elasticflow_table elasticflow_trace quality scenario protocol_frame
    protocol_stream serve_job_toml serve_job_json serve_report serve_login idx libsvm
}
