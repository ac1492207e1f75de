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
//! gets a [`SpeedTable`] that policies see in [`JobView::speed`]. With
//! [`SimConfig::mixed_types`], a profiled job of a per-type application on devices
//! of several types runs at its balanced step instead (`mixed.rs`: each type's model
//! at the local batch the worker level gives it, one all-reduce over the slowest
//! link, the whole job's goodput).
//!
//! Quality: [`Work::LossCurve`] jobs replay a recorded loss curve at the
//! iterations per second their worker count gives them, and keep an online
//! loss-curve fit ([`LossPredictor`]) that quality-driven policies see in
//! [`JobView::quality`].
//!
//! The loop itself knows no kind of job: each job's [`Work`] becomes a
//! `progress::JobProgress` (one file per kind under `progress/`, one line in
//! `progress::of`) that advances it over a round, builds its speed table and view,
//! names its restart delay and its time alone.

mod dedicated;
mod fit_memo;
pub mod mixed;
mod online;
mod opportunity;
mod progress;
pub use online::ProfileMode;
mod run;
mod view;
pub use progress::AdaptiveView;
pub use view::SimJobFacts;

use progress::JobProgress;

use crate::apps::AppModel;
use crate::metrics::{JobResult, RoundStat, SimResult};
use crate::quality::QualityProfile;
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, JobId, JobSpec};
use pacer_policy::{check_capacity, ClusterView, JobView, Policy, SpeedTable};
use pacer_predict::goodput::{BatchLimits, GradParams, PerfParams};
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
    /// When the policy is asked besides round boundaries ([`ArrivalReplan`];
    /// `Auto`: the policy's own, [`Policy::arrival_replan`]).
    pub replan_on_arrival: ArrivalReplan,
    /// Per-type models policies see for per-type applications ([`ProfileMode`]).
    pub profiles: ProfileMode,
    /// Profiled jobs of per-type applications accept allocations across device
    /// types, balanced by the worker level (`pacer simulate --mixed-types`;
    /// `mixed.rs`); off: such an allocation runs on its first node's type's tables,
    /// as before.
    pub mixed_types: bool,
    /// Measure the run's opportunity for jobs across device types: devices idle on
    /// one type while a job is held to others, and a bound on the JCT mixing could
    /// save (`Summary::mixing`, `opportunity.rs`). Off: nothing is measured and
    /// every output is as before.
    pub mixing_opportunity: bool,
}

pub use pacer_policy::ArrivalReplan;

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_s: 60.0,
            restart_s: 30.0,
            max_time_s: 400.0 * 24.0 * 3600.0,
            record_timeline: true,
            replan_on_arrival: ArrivalReplan::Auto,
            profiles: ProfileMode::Fitted,
            mixed_types: false,
            mixing_opportunity: false,
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
    /// `steps` optimiser steps at measured iterations/s per device count and type
    /// (ElasticFlow's tables), with an optional deadline (s since the trace's start;
    /// `None`: best effort). A restart costs ElasticFlow's overhead for the new size
    /// (`trace::elasticflow::ef_restart_s`).
    Elastic {
        steps: f64,
        curves: Vec<ElasticCurve>,
        deadline_s: Option<f64>,
    },
}

