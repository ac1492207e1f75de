//! One scheduling round, in three steps so that API requests are not held up by it:
//! [`Core::begin_round`] under the service lock (settle ended runs, escalate overdue
//! stops, snapshot what the policy sees), [`PolicyInput::decide`] outside it (the
//! policy itself), and [`Core::finish_round`] under the lock again (stop and launch
//! what changed: one commit for all stops, one for all launch intents, one for all
//! launch handles; record the round).

use super::{now_ms, slot_offsets, take_slots, Core, RoundInfo};
use crate::budget;
use crate::error::ServeError;
use crate::executor::{Executor, RunStatus, StopSignal};
use crate::job::{job_view_with_prior, launch_prior_s, AfterStop, JobRecord, JobState, Run, Stop};
use crate::store::{self, Changes};
use pacer_model::{Allocation, ClusterSpec};
use pacer_policy::{check_capacity, ClusterView, JobView, Policy};
use std::collections::BTreeMap;
use std::time::Instant;

/// What the policy decides from: a snapshot of the active jobs' views, taken under
/// the lock, and the policy itself (lent out of the [`Core`] for the round).
pub struct PolicyInput {
    pub(super) views: Vec<JobView>,
    pub(super) ids: Vec<String>,
    now_s: f64,
    cluster: ClusterSpec,
    policy: Box<dyn Policy>,
    t0: Instant,
    reconcile_ms: f64,
    views_ms: f64,
    allocs: Vec<Allocation>,
    policy_s: f64,
    /// Devices others hold per node (`Executor::taken`), left out of `cluster`.
    taken: Vec<u32>,
    /// Per job (as `ids`), the device types it may use this round when it is placed
    /// by cost ([`crate::budget::cost_types`]); `None`: those its spec accepts.
    cost_types: Vec<Option<Vec<bool>>>,
}

impl PolicyInput {
    /// Runs the policy (no lock held; may take milliseconds at 10,000 jobs).
    pub fn decide(mut self) -> PolicyInput {
        if self.views.is_empty() {
            return self;
        }
        let view = ClusterView {
            now_s: self.now_s,
            cluster: &self.cluster,
            jobs: &self.views,
        };
        let t = Instant::now();
        self.allocs = self.policy.allocate(&view);
        self.policy_s = t.elapsed().as_secs_f64();
        self
    }
}

impl Core {
    /// Step 1 (under the lock): settle ended runs, then snapshot the policy's input.
    pub async fn begin_round(&mut self, exec: &dyn Executor) -> Result<PolicyInput, ServeError> {
        let t0 = Instant::now();
        let policy = self
            .policy
            .take()
            .ok_or_else(|| ServeError::Exec("a round is already in progress".into()))?;
        if let Err(e) = self.reconcile(exec).await {
            self.policy = Some(policy);
            return Err(e);
        }
        let taken = match exec.taken().await {
            Ok(t) => t,
            Err(e) => {
                self.policy = Some(policy);
                return Err(e);
            }
        };
        let reconcile_ms = t0.elapsed().as_secs_f64() * 1e3;
        tracing::debug!(
            round = self.last_round.round + 1,
            reconcile_ms,
            "round: runs settled, taken devices read"
        );
        let t = Instant::now();
        let cluster = &crate::executor::without_taken(&self.settings.cluster, &taken);
        let mut active: Vec<&JobRecord> = self
            .jobs
            .values()
            .filter(|j| matches!(j.state, JobState::Queued | JobState::Running))
            .collect();
        active.sort_by_key(|j| j.seq);
        let prior = launch_prior_s(self.jobs.values());
        let mut views: Vec<(JobView, String)> = active
            .iter()
            .map(|j| {
                let v = job_view_with_prior(j, cluster, self.epoch_ms, prior);
                (v, j.id.clone())
            })
            .collect();
        // Stable: equal arrivals keep submission order.
        views.sort_by(|a, b| a.0.arrival_s.total_cmp(&b.0.arrival_s));
        let (mut views, ids): (Vec<JobView>, Vec<String>) = views.into_iter().unzip();
        let cost_types = self.restrict_to_cost_types(&mut views, &ids);
        let now_s = now_ms().saturating_sub(self.epoch_ms) as f64 / 1000.0;
        let cluster = cluster.clone();
        self.plan_deadlines(&views, &ids, &cluster, now_s);
        Ok(PolicyInput {
            views,
            ids,
            now_s,
            cluster,
            policy,
            t0,
            reconcile_ms,
            views_ms: t.elapsed().as_secs_f64() * 1e3,
            allocs: Vec::new(),
            policy_s: 0.0,
            taken,
            cost_types,
        })
    }

