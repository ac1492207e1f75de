//! `pacer_torch._native`: the Rust side of the `pacer_torch` package (python/README.md).
//!
//! Thin bindings, no decision logic of their own:
//! - [`Session`]: `pacer_control::session::JobSession` (join / leave / decide / observe /
//!   predicted speeds / override batches), plus a checkpointable state of bounded size:
//!   the session's exact snapshot (`pacer_control::session::SessionSnapshot`), its members
//!   with their bounds and the last 64 observations (`session::SessionState`);
//! - [`Predictor`]: one speed predictor by registry name;
//! - [`Gns`]: the gradient-noise-scale estimator as the runtime uses it (batch-weighted
//!   aggregation, EMA decay per global batch) and the goodput-optimal global batch;
//! - [`Perf`], [`fit_perf`], [`efficiency`], [`py_adascale_gain`], [`py_best_global_batch`]: the
//!   goodput model of `pacer_predict::goodput`; the job-level decisions among them (the
//!   global batch and its gain, AdaScale's gain, the step-time fit) are
//!   `pacer_control::job::decide`'s, as the simulator, the service and the runtime make them.
//!
//! Every error is a Python `ValueError` that says which argument was wrong.

mod session;

use std::sync::Mutex;

use pacer_control::job::decide;
use pacer_control::session::SessionError;
use pacer_control::worker::CONTROLLERS;
use pacer_predict::gns::{Aggregation, GnsEstimator};
use pacer_predict::goodput::{GradParams, PerfObservation, PerfParams};
use pacer_predict::speed::{make_predictor, Exogenous, SpeedPredictor, PREDICTORS};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use session::Session;

fn value_error(what: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(what.to_string())
}

fn session_error(e: SessionError) -> PyErr {
    value_error(e)
}

/// One worker's speed predictor by registry name (`last`, `ewma`, `ets`, `narx`).
#[pyclass(module = "pacer_torch._native")]
struct Predictor {
    inner: Mutex<Box<dyn SpeedPredictor>>,
}

#[pymethods]
impl Predictor {
    #[new]
    #[pyo3(signature = (name, seed=0, worker=0))]
    fn new(name: &str, seed: u64, worker: u64) -> PyResult<Self> {
        let p = make_predictor(name, seed, worker).ok_or_else(|| {
            value_error(format!(
                "name: unknown predictor `{name}`; known: {}",
                PREDICTORS.join(", ")
            ))
        })?;
        Ok(Predictor {
            inner: Mutex::new(p),
        })
    }

    /// A finished step's measured speed (samples/s) and the load signals at its start.
    #[pyo3(signature = (samples_per_s, cpu_load=0.0, mem_load=0.0))]
    fn observe(&self, samples_per_s: f64, cpu_load: f64, mem_load: f64) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(samples_per_s, &Exogenous { cpu_load, mem_load });
    }

    /// The next step's speed given its starting signals; `None` before any observation.
    #[pyo3(signature = (cpu_load=0.0, mem_load=0.0))]
    fn predict_next(&self, cpu_load: f64, mem_load: f64) -> Option<f64> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .predict_next(&Exogenous { cpu_load, mem_load })
    }
}

/// The gradient noise scale of a running job, from the per-worker gradient norms, as the
/// Rust runtime estimates it (`pacer_runtime::gns`): local mean gradients aggregated as
/// `g = Σ (b_i/B) g_i`, the two-batch estimator, bias-corrected EMAs decaying by
/// `smoothing` per `base_batch` samples.
#[pyclass(module = "pacer_torch._native")]
#[derive(Clone)]
struct Gns {
    est: GnsEstimator,
}

#[pymethods]
impl Gns {
    /// `smoothing` 0.99 is the runtime's (an effective window of ~100 steps).
    #[new]
    #[pyo3(signature = (base_batch, smoothing=0.99))]
    fn new(base_batch: f64, smoothing: f64) -> PyResult<Self> {
        if !(base_batch.is_finite() && base_batch > 0.0) {
            return Err(value_error(format!(
                "base_batch: {base_batch} (expected a finite number > 0)"
            )));
        }
        if !(0.0..1.0).contains(&smoothing) {
            return Err(value_error(format!(
                "smoothing: {smoothing} (expected 0 <= smoothing < 1)"
            )));
        }
        Ok(Gns {
            est: GnsEstimator::new(smoothing, base_batch),
        })
    }

