//! The round-based simulation loop.
//!
//! Time advances in fixed rounds (default 60 s, as in Pollux's simulator). In each
//! round every running job makes progress at the speed its placement and batch
//! give it under the measured tables ([`crate::apps::AppModel`]); then the policy
//! sees the active jobs and returns new allocations; a job whose allocation
//! changed pays a restart delay (30 s) before making progress again. Progress is
//! counted in base-batch-equivalent steps (statistical efficiency included), and a
//! job finishes at the progress its application's measured run reached.
//!
//! Jobs under an adaptive policy (`Policy::adaptive_batch`) choose their batch for
//! goodput from a model fitted online to the configurations they have run, as
//! Pollux's agents do; the others keep the batch the user asked for.
//!
//! Heterogeneity: [`Work::Throughput`] jobs (Gavel's job types) run at a measured
//! speed per device type, consolidated or spread over nodes; a job holds devices
//! of one type at a time (a mixed allocation runs at its slowest type). Every job
//! gets a [`SpeedTable`] that policies see in [`JobView::speed`].
//!
//! Quality: [`Work::LossCurve`] jobs replay a recorded loss curve at the
//! iterations per second their worker count gives them, and keep an online
//! loss-curve fit ([`LossPredictor`]) that quality-driven policies see in
//! [`JobView::quality`].

use crate::apps::AppModel;
use crate::metrics::{JobResult, RoundStat, SimResult};
use crate::quality::QualityProfile;
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, JobId, JobSpec};
use pacer_policy::{
    check_capacity, ClusterView, JobView, Policy, QualityView, SpeedCurve, SpeedTable,
};
use pacer_predict::goodput::{
    fit_perf_params_from, BatchLimits, GoodputFn, GradParams, PerfObservation, PerfParams,
};
use pacer_predict::loss_curve::LossPredictor;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Simulation settings.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Length of a scheduling round (s).
    pub round_s: f64,
    /// Delay a job pays whenever its allocation changes (s).
    pub restart_s: f64,
    /// Stop after this much simulated time even if jobs remain (s).
    pub max_time_s: f64,
    /// Record the per-round timeline (for plots).
    pub record_timeline: bool,
    /// When the policy is asked besides round boundaries ([`ArrivalReplan`]).
    pub replan_on_arrival: ArrivalReplan,
}

/// Whether a job's arrival starts a new round before the current one ends. Rounds
/// then vary in length; `round_s` stays the longest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArrivalReplan {
    /// Arrivals wait for the next round boundary (Gavel's and Pollux's simulators).
    #[default]
    Never,
    /// A new round starts at an arrival when the last allocation left devices idle:
    /// the newcomer can start at once without anybody being preempted.
    WhenIdle,
    /// A new round starts at every arrival (an event-driven scheduler); the policy
    /// decides whether to preempt for the newcomer.
    Always,
}

impl std::str::FromStr for ArrivalReplan {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "never" => Ok(ArrivalReplan::Never),
            "idle" => Ok(ArrivalReplan::WhenIdle),
            "always" => Ok(ArrivalReplan::Always),
            _ => Err(format!("`{s}`: expected never, idle or always")),
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_s: 60.0,
            restart_s: 30.0,
            max_time_s: 400.0 * 24.0 * 3600.0,
            record_timeline: true,
            replan_on_arrival: ArrivalReplan::Never,
        }
    }
}

/// How a job's work is measured.
#[derive(Debug, Clone)]
pub enum Work {
    /// A measured application (index into the simulation's apps).
    Profiled { app: usize },
    /// Duration-only job (Philly, Gavel traces): `duration_s` when run on its
    /// requested devices; speed scales linearly up to that size and no further.
    Duration { duration_s: f64 },
    /// `steps` to run at a measured speed per device type (Gavel's throughputs),
    /// on the job's requested number of devices; linear below it, flat above.
    Throughput { steps: f64, rates: Vec<TypeRate> },
    /// Replays a recorded training run: the job is done after the profile's last
    /// iteration.
    LossCurve { profile: Arc<QualityProfile> },
}

/// Speed of a [`Work::Throughput`] job on one device type (steps/s).
#[derive(Debug, Clone, PartialEq)]
pub struct TypeRate {
    pub device_type: String,
    /// On the fewest nodes that hold the devices.
    pub consolidated: f64,
    /// Spread over more nodes (Gavel's `_unconsolidated`).
    pub unconsolidated: f64,
}

/// A job to simulate.
#[derive(Debug, Clone)]
pub struct SimJob {
    pub spec: JobSpec,
    pub work: Work,
}

#[derive(Debug, Clone)]
struct JobState {
    progress: f64,
    epoch: usize,
    alloc: Allocation,
    /// `alloc.replicas()`.
    replicas: u32,
    atomic_bsz: u32,
    accum_steps: u32,
    rescale_left_s: f64,
    attained_gpu_s: f64,
    restarts: Option<u32>,
    start_s: Option<f64>,
    completion_s: Option<f64>,
    /// Observed (nodes, replicas, atomic) → (step, sync) for the online fit.
    profile: HashMap<(u32, u32, u32), (f64, f64)>,
    perf: Option<PerfParams>,
    grad: Option<GradParams>,
    goodput_version: u64,
    /// `goodput_version` the current batch was chosen at.
    batch_version: u64,
    max_profiled_replicas: u32,
    /// Σ active jobs × round length over the rounds this job was active, and Σ round
    /// lengths (while active: the simulation's running totals at its admission).
    contention_sum: f64,
    contention_s: f64,
    /// Loss history and fit (LossCurve jobs).
    loss: Option<LossPredictor>,
    /// Fixed-batch jobs: (step, sync) on the current allocation, and the goodput
    /// in an epoch; cleared when the allocation changes.
    fixed_step: Option<(f64, f64)>,
    fixed_goodput: Option<(usize, f64)>,
}

impl JobState {
    fn new() -> Self {
        JobState {
            progress: 0.0,
            epoch: 0,
            alloc: Allocation::empty(),
            replicas: 0,
            atomic_bsz: 0,
            accum_steps: 0,
            rescale_left_s: 0.0,
            attained_gpu_s: 0.0,
            restarts: None,
            start_s: None,
            completion_s: None,
            profile: HashMap::new(),
            perf: None,
            grad: None,
            goodput_version: 0,
            batch_version: u64::MAX,
            max_profiled_replicas: 0,
            contention_sum: 0.0,
            contention_s: 0.0,
            loss: None,
            fixed_step: None,
            fixed_goodput: None,
        }
    }
}

