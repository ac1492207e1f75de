//! A job on a mixed allocation runs on its types' measured tables (issue 26;
//! docs/mixed-types.md, "In the simulator"): its step is composed by hand here from the
//! table rows at the allocation's placement — per type `step − sync` at the local batch
//! the worker level gives it, the slowest of those plus the largest sync — and the
//! simulated run's time follows that step, not the step of the models fitted to the
//! tables (which this fixture's curved compute and batch-dependent sync make differ).

mod common;

use common::Pin;
use pacer_model::{Allocation, ClusterSpec, JobSpec, NodeId};
use pacer_sim::apps::load_sia_dir;
use pacer_sim::engine::mixed::table_mix;
use pacer_sim::{SimConfig, SimJob, Simulation, Work};

const VAL: &str = "progress,iteration,metric,grad_sqr,grad_var\n\
    20000,20000,0.5,1.0,40.0\n40000,40000,0.6,1.0,40.0\n";
const BSZ: [f64; 4] = [4.0, 8.0, 16.0, 32.0];
/// Compute seconds of the fast type at local batch `b` (curved: not Pollux's affine
/// compute); the slow type takes `SLOW` times as long.
fn compute(b: f64) -> f64 {
    0.02 + 0.002 * b + 0.0002 * b * b
}
const SLOW: f64 = 1.8;
/// Sync at placement `2,2` (one node of each type in the mix), falling with the
/// local batch as Sia's measured syncs do; the slow type's is larger. Both are far
/// below the other cross-node rows' (0.3 s on `1,1`, 0.8 s on 3 nodes), which a
/// fitted network model cannot follow.
fn sync22(slow: bool, b: f64) -> f64 {
    if slow {
        0.08 - 0.001 * b
    } else {
        0.04 - 0.0005 * b
    }
}

fn apps(tag: &str) -> Vec<pacer_sim::AppModel> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("pacer-mixtab-{tag}-"))
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let table = |slow: bool| {
        let k = if slow { SLOW } else { 1.0 };
        let mut s = String::from("placement,local_bsz,step_time,sync_time\n");
        for b in BSZ {
            let c = k * compute(b);
            s += &format!("1,{b},{c},0\n");
            s += &format!("2,{b},{},0.01\n", c + 0.01);
            s += &format!("11,{b},{},0.3\n", c * 1.1 + 0.3);
            let y = sync22(slow, b);
            s += &format!("22,{b},{},{y}\n", c + y);
        }
        s
    };
    let scal = |slow: bool| {
        let k = if slow { SLOW } else { 1.0 };
        let mut s = String::from("num_nodes,num_replicas,local_bsz,step_time,sync_time\n");
        for b in BSZ {
            s += &format!("3,6,{b},{},0.8\n", k * compute(b) + 0.8);
        }
        s
    };
    common::write_files(
        &root,
        &[
            ("bert/placements-fast.csv", table(false)),
            ("bert/scalability-fast.csv", scal(false)),
            ("bert/placements-slow.csv", table(true)),
            ("bert/scalability-slow.csv", scal(true)),
            ("bert/validation-16.csv", VAL.to_string()),
            ("bert/validation-1024.csv", VAL.to_string()),
        ],
    );
    load_sia_dir(&root, false).unwrap()
}

/// Linear between the fixture's local batches.
fn lerp(f: impl Fn(f64) -> f64, b: f64) -> f64 {
    let k = BSZ.partition_point(|&x| x <= b).clamp(1, BSZ.len() - 1) - 1;
    let t = (b - BSZ[k]) / (BSZ[k + 1] - BSZ[k]);
    f(BSZ[k]) + t * (f(BSZ[k + 1]) - f(BSZ[k]))
}

const BATCH: u32 = 64;
const CLUSTER: &str = "1x2:fast,1x2:slow";

fn job() -> Vec<SimJob> {
    vec![SimJob {
        spec: JobSpec {
            name: "j".into(),
            arrival_s: 0.0,
            application: "bert".into(),
            requested_replicas: 4,
            requested_batch: BATCH,
            service_gpu_s: None,
            device_type: None,
        },
        work: Work::Profiled { app: 0 },
    }]
}

fn alloc(slots: &[(u32, u32)]) -> Allocation {
    Allocation::from_pairs(slots.iter().map(|&(n, c)| (NodeId(n), c)))
}

/// The simulation of [`job`] on [`CLUSTER`] with mixes allowed.
fn sim<'a>(
    cluster: &'a ClusterSpec,
    apps: &'a [pacer_sim::AppModel],
    jobs: &'a [SimJob],
) -> Simulation<'a> {
    Simulation {
        cluster,
        apps,
        jobs,
        config: SimConfig {
            mixed_types: true,
            ..SimConfig::default()
        },
    }
}

