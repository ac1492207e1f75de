//! The round loop: [`Simulation::run`] prepares the per-job models ([`Models`]),
//! then each round advances the running jobs ([`RunState::advance`]), admits
//! arrivals and retires finished jobs ([`RunState::admit_and_retire`]), asks the
//! policy (event-driven, [`RunState::decide_incremental`], or with a full view,
//! [`RunState::decide_full`]), checks and applies its answer ([`RunState::check_measured`],
//! [`RunState::apply`]), and finally turns the states into results
//! ([`Simulation::results`]).

use super::*;
use pacer_policy::IncrementalPolicy;

mod events;
mod models;
use events::EventOverhead;
use models::Models;

/// The state of a run between rounds.
struct RunState<'s> {
    sim: &'s Simulation<'s>,
    policy_name: &'static str,
    states: Vec<JobState>,
    /// Index into `Models::order` of the next job to arrive.
    next_arrival: usize,
    /// Active jobs in arrival order (kept only for policies without an
    /// event-driven form, which see them all each round).
    active: Vec<usize>,
    n_active: usize,
    /// Jobs holding devices, in arrival order, and whether each job is among them
    /// (a dense flag, so that pruning `running` reads no job state).
    running: Vec<usize>,
    holds: Vec<bool>,
    just_finished: Vec<usize>,
    /// Arrived deadline jobs not yet started (`RunState::drop_declined_past_deadline`).
    unstarted_deadline: Vec<usize>,
    arrived: Vec<usize>,
    /// Decision count, and the decision that last changed each job (one change each).
    decision: u64,
    changed_at: Vec<u64>,
    started: Vec<usize>,
    merged: Vec<usize>,
    changes: Vec<(JobId, Allocation)>,
    attained: Vec<(JobId, f64)>,
    /// The active jobs' views of the last full decision, in `active`'s order
    /// ([`RunState::refresh_views`]).
    views: Vec<JobView>,
    /// Refresh the last round's views in place (off: build every view anew; the
    /// tests compare the two).
    reuse_views: bool,
    node_used: Vec<u32>,
    used: u32,
    /// Σ active jobs × round length and Σ round lengths since the start; a job's
    /// contention is the difference between its departure and its admission.
    contention_sum: f64,
    contention_s: f64,
    timeline: Vec<RoundStat>,
    now: f64,
    busy_gpu_s: f64,
    finished: usize,
    /// `SimConfig::mixing_opportunity`'s measurement.
    opportunity: Option<opportunity::Tracker>,
    /// The event overhead's bookkeeping ([`RunState::charge_event_overhead`]).
    events: EventOverhead,
}

