//! Fixed-batch jobs of per-device-type applications (`--apps sia:DIR` under the
//! Gavel policies): they run on the tables of the type they are placed on, and
//! their speed tables tell the policies each type's speed.

use pacer_model::{ClusterSpec, DeviceTypeId, JobSpec};
use pacer_sim::apps::load_sia_dir;
use pacer_sim::{SimConfig, SimJob, Simulation, Work};

const PL: &str = "placement,local_bsz,step_time,sync_time\n1,8,0.1,0.01\n1,16,0.2,0.01\n2,8,0.12,0.03\n2,16,0.22,0.03\n";
const SC: &str =
    "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,8,0.3,0.1\n2,8,16,0.4,0.1\n";
/// Long enough (20,000 base-batch steps) that the restart delay and whole rounds do
/// not hide the step time.
const VAL: &str = "progress,iteration,metric,grad_sqr,grad_var\n10000,10000,0.5,1.0,2.0\n20000,20000,0.6,1.0,2.0\n";

/// An application `bert` with a `fast` type and a `slow` one (3× the step time).
fn apps(tag: &str) -> Vec<pacer_sim::AppModel> {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("pacer-sia-typed-{tag}-"))
        .tempdir()
        .unwrap();
    let root = tmp.path().to_path_buf();
    let slow = PL.replace("0.1,", "0.3,").replace("0.2,", "0.6,");
    let slow = slow.replace("0.12,", "0.36,").replace("0.22,", "0.66,");
    for (f, text) in [
        ("bert/placements-fast.csv", PL),
        ("bert/scalability-fast.csv", SC),
        ("bert/placements-slow.csv", slow.as_str()),
        ("bert/scalability-slow.csv", SC),
        ("bert/validation-16.csv", VAL),
    ] {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    load_sia_dir(&root, false).unwrap()
}

fn job() -> SimJob {
    SimJob {
        spec: JobSpec {
            name: "j0".into(),
            arrival_s: 0.0,
            application: "bert".into(),
            requested_replicas: 1,
            requested_batch: 16,
            service_gpu_s: None,
            device_type: None,
        },
        work: Work::Profiled { app: 0 },
    }
}

#[test]
fn fixed_batch_jobs_run_on_their_types_tables() {
    let apps = apps("run");
    let jobs = vec![job()];
    let jct = |spec: &str| {
        let cluster = ClusterSpec::parse(spec, "t").unwrap();
        let sim = Simulation {
            cluster: &cluster,
            apps: &apps,
            jobs: &jobs,
            config: SimConfig::default(),
        };
        let mut p = pacer_policy::by_name("gavel-maxsum").unwrap();
        let r = sim.run(p.as_mut(), |_| {}).unwrap();
        assert_eq!(r.summary.finished, 1);
        r.summary.avg_jct_s
    };
    let fast = jct("1x1:fast");
    let slow = jct("1x1:slow");
    // 3× the step time: about 3× the time (restart delay and whole seconds aside).
    assert!(
        slow > 2.5 * fast && slow < 3.5 * fast,
        "fast {fast} s, slow {slow} s"
    );
}

#[test]
fn speed_tables_differ_by_type() {
    let apps = apps("speed");
    let jobs = vec![job()];
    let cluster = ClusterSpec::parse("1x1:fast,1x1:slow", "t").unwrap();
    let sim = Simulation {
        cluster: &cluster,
        apps: &apps,
        jobs: &jobs,
        config: SimConfig::default(),
    };
    let t = &sim.speed_tables()[0];
    let fast = t.rate(DeviceTypeId(0), 1, true);
    let slow = t.rate(DeviceTypeId(1), 1, true);
    assert!(
        fast > 0.0 && (fast / slow - 3.0).abs() < 0.05,
        "{fast} vs {slow}"
    );
}
