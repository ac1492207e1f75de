//! The round core against a fake executor: what a round launches, stops and settles,
//! with no process, no Slurm and no HTTP — the policy's answer as the only input.

use super::{Core, Settings};
use crate::error::ServeError;
use crate::executor::{ExecFuture, Executor, LaunchRequest, RunHandle, RunStatus, StopSignal};
use crate::job::JobState;
use crate::spec::JobSpec;
use pacer_model::{Allocation, ClusterSpec, NodeId};
use pacer_policy::{ClusterView, Policy};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// Records launches and signals; each run's status is what the test sets.
#[derive(Default)]
struct Fake {
    launched: Mutex<Vec<LaunchRequest>>,
    signals: Mutex<Vec<(String, StopSignal)>>,
    /// By handle id; absent: running.
    status: Mutex<BTreeMap<String, RunStatus>>,
    taken: Mutex<Vec<u32>>,
}

impl Fake {
    fn exit(&self, run_id: &str, status: RunStatus) {
        self.status.lock().unwrap().insert(run_id.into(), status);
    }
    fn launches(&self) -> Vec<LaunchRequest> {
        self.launched.lock().unwrap().clone()
    }
}

impl Executor for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn launch<'a>(&'a self, req: &'a LaunchRequest) -> ExecFuture<'a, RunHandle> {
        Box::pin(async move {
            self.launched.lock().unwrap().push(req.clone());
            Ok(RunHandle {
                id: req.run_id.clone(),
                start_ticks: 0,
            })
        })
    }
    fn signal<'a>(&'a self, run: &'a RunHandle, sig: StopSignal) -> ExecFuture<'a, ()> {
        Box::pin(async move {
            self.signals.lock().unwrap().push((run.id.clone(), sig));
            Ok(())
        })
    }
    fn poll<'a>(&'a self, run: &'a RunHandle, _dir: &'a Path) -> ExecFuture<'a, RunStatus> {
        Box::pin(async move {
            Ok(self
                .status
                .lock()
                .unwrap()
                .get(&run.id)
                .cloned()
                .unwrap_or(RunStatus::Running))
        })
    }
    fn adopt<'a>(
        &'a self,
        _run_id: &'a str,
        _recorded: Option<&'a RunHandle>,
        _dir: &'a Path,
    ) -> ExecFuture<'a, Option<RunHandle>> {
        Box::pin(async { Ok(None) })
    }
    fn taken(&self) -> ExecFuture<'_, Vec<u32>> {
        Box::pin(async move { Ok::<_, ServeError>(self.taken.lock().unwrap().clone()) })
    }
}

fn core(name: &str, cluster: &str, policy: &str) -> Core {
    let dir = std::env::temp_dir().join(format!("pacer-core-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Core::open(Settings {
        state_dir: dir,
        cluster: ClusterSpec::parse(cluster, "test").unwrap(),
        policy: policy.into(),
        round_s: 1.0,
        grace_s: 5.0,
        min_run_s: 0.0,
        pacer_bin: "pacer".into(),
        server_url: "http://127.0.0.1:1".into(),
        log_max_bytes: 1 << 20,
    })
    .unwrap()
}

fn submit(core: &mut Core, toml: &str) -> String {
    let spec = JobSpec::from_toml(toml, "test").unwrap();
    core.submit(spec).unwrap().0.id
}

fn round(core: &mut Core, exec: &Fake) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let input = core.begin_round(exec).await.unwrap();
        core.finish_round(exec, input.decide()).await.unwrap();
    });
}

fn env<'a>(req: &'a LaunchRequest, key: &str) -> &'a str {
    req.env
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("{key} not in {:?}", req.env))
}

#[test]
fn a_round_launches_what_fits_and_settles_what_ended() {
    let mut c = core("fifo", "1x4:t4", "fifo");
    let fake = Fake::default();
    let a = submit(&mut c, "name = \"a\"\ncommand = [\"true\"]\nreplicas = 3\n");
    let b = submit(&mut c, "name = \"b\"\ncommand = [\"true\"]\nreplicas = 2\n");
    round(&mut c, &fake);
    // FIFO: a holds 3 of 4, b waits behind it.
    let l = fake.launches();
    assert_eq!(l.len(), 1);
    assert_eq!(
        (l[0].job_id.as_str(), l[0].alloc.clone()),
        (a.as_str(), vec![(0, 3)])
    );
    assert_eq!(env(&l[0], "WORLD_SIZE"), "3");
    assert_eq!(env(&l[0], "PACER_DEVICE_TYPE"), "t4");
    assert_eq!(env(&l[0], "CUDA_VISIBLE_DEVICES").split(',').count(), 3);
    assert_eq!(c.jobs[&a].state, JobState::Running);
    assert_eq!(c.jobs[&b].state, JobState::Queued);
    assert_eq!(c.last_round.launched, vec![a.clone()]);
    // A round with nothing new changes nothing.
    round(&mut c, &fake);
    assert_eq!(fake.launches().len(), 1);
    // a exits 0: settled as succeeded, and b starts in the same round.
    fake.exit(&l[0].run_id, RunStatus::Exited(0));
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a].state, JobState::Succeeded);
    assert_eq!(c.jobs[&b].state, JobState::Running);
    assert_eq!(fake.launches()[1].job_id, b);
    // b fails: failed, with its exit code.
    fake.exit(&fake.launches()[1].run_id, RunStatus::Exited(3));
    round(&mut c, &fake);
    assert_eq!(c.jobs[&b].state, JobState::Failed);
    assert_eq!(c.jobs[&b].exit_code, Some(3));
    assert!(fake.signals.lock().unwrap().is_empty());
}