impl Simulation<'_> {
    /// Runs the simulation under `policy`, calling `on_round` after each round's decision.
    ///
    /// A policy with an event-driven form ([`Policy::incremental`]) is told about
    /// arrivals, departures and attained service instead of being handed every
    /// active job, so a round costs what changes in it (the running jobs' progress
    /// and the allocations that move), not the length of the queue; the others get
    /// a full [`ClusterView`] each round. `on_round` is the progress sink: it sees
    /// the simulated time and the finished jobs ([`RoundInfo`]); the engine itself
    /// reads no clock but for `wall_ms`.
    pub fn run(
        &self,
        policy: &mut dyn Policy,
        on_round: impl FnMut(&RoundInfo),
    ) -> Result<SimResult, SimError> {
        self.run_views(policy, on_round, true)
    }

    /// [`Simulation::run`], refreshing the last round's views in place when
    /// `reuse_views` (off: every view built anew, as the tests compare).
    fn run_views(
        &self,
        policy: &mut dyn Policy,
        mut on_round: impl FnMut(&RoundInfo),
        reuse_views: bool,
    ) -> Result<SimResult, SimError> {
        let wall = Instant::now();
        let cfg = &self.config;
        cfg.validate()?;
        cfg.check_jobs(self.jobs)?;
        crate::admit::check_workload(self.cluster, self.apps, self.jobs)?;
        let m = self.models(&*policy);
        let mut incremental = if m.unrestricted {
            policy.incremental()
        } else {
            None
        };
        let mut r = RunState::new(self, policy.name());
        r.reuse_views = reuse_views;
        let projection = policy.type_projection();
        for st in &mut r.states {
            st.online.projection = projection;
        }
        // The event clock's copies of the jobs the next round sees complete.
        let mut probe = Vec::new();
        let mut until = self.round_end(&m, &r, None, true, true, &mut probe);
        while r.finished < self.jobs.len() && r.now < cfg.max_time_s {
            r.advance(&m, until);
            r.settle(&m, &probe);
            r.admit_and_retire(&m, incremental.is_none(), &*policy);
            // Departures reach an event-driven policy even when nothing is left to
            // decide (its free devices must include theirs).
            if let Some(inc) = incremental.as_mut() {
                for &i in &r.just_finished {
                    inc.finish(JobId(i as u32));
                }
            }
            if r.n_active == 0 {
                for &i in &r.running {
                    r.holds[i] = false;
                }
                r.running.clear();
                until = self.round_end(&m, &r, None, false, true, &mut probe);
                continue;
            }
            r.changes.clear();
            match incremental.as_mut() {
                Some(inc) => r.decide_incremental(&m, inc.as_mut())?,
                None => r.decide_full(&m, policy)?,
            }
            if !m.all_measured {
                r.check_measured(&m)?;
            }
            let charge = m.replan == ArrivalReplan::Events && policy.charges_event_overhead();
            let by_placement = charge && policy.event_overhead_by_placement();
            if charge && !by_placement {
                r.note_changes();
            }
            r.apply(&m)?;
            if charge {
                r.charge_event_overhead(&m, by_placement);
            }
            // The round this allocation holds for; contention is weighted by it.
            let wake = incremental.is_none().then(|| policy.wake_s()).flatten();
            let idle = r.used < self.cluster.total_gpus();
            until = self.round_end(&m, &r, wake, false, idle, &mut probe);
            r.close(until);
            if let Some(o) = r.opportunity.as_mut() {
                let dt = until - r.now;
                o.round(
                    self,
                    &m.speeds,
                    &m.caps,
                    dt,
                    &r.active,
                    &r.views,
                    &r.states,
                    &r.node_used,
                );
            }
            on_round(&RoundInfo {
                now_s: r.now,
                finished: r.finished,
                sim: self,
                states: &r.states,
                kinds: &m.kinds,
            });
        }
        Ok(self.results(policy.name(), &m, r, wall))
    }

    /// End of the next round: `now + round_s`, or the next arrival when it comes
    /// earlier and `replan_on_arrival` allows (exactly its arrival time, so that it
    /// is admitted).
    fn next_round(&self, m: &Models<'_>, now: f64, idle: bool, next_arrival: usize) -> f64 {
        let cfg = &self.config;
        let replan = match m.replan {
            // (`Events` keeps its own clock: `events.rs`.)
            ArrivalReplan::Never | ArrivalReplan::Auto | ArrivalReplan::Events => false,
            ArrivalReplan::WhenIdle => idle,
            ArrivalReplan::Always => true,
        };
        if replan {
            if let Some(&j) = m.order.get(next_arrival) {
                let t = self.jobs[j].spec.arrival_s;
                if t >= now && t < now + cfg.round_s {
                    return t;
                }
            }
        }
        now + cfg.round_s
    }

    /// Per-job results and the summary, contention closed for jobs still active.
    fn results(
        &self,
        policy_name: &str,
        m: &Models<'_>,
        mut r: RunState<'_>,
        wall: Instant,
    ) -> SimResult {
        // Jobs still active at the end: contention up to now.
        for (k, st) in r.states.iter_mut().enumerate() {
            if st.completion_s.is_none() && !st.dropped && m.rank[k] < r.next_arrival {
                st.contention_sum = r.contention_sum - st.contention_sum;
                st.contention_s = r.contention_s - st.contention_s;
            }
        }
        let mut memo = DedicatedMemo::default();
        let results: Vec<JobResult> = self
            .jobs
            .iter()
            .zip(&r.states)
            .zip(&m.kinds)
            .map(|((job, st), kind)| {
                let contention = if st.contention_s > 0.0 {
                    st.contention_sum / st.contention_s
                } else {
                    1.0
                };
                let t_indep = self.independent_time_with(job, &**kind, contention, &mut memo);
                let one_device_s =
                    kind.fraction_done(self, st) * kind.fastest_one_device_s(self, job, &mut memo);
                JobResult {
                    name: job.spec.name.clone(),
                    application: job.spec.application.clone(),
                    arrival_s: job.spec.arrival_s,
                    start_s: st.start_s,
                    completion_s: st.completion_s,
                    restarts: st.restarts.unwrap_or(0),
                    gpu_s: st.attained_gpu_s,
                    avg_contention: contention,
                    independent_s: t_indep,
                    deadline_s: kind.deadline_s(),
                    restart_paid_s: st.restart_paid_s,
                    mixed_gpu_s: st.mixed_gpu_s,
                    one_device_s,
                }
            })
            .collect();
        let mut out = SimResult::new(
            policy_name,
            self.cluster.total_gpus() as f64,
            r.busy_gpu_s,
            results,
            r.timeline,
            wall.elapsed().as_secs_f64() * 1e3,
        );
        if let Some(o) = &r.opportunity {
            out.summary.mixing = Some(o.finish(&out.jobs));
        }
        out
    }
}

