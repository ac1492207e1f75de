//! Policies on live data: a job's step-time model fitted from its reports, and the
//! Pollux-style policy deciding from it as it decides in the simulator.

use pacer_model::{Allocation, ClusterSpec, JobId, NodeId};
use pacer_policy::pollux::Pollux;
use pacer_policy::{JobView, Policy};
use pacer_predict::goodput::{
    fit_perf_params_from, BatchLimits, GoodputFn, GradParams, PerfObservation, PerfParams,
};
use pacer_serve::job::{job_view, JobRecord, JobState, Run};
use pacer_serve::live::MIN_FIT_SHAPES;
use pacer_serve::spec::{JobSpec, Report};

const BATCH: u64 = 256;

fn record(seq: u64, max_replicas: u32) -> JobRecord {
    let spec = JobSpec::from_toml(
        &format!(
            "name = \"j{seq}\"\ncommand = [\"true\"]\nadaptive = true\nreplicas = 1\n\
             max_replicas = {max_replicas}\nglobal_batch = {BATCH}\n"
        ),
        "test",
    )
    .expect("spec");
    let mut job = JobRecord::queued(format!("job-{seq}"), seq, spec, 1_000 * seq, String::new());
    job.state = JobState::Running;
    job
}

/// Runs `job` on `replicas` devices of node `node` and posts `n` reports of what
/// `truth` says a step takes there at `batch`.
fn run_and_report(
    job: &mut JobRecord,
    truth: &PerfParams,
    node: u32,
    replicas: u32,
    batch: u64,
    noise: f64,
) {
    job.attempts += 1;
    job.run = Some(Run {
        attempt: job.attempts,
        alloc: vec![(node, replicas)],
        slots: (0..replicas).collect(),
        device_type: "cpu".into(),
        handle: None,
        launched_ms: 0,
        start_step: job.progress.step,
        reported: false,
    });
    let b = batch as f64 / replicas as f64;
    let step = truth.step_time(1, replicas, b, 0);
    for k in 0..3 {
        let r = Report {
            step: job.progress.step + 10,
            samples: job.progress.samples + 10 * batch,
            time_s: k as f64,
            replicas,
            device_type: "cpu".into(),
            global_batch: batch,
            local_batches: vec![b as u64; replicas as usize],
            throughput: batch as f64 / step,
            step_time_s: step,
            noise_scale: Some(noise),
            loss: None,
            done: false,
        };
        job.absorb(&r, 0);
        job.reports += 1;
    }
}

fn compute_heavy() -> PerfParams {
    PerfParams {
        alpha_c: 0.02,
        beta_c: 0.002,
        alpha_n: 0.05,
        beta_n: 0.005,
        alpha_r: 0.01,
        beta_r: 0.001,
        gamma: 1.5,
    }
}

fn network_heavy() -> PerfParams {
    PerfParams {
        alpha_r: 0.25,
        beta_r: 0.05,
        alpha_n: 0.4,
        beta_n: 0.08,
        ..compute_heavy()
    }
}

#[test]
fn reports_at_one_two_and_four_replicas_fit_the_model_that_made_them() {
    let cluster = ClusterSpec::parse("1x8:cpu", "test").expect("cluster");
    let truth = PerfParams {
        alpha_r: 0.05,
        beta_r: 0.01,
        ..compute_heavy()
    };
    let mut job = record(1, 8);
    run_and_report(&mut job, &truth, 0, 1, BATCH, 500.0);
    // One shape: no model yet; the measured point extended linearly (the fallback).
    assert!(MIN_FIT_SHAPES == 2 && job.model.fits.is_empty());
    let v = job_view(&job, &cluster, 0);
    assert!(v.goodput.is_none() && v.goodput_by_type.is_empty());
    let one = BATCH as f64 / truth.step_time(1, 1, BATCH as f64, 0);
    let curve = &v.speed.as_ref().expect("speed").per_type[0];
    assert_eq!(curve.points.len(), 2);
    assert!(
        (curve.points[1].1 - 8.0 * one).abs() < 1e-6 * one,
        "{curve:?}"
    );
    run_and_report(&mut job, &truth, 0, 2, BATCH, 500.0);
    run_and_report(&mut job, &truth, 0, 4, BATCH, 500.0);
    let fit = *job.model.fit("cpu").expect("a fit from three shapes");
    for r in 1..=4u32 {
        let b = BATCH as f64 / r as f64;
        let (pred, seen) = (fit.step_time(1, r, b, 0), truth.step_time(1, r, b, 0));
        assert!(
            (pred / seen - 1.0).abs() < 0.03,
            "{r} replicas: {pred} vs {seen}"
        );
    }
    // The policy's view carries it: goodput at 3 replicas is the fit's throughput
    // (the job does not adapt its batch: efficiency 1 at its only batch).
    let v = job_view(&job, &cluster, 0);
    let g = v.goodput.expect("goodput model");
    let best = g.optimize(1, 3).expect("a batch for 3 replicas");
    let truth3 = BATCH as f64 / truth.step_time(1, 3, BATCH as f64 / 3.0, 0);
    assert!(
        (best.goodput / truth3 - 1.0).abs() < 0.03,
        "{best:?} vs {truth3}"
    );
    assert_eq!(v.goodput_by_type.len(), 1);
    // Pollux's exploration limit: twice the most replicas measured.
    assert_eq!(v.max_replicas, 8);
    // The speed curve at the unmeasured size 8 comes from the fit, not a line.
    let curve = &v.speed.as_ref().expect("speed").per_type[0];
    let at8 = curve.rate(8, true);
    let fit8 = BATCH as f64 / fit.step_time(1, 8, BATCH as f64 / 8.0, 0);
    assert!((at8 / fit8 - 1.0).abs() < 1e-9, "{at8} vs {fit8}");
}

