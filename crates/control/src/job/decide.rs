//! The job-level decisions every driver of a job makes — the one home of each (issue 26):
//! the simulator (`pacer-sim`), the service (`pacer-serve`), the runtime
//! (`pacer-runtime`) and the Python package's native module (`python/src`) call these,
//! never the estimators underneath, so that a simulated job, a served one and a real
//! one decide alike (`pacer-tidy`'s rule `job-decisions` keeps it so).
//!
//! - [`global_batch_and_gain`], [`running_job_batch`]: the goodput-optimal global batch
//!   of a job and its goodput gain over the base batch; [`adascale_gain`]: the
//!   learning-rate gain (AdaScale) of a global batch.
//! - [`batch_on_allocation`]: the goodput-optimal (atomic batch, accumulation steps) of
//!   a job on a given number of nodes and replicas (Pollux's per-allocation choice).
//! - [`exploration_cap`]: the most replicas a job may be given while its scaling is
//!   being learned.
//! - [`fit_step_model`], [`fit_step_model_from_step_times`]: the online fit of the
//!   job's step-time model from what it measured.
//!
//! The report a job sends is one type too: `pacer_model::report::JobReport`.
//!
//! Each is the estimator's own arithmetic, called the same way by every driver: results
//! are bit for bit those of `pacer_predict::goodput`.

use pacer_predict::gns::GnsEstimator;
use pacer_predict::goodput::{
    self, BatchChoice, FitError, GlobalBatchChoice, GoodputFn, GradParams, PerfObservation,
    PerfParams, StepObservation,
};

/// The goodput-optimal global batch in `[base_batch, max_batch]` for a job whose step
/// at global batch `B` takes `step_time(B)` seconds, with its goodput and the gain of
/// that goodput over the base batch's; `None` when the range is empty or not finite or
/// no batch has a usable step time ([`goodput::best_global_batch`]).
///
/// ```
/// use pacer_control::job::decide::global_batch_and_gain;
/// use pacer_predict::goodput::GradParams;
/// // Noisy gradients, a step of B / 1000 + 0.5 s: a bigger batch pays.
/// let grad = GradParams { sqr: 1.0, var: 100.0 };
/// let c = global_batch_and_gain(&grad, 64.0, 4096.0, |b| b / 1000.0 + 0.5).unwrap();
/// assert!(c.batch > 64.0 && c.gain > 1.0);
/// ```
pub fn global_batch_and_gain(
    grad: &GradParams,
    base_batch: f64,
    max_batch: f64,
    step_time: impl Fn(f64) -> f64,
) -> Option<GlobalBatchChoice> {
    goodput::best_global_batch(grad, base_batch, max_batch, step_time)
}

/// [`global_batch_and_gain`] for a running job: its gradient statistics from its noise
/// scale estimator (base batch: the estimator's), its balanced step
/// `B / samples_per_s + overhead_s`. `None` while the estimate is unresolved
/// (`|G|²` at its floor) or without a positive, finite `samples_per_s`.
pub fn running_job_batch(
    est: &GnsEstimator,
    samples_per_s: f64,
    overhead_s: f64,
    max_batch: f64,
) -> Option<GlobalBatchChoice> {
    if !est.resolved() || !samples_per_s.is_finite() || samples_per_s <= 0.0 {
        return None;
    }
    let grad = est.grad_params()?;
    global_batch_and_gain(&grad, est.base_batch, max_batch, |b| {
        b / samples_per_s + overhead_s
    })
}

/// AdaScale's learning-rate gain of global batch `batch` against `base_batch`: how many
/// base-batch steps one step at `batch` is worth, in `[1, batch / base_batch]`.
pub fn adascale_gain(grad: &GradParams, batch: f64, base_batch: f64) -> f64 {
    grad.gain(batch, base_batch)
}

/// The goodput-optimal batch configuration of a job on `replicas` devices over `nodes`
/// nodes under its limits; `None` when no batch fits ([`GoodputFn::optimize`]).
pub fn batch_on_allocation(g: &GoodputFn, nodes: u32, replicas: u32) -> Option<BatchChoice> {
    g.optimize(nodes, replicas)
}

/// The most replicas a job may be given while its scaling is learned (Pollux's and
/// Sia's exploration cap): twice the most it has run on, at least 1.
///
/// ```
/// use pacer_control::job::decide::exploration_cap;
/// assert_eq!(exploration_cap(0), 1);
/// assert_eq!(exploration_cap(3), 6);
/// ```
pub fn exploration_cap(max_replicas_run: u32) -> u32 {
    max_replicas_run.saturating_mul(2).max(1)
}

/// The job's step-time model fitted to what it measured (compute and step time per
/// configuration), from `warm` when given ([`goodput::fit_perf_params_from`]).
pub fn fit_step_model(
    obs: &[PerfObservation],
    warm: Option<&PerfParams>,
) -> Result<PerfParams, FitError> {
    goodput::fit_perf_params_from(obs, warm)
}

/// [`fit_step_model`] from step times alone (what a job's report carries,
/// [`goodput::fit_step_times`]).
pub fn fit_step_model_from_step_times(
    obs: &[StepObservation],
    warm: Option<&PerfParams>,
) -> Result<PerfParams, FitError> {
    goodput::fit_step_times(obs, warm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_doubles_and_never_overflows() {
        assert_eq!(exploration_cap(1), 2);
        assert_eq!(exploration_cap(u32::MAX), u32::MAX);
    }

    #[test]
    fn a_running_job_needs_a_resolved_estimate_and_a_rate() {
        let est = GnsEstimator::new(0.9, 64.0);
        assert!(running_job_batch(&est, 1000.0, 0.1, 1024.0).is_none());
    }

    #[test]
    fn the_gain_is_one_at_the_base_batch() {
        let g = GradParams { sqr: 2.0, var: 3.0 };
        assert_eq!(adascale_gain(&g, 64.0, 64.0), 1.0);
        let c = global_batch_and_gain(&g, 64.0, 64.0, |b| b / 100.0).unwrap();
        assert_eq!((c.batch, c.gain), (64.0, 1.0));
    }
}