#[test]
fn devices_others_hold_are_left_out_of_the_plan() {
    let mut c = core("taken", "2x2:t4", "fifo");
    let fake = Fake::default();
    *fake.taken.lock().unwrap() = vec![2, 1];
    let a = submit(&mut c, "name = \"a\"\ncommand = [\"true\"]\n");
    let b = submit(&mut c, "name = \"b\"\ncommand = [\"true\"]\n");
    round(&mut c, &fake);
    // One device is free (node 1's second): a gets it, b waits.
    let l = fake.launches();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].alloc, vec![(1, 1)]);
    assert_eq!(c.jobs[&a].state, JobState::Running);
    assert_eq!(c.jobs[&b].state, JobState::Queued);
}

#[test]
fn a_job_across_types_is_launched_as_one_run_with_each_node_s_type() {
    let mut c = core("mixed", "1x2:t4,1x2:a100", "fifo");
    let fake = Fake::default();
    let a = submit(
        &mut c,
        "name = \"a\"\ncommand = [\"true\"]\nreplicas = 4\nmixed_types = true\n",
    );
    round(&mut c, &fake);
    let l = fake.launches();
    assert_eq!(l.len(), 1, "{:?}", c.jobs[&a].reason);
    assert_eq!(env(&l[0], "PACER_DEVICE_TYPE"), "t4+a100");
    assert_eq!(env(&l[0], "PACER_NODE_TYPES"), "t4,a100");
    assert_eq!(env(&l[0], "WORLD_SIZE"), "4");
}

/// A policy that answers with more devices than the cluster has.
struct Greedy;
impl Policy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        view.jobs
            .iter()
            .map(|_| Allocation::from_pairs([(NodeId(0), 4)]))
            .collect()
    }
}

#[test]
fn a_policy_answer_that_breaks_capacity_changes_nothing() {
    let mut c = core("greedy", "1x4:t4", "fifo");
    c.policy = Some(Box::new(Greedy));
    let fake = Fake::default();
    submit(&mut c, "name = \"a\"\ncommand = [\"true\"]\n");
    submit(&mut c, "name = \"b\"\ncommand = [\"true\"]\n");
    round(&mut c, &fake);
    assert!(
        fake.launches().is_empty(),
        "8 devices asked of 4: nothing applied"
    );
    assert!(c.jobs.values().all(|j| j.state == JobState::Queued));
}

#[test]
fn a_resize_stops_the_run_with_sigterm_and_relaunches_it_smaller() {
    let mut c = core("fair", "1x4:t4", "fair");
    let fake = Fake::default();
    let a = submit(
        &mut c,
        "name = \"a\"\ncommand = [\"true\"]\nreplicas = 4\nmin_replicas = 1\nadaptive = true\n",
    );
    round(&mut c, &fake);
    assert_eq!(fake.launches()[0].alloc, vec![(0, 4)]);
    let first = fake.launches()[0].run_id.clone();
    let b = submit(&mut c, "name = \"b\"\ncommand = [\"true\"]\nreplicas = 2\n");
    round(&mut c, &fake);
    // Fair share: a must give up devices; it is asked to checkpoint and exit.
    assert_eq!(
        fake.signals.lock().unwrap().clone(),
        vec![(first.clone(), StopSignal::Term)]
    );
    assert_eq!(c.jobs[&a].state, JobState::Stopping);
    fake.exit(&first, RunStatus::Exited(143));
    round(&mut c, &fake);
    round(&mut c, &fake);
    let l = fake.launches();
    let sizes: BTreeMap<&str, u32> = l[1..]
        .iter()
        .map(|r| (r.job_id.as_str(), r.alloc.iter().map(|&(_, k)| k).sum()))
        .collect();
    assert_eq!(sizes.get(a.as_str()), Some(&2), "{sizes:?}");
    assert_eq!(sizes.get(b.as_str()), Some(&2), "{sizes:?}");
    assert_eq!(c.jobs[&a].state, JobState::Running);
    assert_eq!(c.jobs[&a].restarts, 1);
}

#[test]
fn a_run_that_finishes_as_its_resize_arrives_is_done_not_requeued() {
    for reported_done in [true, false] {
        let mut c = core(&format!("finish-{reported_done}"), "1x4:t4", "fair");
        let fake = Fake::default();
        let a = submit(
            &mut c,
            "name = \"a\"\ncommand = [\"true\"]\nreplicas = 4\nmin_replicas = 1\nadaptive = true\n",
        );
        round(&mut c, &fake);
        let first = fake.launches()[0].run_id.clone();
        submit(&mut c, "name = \"b\"\ncommand = [\"true\"]\nreplicas = 2\n");
        round(&mut c, &fake);
        assert_eq!(c.jobs[&a].state, JobState::Stopping);
        // Its last report says it is done, and it exits 0: it finished meanwhile.
        let report = crate::spec::Report {
            step: 100,
            samples: 6400,
            time_s: 10.0,
            replicas: 4,
            device_type: "t4".into(),
            global_batch: 64,
            local_batches: vec![16; 4],
            throughput: 640.0,
            step_time_s: 0.1,
            noise_scale: None,
            loss: None,
            done: reported_done,
        };
        c.report(&a, report).unwrap();
        fake.exit(&first, RunStatus::Exited(0));
        round(&mut c, &fake);
        let want = if reported_done {
            JobState::Succeeded
        } else {
            // No word that it finished: a job that exits 0 on SIGTERM is requeued.
            JobState::Running
        };
        assert_eq!(c.jobs[&a].state, want, "reported done: {reported_done}");
    }
}
