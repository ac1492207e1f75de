//! Replay (issue 26): the same job reports reach the same decisions through the
//! simulator and through the service.
//!
//! Adaptive jobs that accept a mix of device types run on a cluster of two types and
//! report step times at several allocations, samples progressed and their gradient
//! noise scale. The service gets the reports as `/report` gives them to it
//! (`JobRecord::absorb`, what `Core::report` calls: its step-time fit, then
//! `job::job_facts`). The simulator takes no reports: what it would know of the same
//! runs is written here in its terms (per type the model fitted to the runs' points,
//! the gradient statistics of the noise scale, the batch range, the most replicas run,
//! progress) and goes through its own translation (`SimJobFacts::facts`, the code the
//! engine's `job_view` calls). Both end in the one builder (`JobFacts::view`).
//!
//! - With the simulator fitting what a report carries (step times), the views are the
//!   same, models included, and so are the `pollux`, `sia-pacer` and `sia-pacer-mix`
//!   allocations and each job's batch on its allocation (`decide::batch_on_allocation`).
//! - With its own online fit (compute and step times), the allocations are the same;
//!   the batches may differ (6 % on an extrapolated two-node shape), as the fits do.
//! - A job that one type cannot hold is grown across types by `sia-pacer-mix` in both
//!   drivers (the service never gave a job `JobView::mixed` before the shared builder).
//!
//! Breaking either translation fails it (checked once: the service's `mixed_types`
//! dropped, the simulator's exploration cap dropped).

use pacer_control::job::decide::{
    batch_on_allocation, fit_step_model, fit_step_model_from_step_times,
};
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, NodeId};
use pacer_policy::{ClusterView, JobView, SpeedCurve, SpeedTable};
use pacer_predict::goodput::{
    BatchLimits, GoodputFn, GradParams, PerfObservation, PerfParams, StepObservation,
};
use pacer_serve::job::{job_view, JobRecord, JobState, Run};
use pacer_serve::spec::{JobSpec, Report};
use pacer_sim::engine::{AdaptiveView, SimJobFacts};
use std::sync::Arc;

const BATCH: u64 = 256;
const MAX_REPLICAS: u32 = 8;
const TOTAL_SAMPLES: u64 = 10_000_000;
/// Nodes 0 and 1 are type 0 (`fast`), 2 and 3 type 1 (`slow`).
const CLUSTER: &str = "2x4:fast,2x4:slow";
const TYPES: [&str; 2] = ["fast", "slow"];

/// The step-time model that makes the reports of one job on `fast`; on `slow`
/// everything takes `slow` times as long.
fn truth_at(network_heavy: bool, ty: usize, slow: f64) -> PerfParams {
    let p = if network_heavy {
        PerfParams {
            alpha_c: 0.02,
            beta_c: 0.002,
            alpha_n: 0.4,
            beta_n: 0.08,
            alpha_r: 0.25,
            beta_r: 0.05,
            gamma: 1.5,
        }
    } else {
        PerfParams {
            alpha_c: 0.02,
            beta_c: 0.002,
            alpha_n: 0.05,
            beta_n: 0.005,
            alpha_r: 0.01,
            beta_r: 0.001,
            gamma: 1.5,
        }
    };
    let k = if ty == 0 { 1.0 } else { slow };
    PerfParams {
        alpha_c: p.alpha_c * k,
        beta_c: p.beta_c * k,
        alpha_n: p.alpha_n * k,
        beta_n: p.beta_n * k,
        alpha_r: p.alpha_r * k,
        beta_r: p.beta_r * k,
        gamma: p.gamma,
    }
}

/// One run of a job: device type, first node, nodes (consecutive, the replicas split
/// evenly), replicas, global batch.
#[derive(Clone, Copy)]
struct RunAt {
    ty: usize,
    node: u32,
    nodes: u32,
    replicas: u32,
    batch: u64,
}

impl RunAt {
    fn alloc(&self) -> Vec<(u32, u32)> {
        (0..self.nodes)
            .map(|k| (self.node + k, self.replicas / self.nodes))
            .collect()
    }
}

/// A job of the replay: its step-time models, gradient noise, runs, the batches it
/// used, its restarts and service so far.
struct Replayed {
    seq: u64,
    /// How many times slower the `slow` type is.
    slow: f64,
    max_replicas: u32,
    network_heavy: bool,
    noise: f64,
    runs: Vec<RunAt>,
}

