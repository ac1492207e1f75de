//! The scheduler's state and every transition of it. Each transition is computed on
//! a copy, committed to the store, and only then applied in memory and acted upon
//! (intent first: a crash between the commit and the act is repaired by
//! [`Core::recover`]).

use crate::error::{ApiError, ServeError};
use crate::executor::{Executor, LaunchRequest, RunStatus, StopSignal};
use crate::job::{valid_id, AfterStop, JobRecord, JobState, Run, Stop};
use crate::metrics::Metrics;
use crate::spec::{JobSpec, Report};
use crate::store::{self, Changes, Store};
use pacer_model::{Allocation, ClusterSpec, NodeId};
use pacer_policy::Policy;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

mod deadlines;
mod round;
#[cfg(test)]
mod tests;
pub use round::PolicyInput;

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
    /// A job's log is rotated when it grows past this (see [`cap_log`]).
    pub log_max_bytes: u64,
    /// USD per device-hour of each device type of `cluster`, by type id (`--price`);
    /// `None`: no prices, so no dollar budgets (`budget_usd`).
    pub prices: Option<Vec<f64>>,
}

/// Caps a job's log at about `max` bytes: when `path` is larger, its last `max` bytes
/// become `path.1` (replacing the previous one) and `path` is truncated to zero, in
/// place. The job keeps writing to the same file (its descriptor appends, so it goes on
/// at the new end): at most `max` bytes in `.1` and `max` plus what the job writes in a
/// round in the log. Whatever the job writes between the copy and the truncation is
/// lost. Returns whether it rotated.
pub fn cap_log(path: &std::path::Path, max: u64) -> std::io::Result<bool> {
    use std::io::{Seek, SeekFrom};
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len <= max {
        return Ok(false);
    }
    let mut log = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    log.seek(SeekFrom::Start(len - max))?;
    let mut name = path.as_os_str().to_owned();
    name.push(".1.tmp");
    let tmp = std::path::PathBuf::from(name);
    let mut kept = std::fs::File::create(&tmp)?;
    std::io::copy(&mut std::io::Read::take(&mut log, max), &mut kept)?;
    let mut name = path.as_os_str().to_owned();
    name.push(".1");
    std::fs::rename(&tmp, name)?;
    log.set_len(0)?;
    Ok(true)
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
    /// From the round's start to its end, including waits for the service lock.
    pub round_ms: f64,
    /// Settling ended runs (lock held).
    pub reconcile_ms: f64,
    /// Building the policy's view of every active job (lock held).
    pub views_ms: f64,
    /// Stopping and launching, with their commits (lock held).
    pub apply_ms: f64,
    pub active_jobs: usize,
    pub launched: Vec<String>,
    pub stopped: Vec<String>,
}

pub struct Core {
    pub settings: Settings,
    pub store: Arc<Store>,
    /// Held across every commit, so that commits reach the database in the order
    /// their changes were made even when the flusher commits without the service lock.
    writer: Arc<tokio::sync::Mutex<()>>,
    pub jobs: BTreeMap<String, JobRecord>,
    /// `None` while a round has lent it out ([`Core::begin_round`]).
    policy: Option<Box<dyn Policy>>,
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
    /// How the policy plans deadline jobs, when it does (`deadline`, `elasticflow`):
    /// admission on submission plans the same way ([`crate::deadline`]).
    pub deadline_cfg: Option<pacer_policy::deadline::DeadlineConfig>,
    /// Derived, never stored: each active deadline job's planned finish (ms since the
    /// Unix epoch; `None`: not planned to finish) as of the latest round.
    pub planned_finish_ms: BTreeMap<String, Option<u64>>,
    /// Fitted profiles of deadline jobs planned from one (`app`, [`crate::goal`]).
    pub goals: crate::goal::GoalModels,
}

/// Resolves to `true` once a staged change is durable.
pub type Durable = tokio::sync::oneshot::Receiver<bool>;

