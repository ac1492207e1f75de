//! Jobs across device types (`SimConfig::mixed_types`): a mixed allocation runs at
//! its balanced step (faster than its fast part alone, slower than as many fast
//! devices), the flag off changes nothing, and `sia-pacer-mix` without it is
//! `sia-pacer`.

mod common;

use common::Pin;
use pacer_model::{Allocation, ClusterSpec, JobSpec, NodeId};
use pacer_policy::Policy;
use pacer_sim::apps::{load_sia_dir, load_sia_dir_with};
use pacer_sim::{SimConfig, SimJob, Simulation, Work};

const VAL: &str = "progress,iteration,metric,grad_sqr,grad_var\n\
    20000,20000,0.5,1.0,40.0\n40000,40000,0.6,1.0,40.0\n";

/// `bert` on a `fast` and a `slow` type (`slow` × the step time), with one- and
/// two-device rows at three local batches, and a scalability table.
fn apps(tag: &str, slow: f64) -> Vec<pacer_sim::AppModel> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("pacer-mixed-{tag}-"))
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let table = |k: f64| {
        let mut s = String::from("placement,local_bsz,step_time,sync_time\n");
        for b in [8.0, 16.0, 32.0, 64.0] {
            let c = k * (0.01 + 0.004 * b);
            s += &format!("1,{b},{c},0.001\n");
            s += &format!("2,{b},{},0.01\n", c + 0.01);
        }
        s
    };
    let scal = |k: f64| {
        let mut s = String::from("num_nodes,num_replicas,local_bsz,step_time,sync_time\n");
        for (n, r) in [(2, 4), (2, 2)] {
            for b in [8.0, 16.0, 32.0, 64.0] {
                let c = k * (0.01 + 0.004 * b);
                s += &format!("{n},{r},{b},{},0.03\n", c + 0.03);
            }
        }
        s
    };
    common::write_files(
        &root,
        &[
            ("bert/placements-fast.csv", table(1.0)),
            ("bert/scalability-fast.csv", scal(1.0)),
            ("bert/placements-slow.csv", table(slow)),
            ("bert/scalability-slow.csv", scal(slow)),
            ("bert/validation-16.csv", VAL.to_string()),
            ("bert/validation-1024.csv", VAL.to_string()),
        ],
    );
    load_sia_dir(&root, false).unwrap()
}