/// Iterations/s of a [`Work::Elastic`] job on one device type: `(devices, rate)`
/// at the measured counts, sorted.
#[derive(Debug, Clone, PartialEq)]
pub struct ElasticCurve {
    pub device_type: String,
    pub points: Vec<(u32, f64)>,
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

/// One job's state. `repr(C)`, fields in declaration order, hot ones first: a
/// round's progress reads the first cache line, an allocation change the first
/// three; with 100k jobs most of a state is cold, and the compiler's own order
/// spread these fields over all of it.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct JobState {
    // Line 1: every round of a running job (all that `steady_round` reads).
    progress: f64,
    rescale_left_s: f64,
    attained_gpu_s: f64,
    completion_s: Option<f64>,
    /// Fixed-batch jobs: the goodput in the current epoch on the current
    /// allocation (NaN: not computed since the epoch or the allocation changed).
    fixed_goodput: f64,
    /// The progress at which the epoch `fixed_goodput` holds for ends (valid
    /// while `fixed_goodput` is not NaN).
    fixed_next: f64,
    /// `alloc.replicas()`.
    replicas: u32,
    // Line 2: fixed-batch jobs' cached step time, epoch and batch.
    epoch: usize,
    /// Fixed-batch jobs: (step, sync) on the current allocation.
    fixed_step: Option<(f64, f64)>,
    /// (devices, device type) of the one-node allocation `fixed_step` and
    /// `fixed_goodput` were computed on (`None`: several nodes; recomputed at the
    /// next allocation).
    fixed_shape: Option<(u32, DeviceTypeId)>,
    atomic_bsz: u32,
    accum_steps: u32,
    /// The job's speed table's rate on `alloc` (`SpeedTable::rate_of`; NaN: not
    /// computed since the allocation changed), for the kinds that step at it.
    alloc_rate: f64,
    // Line 3: allocation changes.
    alloc: Allocation,
    start_s: Option<f64>,
    restarts: Option<u32>,
    goodput_version: u64,
    /// `goodput_version` the current batch was chosen at.
    batch_version: u64,
    // Cold.
    /// Σ active jobs × round length over the rounds this job was active, and Σ round
    /// lengths (while active: the simulation's running totals at its admission).
    contention_sum: f64,
    contention_s: f64,
    max_profiled_replicas: u32,
    /// Observed (nodes, replicas, atomic) → (step, sync) for the online fit.
    profile: HashMap<(u32, u32, u32), (f64, f64)>,
    perf: Option<PerfParams>,
    grad: Option<GradParams>,
    /// Loss history and fit (LossCurve jobs).
    loss: Option<Box<LossPredictor>>,
    /// Optimiser steps to finish at the requested batch (profiled jobs; computed
    /// once, on the first view).
    iterations: Option<f64>,
    /// Per-type profiles learned online (`ProfileMode::Online`).
    online: online::OnlineProfiles,
    /// Seconds of restart delay paid so far (the planned finish leaves them out).
    restart_paid_s: f64,
    /// A deadline job retired unstarted at its deadline (declined or starved).
    dropped: bool,
    /// Global batch on the current mixed allocation (0: one type, or the mix off).
    mixed_batch: u64,
    /// Device-seconds held on mixed allocations.
    mixed_gpu_s: f64,
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
            alloc_rate: f64::NAN,
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
            fixed_goodput: f64::NAN,
            fixed_next: f64::INFINITY,
            fixed_shape: None,
            iterations: None,
            online: online::OnlineProfiles::default(),
            restart_paid_s: 0.0,
            dropped: false,
            mixed_batch: 0,
            mixed_gpu_s: 0.0,
        }
    }
}

impl JobState {
    /// A round of `dt` seconds for a job whose progress this round is one
    /// multiply-add: a fixed-batch job past its restart delay whose cached goodput
    /// (`fixed_goodput`) reaches no epoch end this round. Makes that progress and
    /// returns the GPU-seconds attained, or returns `None` and changes nothing (the
    /// job's kind then advances it). The arithmetic is that of the kind's own
    /// round (`step_fixed`), so both give the same bits; this one reads the
    /// state's first cache line only, which is what most of a long run's rounds
    /// cost.
    #[inline]
    fn steady_round(&mut self, dt: f64) -> Option<f64> {
        let g = self.fixed_goodput;
        if self.completion_s.is_some()
            || self.rescale_left_s > 0.0
            || g.is_nan()
            || self.progress + g * dt >= self.fixed_next
        {
            return None;
        }
        let before = self.attained_gpu_s;
        self.progress += g * dt;
        self.attained_gpu_s += dt * self.replicas as f64;
        Some(self.attained_gpu_s - before)
    }
}

/// Dedicated training times by (app, batch, replicas, one device per node, device
/// type index or `u16::MAX` for the application's default tables).
type DedicatedMemo = HashMap<(usize, u32, u32, bool, u16), f64>;

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
    split_fixed_on(app, None, batch, replicas)
}

/// [`split_fixed`] on device type `ty`: accumulation follows that type's largest
/// local batch ([`AppModel::max_local_bsz_on`]).
fn split_fixed_on(app: &AppModel, ty: Option<&str>, batch: u32, replicas: u32) -> (u32, u32) {
    let eps = 1e-8;
    let local = (batch as f64 / replicas as f64 - eps).ceil();
    let max_local = app.max_local_bsz_on(ty);
    let mut accum = ((local / max_local - eps).ceil() - 1.0).max(0.0) as u32;
    if replicas == 1 && batch as f64 > app.init_batch {
        accum = accum.max(1);
    }
    let atomic = (local / (accum + 1) as f64 - eps).ceil().max(1.0) as u32;
    (atomic, accum)
}

/// An adaptive job's batch limits on device type `ty` (`None`: the application's
/// own): a per-type application's local batch range there
/// ([`AppModel::local_bsz_range_on`]), as each of Sia's per-type `Application`s has.
fn limits_on(app: &AppModel, ty: Option<&str>) -> BatchLimits {
    let (min_atomic, max_atomic) = app.local_bsz_range_on(ty);
    BatchLimits {
        base_batch: app.init_batch,
        max_batch: app.max_batch,
        min_atomic,
        max_atomic,
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
    kinds: &'a [progress::Kind<'a>],
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
        self.kinds[i].fraction_done(self.sim, &self.states[i])
    }

    /// Current loss of a [`Work::LossCurve`] job (its recorded loss at the
    /// iteration it reached; the initial loss before it starts).
    pub fn loss(&self, i: usize) -> Option<f64> {
        self.kinds[i].loss(self.states[i].progress)
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
            if let Some(d) = progress::of(&job.work).fastest_s() {
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