impl<'s> RunState<'s> {
    fn new(sim: &'s Simulation<'s>, policy_name: &'static str) -> Self {
        let n = sim.jobs.len();
        RunState {
            sim,
            policy_name,
            states: sim.jobs.iter().map(|_| JobState::new()).collect(),
            next_arrival: 0,
            active: Vec::new(),
            n_active: 0,
            running: Vec::new(),
            holds: vec![false; n],
            just_finished: Vec::new(),
            unstarted_deadline: Vec::new(),
            arrived: Vec::new(),
            decision: 0,
            changed_at: vec![0; n],
            started: Vec::new(),
            merged: Vec::new(),
            changes: Vec::new(),
            attained: Vec::new(),
            views: Vec::new(),
            reuse_views: true,
            node_used: vec![0; sim.cluster.nodes.len()],
            used: 0,
            contention_sum: 0.0,
            contention_s: 0.0,
            timeline: Vec::new(),
            now: 0.0,
            busy_gpu_s: 0.0,
            finished: 0,
            opportunity: sim
                .config
                .mixing_opportunity
                .then(|| opportunity::Tracker::new(n)),
            events: EventOverhead::default(),
        }
    }

    /// The policy returned an invalid allocation now.
    fn bad(&self, reason: String) -> SimError {
        SimError::BadAllocation {
            policy: self.policy_name.into(),
            time_s: self.now,
            reason,
        }
    }

    /// Step 1: progress of the running jobs over [now, until); the clock moves to
    /// `until`.
    fn advance(&mut self, m: &Models<'_>, until: f64) {
        let sim = self.sim;
        let (now, dt) = (self.now, until - self.now);
        self.just_finished.clear();
        // The attained service the policy is told is collected here, while the
        // state is in cache: the running jobs that did not finish, in order.
        self.attained.clear();
        for &i in &self.running {
            let st = &mut self.states[i];
            if let Some(gpu_s) = st.steady_round(dt) {
                self.busy_gpu_s += gpu_s;
                self.attained.push((JobId(i as u32), st.attained_gpu_s));
                continue;
            }
            if st.completion_s.is_some() {
                continue;
            }
            let before = st.attained_gpu_s;
            let round = progress::Round {
                job: &sim.jobs[i],
                mode: m.modes[i],
                speed: &m.speeds[i],
                uses_quality: m.uses_quality,
            };
            m.kinds[i].advance(sim, &round, st, now, dt);
            self.busy_gpu_s += st.attained_gpu_s - before;
            if st.completion_s.is_some() {
                self.finished += 1;
                self.just_finished.push(i);
                self.holds[i] = false;
            } else {
                self.attained.push((JobId(i as u32), st.attained_gpu_s));
            }
        }
        self.now = until;
    }