fn jobs(n: usize) -> Vec<SimJob> {
    (0..n)
        .map(|i| SimJob {
            spec: JobSpec {
                name: format!("j{i}"),
                arrival_s: 3000.0 * i as f64,
                application: "bert".into(),
                requested_replicas: 1,
                requested_batch: 256,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Profiled { app: 0 },
        })
        .collect()
}

/// `n` jobs under `policy` on one node of two devices per type; all must finish.
fn simulate(
    apps: &[pacer_sim::AppModel],
    n: usize,
    policy: &mut dyn Policy,
    mixed: bool,
) -> pacer_sim::SimResult {
    simulate_on("1x2:fast,1x2:slow", apps, n, policy, mixed)
}

/// [`simulate`] on `cluster`.
fn simulate_on(
    cluster: &str,
    apps: &[pacer_sim::AppModel],
    n: usize,
    policy: &mut dyn Policy,
    mixed: bool,
) -> pacer_sim::SimResult {
    let cluster = ClusterSpec::parse(cluster, "t").unwrap();
    let jobs = jobs(n);
    let sim = Simulation {
        cluster: &cluster,
        apps,
        jobs: &jobs,
        config: SimConfig {
            mixed_types: mixed,
            ..SimConfig::default()
        },
    };
    let r = sim.run(policy, |_| {}).unwrap();
    assert_eq!(r.summary.finished, n);
    r
}

fn jct(apps: &[pacer_sim::AppModel], slots: &[(u32, u32)], adaptive: bool, mixed: bool) -> f64 {
    jct_on("1x2:fast,1x2:slow", apps, slots, adaptive, mixed)
}

/// [`jct`] on `cluster`.
fn jct_on(
    cluster: &str,
    apps: &[pacer_sim::AppModel],
    slots: &[(u32, u32)],
    adaptive: bool,
    mixed: bool,
) -> f64 {
    let mut p = Pin {
        alloc: Allocation::from_pairs(slots.iter().map(|&(n, c)| (NodeId(n), c))),
        adaptive,
    };
    simulate_on(cluster, apps, 1, &mut p, mixed)
        .summary
        .avg_jct_s
}

#[test]
fn a_mixed_allocation_runs_at_its_balanced_step() {
    let (a, b) = (apps("step-a", 1.5), apps("step-b", 4.0));
    for adaptive in [false, true] {
        let fast2 = jct(&a, &[(0, 2)], adaptive, true);
        let mix = jct(&a, &[(0, 2), (1, 2)], adaptive, true);
        assert!(
            mix < fast2,
            "adaptive {adaptive}: slow devices added should help: {mix} vs {fast2}"
        );
        // The slow type's own model counts: slower, the mix is slower.
        let slower = jct(&b, &[(0, 2), (1, 2)], adaptive, true);
        assert!(
            slower > mix,
            "adaptive {adaptive}: a slower type drags: {slower} vs {mix}"
        );
        // One type: the slow type's tables and the flag change nothing.
        assert_eq!(fast2, jct(&b, &[(0, 2)], adaptive, true));
        assert_eq!(fast2, jct(&a, &[(0, 2)], adaptive, false));
        // The flag off: the mix runs on its first node's tables, as before.
        assert_ne!(mix, jct(&a, &[(0, 2), (1, 2)], adaptive, false));
        // Same input, same result.
        assert_eq!(mix, jct(&a, &[(0, 2), (1, 2)], adaptive, true));
    }
}

fn run(apps: &[pacer_sim::AppModel], policy: &str, mixed: bool) -> String {
    let mut p = pacer_policy::by_name(policy).unwrap();
    format!("{:?}", simulate(apps, 5, p.as_mut(), mixed).jobs)
}

#[test]
fn without_the_flag_sia_pacer_mix_is_sia_pacer_and_with_it_jobs_mix() {
    let apps = apps("policy", 1.5);
    let plain = run(&apps, "sia-pacer", false);
    assert_eq!(run(&apps, "sia-pacer-mix", false), plain);
    // sia-pacer never mixes, so the flag changes nothing for it.
    assert_eq!(run(&apps, "sia-pacer", true), plain);
    let mixed = run(&apps, "sia-pacer-mix", true);
    assert_eq!(mixed, run(&apps, "sia-pacer-mix", true));
    assert!(!mixed.contains("mixed_gpu_s: 0.0 }, JobResult"), "{mixed}");
    assert_ne!(mixed, plain, "no job was ever given a mix");
}

/// One job pinned on `slots`, with the opportunity measured when `measure`.
fn measured(
    apps: &[pacer_sim::AppModel],
    slots: &[(u32, u32)],
    measure: bool,
) -> pacer_sim::SimResult {
    let cluster = ClusterSpec::parse("1x2:fast,1x2:slow", "t").unwrap();
    let jobs = jobs(1);
    let mut p = Pin {
        alloc: Allocation::from_pairs(slots.iter().map(|&(n, c)| (NodeId(n), c))),
        adaptive: true,
    };
    let sim = Simulation {
        cluster: &cluster,
        apps,
        jobs: &jobs,
        config: SimConfig {
            mixed_types: true,
            mixing_opportunity: measure,
            ..SimConfig::default()
        },
    };
    sim.run(&mut p, |_| {}).unwrap()
}

#[test]
fn the_opportunity_bounds_what_a_mix_gained() {
    let apps = apps("opportunity", 1.5);
    let fast2 = measured(&apps, &[(0, 2)], true);
    let o = fast2.summary.mixing.clone().expect("measured");
    // The fast node is full, the slow one idle the whole run: every idle device is
    // stranded, and the job could have used them.
    assert!(o.idle_gpu_h > 0.0);
    assert!((o.stranded_gpu_h - o.idle_gpu_h).abs() < 1e-9, "{o:?}");
    // The mix's measured gain is within the bound, and the bound is not loose by
    // more than the linear speed-up it assumes (2 slow devices at 1/1.5 on 2 fast:
    // at most 40 % of each round).
    let mix = measured(&apps, &[(0, 2), (1, 2)], true);
    let gain = 1.0 - mix.summary.avg_jct_s / fast2.summary.avg_jct_s;
    assert!(gain > 0.0, "the mix should help here: {gain}");
    assert!(
        o.bound_avg_jct_gain >= gain && o.bound_avg_jct_gain <= 0.4 + 1e-9,
        "bound {} vs gain {gain}",
        o.bound_avg_jct_gain
    );
    // The job's own balanced model (restarts free) promises a gain too, below the
    // linear bound (the slow type's all-reduce is paid).
    let balanced = o
        .balanced_avg_jct_gain
        .expect("the view carries the mixed model");
    assert!(
        balanced > 0.0 && balanced < o.bound_avg_jct_gain,
        "balanced {balanced} vs bound {}",
        o.bound_avg_jct_gain
    );
    // On the mix nothing is idle: no opportunity left.
    let m = mix.summary.mixing.clone().unwrap();
    assert_eq!((m.idle_gpu_h, m.bound_saved_jct_h), (0.0, 0.0));
    // Measuring changes nothing else.
    let off = measured(&apps, &[(0, 2)], false);
    assert!(off.summary.mixing.is_none());
    assert_eq!(format!("{:?}", off.jobs), format!("{:?}", fast2.jobs));
}

// `--shared-fabric TYPE` (`load_sia_dir_with`; docs/mixed-types.md, "What decides: the
// slowest type's sync"): a type whose cross-node sync is slow makes a mix slower than its
// fast part alone; with every type syncing as the fast type does, the same mix finishes
// first, and a one-type job across the slow type's nodes gains too.

/// `bert` on `fast` and `slow` (compute 1.5× the step time, cross-node sync
/// `slow_sync` s against fast's 0.03 s); one node holds 2 devices.
fn fabric_apps(tag: &str, slow_sync: f64, fabric: Option<&str>) -> Vec<pacer_sim::AppModel> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("pacer-fabric-{tag}-"))
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let table = |k: f64, sync: f64| {
        let mut s = String::from("placement,local_bsz,step_time,sync_time\n");
        for b in [8.0, 16.0, 32.0, 64.0] {
            let c = k * (0.01 + 0.004 * b);
            s += &format!("1,{b},{c},0.001\n");
            s += &format!("2,{b},{},0.01\n", c + 0.01);
            s += &format!("11,{b},{},{sync}\n", c + sync);
            s += &format!("22,{b},{},{}\n", c + sync * 1.2, sync * 1.2);
        }
        s
    };
    let scal = |k: f64, sync: f64| {
        let mut s = String::from("num_nodes,num_replicas,local_bsz,step_time,sync_time\n");
        for b in [8.0, 16.0, 32.0, 64.0] {
            let c = k * (0.01 + 0.004 * b);
            s += &format!("3,6,{b},{},{}\n", c + sync * 1.4, sync * 1.4);
        }
        s
    };
    common::write_files(
        &root,
        &[
            ("bert/placements-fast.csv", table(1.0, 0.03)),
            ("bert/scalability-fast.csv", scal(1.0, 0.03)),
            ("bert/placements-slow.csv", table(1.5, slow_sync)),
            ("bert/scalability-slow.csv", scal(1.5, slow_sync)),
            ("bert/validation-16.csv", VAL.to_string()),
            ("bert/validation-1024.csv", VAL.to_string()),
        ],
    );
    load_sia_dir_with(&root, false, fabric).unwrap()
}

