//! How each kind of job advances: the [`JobProgress`] trait and one implementation
//! per kind of [`Work`], each in its own file.
//!
//! The engine never looks at a job's `Work` itself: it asks the job's
//! [`JobProgress`] (built once per run by [`of`]) how far a round takes it, what
//! speed table and view a policy gets, what a restart costs and how long the job
//! would take alone. A new kind of job is one new file here implementing the trait
//! plus one line in [`of`].

mod duration;
mod elastic;
mod loss_curve;
mod profiled;
pub(super) use profiled::spend_in_epoch;
mod throughput;

use super::{BatchMode, DedicatedMemo, JobState, SimJob, Simulation, Work};
use pacer_model::Allocation;
use pacer_policy::{QualityView, SpeedTable};
use pacer_predict::goodput::GoodputFn;
use std::sync::Arc;

/// A job's progress model, shared by the jobs whose models are equal ([`all`]).
pub(crate) type Kind<'a> = Arc<dyn JobProgress + 'a>;

/// The progress models of `jobs`, in order. Jobs of one profiled application share one
/// model object (the models hold no per-job state): at 100k jobs a model per job put a
/// cache miss on every call the engine makes for a running job.
pub(crate) fn all(jobs: &[SimJob]) -> Vec<Kind<'_>> {
    let mut by_app: Vec<Option<Kind<'_>>> = Vec::new();
    jobs.iter()
        .map(|j| match j.work {
            Work::Profiled { app } => {
                if by_app.len() <= app {
                    by_app.resize(app + 1, None);
                }
                by_app[app]
                    .get_or_insert_with(|| Arc::from(of(&j.work)))
                    .clone()
            }
            _ => Arc::from(of(&j.work)),
        })
        .collect()
}

/// The job's progress model for `work` (the registry: one line per kind).
pub(crate) fn of(work: &Work) -> Box<dyn JobProgress + '_> {
    match work {
        Work::Profiled { app } => Box::new(profiled::Profiled { app: *app }),
        Work::Duration { duration_s } => Box::new(duration::Duration {
            duration_s: *duration_s,
        }),
        Work::Throughput { steps, rates } => Box::new(throughput::Throughput {
            steps: *steps,
            rates,
        }),
        Work::LossCurve { profile } => Box::new(loss_curve::LossCurve { profile }),
        Work::Elastic {
            steps,
            curves,
            deadline_s,
        } => Box::new(elastic::Elastic {
            steps: *steps,
            curves,
            deadline_s: *deadline_s,
        }),
    }
}

/// What one job's round of progress depends on besides its state.
pub(crate) struct Round<'r> {
    pub job: &'r SimJob,
    pub mode: BatchMode,
    /// The job's speed table ([`Simulation::speed_tables`]).
    /// (Not dereferenced unless used: most kinds never read it.)
    pub speed: &'r Arc<SpeedTable>,
    /// Whether the policy reads [`QualityView`]s.
    pub uses_quality: bool,
}

/// Replica bound and goodput models an adaptive job shows a policy (its part of
/// [`super::view::SimJobFacts`]).
#[derive(Debug, Clone)]
pub struct AdaptiveView {
    /// Most replicas it may use at all (its batch range, the devices of its types).
    pub limit: u32,
    /// Most replicas it has run at (Pollux's exploration cap doubles it).
    pub measured_replicas: u32,
    pub goodput: Option<GoodputFn>,
    pub goodput_by_type: Vec<Option<GoodputFn>>,
    /// `JobView::measured_by_type`.
    pub measured_by_type: Vec<bool>,
}

/// How a kind of job advances and what a policy sees of it. Progress (in
/// [`JobState::progress`]) is in the kind's own units; [`Self::work_done`] and
/// [`Self::total_work`] convert to its speed table's.
pub(crate) trait JobProgress {
    /// Speed table on the cluster (work units/s by device type and count), before
    /// device types the job has no measurements for are blanked; `req` is the
    /// requested replicas capped by the devices of usable types.
    fn speed_table(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        req: u32,
        memo: &mut DedicatedMemo,
    ) -> SpeedTable;

    /// Total work in the speed table's units.
    fn total_work(&self) -> f64;

    /// Work done, in the speed table's units.
    fn work_done(&self, _sim: &Simulation<'_>, st: &JobState) -> f64 {
        st.progress
    }

    /// Fraction of the work done, in [0, 1].
    fn fraction_done(&self, sim: &Simulation<'_>, st: &JobState) -> f64 {
        (self.work_done(sim, st) / self.total_work()).min(1.0)
    }

    /// Recorded loss at `progress` (jobs that replay a loss curve).
    fn loss(&self, _progress: f64) -> Option<f64> {
        None
    }

    /// Shortest possible run (s) on the requested devices, when it is known.
    fn fastest_s(&self) -> Option<f64> {
        None
    }

    /// Time (s) alone on `replicas` devices of a 1/N share of the cluster, at the
    /// requested batch, consolidated, with no restarts
    /// ([`Simulation::independent_time`] before its slowdown).
    fn dedicated_s(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        replicas: u32,
        memo: &mut DedicatedMemo,
    ) -> f64;

    /// The whole job's time alone on one device of its fastest type (s): by
    /// default [`Self::dedicated_s`] on one device.
    fn fastest_one_device_s(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        memo: &mut DedicatedMemo,
    ) -> f64 {
        self.dedicated_s(sim, job, 1, memo)
    }

    /// Whether the work is counted in optimiser steps (then one step per unit of
    /// work, the default [`Self::iterations_per_work`]).
    fn counts_steps(&self) -> bool {
        false
    }

