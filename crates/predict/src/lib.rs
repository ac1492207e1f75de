//! # pacer-predict
//!
//! Online estimators used by both drivers (simulator and real runtime):
//! - [`goodput`]: the Pollux iteration-time model (`T = (T_c^γ + T_n^γ)^(1/γ)`),
//!   statistical efficiency from the gradient noise scale, and goodput-optimal
//!   batch / replica choices.
//! - [`gns`]: online gradient noise scale from a running job's per-worker
//!   gradients at unequal local batches (two-batch-size estimator, bias-corrected EMAs).
//! - [`itertime`]: step-time models (Ernest, Pollux, pacer's node-aware Pollux
//!   variant) fitted to measured rows, and their held-out evaluation.
//! - [`convergence`]: validation metric as a function of progress and global batch
//!   (Hemingway's `g(i, m)`), fitted from `validation-<batch>.csv` curves.
//! - [`loss_curve`]: SLAQ's online loss-curve prediction (weighted NLS over the
//!   recent history, inverse-quadratic or exponential form chosen by fit quality).
//! - [`speed`]: one-step-ahead worker speed predictors (last value, EWMA, damped-trend
//!   exponential smoothing, NARX) behind the [`speed::SpeedPredictor`] trait.
//!
//! Architecture invariant: no I/O, no clocks; every estimator is a value you
//! feed observations and ask for predictions.

pub mod convergence;
pub mod gns;
pub mod goodput;
pub mod itertime;
mod lm;
pub mod loss_curve;
pub mod speed;
