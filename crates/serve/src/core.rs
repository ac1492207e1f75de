//! The scheduler's state and every transition of it. Each transition is computed on
//! a copy, committed to the store, and only then applied in memory and acted upon
//! (intent first: a crash between the commit and the act is repaired by
//! [`Core::recover`]).

use crate::error::{ApiError, ServeError};
use crate::executor::{Executor, LaunchRequest, RunStatus, StopSignal};
use crate::job::{job_view, valid_id, AfterStop, JobRecord, JobState, Progress, Run, Stop};
use crate::metrics::Metrics;
use crate::spec::{JobSpec, Report};
use crate::store::{self, Changes, Store};
use pacer_model::{Allocation, ClusterSpec, NodeId};
use pacer_policy::{check_capacity, ClusterView, Policy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Fixed settings of a running service.
#[derive(Debug, Clone)]
pub struct Settings {
    pub state_dir: PathBuf,
    pub cluster: ClusterSpec,
    pub policy: String,
    pub round_s: f64,
    pub grace_s: f64,
    /// Shortest time a run keeps its devices before a policy may stop it.
    pub min_run_s: f64,
    /// The `pacer` binary (runs `[trainer]` jobs).
    pub pacer_bin: String,
    /// This service's base URL as jobs reach it (`PACER_SERVER`).
    pub server_url: String,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the last round did (for `/v1/cluster` and the dashboard).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RoundInfo {
    pub round: u64,
    pub t_ms: u64,
    pub policy_ms: f64,
    pub round_ms: f64,
    pub active_jobs: usize,
    pub launched: Vec<String>,
    pub stopped: Vec<String>,
}

pub struct Core {
    pub settings: Settings,
    pub store: Store,
    pub jobs: BTreeMap<String, JobRecord>,
    policy: Box<dyn Policy>,
    next_job: u64,
    next_event: u64,
    pub epoch_ms: u64,
    pub last_round: RoundInfo,
    last_account_ms: u64,
    pub metrics: Metrics,
    /// Staged changes (group commit): already applied in memory, not yet durable; their
    /// requests are answered by [`Core::flush`]. Every other commit includes them first.
    pending: Changes,
    waiters: Vec<tokio::sync::oneshot::Sender<bool>>,
    /// Woken when something is staged (the flusher task waits on it).
    pub flush_needed: std::sync::Arc<tokio::sync::Notify>,
}

/// Resolves to `true` once a staged change is durable.
pub type Durable = tokio::sync::oneshot::Receiver<bool>;

impl Core {
    /// Opens the state in `settings.state_dir` (creating it) and loads every job.
    pub fn open(settings: Settings) -> Result<Core, ServeError> {
        let policy = pacer_policy::by_name(&settings.policy).ok_or_else(|| {
            ServeError::Exec(format!("--policy: unknown policy `{}`", settings.policy))
        })?;
        let store = Store::open(&settings.state_dir.join("state.redb"))?;
        let jobs = store
            .load_jobs()?
            .into_iter()
            .map(|j| (j.id.clone(), j))
            .collect();
        let mut epoch_ms = store.meta(store::EPOCH_MS)?;
        let restarts = store.meta(store::RESTARTS)?;
        let mut c = Changes::default();
        let fresh = epoch_ms == 0;
        if fresh {
            epoch_ms = now_ms();
            c.meta(store::EPOCH_MS, epoch_ms);
        } else {
            c.meta(store::RESTARTS, restarts + 1);
        }
        store.commit(c)?;
        let metrics = Metrics::new();
        metrics
            .restarts
            .set(if fresh { 0 } else { restarts as i64 + 1 });
        let round = store.meta(store::ROUND)?;
        Ok(Core {
            next_job: store.meta(store::NEXT_JOB)?.max(1),
            next_event: store.meta(store::NEXT_EVENT)?.max(1),
            last_round: RoundInfo {
                round,
                ..RoundInfo::default()
            },
            settings,
            store,
            jobs,
            policy,
            epoch_ms,
            last_account_ms: now_ms(),
            metrics,
            pending: Changes::default(),
            waiters: Vec::new(),
            flush_needed: Default::default(),
        })
    }

    fn event(&mut self, c: &mut Changes, job: &str, kind: &str, detail: String) {
        let seq = self.next_event;
        self.next_event += 1;
        let json = serde_json::json!({"seq": seq, "t_ms": now_ms(), "job": job, "kind": kind, "detail": detail});
        c.event(job, seq, json.to_string());
        c.meta(store::NEXT_EVENT, self.next_event);
    }

    /// Commits the staged changes and `c` in one transaction, then applies `updated` in
    /// memory. On failure nothing of `c` is applied.
    fn commit(&mut self, c: Changes, updated: Vec<JobRecord>) -> Result<(), ServeError> {
        let mut all = std::mem::take(&mut self.pending);
        let staged = !all.is_empty();
        all.extend(c);
        match self.store.commit(all) {
            Ok(()) => {
                for w in self.waiters.drain(..) {
                    let _ = w.send(true);
                }
                for j in updated {
                    self.jobs.insert(j.id.clone(), j);
                }
                Ok(())
            }
            Err(e) if staged => fail_stop(&e),
            Err(e) => Err(e),
        }
    }

    /// Applies `updated` in memory now and stages `c` for the next group commit; the
    /// caller answers once the receiver says it is durable.
    fn stage(&mut self, c: Changes, updated: Vec<JobRecord>) -> Durable {
        self.pending.extend(c);
        for j in updated {
            self.jobs.insert(j.id.clone(), j);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.waiters.push(tx);
        self.flush_needed.notify_one();
        rx
    }

    /// Applies `updated` and stages `c` without anyone waiting for it.
    fn stage_quiet(&mut self, c: Changes, updated: Vec<JobRecord>) {
        self.pending.extend(c);
        for j in updated {
            self.jobs.insert(j.id.clone(), j);
        }
        self.flush_needed.notify_one();
    }

    /// Commits everything staged (one fsync for all of it) and wakes its requests.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let all = std::mem::take(&mut self.pending);
        if let Err(e) = self.store.commit(all) {
            fail_stop(&e);
        }
        for w in self.waiters.drain(..) {
            let _ = w.send(true);
        }
    }

    pub fn job(&self, id: &str) -> Result<&JobRecord, ApiError> {
        if !valid_id(id) {
            return Err(ApiError::bad(
                "id",
                format!(
                    "`{}` is not a job id ([a-z0-9-]{{1,64}})",
                    id.escape_debug()
                ),
            ));
        }
        self.jobs
            .get(id)
            .ok_or_else(|| ApiError::not_found("id", format!("no job `{id}`")))
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        debug_assert!(valid_id(id));
        self.settings
            .state_dir
            .join("logs")
            .join(format!("{id}.log"))
    }

    fn run_dir(&self, id: &str, attempt: u32) -> PathBuf {
        self.settings
            .state_dir
            .join("runs")
            .join(id)
            .join(attempt.to_string())
    }

    /// Accepts a job: validated against the cluster and staged; answer once durable.
    pub fn submit(&mut self, spec: JobSpec) -> Result<(JobRecord, Durable), ApiError> {
        spec.validate(&self.settings.cluster)?;
        let seq = self.next_job;
        let id = format!("job-{seq}");
        let now = now_ms();
        let job = JobRecord {
            id: id.clone(),
            seq,
            spec,
            state: JobState::Queued,
            submitted_ms: now,
            first_start_ms: None,
            finished_ms: None,
            run: None,
            stop: None,
            attempts: 0,
            restarts: 0,
            last_exit: None,
            report_token: crate::auth::new_token(),
            reports: 0,
            attained_device_s: 0.0,
            progress: Progress::default(),
            measured: Vec::new(),
        };
        let mut c = Changes::default();
        c.job(&job);
        c.meta(store::NEXT_JOB, seq + 1);
        self.event(&mut c, &id, "submitted", job.spec.name.clone());
        let durable = self.stage(c, vec![job.clone()]);
        self.next_job = seq + 1;
        self.metrics.submissions.inc();
        Ok((job, durable))
    }

    /// Stages a report of a running job (token checked by the caller); answer once durable.
    pub fn report(&mut self, id: &str, r: Report) -> Result<(u64, Durable), ApiError> {
        let job = self.job(id)?;
        if !matches!(job.state, JobState::Running | JobState::Stopping) {
            return Err(ApiError::conflict(
                "id",
                format!("job `{id}` is {}, not running", job.state.name()),
            ));
        }
        let mut j = job.clone();
        let n = j.reports;
        let now = now_ms();
        let mut stored = serde_json::to_value(&r).expect("a report always serialises");
        stored["received_ms"] = now.into();
        stored["index"] = n.into();
        stored["attempt"] = j.run.as_ref().map_or(0, |r| r.attempt).into();
        j.absorb(&r, now);
        j.reports += 1;
        let mut c = Changes::default();
        c.report(id, n, stored.to_string());
        c.job(&j);
        let durable = self.stage(c, vec![j]);
        self.metrics.reports.inc();
        Ok((n, durable))
    }

    /// Cancels a job: queued ones at once, running ones by SIGTERM (then SIGKILL after the grace).
    pub async fn cancel(&mut self, exec: &dyn Executor, id: &str) -> Result<JobRecord, ApiError> {
        let job = self.job(id)?.clone();
        let mut j = job.clone();
        let mut c = Changes::default();
        match job.state {
            JobState::Queued => {
                j.state = JobState::Cancelled;
                j.finished_ms = Some(now_ms());
                self.event(&mut c, id, "cancelled", "while queued".into());
            }
            JobState::Running | JobState::Stopping => {
                j.state = JobState::Stopping;
                let sent_ms = j.stop.as_ref().map_or(now_ms(), |s| s.sent_ms);
                j.stop = Some(Stop {
                    then: AfterStop::Cancel,
                    sent_ms,
                    killed: false,
                });
                self.event(&mut c, id, "cancelling", "SIGTERM".into());
            }
            s => {
                return Err(ApiError::conflict(
                    "id",
                    format!("job `{id}` is already {}", s.name()),
                ))
            }
        }
        c.job(&j);
        self.commit(c, vec![j.clone()])?;
        if let Some(h) = j.run.as_ref().and_then(|r| r.handle.as_ref()) {
            exec.signal(h, StopSignal::Term).await?;
        }
        Ok(j)
    }

    /// After a start: re-adopts the runs recorded as live, settles the ones that ended
    /// while the service was down, and repeats the SIGTERM of stopping jobs.
    pub async fn recover(&mut self, exec: &dyn Executor) -> Result<(), ServeError> {
        let live: Vec<String> = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Running | JobState::Stopping))
            .map(|j| j.id.clone())
            .collect();
        for id in live {
            let mut j = self.jobs[&id].clone();
            let run = j.run.clone().expect("running jobs have a run");
            let dir = self.run_dir(&id, run.attempt);
            let mut c = Changes::default();
            match exec
                .adopt(&run.run_id(&id), run.handle.as_ref(), &dir)
                .await?
            {
                Some(h) => {
                    if j.state == JobState::Stopping {
                        exec.signal(&h, StopSignal::Term).await?;
                    }
                    j.run.as_mut().expect("checked").handle = Some(h.clone());
                    self.event(
                        &mut c,
                        &id,
                        "adopted",
                        format!("pid {} attempt {}", h.id, run.attempt),
                    );
                }
                None if run.handle.is_none() && !dir.join("pid").exists() => {
                    // Decided but never launched: back to the queue, nothing ran.
                    j.state = JobState::Queued;
                    j.run = None;
                    j.stop = None;
                    self.event(
                        &mut c,
                        &id,
                        "requeued",
                        "launch interrupted by a restart".into(),
                    );
                }
                None => {
                    let status = crate::executor::exit_status(&dir);
                    self.settle(&mut c, &mut j, status);
                }
            }
            c.job(&j);
            self.commit(c, vec![j])?;
        }
        Ok(())
    }

    /// A run ended with `status`: decides the job's next state.
    fn settle(&mut self, c: &mut Changes, j: &mut JobRecord, status: RunStatus) {
        let how = match status {
            RunStatus::Exited(code) => format!("exit {code}"),
            RunStatus::Killed | RunStatus::Running => "killed".to_string(),
            RunStatus::Lost => "lost (node failure): relaunched from its checkpoint".to_string(),
        };
        let id = j.id.clone();
        let next = match (j.state, j.stop.as_ref().map(|s| s.then)) {
            (JobState::Stopping, Some(AfterStop::Requeue)) => {
                j.restarts += 1;
                JobState::Queued
            }
            (JobState::Stopping, _) => JobState::Cancelled,
            _ if status == RunStatus::Lost => {
                j.restarts += 1;
                JobState::Queued
            }
            _ if status == RunStatus::Exited(0) => JobState::Succeeded,
            _ => JobState::Failed,
        };
        j.state = next;
        j.run = None;
        j.stop = None;
        j.last_exit = Some(how.clone());
        if next.is_terminal() {
            j.finished_ms = Some(now_ms());
        }
        self.event(c, &id, next.name(), how);
    }

    /// One scheduling round: settle ended runs, escalate overdue stops, ask the policy,
    /// stop and launch what changed, record the round.
    pub async fn round(&mut self, exec: &dyn Executor) -> Result<(), ServeError> {
        let t0 = Instant::now();
        self.reconcile(exec).await?;
        let taken = exec.taken().await?;
        let (desired, policy_s) = self.plan(&taken);
        let (launched, stopped) = self.apply(exec, desired, &taken).await?;
        let round = self.last_round.round + 1;
        let info = RoundInfo {
            round,
            t_ms: now_ms(),
            policy_ms: policy_s * 1e3,
            round_ms: t0.elapsed().as_secs_f64() * 1e3,
            active_jobs: self
                .jobs
                .values()
                .filter(|j| !j.state.is_terminal())
                .count(),
            launched,
            stopped,
        };
        let alloc: BTreeMap<&str, &Vec<(u32, u32)>> = self
            .jobs
            .values()
            .filter_map(|j| j.run.as_ref().map(|r| (j.id.as_str(), &r.alloc)))
            .collect();
        let mut rec = serde_json::to_value(&info).expect("serialises");
        rec["allocations"] = serde_json::to_value(&alloc).expect("serialises");
        let mut c = Changes::default();
        c.round(round, rec.to_string());
        c.meta(store::ROUND, round);
        self.stage_quiet(c, Vec::new());
        self.metrics
            .round_seconds
            .observe(t0.elapsed().as_secs_f64());
        self.metrics.policy_seconds.observe(policy_s);
        self.last_round = info;
        Ok(())
    }

    async fn reconcile(&mut self, exec: &dyn Executor) -> Result<(), ServeError> {
        let now = now_ms();
        let dt_s = now.saturating_sub(self.last_account_ms) as f64 / 1000.0;
        self.last_account_ms = now;
        let live: Vec<String> = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Running | JobState::Stopping))
            .map(|j| j.id.clone())
            .collect();
        let mut c = Changes::default();
        let mut updated = Vec::new();
        let mut kills = Vec::new();
        for id in live {
            let mut j = self.jobs[&id].clone();
            let run = j.run.clone().expect("running jobs have a run");
            let Some(h) = run.handle.clone() else {
                continue;
            };
            let status = exec.poll(&h, &self.run_dir(&id, run.attempt)).await?;
            if status != RunStatus::Running {
                self.settle(&mut c, &mut j, status);
            } else {
                j.attained_device_s += run.replicas() as f64 * dt_s;
                if let Some(s) = j.stop.as_mut() {
                    if !s.killed
                        && now.saturating_sub(s.sent_ms) as f64 > self.settings.grace_s * 1e3
                    {
                        s.killed = true;
                        kills.push(h);
                        self.event(&mut c, &id, "killed", "grace period over: SIGKILL".into());
                    }
                }
            }
            c.job(&j);
            updated.push(j);
        }
        // Settling and accounting need not be durable before anything: the next commit
        // (a launch's intent, a stop, or the flusher) carries them.
        self.stage_quiet(c, updated);
        for h in kills {
            exec.signal(&h, StopSignal::Kill).await?;
        }
        Ok(())
    }

    /// The policy's allocation for every active job (queued or running), with the
    /// job's own limits applied, and the policy's time.
    fn plan(&mut self, taken: &[u32]) -> (Vec<(String, Allocation)>, f64) {
        let cluster = &crate::executor::without_taken(&self.settings.cluster, taken);
        let mut active: Vec<&JobRecord> = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Queued | JobState::Running))
            .collect();
        if active.is_empty() {
            return (Vec::new(), 0.0);
        }
        active.sort_by_key(|j| j.seq);
        let mut views: Vec<_> = active
            .iter()
            .map(|j| job_view(j, cluster, self.epoch_ms))
            .collect();
        let mut order: Vec<usize> = (0..views.len()).collect();
        order.sort_by(|&a, &b| {
            views[a]
                .arrival_s
                .total_cmp(&views[b].arrival_s)
                .then(a.cmp(&b))
        });
        views = order.iter().map(|&i| views[i].clone()).collect();
        let ids: Vec<String> = order.iter().map(|&i| active[i].id.clone()).collect();
        let now_s = now_ms().saturating_sub(self.epoch_ms) as f64 / 1000.0;
        let view = ClusterView {
            now_s,
            cluster,
            jobs: &views,
        };
        let t = Instant::now();
        let allocs = self.policy.allocate(&view);
        let policy_s = t.elapsed().as_secs_f64();
        if allocs.len() != views.len() || check_capacity(cluster, &allocs).is_err() {
            // A policy that breaks its contract changes nothing this round.
            return (Vec::new(), policy_s);
        }
        let desired = ids
            .into_iter()
            .zip(allocs)
            .map(|(id, a)| {
                let spec = &self.jobs[&id].spec;
                let ok_types = a.slots().iter().all(|&(n, _)| {
                    let ty = cluster.nodes[n.0 as usize].device_type;
                    spec.accepts(&cluster.device_types[ty.0 as usize])
                });
                let r = a.replicas();
                let a =
                    if r == 0 || r < spec.min() || r > spec.max().max(spec.replicas) || !ok_types {
                        Allocation::empty()
                    } else {
                        a
                    };
                (id, a)
            })
            .collect();
        (desired, policy_s)
    }

    /// Shortest time a run keeps its devices before a policy may stop it.
    pub fn min_run_ms(&self) -> u64 {
        (self.settings.min_run_s * 1e3) as u64
    }

    /// Slots held now, per node: `held[node][k]`.
    fn held_slots(&self) -> Vec<Vec<bool>> {
        let c = &self.settings.cluster;
        let mut held: Vec<Vec<bool>> = c
            .nodes
            .iter()
            .map(|n| vec![false; n.gpus as usize])
            .collect();
        let offsets = slot_offsets(c);
        for j in self.jobs.values() {
            if let Some(r) = &j.run {
                for &s in &r.slots {
                    let node = offsets.partition_point(|&o| o <= s) - 1;
                    if let Some(b) = held[node].get_mut((s - offsets[node]) as usize) {
                        *b = true;
                    }
                }
            }
        }
        held
    }

    async fn apply(
        &mut self,
        exec: &dyn Executor,
        desired: Vec<(String, Allocation)>,
        taken: &[u32],
    ) -> Result<(Vec<String>, Vec<String>), ServeError> {
        let mut stopped = Vec::new();
        let mut launched = Vec::new();
        let mut c = Changes::default();
        let mut updated = Vec::new();
        let mut to_signal = Vec::new();
        for (id, want) in &desired {
            let j = &self.jobs[id];
            if j.state != JobState::Running {
                continue;
            }
            let run = j.run.clone().expect("running jobs have a run");
            if run.allocation() == *want || run.handle.is_none() {
                continue;
            }
            // Hysteresis: a run is not stopped before it has had a few rounds, so a
            // policy that rotates devices every round does not thrash restarts.
            if now_ms().saturating_sub(run.launched_ms) < self.min_run_ms() {
                continue;
            }
            let mut j = j.clone();
            j.state = JobState::Stopping;
            j.stop = Some(Stop {
                then: AfterStop::Requeue,
                sent_ms: now_ms(),
                killed: false,
            });
            let why = if want.replicas() == 0 {
                "preempted"
            } else {
                "resizing"
            };
            self.event(&mut c, id, "stopping", format!("{why}: SIGTERM"));
            to_signal.push(run.handle.clone().expect("checked"));
            c.job(&j);
            updated.push(j);
            stopped.push(id.clone());
        }
        self.commit(c, updated)?;
        for h in to_signal {
            exec.signal(&h, StopSignal::Term).await?;
        }
        let mut held = self.held_slots();
        crate::executor::hold_taken(&mut held, taken);
        for (id, want) in desired {
            if self.jobs[&id].state != JobState::Queued || want.replicas() == 0 {
                continue;
            }
            if let Some(slots) = take_slots(&self.settings.cluster, &mut held, &want) {
                self.launch(exec, &id, &want, slots).await?;
                launched.push(id);
            }
        }
        Ok((launched, stopped))
    }

    async fn launch(
        &mut self,
        exec: &dyn Executor,
        id: &str,
        alloc: &Allocation,
        slots: Vec<u32>,
    ) -> Result<(), ServeError> {
        let cluster = &self.settings.cluster;
        let mut j = self.jobs[id].clone();
        let first_node = alloc.slots()[0].0;
        let ty = cluster.device_types[cluster.nodes[first_node.0 as usize].device_type.0 as usize]
            .clone();
        let now = now_ms();
        j.attempts += 1;
        let run = Run {
            attempt: j.attempts,
            alloc: alloc.slots().iter().map(|&(n, k)| (n.0, k)).collect(),
            slots: slots.clone(),
            device_type: ty.clone(),
            handle: None,
            launched_ms: now,
        };
        j.state = JobState::Running;
        j.first_start_ms.get_or_insert(now);
        j.run = Some(run.clone());
        // Intent first: a crash from here on is found by `recover`.
        let mut c = Changes::default();
        c.job(&j);
        self.commit(c, vec![j.clone()])?;
        let req = self.launch_request(&j, &run, &slots);
        let mut c = Changes::default();
        match exec.launch(&req).await {
            Ok(h) => {
                self.event(
                    &mut c,
                    id,
                    "launched",
                    format!(
                        "attempt {} on {} {ty} (pid {})",
                        run.attempt,
                        run.replicas(),
                        h.id
                    ),
                );
                j.run.as_mut().expect("set above").handle = Some(h);
            }
            Err(e) => {
                j.state = JobState::Failed;
                j.run = None;
                j.finished_ms = Some(now_ms());
                j.last_exit = Some(format!("launch failed: {e}"));
                self.event(&mut c, id, "failed", format!("launch failed: {e}"));
            }
        }
        c.job(&j);
        self.commit(c, vec![j])
    }

    fn launch_request(&self, j: &JobRecord, run: &Run, slots: &[u32]) -> LaunchRequest {
        let s = &self.settings;
        let replicas = run.replicas();
        let ckpt = s.state_dir.join("checkpoints").join(&j.id);
        let _ = std::fs::create_dir_all(&ckpt);
        let _ = std::fs::create_dir_all(s.state_dir.join("logs"));
        let offsets = slot_offsets(&s.cluster);
        let local: Vec<String> = slots
            .iter()
            .map(|&g| {
                let node = offsets.partition_point(|&o| o <= g) - 1;
                (g - offsets[node]).to_string()
            })
            .collect();
        let mut env = vec![
            ("WORLD_SIZE".to_string(), replicas.to_string()),
            ("MASTER_ADDR".into(), "127.0.0.1".into()),
            ("MASTER_PORT".into(), free_port().to_string()),
            ("PACER_SERVER".into(), s.server_url.clone()),
            ("PACER_JOB_ID".into(), j.id.clone()),
            ("PACER_TOKEN".into(), j.report_token.clone()),
            ("PACER_CHECKPOINT_DIR".into(), ckpt.display().to_string()),
            ("PACER_REPLICAS".into(), replicas.to_string()),
            ("PACER_DEVICE_TYPE".into(), run.device_type.clone()),
            (
                "PACER_SLOTS".into(),
                slots
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ];
        if run.device_type != "cpu" {
            env.push(("CUDA_VISIBLE_DEVICES".into(), local.join(",")));
        }
        LaunchRequest {
            job_id: j.id.clone(),
            run_id: run.run_id(&j.id),
            argv: j.spec.argv(&s.pacer_bin, replicas),
            env,
            run_dir: self.run_dir(&j.id, run.attempt),
            log_path: self.log_path(&j.id),
            alloc: run.alloc.clone(),
        }
    }
}

