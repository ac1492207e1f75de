//! Per-type profiles learned online (`SimConfig::profiles` = `ProfileMode::Online`):
//! the policy's view of a job comes only from the points the job has run at (and
//! the tables' one-device rows Sia starts from); same seed, same result.

use pacer_model::{Allocation, ClusterSpec, JobSpec};
use pacer_policy::{ClusterView, Policy};
use pacer_sim::apps::load_sia_dir;
use pacer_sim::{ProfileMode, SimConfig, SimJob, Simulation, Work};

const ONE: &str = "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.01\n1,16,0.2,0.01\n";
const VAL: &str =
    "progress,iteration,metric,grad_sqr,grad_var\n3000,3000,0.5,1.0,2.0\n6000,6000,0.6,1.0,2.0\n";

/// `bert` with a `fast` and a `slow` type (3× the step time); the rows with more than
/// one device have sync times × `sync` (the one-device rows are the same for every
/// `sync`).
fn apps(tag: &str, sync: f64) -> Vec<pacer_sim::AppModel> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("pacer-sia-online-{tag}-"))
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let multi = |scale: f64| {
        format!(
            "{ONE}2,8,{},{}\n2,16,{},{}\n",
            scale * (0.1 + 0.02 * sync),
            scale * 0.02 * sync,
            scale * (0.2 + 0.02 * sync),
            scale * 0.02 * sync
        )
    };
    let fast = multi(1.0);
    let slow = multi(3.0)
        .replacen("0.1,0.01", "0.3,0.03", 1)
        .replacen("0.2,0.01", "0.6,0.03", 1);
    let sc = format!(
        "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,8,{},{}\n2,8,16,{},{}\n",
        0.1 + 0.1 * sync,
        0.1 * sync,
        0.2 + 0.1 * sync,
        0.1 * sync
    );
    for (f, text) in [
        ("bert/placements-fast.csv", fast.as_str()),
        ("bert/scalability-fast.csv", sc.as_str()),
        ("bert/placements-slow.csv", slow.as_str()),
        ("bert/scalability-slow.csv", sc.as_str()),
        ("bert/validation-16.csv", VAL),
    ] {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    load_sia_dir(&root, false).unwrap()
}

fn jobs() -> Vec<SimJob> {
    (0..3)
        .map(|i| SimJob {
            spec: JobSpec {
                name: format!("j{i}"),
                arrival_s: 200.0 * i as f64,
                application: "bert".into(),
                requested_replicas: 1,
                requested_batch: 16,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Profiled { app: 0 },
        })
        .collect()
}

/// `sia`, recording every job's per-type models as the policy saw them.
struct Recorder {
    inner: Box<dyn Policy>,
    seen: Vec<String>,
}

impl Policy for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn adaptive_batch(&self) -> bool {
        self.inner.adaptive_batch()
    }
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        for j in view.jobs {
            let perf: Vec<_> = j
                .goodput_by_type
                .iter()
                .map(|g| g.map(|g| g.perf))
                .collect();
            self.seen
                .push(format!("{:.0} {:?} {perf:?}", view.now_s, j.id));
        }
        self.inner.allocate(view)
    }
}

/// Views and per-job results of a run on one device of each type (no job can ever
/// run on more than one device).
fn run(apps: &[pacer_sim::AppModel], profiles: ProfileMode) -> (Vec<String>, String) {
    let cluster = ClusterSpec::parse("1x1:fast,1x1:slow", "t").unwrap();
    let jobs = jobs();
    let sim = Simulation {
        cluster: &cluster,
        apps,
        jobs: &jobs,
        config: SimConfig {
            profiles,
            ..SimConfig::default()
        },
    };
    let mut p = Recorder {
        inner: pacer_policy::by_name("sia").unwrap(),
        seen: Vec::new(),
    };
    let r = sim.run(&mut p, |_| {}).unwrap();
    assert_eq!(r.summary.finished, 3);
    (p.seen, format!("{:?}", r.jobs))
}

#[test]
fn online_views_ignore_rows_the_jobs_never_ran_at() {
    let (a, b) = (apps("a", 1.0), apps("b", 5.0));
    // The fitted view sees the multi-device rows: the two tables look different.
    assert_ne!(
        run(&a, ProfileMode::Fitted).0,
        run(&b, ProfileMode::Fitted).0
    );
    // Online, jobs only ever ran on one device: the views (and so every decision
    // and result) are the same whatever the multi-device rows say.
    let (va, ra) = run(&a, ProfileMode::Online);
    let (vb, rb) = run(&b, ProfileMode::Online);
    assert!(!va.is_empty());
    assert_eq!(va, vb);
    assert_eq!(ra, rb);
}

#[test]
fn online_profiles_same_seed_same_result() {
    let a = apps("det", 1.0);
    assert_eq!(run(&a, ProfileMode::Online), run(&a, ProfileMode::Online));
}