    /// Step 2: admits the jobs that arrived by now (skipping ahead to the next arrival on
    /// an idle cluster) and retires the finished ones; `active` is kept when `full`.
    fn admit_and_retire(&mut self, m: &Models<'_>, full: bool, policy: &dyn Policy) {
        let (sim, cfg) = (self.sim, &self.sim.config);
        if self.n_active == 0 && self.next_arrival < m.order.len() {
            // Idle cluster: jump to the round in which the next job arrives.
            let t = sim.jobs[m.order[self.next_arrival]].spec.arrival_s;
            if t > self.now {
                self.now = if !matches!(m.replan, ArrivalReplan::Never | ArrivalReplan::Auto) {
                    t
                } else {
                    (t / cfg.round_s).ceil() * cfg.round_s
                };
            }
        }
        self.arrived.clear();
        while self.next_arrival < m.order.len()
            && sim.jobs[m.order[self.next_arrival]].spec.arrival_s <= self.now
        {
            let i = m.order[self.next_arrival];
            self.arrived.push(i);
            self.states[i].contention_sum = self.contention_sum;
            self.states[i].contention_s = self.contention_s;
            self.next_arrival += 1;
        }
        self.drop_declined_past_deadline(m, policy);
        self.n_active += self.arrived.len();
        self.n_active -= self.just_finished.len();
        for &i in &self.just_finished {
            let st = &mut self.states[i];
            st.contention_sum = self.contention_sum - st.contention_sum;
            st.contention_s = self.contention_s - st.contention_s;
            self.used -= st.alloc.replicas();
            for &(node, c) in st.alloc.slots() {
                self.node_used[node.0 as usize] -= c;
            }
        }
        if !self.just_finished.is_empty() {
            let holds = &self.holds;
            self.running.retain(|&i| holds[i]);
        }
        if full {
            self.active.extend_from_slice(&self.arrived);
            if !self.just_finished.is_empty() {
                let states = &self.states;
                self.active
                    .retain(|&i| states[i].completion_s.is_none() && !states[i].dropped);
            }
        }
    }

    /// Retires the deadline jobs that arrived before this round, have not started and
    /// that the policy declined ([`Policy::declined`]) once their deadline has passed:
    /// nothing would ever end them otherwise. Keeps the arrivals of this round in the
    /// watch list.
    fn drop_declined_past_deadline(&mut self, m: &Models<'_>, policy: &dyn Policy) {
        let (states, now) = (&mut self.states, self.now);
        let (finished, just_finished) = (&mut self.finished, &mut self.just_finished);
        self.unstarted_deadline.retain(|&i| {
            let st = &mut states[i];
            if st.start_s.is_some() {
                return false;
            }
            match m.kinds[i].deadline_s() {
                Some(d) if now >= d && policy.declined(JobId(i as u32)) => {
                    st.dropped = true;
                    *finished += 1;
                    just_finished.push(i);
                    false
                }
                _ => true,
            }
        });
        for &i in &self.arrived {
            if m.kinds[i].deadline_s().is_some() {
                self.unstarted_deadline.push(i);
            }
        }
    }

    /// Step 3, event-driven: tells the policy the arrivals and the running jobs'
    /// attained service and collects its changes into `changes`, checking that each
    /// names an active job at most once.
    fn decide_incremental(
        &mut self,
        m: &Models<'_>,
        inc: &mut dyn IncrementalPolicy,
    ) -> Result<(), SimError> {
        let sim = self.sim;
        for &i in &self.arrived {
            inc.admit(&m.job_view(sim, i, &mut self.states[i], false));
        }
        // `attained` lists the running jobs that did not finish (`advance`): those
        // still running after `admit_and_retire`.
        let attained: &[(JobId, f64)] = if inc.uses_attained() {
            &self.attained
        } else {
            &[]
        };
        inc.decide(self.now, sim.cluster, attained, &mut self.changes);
        self.decision += 1;
        for k in 0..self.changes.len() {
            let i = self.changes[k].0 .0 as usize;
            let live = self.states.get(i).is_some_and(|st| {
                st.completion_s.is_none() && !st.dropped && self.next_arrival > m.rank[i]
            });
            if !live {
                return Err(self.bad(format!("allocation for job #{i}, which is not active")));
            }
            if self.changed_at[i] == self.decision {
                return Err(self.bad(format!("two allocations for job #{i}")));
            }
            self.changed_at[i] = self.decision;
        }
        Ok(())
    }

    /// Step 3, full: hands a policy without an event-driven form every active job and keeps
    /// the allocations that differ from the current ones in `changes`.
    fn decide_full(&mut self, m: &Models<'_>, policy: &mut dyn Policy) -> Result<(), SimError> {
        self.refresh_views(m);
        let sim = self.sim;
        let view = ClusterView {
            now_s: self.now,
            cluster: sim.cluster,
            jobs: &self.views,
        };
        let allocs = policy.allocate(&view);
        if allocs.len() != self.views.len() {
            return Err(self.bad(format!(
                "{} allocations for {} jobs",
                allocs.len(),
                self.views.len()
            )));
        }
        check_capacity(sim.cluster, &allocs).map_err(|reason| self.bad(reason))?;
        for (a, &i) in allocs.into_iter().zip(&self.active) {
            if a != self.states[i].alloc {
                self.changes.push((JobId(i as u32), a));
            }
        }
        Ok(())
    }