    /// One step: each worker's local batch and `|g_i|²` of its local mean gradient, and
    /// `|g|²` of the aggregate. Returns the step's unsmoothed `(grad_sqr, trace_cov)`;
    /// a rejected step (fewer than two workers, a non-finite norm) leaves the estimate
    /// as it was and raises ValueError.
    fn observe(
        &mut self,
        local_batches: Vec<f64>,
        local_sqr: Vec<f64>,
        aggregate_sqr: f64,
    ) -> PyResult<(f64, f64)> {
        let s = self
            .est
            .observe_norms(
                &local_batches,
                &local_sqr,
                aggregate_sqr,
                Aggregation::BatchWeighted,
            )
            .map_err(value_error)?;
        Ok((s.grad_sqr, s.trace_cov))
    }

    /// One step's estimates made by the caller (one rank: from consecutive steps,
    /// `ConsecutiveSteps` in gradnorm.py): `|G|²`, `tr Σ` (either may be negative, both
    /// finite) and the step's samples (> 0), smoothed as `observe`'s. A rejected step
    /// leaves the estimate as it was and raises ValueError.
    fn observe_estimate(
        &mut self,
        grad_sqr: f64,
        trace_cov: f64,
        global_batch: f64,
    ) -> PyResult<(f64, f64)> {
        let s = self
            .est
            .observe_sample(pacer_predict::gns::GnsSample {
                grad_sqr,
                trace_cov,
                global_batch,
            })
            .map_err(value_error)?;
        Ok((s.grad_sqr, s.trace_cov))
    }

    #[getter]
    fn steps(&self) -> u64 {
        self.est.steps()
    }

    #[getter]
    fn base_batch(&self) -> f64 {
        self.est.base_batch
    }

    /// `B_noise = tr Σ / |G|²` in samples; `None` before the first step.
    fn noise_scale(&self) -> Option<f64> {
        self.est.noise_scale()
    }

    fn grad_sqr(&self) -> Option<f64> {
        self.est.grad_sqr()
    }

    fn trace_cov(&self) -> Option<f64> {
        self.est.trace_cov()
    }

    /// Whether `|G|²` is above its floor (otherwise `B_noise` is only known to be large).
    fn resolved(&self) -> bool {
        self.est.resolved()
    }

    /// Statistical efficiency of global batch `batch` against the base batch.
    fn efficiency(&self, batch: f64) -> Option<f64> {
        Some(
            self.est
                .grad_params()?
                .efficiency(batch, self.est.base_batch),
        )
    }

    /// AdaScale gain `r ∈ [1, batch/base_batch]`: base-batch steps one step at `batch` is worth.
    fn gain(&self, batch: f64) -> Option<f64> {
        Some(decide::adascale_gain(
            &self.est.grad_params()?,
            batch,
            self.est.base_batch,
        ))
    }

    /// The goodput-optimal global batch in `[base_batch, max_batch]` for a step of
    /// `batch / samples_per_s + overhead_s` seconds: `(batch, goodput, gain)`, or `None`
    /// while the estimate is unresolved (as the runtime's `GnsTracker::best_batch`).
    fn best_global_batch(
        &self,
        samples_per_s: f64,
        overhead_s: f64,
        max_batch: f64,
    ) -> Option<(f64, f64, f64)> {
        decide::running_job_batch(&self.est, samples_per_s, overhead_s, max_batch)
            .map(|c| (c.batch, c.goodput, c.gain))
    }

    /// The estimator as JSON text (for checkpoints).
    fn state(&self) -> PyResult<String> {
        serde_json::to_string(&self.est).map_err(value_error)
    }

    #[staticmethod]
    fn from_state(state: &str) -> PyResult<Self> {
        let est: GnsEstimator = serde_json::from_str(state)
            .map_err(|e| value_error(format!("state: not a noise-scale state: {e}")))?;
        Ok(Gns { est })
    }
}

/// The Pollux step-time model (`pacer_predict::goodput::PerfParams`), seconds.
#[pyclass(module = "pacer_torch._native", get_all)]
#[derive(Clone)]
struct Perf {
    alpha_c: f64,
    beta_c: f64,
    alpha_n: f64,
    beta_n: f64,
    alpha_r: f64,
    beta_r: f64,
    gamma: f64,
}

impl Perf {
    fn params(&self) -> PerfParams {
        PerfParams {
            alpha_c: self.alpha_c,
            beta_c: self.beta_c,
            alpha_n: self.alpha_n,
            beta_n: self.beta_n,
            alpha_r: self.alpha_r,
            beta_r: self.beta_r,
            gamma: self.gamma,
        }
    }
}

