//! Helpers shared by the simulator's integration tests (`incremental.rs`,
//! `invariants.rs`, `event_clock.rs`, the `mixed*.rs` tests): the embedded applications,
//! parsed once, short random workloads of profiled jobs, duration jobs, the arrival
//! settings, a policy that pins every job on one allocation, and table files written
//! into a folder.
#![allow(dead_code)] // (each test binary uses some of them)

use pacer_sim::trace::{synthetic, SyntheticSpec};
use pacer_sim::{embedded_profiles, AppModel, ArrivalReplan, SimJob, Work};
use std::sync::OnceLock;

/// The six embedded Pollux applications, parsed once per test binary.
pub fn apps() -> &'static [AppModel] {
    static APPS: OnceLock<Vec<AppModel>> = OnceLock::new();
    APPS.get_or_init(|| embedded_profiles().into_iter().map(AppModel::new).collect())
}

/// A seeded synthetic workload of short profiled jobs only (bert, cifar10, ncf:
/// minutes to hours) so debug-mode tests stay fast; no job asks for more than
/// `max_replicas` (a job larger than the cluster is refused, `pacer_sim::admit`).
pub fn short_profiled(jobs: usize, per_hour: f64, seed: u64, max_replicas: u32) -> Vec<SimJob> {
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
            max_replicas: Some(max_replicas),
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

/// Every arrival setting but `Auto` (the property tests pick one).
pub const REPLANS: [ArrivalReplan; 4] = [
    ArrivalReplan::Never,
    ArrivalReplan::WhenIdle,
    ArrivalReplan::Always,
    ArrivalReplan::Events,
];

/// A duration-only job of `duration_s` on `replicas` devices.
pub fn duration_job(name: &str, arrival_s: f64, replicas: u32, duration_s: f64) -> SimJob {
    SimJob {
        spec: pacer_model::JobSpec {
            name: name.into(),
            arrival_s,
            application: "x".into(),
            requested_replicas: replicas,
            requested_batch: 0,
            service_gpu_s: Some(duration_s * replicas as f64),
            device_type: None,
        },
        work: Work::Duration { duration_s },
    }
}

/// Gives every job the same devices every round.
pub struct Pin {
    pub alloc: pacer_model::Allocation,
    pub adaptive: bool,
}

impl pacer_policy::Policy for Pin {
    fn name(&self) -> &'static str {
        "pin"
    }
    fn adaptive_batch(&self) -> bool {
        self.adaptive
    }
    fn allocate(&mut self, view: &pacer_policy::ClusterView) -> Vec<pacer_model::Allocation> {
        view.jobs.iter().map(|_| self.alloc.clone()).collect()
    }
}

/// Writes `files` (path below `root`, text), creating their folders.
pub fn write_files(root: &std::path::Path, files: &[(&str, String)]) {
    for (f, text) in files {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}