    /// `views` made the views of `active` (in its order): the last round's views of
    /// jobs still active are written over in place ([`Models::refresh_view`]: every
    /// field anew, the same view as a fresh one), those of jobs that left are dropped,
    /// and the arrivals' built. Both lists are in arrival order and arrivals come
    /// after every job already active, so the kept views are a prefix; anything else
    /// (not expected) rebuilds them all.
    fn refresh_views(&mut self, m: &Models<'_>) {
        let sim = self.sim;
        if !self.reuse_views {
            self.views.clear();
        }
        let states = &self.states;
        self.views.retain(|v| {
            let st = &states[v.id.0 as usize];
            st.completion_s.is_none() && !st.dropped
        });
        let kept = self.views.len();
        if kept > self.active.len()
            || self
                .views
                .iter()
                .zip(&self.active)
                .any(|(v, &i)| v.id.0 as usize != i)
        {
            self.views.clear();
        }
        let kept = kept.min(self.views.len());
        for (v, &i) in self.views.iter_mut().zip(&self.active) {
            m.refresh_view(sim, i, &mut self.states[i], m.uses_quality, v);
        }
        for &i in &self.active[kept..] {
            let v = m.job_view(sim, i, &mut self.states[i], m.uses_quality);
            self.views.push(v);
        }
    }

    /// A job runs only on device types it has measurements for: elsewhere the
    /// simulator would have no ground truth and would relabel another type's.
    fn check_measured(&self, m: &Models<'_>) -> Result<(), SimError> {
        let cluster = self.sim.cluster;
        for (id, a) in &self.changes {
            let i = id.0 as usize;
            let unmeasured = a.slots().iter().find_map(|&(node, _)| {
                // A node that does not exist is reported by `apply`.
                let ty = cluster.nodes.get(node.0 as usize)?.device_type;
                m.speeds[i]
                    .per_type
                    .get(ty.0 as usize)
                    .is_none_or(|c| c.points.is_empty())
                    .then_some((node, ty))
            });
            if let Some((node, ty)) = unmeasured {
                return Err(self.bad(format!(
                    "job `{}` placed on node {} of device type {}, which it has no \
                     measurements for",
                    self.sim.jobs[i].spec.name, node.0, cluster.device_types[ty.0 as usize]
                )));
            }
        }
        Ok(())
    }

    /// Step 4: applies `changes`: capacity (devices given up first, then the new ones),
    /// restarts, and the running list in arrival order.
    fn apply(&mut self, m: &Models<'_>) -> Result<(), SimError> {
        let (sim, cluster) = (self.sim, self.sim.cluster);
        let mut moved = false;
        self.started.clear();
        let states = &self.states;
        self.changes
            .retain(|(id, a)| *a != states[id.0 as usize].alloc);
        self.warm(m);
        for (id, _) in &self.changes {
            for &(node, c) in self.states[id.0 as usize].alloc.slots() {
                self.node_used[node.0 as usize] -= c;
            }
        }
        let mut changes = std::mem::take(&mut self.changes);
        for (id, a) in changes.drain(..) {
            let i = id.0 as usize;
            for &(node, c) in a.slots() {
                let n = node.0 as usize;
                if n >= self.node_used.len() {
                    return Err(self.bad(format!(
                        "job #{i} allocated on node {n}, which does not exist"
                    )));
                }
                self.node_used[n] += c;
                if self.node_used[n] > cluster.nodes[n].gpus {
                    return Err(self.bad(format!(
                        "node {n} over-subscribed: {} > {} devices",
                        self.node_used[n], cluster.nodes[n].gpus
                    )));
                }
            }
            let st = &mut self.states[i];
            self.used = self.used - st.alloc.replicas() + a.replicas();
            moved |= st.alloc.is_empty() != a.is_empty();
            // A fixed-batch job's step time and epoch goodput depend on its
            // placement only: kept when it restarts on one node of the same type
            // with the same count as when they were computed.
            if !a.is_empty() {
                let shape = match a.slots() {
                    &[(node, c)] => Some((c, cluster.nodes[node.0 as usize].device_type)),
                    _ => None,
                };
                if shape.is_none() || shape != st.fixed_shape {
                    st.fixed_step = None;
                    st.fixed_goodput = f64::NAN;
                }
                st.fixed_shape = shape;
            }
            if st.alloc.is_empty() {
                self.started.push(i);
            }
            m.kinds[i].reallocating(sim, st, &a);
            st.alloc = a;
            st.alloc_rate = f64::NAN;
            st.replicas = st.alloc.replicas();
            self.holds[i] = !st.alloc.is_empty();
            if !st.alloc.is_empty() {
                st.rescale_left_s = m.kinds[i].restart_delay_s(sim, &st.alloc);
                st.restarts = Some(st.restarts.map_or(0, |r| r + 1));
                st.start_s.get_or_insert(self.now);
                m.kinds[i].restarted(sim, m.modes[i], st);
            }
        }
        self.changes = changes;
        if moved {
            // Keep arrival order: jobs stepped in the same order give the same sums.
            let holds = &self.holds;
            self.running.retain(|&i| holds[i]);
            self.started.sort_unstable_by_key(|&i| m.rank[i]);
            merge_by_rank(&mut self.running, &self.started, &m.rank, &mut self.merged);
        }
        Ok(())
    }