impl Replayed {
    fn truth(&self, ty: usize) -> PerfParams {
        truth_at(self.network_heavy, ty, self.slow)
    }
    fn top_batch(&self) -> u64 {
        self.runs.iter().map(|r| r.batch).max().unwrap_or(BATCH)
    }
    fn last(&self) -> RunAt {
        *self.runs.last().expect("runs")
    }
    fn current(&self) -> Allocation {
        Allocation::from_pairs(self.last().alloc().into_iter().map(|(n, c)| (NodeId(n), c)))
    }
    fn restarts(&self) -> u32 {
        self.runs.len() as u32 - 1
    }
    /// Reports per run and samples per report.
    const REPORTS: u64 = 3;
    const STEPS: u64 = 10;
    fn samples(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| Self::REPORTS * Self::STEPS * r.batch)
            .sum()
    }
    fn attained_device_s(&self) -> f64 {
        100.0 * self.seq as f64
    }
}

// ---------------------------------------------------------------------------------------
// The service: the job's record, fed its reports as `/report` feeds them.
// ---------------------------------------------------------------------------------------

fn service_record(job: &Replayed) -> JobRecord {
    let spec = JobSpec::from_toml(
        &format!(
            "name = \"j{}\"\ncommand = [\"true\"]\nadaptive = true\nreplicas = 1\n\
             max_replicas = {}\nglobal_batch = {BATCH}\nmixed_types = true\n\
             total_samples = {TOTAL_SAMPLES}\n",
            job.seq, job.max_replicas
        ),
        "test",
    )
    .expect("spec");
    let mut rec = JobRecord::queued(
        format!("job-{}", job.seq),
        job.seq,
        spec,
        1_000 * job.seq,
        String::new(),
    );
    rec.state = JobState::Running;
    for run in &job.runs {
        rec.attempts += 1;
        rec.run = Some(Run {
            attempt: rec.attempts,
            alloc: run.alloc(),
            slots: (0..run.replicas).collect(),
            device_type: TYPES[run.ty].into(),
            handle: None,
            launched_ms: 0,
            start_step: rec.progress.step,
            reported: false,
        });
        let b = run.batch as f64 / run.replicas as f64;
        let step = job.truth(run.ty).step_time(run.nodes, run.replicas, b, 0);
        for k in 0..Replayed::REPORTS {
            let r = Report {
                step: rec.progress.step + Replayed::STEPS,
                samples: rec.progress.samples + Replayed::STEPS * run.batch,
                time_s: k as f64,
                replicas: run.replicas,
                device_type: TYPES[run.ty].into(),
                global_batch: run.batch,
                local_batches: vec![b as u64; run.replicas as usize],
                throughput: run.batch as f64 / step,
                step_time_s: step,
                noise_scale: Some(job.noise),
                loss: None,
                done: false,
            };
            // What `Core::report` does with an accepted report.
            rec.absorb(&r, 0);
            rec.reports += 1;
        }
    }
    rec.restarts = job.restarts();
    rec.attained_device_s = job.attained_device_s();
    rec
}

// ---------------------------------------------------------------------------------------
// The simulator: what it measures of the same runs, in its own terms.
// ---------------------------------------------------------------------------------------

/// What the simulator measures of a run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Measures {
    /// What a report carries: step times (the service's fit,
    /// `decide::fit_step_model_from_step_times`).
    StepTimes,
    /// Its own: compute and step times (its online fit, `online.rs`,
    /// `decide::fit_step_model`).
    ComputeAndStep,
}

/// The simulator's model of type `ty` from the job's points (nodes, replicas,
/// atomic batch) → times there; `None` where the job has not run at two shapes.
fn sim_fit(job: &Replayed, ty: usize, measures: Measures) -> Option<PerfParams> {
    let truth = job.truth(ty);
    let mut obs: Vec<PerfObservation> = job
        .runs
        .iter()
        .filter(|r| r.ty == ty)
        .map(|r| {
            let b = r.batch as f64 / r.replicas as f64;
            PerfObservation {
                nodes: r.nodes,
                replicas: r.replicas,
                atomic_bsz: b,
                compute_time_s: truth.compute_time(b),
                step_time_s: truth.step_time(r.nodes, r.replicas, b, 0),
            }
        })
        .collect();
    let key = |o: &PerfObservation| (o.nodes, o.replicas, o.atomic_bsz as u64);
    obs.sort_by_key(key);
    obs.dedup_by(|a, b| key(a) == key(b));
    let mut shapes: Vec<(u32, u32)> = obs.iter().map(|o| (o.nodes, o.replicas)).collect();
    shapes.dedup();
    if shapes.len() < 2 {
        return None;
    }
    Some(match measures {
        Measures::ComputeAndStep => fit_step_model(&obs, None).expect("fit"),
        Measures::StepTimes => {
            let steps: Vec<StepObservation> = obs
                .iter()
                .map(|o| StepObservation {
                    nodes: o.nodes,
                    replicas: o.replicas,
                    atomic_bsz: o.atomic_bsz,
                    step_time_s: o.step_time_s,
                })
                .collect();
            fit_step_model_from_step_times(&steps, None).expect("fit")
        }
    })
}

