//! A job's step-time model, fitted from its reports with the simulator's fit.
//!
//! Every accepted report with a step time adds (or smooths) one point: (device type,
//! nodes of its run, replicas, atomic batch = global batch / replicas) → step time.
//! Once a device type has points at [`MIN_FIT_SHAPES`] distinct (nodes, replicas)
//! shapes, the Pollux step-time model is fitted to them with
//! `pacer_control::job::decide::fit_step_model_from_step_times` — the model and
//! Levenberg–Marquardt fit the simulator refits online (`decide::fit_step_model`), given step times alone
//! because a report carries no synchronisation time (compute time is known on one
//! replica, where there is no all-reduce). A type is refitted when it gets a new
//! shape or batch, or when a point's smoothed step time drifts more than
//! [`REFIT_DRIFT`] from the value it had at the last fit; nothing else refits, so a
//! report costs one fit at most and usually none.
//!
//! [`job_goodput`] turns the fit and the reported gradient noise scale into the
//! `GoodputFn` the Pollux-style and Sia policies read (`JobView::goodput`), as the
//! simulator hands them its fit.

use crate::spec::{JobSpec, Report};
use pacer_control::job::decide::fit_step_model_from_step_times;
use pacer_predict::goodput::{BatchLimits, GoodputFn, GradParams, PerfParams, StepObservation};
use serde::{Deserialize, Serialize};

/// Distinct (nodes, replicas) shapes a device type needs before its fit is used: with
/// one shape the fit says nothing about scaling (its network terms sit at their lower
/// bound: perfect linear speed-up), so until then policies get the measured-points
/// speed curve and no goodput model.
pub const MIN_FIT_SHAPES: usize = 2;
/// Points kept per job (later new shapes are ignored).
pub const MAX_POINTS: usize = 64;
/// Relative drift of a point's smoothed step time that triggers a refit.
pub const REFIT_DRIFT: f64 = 0.10;

/// One measured configuration of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepPoint {
    pub device_type: String,
    pub nodes: u32,
    pub replicas: u32,
    /// Samples per replica per step (global batch / replicas), rounded to whole samples.
    pub atomic_bsz: u64,
    /// Step time (s), smoothed (EWMA, weight 1/2 on the newest report).
    pub step_time_s: f64,
    /// `step_time_s` when the type was last fitted (0: not in a fit yet).
    pub fitted_s: f64,
}

/// The fit of one device type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TypeFit {
    pub device_type: String,
    pub perf: PerfParams,
    /// Points it was fitted to.
    pub points: usize,
}

/// What the service learned of a job's speed from its reports (part of its record).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveModel {
    pub points: Vec<StepPoint>,
    pub fits: Vec<TypeFit>,
    /// Smallest and largest global batch reported (0: none).
    pub min_batch: u64,
    pub max_batch: u64,
}

impl LiveModel {
    /// Adds what report `r` measured on a run spanning `nodes` nodes; refits the
    /// report's device type when its points changed enough. Returns whether a fit changed.
    pub fn observe(&mut self, r: &Report, nodes: u32) -> bool {
        let batch = if r.global_batch > 0 {
            r.global_batch
        } else {
            r.local_batches.iter().sum()
        };
        if batch > 0 {
            self.min_batch = if self.min_batch == 0 {
                batch
            } else {
                self.min_batch.min(batch)
            };
            self.max_batch = self.max_batch.max(batch);
        }
        if r.step_time_s <= 0.0 || batch == 0 || nodes == 0 || nodes > r.replicas {
            return false;
        }
        let atomic = (batch as f64 / r.replicas as f64).round().max(1.0) as u64;
        let key = |p: &StepPoint| {
            p.device_type == r.device_type
                && p.nodes == nodes
                && p.replicas == r.replicas
                && p.atomic_bsz == atomic
        };
        let room = self.points.len() < MAX_POINTS;
        let stale = match self.points.iter_mut().find(|p| key(p)) {
            Some(p) => {
                p.step_time_s = 0.5 * (p.step_time_s + r.step_time_s);
                (p.step_time_s / p.fitted_s - 1.0).abs() > REFIT_DRIFT
            }
            None if room => {
                self.points.push(StepPoint {
                    device_type: r.device_type.clone(),
                    nodes,
                    replicas: r.replicas,
                    atomic_bsz: atomic,
                    step_time_s: r.step_time_s,
                    fitted_s: 0.0,
                });
                true
            }
            None => false,
        };
        stale && self.refit(&r.device_type)
    }