    /// Reads, for every change, the cold memory `apply` goes on to use (the job's
    /// state past its first line, its progress model and batch mode) in one short
    /// loop whose loads do not wait for each other, so that the processor fetches
    /// them together instead of one miss after another in `apply`'s long loop: the
    /// jobs a round starts have waited through the queue and are in no cache (at
    /// 100k jobs those misses, one after another, were the largest cost of a round).
    fn warm(&self, m: &Models<'_>) {
        let mut x = 0u64;
        for (id, _) in &self.changes {
            let i = id.0 as usize;
            let st = &self.states[i];
            x = x.wrapping_add(
                st.rescale_left_s.to_bits()
                    ^ st.fixed_shape.map_or(0, |s| u64::from(s.0))
                    ^ u64::from(st.restarts.unwrap_or(0))
                    ^ u64::from(m.modes[i].fixed.unwrap_or(0))
                    ^ (Arc::as_ptr(&m.kinds[i]) as *const u8 as usize as u64),
            );
        }
        std::hint::black_box(x);
    }

    /// Closes the round that lasts until `until`: contention and the timeline.
    fn close(&mut self, until: f64) {
        let dt = until - self.now;
        self.contention_sum += self.n_active as f64 * dt;
        self.contention_s += dt;
        if self.sim.config.record_timeline {
            self.timeline.push(RoundStat {
                time_s: self.now,
                active_jobs: self.n_active as u32,
                running_jobs: self.running.len() as u32,
                used_gpus: self.used,
            });
        }
    }
}