    /// Step 3 (under the lock): apply the policy's answer and record the round.
    pub async fn finish_round(
        &mut self,
        exec: &dyn Executor,
        input: PolicyInput,
    ) -> Result<(), ServeError> {
        let t = Instant::now();
        let PolicyInput {
            views,
            ids,
            allocs,
            policy,
            policy_s,
            t0,
            reconcile_ms,
            views_ms,
            cluster,
            taken,
            cost_types,
            ..
        } = input;
        self.policy = Some(policy);
        let desired = self.desired(ids, allocs, &views, &cluster, &cost_types);
        let (launched, stopped) = self.apply(exec, desired, &taken).await?;
        let round = self.last_round.round + 1;
        let info = RoundInfo {
            round,
            t_ms: now_ms(),
            policy_ms: policy_s * 1e3,
            round_ms: t0.elapsed().as_secs_f64() * 1e3,
            reconcile_ms,
            views_ms,
            apply_ms: t.elapsed().as_secs_f64() * 1e3,
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
        let slow = info.round_ms > self.settings.round_s * 1e3;
        if slow {
            tracing::warn!(round, round_ms = info.round_ms, reconcile_ms, apply_ms = info.apply_ms,
                launched = ?info.launched, stopped = ?info.stopped, "round longer than --round-s");
        } else {
            tracing::debug!(round, round_ms = info.round_ms, reconcile_ms, apply_ms = info.apply_ms,
                launched = ?info.launched, stopped = ?info.stopped, "round done");
        }
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
        let mut terms = Vec::new();
        // A queued job whose budget is spent (it ran out as it was preempted) ends.
        let spent: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.state == JobState::Queued && budget::spent(j).is_some())
            .map(|j| j.id.clone())
            .collect();
        for id in spent {
            let mut j = self.jobs[&id].clone();
            j.state = JobState::Cancelled;
            j.finished_ms = Some(now);
            j.reason = Some(format!("budget spent: {}", budget::note(&j)));
            self.event(&mut c, &id, "cancelled", budget::note(&j));
            c.job(&j);
            updated.push(j);
        }
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
                if let Some(prices) = &self.settings.prices {
                    j.spent_usd +=
                        budget::run_spend_usd(&run, &self.settings.cluster, prices, dt_s);
                }
                if let Some((unit, _, budget)) = budget::spent(&j) {
                    match j.stop.as_mut() {
                        None => {
                            j.state = JobState::Stopping;
                            j.stop = Some(Stop {
                                then: AfterStop::Budget,
                                sent_ms: now,
                                killed: false,
                            });
                            j.reason =
                                Some(format!("stopping: its budget of {budget} {unit} is spent"));
                            self.event(&mut c, &id, "budget-spent", budget::note(&j));
                            self.metrics.budget_stop(unit);
                            terms.push(h.clone());
                        }
                        // Being preempted or resized: it ends instead of going back.
                        Some(s) if s.then == AfterStop::Requeue => {
                            s.then = AfterStop::Budget;
                            self.event(&mut c, &id, "budget-spent", budget::note(&j));
                            self.metrics.budget_stop(unit);
                        }
                        Some(_) => {}
                    }
                }
                match super::cap_log(&self.log_path(&id), self.settings.log_max_bytes) {
                    Ok(false) => {}
                    Ok(true) => self.event(
                        &mut c,
                        &id,
                        "log-rotated",
                        format!(
                            "the log passed {} bytes: its last part is now in {id}.log.1",
                            self.settings.log_max_bytes
                        ),
                    ),
                    Err(e) => eprintln!("pacer serve: rotating the log of {id}: {e}"),
                }
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
        for h in terms {
            exec.signal(&h, StopSignal::Term).await?;
        }
        Ok(())
    }