    /// Optimiser steps per unit of work ([`pacer_policy::JobView`]'s
    /// `iterations_per_work`; may be computed once and kept in `st`); `None`: unknown.
    fn iterations_per_work(
        &self,
        _sim: &Simulation<'_>,
        _job: &SimJob,
        _st: &mut JobState,
        _cap: u32,
    ) -> Option<f64> {
        self.counts_steps().then_some(1.0)
    }

    /// Batch settings under a policy (`adaptive`: it lets jobs pick their batch).
    fn batch_mode(&self, _sim: &Simulation<'_>, job: &SimJob, _adaptive: bool) -> BatchMode {
        BatchMode {
            fixed: Some(job.spec.requested_batch),
            max_replicas_cap: None,
        }
    }

    /// What a quality-driven policy sees (may refit the job's loss predictor).
    fn quality(&self, _st: &mut JobState, _uses_quality: bool) -> Option<QualityView> {
        None
    }

    /// Replica bound and goodput models of a job that chooses its batch (asked
    /// only when its [`BatchMode::fixed`] is `None`); `None`: it does not.
    fn adaptive_view(
        &self,
        _sim: &Simulation<'_>,
        _st: &JobState,
        _cap: u32,
    ) -> Option<AdaptiveView> {
        None
    }

    /// The job's own restart delay (s); `None`: the simulation's.
    fn restart_s(&self, _sim: &Simulation<'_>) -> Option<f64> {
        None
    }

    /// Seconds [`Self::restart_delay_s`] adds per doubling of the new size, as the
    /// policies are told (0: the same delay at every size).
    fn restart_s_per_doubling(&self) -> f64 {
        0.0
    }

    /// The delay (s) of a restart onto `to` (by default [`Self::restart_s`], else the
    /// simulation's).
    fn restart_delay_s(&self, sim: &Simulation<'_>, _to: &Allocation) -> f64 {
        self.restart_s(sim).unwrap_or(sim.config.restart_s)
    }

    /// The overhead (s) the event clock charges the job at a round on `alloc`
    /// ([`pacer_policy::Policy::charges_event_overhead`]): `kept` its allocation did
    /// not change (a changed one also pays its restart delay); `restart` the round is a
    /// periodic restart; `after_restart` the last round was one. 0 by default.
    fn event_overhead_s(
        &self,
        _sim: &Simulation<'_>,
        _alloc: &Allocation,
        _kept: bool,
        _restart: bool,
        _after_restart: bool,
    ) -> f64 {
        0.0
    }

    /// The overhead (s) the event clock charges the job at a round on `alloc` by
    /// placement ([`pacer_policy::Policy::event_overhead_by_placement`]), its whole
    /// delay before its next progress: `cached` its placement was held since the last
    /// periodic restart; `restart` the round is one. 0 by default.
    fn placement_overhead_s(
        &self,
        _sim: &Simulation<'_>,
        _alloc: &Allocation,
        _cached: bool,
        _restart: bool,
    ) -> f64 {
        0.0
    }

    /// The job's deadline (s since the trace's start); `None`: none (best effort).
    fn deadline_s(&self) -> Option<f64> {
        None
    }

    /// Advances the job by `dt` seconds from `now` (the restart delay first); by
    /// default at its speed table's rate towards [`Self::total_work`].
    fn advance(
        &self,
        sim: &Simulation<'_>,
        round: &Round<'_>,
        st: &mut JobState,
        now: f64,
        dt: f64,
    ) {
        sim.step_rate(round.speed, self.total_work(), st, now, dt);
    }

    /// Called before the job's allocation changes from `st.alloc` to `to`.
    fn reallocating(&self, _sim: &Simulation<'_>, _st: &mut JobState, _to: &Allocation) {}

    /// Called once the job holds its new, non-empty allocation.
    fn restarted(&self, _sim: &Simulation<'_>, _mode: BatchMode, _st: &mut JobState) {}
}

impl Simulation<'_> {
    /// Advances a job whose speed is `speed.rate_of(allocation)` units/s towards
    /// `total` units (after its restart delay).
    pub(super) fn step_rate(
        &self,
        speed: &SpeedTable,
        total: f64,
        st: &mut JobState,
        now: f64,
        dt: f64,
    ) {
        // The rate on an allocation is kept while the allocation is (a job's speed
        // table is the same all run).
        if st.alloc_rate.is_nan() {
            st.alloc_rate = speed.rate_of(self.cluster, &st.alloc);
        }
        debug_assert!(
            st.alloc_rate.to_bits() == speed.rate_of(self.cluster, &st.alloc).to_bits()
                || st.alloc_rate.is_nan(),
            "the kept rate is the allocation's"
        );
        step_at(st.alloc_rate, total, st, now, dt);
    }
}

/// Spends up to `dt` seconds of the job's restart delay on its `replicas` devices;
/// returns the seconds spent.
fn spend_restart(st: &mut JobState, replicas: u32, dt: f64) -> f64 {
    let delay = st.rescale_left_s.min(dt);
    if delay > 0.0 {
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        st.restart_paid_s += delay;
    }
    delay
}

/// Advances a job at a constant `rate` units/s towards `total` units for `dt`
/// seconds from `now`, after its restart delay.
fn step_at(rate: f64, total: f64, st: &mut JobState, now: f64, mut dt: f64) {
    let replicas = st.alloc.replicas();
    let delay = spend_restart(st, replicas, dt);
    dt -= delay;
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