impl Core {
    /// Opens the state in `settings.state_dir` (creating it) and loads every job.
    pub fn open(settings: Settings) -> Result<Core, ServeError> {
        let planner = crate::deadline::planner_of(&settings.policy, settings.round_s);
        let policy: Box<dyn Policy> = match planner {
            // The service admits deadline jobs itself, and plans in slots of its round
            // unless the name gives one (`deadline-s60`).
            Some((name, cfg)) => Box::new(pacer_policy::deadline::Deadline::new(name, cfg)),
            None => pacer_policy::by_name(&settings.policy).ok_or_else(|| {
                ServeError::Exec(format!("--policy: unknown policy `{}`", settings.policy))
            })?,
        };
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
            store: Arc::new(store),
            writer: Default::default(),
            jobs,
            policy: Some(policy),
            epoch_ms,
            last_account_ms: now_ms(),
            metrics,
            pending: Changes::default(),
            waiters: Vec::new(),
            flush_needed: Default::default(),
            deadline_cfg: planner.map(|p| p.1),
            planned_finish_ms: BTreeMap::new(),
            goals: crate::goal::GoalModels::default(),
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
    async fn commit(&mut self, c: Changes, updated: Vec<JobRecord>) -> Result<(), ServeError> {
        let _writer = self.writer.clone().lock_owned().await;
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

    /// Takes everything staged for one group commit, which [`Flush::run`] makes
    /// durable without the service lock (requests staged meanwhile wait for the next).
    pub async fn take_flush(&mut self) -> Option<Flush> {
        if self.pending.is_empty() {
            return None;
        }
        Some(Flush {
            writer: self.writer.clone().lock_owned().await,
            changes: std::mem::take(&mut self.pending),
            waiters: std::mem::take(&mut self.waiters),
            store: self.store.clone(),
        })
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
    /// (Its `cwd` is checked by the API before the lock: `JobSpec::check_cwd_exists_bounded`.)
    /// A deadline job is admitted first ([`Core::admit`]): declined, nothing is
    /// stored and the error (409, field `deadline`) carries the admission answer.
    pub fn submit(&mut self, spec: JobSpec) -> Result<(JobRecord, Durable), ApiError> {
        spec.validate(&self.settings.cluster)?;
        let seq = self.next_job;
        let id = format!("job-{seq}");
        let now = now_ms();
        let mut job = JobRecord::queued(id.clone(), seq, spec, now, crate::auth::new_token());
        crate::budget::check_on_submit(
            &job.spec,
            &self.settings.cluster,
            self.settings.prices.as_deref(),
        )?;
        if job.spec.deadline.is_some() {
            let d = self.admit(&job, now)?;
            // Planned from a profile: the job runs at the batch admission chose.
            if let Some(p) = &d.profile {
                let b = p.option.global_batch.round().max(1.0) as u64;
                job.spec.global_batch.get_or_insert(b);
            }
            job.deadline = Some(d);
        }
        let mut c = Changes::default();
        c.job(&job);
        c.meta(store::NEXT_JOB, seq + 1);
        self.event(&mut c, &id, "submitted", job.spec.name.clone());
        if let Some(d) = &job.deadline {
            self.event(
                &mut c,
                &id,
                "admitted",
                format!(
                    "deadline {}: {} devices now, planned finish {}{}",
                    crate::deadline::rfc3339(d.deadline_ms),
                    d.share_now,
                    crate::deadline::rfc3339(d.planned_finish_ms),
                    d.profile
                        .as_ref()
                        .map(|p| format!("; {}", p.describe()))
                        .unwrap_or_default()
                ),
            );
        }
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
                j.reason = Some("cancelled while queued".into());
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
                j.reason = Some("cancelling: SIGTERM sent".into());
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
        self.commit(c, vec![j.clone()]).await?;
        if j.state.is_terminal() {
            if let Some(s) = self.deadline_status(&j, now_ms()) {
                self.metrics.deadline_ended(s);
            }
        }
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
                    j.reason = Some(format!(
                        "{}: launch interrupted by a restart of the service",
                        crate::job::WAITING
                    ));
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
            self.commit(c, vec![j]).await?;
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
        let then = j.stop.as_ref().map(|s| s.then);
        let next = match (j.state, then) {
            // It finished as the stop reached it: exit 0 after its own last report said
            // done. Requeued, it would run again from its last checkpoint (seen: a
            // `pacer train` of 3,000 steps finished during a resize and ran them again).
            (JobState::Stopping, Some(AfterStop::Requeue | AfterStop::Budget))
                if status == RunStatus::Exited(0) && j.progress.done =>
            {
                JobState::Succeeded
            }
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
        j.reason = Some(match next {
            JobState::Queued if status == RunStatus::Lost => {
                format!("node failure: {}", crate::job::WAITING)
            }
            JobState::Queued => {
                // The stop's reason says why it stopped (`preempted: …`, `resizing: …`).
                let why = j.reason.as_deref().and_then(|r| r.split(':').next());
                format!("{}: {}", why.unwrap_or("stopped"), crate::job::WAITING)
            }
            JobState::Cancelled if then == Some(AfterStop::Budget) => {
                format!("budget spent: {} ({how})", crate::budget::note(j))
            }
            JobState::Cancelled => format!("cancelled ({how})"),
            _ if status == RunStatus::Killed => {
                "killed (no exit status: a signal, or the grace period ran out)".into()
            }
            _ => how.clone(),
        });
        j.exit_code = match status {
            RunStatus::Exited(code) => Some(code),
            _ => None,
        };
        j.state = next;
        j.run = None;
        j.stop = None;
        j.last_exit = Some(how.clone());
        if next.is_terminal() {
            j.finished_ms = Some(now_ms());
            if let Some(s) = self.deadline_status(j, now_ms()) {
                self.metrics.deadline_ended(s);
            }
        }
        self.event(c, &id, next.name(), how);
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
        // The spec's variables first: the service's own come after them and win (the
        // spec cannot name them anyway, `JobSpec::validate`).
        let mut env: Vec<(String, String)> = j
            .spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        env.extend([
            ("WORLD_SIZE".to_string(), replicas.to_string()),
            ("MASTER_ADDR".into(), "127.0.0.1".into()),
            ("MASTER_PORT".into(), free_port().to_string()),
            ("PACER_SERVER".into(), s.server_url.clone()),
            ("PACER_JOB_ID".into(), j.id.clone()),
            ("PACER_TOKEN".into(), j.report_token.clone()),
            ("PACER_CHECKPOINT_DIR".into(), ckpt.display().to_string()),
            ("PACER_REPLICAS".into(), replicas.to_string()),
            ("PACER_DEVICE_TYPE".into(), run.device_type.clone()),
            // Each node's device type in allocation order (node rank order), so that
            // the ranks of a run across types know theirs.
            (
                "PACER_NODE_TYPES".into(),
                run.alloc
                    .iter()
                    .map(|&(n, _)| {
                        let t = s.cluster.nodes[n as usize].device_type.0 as usize;
                        s.cluster.device_types[t].as_str()
                    })
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            (
                "PACER_SLOTS".into(),
                slots
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ]);
        if run.device_type != "cpu" {
            env.push(("CUDA_VISIBLE_DEVICES".into(), local.join(",")));
        }
        // The spec's global batch, or the one admission chose from the job's profile.
        if let Some(b) = j.spec.global_batch {
            env.push(("PACER_GLOBAL_BATCH".into(), b.to_string()));
        }
        LaunchRequest {
            job_id: j.id.clone(),
            run_id: run.run_id(&j.id),
            argv: j.spec.argv(&s.pacer_bin, replicas),
            env,
            cwd: j.spec.cwd.as_ref().map(PathBuf::from),
            run_dir: self.run_dir(&j.id, run.attempt),
            log_path: self.log_path(&j.id),
            alloc: run.alloc.clone(),
        }
    }
}

/// One group commit taken out of the [`Core`] ([`Core::take_flush`]); it holds the
/// writer lock, so no later commit overtakes it.
pub struct Flush {
    writer: tokio::sync::OwnedMutexGuard<()>,
    changes: Changes,
    waiters: Vec<tokio::sync::oneshot::Sender<bool>>,
    store: Arc<Store>,
}

impl Flush {
    /// Commits (one fsync) and answers the requests that waited for it.
    pub fn run(self) {
        if let Err(e) = self.store.commit(self.changes) {
            fail_stop(&e);
        }
        drop(self.writer);
        for w in self.waiters {
            let _ = w.send(true);
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