/// The view the simulator gives a Pollux job with online profiles
/// (`crates/sim/src/engine/view.rs`, `progress/profiled.rs`): its model fitted by
/// `fit_perf_params_from` to the (nodes, replicas, atomic batch) → (compute, step)
/// times it ran at, its gradient statistics, its batch limits, max replicas twice the
/// most it ran at.
fn simulator_view(
    id: u32,
    truth: &PerfParams,
    shapes: &[u32],
    batches: (f64, f64),
    noise: f64,
    current: Allocation,
) -> JobView {
    let obs: Vec<PerfObservation> = shapes
        .iter()
        .map(|&r| {
            let b = BATCH as f64 / r as f64;
            PerfObservation {
                nodes: 1,
                replicas: r,
                atomic_bsz: b,
                compute_time_s: truth.compute_time(b),
                step_time_s: truth.step_time(1, r, b, 0),
            }
        })
        .collect();
    let limits = BatchLimits {
        base_batch: batches.0,
        max_batch: batches.1,
        min_atomic: 1.0,
        max_atomic: batches.1,
        accumulation: false,
    };
    JobView {
        max_replicas: 2 * shapes.iter().max().expect("shapes"),
        current,
        goodput: Some(GoodputFn {
            perf: fit_perf_params_from(&obs, None).expect("fit"),
            grad: GradParams {
                sqr: 1.0,
                var: noise / batches.0,
            },
            limits,
        }),
        goodput_version: 1,
        ..JobView::basic(JobId(id), id as f64, 1)
    }
}

#[test]
fn pollux_decides_in_the_service_as_in_the_simulator() {
    let cluster = ClusterSpec::parse("4x4:cpu", "test").expect("cluster");
    // Four jobs, each measured at 1, 2 and 4 replicas on one node and now running on
    // two: two that scale (one of them with a noisy gradient that pays for a larger
    // batch, which it reported using), two held back by their all-reduce.
    let jobs = [
        (compute_heavy(), 4000.0, 1024),
        (compute_heavy(), 20.0, BATCH),
        (network_heavy(), 20.0, BATCH),
        (network_heavy(), 4000.0, BATCH),
    ];
    let mut records = Vec::new();
    let mut sim_views = Vec::new();
    for (i, (truth, noise, top)) in jobs.iter().enumerate() {
        let seq = i as u64 + 1;
        let node = i as u32;
        let mut job = record(seq, 16);
        run_and_report(&mut job, truth, node, 1, BATCH, *noise);
        run_and_report(&mut job, truth, node, 4, BATCH, *noise);
        if *top > BATCH {
            // It adapted its own batch once (Pollux-style jobs pick theirs).
            run_and_report(&mut job, truth, node, 4, *top, *noise);
        }
        run_and_report(&mut job, truth, node, 2, BATCH, *noise);
        let current = Allocation::from_pairs([(NodeId(node), 2)]);
        sim_views.push(simulator_view(
            seq as u32,
            truth,
            &[1, 2, 4],
            (BATCH as f64, *top as f64),
            *noise,
            current,
        ));
        records.push(job);
    }
    let now_s = 600.0;
    let serve_views: Vec<JobView> = records.iter().map(|j| job_view(j, &cluster, 0)).collect();
    for (s, m) in serve_views.iter().zip(&sim_views) {
        assert_eq!((s.id, s.arrival_s), (m.id, m.arrival_s));
        assert_eq!((s.max_replicas, &s.current), (m.max_replicas, &m.current));
        assert_eq!(
            s.goodput.map(|g| g.limits),
            m.goodput.map(|g| g.limits),
            "same batch limits"
        );
    }
    let decide = |views: &[JobView]| {
        Pollux::default().allocate(&pacer_policy::ClusterView {
            now_s,
            cluster: &cluster,
            jobs: views,
        })
    };
    let (in_service, in_simulator) = (decide(&serve_views), decide(&sim_views));
    assert_eq!(in_service, in_simulator);
    // Not a trivial decision: the scalable jobs get more than the others.
    let r: Vec<u32> = in_service.iter().map(Allocation::replicas).collect();
    eprintln!("pollux replicas per job: {r:?}");
    assert!(r[0] > r[2] && r[1] > r[3], "{r:?}");
    assert!(r.iter().all(|&n| n >= 1), "{r:?}");
}
