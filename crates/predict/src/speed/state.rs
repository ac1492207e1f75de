//! Exportable state of the registered speed predictors: what a session snapshot
//! (`pacer_control::session::SessionSnapshot`) carries so that a restored predictor
//! continues bit-identically. Only the learnt state is saved; what the registry name
//! and the seed fix (NARX's random units, the constants) is rebuilt on restore.

use serde::{Deserialize, Serialize};

/// One worker's predictor state, one variant per registered kind ([`super::PREDICTORS`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PredictorState {
    Last { last: Option<f64> },
    Ewma { state: Option<f64> },
    Ets(EtsState),
    Narx(NarxState),
}

impl PredictorState {
    /// The registry name of the predictor this state belongs to.
    pub fn kind(&self) -> &'static str {
        match self {
            PredictorState::Last { .. } => "last",
            PredictorState::Ewma { .. } => "ewma",
            PredictorState::Ets(_) => "ets",
            PredictorState::Narx(_) => "narx",
        }
    }
}

/// [`super::Ets`]: level, trend and discounted error of each grid filter, and the count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EtsState {
    pub level: Vec<f64>,
    pub trend: Vec<f64>,
    pub sse: Vec<f64>,
    pub seen: u64,
}

/// A recursive-least-squares fit: weights and the row-major inverse-correlation matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlsState {
    pub w: Vec<f64>,
    pub p: Vec<f64>,
}

/// One exogenous-signal filter of [`super::Narx`] (`value` is `None` before the first
/// reading).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExoFilterState {
    pub value: Option<f64>,
    pub scale: f64,
    pub seen: f64,
    pub run: f64,
}

/// The per-worker part of [`super::Narx`]; the pooled load response is saved once per
/// job ([`super::PredictorFactory::save_pool`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NarxState {
    pub ar: RlsState,
    pub innovations: Vec<f64>,
    pub filters: [ExoFilterState; 2],
    pub exo_hist: Vec<f64>,
    pub ln_hist: Vec<f64>,
    pub level: f64,
    pub seen: u64,
}

/// `Err(field: what)` unless every value is finite.
pub(crate) fn finite(field: &str, v: &[f64]) -> Result<(), String> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(format!("{field}[{i}]: {} is not a finite number", v[i])),
        None => Ok(()),
    }
}

/// `Err` unless `v` has `n` values, all finite.
pub(crate) fn finite_n(field: &str, v: &[f64], n: usize) -> Result<(), String> {
    if v.len() != n {
        return Err(format!("{field}: {} values, expected {n}", v.len()));
    }
    finite(field, v)
}

/// A usable speed (finite, > 0) or none.
pub(crate) fn speed_opt(field: &str, v: Option<f64>) -> Result<(), String> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0) => {
            Err(format!("{field}: {x} is not a finite speed > 0"))
        }
        _ => Ok(()),
    }
}
