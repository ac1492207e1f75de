//! Iteration-time (step-time) models fitted to measured rows, and their held-out
//! evaluation (docs/algorithms.md §2a).
//!
//! Three model families, all predicting the time of one optimiser step from
//! `(nodes, replicas, max replicas per node, local batch)`:
//! - [`ModelKind::Ernest`]: `T = θ0 + θ1·b + θ2·ln r + θ3·r`, θ ≥ 0, the Ernest /
//!   Hemingway system model with `s/m` = local batch `b` and `m` = replicas `r`;
//!   fitted by exact non-negative least squares on relative error.
//! - [`ModelKind::Pollux`]: [`PerfParams`](crate::goodput::PerfParams) fitted by
//!   [`fit_perf_params`](crate::goodput::fit_perf_params), the code the simulator
//!   uses, so the table printed by `pacer fit` is the error the simulator lives with.
//! - [`ModelKind::Pacer`]: Pollux's overlap `T = (T_c^γ + T_n^γ)^(1/γ)` with three
//!   changes, each from a pattern in the Pollux traces' residuals:
//!   1. the compute curve is piecewise linear through knots at the measured local
//!      batches, not `α + β·b` (ncf is flat up to b≈2000 and then grows; yolov3 is
//!      slower at b = 6 and 11 than at 8 in *every* placement);
//!   2. compute slows by `(1 + ρ_k·[k>1] + ρ_d·[r>1])` (k = most replicas on one
//!      node): co-located GPUs share host and PCIe, cifar10 at b = 1024 takes 0.70 s
//!      alone and 0.84 s beside another replica;
//!   3. the network term across nodes is `α_n + β_n·(r−2)⁺ + κ_n·[k>1] + ν_n·ln(n/2)`:
//!      `11` and `22` have the same node count but very different sync time while
//!      `22`, `44` and `14` are nearly equal — a step, not a slope, in k.
//!
//!   Fitted by Levenberg–Marquardt on log-time residuals with an analytic Jacobian.
//! - [`ModelKind::PacerTable`]: the pacer model times the log-residual of measured
//!   rows of the same placement, interpolated along ln(batch) — the parametric
//!   model generalises, the table keeps what is specific to one placement. Where
//!   the placement has no row at the batch but the same placement in another node
//!   order has, that row (shifted by the two placements' mean offset) is blended in
//!   at a weight chosen by leave-one-out. For a placement never measured it is the
//!   pacer model.
//!
//! [`evaluate`] fits on a training split and reports absolute percentage errors on
//! the test split; [`split_random`] and [`split_extrapolate`] make the two splits
//! of issue 5 (random fraction with a seed; the largest replica counts held out).

mod ernest;
mod eval;
mod noise;
mod pacer;
mod table;
#[cfg(test)]
mod tests;

pub use ernest::ErnestParams;
use ernest::*;
pub use eval::{
    error_stats, evaluate, quantile, split_extrapolate, split_random, ErrorStats, Split, SplitMix64,
};
use noise::*;
pub use noise::{noise_floor, repeat_floor, NoiseFloor, RepeatFloor};
pub use pacer::PacerParams;
use pacer::*;
pub use table::PacerTable;

use crate::goodput::{fit_perf_params, FitError, PerfObservation, PerfParams};
use crate::lm::{Bound, Bounded, Residuals};
use nalgebra::{DMatrix, DVector};
use pacer_model::{PlacementRow, ScalabilityRow};
use serde::{Deserialize, Serialize};

/// Where a step runs and on how many samples per replica.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepConfig {
    pub nodes: u32,
    pub replicas: u32,
    /// Most replicas on any one node.
    pub max_per_node: u32,
    pub local_bsz: f64,
    /// Which measured table rows describe the same placement ([`placement_group`],
    /// [`scalability_group`]); 0 when unknown. Only [`ModelKind::PacerTable`] uses it.
    #[serde(default)]
    pub group: u64,
}

/// Group id of a concrete placement (replicas per node), e.g. `[1, 4, 4]` → 144.
pub fn placement_group(placement: &[u32]) -> u64 {
    placement.iter().fold(0u64, |acc, &d| {
        acc.saturating_mul(10).saturating_add(d as u64)
    })
}