/// Seconds the pinned job ran on `slots` (from its start, less its restart delay).
fn running_s(apps: &[pacer_sim::AppModel], slots: &[(u32, u32)]) -> f64 {
    let cluster = ClusterSpec::parse(CLUSTER, "t").unwrap();
    let jobs = job();
    let mut pin = Pin {
        alloc: alloc(slots),
        adaptive: false,
    };
    let r = sim(&cluster, apps, &jobs).run(&mut pin, |_| {}).unwrap();
    assert_eq!(r.summary.finished, 1);
    let j = &r.jobs[0];
    j.completion_s.unwrap() - j.start_s.unwrap() - j.restart_paid_s
}

#[test]
fn a_pinned_mix_runs_at_the_step_composed_from_its_tables() {
    let apps = apps("step");
    let cluster = ClusterSpec::parse(CLUSTER, "t").unwrap();
    let jobs = job();
    let sim = sim(&cluster, &apps, &jobs);
    let mix = [(0, 2), (1, 2)];
    let truth = table_mix(&sim, &apps[0], &alloc(&mix)).expect("two types with tables");
    let s = truth.step(u64::from(BATCH)).unwrap();
    // The worker level's batches: all of the global batch, the slow type's smaller,
    // compute within 10 % of balanced (whole samples of a steep curve).
    assert_eq!(s.local.iter().sum::<u64>(), u64::from(BATCH));
    assert_eq!(s.micro_batches, 1);
    assert!(s.local[2] < s.local[0], "{:?}", s.local);
    // By hand from the rows of placement `2,2`: each replica's compute at its local
    // batch, the slowest of them plus the largest sync.
    let mut slowest: f64 = 0.0;
    let mut sync: f64 = 0.0;
    for (i, &b) in s.local.iter().enumerate() {
        let slow = i >= 2;
        let k = if slow { SLOW } else { 1.0 };
        let c = lerp(|x| k * compute(x), b as f64);
        assert!(
            (s.compute_s[i] - c).abs() < 1e-12,
            "replica {i}: {} vs {c}",
            s.compute_s[i]
        );
        slowest = slowest.max(c);
        sync = sync.max(lerp(|x| sync22(slow, x), b as f64));
    }
    let fastest = s.compute_s.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(fastest > 0.9 * slowest, "unbalanced: {:?}", s.compute_s);
    let by_hand = slowest + sync;
    assert!(
        (s.step_s - by_hand).abs() < 1e-12,
        "{} vs {by_hand}",
        s.step_s
    );
    assert_eq!(
        truth.step_s(u64::from(BATCH)),
        Some(s.step_s),
        "the cached step"
    );

    // The fitted models' balanced step is not that step here: the test can tell them
    // apart.
    let groups: Vec<pacer_control::job::mixed::TypeGroup> = apps[0]
        .typed()
        .iter()
        .map(|t| pacer_control::job::mixed::TypeGroup {
            perf: t.perf.unwrap(),
            replicas: 2,
            max_atomic: 32,
        })
        .collect();
    let fitted = pacer_control::job::mixed::balanced_step(
        &pacer_control::job::mixed::MixedJob {
            groups,
            nodes: 2,
            global_batch: u64::from(BATCH),
            min_local: 4,
        },
        "lbbsp",
    )
    .unwrap()
    .step_s;
    assert!(
        (fitted / by_hand - 1.0).abs() > 0.05,
        "fit {fitted} vs tables {by_hand}: the fixture does not separate them"
    );

    // The simulated run follows the table step: against the fast pair alone on the
    // same global batch (the same steps to the end), the running times are in the
    // ratio of the steps (whole seconds at each epoch's end: ±0.1 %).
    let pair_step = lerp(|x| compute(x) + 0.01, f64::from(BATCH) / 2.0);
    let ratio = running_s(&apps, &mix) / running_s(&apps, &[(0, 2)]);
    let want = by_hand / pair_step;
    assert!(
        (ratio / want - 1.0).abs() < 1e-3,
        "run ratio {ratio} vs table steps {want} (fitted: {})",
        fitted / pair_step
    );
}

#[test]
fn each_type_reads_its_own_rows_at_the_whole_placement() {
    // A mix whose second type has the first's tables: each type's rows at the
    // placement, the same compute, equal batches, and the step is the one-type row's
    // step at the local batch (compute + sync).
    let apps = apps("one");
    let cluster = ClusterSpec::parse(CLUSTER, "t").unwrap();
    let jobs = job();
    let sim = sim(&cluster, &apps, &jobs);
    let truth = table_mix(&sim, &apps[0], &alloc(&[(0, 2), (1, 2)])).unwrap();
    let s = truth.step(u64::from(BATCH)).unwrap();
    let slow_row = apps[0].step_time_on("slow", &[2, 2], s.local[3] as f64);
    let fast_row = apps[0].step_time_on("fast", &[2, 2], s.local[0] as f64);
    assert!((s.compute_s[0] - (fast_row.0 - fast_row.1)).abs() < 1e-12);
    assert!((s.compute_s[3] - (slow_row.0 - slow_row.1)).abs() < 1e-12);
    assert!((s.sync_s - fast_row.1.max(slow_row.1)).abs() < 1e-12);
    // One type: no mixed truth (the job runs on its tables as before).
    assert!(table_mix(&sim, &apps[0], &alloc(&[(0, 2)])).is_none());
}