#[pymethods]
impl Perf {
    #[new]
    #[pyo3(signature = (alpha_c, beta_c, alpha_n=0.0, beta_n=0.0, alpha_r=0.0, beta_r=0.0, gamma=1.0))]
    fn new(
        alpha_c: f64,
        beta_c: f64,
        alpha_n: f64,
        beta_n: f64,
        alpha_r: f64,
        beta_r: f64,
        gamma: f64,
    ) -> Self {
        Perf {
            alpha_c,
            beta_c,
            alpha_n,
            beta_n,
            alpha_r,
            beta_r,
            gamma,
        }
    }

    fn step_time(&self, nodes: u32, replicas: u32, atomic_bsz: f64, accum_steps: u32) -> f64 {
        self.params()
            .step_time(nodes, replicas, atomic_bsz, accum_steps)
    }

    fn throughput(&self, nodes: u32, replicas: u32, atomic_bsz: f64, accum_steps: u32) -> f64 {
        self.params()
            .throughput(nodes, replicas, atomic_bsz, accum_steps)
    }
}

/// Fits [`Perf`] to observed steps `(nodes, replicas, atomic_bsz, compute_time_s,
/// step_time_s)`.
#[pyfunction]
fn fit_perf(observations: Vec<(u32, u32, f64, f64, f64)>) -> PyResult<Perf> {
    let obs: Vec<PerfObservation> = observations
        .into_iter()
        .map(
            |(nodes, replicas, atomic_bsz, compute_time_s, step_time_s)| PerfObservation {
                nodes,
                replicas,
                atomic_bsz,
                compute_time_s,
                step_time_s,
            },
        )
        .collect();
    let p = decide::fit_step_model(&obs, None)
        .map_err(|e| value_error(format!("observations: {e}")))?;
    Ok(Perf {
        alpha_c: p.alpha_c,
        beta_c: p.beta_c,
        alpha_n: p.alpha_n,
        beta_n: p.beta_n,
        alpha_r: p.alpha_r,
        beta_r: p.beta_r,
        gamma: p.gamma,
    })
}

/// Statistical efficiency of `batch` against `base_batch` for gradient statistics
/// `sqr = |G|²`, `var = tr Σ / base_batch`.
#[pyfunction]
fn efficiency(sqr: f64, var: f64, batch: f64, base_batch: f64) -> f64 {
    GradParams { sqr, var }.efficiency(batch, base_batch)
}

/// AdaScale gain of `batch` against `base_batch` (same statistics as [`efficiency`]).
/// (Python's `adascale_gain`; the decision itself is `decide::adascale_gain`.)
#[pyfunction(name = "adascale_gain")]
fn py_adascale_gain(sqr: f64, var: f64, batch: f64, base_batch: f64) -> f64 {
    decide::adascale_gain(&GradParams { sqr, var }, batch, base_batch)
}

/// The goodput-optimal global batch in `[base_batch, max_batch]` for a step of
/// `batch / samples_per_s + overhead_s`: `(batch, goodput, gain)` or `None`.
/// (Python's `best_global_batch`; the decision itself is `decide::global_batch_and_gain`.)
#[pyfunction(name = "best_global_batch")]
fn py_best_global_batch(
    sqr: f64,
    var: f64,
    base_batch: f64,
    max_batch: f64,
    samples_per_s: f64,
    overhead_s: f64,
) -> Option<(f64, f64, f64)> {
    decide::global_batch_and_gain(&GradParams { sqr, var }, base_batch, max_batch, |b| {
        b / samples_per_s + overhead_s
    })
    .map(|c| (c.batch, c.goodput, c.gain))
}

/// A progress report for `pacer serve` as JSON text, checked against the one report type
/// the service parses (`pacer_model::report::JobReport`): unknown fields, wrong types and
/// numbers out of range raise `ValueError` naming the field, here rather than as a 400
/// from the service.
#[pyfunction]
fn report_json(body: &str) -> PyResult<String> {
    let r: pacer_model::report::JobReport =
        serde_json::from_str(body).map_err(|e| value_error(format!("report: {e}")))?;
    r.validate()
        .map_err(|e| value_error(format!("report: {e}")))?;
    serde_json::to_string(&r).map_err(value_error)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_class::<Predictor>()?;
    m.add_class::<Gns>()?;
    m.add_class::<Perf>()?;
    m.add_function(wrap_pyfunction!(fit_perf, m)?)?;
    m.add_function(wrap_pyfunction!(efficiency, m)?)?;
    m.add_function(wrap_pyfunction!(py_adascale_gain, m)?)?;
    m.add_function(wrap_pyfunction!(py_best_global_batch, m)?)?;
    m.add_function(wrap_pyfunction!(report_json, m)?)?;
    m.add("CONTROLLERS", CONTROLLERS.to_vec())?;
    m.add("PREDICTORS", PREDICTORS.to_vec())?;
    Ok(())
}
