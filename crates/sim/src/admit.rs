//! Admission: whether a workload can run on a cluster at all, checked once before
//! any round is simulated, for every policy alike.
//!
//! - **Device types.** A job's speed is ground truth only on the device types it was
//!   measured on ([`measured_types`]): a Pollux application's profile lists them
//!   (`t4` for the embedded tables), a Gavel job has a throughput per type, a Gavel
//!   duration job ran at `--gavel-device`; Philly and synthetic duration jobs and
//!   recorded loss curves do not depend on the type. A cluster type that no job of
//!   the workload has measurements for, or a job with none for any type of the
//!   cluster, is an error: running it there would only relabel another type's
//!   numbers. Types a job lacks while others have them are types it is never
//!   placed on ([`usable_types`], enforced by the engine on every allocation).
//! - **Size.** A job that asks for more devices than the cluster has of the types
//!   it can use is an error, not clipped. Fixed-size policies (FIFO, Tiresias, the
//!   fair share's demand) gang-schedule exactly the request, so such a job could
//!   never start and the run would idle to the time limit; clipping it instead
//!   would silently change the workload (its requested size sets its batch split,
//!   its ρ baseline and Gavel's duration), so numbers would stop matching the file
//!   the user gave. The fix belongs in the workload or the cluster, and the error
//!   names the job, its request and the capacity. With every request within the
//!   cluster, tables sized by a job's request are bounded by the cluster's size.

use crate::apps::AppModel;
use crate::engine::{SimJob, Work};
use pacer_model::{ClusterSpec, DeviceTypeId};

/// A workload that cannot run on a cluster.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// Device types of the cluster no job has measurements for.
    #[error(
        "device type{s} {types} in the cluster: no job of the workload has measurements for \
         {them}; the workload's jobs were measured on {known} (use a cluster of those types)",
        s = if types.contains(',') { "s" } else { "" },
        them = if types.contains(',') { "them" } else { "it" }
    )]
    UnmeasuredType { types: String, known: String },
    /// A job with no measurements for any type of the cluster.
    #[error(
        "job `{job}` (application `{app}`) has measurements for {known} only; the cluster \
         has {cluster}"
    )]
    NoMeasuredType {
        job: String,
        app: String,
        known: String,
        cluster: String,
    },
    /// A job asking for more devices than the cluster has of the types it can use.
    #[error(
        "job `{job}` (application `{app}`) asks for {requested} devices; the cluster has \
         {capacity} it can run on ({types}), so it could never start — lower its \
         num_replicas or use a larger cluster"
    )]
    TooLarge {
        job: String,
        app: String,
        requested: u32,
        capacity: u64,
        types: String,
    },
}

/// Device types `job` has ground truth for; `None`: its speed does not depend on
/// the type (any type will do).
pub fn measured_types<'a>(job: &'a SimJob, apps: &'a [AppModel]) -> Option<Vec<&'a str>> {
    let by_work: Option<Vec<&str>> = match &job.work {
        Work::Profiled { app } => Some(
            apps[*app]
                .profile
                .device_types
                .iter()
                .map(String::as_str)
                .collect(),
        ),
        Work::Throughput { rates, .. } => Some(
            rates
                .iter()
                .filter(|r| r.consolidated > 0.0)
                .map(|r| r.device_type.as_str())
                .collect(),
        ),
        Work::Elastic { curves, .. } => {
            Some(curves.iter().map(|c| c.device_type.as_str()).collect())
        }
        Work::Duration { .. } | Work::LossCurve { .. } => None,
    };
    match (by_work, job.spec.device_type.as_deref()) {
        (None, None) => None,
        (None, Some(t)) => Some(vec![t]),
        (Some(v), None) => Some(v),
        (Some(v), Some(t)) => Some(
            v.into_iter()
                .filter(|x| x.eq_ignore_ascii_case(t))
                .collect(),
        ),
    }
}

/// Whether `job` can run on each device type of `cluster` (index = [`DeviceTypeId`]).
pub fn usable_types(cluster: &ClusterSpec, apps: &[AppModel], job: &SimJob) -> Vec<bool> {
    let known = measured_types(job, apps);
    cluster
        .device_types
        .iter()
        .map(|ty| {
            known
                .as_ref()
                .is_none_or(|k| k.iter().any(|t| t.eq_ignore_ascii_case(ty)))
        })
        .collect()
}

/// Devices of `cluster` on the types marked in `usable`.
pub fn capacity(cluster: &ClusterSpec, usable: &[bool]) -> u64 {
    cluster
        .nodes
        .iter()
        .filter(|n| usable.get(n.device_type.0 as usize) == Some(&true))
        .map(|n| n.gpus as u64)
        .sum()
}

fn listed<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut v: Vec<&str> = names.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v.join(", ")
}