/// The simulator's facts of `job`: its models per type (a type it has not fitted
/// borrows the fit of the type it runs on, as the service's does), the gradient
/// statistics of its noise scale at the base batch, the batch range it used, the
/// most replicas it ran at, its speed per type at its batch.
fn sim_facts(job: &Replayed, cluster: &ClusterSpec, measures: Measures) -> SimJobFacts {
    let limits = BatchLimits {
        base_batch: BATCH as f64,
        max_batch: job.top_batch() as f64,
        min_atomic: 1.0,
        max_atomic: job.top_batch() as f64,
        accumulation: false,
    };
    let grad = GradParams {
        sqr: 1.0,
        var: job.noise / BATCH as f64,
    };
    let fits: Vec<Option<PerfParams>> = (0..TYPES.len())
        .map(|t| sim_fit(job, t, measures))
        .collect();
    let running = fits[job.last().ty].or_else(|| fits.iter().flatten().next().copied());
    let model = |perf: PerfParams| GoodputFn { perf, grad, limits };
    let by_type: Vec<Option<GoodputFn>> = fits.iter().map(|f| f.or(running).map(model)).collect();
    let speed = SpeedTable {
        per_type: (0..TYPES.len())
            .map(|t| SpeedCurve {
                points: SpeedCurve::doubling_sizes(job.max_replicas)
                    .into_iter()
                    .map(|r| {
                        let step = job.truth(t).step_time(
                            r.div_ceil(cluster.max_gpus_per_node()),
                            r,
                            BATCH as f64 / r as f64,
                            0,
                        );
                        (r, BATCH as f64 / step)
                    })
                    .collect(),
                spread_factor: 1.0,
            })
            .collect(),
    };
    SimJobFacts {
        index: job.seq as usize,
        arrival_s: job.seq as f64,
        requested_replicas: 1,
        requested_batch: None,
        attained_gpu_s: job.attained_device_s(),
        restarts: Some(job.restarts()),
        restart_s: None,
        restart_s_per_doubling: 0.0,
        alloc: job.current(),
        goodput_version: 1,
        max_replicas_cap: None,
        adaptive: Some(AdaptiveView {
            limit: job.max_replicas,
            measured_replicas: job.runs.iter().map(|r| r.replicas).max().unwrap_or(0),
            goodput: running.map(model),
            goodput_by_type: by_type,
            measured_by_type: Vec::new(),
        }),
        speed: Arc::new(speed),
        iterations_per_work: None,
        work_done: job.samples() as f64,
        total_work: TOTAL_SAMPLES as f64,
        quality: None,
        deadline_s: None,
        mixed_types: true,
    }
}

fn jobs() -> Vec<Replayed> {
    let run = |ty, node, replicas, batch| RunAt {
        ty,
        node,
        nodes: 1,
        replicas,
        batch,
    };
    let wide = |ty, node, replicas| RunAt {
        ty,
        node,
        nodes: 2,
        replicas,
        batch: BATCH,
    };
    vec![
        // Scales well; a noisy gradient that pays for the larger batch it used.
        Replayed {
            slow: 3.0,
            max_replicas: MAX_REPLICAS,
            seq: 1,
            network_heavy: false,
            noise: 4000.0,
            runs: vec![
                run(0, 0, 1, BATCH),
                run(0, 0, 4, BATCH),
                run(0, 0, 4, 1024),
                wide(0, 0, 8),
                run(1, 2, 1, BATCH),
                run(1, 2, 2, BATCH),
                wide(1, 2, 4),
                run(0, 0, 2, BATCH),
            ],
        },
        // Scales well, quiet gradient; measured on the fast type only.
        Replayed {
            slow: 3.0,
            max_replicas: MAX_REPLICAS,
            seq: 2,
            network_heavy: false,
            noise: 20.0,
            runs: vec![
                run(0, 1, 1, BATCH),
                run(0, 1, 2, BATCH),
                wide(0, 0, 4),
                run(0, 1, 4, BATCH),
            ],
        },
        // Held back by its all-reduce; runs on the slow type; measured at 2 replicas
        // at most, so Pollux's exploration cap (4) binds.
        Replayed {
            slow: 3.0,
            max_replicas: MAX_REPLICAS,
            seq: 3,
            network_heavy: true,
            noise: 20.0,
            runs: vec![
                run(0, 0, 1, BATCH),
                run(0, 0, 2, BATCH),
                run(1, 3, 1, BATCH),
                wide(1, 2, 2),
                run(1, 3, 2, BATCH),
            ],
        },
    ]
}