/// Merges `add` into `into`, both sorted by `rank` (a round's starts into the running
/// jobs: O(running) instead of a sort).
fn merge_by_rank(into: &mut Vec<usize>, add: &[usize], rank: &[usize], scratch: &mut Vec<usize>) {
    if add.is_empty() {
        return;
    }
    scratch.clear();
    scratch.reserve(into.len() + add.len());
    let (mut a, mut b) = (into.iter().peekable(), add.iter().peekable());
    while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
        if rank[x] <= rank[y] {
            scratch.push(x);
            a.next();
        } else {
            scratch.push(y);
            b.next();
        }
    }
    scratch.extend(a);
    scratch.extend(b);
    std::mem::swap(into, scratch);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields a round and an allocation change touch lie in the first three
    /// cache lines of a state (see `JobState`).
    #[test]
    fn hot_state_fields_first() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<JobState>(), 64);
        let end = |offset: usize, size: usize| offset + size;
        assert!(end(offset_of!(JobState, replicas), 4) <= 64);
        assert!(end(offset_of!(JobState, fixed_goodput), 8) <= 64);
        assert!(end(offset_of!(JobState, fixed_next), 8) <= 64);
        assert!(end(offset_of!(JobState, progress), 8) <= 64);
        assert!(end(offset_of!(JobState, rescale_left_s), 8) <= 64);
        assert!(end(offset_of!(JobState, attained_gpu_s), 8) <= 64);
        assert!(end(offset_of!(JobState, completion_s), size_of::<Option<f64>>()) <= 64);
        assert!(end(offset_of!(JobState, epoch), 8) <= 128);
        assert!(end(offset_of!(JobState, accum_steps), 4) <= 128);
        assert!(end(offset_of!(JobState, alloc_rate), 8) <= 128);
        assert!(
            end(
                offset_of!(JobState, fixed_shape),
                size_of::<Option<(u32, DeviceTypeId)>>()
            ) <= 128
        );
        assert!(end(offset_of!(JobState, batch_version), 8) <= 192);
    }

    /// A deadline policy that records every view it is shown (the methods `Deadline`
    /// overrides defer to it).
    struct Recording {
        inner: pacer_policy::deadline::Deadline,
        views: Vec<String>,
    }

    impl Policy for Recording {
        fn name(&self) -> &'static str {
            self.inner.name()
        }
        fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
            self.views.push(format!("{:?} {:?}", view.now_s, view.jobs));
            self.inner.allocate(view)
        }
        fn declined(&self, job: JobId) -> bool {
            self.inner.declined(job)
        }
        fn arrival_replan(&self) -> ArrivalReplan {
            self.inner.arrival_replan()
        }
        fn wake_s(&self) -> Option<f64> {
            self.inner.wake_s()
        }
        fn charges_event_overhead(&self) -> bool {
            self.inner.charges_event_overhead()
        }
        fn event_overhead_by_placement(&self) -> bool {
            self.inner.event_overhead_by_placement()
        }
        fn end_event_slot_s(&self) -> Option<f64> {
            self.inner.end_event_slot_s()
        }
    }

    /// The views of each round with the last round's refreshed in place equal views
    /// built anew, round by round, as jobs arrive, run, finish and (declined past
    /// their deadline) are dropped; it fails if a refreshed view keeps anything of
    /// the last round (a field left unwritten, a job's view at another's place).
    #[test]
    fn views_refreshed_in_place_equal_fresh_ones() {
        use crate::trace::elasticflow::{load_elasticflow, parse_throughput_table};
        use pacer_policy::deadline::{Deadline, DeadlineConfig};
        let table = "global_batch_size,1,2,4,8\n64,1.0,1.9,3.6,6.0\n";
        let mut lookup = |ty: &str, model: &str| {
            Ok((ty == "t4" && model == "toy")
                .then(|| parse_throughput_table(table, "toy.csv").unwrap()))
        };
        // Deadline and best-effort jobs, some too tight to admit, arriving over time.
        let mut trace =
            "job_id,submit_time,iteration,model_name,ddl,batch_size,num_gpu,duration,best_effort\n"
                .to_string();
        for k in 0..40u32 {
            let submit = 100 + 37 * k;
            let iters = 200 + (k * 97) % 900;
            let ddl = submit + [60, 400, 1500, 5000][k as usize % 4];
            let be = u32::from(k % 5 == 0);
            trace.push_str(&format!(
                "{k},{submit},{iters},toy,{ddl},64,1,{iters},{be}\n"
            ));
        }
        let jobs = load_elasticflow(&trace, "t.csv", &["t4".to_string()], &mut lookup).unwrap();
        let cluster = ClusterSpec::parse("2x4:t4", "--cluster").unwrap();
        let sim = Simulation {
            cluster: &cluster,
            apps: &[],
            jobs: &jobs,
            config: SimConfig {
                round_s: 60.0,
                ..SimConfig::default()
            },
        };
        let run = |reuse: bool| {
            let mut p = Recording {
                inner: Deadline::new("deadline-s60", DeadlineConfig::pacer(60.0)),
                views: Vec::new(),
            };
            let out = sim.run_views(&mut p, |_| {}, reuse).unwrap();
            (p.views, format!("{:?}", out.jobs))
        };
        let (fresh, fresh_jobs) = run(false);
        let (kept, kept_jobs) = run(true);
        assert!(fresh.len() > 20, "{} rounds", fresh.len());
        assert_eq!(fresh.len(), kept.len());
        for (round, (a, b)) in fresh.iter().zip(&kept).enumerate() {
            assert_eq!(a, b, "round {round}");
        }
        assert_eq!(fresh_jobs, kept_jobs);
    }

    #[test]
    fn merge_keeps_rank_order() {
        let rank = [4, 0, 3, 1, 2];
        let mut into = vec![1, 4, 0];
        let mut scratch = Vec::new();
        super::merge_by_rank(&mut into, &[3, 2], &rank, &mut scratch);
        assert_eq!(into, vec![1, 3, 4, 2, 0]);
        super::merge_by_rank(&mut into, &[], &rank, &mut scratch);
        assert_eq!(into, vec![1, 3, 4, 2, 0]);
    }
}