/// Dedicated training times by (app, batch, replicas, one device per node).
type DedicatedMemo = HashMap<(usize, u32, u32, bool), f64>;

/// Relative prediction error below which a new measurement does not trigger a refit.
const SURPRISE: f64 = 0.02;

/// Batch settings of a profiled job under a policy.
#[derive(Debug, Clone, Copy)]
struct BatchMode {
    /// `Some(b)`: keep global batch b; `None`: choose for goodput.
    fixed: Option<u32>,
    /// Cap on replicas the policy may give (adaptive jobs).
    max_replicas_cap: Option<u32>,
}

/// Apps whose batch Pollux's simulator keeps fixed even under Pollux (ncf: fixed
/// 32768 on one replica), reproduced for comparability.
fn pollux_fixed(app: &AppModel) -> Option<(u32, u32)> {
    (app.name() == "ncf").then_some((32768, 1))
}

/// Splits a fixed global batch into (atomic, accum) the way Pollux's jobs do.
fn split_fixed(app: &AppModel, batch: u32, replicas: u32) -> (u32, u32) {
    let eps = 1e-8;
    let local = (batch as f64 / replicas as f64 - eps).ceil();
    let mut accum = ((local / app.max_local_bsz - eps).ceil() - 1.0).max(0.0) as u32;
    if replicas == 1 && batch as f64 > app.init_batch {
        accum = accum.max(1);
    }
    let atomic = (local / (accum + 1) as f64 - eps).ceil().max(1.0) as u32;
    (atomic, accum)
}

fn limits(app: &AppModel) -> BatchLimits {
    BatchLimits {
        base_batch: app.init_batch,
        max_batch: app.max_batch,
        min_atomic: app.min_local_bsz,
        max_atomic: app.max_local_bsz,
        accumulation: true,
    }
}

/// Runs one simulation to completion (or `max_time_s`).
pub struct Simulation<'a> {
    pub cluster: &'a ClusterSpec,
    pub apps: &'a [AppModel],
    pub jobs: &'a [SimJob],
    pub config: SimConfig,
}

/// What an observer sees after each round (progress bars, invariant checks).
pub struct RoundInfo<'a> {
    pub now_s: f64,
    finished: usize,
    sim: &'a Simulation<'a>,
    states: &'a [JobState],
}

impl RoundInfo<'_> {
    /// Jobs finished so far.
    pub fn finished_jobs(&self) -> usize {
        self.finished
    }

    /// Jobs in the simulation.
    pub fn total_jobs(&self) -> usize {
        self.sim.jobs.len()
    }

    /// Fraction of job `i`'s work done, in [0, 1].
    pub fn progress(&self, i: usize) -> f64 {
        let st = &self.states[i];
        match &self.sim.jobs[i].work {
            Work::Profiled { app } => {
                (st.progress / self.sim.apps[*app].target_progress()).min(1.0)
            }
            Work::Duration { .. } => st.progress.min(1.0),
            Work::Throughput { steps, .. } => (st.progress / steps).min(1.0),
            Work::LossCurve { profile } => (st.progress / profile.total_iterations()).min(1.0),
        }
    }

    /// Current loss of a [`Work::LossCurve`] job (its recorded loss at the
    /// iteration it reached; the initial loss before it starts).
    pub fn loss(&self, i: usize) -> Option<f64> {
        match &self.sim.jobs[i].work {
            Work::LossCurve { profile } => Some(profile.loss_at(self.states[i].progress)),
            _ => None,
        }
    }

    /// Whether job `i` has arrived by now.
    pub fn arrived(&self, i: usize) -> bool {
        self.sim.jobs[i].spec.arrival_s <= self.now_s
    }

    /// Devices job `i` holds for the next round.
    pub fn allocation(&self, i: usize) -> &Allocation {
        &self.states[i].alloc
    }

    pub fn finished(&self, i: usize) -> bool {
        self.states[i].completion_s.is_some()
    }
}

/// Most rounds a simulation may take to reach `max_time_s`: a shorter round could
/// not advance the clock (`now + round_s == now`) and the run would never end.
pub const MAX_ROUNDS: f64 = 1e12;