fn decide(policy: &str, cluster: &ClusterSpec, views: &[JobView]) -> Vec<Allocation> {
    pacer_policy::parse(policy)
        .expect("policy")
        .allocate(&ClusterView {
            now_s: 600.0,
            cluster,
            jobs: views,
        })
}

/// The job-level decision on each allocation: (nodes, replicas) → atomic batch and
/// accumulation steps.
fn batches(
    cluster: &ClusterSpec,
    views: &[JobView],
    allocs: &[Allocation],
) -> Vec<Option<(u32, u32)>> {
    views
        .iter()
        .zip(allocs)
        .map(|(v, a)| {
            let ty = a
                .slots()
                .first()
                .map(|&(n, _)| cluster.nodes[n.0 as usize].device_type)?;
            let g = v.goodput_by_type.get(ty.0 as usize).copied().flatten()?;
            batch_on_allocation(&g, a.slots().len() as u32, a.replicas())
                .map(|c| (c.atomic_bsz, c.accum_steps))
        })
        .collect()
}

/// The views of the replay's jobs in the service and in the simulator.
fn views(measures: Measures) -> (ClusterSpec, Vec<JobView>, Vec<JobView>) {
    views_of(CLUSTER, &jobs(), measures)
}

fn views_of(
    cluster: &str,
    jobs: &[Replayed],
    measures: Measures,
) -> (ClusterSpec, Vec<JobView>, Vec<JobView>) {
    let cluster = ClusterSpec::parse(cluster, "test").expect("cluster");
    let serve: Vec<JobView> = jobs
        .iter()
        .map(|j| job_view(&service_record(j), &cluster, 0))
        .collect();
    let sim: Vec<JobView> = jobs
        .iter()
        .map(|j| sim_facts(j, &cluster, measures).facts().view())
        .collect();
    (cluster, serve, sim)
}

/// What both drivers must agree on whatever fit each makes.
fn same_facts(s: &JobView, m: &JobView) {
    let id = s.id;
    assert_eq!((s.id, s.arrival_s), (m.id, m.arrival_s), "{id:?}");
    assert_eq!(s.requested_replicas, m.requested_replicas, "{id:?}");
    assert_eq!(s.max_replicas, m.max_replicas, "{id:?}: exploration cap");
    assert_eq!(s.current, m.current, "{id:?}");
    assert_eq!(s.num_restarts, m.num_restarts, "{id:?}");
    assert_eq!(s.attained_gpu_s, m.attained_gpu_s, "{id:?}");
    assert_eq!(
        (s.work_done, s.work_left),
        (m.work_done, m.work_left),
        "{id:?}"
    );
    assert_eq!(s.one_type, m.one_type, "{id:?}");
    assert_eq!(
        s.goodput.map(|g| (g.limits, g.grad)),
        m.goodput.map(|g| (g.limits, g.grad)),
        "{id:?}: batch limits and gradient statistics"
    );
    let has = |v: &JobView| {
        v.goodput_by_type
            .iter()
            .map(Option::is_some)
            .collect::<Vec<_>>()
    };
    assert_eq!(has(s), has(m), "{id:?}: models per type");
    assert_eq!(
        s.mixed.is_some(),
        m.mixed.is_some(),
        "{id:?}: a mixed goodput"
    );
}

/// The mixed goodput of a balanced allocation over both types.
fn mixed_goodput(v: &JobView) -> f64 {
    let groups = [(DeviceTypeId(0), 2), (DeviceTypeId(1), 2)];
    v.mixed.as_ref().map_or(0.0, |m| m.goodput(&groups, 2))
}

const POLICIES: [&str; 3] = ["pollux", "sia-pacer", "sia-pacer-mix"];