/// Group id of `nodes × replicas` spread evenly (the scalability table).
pub fn scalability_group(nodes: u32, replicas: u32) -> u64 {
    (1u64 << 40) | ((nodes as u64) << 20) | replicas as u64
}

impl StepConfig {
    /// Replicas spread as evenly as possible over `nodes`.
    pub fn even(nodes: u32, replicas: u32, local_bsz: f64) -> Self {
        let nodes = nodes.max(1);
        StepConfig {
            nodes,
            replicas,
            max_per_node: replicas.div_ceil(nodes),
            local_bsz,
            group: scalability_group(nodes, replicas),
        }
    }
}

/// One measured step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub config: StepConfig,
    pub step_time_s: f64,
    /// Part of the step spent waiting for the all-reduce after compute finished.
    pub sync_time_s: f64,
    /// Where the row came from, e.g. `placements.csv:17`, for messages.
    pub source: String,
}

impl StepRow {
    /// Compute-only time (step minus sync), if positive.
    pub fn compute_time_s(&self) -> Option<f64> {
        let c = self.step_time_s - self.sync_time_s;
        (c > 0.0).then_some(c)
    }
}

/// Rows of a `placements.csv`; `first_line` is the line of the first data row (2).
pub fn rows_from_placements(rows: &[PlacementRow], origin: &str) -> Vec<StepRow> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| StepRow {
            config: StepConfig {
                nodes: r.num_nodes(),
                replicas: r.num_replicas(),
                max_per_node: r.placement.iter().copied().max().unwrap_or(1),
                local_bsz: r.local_bsz,
                group: placement_group(&r.placement),
            },
            step_time_s: r.step_time_s,
            sync_time_s: r.sync_time_s,
            source: format!("{origin}:{}", i + 2),
        })
        .collect()
}

/// Rows of a `scalability.csv` (replicas spread evenly over nodes).
pub fn rows_from_scalability(rows: &[ScalabilityRow], origin: &str) -> Vec<StepRow> {
    rows.iter()
        .enumerate()
        .map(|(i, r)| StepRow {
            config: StepConfig::even(r.num_nodes, r.num_replicas, r.local_bsz),
            step_time_s: r.step_time_s,
            sync_time_s: r.sync_time_s,
            source: format!("{origin}:{}", i + 2),
        })
        .collect()
}

/// The model families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Ernest,
    Pollux,
    Pacer,
    /// The pacer model corrected by the measured table: the log-residual of the
    /// training rows of the same placement, interpolated along the local batch.
    PacerTable,
}

impl ModelKind {
    pub const ALL: [ModelKind; 4] = [
        ModelKind::Ernest,
        ModelKind::Pollux,
        ModelKind::Pacer,
        ModelKind::PacerTable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Ernest => "ernest",
            ModelKind::Pollux => "pollux",
            ModelKind::Pacer => "pacer",
            ModelKind::PacerTable => "pacer+table",
        }
    }

    /// Parses `ernest`, `pollux` or `pacer`.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Why a step-time fit failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ItertimeError {
    #[error("too few rows to fit the {model} model: need at least {need}, got {got}")]
    TooFewRows {
        model: &'static str,
        need: usize,
        got: usize,
    },
    #[error("{origin}: step time {step} s must be finite and > 0")]
    BadRow { origin: String, step: f64 },
    #[error("the {model} fit did not converge: {reason}")]
    NoConvergence { model: &'static str, reason: String },
    #[error("option `{name}`: {reason}")]
    BadOption { name: &'static str, reason: String },
}

/// A fitted step-time model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum StepModel {
    Ernest(ErnestParams),
    Pollux(PerfParams),
    Pacer(PacerParams),
    PacerTable(PacerTable),
}

/// How the rows a model was fitted on support one prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Support {
    /// A row of the same placement at the same local batch (within 2%).
    Measured,
    /// Rows of the same placement on both sides of the local batch.
    Interpolated,
    /// Anything else: one side only, or the placement was never measured.
    Extrapolated,
}

