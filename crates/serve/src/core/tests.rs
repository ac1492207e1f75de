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

/// A service core on a fresh state directory, which is removed when the returned guard
/// drops: keep it alive (bound before the core, so that the core drops first).
fn core(name: &str, cluster: &str, policy: &str) -> (tempfile::TempDir, Core) {
    let dir = crate::scratch_dir(&format!("pacer-core-test-{name}-"));
    let core = reopen(dir.path(), cluster, policy);
    (dir, core)
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
    let (_state, mut c) = core("fifo", "1x4:t4", "fifo");
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
    let (_state, mut c) = core("taken", "2x2:t4", "fifo");
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
    let (_state, mut c) = core("mixed", "1x2:t4,1x2:a100", "fifo");
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
    let (_state, mut c) = core("greedy", "1x4:t4", "fifo");
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
    let (_state, mut c) = core("fair", "1x4:t4", "fair");
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
        let (_state, mut c) = core(&format!("finish-{reported_done}"), "1x4:t4", "fair");
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

/// Opens the service state in `dir` (from [`core`]) again, as a restarted service does.
fn reopen(dir: &Path, cluster: &str, policy: &str) -> Core {
    Core::open(Settings {
        state_dir: dir.to_path_buf(),
        cluster: ClusterSpec::parse(cluster, "test").unwrap(),
        policy: policy.into(),
        round_s: 1.0,
        grace_s: 5.0,
        min_run_s: 0.0,
        pacer_bin: "pacer".into(),
        server_url: "http://127.0.0.1:1".into(),
        log_max_bytes: 1 << 20,
        prices: None,
    })
    .unwrap()
}

fn deadline_spec(name: &str, replicas: u32, runtime: &str, deadline: &str) -> JobSpec {
    JobSpec::from_toml(
        &format!(
            "name = \"{name}\"\ncommand = [\"true\"]\nreplicas = {replicas}\n\
             expected_runtime = \"{runtime}\"\ndeadline = \"{deadline}\"\n"
        ),
        "test",
    )
    .unwrap()
}

#[test]
fn a_deadline_job_is_admitted_or_declined_with_the_earliest_deadline() {
    let (_state, mut c) = core("ddl-admit", "1x4:t4", "deadline");
    let t0 = super::now_ms();
    // a: 100 s on 2 devices, due in 150 s: fits, 2 devices now.
    let (a, _) = c.submit(deadline_spec("a", 2, "100s", "150")).unwrap();
    let d = a.deadline.clone().expect("admitted");
    assert_eq!(d.share_now, 2);
    assert!((d.deadline_ms as i64 - (t0 as i64 + 150_000)).abs() < 2_000);
    let finish_in = d.planned_finish_ms as i64 - t0 as i64;
    assert!((99_000..102_000).contains(&finish_in), "{finish_in}");
    // b: 100 s on all 4, due in 150 s: a holds 2 until +100 s, so b ends at +200 s.
    let e = c.submit(deadline_spec("b", 4, "100s", "150")).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (409, "deadline"), "{e}");
    assert!(e.message.contains("earliest deadline"), "{}", e.message);
    let earliest = e.detail.as_ref().unwrap()["admission"]["earliest_deadline_ms"]
        .as_u64()
        .unwrap() as i64
        - t0 as i64;
    assert!((199_000..204_000).contains(&earliest), "{earliest}");
    // Nothing of it was kept: one job, and the next id is job-2.
    assert_eq!(c.jobs.len(), 1);
    // With the earliest deadline it is accepted, after a, on all 4.
    let (b, _) = c.submit(deadline_spec("b", 4, "100s", "210")).unwrap();
    assert_eq!(b.id, "job-2");
    assert_eq!(b.deadline.as_ref().unwrap().share_now, 0);
    // A best-effort job is not asked about.
    let best = submit(&mut c, "name = \"x\"\ncommand = [\"true\"]\nreplicas = 4\n");
    assert!(c.jobs[&best].deadline.is_none());
    let text = c.metrics.render(c.jobs.values(), &[]);
    assert!(
        text.contains("pacer_serve_deadline_admissions_total{decision=\"declined\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pacer_serve_deadline_admissions_total{decision=\"accepted\"} 2"),
        "{text}"
    );
    // b cancelled while queued, before its deadline: ended, counted as such.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(c.cancel(&Fake::default(), &b.id)).unwrap();
    assert_eq!(
        c.deadline_status(&c.jobs[&b.id], super::now_ms()),
        Some(crate::deadline::Status::Ended)
    );
    let text = c.metrics.render(c.jobs.values(), &[]);
    assert!(
        text.contains("pacer_serve_deadline_ended_total{outcome=\"ended\"} 1"),
        "{text}"
    );
}

