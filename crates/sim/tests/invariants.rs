//! Property tests of the simulator's invariants, over random workloads, clusters
//! and every policy: allocations fit capacity (the engine rejects any that do
//! not, so `run` must succeed), no job runs before it arrives, every job
//! finishes, progress never decreases, and the same seed gives the same result.

use pacer_model::ClusterSpec;
use pacer_sim::trace::{synthetic, SyntheticSpec};
use pacer_sim::{embedded_profiles, AppModel, SimConfig, SimJob, Simulation, Work};
use proptest::prelude::*;
use std::sync::OnceLock;

fn apps() -> &'static [AppModel] {
    static APPS: OnceLock<Vec<AppModel>> = OnceLock::new();
    APPS.get_or_init(|| embedded_profiles().into_iter().map(AppModel::new).collect())
}

/// Short jobs only (bert, cifar10, ncf, yolov3 are minutes to hours) keep tests fast.
fn workload(jobs: usize, per_hour: f64, seed: u64) -> Vec<SimJob> {
    let short: Vec<usize> = apps()
        .iter()
        .enumerate()
        .filter(|(_, a)| ["bert", "ncf", "cifar10"].contains(&a.name()))
        .map(|(i, _)| i)
        .collect();
    let mut w = synthetic(
        &SyntheticSpec {
            jobs,
            arrivals_per_hour: per_hour,
            seed,
        },
        apps(),
    );
    for (k, j) in w.iter_mut().enumerate() {
        let app = short[k % short.len()];
        let a = &apps()[app];
        j.work = Work::Profiled { app };
        j.spec.application = a.name().to_string();
        j.spec.requested_batch = a.profile.validation[k % 3].global_batch;
    }
    w
}

fn check(cluster: &str, policy: &str, jobs: &[SimJob]) -> Result<(), TestCaseError> {
    let cluster = ClusterSpec::parse(cluster, "test").unwrap();
    let sim = Simulation {
        cluster: &cluster,
        apps: apps(),
        jobs,
        config: SimConfig::default(),
    };
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
    fn invariants_hold_for_every_policy(seed in 0u64..1000, jobs in 3usize..14, nodes in 1u32..4, per_node in 1u32..5) {
        let w = workload(jobs, 6.0, seed);
        let cluster = format!("{nodes}x{per_node}:t4");
        for policy in pacer_policy::POLICY_NAMES {
            check(&cluster, policy, &w)?;
        }
    }
}

#[test]
fn same_seed_same_result() {
    let run = |seed| {
        let w = workload(12, 10.0, seed);
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

#[test]
fn rounds_too_short_to_advance_the_clock_are_an_error_not_a_hang() {
    // A round of 1e-300 s: `now + round_s == now` once a job has arrived, so the
    // loop never ended. Zero, NaN and infinity are refused the same way.
    let cluster = ClusterSpec::parse("1x4:t4", "t").unwrap();
    let jobs = workload(2, 10.0, 1);
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