/// Checks that every device type of `cluster` is measured for some job, every job
/// for some type of the cluster, and that no job asks for more devices than the
/// cluster has of its types. O(jobs × device types + nodes × device types).
pub fn check_workload(
    cluster: &ClusterSpec,
    apps: &[AppModel],
    jobs: &[SimJob],
) -> Result<(), WorkloadError> {
    let types = cluster.device_types.len();
    let mut used = vec![false; types];
    let mut known: Vec<&str> = Vec::new();
    let mut any_type = false;
    let usable: Vec<Vec<bool>> = jobs
        .iter()
        .map(|j| {
            match measured_types(j, apps) {
                Some(k) => known.extend(k),
                None => any_type = true,
            }
            let u = usable_types(cluster, apps, j);
            for (x, &y) in used.iter_mut().zip(&u) {
                *x |= y;
            }
            u
        })
        .collect();
    if !any_type && !jobs.is_empty() {
        let unused: Vec<&str> = (0..types)
            .filter(|&t| !used[t])
            .map(|t| cluster.device_types[t].as_str())
            .collect();
        if !unused.is_empty() {
            return Err(WorkloadError::UnmeasuredType {
                types: unused.join(", "),
                known: listed(known.iter().copied()),
            });
        }
    }
    let per_type: Vec<u64> = (0..types)
        .map(|t| cluster.gpus_of_type(DeviceTypeId(t as u16)) as u64)
        .collect();
    for (job, u) in jobs.iter().zip(&usable) {
        let names = || {
            listed(
                (0..types)
                    .filter(|&t| u[t])
                    .map(|t| cluster.device_types[t].as_str()),
            )
        };
        if !u.iter().any(|&x| x) {
            return Err(WorkloadError::NoMeasuredType {
                job: job.spec.name.clone(),
                app: job.spec.application.clone(),
                known: listed(measured_types(job, apps).unwrap_or_default()),
                cluster: listed(cluster.device_types.iter().map(String::as_str)),
            });
        }
        let cap: u64 = (0..types).filter(|&t| u[t]).map(|t| per_type[t]).sum();
        let requested = job.spec.requested_replicas;
        if requested as u64 > cap {
            return Err(WorkloadError::TooLarge {
                job: job.spec.name.clone(),
                app: job.spec.application.clone(),
                requested,
                capacity: cap,
                types: names(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::embedded_profiles;
    use crate::engine::{SimConfig, SimError, Simulation, TypeRate};
    use crate::trace::load_pollux_workload;
    use pacer_model::Allocation;

    fn apps() -> Vec<AppModel> {
        embedded_profiles().into_iter().map(AppModel::new).collect()
    }

    fn cluster(s: &str) -> ClusterSpec {
        ClusterSpec::parse(s, "--cluster").unwrap()
    }

    /// A Gavel-style job with a throughput of 1 step/s on each of `types`.
    fn gavel(name: &str, types: &[&str], scale: u32) -> SimJob {
        SimJob {
            spec: pacer_model::JobSpec {
                name: name.into(),
                arrival_s: 0.0,
                application: "A".into(),
                requested_replicas: scale,
                requested_batch: 0,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Throughput {
                steps: 600.0,
                rates: types
                    .iter()
                    .map(|t| TypeRate {
                        device_type: t.to_string(),
                        consolidated: 1.0,
                        unconsolidated: 1.0,
                    })
                    .collect(),
            },
        }
    }

    /// `num_replicas` above 2^31 hung every policy: the speed table's sizes
    /// `1u32 << k` wrapped to 0 and never reached the request, and a request far
    /// above the cluster sized per-job tables (and an O(n²) placement lookup) by it.
    #[test]
    fn speed_tables_of_huge_requests_end_and_stay_within_the_cluster() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let a = apps();
            let c = cluster("1x4:t4");
            let mut out = Vec::new();
            for req in [2_147_483_649u32, u32::MAX, 10_000_000, 100_000] {
                let jobs = load_pollux_workload(
                    &format!("{HEADER}huge,0,cifar10,{req},128\n"),
                    "w.csv",
                    &a,
                    1.0,
                )
                .unwrap();
                let sim = Simulation {
                    cluster: &c,
                    apps: &a,
                    jobs: &jobs,
                    config: SimConfig::default(),
                };
                let t = sim.speed_tables();
                let mut fifo = pacer_policy::fifo::Fifo;
                let run = sim.run(&mut fifo, |_| {});
                out.push((
                    t[0].per_type[0].max_useful(),
                    t[0].per_type[0].points.len(),
                    run,
                ));
            }
            tx.send(out).unwrap();
        });
        let out = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("speed tables and admission of huge requests finish");
        for (max_useful, points, run) in out {
            assert_eq!((max_useful, points), (4, 3));
            assert!(
                matches!(
                    run,
                    Err(SimError::Workload(WorkloadError::TooLarge {
                        capacity: 4,
                        ..
                    }))
                ),
                "{run:?}"
            );
        }
    }

    /// A policy's allocation on a type the job has no measurements for is refused,
    /// not run at another type's speed.
    #[test]
    fn an_allocation_on_an_unmeasured_type_is_refused() {
        struct NodeZero;
        impl pacer_policy::Policy for NodeZero {
            fn name(&self) -> &'static str {
                "node-zero"
            }
            fn allocate(&mut self, view: &pacer_policy::ClusterView) -> Vec<Allocation> {
                let mut v = vec![Allocation::empty(); view.jobs.len()];
                v[0] = Allocation::from_pairs([(pacer_model::NodeId(0), 1)]);
                v
            }
        }
        let c = cluster("1x4:v100,1x4:k80");
        let jobs = [
            gavel("k80-only", &["k80"], 1),
            gavel("both", &["v100", "k80"], 1),
        ];
        let sim = Simulation {
            cluster: &c,
            apps: &[],
            jobs: &jobs,
            config: SimConfig::default(),
        };
        let e = sim.run(&mut NodeZero, |_| {}).unwrap_err();
        assert!(
            e.to_string().ends_with(
                "job `k80-only` placed on node 0 of device type v100, which it has no \
                 measurements for"
            ),
            "{e}"
        );
    }

    /// Every policy places each job on the device types it has measurements for;
    /// the type-blind pools put the K80-only job on the V100 node, where it made no
    /// progress (or, for a Pollux table, ran at T4 speed).
    #[test]
    fn every_policy_places_jobs_on_their_types_only() {
        // The V100 node comes first, so a type-blind pool hands it out first.
        let c = cluster("1x4:v100,1x4:k80");
        let jobs = [
            gavel("k80-only", &["k80"], 2),
            gavel("both", &["v100", "k80"], 4),
            gavel("k80-only-2", &["k80"], 2),
        ];
        let sim = Simulation {
            cluster: &c,
            apps: &[],
            jobs: &jobs,
            config: SimConfig {
                max_time_s: 30.0 * 86_400.0,
                ..SimConfig::default()
            },
        };
        for name in pacer_policy::POLICY_NAMES {
            let mut p = pacer_policy::by_name(name).unwrap();
            let mut misplaced = 0;
            let r = sim
                .run(p.as_mut(), |info| {
                    for (i, job) in jobs.iter().enumerate() {
                        let on_v100 = info.allocation(i).slots().iter().any(|s| s.0 .0 == 0);
                        if on_v100 && job.spec.name.starts_with("k80-only") {
                            misplaced += 1;
                        }
                    }
                })
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(misplaced, 0, "{name}");
            assert_eq!(r.summary.finished, 3, "{name}");
        }
    }

    const HEADER: &str = "name,time,application,num_replicas,batch_size\n";

    #[test]
    fn a_request_larger_than_the_cluster_is_refused_by_name() {
        let a = apps();
        for req in ["65", "100000", "10000000", "2147483649", "4294967295"] {
            let jobs = load_pollux_workload(
                &format!("{HEADER}ok,0,cifar10,4,128\nhuge,10,cifar10,{req},128\n"),
                "w.csv",
                &a,
                1.0,
            )
            .unwrap();
            let e = check_workload(&cluster("16x4:t4"), &a, &jobs).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "job `huge` (application `cifar10`) asks for {req} devices; the cluster has \
                     64 it can run on (t4), so it could never start — lower its num_replicas or \
                     use a larger cluster"
                )
            );
        }
        let jobs =
            load_pollux_workload(&format!("{HEADER}x,0,cifar10,64,128\n"), "w", &a, 1.0).unwrap();
        assert_eq!(check_workload(&cluster("16x4:t4"), &a, &jobs), Ok(()));
    }

    #[test]
    fn cluster_types_are_checked_against_the_workload() {
        let a = apps();
        let jobs =
            load_pollux_workload(&format!("{HEADER}x,0,cifar10,4,128\n"), "w", &a, 1.0).unwrap();
        let e = check_workload(&cluster("8x4:v100,8x4:k80"), &a, &jobs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "device types v100, k80 in the cluster: no job of the workload has measurements for \
             them; the workload's jobs were measured on t4 (use a cluster of those types)"
        );
        let e = check_workload(&cluster("4x4:unknowngpu"), &a, &jobs).unwrap_err();
        assert!(e.to_string().starts_with("device type unknowngpu"), "{e}");
        // T4 beside a type nobody measured is still refused: nobody could use it.
        assert!(check_workload(&cluster("4x4:t4,4x4:v100"), &a, &jobs).is_err());
        assert_eq!(check_workload(&cluster("4x4:T4"), &a, &jobs), Ok(()));
        // The capacity counts only the types a job has data for.
        let c = cluster("1x4:v100,2x4:k80");
        let mixed = [gavel("a", &["v100", "k80"], 12), gavel("b", &["k80"], 8)];
        assert_eq!(check_workload(&c, &[], &mixed), Ok(()));
        assert_eq!(usable_types(&c, &[], &mixed[1]), vec![false, true]);
        let e = check_workload(
            &c,
            &[],
            &[gavel("a", &["v100", "k80"], 1), gavel("b", &["k80"], 9)],
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("asks for 9 devices; the cluster has 8 it can run on (k80)"),
            "{e}"
        );
        let e = check_workload(
            &c,
            &[],
            &[gavel("a", &["v100", "k80"], 1), gavel("p", &["p100"], 1)],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "job `p` (application `A`) has measurements for p100 only; the cluster has k80, v100"
        );
    }
}