impl SimConfig {
    /// Checks the settings [`Simulation::run`] relies on.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad =
            |field: &'static str, message: String| Err(SimError::BadConfig { field, message });
        if !(self.max_time_s > 0.0 && self.max_time_s.is_finite()) {
            return bad(
                "max_time_s",
                format!(
                    "expected a finite number of seconds > 0, got {}",
                    self.max_time_s
                ),
            );
        }
        let min_round = self.max_time_s / MAX_ROUNDS;
        if !(self.round_s.is_finite() && self.round_s >= min_round) {
            return bad(
                "round_s",
                format!(
                    "expected a finite number of seconds ≥ {min_round:e} (at most {MAX_ROUNDS:e} \
                     rounds in the {} s horizon), got {:?}",
                    self.max_time_s, self.round_s
                ),
            );
        }
        if !(self.restart_s >= 0.0 && self.restart_s.is_finite()) {
            return bad(
                "restart_s",
                format!(
                    "expected a finite number of seconds ≥ 0, got {}",
                    self.restart_s
                ),
            );
        }
        Ok(())
    }

    /// Checks that every job can finish within `max_time_s` under some policy: it
    /// arrives before the limit and, for jobs whose fastest run is known (duration and
    /// throughput jobs, on their requested devices), finishes by it when started at
    /// once. Such a job was silently left unfinished, its row `0/1` with NaN columns.
    /// (Profiled jobs adapt their batch and size, so their fastest run is not bounded
    /// here; one still unfinished at the limit is reported by `finished < jobs`.)
    pub fn check_jobs(&self, jobs: &[SimJob]) -> Result<(), SimError> {
        let limit = self.max_time_s;
        let t = |s: f64| format!("{s:.6e} s ({:.4e} days)", s / 86_400.0);
        let lim = format!(
            "the simulator's time limit (max_time_s) of {} s ({} days)",
            limit,
            limit / 86_400.0
        );
        for job in jobs {
            let beyond = |message: String| {
                Err(SimError::BeyondHorizon {
                    job: job.spec.name.clone(),
                    message,
                })
            };
            let arrival = job.spec.arrival_s;
            if !(arrival.is_finite() && arrival < limit) {
                return beyond(format!(
                    "arrives at t = {}, at or after {lim}; it could never run",
                    t(arrival)
                ));
            }
            let fastest = match &job.work {
                Work::Duration { duration_s } => Some(*duration_s),
                Work::Throughput { steps, rates } => {
                    let best = rates.iter().map(|r| r.consolidated).fold(0.0, f64::max);
                    (best > 0.0).then(|| steps / best)
                }
                Work::Profiled { .. } | Work::LossCurve { .. } => None,
            };
            if let Some(d) = fastest {
                if arrival + d > limit || d.is_nan() {
                    return beyond(format!(
                        "runs for {} even on its {} requested device(s); arriving at t = {}, \
                         it would end after {lim} and could never finish",
                        t(d),
                        job.spec.requested_replicas.max(1),
                        t(arrival)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Errors during a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("simulation setting `{field}`: {message}")]
    BadConfig {
        field: &'static str,
        message: String,
    },
    /// A job that could not finish within `max_time_s` whatever the policy did.
    #[error("job `{job}`: {message}")]
    BeyondHorizon { job: String, message: String },
    /// A workload that cannot run on the cluster (device types, sizes).
    #[error(transparent)]
    Workload(#[from] crate::admit::WorkloadError),
    #[error("policy `{policy}` returned an invalid allocation at t={time_s}s: {reason}")]
    BadAllocation {
        policy: String,
        time_s: f64,
        reason: String,
    },
}

impl Simulation<'_> {
    fn batch_mode(&self, job: &SimJob, adaptive: bool) -> BatchMode {
        match (&job.work, adaptive) {
            (Work::Profiled { app }, true) => match pollux_fixed(&self.apps[*app]) {
                Some((b, r)) => BatchMode {
                    fixed: Some(b),
                    max_replicas_cap: Some(r),
                },
                None => BatchMode {
                    fixed: None,
                    max_replicas_cap: None,
                },
            },
            _ => BatchMode {
                fixed: Some(job.spec.requested_batch),
                max_replicas_cap: None,
            },
        }
    }

    fn goodput_fn(&self, app: &AppModel, st: &JobState) -> Option<GoodputFn> {
        // Per-type applications: the model fitted to the tables of the type it runs on.
        if !app.typed().is_empty() {
            let ty = self.alloc_type(&st.alloc)?;
            return Some(GoodputFn {
                perf: app.typed()[app.type_index(ty)?].perf?,
                grad: st.grad?,
                limits: limits(app),
            });
        }
        Some(GoodputFn {
            perf: st.perf?,
            grad: st.grad?,
            limits: limits(app),
        })
    }

    /// Device type of an allocation's first node (`None`: empty).
    fn alloc_type(&self, alloc: &Allocation) -> Option<&str> {
        let &(node, _) = alloc.slots().first()?;
        let ty = self.cluster.nodes[node.0 as usize].device_type;
        Some(self.cluster.device_types[ty.0 as usize].as_str())
    }

    /// Goodput model per cluster device type of a per-type application (`None`
    /// for the types it has no tables for); empty for other jobs. Gradient
    /// statistics before the job has run: the application's at its base batch.
    fn goodput_by_type(&self, app: &AppModel, st: &JobState) -> Vec<Option<GoodputFn>> {
        if app.typed().is_empty() {
            return Vec::new();
        }
        let grad = st.grad.unwrap_or_else(|| {
            let (sqr, var) = app.grad_stats(app.init_batch, st.epoch);
            GradParams { sqr, var }
        });
        self.cluster
            .device_types
            .iter()
            .map(|name| {
                let t = &app.typed()[app.type_index(name)?];
                Some(GoodputFn {
                    perf: t.perf?,
                    grad,
                    limits: limits(app),
                })
            })
            .collect()
    }

    /// Sets atomic batch and accumulation for the job's current allocation.
    fn update_batch(&self, app: &AppModel, mode: BatchMode, st: &mut JobState) {
        let placement = st.alloc.placement();
        let (nodes, replicas) = (placement.len() as u32, placement.iter().sum::<u32>());
        if replicas == 0 {
            return;
        }
        let (atomic, accum) = match (mode.fixed, self.goodput_fn(app, st)) {
            (Some(b), _) => split_fixed(app, b, replicas),
            (None, Some(g)) => match g.optimize(nodes, replicas) {
                Some(c) => (c.atomic_bsz, c.accum_steps),
                None => split_fixed(
                    app,
                    app.init_batch.max(app.min_local_bsz * replicas as f64) as u32,
                    replicas,
                ),
            },
            (None, None) => {
                let b = app.init_batch.max(app.min_local_bsz * replicas as f64);
                split_fixed(app, b as u32, replicas)
            }
        };
        st.batch_version = st.goodput_version;
        let count = replicas * (accum + 1);
        st.atomic_bsz = atomic.min((app.max_batch / count as f64) as u32).max(1);
        st.accum_steps = accum;
    }

    /// Advances a profiled job by `dt` seconds starting at `now`.
    fn step_profiled(
        &self,
        app: &AppModel,
        mode: BatchMode,
        st: &mut JobState,
        now: f64,
        mut dt: f64,
    ) {
        let replicas = st.replicas;
        let delay = st.rescale_left_s.min(dt);
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        dt -= delay;
        let mut t = now + delay;
        if mode.fixed.is_some() {
            return self.step_fixed(app, st, replicas, t, dt);
        }
        let placement = st.alloc.placement();
        let nodes = placement.len() as u32;
        let ty = self
            .alloc_type(&st.alloc)
            .filter(|_| !app.typed().is_empty());
        while dt > 0.0 && st.completion_s.is_none() {
            let atomic = st.atomic_bsz as f64;
            let batch = replicas as f64 * atomic * (st.accum_steps + 1) as f64;
            let (step, sync) = match ty {
                Some(ty) => app.step_time_on(ty, &placement, atomic),
                None => app.step_time(&placement, atomic),
            };
            let compute = (step - sync).max(1e-9);
            let gain = app.gain(batch, st.epoch);
            if mode.fixed.is_none() {
                let (sqr, var) = app.grad_stats(batch, st.epoch);
                Self::observe(st, GradParams { sqr, var }, (nodes, replicas), step, sync);
            }
            let total = step + compute * st.accum_steps as f64;
            let goodput = gain / total;
            let next = app.epoch_end_progress(st.epoch);
            if st.progress + goodput * dt < next {
                st.progress += goodput * dt;
                st.attained_gpu_s += dt * replicas as f64;
                dt = 0.0;
            } else {
                // Whole seconds, as Pollux's simulator counts them.
                let delta = ((next - st.progress) / goodput).round().min(dt).max(0.0);
                st.epoch += 1;
                st.progress = next;
                st.attained_gpu_s += delta * replicas as f64;
                t += delta;
                dt -= delta;
                if st.epoch >= app.max_epochs {
                    st.completion_s = Some(t);
                }
            }
            // The goodput-optimal batch only moves when the job's model does.
            if mode.fixed.is_none() && st.goodput_version != st.batch_version {
                self.update_batch(app, mode, st);
            }
        }
    }

    /// [`Self::step_profiled`] after the restart delay for a job whose batch is fixed:
    /// the same arithmetic, with the step time of its placement and the gain of its
    /// epoch kept between rounds (they change only with the allocation or the epoch).
    fn step_fixed(
        &self,
        app: &AppModel,
        st: &mut JobState,
        replicas: u32,
        mut t: f64,
        mut dt: f64,
    ) {
        while dt > 0.0 && st.completion_s.is_none() {
            let goodput = match st.fixed_goodput {
                Some((epoch, g)) if epoch == st.epoch => g,
                _ => {
                    let atomic = st.atomic_bsz as f64;
                    let batch = replicas as f64 * atomic * (st.accum_steps + 1) as f64;
                    let (step, sync) = match st.fixed_step {
                        Some(s) => s,
                        None => {
                            let s = app.step_time(&st.alloc.placement(), atomic);
                            st.fixed_step = Some(s);
                            s
                        }
                    };
                    let compute = (step - sync).max(1e-9);
                    let gain = app.gain(batch, st.epoch);
                    let total = step + compute * st.accum_steps as f64;
                    let g = gain / total;
                    st.fixed_goodput = Some((st.epoch, g));
                    g
                }
            };
            let next = app.epoch_end_progress(st.epoch);
            if st.progress + goodput * dt < next {
                st.progress += goodput * dt;
                st.attained_gpu_s += dt * replicas as f64;
                dt = 0.0;
            } else {
                // Whole seconds, as Pollux's simulator counts them.
                let delta = ((next - st.progress) / goodput).round().min(dt).max(0.0);
                st.epoch += 1;
                st.progress = next;
                st.attained_gpu_s += delta * replicas as f64;
                t += delta;
                dt -= delta;
                if st.epoch >= app.max_epochs {
                    st.completion_s = Some(t);
                }
            }
        }
    }

    /// Records what the job just measured and refits its model when it is new.
    fn observe(
        st: &mut JobState,
        grad: GradParams,
        (nodes, replicas): (u32, u32),
        step: f64,
        sync: f64,
    ) {
        if st.grad != Some(grad) {
            st.grad = Some(grad);
            st.goodput_version += 1;
        }
        let key = (nodes, replicas, st.atomic_bsz);
        if st.profile.contains_key(&key) {
            return;
        }
        // A new (nodes, replicas) shape can move the optimum far: fit cold. A new
        // atomic batch on a known shape only nudges it: warm-start from the last fit.
        let new_shape = !st
            .profile
            .keys()
            .any(|&(n, r, _)| n == nodes && r == replicas);
        st.profile.insert(key, (step, sync));
        st.max_profiled_replicas = st.max_profiled_replicas.max(replicas);
        let mut obs: Vec<PerfObservation> = st
            .profile
            .iter()
            .map(|(&(n, r, b), &(s, y))| PerfObservation {
                nodes: n,
                replicas: r,
                atomic_bsz: b as f64,
                compute_time_s: (s - y).max(1e-9),
                step_time_s: s,
            })
            .collect();
        // HashMap order is arbitrary; sort so the fit (and the run) is deterministic.
        obs.sort_by(|a, b| {
            (a.nodes, a.replicas, a.atomic_bsz as u64).cmp(&(
                b.nodes,
                b.replicas,
                b.atomic_bsz as u64,
            ))
        });
        // Refit only when the current model is surprised by the new measurement
        // (> 2% off); otherwise the fit would barely move and costs an LM solve.
        if let (false, Some(p)) = (new_shape, st.perf) {
            let ok = |pred: f64, seen: f64| (pred / seen - 1.0).abs() < SURPRISE;
            if ok(
                p.compute_time(st.atomic_bsz as f64),
                (step - sync).max(1e-9),
            ) && ok(p.step_time(nodes, replicas, st.atomic_bsz as f64, 0), step)
            {
                return;
            }
        }
        let warm = st.perf.as_ref();
        if let Ok(p) = fit_perf_params_from(&obs, warm) {
            st.perf = Some(p);
            st.goodput_version += 1;
        }
    }

    fn step_duration(
        &self,
        job: &SimJob,
        duration_s: f64,
        st: &mut JobState,
        now: f64,
        mut dt: f64,
    ) {
        let replicas = st.alloc.replicas();
        let delay = st.rescale_left_s.min(dt);
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        dt -= delay;
        let req = job.spec.requested_replicas.max(1);
        let rate = replicas.min(req) as f64 / req as f64 / duration_s;
        if rate <= 0.0 || dt <= 0.0 {
            return;
        }
        let need = 1.0 - st.progress;
        if need <= rate * dt {
            let delta = need / rate;
            st.progress = 1.0;
            st.attained_gpu_s += delta * replicas as f64;
            st.completion_s = Some(now + delay + delta);
        } else {
            st.progress += rate * dt;
            st.attained_gpu_s += dt * replicas as f64;
        }
    }

    /// Advances a job whose speed is `speed.rate_of(allocation)` units/s towards
    /// `total` units (Throughput and LossCurve jobs).
    fn step_rate(&self, speed: &SpeedTable, total: f64, st: &mut JobState, now: f64, mut dt: f64) {
        let replicas = st.alloc.replicas();
        let delay = st.rescale_left_s.min(dt);
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        dt -= delay;
        let rate = speed.rate_of(self.cluster, &st.alloc);
        if rate <= 0.0 || dt <= 0.0 {
            return;
        }
        let need = total - st.progress;
        if need <= rate * dt {
            let delta = need / rate;
            st.progress = total;
            st.attained_gpu_s += delta * replicas as f64;
            st.completion_s = Some(now + delay + delta);
        } else {
            st.progress += rate * dt;
            st.attained_gpu_s += dt * replicas as f64;
        }
    }

    /// Speed table of every job (work units per second by device type and count).
    /// A type the job has no measurements for ([`crate::admit::usable_types`]) gets
    /// an empty curve: the job cannot run there. Curves stop at the devices the
    /// cluster has of the job's types, so no table outgrows the cluster.
    pub fn speed_tables(&self) -> Vec<Arc<SpeedTable>> {
        let types = self.cluster.device_types.len().max(1);
        let mut memo = DedicatedMemo::default();
        self.jobs
            .iter()
            .map(|job| {
                let usable = crate::admit::usable_types(self.cluster, self.apps, job);
                let cap = crate::admit::capacity(self.cluster, &usable).min(u32::MAX as u64);
                let req = job.spec.requested_replicas.max(1).min(cap.max(1) as u32);
                let mut t = match &job.work {
                    Work::Duration { duration_s } => {
                        SpeedTable::uniform(types, SpeedCurve::single(req, 1.0 / duration_s, 1.0))
                    }
                    Work::Profiled { app } => {
                        let app = *app;
                        let b = job.spec.requested_batch;
                        let sizes = SpeedCurve::doubling_sizes(req);
                        let points = sizes
                            .iter()
                            .map(|&r| (r, 1.0 / self.dedicated_memo(&mut memo, app, b, r, false)))
                            .collect();
                        let spread = if req > 1 {
                            self.dedicated_memo(&mut memo, app, b, req, false)
                                / self.dedicated_memo(&mut memo, app, b, req, true)
                        } else {
                            1.0
                        };
                        SpeedTable::uniform(
                            types,
                            SpeedCurve {
                                points,
                                spread_factor: spread.min(1.0),
                            },
                        )
                    }
                    Work::Throughput { rates, .. } => SpeedTable {
                        per_type: self
                            .cluster
                            .device_types
                            .iter()
                            .map(|name| {
                                rates
                                    .iter()
                                    .find(|r| r.device_type == *name)
                                    .filter(|r| r.consolidated > 0.0)
                                    .map_or_else(SpeedCurve::default, |r| {
                                        SpeedCurve::single(
                                            req,
                                            r.consolidated,
                                            (r.unconsolidated / r.consolidated).min(1.0),
                                        )
                                    })
                            })
                            .collect(),
                    },
                    Work::LossCurve { profile } => SpeedTable::uniform(
                        types,
                        SpeedCurve {
                            points: profile
                                .iter_time
                                .iter()
                                .map(|&(w, t)| (w, 1.0 / t))
                                .collect(),
                            spread_factor: 1.0,
                        },
                    ),
                };
                for (curve, ok) in t.per_type.iter_mut().zip(&usable) {
                    if !ok {
                        *curve = SpeedCurve::default();
                    }
                }
                Arc::new(t)
            })
            .collect()
    }

    /// Total work of job `i` in its speed table's units.
    fn total_work(&self, job: &SimJob) -> f64 {
        match &job.work {
            Work::Profiled { .. } | Work::Duration { .. } => 1.0,
            Work::Throughput { steps, .. } => *steps,
            Work::LossCurve { profile } => profile.total_iterations(),
        }
    }

    /// Work done by a job, in its speed table's units.
    fn work_done(&self, job: &SimJob, st: &JobState) -> f64 {
        match &job.work {
            Work::Profiled { app } => st.progress / self.apps[*app].target_progress(),
            _ => st.progress,
        }
    }

    /// Feeds a LossCurve job's predictor the recorded losses of the iterations it
    /// passed since `from` (at most the last window's worth).
    fn observe_losses(profile: &QualityProfile, st: &mut JobState, from: f64) {
        let pred = st.loss.get_or_insert_with(LossPredictor::default);
        let to = st.progress.floor();
        let mut k = from.floor() + 1.0;
        if pred.is_empty() {
            k = 0.0;
        }
        k = k.max(to - pacer_predict::loss_curve::DEFAULT_MAX_POINTS as f64);
        while k <= to {
            pred.observe(k, profile.loss_at(k));
            k += 1.0;
        }
    }

    /// The view a policy gets of active job `i` (refits a loss-curve job's
    /// predictor when the policy reads quality).
    fn job_view(
        &self,
        i: usize,
        st: &mut JobState,
        mode: BatchMode,
        speed: &Arc<SpeedTable>,
        cap: u32,
        uses_quality: bool,
    ) -> JobView {
        let job = &self.jobs[i];
        let quality = match &job.work {
            Work::LossCurve { profile } if uses_quality => {
                if st.loss.is_none() {
                    Self::observe_losses(profile, st, 0.0);
                }
                let pred = st.loss.as_mut().expect("initialised");
                pred.refit();
                let (k, loss) = pred.last().expect("observed");
                Some(QualityView {
                    iteration: k,
                    loss,
                    first_loss: pred.first_loss().unwrap_or(loss),
                    max_delta_per_iter: pred.max_delta_per_iter(),
                    curve: pred.fit().map(|f| f.curve),
                })
            }
            _ => None,
        };
        let st = &*st;
        let (max_replicas, goodput, goodput_by_type) = match (&job.work, mode.fixed) {
            (Work::Profiled { app }, None) => {
                let app = &self.apps[*app];
                let by_batch = (app.max_batch / app.min_local_bsz) as u32;
                let explore = (2 * st.max_profiled_replicas).max(1);
                (
                    explore.min(64).min(by_batch).min(cap).max(1),
                    self.goodput_fn(app, st),
                    self.goodput_by_type(app, st),
                )
            }
            _ => (
                mode.max_replicas_cap
                    .unwrap_or(job.spec.requested_replicas)
                    .max(1),
                None,
                Vec::new(),
            ),
        };
        JobView {
            id: JobId(i as u32),
            arrival_s: job.spec.arrival_s,
            attained_gpu_s: st.attained_gpu_s,
            requested_replicas: job.spec.requested_replicas.max(1),
            max_replicas: mode
                .max_replicas_cap
                .map_or(max_replicas, |c| c.min(max_replicas)),
            num_restarts: st.restarts.unwrap_or(0),
            restart_s: match &job.work {
                Work::Profiled { app } => self.apps[*app].restart_s,
                _ => None,
            },
            current: st.alloc.clone(),
            goodput,
            goodput_by_type,
            goodput_version: st.goodput_version,
            speed: Some(speed.clone()),
            work_done: self.work_done(job, st),
            work_left: (self.total_work(job) - self.work_done(job, st)).max(0.0),
            quality,
        }
    }

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
        mut on_round: impl FnMut(&RoundInfo),
    ) -> Result<SimResult, SimError> {
        let wall = Instant::now();
        let cfg = &self.config;
        cfg.validate()?;
        cfg.check_jobs(self.jobs)?;
        crate::admit::check_workload(self.cluster, self.apps, self.jobs)?;
        let adaptive = policy.adaptive_batch();
        let speeds = self.speed_tables();
        // The event-driven forms place jobs without looking at device types: they run
        // only when every job can use every device type of the cluster (the full
        // policies keep each job on the types it has measurements for).
        let unrestricted = speeds
            .iter()
            .all(|sp| sp.per_type.iter().all(|c| !c.points.is_empty()));
        let mut incremental = if unrestricted {
            policy.incremental()
        } else {
            None
        };
        let modes: Vec<BatchMode> = self
            .jobs
            .iter()
            .map(|j| self.batch_mode(j, adaptive))
            .collect();
        let mut states: Vec<JobState> = self.jobs.iter().map(|_| JobState::new()).collect();
        // Jobs in arrival order; `next_arrival` indexes into it, `rank` inverts it.
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            self.jobs[a]
                .spec
                .arrival_s
                .total_cmp(&self.jobs[b].spec.arrival_s)
                .then(a.cmp(&b))
        });
        let mut rank = vec![0usize; self.jobs.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let mut next_arrival = 0usize;
        // Active jobs in arrival order (kept only for policies without an
        // event-driven form, which see them all each round).
        let mut active: Vec<usize> = Vec::new();
        let mut n_active = 0usize;
        // Jobs holding devices, in arrival order.
        let mut running: Vec<usize> = Vec::new();
        let mut just_finished: Vec<usize> = Vec::new();
        let mut arrived: Vec<usize> = Vec::new();
        // Decision count, and the decision that last changed each job (one change each).
        let mut decision = 0u64;
        let mut changed_at = vec![0u64; self.jobs.len()];
        let mut started: Vec<usize> = Vec::new();
        let mut changes: Vec<(JobId, Allocation)> = Vec::new();
        let mut attained: Vec<(JobId, f64)> = Vec::new();
        let mut node_used = vec![0u32; self.cluster.nodes.len()];
        let mut used = 0u32;
        // Σ active jobs × round length and Σ round lengths since the start; a job's
        // contention is the difference between its departure and its admission.
        let mut contention_sum = 0.0f64;
        let mut contention_s = 0.0f64;
        let mut timeline = Vec::new();
        let mut now = 0.0f64;
        let total_gpus = self.cluster.total_gpus() as f64;
        let mut busy_gpu_s = 0.0;
        let mut finished = 0usize;
        let mut views: Vec<JobView> = Vec::new();
        // Devices of the types each job can run on (adaptive jobs explore up to it).
        let caps: Vec<u32> = speeds
            .iter()
            .map(|sp| {
                let usable: Vec<bool> = sp.per_type.iter().map(|c| !c.points.is_empty()).collect();
                crate::admit::capacity(self.cluster, &usable).min(u32::MAX as u64) as u32
            })
            .collect();
        let uses_quality = policy.uses_quality();
        // End of the next round: `now + round_s`, or the next arrival when it comes
        // earlier and `replan_on_arrival` allows (exactly its arrival time, so that it
        // is admitted).
        let next_round = |now: f64, idle: bool, next_arrival: usize| -> f64 {
            let replan = match cfg.replan_on_arrival {
                ArrivalReplan::Never => false,
                ArrivalReplan::WhenIdle => idle,
                ArrivalReplan::Always => true,
            };
            if replan {
                if let Some(&j) = order.get(next_arrival) {
                    let t = self.jobs[j].spec.arrival_s;
                    if t >= now && t < now + cfg.round_s {
                        return t;
                    }
                }
            }
            now + cfg.round_s
        };
        let policy_name = policy.name();
        let bad = |time_s: f64, reason: String| SimError::BadAllocation {
            policy: policy_name.into(),
            time_s,
            reason,
        };
        let mut until = next_round(now, true, next_arrival);
        while finished < self.jobs.len() && now < cfg.max_time_s {
            let dt = until - now;
            // 1. Progress of running jobs over [now, now + round).
            just_finished.clear();
            for &i in &running {
                let st = &mut states[i];
                if st.completion_s.is_some() {
                    continue;
                }
                let before = st.attained_gpu_s;
                match &self.jobs[i].work {
                    Work::Profiled { app } => {
                        self.step_profiled(&self.apps[*app], modes[i], st, now, dt)
                    }
                    Work::Duration { duration_s } => {
                        self.step_duration(&self.jobs[i], *duration_s, st, now, dt)
                    }
                    Work::Throughput { steps, .. } => {
                        self.step_rate(&speeds[i], *steps, st, now, dt)
                    }
                    Work::LossCurve { profile } => {
                        let from = st.progress;
                        self.step_rate(&speeds[i], profile.total_iterations(), st, now, dt);
                        if uses_quality && st.progress > from {
                            Self::observe_losses(profile, st, from);
                        }
                    }
                }
                busy_gpu_s += st.attained_gpu_s - before;
                if st.completion_s.is_some() {
                    finished += 1;
                    just_finished.push(i);
                }
            }
            now = until;
            // 2. Admit arrivals; drop finished jobs.
            if n_active == 0 && next_arrival < order.len() {
                // Idle cluster: jump to the round in which the next job arrives.
                let t = self.jobs[order[next_arrival]].spec.arrival_s;
                if t > now {
                    now = if cfg.replan_on_arrival != ArrivalReplan::Never {
                        t
                    } else {
                        (t / cfg.round_s).ceil() * cfg.round_s
                    };
                }
            }
            arrived.clear();
            while next_arrival < order.len() && self.jobs[order[next_arrival]].spec.arrival_s <= now
            {
                let i = order[next_arrival];
                arrived.push(i);
                states[i].contention_sum = contention_sum;
                states[i].contention_s = contention_s;
                next_arrival += 1;
            }
            n_active += arrived.len();
            n_active -= just_finished.len();
            for &i in &just_finished {
                let st = &mut states[i];
                st.contention_sum = contention_sum - st.contention_sum;
                st.contention_s = contention_s - st.contention_s;
                used -= st.alloc.replicas();
                for &(node, c) in st.alloc.slots() {
                    node_used[node.0 as usize] -= c;
                }
            }
            if !just_finished.is_empty() {
                running.retain(|&i| states[i].completion_s.is_none());
            }
            if incremental.is_none() {
                active.extend_from_slice(&arrived);
                if !just_finished.is_empty() {
                    active.retain(|&i| states[i].completion_s.is_none());
                }
            }
            // Departures reach an event-driven policy even when nothing is left to
            // decide (its free devices must include theirs).
            if let Some(inc) = incremental.as_mut() {
                for &i in &just_finished {
                    inc.finish(JobId(i as u32));
                }
            }
            if n_active == 0 {
                running.clear();
                until = next_round(now, true, next_arrival);
                continue;
            }
            // 3. Ask the policy.
            changes.clear();
            match incremental.as_mut() {
                Some(inc) => {
                    for &i in &arrived {
                        let v =
                            self.job_view(i, &mut states[i], modes[i], &speeds[i], caps[i], false);
                        inc.admit(&v);
                    }
                    attained.clear();
                    attained.extend(
                        running
                            .iter()
                            .filter(|_| inc.uses_attained())
                            .map(|&i| (JobId(i as u32), states[i].attained_gpu_s)),
                    );
                    inc.decide(now, self.cluster, &attained, &mut changes);
                    decision += 1;
                    for (id, _) in &changes {
                        let i = id.0 as usize;
                        let live = states
                            .get(i)
                            .is_some_and(|st| st.completion_s.is_none() && next_arrival > rank[i]);
                        if !live {
                            return Err(bad(
                                now,
                                format!("allocation for job #{i}, which is not active"),
                            ));
                        }
                        if changed_at[i] == decision {
                            return Err(bad(now, format!("two allocations for job #{i}")));
                        }
                        changed_at[i] = decision;
                    }
                }
                None => {
                    views.clear();
                    for &i in &active {
                        let v = self.job_view(
                            i,
                            &mut states[i],
                            modes[i],
                            &speeds[i],
                            caps[i],
                            uses_quality,
                        );
                        views.push(v);
                    }
                    let view = ClusterView {
                        now_s: now,
                        cluster: self.cluster,
                        jobs: &views,
                    };
                    let allocs = policy.allocate(&view);
                    if allocs.len() != views.len() {
                        return Err(bad(
                            now,
                            format!("{} allocations for {} jobs", allocs.len(), views.len()),
                        ));
                    }
                    check_capacity(self.cluster, &allocs).map_err(|reason| bad(now, reason))?;
                    for (a, &i) in allocs.into_iter().zip(&active) {
                        if a != states[i].alloc {
                            changes.push((JobId(i as u32), a));
                        }
                    }
                }
            }
            // A job runs only on device types it has measurements for: elsewhere the
            // simulator would have no ground truth and would relabel another type's.
            for (id, a) in &changes {
                let i = id.0 as usize;
                let unmeasured = a.slots().iter().find_map(|&(node, _)| {
                    let ty = self.cluster.nodes[node.0 as usize].device_type;
                    speeds[i]
                        .per_type
                        .get(ty.0 as usize)
                        .is_none_or(|c| c.points.is_empty())
                        .then_some((node, ty))
                });
                if let Some((node, ty)) = unmeasured {
                    return Err(bad(
                        now,
                        format!(
                            "job `{}` placed on node {} of device type {}, which it has no \
                             measurements for",
                            self.jobs[i].spec.name,
                            node.0,
                            self.cluster.device_types[ty.0 as usize]
                        ),
                    ));
                }
            }
            // 4. Apply.
            let mut moved = false;
            started.clear();
            // Capacity: devices given up first, then the new ones (in any order).
            changes.retain(|(id, a)| *a != states[id.0 as usize].alloc);
            for (id, _) in &changes {
                for &(node, c) in states[id.0 as usize].alloc.slots() {
                    node_used[node.0 as usize] -= c;
                }
            }
            for (id, a) in changes.drain(..) {
                let i = id.0 as usize;
                let st = &mut states[i];
                for &(node, c) in a.slots() {
                    let n = node.0 as usize;
                    if n >= node_used.len() {
                        return Err(bad(
                            now,
                            format!("job #{i} allocated on node {n}, which does not exist"),
                        ));
                    }
                    node_used[n] += c;
                    if node_used[n] > self.cluster.nodes[n].gpus {
                        return Err(bad(
                            now,
                            format!(
                                "node {n} over-subscribed: {} > {} devices",
                                node_used[n], self.cluster.nodes[n].gpus
                            ),
                        ));
                    }
                }
                used = used - st.alloc.replicas() + a.replicas();
                moved |= st.alloc.is_empty() != a.is_empty();
                st.fixed_step = None;
                st.fixed_goodput = None;
                if st.alloc.is_empty() {
                    started.push(i);
                }
                if let Work::Profiled { app } = &self.jobs[i].work {
                    // Measurements of another device type say nothing about this one.
                    let app = &self.apps[*app];
                    if !app.typed().is_empty()
                        && !a.is_empty()
                        && !st.alloc.is_empty()
                        && self.alloc_type(&a) != self.alloc_type(&st.alloc)
                    {
                        st.profile.clear();
                        st.perf = None;
                        st.goodput_version += 1;
                    }
                }
                st.alloc = a;
                st.replicas = st.alloc.replicas();
                if !st.alloc.is_empty() {
                    st.rescale_left_s = match &self.jobs[i].work {
                        Work::Profiled { app } => self.apps[*app].restart_s,
                        _ => None,
                    }
                    .unwrap_or(cfg.restart_s);
                    st.restarts = Some(st.restarts.map_or(0, |r| r + 1));
                    st.start_s.get_or_insert(now);
                    if let Work::Profiled { app } = &self.jobs[i].work {
                        self.update_batch(&self.apps[*app], modes[i], st);
                    }
                }
            }
            if moved {
                // Keep arrival order: jobs stepped in the same order give the same sums.
                running.retain(|&i| !states[i].alloc.is_empty());
                running.append(&mut started);
                running.sort_unstable_by_key(|&i| rank[i]);
            }
            // The round this allocation holds for; contention is weighted by it.
            until = next_round(now, used < self.cluster.total_gpus(), next_arrival);
            let dt = until - now;
            contention_sum += n_active as f64 * dt;
            contention_s += dt;
            if cfg.record_timeline {
                timeline.push(RoundStat {
                    time_s: now,
                    active_jobs: n_active as u32,
                    running_jobs: running.len() as u32,
                    used_gpus: used,
                });
            }
            on_round(&RoundInfo {
                now_s: now,
                finished,
                sim: self,
                states: &states,
            });
        }
        // Jobs still active at the end: contention up to now.
        for (k, st) in states.iter_mut().enumerate() {
            if st.completion_s.is_none() && rank[k] < next_arrival {
                st.contention_sum = contention_sum - st.contention_sum;
                st.contention_s = contention_s - st.contention_s;
            }
        }
        let mut memo = DedicatedMemo::default();
        let results: Vec<JobResult> = self
            .jobs
            .iter()
            .zip(&states)
            .map(|(job, st)| {
                let contention = if st.contention_s > 0.0 {
                    st.contention_sum / st.contention_s
                } else {
                    1.0
                };
                let t_indep = self.independent_time_with(job, contention, &mut memo);
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
                }
            })
            .collect();
        Ok(SimResult::new(
            policy.name(),
            total_gpus,
            busy_gpu_s,
            results,
            timeline,
            wall.elapsed().as_secs_f64() * 1e3,
        ))
    }

    /// Time the job would take alone on a 1/N share of the cluster (N = average
    /// number of contending jobs while it was active), at the batch and size the
    /// user asked for, consolidated, with no restarts: Themis' T_independent. The
    /// same definition for every policy, so ρ compares across policies.
    pub fn independent_time(&self, job: &SimJob, contention: f64) -> f64 {
        self.independent_time_with(job, contention, &mut DedicatedMemo::default())
    }

    /// [`Self::independent_time`] with dedicated times remembered across jobs.
    fn independent_time_with(
        &self,
        job: &SimJob,
        contention: f64,
        memo: &mut DedicatedMemo,
    ) -> f64 {
        let share = self.cluster.total_gpus() as f64 / contention.max(1.0);
        let req = job.spec.requested_replicas.max(1);
        let (replicas, slowdown) = if share >= 1.0 {
            (req.min(share.floor() as u32), 1.0)
        } else {
            (1, 1.0 / share)
        };
        let dedicated = match &job.work {
            Work::Duration { duration_s } => duration_s * req as f64 / replicas.min(req) as f64,
            Work::Profiled { app } => {
                self.dedicated_memo(memo, *app, job.spec.requested_batch, replicas, false)
            }
            // The 1/N share is a slice of every device type in proportion to its
            // capacity (Gavel's isolated share), consolidated.
            Work::Throughput { steps, rates } => {
                let total = self.cluster.total_gpus() as f64;
                let rate: f64 = self
                    .cluster
                    .device_types
                    .iter()
                    .enumerate()
                    .map(|(t, name)| {
                        let w = self.cluster.gpus_of_type(DeviceTypeId(t as u16)) as f64 / total;
                        let r = rates
                            .iter()
                            .find(|r| r.device_type == *name)
                            .map_or(0.0, |r| r.consolidated);
                        w * r * replicas.min(req) as f64 / req as f64
                    })
                    .sum();
                steps / rate.max(1e-300)
            }
            Work::LossCurve { profile } => {
                profile.total_iterations() / profile.iterations_per_s(replicas).max(1e-300)
            }
        };
        dedicated * slowdown
    }

    /// [`Self::dedicated_time`] (`spread`: one device per node,
    /// [`Self::dedicated_time_on`]) of embedded app `app`, computed once per key: many
    /// jobs share an application, batch and size, and each costs a pass over its epochs.
    fn dedicated_memo(
        &self,
        memo: &mut DedicatedMemo,
        app: usize,
        batch: u32,
        replicas: u32,
        spread: bool,
    ) -> f64 {
        *memo
            .entry((app, batch, replicas, spread))
            .or_insert_with(|| {
                let a = &self.apps[app];
                if spread {
                    self.dedicated_time_on(a, batch, &vec![1; replicas as usize])
                } else {
                    self.dedicated_time(a, batch, replicas)
                }
            })
    }

    /// Time to train `app` at a fixed global batch on `replicas` consolidated devices.
    pub fn dedicated_time(&self, app: &AppModel, batch: u32, replicas: u32) -> f64 {
        let per_node = self.cluster.max_gpus_per_node().max(1);
        let mut placement = vec![per_node; (replicas / per_node) as usize];
        if !replicas.is_multiple_of(per_node) {
            placement.push(replicas % per_node);
        }
        self.dedicated_time_on(app, batch, &placement)
    }

    /// Time to train `app` at a fixed global batch on a given placement (devices per node).
    pub fn dedicated_time_on(&self, app: &AppModel, batch: u32, placement: &[u32]) -> f64 {
        let replicas: u32 = placement.iter().sum();
        let (atomic, accum) = split_fixed(app, batch, replicas);
        let atomic = atomic
            .min((app.max_batch / (replicas * (accum + 1)) as f64) as u32)
            .max(1);
        let global = (replicas * atomic * (accum + 1)) as f64;
        let (step, sync) = app.step_time(placement, atomic as f64);
        let total = step + (step - sync).max(0.0) * accum as f64;
        let mut t = 0.0;
        let mut progress = 0.0;
        for e in 0..app.max_epochs {
            let next = app.epoch_end_progress(e);
            t += (next - progress) * total / app.gain(global, e);
            progress = next;
        }
        t
    }
}