    /// The policy's allocation for every job of the snapshot, with the job's own
    /// limits applied; a policy answer that breaks its contract changes nothing. A job
    /// that is no longer queued or running (cancelled meanwhile) is left alone by
    /// [`Core::apply`].
    ///
    /// A job that held nothing at the snapshot and gets nothing needs nothing done: it
    /// is left out here, so that the rest of the round, under the lock, costs what
    /// changes rather than the length of the queue (10,000 queued jobs).
    fn desired(
        &self,
        ids: Vec<String>,
        allocs: Vec<Allocation>,
        views: &[JobView],
        cluster: &ClusterSpec,
        cost_types: &[Option<Vec<bool>>],
    ) -> Vec<(String, Allocation)> {
        if allocs.len() != ids.len() || check_capacity(cluster, &allocs).is_err() {
            return Vec::new();
        }
        ids.into_iter()
            .zip(allocs)
            .zip(views.iter().zip(cost_types))
            .filter(|((_, a), (v, _))| !(a.is_empty() && v.current.is_empty()))
            .filter_map(|((id, a), (_, by_cost))| {
                let spec = &self.jobs.get(&id)?.spec;
                let ok_types = a.slots().iter().all(|&(n, _)| {
                    let ty = cluster.nodes[n.0 as usize].device_type;
                    spec.accepts(&cluster.device_types[ty.0 as usize])
                        && by_cost
                            .as_ref()
                            .is_none_or(|keep| keep.get(ty.0 as usize) == Some(&true))
                });
                let r = a.replicas();
                let a =
                    if r == 0 || r < spec.min() || r > spec.max().max(spec.replicas) || !ok_types {
                        Allocation::empty()
                    } else {
                        a
                    };
                Some((id, a))
            })
            .collect()
    }