/// A staged change could not be made durable: memory is ahead of the database, so the
/// service stops; a restart recovers from the last commit (nothing staged was answered).
fn fail_stop(e: &ServeError) -> ! {
    eprintln!("pacer serve: committing staged changes failed: {e}; stopping (a restart recovers from the last commit)");
    std::process::exit(70)
}

/// First cluster-wide slot id of each node.
fn slot_offsets(c: &ClusterSpec) -> Vec<u32> {
    let mut acc = 0;
    c.nodes
        .iter()
        .map(|n| {
            let o = acc;
            acc += n.gpus;
            o
        })
        .collect()
}

/// Takes free slots for `want` out of `held`, or `None` (nothing taken) when some node
/// lacks them (their holder is still stopping).
fn take_slots(c: &ClusterSpec, held: &mut [Vec<bool>], want: &Allocation) -> Option<Vec<u32>> {
    let offsets = slot_offsets(c);
    let mut picks = Vec::new();
    for &(NodeId(n), k) in want.slots() {
        let free: Vec<usize> = held
            .get(n as usize)?
            .iter()
            .enumerate()
            .filter(|p| !p.1)
            .map(|p| p.0)
            .take(k as usize)
            .collect();
        if free.len() < k as usize {
            return None;
        }
        picks.extend(free.into_iter().map(|i| (n as usize, i)));
    }
    Some(
        picks
            .into_iter()
            .map(|(n, i)| {
                held[n][i] = true;
                offsets[n] + i as u32
            })
            .collect(),
    )
}

/// A TCP port free on loopback now (MASTER_PORT for the job's rendezvous).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(29500, |a| a.port())
}