fn allocations(
    policy: &str,
    cluster: &ClusterSpec,
    serve: &[JobView],
    sim: &[JobView],
) -> Vec<Allocation> {
    let (in_service, in_simulator) = (decide(policy, cluster, serve), decide(policy, cluster, sim));
    let r: Vec<Vec<(u32, u32)>> = in_service
        .iter()
        .map(|a| a.slots().iter().map(|&(n, c)| (n.0, c)).collect())
        .collect();
    eprintln!("{policy}: {r:?}");
    assert_eq!(in_service, in_simulator, "{policy}");
    assert!(
        in_service.iter().filter(|a| a.replicas() > 0).count() >= 2,
        "{policy}: not a trivial decision: {r:?}"
    );
    in_service
}

#[test]
fn the_simulator_and_the_service_decide_alike_from_the_same_reports() {
    // The simulator knows what the reports say: the same step times, the same fit.
    let (cluster, serve, sim) = views(Measures::StepTimes);
    for (s, m) in serve.iter().zip(&sim) {
        same_facts(s, m);
        assert_eq!(s.goodput, m.goodput, "{:?}", s.id);
        assert_eq!(s.goodput_by_type, m.goodput_by_type, "{:?}", s.id);
        assert_eq!(mixed_goodput(s), mixed_goodput(m), "{:?}", s.id);
        assert!(mixed_goodput(s) > 0.0, "{:?}", s.id);
    }
    assert!(
        serve.iter().all(|v| v.mixed.is_some()),
        "the service gives a job that accepts a mix and has two models a mixed goodput"
    );
    for policy in POLICIES {
        let allocs = allocations(policy, &cluster, &serve, &sim);
        assert_eq!(
            batches(&cluster, &serve, &allocs),
            batches(&cluster, &sim, &allocs),
            "{policy}: the jobs' batches on their allocations"
        );
    }
}

#[test]
fn the_simulator_s_own_fit_allocates_as_the_service_s() {
    // The simulator also knows each step's compute time (its online fit): the fits
    // differ a little, the allocations do not.
    let (cluster, serve, sim) = views(Measures::ComputeAndStep);
    for (s, m) in serve.iter().zip(&sim) {
        same_facts(s, m);
        let (a, b) = (mixed_goodput(s), mixed_goodput(m));
        assert!(
            a > 0.0 && (a / b - 1.0).abs() < 0.05,
            "{:?}: {a} vs {b}",
            s.id
        );
    }
    for policy in POLICIES {
        allocations(policy, &cluster, &serve, &sim);
    }
}

#[test]
fn a_job_alone_is_grown_across_types_in_the_service_as_in_the_simulator() {
    // One type cannot hold the scalable job: 4 devices of each type, as fast as each
    // other. `sia-pacer-mix` grows it over both in both drivers.
    let run = |ty, node, nodes, replicas| RunAt {
        ty,
        node,
        nodes,
        replicas,
        batch: BATCH,
    };
    let job = Replayed {
        seq: 1,
        slow: 1.0,
        max_replicas: 8,
        network_heavy: false,
        noise: 4000.0,
        runs: vec![
            run(1, 1, 1, 1),
            run(1, 1, 1, 2),
            run(1, 1, 1, 4),
            run(0, 0, 1, 1),
            run(0, 0, 1, 2),
            run(0, 0, 1, 4),
        ],
    };
    let (cluster, serve, sim) = views_of("1x4:fast,1x4:slow", &[job], Measures::StepTimes);
    same_facts(&serve[0], &sim[0]);
    let decide_one = |views: &[JobView]| decide("sia-pacer-mix", &cluster, views).remove(0);
    let (in_service, in_simulator) = (decide_one(&serve), decide_one(&sim));
    assert_eq!(in_service, in_simulator);
    let types: Vec<u16> = in_service
        .slots()
        .iter()
        .map(|&(n, _)| cluster.nodes[n.0 as usize].device_type.0)
        .collect();
    assert!(types.contains(&0) && types.contains(&1), "{in_service:?}");
    // Without the mixed goodput (the service before issue 26's shared builder) it
    // stays on one type.
    let mut unmixed = serve.clone();
    unmixed[0].mixed = None;
    let alone = decide_one(&unmixed);
    let first = cluster.nodes[alone.slots()[0].0 .0 as usize].device_type;
    assert!(
        alone
            .slots()
            .iter()
            .all(|&(n, _)| cluster.nodes[n.0 as usize].device_type == first),
        "{alone:?}"
    );
}