impl StepModel {
    pub fn kind(&self) -> ModelKind {
        match self {
            StepModel::Ernest(_) => ModelKind::Ernest,
            StepModel::Pollux(_) => ModelKind::Pollux,
            StepModel::Pacer(_) => ModelKind::Pacer,
            StepModel::PacerTable(_) => ModelKind::PacerTable,
        }
    }

    /// Whether the prediction at `c` interpolates measured rows of the same
    /// placement (only [`StepModel::PacerTable`] keeps them; the others never do).
    pub fn interpolates(&self, c: &StepConfig) -> bool {
        match self {
            StepModel::PacerTable(t) => t.interpolates(c),
            _ => false,
        }
    }

    /// How the fitted rows support a prediction at `c` (only
    /// [`StepModel::PacerTable`] keeps them; the others always extrapolate).
    pub fn support(&self, c: &StepConfig) -> Support {
        match self {
            StepModel::PacerTable(t) => t.support(c),
            _ => Support::Extrapolated,
        }
    }

    /// Predicted time of one optimiser step (no gradient accumulation).
    pub fn step_time(&self, c: &StepConfig) -> f64 {
        match self {
            StepModel::Ernest(p) => p.step_time(c),
            StepModel::Pollux(p) => p.step_time(c.nodes, c.replicas, c.local_bsz, 0),
            StepModel::Pacer(p) => p.step_time(c),
            StepModel::PacerTable(p) => p.step_time(c),
        }
    }
}

fn check_rows(rows: &[StepRow]) -> Result<(), ItertimeError> {
    for r in rows {
        if !(r.step_time_s.is_finite() && r.step_time_s > 0.0) {
            return Err(ItertimeError::BadRow {
                origin: r.source.clone(),
                step: r.step_time_s,
            });
        }
    }
    Ok(())
}

/// Fits one model family to measured rows.
pub fn fit(kind: ModelKind, rows: &[StepRow]) -> Result<StepModel, ItertimeError> {
    check_rows(rows)?;
    let model = match kind {
        ModelKind::Ernest => StepModel::Ernest(fit_ernest(rows)?),
        ModelKind::Pollux => StepModel::Pollux(fit_pollux(rows)?),
        ModelKind::Pacer => StepModel::Pacer(fit_pacer(rows)?),
        ModelKind::PacerTable => StepModel::PacerTable(PacerTable::new(fit_pacer(rows)?, rows)),
    };
    // A fit that cannot even describe its own training rows is not a fit.
    let rms = rms_log_error(&model, rows);
    if !rms.is_finite() || rms > MAX_TRAIN_RMS_LOG {
        return Err(ItertimeError::NoConvergence {
            model: kind.name(),
            reason: format!(
                "training RMS log error {rms:.3} exceeds {MAX_TRAIN_RMS_LOG} (rows may not follow this model)"
            ),
        });
    }
    Ok(model)
}

/// About 40% typical error on the training rows.
const MAX_TRAIN_RMS_LOG: f64 = 0.35;

fn rms_log_error(model: &StepModel, rows: &[StepRow]) -> f64 {
    let s: f64 = rows
        .iter()
        .map(|r| {
            let p = model.step_time(&r.config);
            if p > 0.0 {
                (p / r.step_time_s).ln().powi(2)
            } else {
                f64::INFINITY
            }
        })
        .sum();
    (s / rows.len().max(1) as f64).sqrt()
}

fn fit_pollux(rows: &[StepRow]) -> Result<PerfParams, ItertimeError> {
    let obs: Vec<PerfObservation> = rows
        .iter()
        .map(|r| PerfObservation {
            nodes: r.config.nodes,
            replicas: r.config.replicas,
            atomic_bsz: r.config.local_bsz,
            // Pollux's own rule: compute = step − sync; guard rows where sync ≈ step.
            compute_time_s: r.compute_time_s().unwrap_or(r.step_time_s * 0.5),
            step_time_s: r.step_time_s,
        })
        .collect();
    fit_perf_params(&obs).map_err(|e| match e {
        FitError::Empty => ItertimeError::TooFewRows {
            model: "pollux",
            need: 1,
            got: 0,
        },
        other => ItertimeError::NoConvergence {
            model: "pollux",
            reason: other.to_string(),
        },
    })
}
