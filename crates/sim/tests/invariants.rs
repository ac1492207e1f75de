//! Property tests of the simulator's invariants, over random workloads, clusters
//! and every policy: allocations fit capacity (the engine rejects any that do
//! not, so `run` must succeed), no job runs before it arrives, every job
//! finishes, progress never decreases, and the same seed gives the same result.

use pacer_model::ClusterSpec;
use pacer_sim::{ArrivalReplan, SimConfig, SimJob, Simulation, Work};
use proptest::prelude::*;

mod common;
use common::{apps, duration_job, short_profiled, REPLANS};

/// The embedded apps on `cluster`, default settings but `replan`.
fn simulation<'a>(
    cluster: &'a ClusterSpec,
    jobs: &'a [SimJob],
    replan: ArrivalReplan,
) -> Simulation<'a> {
    Simulation {
        cluster,
        apps: apps(),
        jobs,
        config: SimConfig {
            replan_on_arrival: replan,
            ..SimConfig::default()
        },
    }
}

fn check(
    cluster: &str,
    policy: &str,
    jobs: &[SimJob],
    replan: ArrivalReplan,
) -> Result<(), TestCaseError> {
    let cluster = ClusterSpec::parse(cluster, "test").unwrap();
    let sim = simulation(&cluster, jobs, replan);
    let mut p = pacer_policy::by_name(policy).unwrap();
    let mut last = vec![0.0f64; jobs.len()];
    let mut violation: Option<String> = None;
    let res = sim
        .run(p.as_mut(), |info| {
            for (i, j) in jobs.iter().enumerate() {
                let prog = info.progress(i);
                if prog + 1e-12 < last[i] && violation.is_none() {
                    violation = Some(format!("job {i} progress fell from {} to {prog}", last[i]));
                }
                last[i] = prog;
                if !info.allocation(i).is_empty()
                    && j.spec.arrival_s > info.now_s
                    && violation.is_none()
                {
                    violation = Some(format!(
                        "job {i} holds devices at {} before arriving at {}",
                        info.now_s, j.spec.arrival_s
                    ));
                }
            }
        })
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(violation.is_none(), "{}", violation.unwrap());
    prop_assert_eq!(
        res.summary.finished,
        jobs.len(),
        "unfinished jobs under {}",
        policy
    );
    for j in &res.jobs {
        let start = j.start_s.expect("finished jobs started");
        prop_assert!(
            start >= j.arrival_s,
            "{} started at {} before arriving at {}",
            j.name,
            start,
            j.arrival_s
        );
        prop_assert!(j.completion_s.unwrap() >= start);
        prop_assert!(j.ftf_rho().unwrap() > 0.0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_for_every_policy(seed in 0u64..1000, jobs in 3usize..14, nodes in 1u32..4, per_node in 1u32..5, replan in 0usize..4) {
        let w = short_profiled(jobs, 6.0, seed, nodes * per_node);
        let cluster = format!("{nodes}x{per_node}:t4");
        let replan = REPLANS[replan];
        for policy in pacer_policy::POLICY_NAMES {
            check(&cluster, policy, &w, replan)?;
        }
    }
}

#[test]
fn same_seed_same_result() {
    let run = |seed| {
        let w = short_profiled(12, 10.0, seed, 8);
        let cluster = ClusterSpec::parse("2x4:t4", "t").unwrap();
        let sim = Simulation {
            cluster: &cluster,
            apps: apps(),
            jobs: &w,
            config: SimConfig::default(),
        };
        let mut p = pacer_policy::by_name("pollux").unwrap();
        let r = sim.run(p.as_mut(), |_| {}).unwrap();
        r.jobs
            .iter()
            .map(|j| (j.completion_s, j.restarts, j.gpu_s))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn duration_jobs_finish_in_their_duration_when_alone() {
    let cluster = ClusterSpec::parse("1x4:t4", "t").unwrap();
    let jobs = vec![SimJob {
        spec: pacer_model::JobSpec {
            name: "a".into(),
            arrival_s: 0.0,
            application: "x".into(),
            requested_replicas: 2,
            requested_batch: 0,
            service_gpu_s: Some(2000.0),
            device_type: None,
        },
        work: Work::Duration { duration_s: 1000.0 },
    }];
    let sim = Simulation {
        cluster: &cluster,
        apps: apps(),
        jobs: &jobs,
        config: SimConfig::default(),
    };
    let r = sim
        .run(pacer_policy::by_name("fifo").unwrap().as_mut(), |_| {})
        .unwrap();
    // Admitted at the first round boundary (60 s), 30 s restart, then 1000 s of work.
    let done = r.jobs[0].completion_s.unwrap();
    assert!((done - (60.0 + 30.0 + 1000.0)).abs() < 1e-6, "{done}");
}

/// Completion times under FIFO with arrivals re-planned as `replan` says.
fn fifo_completions(jobs: &[SimJob], replan: ArrivalReplan) -> Vec<f64> {
    let cluster = ClusterSpec::parse("1x4:t4", "t").unwrap();
    let r = simulation(&cluster, jobs, replan)
        .run(pacer_policy::by_name("fifo").unwrap().as_mut(), |_| {})
        .unwrap();
    r.jobs.iter().map(|j| j.completion_s.unwrap()).collect()
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
}

#[test]
fn arrivals_start_a_round_only_when_asked() {
    // Alone on an idle cluster, arriving at 100 s (rounds at 60, 120, …).
    let one = [duration_job("a", 100.0, 2, 1000.0)];
    let at_round = 120.0 + 30.0 + 1000.0;
    let at_arrival = 100.0 + 30.0 + 1000.0;
    close(&fifo_completions(&one, ArrivalReplan::Never), &[at_round]);
    close(
        &fifo_completions(&one, ArrivalReplan::WhenIdle),
        &[at_arrival],
    );
    close(
        &fifo_completions(&one, ArrivalReplan::Always),
        &[at_arrival],
    );
    // A second job arriving at 330 s while `a` holds 2 of the 4 devices: it starts at
    // once with `idle` and `always`; with `never` at the round boundary (360 s).
    let two = [
        duration_job("a", 0.0, 2, 10_000.0),
        duration_job("b", 330.0, 2, 1000.0),
    ];
    close(
        &fifo_completions(&two, ArrivalReplan::Never)[1..],
        &[360.0 + 1030.0],
    );
    close(
        &fifo_completions(&two, ArrivalReplan::WhenIdle)[1..],
        &[330.0 + 1030.0],
    );
    close(
        &fifo_completions(&two, ArrivalReplan::Always)[1..],
        &[330.0 + 1030.0],
    );
    // When `a` holds every device nothing is idle at `b`'s arrival: `b` waits for
    // `a` (FIFO does not preempt it at the re-plan `always` makes at 330 s) and
    // starts at the round after `a` ends — rounds counted from 330 s with `always`.
    // `a` itself arrives on an idle cluster and starts at 0 s with `idle` and
    // `always`, at the 60 s round with `never`.
    let full = [
        duration_job("a", 0.0, 4, 1000.0),
        duration_job("b", 330.0, 4, 1000.0),
    ];
    close(
        &fifo_completions(&full, ArrivalReplan::Never),
        &[1090.0, 1140.0 + 1030.0],
    );
    close(
        &fifo_completions(&full, ArrivalReplan::WhenIdle),
        &[1030.0, 1080.0 + 1030.0],
    );
    close(
        &fifo_completions(&full, ArrivalReplan::Always),
        &[1030.0, 1050.0 + 1030.0],
    );
}

#[test]
fn rounds_too_short_to_advance_the_clock_are_an_error_not_a_hang() {
    // A round of 1e-300 s: `now + round_s == now` once a job has arrived, so the
    // loop never ended. Zero, NaN and infinity are refused the same way.
    let cluster = ClusterSpec::parse("1x4:t4", "t").unwrap();
    let jobs = short_profiled(2, 10.0, 1, 4);
    for round_s in [1e-300, 0.0, f64::NAN, f64::INFINITY, -60.0] {
        let sim = Simulation {
            cluster: &cluster,
            apps: apps(),
            jobs: &jobs,
            config: SimConfig {
                round_s,
                ..SimConfig::default()
            },
        };
        let e = sim
            .run(pacer_policy::by_name("fifo").unwrap().as_mut(), |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("round_s"), "{round_s}: {e}");
    }
}
