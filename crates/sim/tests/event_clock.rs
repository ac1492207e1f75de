//! The event clock (`ArrivalReplan::Events`, ElasticFlow's simulator's): a round at
//! each arrival, completion and policy wake-up, at least `round_s` after the last,
//! events inside that window taken at last + `round_s`; completions found exactly.

use pacer_model::ClusterSpec;
use pacer_sim::{ArrivalReplan, SimConfig, SimJob, SimResult, Simulation, Work};

mod common;
use common::{apps, duration_job as job};

fn run(policy: &str, jobs: &[SimJob], replan: ArrivalReplan) -> SimResult {
    let cluster = ClusterSpec::parse("1x4:t4", "t").unwrap();
    Simulation {
        cluster: &cluster,
        apps: apps(),
        jobs,
        config: SimConfig {
            replan_on_arrival: replan,
            ..SimConfig::default()
        },
    }
    .run(pacer_policy::by_name(policy).unwrap().as_mut(), |_| {})
    .unwrap()
}

fn starts(r: &SimResult) -> Vec<f64> {
    r.jobs.iter().map(|j| j.start_s.unwrap()).collect()
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

#[test]
fn rounds_at_arrivals_and_completions_a_round_apart() {
    // FIFO, 4 devices, 30 s restarts, 60 s rounds.
    let jobs = [
        // Starts at its arrival (the first round), ends at 0 + 30 + 1000.
        job("a", 0.0, 4, 1000.0),
        // Waits for `a`; its completion (1,030 s) is a round: starts then, ends 1,160.
        job("b", 10.0, 4, 100.0),
        // Arrives 40 s after the round at 1,160: waits for 1,160 + 60.
        job("c", 1200.0, 2, 100.0),
        // Arrives 150 s after the round at `c`'s end (1,350): a round at its arrival.
        job("d", 1500.0, 2, 100.0),
    ];
    let r = run("fifo", &jobs, ArrivalReplan::Events);
    close(&starts(&r), &[0.0, 1030.0, 1220.0, 1500.0]);
    let ends: Vec<f64> = r.jobs.iter().map(|j| j.completion_s.unwrap()).collect();
    close(&ends, &[1030.0, 1160.0, 1350.0, 1630.0]);
    // The rounds that decided (an idle cluster's rounds record nothing): only events.
    let rounds: Vec<f64> = r.timeline.iter().map(|s| s.time_s).collect();
    close(&rounds, &[0.0, 60.0, 1030.0, 1220.0, 1500.0]);
    // On the grid (`never`) the same jobs start at round boundaries.
    close(
        &starts(&run("fifo", &jobs, ArrivalReplan::Never)),
        &[60.0, 1140.0, 1320.0, 1500.0],
    );
}

#[test]
fn a_policy_wake_up_is_a_round() {
    // dlas-gpu: `a` (4 devices) runs alone from 0 s; `b` arrives at 10 s (the round at
    // 60 s admits it; nothing frees). dlas-gpu's wake-up after that round is `a`'s
    // demotion as ElasticFlow times it, 60 + ceil((3,250 − 60) / 4) = 858 s: `a` is
    // demoted there (858 × 4 ≥ 3,250 GPU-s) and `b` starts.
    let jobs = [job("a", 0.0, 4, 10_000.0), job("b", 10.0, 4, 100.0)];
    let r = run("dlas-gpu", &jobs, ArrivalReplan::Events);
    close(&[r.jobs[1].start_s.unwrap()], &[858.0]);
    let rounds: Vec<f64> = r.timeline.iter().map(|s| s.time_s).take(3).collect();
    close(&rounds, &[0.0, 60.0, 858.0]);
}

#[test]
fn completions_are_exact_and_each_starts_a_round() {
    // Jobs of awkward lengths, all arrived within the first round, queued under FIFO:
    // every completion equals start + restart + duration, and (the cluster busy until
    // the last) the first round at or after it is at max(completion, the round before
    // it + 60 s).
    let jobs: Vec<SimJob> = (0..12)
        .map(|k| {
            let k = k as f64;
            job(
                &format!("j{k}"),
                3.7 * k,
                1 + (k as u32 % 3),
                101.7 + 53.9 * k,
            )
        })
        .collect();
    let r = run("fifo", &jobs, ArrivalReplan::Events);
    let rounds: Vec<f64> = r.timeline.iter().map(|s| s.time_s).collect();
    for (j, spec) in r.jobs.iter().zip(&jobs) {
        let Work::Duration { duration_s } = spec.work else {
            unreachable!()
        };
        let (s, c) = (j.start_s.unwrap(), j.completion_s.unwrap());
        assert!(
            (c - (s + 30.0 + duration_s)).abs() < 1e-9,
            "{}: {s} {c}",
            j.name
        );
        let last = r.jobs.iter().all(|o| o.completion_s.unwrap() <= c);
        if last {
            continue;
        }
        let k = rounds.iter().position(|&t| t >= c - 1e-9).unwrap();
        let before = rounds[..k].last().copied().unwrap_or(f64::NEG_INFINITY);
        assert!(
            rounds[k] <= c.max(before + 60.0) + 1e-9,
            "{}: {c} {rounds:?}",
            j.name
        );
    }
    for w in rounds.windows(2) {
        assert!(w[1] - w[0] >= 60.0 - 1e-9, "{rounds:?}");
    }
}
