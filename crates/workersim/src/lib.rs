//! # pacer-workersim
//!
//! A small simulator of the workers of one synchronous data-parallel job, and the
//! harness behind `pacer batching eval`: it runs a scenario under a worker-level
//! batch controller (`pacer_control::worker`) fed by a speed predictor
//! (`pacer_predict::speed`), and reports how close the iteration time comes to an
//! oracle balancer and how much faster it is than plain BSP.
//!
//! - [`scenario`]: the JSON scenario format and its validation (errors name the file
//!   and the field).
//! - [`model`]: ground truth — step time per worker (linear or an interpolated
//!   GPU-like curve), interference windows and gradual drift, the monitor's
//!   exogenous signals, and the oracle balancer.
//! - [`eval`]: the iteration loop and the report. [`SimOptions`] switches the
//!   controllers' noise gate off (`--gate off`) and [`simulate_custom`] takes
//!   caller-built predictors, for comparisons (see `examples/narx_ablation.rs`).
//!   Predictors are built per job ([`pacer_predict::speed::make_predictors`]), so
//!   NARX workers share their load response.
//! - [`bench`]: cost of one controller decision plus predictions for many workers.
//!
//! Per iteration `k`: the monitor reads each worker's load (visible before the step),
//! predictors predict speeds, the controller sets batches, each worker's step time is
//! `t_i(b_i) × interference × drift × jitter` (jitter log-normal with the worker's
//! `noise`), the iteration takes `max_i t_i + sync_s`, and each predictor observes its
//! worker's speed `b_i / t_i`. The oracle knows every worker's true step-time function
//! for the iteration (but not the jitter draw) and picks the integer batches that
//! minimise the slowest expected time; its time is taken under the same jitter.
//!
//! Architecture invariant: this crate is a driver — it owns time and the random
//! draws; the controllers and predictors it calls never see which driver runs them.

pub mod bench;
pub mod eval;
pub mod model;
pub mod scenario;

pub use eval::{
    evaluate, evaluate_with, format_table, simulate, simulate_custom, simulate_with, EvalError,
    EvalReport, RunStats, SimOptions,
};
pub use scenario::{Scenario, ScenarioError};

/// Read and parse a scenario file; errors name the path.
pub fn load_scenario(path: &std::path::Path) -> Result<Scenario, ScenarioError> {
    let origin = path.display().to_string();
    let text =
        pacer_fsio::read_to_string_limited(path, pacer_fsio::limits::TABLE).map_err(|e| {
            ScenarioError {
                origin: origin.clone(),
                field: String::new(),
                message: e.reason(),
            }
        })?;
    Scenario::from_json(&text, &origin)
}

/// Controller names and the noise-gate constants, re-exported so drivers need not
/// depend on pacer-control.
pub use pacer_control::worker::{GateConfig, CONTROLLERS};
/// Predictor names, re-exported so drivers need not depend on pacer-predict.
pub use pacer_predict::speed::PREDICTORS;
