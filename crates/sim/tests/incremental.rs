//! The event-driven forms of FIFO, fair share and Tiresias (`Policy::incremental`)
//! must decide exactly as their full `allocate` does: the same simulation run
//! both ways gives bit-identical per-job results, summaries and timelines, over
//! random workloads (profiled and duration jobs, queues longer and shorter than
//! the cluster), cluster shapes and arrival re-planning modes.

use pacer_model::{Allocation, ClusterSpec, JobSpec};
use pacer_policy::{ClusterView, IncrementalPolicy, Policy};
use pacer_sim::trace::{synthetic_philly, SyntheticSpec};
use pacer_sim::{ArrivalReplan, SimConfig, SimJob, SimResult, Simulation};
use proptest::prelude::*;

mod common;
use common::{apps, short_profiled, REPLANS};

/// A policy with its event-driven form hidden: the engine calls `allocate`.
struct FullOnly(Box<dyn Policy>);

impl Policy for FullOnly {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        self.0.allocate(view)
    }
    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        None
    }
}

/// Everything a run produced but its wall time.
fn fingerprint(r: &SimResult) -> String {
    let mut s = r.summary.clone();
    s.wall_ms = 0.0;
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}",
        serde_json::to_string(&s).unwrap(),
        r.jobs
            .iter()
            .map(|j| {
                (
                    j.start_s.map(f64::to_bits),
                    j.completion_s.map(f64::to_bits),
                    j.restarts,
                    j.gpu_s.to_bits(),
                    j.avg_contention.to_bits(),
                    j.independent_s.to_bits(),
                )
            })
            .collect::<Vec<_>>(),
        r.timeline
            .iter()
            .map(|t| (
                t.time_s.to_bits(),
                t.active_jobs,
                t.running_jobs,
                t.used_gpus
            ))
            .collect::<Vec<_>>(),
        r.total_gpus
    )
}

fn both_ways(cluster: &str, jobs: &[SimJob], replan: ArrivalReplan, round_s: f64) {
    let cluster = ClusterSpec::parse(cluster, "test").unwrap();
    let sim = Simulation {
        cluster: &cluster,
        apps: apps(),
        jobs,
        config: SimConfig {
            replan_on_arrival: replan,
            round_s,
            ..SimConfig::default()
        },
    };
    // `fair` with its default time slice, without one, and with one that is not a
    // whole number of rounds.
    for name in ["fifo", "fair", "fair-q0", "fair-q90", "tiresias"] {
        let mut inc = pacer_policy::by_name(name).unwrap();
        assert!(
            inc.incremental().is_some(),
            "{name} has an event-driven form"
        );
        let a = sim.run(inc.as_mut(), |_| {}).unwrap();
        let mut full = FullOnly(pacer_policy::by_name(name).unwrap());
        let b = sim.run(&mut full, |_| {}).unwrap();
        assert_eq!(
            fingerprint(&a),
            fingerprint(&b),
            "{name} on {cluster:?}, {replan:?}: event-driven and full decisions differ"
        );
    }
}

/// Duration jobs with Philly's sizes, shortened so runs stay small.
fn short_duration(jobs: usize, per_hour: f64, seed: u64, max_replicas: u32) -> Vec<SimJob> {
    let mut w = synthetic_philly(&SyntheticSpec {
        jobs,
        arrivals_per_hour: per_hour,
        seed,
        max_replicas: Some(max_replicas),
    });
    for j in &mut w {
        if let pacer_sim::Work::Duration { duration_s } = &mut j.work {
            *duration_s = duration_s.min(20_000.0);
        }
        let spec: &mut JobSpec = &mut j.spec;
        spec.requested_replicas = spec.requested_replicas.min(8);
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn event_driven_policies_decide_as_the_full_ones(
        seed in 0u64..10_000,
        jobs in 5usize..60,
        per_hour in prop::sample::select(vec![4.0, 30.0, 200.0]),
        cluster in prop::sample::select(vec!["1x1:t4", "2x4:t4", "3x2:t4", "4x8:t4", "2x4:t4,2x2:v100"]),
        replan in 0usize..4,
        round_s in prop::sample::select(vec![60.0, 45.5, 300.0]),
        duration in any::<bool>(),
    ) {
        // The Pollux apps were measured on T4 only: a cluster with V100s is for the
        // duration jobs (which run on any type); no job may ask for more than the cluster.
        let cluster = if !duration && cluster.contains("v100") { "2x4:t4" } else { cluster };
        let max = ClusterSpec::parse(cluster, "test").unwrap().total_gpus();
        let w = if duration {
            short_duration(jobs, per_hour, seed, max)
        } else {
            short_profiled(jobs, per_hour, seed, max)
        };
        let replan = REPLANS[replan];
        both_ways(cluster, &w, replan, round_s);
    }
}

/// A long queue on a small cluster: fair share's one-device-each regime, Tiresias'
/// demotions and back-filling, FIFO's blocked head.
#[test]
fn long_queues_decide_as_the_full_ones() {
    both_ways(
        "2x4:t4",
        &short_profiled(150, 400.0, 3, 8),
        ArrivalReplan::Never,
        60.0,
    );
    both_ways(
        "4x4:t4",
        &short_duration(200, 300.0, 4, 16),
        ArrivalReplan::Never,
        60.0,
    );
}

/// The embedded Pollux workloads (idle gaps: every job leaves before the next
/// arrives, so departures must reach the policy even in rounds with nothing to
/// decide).
#[test]
fn embedded_workloads_decide_as_the_full_ones() {
    for (name, text) in pacer_sim::apps::EMBEDDED_WORKLOADS {
        let jobs = pacer_sim::trace::load_pollux_workload(text, name, apps(), 1.0).unwrap();
        both_ways("16x4:t4", &jobs, ArrivalReplan::Never, 60.0);
    }
    let quiet = |gap: f64| -> Vec<SimJob> {
        (0..6)
            .map(|k| {
                let mut j = short_duration(1, 1.0, k, 4)[0].clone();
                j.spec.name = format!("j{k}");
                j.spec.arrival_s = k as f64 * gap;
                j.spec.requested_replicas = 1 + (k as u32 % 4);
                j
            })
            .collect()
    };
    both_ways("1x4:t4", &quiet(100_000.0), ArrivalReplan::Never, 60.0);
}