    /// Refits type `ty` from its points when it has enough shapes.
    fn refit(&mut self, ty: &str) -> bool {
        let mut obs: Vec<StepObservation> = self
            .points
            .iter()
            .filter(|p| p.device_type == ty)
            .map(|p| StepObservation {
                nodes: p.nodes,
                replicas: p.replicas,
                atomic_bsz: p.atomic_bsz as f64,
                step_time_s: p.step_time_s,
            })
            .collect();
        let mut shapes: Vec<(u32, u32)> = obs.iter().map(|o| (o.nodes, o.replicas)).collect();
        shapes.sort_unstable();
        shapes.dedup();
        if shapes.len() < MIN_FIT_SHAPES {
            return false;
        }
        obs.sort_by(|a, b| {
            (a.nodes, a.replicas, a.atomic_bsz as u64).cmp(&(
                b.nodes,
                b.replicas,
                b.atomic_bsz as u64,
            ))
        });
        let Ok(perf) = fit_step_model_from_step_times(&obs, None) else {
            return false;
        };
        for p in self.points.iter_mut().filter(|p| p.device_type == ty) {
            p.fitted_s = p.step_time_s;
        }
        let fit = TypeFit {
            device_type: ty.to_string(),
            perf,
            points: obs.len(),
        };
        match self.fits.iter_mut().find(|f| f.device_type == ty) {
            Some(f) if *f == fit => false,
            Some(f) => {
                *f = fit;
                true
            }
            None => {
                self.fits.push(fit);
                true
            }
        }
    }

    /// The fit of type `ty`, if it has one.
    pub fn fit(&self, ty: &str) -> Option<&PerfParams> {
        self.fits
            .iter()
            .find(|f| f.device_type == ty)
            .map(|f| &f.perf)
    }

    /// Most replicas the job has been measured at (0: none).
    pub fn max_measured_replicas(&self) -> u32 {
        self.points.iter().map(|p| p.replicas).max().unwrap_or(0)
    }
}

/// Batch limits of a job's goodput model: its base batch is the spec's global batch
/// (else the smallest it reported), its largest the largest it reported (a job that
/// adapts its own batch reports larger ones; a job that does not keeps the base, and
/// its goodput is its throughput at that batch). The service cannot tell a job how to
/// split its batch, so any split is allowed and no accumulation is assumed.
pub fn limits(spec: &JobSpec, m: &LiveModel) -> Option<BatchLimits> {
    let base = spec.global_batch.unwrap_or(m.min_batch);
    if base == 0 {
        return None;
    }
    let max = m.max_batch.max(base) as f64;
    Some(BatchLimits {
        base_batch: base as f64,
        max_batch: max,
        min_atomic: 1.0,
        max_atomic: max,
        accumulation: false,
    })
}

/// Gradient statistics with noise scale `noise` at base batch `base` (only their
/// ratio enters the efficiency); no noise scale reported: no statistical gain from a
/// larger batch (var = 0).
pub fn grad(noise: Option<f64>, base: f64) -> GradParams {
    GradParams {
        sqr: 1.0,
        var: noise.map_or(0.0, |n| n / base),
    }
}

/// The job's goodput model on type `ty`: its fit there with its limits and latest
/// noise scale.
pub fn job_goodput(
    spec: &JobSpec,
    m: &LiveModel,
    noise: Option<f64>,
    ty: &str,
) -> Option<GoodputFn> {
    let perf = *m.fit(ty)?;
    let limits = limits(spec, m)?;
    Some(GoodputFn {
        perf,
        grad: grad(noise, limits.base_batch),
        limits,
    })
}