    /// Narrows the views of the jobs placed by cost to their cheapest types this round
    /// ([`crate::budget::cost_types`]: the other types' speed curves emptied and their
    /// goodput models dropped, as for a type the spec does not accept), and returns
    /// each job's kept types (`None`: not narrowed).
    fn restrict_to_cost_types(
        &self,
        views: &mut [JobView],
        ids: &[String],
    ) -> Vec<Option<Vec<bool>>> {
        let Some(prices) = &self.settings.prices else {
            return vec![None; ids.len()];
        };
        views
            .iter_mut()
            .zip(ids)
            .map(|(v, id)| {
                let job = self.jobs.get(id).filter(|j| j.spec.placed_by_cost())?;
                let keep = budget::cost_types(job, v, &self.settings.cluster, prices)?;
                if let Some(speed) = v.speed.as_mut() {
                    let speed = std::sync::Arc::make_mut(speed);
                    for (t, curve) in speed.per_type.iter_mut().enumerate() {
                        if !keep.get(t).copied().unwrap_or(false) {
                            *curve = Default::default();
                        }
                    }
                }
                for (t, g) in v.goodput_by_type.iter_mut().enumerate() {
                    if !keep.get(t).copied().unwrap_or(false) {
                        *g = None;
                    }
                }
                tracing::debug!(job = %id, ?keep, "placed by cost");
                Some(keep)
            })
            .collect()
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
            j.reason = Some(format!("{why}: SIGTERM sent"));
            self.event(&mut c, id, "stopping", format!("{why}: SIGTERM"));
            to_signal.push(run.handle.clone().expect("checked"));
            c.job(&j);
            updated.push(j);
            stopped.push(id.clone());
        }
        if !updated.is_empty() {
            self.commit(c, updated).await?;
        }
        for h in to_signal {
            exec.signal(&h, StopSignal::Term).await?;
        }
        let mut held = self.held_slots();
        crate::executor::hold_taken(&mut held, taken);
        let mut picks = Vec::new();
        for (id, want) in desired {
            if self.jobs[&id].state != JobState::Queued || want.replicas() == 0 {
                continue;
            }
            if let Some(slots) = take_slots(&self.settings.cluster, &mut held, &want) {
                picks.push((id, want, slots));
            }
        }
        let launched = self.launch_all(exec, picks).await?;
        Ok((launched, stopped))
    }

    /// Launches `picks`: every intent in one commit first (a crash from there on is
    /// found by `recover`), then each process, then every handle in one commit.
    async fn launch_all(
        &mut self,
        exec: &dyn Executor,
        picks: Vec<(String, Allocation, Vec<u32>)>,
    ) -> Result<Vec<String>, ServeError> {
        if picks.is_empty() {
            return Ok(Vec::new());
        }
        let cluster = &self.settings.cluster;
        let now = now_ms();
        let mut c = Changes::default();
        let mut intents = Vec::new();
        for (id, alloc, slots) in picks {
            let mut j = self.jobs[&id].clone();
            let ty = run_device_type(cluster, &alloc);
            j.attempts += 1;
            let run = Run {
                attempt: j.attempts,
                alloc: alloc.slots().iter().map(|&(n, k)| (n.0, k)).collect(),
                slots: slots.clone(),
                device_type: ty,
                handle: None,
                launched_ms: now,
                start_step: j.progress.step,
                reported: false,
            };
            j.state = JobState::Running;
            j.reason = None;
            j.first_start_ms.get_or_insert(now);
            j.run = Some(run.clone());
            c.job(&j);
            intents.push((j, run, slots));
        }
        let copies = intents.iter().map(|i| i.0.clone()).collect();
        self.commit(c, copies).await?;
        let mut c = Changes::default();
        let mut done = Vec::new();
        let mut launched = Vec::new();
        for (mut j, run, slots) in intents {
            let req = self.launch_request(&j, &run, &slots);
            let id = j.id.clone();
            match exec.launch(&req).await {
                Ok(h) => {
                    self.event(
                        &mut c,
                        &id,
                        "launched",
                        // How long after the decision the executor had the run started
                        // (decision-to-first-step overhead: scripts/slurm-e2e.sh).
                        format!(
                            "attempt {} on {} {} (pid {}, {} ms after the decision)",
                            run.attempt,
                            run.replicas(),
                            run.device_type,
                            h.id,
                            now_ms().saturating_sub(now)
                        ),
                    );
                    j.run.as_mut().expect("set above").handle = Some(h);
                }
                Err(e) => {
                    j.state = JobState::Failed;
                    j.run = None;
                    j.finished_ms = Some(now_ms());
                    j.last_exit = Some(format!("launch failed: {e}"));
                    j.reason = j.last_exit.clone();
                    j.exit_code = None;
                    self.event(&mut c, &id, "failed", format!("launch failed: {e}"));
                }
            }
            c.job(&j);
            done.push(j);
            launched.push(id);
        }
        self.commit(c, done).await?;
        Ok(launched)
    }
}

/// The device type a run reports under: its nodes' type, or for a run across types
/// (`mixed_types`) the types in the cluster's order joined by `+` ("a100+t4"), so that
/// its measurements never mix into one type's fit.
pub(crate) fn run_device_type(cluster: &ClusterSpec, alloc: &Allocation) -> String {
    let mut types: Vec<u16> = alloc
        .slots()
        .iter()
        .map(|&(n, _)| cluster.nodes[n.0 as usize].device_type.0)
        .collect();
    types.sort_unstable();
    types.dedup();
    types
        .iter()
        .map(|&t| cluster.device_types[t as usize].as_str())
        .collect::<Vec<_>>()
        .join("+")
}