#[test]
fn the_slow_type_s_sync_decides_whether_a_mix_pays() {
    let jct = |apps: &[pacer_sim::AppModel], slots: &[(u32, u32)]| {
        jct_on("2x2:fast,2x2:slow", apps, slots, false, true)
    };
    let measured = fabric_apps("measured", 1.0, None);
    let shared = fabric_apps("shared", 1.0, Some("fast"));
    let fast2 = [(0, 2)];
    let mix = [(0, 2), (2, 2)];
    // On the tables as measured, the slow type's 1 s all-reduce makes the mix slower
    // than the fast pair alone.
    let (f, m) = (jct(&measured, &fast2), jct(&measured, &mix));
    assert!(m > f, "measured: mix {m} vs fast pair {f}");
    // Sharing the fast type's fabric: the fast pair is unchanged (one node), the mix
    // now finishes first.
    let (fs, ms) = (jct(&shared, &fast2), jct(&shared, &mix));
    assert_eq!(fs, f, "one node: its own sync");
    assert!(ms < fs, "shared fabric: mix {ms} vs fast pair {fs}");
    // A one-type job across the slow type's two nodes gains as much: the what-if is on
    // the tables, not on mixes alone.
    let slow_x2 = [(2, 1), (3, 1)];
    assert!(jct(&shared, &slow_x2) < 0.5 * jct(&measured, &slow_x2));
    // With a slow sync equal to the fast one, the what-if changes nothing.
    let same = fabric_apps("same", 0.03, None);
    let same_shared = fabric_apps("same-shared", 0.03, Some("fast"));
    assert_eq!(jct(&same, &mix), jct(&same_shared, &mix));
}

#[test]
fn a_fabric_without_tables_is_refused_naming_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bert");
    std::fs::create_dir_all(&dir).unwrap();
    for (f, t) in [
        (
            "placements-fast.csv",
            "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.001\n11,8,0.2,0.1\n",
        ),
        (
            "scalability-fast.csv",
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,4,8,0.2,0.1\n2,4,16,0.3,0.1\n",
        ),
        ("validation-16.csv", VAL),
    ] {
        std::fs::write(dir.join(f), t).unwrap();
    }
    let e = load_sia_dir_with(tmp.path(), false, Some("nvlink"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bert")
            && e.contains("--shared-fabric: no tables for device type `nvlink` (it has fast)"),
        "{e}"
    );
}