#[test]
fn bad_deadlines_are_refused_naming_the_field_and_nothing_is_kept() {
    let (_state, mut c) = core("ddl-bad", "1x4:t4", "deadline");
    let cases = [
        ("name = \"a\"\ncommand = [\"true\"]\ndeadline = \"soon\"\nexpected_runtime = \"1m\"\n", "deadline", "RFC 3339"),
        ("name = \"a\"\ncommand = [\"true\"]\ndeadline = \"2020-01-01T00:00:00Z\"\nexpected_runtime = \"1m\"\n", "deadline", "in the past"),
        ("name = \"a\"\ncommand = [\"true\"]\ndeadline = \"2026-02-30T00:00:00Z\"\nexpected_runtime = \"1m\"\n", "deadline", "no such date"),
        ("name = \"a\"\ncommand = [\"true\"]\ndeadline = \"1h\"\n", "expected_runtime", "needs `expected_runtime`"),
        ("name = \"a\"\ncommand = [\"true\"]\ndeadline = \"1h\"\nexpected_runtime = \"-3\"\n", "expected_runtime", "duration"),
        ("name = \"a\"\ncommand = [\"true\"]\nexpected_runtime = \"1h\"\n", "expected_runtime", "only with `deadline`"),
    ];
    for (toml, field, says) in cases {
        let spec = JobSpec::from_toml(toml, "test").unwrap();
        let e = c.submit(spec).unwrap_err();
        assert_eq!((e.status, e.field.as_str()), (400, field), "{toml}: {e}");
        assert!(e.message.contains(says), "{toml}: {}", e.message);
    }
    // Not a string: the TOML parser names the key.
    let e = JobSpec::from_toml("name = \"a\"\ncommand = [\"true\"]\ndeadline = 3600\n", "t")
        .unwrap_err();
    assert_eq!(e.field, "deadline", "{e}");
    // A policy that plans no deadline refuses them rather than ignoring them.
    let (_fifo_state, mut fifo) = core("ddl-fifo", "1x4:t4", "fifo");
    let e = fifo.submit(deadline_spec("a", 1, "1m", "1h")).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (400, "deadline"));
    assert!(e.message.contains("--policy"), "{}", e.message);
    assert!(c.jobs.is_empty() && fifo.jobs.is_empty());
}

#[test]
fn an_admitted_guarantee_survives_a_restart_of_the_service() {
    let (name, cluster) = ("ddl-restart", "1x4:t4");
    let (state, mut c) = core(name, cluster, "deadline");
    let fake = Fake::default();
    let (a, d) = c.submit(deadline_spec("a", 2, "100s", "150")).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(c.take_flush()).unwrap().run();
    drop(d);
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a.id].state, JobState::Running);
    assert_eq!(c.jobs[&a.id].run.as_ref().unwrap().replicas(), 2);
    if let Some(f) = rt.block_on(c.take_flush()) {
        f.run();
    }
    let before = c.deadline_json(&c.jobs[&a.id], super::now_ms()).unwrap();
    assert_eq!(before["status"], "on track");
    drop(c);

    let mut c = reopen(state.path(), cluster, "deadline");
    let j = &c.jobs[&a.id];
    assert_eq!(
        j.deadline, a.deadline,
        "the admission came back from the database"
    );
    // A job that needs the devices a's guarantee holds is still declined…
    let e = c.submit(deadline_spec("b", 4, "100s", "150")).unwrap_err();
    assert_eq!(e.status, 409, "{e}");
    // …and the fresh policy keeps a running on its share (no stop, no relaunch).
    let greedy = submit(&mut c, "name = \"x\"\ncommand = [\"true\"]\nreplicas = 4\n");
    round(&mut c, &fake);
    assert!(fake.signals.lock().unwrap().is_empty(), "a was stopped");
    assert_eq!(c.jobs[&a.id].run.as_ref().unwrap().replicas(), 2);
    assert_eq!(
        c.jobs[&greedy].state,
        JobState::Queued,
        "4 do not fit beside a"
    );
    let after = c.deadline_json(&c.jobs[&a.id], super::now_ms()).unwrap();
    assert_eq!(after["status"], "on track", "{after}");
    assert_eq!(after["deadline_ms"], before["deadline_ms"]);
    // a turns out slower than it said (1,000 s of work left: it cannot make its
    // deadline), and the service restarts again. A fresh policy planning admission
    // itself would now decline a and stop it; the service's keeps it on its devices.
    let mut slow = c.jobs[&a.id].clone();
    slow.deadline.as_mut().unwrap().expected_runtime_s = 1000.0;
    let mut ch = crate::store::Changes::default();
    ch.job(&slow);
    c.store.commit(ch).unwrap();
    drop(c);
    let mut c = reopen(state.path(), cluster, "deadline");
    round(&mut c, &fake);
    assert!(
        fake.signals.lock().unwrap().is_empty(),
        "a at risk was stopped"
    );
    assert_eq!(c.jobs[&a.id].run.as_ref().unwrap().replicas(), 2);
    let risk = c.deadline_json(&c.jobs[&a.id], super::now_ms()).unwrap();
    assert_eq!(risk["status"], "at risk", "{risk}");
    // It ends in time all the same: met, counted.
    fake.exit(
        &format!("{}:1", a.id),
        crate::executor::RunStatus::Exited(0),
    );
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a.id].state, JobState::Succeeded);
    let now = super::now_ms();
    assert_eq!(
        c.deadline_status(&c.jobs[&a.id], now),
        Some(crate::deadline::Status::Met)
    );
    let statuses: Vec<_> = c
        .jobs
        .values()
        .filter_map(|j| c.deadline_status(j, now))
        .collect();
    let text = c.metrics.render(c.jobs.values(), &statuses);
    for line in [
        "pacer_serve_deadline_jobs{status=\"met\"} 1",
        "pacer_serve_deadline_admitted 0",
        "pacer_serve_deadline_ended_total{outcome=\"met\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in {text}");
    }
}

#[test]
fn a_run_s_first_report_measures_what_its_launch_cost_and_the_plan_sees_it() {
    let (_state, mut c) = core("restart-cost", "1x4:t4", "deadline");
    let fake = Fake::default();
    let (a, _) = c.submit(deadline_spec("a", 2, "100s", "400")).unwrap();
    round(&mut c, &fake);
    assert_eq!(c.jobs[&a.id].state, JobState::Running);
    assert_eq!(c.jobs[&a.id].restart_s, None, "nothing reported yet");
    // Launched 30 s ago; its first report counts 50 steps of 0.2 s: 20 s went to the
    // launch (process start, restore, work redone).
    c.jobs
        .get_mut(&a.id)
        .unwrap()
        .run
        .as_mut()
        .unwrap()
        .launched_ms -= 30_000;
    let report = |step: u64| crate::spec::Report {
        step,
        samples: step * 64,
        time_s: 25.0,
        replicas: 2,
        device_type: "t4".into(),
        global_batch: 64,
        local_batches: vec![32; 2],
        throughput: 320.0,
        step_time_s: 0.2,
        noise_scale: None,
        loss: None,
        done: false,
    };
    c.report(&a.id, report(50)).unwrap();
    let got = c.jobs[&a.id].restart_s.expect("measured");
    assert!((19.9..20.5).contains(&got), "{got}");
    // Later reports of the same run do not measure it again.
    c.report(&a.id, report(400)).unwrap();
    assert_eq!(c.jobs[&a.id].restart_s, Some(got));
    // The policy's view carries it, so the deadline plan budgets it per restart.
    let view = crate::job::job_view(&c.jobs[&a.id], &c.settings.cluster, c.epoch_ms);
    assert_eq!(view.restart_s, Some(got));
    // A report claiming more training than the time since the launch measures 0, not
    // a negative cost.
    let mut j = c.jobs[&a.id].clone();
    j.restart_s = None;
    let run = j.run.as_mut().unwrap();
    run.reported = false;
    run.start_step = 400;
    let now = run.launched_ms + 1_000;
    j.absorb(&report(1_000), now);
    assert_eq!(j.restart_s, Some(0.0));
}

#[test]
fn a_job_that_has_measured_no_launch_is_planned_with_the_median_of_those_measured() {
    let (_state, mut c) = core("launch-prior", "1x4:t4", "deadline");
    let t0 = super::now_ms();
    // Nothing measured: a 100 s job on all 4 devices due in 110 s fits.
    let probe = |c: &mut Core| c.submit(deadline_spec("p", 4, "100s", "110"));
    let (p, _) = probe(&mut c).unwrap();
    assert_eq!(
        crate::job::launch_prior_s(c.jobs.values()),
        None,
        "none measured yet"
    );
    // Three finished jobs measured launches of 5, 30 and 20 s; a fourth none.
    c.jobs.remove(&p.id);
    for (i, s) in [Some(5.0), Some(30.0), Some(20.0), None]
        .into_iter()
        .enumerate()
    {
        let id = submit(
            &mut c,
            &format!("name = \"done{i}\"\ncommand = [\"true\"]\nreplicas = 1\n"),
        );
        let j = c.jobs.get_mut(&id).unwrap();
        j.state = JobState::Succeeded;
        j.finished_ms = Some(t0);
        j.restart_s = s;
    }
    assert_eq!(crate::job::launch_prior_s(c.jobs.values()), Some(20.0));
    // Now its launch is budgeted at the median, 20 s: 120 s do not fit in 110 s, and
    // the earliest deadline says so.
    let e = probe(&mut c).unwrap_err();
    assert_eq!((e.status, e.field.as_str()), (409, "deadline"), "{e}");
    let earliest = e.detail.as_ref().unwrap()["admission"]["earliest_deadline_ms"]
        .as_u64()
        .unwrap() as i64
        - t0 as i64;
    assert!((119_000..124_000).contains(&earliest), "{earliest}");
    // The round's views carry it for a job with no measurement of its own, and a job's
    // own measurement wins over it.
    let (q, _) = c.submit(deadline_spec("q", 2, "100s", "400")).unwrap();
    let fake = Fake::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let input = rt.block_on(c.begin_round(&fake)).unwrap();
    let at = input.ids.iter().position(|id| *id == q.id).unwrap();
    assert_eq!(input.views[at].restart_s, Some(20.0));
    c.jobs.get_mut(&q.id).unwrap().restart_s = Some(3.0);
    let own = crate::job::job_view_with_prior(
        &c.jobs[&q.id],
        &c.settings.cluster,
        c.epoch_ms,
        Some(20.0),
    );
    assert_eq!(own.restart_s, Some(3.0));
}

mod budget;

mod goal;
