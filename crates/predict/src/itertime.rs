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

use crate::goodput::{fit_perf_params, FitError, PerfObservation, PerfParams};
use levenberg_marquardt::{LeastSquaresProblem, LevenbergMarquardt};
use nalgebra::{DMatrix, DVector, Dyn, Owned};
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

/// Ernest coefficients (seconds): `θ0 + θ1·b + θ2·ln r + θ3·r`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErnestParams {
    pub theta: [f64; 4],
}

impl ErnestParams {
    fn features(c: &StepConfig) -> [f64; 4] {
        let r = c.replicas.max(1) as f64;
        [1.0, c.local_bsz, r.ln(), r]
    }

    pub fn step_time(&self, c: &StepConfig) -> f64 {
        Self::features(c)
            .iter()
            .zip(self.theta)
            .map(|(f, t)| f * t)
            .sum()
    }
}

/// The pacer step-time model (see the module docs): a compute curve through knots
/// at measured local batches, slowed by co-location, overlapped with a node- and
/// packing-aware network term.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacerParams {
    /// Local batches of the compute-curve knots, ascending.
    pub knot_bsz: Vec<f64>,
    /// Compute time of one replica alone at each knot (seconds).
    pub knot_time_s: Vec<f64>,
    /// Relative compute slow-down when a node hosts several replicas.
    pub rho_packed: f64,
    /// Relative compute slow-down of any distributed (r > 1) step.
    pub rho_dist: f64,
    /// Single node, several replicas: `α_r + β_r·(r−2)⁺`.
    pub alpha_r: f64,
    pub beta_r: f64,
    /// Across nodes: `α_n + β_n·(r−2)⁺ + κ_n·[k>1] + ν_n·(n−2)`.
    pub alpha_n: f64,
    pub beta_n: f64,
    pub kappa_n: f64,
    pub nu_n: f64,
    pub gamma: f64,
}

/// Parameters after the knots, in vector order.
const N_TAIL: usize = 9;
const RHO_K: usize = 0;
const RHO_D: usize = 1;
const A_R: usize = 2;
const B_R: usize = 3;
const A_N: usize = 4;
const B_N: usize = 5;
const K_N: usize = 6;
const NU_N: usize = 7;
const GAM: usize = 8;
/// Most knots in the compute curve (more measured batches are thinned).
const MAX_KNOTS: usize = 24;
const LOWER: f64 = 1e-9;
const GAMMA_MAX: f64 = 10.0;
const NO_NETWORK_S: f64 = 1e-8;

/// `(tc^γ + tn^γ)^(1/γ)` without overflow.
fn overlap(tc: f64, tn: f64, gamma: f64) -> f64 {
    let hi = tc.max(tn);
    let lo = tc.min(tn);
    hi * (1.0 + (lo / hi).powf(gamma)).powf(1.0 / gamma)
}

/// Network parameters (tail offsets) a config uses, with their feature values.
fn pacer_network_features(c: &StepConfig) -> Vec<(usize, f64)> {
    let extra = (c.replicas as f64 - 2.0).max(0.0);
    if c.nodes > 1 {
        vec![
            (A_N, 1.0),
            (B_N, extra),
            (K_N, if c.max_per_node > 1 { 1.0 } else { 0.0 }),
            (NU_N, (c.nodes as f64 / 2.0).ln()),
        ]
    } else if c.replicas > 1 {
        vec![(A_R, 1.0), (B_R, extra)]
    } else {
        Vec::new()
    }
}

/// Compute slow-down features (tail offsets).
fn pacer_compute_features(c: &StepConfig) -> [(usize, f64); 2] {
    [
        (RHO_K, if c.max_per_node > 1 { 1.0 } else { 0.0 }),
        (RHO_D, if c.replicas > 1 { 1.0 } else { 0.0 }),
    ]
}

/// Knot weights of the piecewise-linear compute curve at `b`: `(i, 1−w), (i+1, w)`.
/// Below the first knot the curve is flat (a GPU is no faster on fewer samples);
/// above the last it continues the last segment.
fn knot_weights(knots: &[f64], b: f64) -> [(usize, f64); 2] {
    let k = knots.len();
    if k == 1 || b <= knots[0] {
        return [(0, 1.0), (0, 0.0)];
    }
    let i = match knots.iter().position(|&x| x >= b) {
        Some(j) => j - 1,
        None => k - 2,
    };
    let w = (b - knots[i]) / (knots[i + 1] - knots[i]);
    [(i, 1.0 - w), (i + 1, w)]
}

impl PacerParams {
    fn tail(&self) -> [f64; N_TAIL] {
        [
            self.rho_packed,
            self.rho_dist,
            self.alpha_r,
            self.beta_r,
            self.alpha_n,
            self.beta_n,
            self.kappa_n,
            self.nu_n,
            self.gamma,
        ]
    }

    fn from_vec(knot_bsz: Vec<f64>, v: &[f64]) -> Self {
        let k = knot_bsz.len();
        let t = &v[k..];
        PacerParams {
            knot_time_s: v[..k].to_vec(),
            knot_bsz,
            rho_packed: t[RHO_K],
            rho_dist: t[RHO_D],
            alpha_r: t[A_R],
            beta_r: t[B_R],
            alpha_n: t[A_N],
            beta_n: t[B_N],
            kappa_n: t[K_N],
            nu_n: t[NU_N],
            gamma: t[GAM],
        }
    }

    /// Compute time of one replica alone on `local_bsz` samples.
    pub fn base_compute_time(&self, local_bsz: f64) -> f64 {
        knot_weights(&self.knot_bsz, local_bsz)
            .iter()
            .map(|&(i, w)| w * self.knot_time_s[i])
            .sum::<f64>()
            .max(LOWER)
    }

    /// Compute time of one replica in configuration `c`.
    pub fn compute_time(&self, c: &StepConfig) -> f64 {
        let t = self.tail();
        let m: f64 = 1.0
            + pacer_compute_features(c)
                .iter()
                .map(|&(i, x)| t[i] * x)
                .sum::<f64>();
        self.base_compute_time(c.local_bsz) * m
    }

    pub fn network_time(&self, c: &StepConfig) -> f64 {
        let t = self.tail();
        let f = pacer_network_features(c);
        if f.is_empty() {
            NO_NETWORK_S
        } else {
            f.iter().map(|&(i, x)| t[i] * x).sum::<f64>().max(LOWER)
        }
    }

    pub fn step_time(&self, c: &StepConfig) -> f64 {
        overlap(self.compute_time(c), self.network_time(c), self.gamma)
    }
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

/// [`PacerParams`] times a per-placement residual interpolated from measured rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PacerTable {
    pub base: PacerParams,
    /// Per group: `(ln local_bsz, ln(measured / base))`, sorted by batch.
    pub residuals: std::collections::BTreeMap<u64, Vec<(f64, f64)>>,
    /// Weight of the node-order siblings' estimate in [`PacerTable::residual`],
    /// chosen by leave-one-out on the rows the table was built from.
    #[serde(default)]
    pub sibling_weight: f64,
    /// Weight of the other placements' residual shape beyond a placement's measured
    /// batches, chosen by leave-one-out.
    #[serde(default)]
    pub edge_weight: f64,
}

/// Batches closer than this in ln(batch) are the same batch (2%).
fn same_batch_tol() -> f64 {
    0.02f64.ln_1p()
}

/// Linear in ln(batch) between the neighbouring points, the nearest one outside
/// them, 0 if none.
fn interpolate_residual(v: &[(f64, f64)], x: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    match v.iter().position(|p| p.0 >= x) {
        None => v[v.len() - 1].1,
        Some(0) => v[0].1,
        Some(j) => {
            let (a, b) = (v[j - 1], v[j]);
            if b.0 - a.0 < 1e-12 {
                (a.1 + b.1) / 2.0
            } else {
                a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
            }
        }
    }
}

/// Candidate weights tried by leave-one-out.
const TABLE_WEIGHTS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// The candidate weight with the least leave-one-out loss (the smallest on ties, so
/// 0 when there are no cases).
fn best_weight(loss: impl Fn(f64) -> f64) -> f64 {
    TABLE_WEIGHTS
        .iter()
        .copied()
        .min_by(|a, b| loss(*a).total_cmp(&loss(*b)))
        .unwrap_or(0.0)
}

impl PacerTable {
    fn new(base: PacerParams, rows: &[StepRow]) -> Self {
        let mut residuals: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
        for r in rows {
            if r.config.group == 0 {
                continue;
            }
            let res = (r.step_time_s / base.step_time(&r.config)).ln();
            residuals
                .entry(r.config.group)
                .or_default()
                .push((r.config.local_bsz.ln(), res));
        }
        for v in residuals.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let mut table = PacerTable {
            base,
            residuals,
            sibling_weight: 0.0,
            edge_weight: 0.0,
        };
        table.edge_weight = table.choose_edge_weight();
        table.sibling_weight = table.choose_sibling_weight();
        table
    }

    /// Median over the other placements of the same table measured at both `from`
    /// and `to` of their residual's change between the two batches (at least 3).
    fn shape_estimate(&self, group: u64, from: f64, to: f64) -> Option<f64> {
        let tol = same_batch_tol();
        let mut d: Vec<f64> = self
            .residuals
            .iter()
            // Other placements of the same table (one measuring campaign).
            .filter(|(g, _)| **g != group && (**g >> 40) == (group >> 40))
            .filter_map(|(_, v)| {
                let a = v.iter().find(|p| (p.0 - from).abs() <= tol)?;
                let b = v.iter().find(|p| (p.0 - to).abs() <= tol)?;
                Some(b.1 - a.1)
            })
            .collect();
        if d.len() < 3 {
            return None;
        }
        d.sort_by(|a, b| a.total_cmp(b));
        Some(quantile(&d, 0.5))
    }

    /// The placement's own residual at `x`: interpolated inside its measured
    /// batches; beyond them the nearest one plus `edge_weight` × the shape the other
    /// placements show between the two batches.
    fn own_residual(&self, group: u64, v: &[(f64, f64)], x: f64, edge_weight: f64) -> f64 {
        let own = interpolate_residual(v, x);
        if edge_weight == 0.0 || v.is_empty() {
            return own;
        }
        let tol = same_batch_tol();
        let nearest = if x < v[0].0 - tol {
            v[0].0
        } else if x > v[v.len() - 1].0 + tol {
            v[v.len() - 1].0
        } else {
            return own;
        };
        own + edge_weight * self.shape_estimate(group, nearest, x).unwrap_or(0.0)
    }

    /// Leave-one-out over the first and last row of every placement.
    fn choose_edge_weight(&self) -> f64 {
        let mut cases: Vec<(f64, f64, f64)> = Vec::new(); // (truth, own, shape)
        for (&g, v) in &self.residuals {
            if v.len() < 3 {
                continue;
            }
            for i in [0, v.len() - 1] {
                let mut rest = v.clone();
                let (x, y) = rest.remove(i);
                let nearest = if i == 0 {
                    rest[0].0
                } else {
                    rest[rest.len() - 1].0
                };
                if let Some(sh) = self.shape_estimate(g, nearest, x) {
                    cases.push((y, interpolate_residual(&rest, x), sh));
                }
            }
        }
        best_weight(|w| {
            cases
                .iter()
                .map(|&(y, own, sh)| (y - (own + w * sh)).abs())
                .sum::<f64>()
        })
    }

    /// Leave-one-out over every row that has node-order siblings at its batch: the
    /// weight with the least mean |error| of its own residual.
    fn choose_sibling_weight(&self) -> f64 {
        let mut cases: Vec<(f64, f64, f64)> = Vec::new(); // (truth, own, siblings)
        for (&g, v) in &self.residuals {
            for i in 0..v.len() {
                let mut rest = v.clone();
                let (x, y) = rest.remove(i);
                if let Some(sib) = self.sibling_estimate(g, &rest, x) {
                    cases.push((y, self.own_residual(g, &rest, x, self.edge_weight), sib));
                }
            }
        }
        best_weight(|w| {
            cases
                .iter()
                .map(|&(y, own, sib)| (y - ((1.0 - w) * own + w * sib)).abs())
                .sum::<f64>()
        })
    }

    /// Mean over the placements that differ from `group` only in node order and were
    /// measured at `x` of their residual there, each shifted by its mean offset from
    /// `own` (the placement's own points) at the batches both measured.
    fn sibling_estimate(&self, group: u64, own: &[(f64, f64)], x: f64) -> Option<f64> {
        let key = group_multiset(group)?;
        let tol = same_batch_tol();
        let mut sum = 0.0;
        let mut n = 0usize;
        for (&g, sv) in &self.residuals {
            if g == group || group_multiset(g).as_ref() != Some(&key) {
                continue;
            }
            let Some(at) = sv.iter().find(|p| (p.0 - x).abs() <= tol) else {
                continue;
            };
            let diffs: Vec<f64> = sv
                .iter()
                .filter(|p| (p.0 - x).abs() > tol)
                .filter_map(|p| {
                    own.iter()
                        .find(|q| (q.0 - p.0).abs() <= tol)
                        .map(|q| p.1 - q.1)
                })
                .collect();
            if diffs.is_empty() {
                continue;
            }
            sum += at.1 - diffs.iter().sum::<f64>() / diffs.len() as f64;
            n += 1;
        }
        (n > 0).then(|| sum / n as f64)
    }

    /// Log-residual at `c`: linear in ln(batch) between the neighbouring measured
    /// batches of the same placement (the nearest one outside them, 0 if none),
    /// blended with the node-order siblings' estimate at `c`'s batch when the
    /// placement has no row there and a sibling has ([`PacerTable::sibling_weight`]).
    pub fn residual(&self, c: &StepConfig) -> f64 {
        let Some(v) = self.residuals.get(&c.group) else {
            return 0.0;
        };
        let x = c.local_bsz.ln();
        let own = self.own_residual(c.group, v, x, self.edge_weight);
        let w = self.sibling_weight;
        if w == 0.0 || v.iter().any(|p| (p.0 - x).abs() <= same_batch_tol()) {
            return own;
        }
        match self.sibling_estimate(c.group, v, x) {
            Some(sib) => (1.0 - w) * own + w * sib,
            None => own,
        }
    }

    pub fn step_time(&self, c: &StepConfig) -> f64 {
        self.base.step_time(c) * self.residual(c).exp()
    }

    /// Whether rows of `c`'s placement were measured at local batches on both
    /// sides of `c.local_bsz` (2% tolerance): the prediction interpolates the
    /// table rather than extrapolating it.
    pub fn interpolates(&self, c: &StepConfig) -> bool {
        let Some(v) = self.residuals.get(&c.group) else {
            return false;
        };
        let x = c.local_bsz.ln();
        let tol = 0.02f64.ln_1p();
        v.first().is_some_and(|p| p.0 <= x + tol) && v.last().is_some_and(|p| p.0 >= x - tol)
    }

    /// How the table supports a prediction at `c`.
    pub fn support(&self, c: &StepConfig) -> Support {
        let tol = 0.02f64.ln_1p();
        let x = c.local_bsz.ln();
        match self.residuals.get(&c.group) {
            Some(v) if v.iter().any(|p| (p.0 - x).abs() <= tol) => Support::Measured,
            _ if self.interpolates(c) => Support::Interpolated,
            _ => Support::Extrapolated,
        }
    }
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

/// Exact non-negative least squares on relative error: every subset of the four
/// features is solved unconstrained and the best all-non-negative solution kept
/// (16 tiny solves; the Jacobian of a linear model is its design matrix).
fn fit_ernest(rows: &[StepRow]) -> Result<ErnestParams, ItertimeError> {
    if rows.len() < 4 {
        return Err(ItertimeError::TooFewRows {
            model: "ernest",
            need: 4,
            got: rows.len(),
        });
    }
    let n = rows.len();
    let x = DMatrix::from_fn(n, 4, |i, j| {
        ErnestParams::features(&rows[i].config)[j] / rows[i].step_time_s
    });
    let y = DVector::from_element(n, 1.0);
    let mut best: Option<(f64, [f64; 4])> = None;
    for mask in 1u32..16 {
        let cols: Vec<usize> = (0..4).filter(|j| mask & (1 << j) != 0).collect();
        let xs = DMatrix::from_fn(n, cols.len(), |i, k| x[(i, cols[k])]);
        let Ok(sol) = xs.clone().svd(true, true).solve(&y, 1e-12) else {
            continue;
        };
        if sol.iter().any(|v| *v < 0.0 || !v.is_finite()) {
            continue;
        }
        let sse = (&xs * &sol - &y).norm_squared();
        if best.is_none_or(|(b, _)| sse < b) {
            let mut theta = [0.0; 4];
            for (k, &c) in cols.iter().enumerate() {
                theta[c] = sol[k];
            }
            best = Some((sse, theta));
        }
    }
    best.map(|(_, theta)| ErnestParams { theta })
        .ok_or(ItertimeError::NoConvergence {
            model: "ernest",
            reason: "no non-negative least-squares solution".into(),
        })
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

/// Weight of the compute-time residuals relative to the step-time ones: compute
/// time pins the compute curve so the network terms cannot absorb compute.
const COMPUTE_WEIGHT: f64 = 0.5;
const REG_GAMMA: f64 = 1e-3;

struct PacerProblem<'a> {
    rows: &'a [StepRow],
    knots: Vec<f64>,
    values: Vec<f64>,
    free: Vec<usize>,
    x: DVector<f64>,
}

impl PacerProblem<'_> {
    fn gamma_index(&self) -> usize {
        self.knots.len() + GAM
    }

    fn decode(&mut self) {
        let g = self.gamma_index();
        for (k, &i) in self.free.iter().enumerate() {
            let u = self.x[k].clamp(-60.0, 60.0);
            self.values[i] = if i == g {
                1.0 + (GAMMA_MAX - 1.0) / (1.0 + (-u).exp())
            } else {
                LOWER + u.exp()
            };
        }
    }

    fn encode(values: &[f64], free: &[usize], g: usize) -> DVector<f64> {
        DVector::from_iterator(
            free.len(),
            free.iter().map(|&i| {
                if i == g {
                    let s = ((values[g] - 1.0) / (GAMMA_MAX - 1.0)).clamp(1e-6, 1.0 - 1e-6);
                    (s / (1.0 - s)).ln()
                } else {
                    (values[i] - LOWER).max(1e-15).ln()
                }
            }),
        )
    }

    fn dvalue(&self, i: usize) -> f64 {
        let g = self.gamma_index();
        if i == g {
            let s = (self.values[g] - 1.0) / (GAMMA_MAX - 1.0);
            (GAMMA_MAX - 1.0) * s * (1.0 - s)
        } else {
            self.values[i] - LOWER
        }
    }

    fn n_residuals(&self) -> usize {
        2 * self.rows.len() + 1
    }

    /// Residuals (log-time errors) and, when asked, their analytic Jacobian with
    /// respect to the free unconstrained coordinates.
    fn eval(&self, jac: Option<&mut DMatrix<f64>>) -> DVector<f64> {
        let p = &self.values;
        let nk = self.knots.len();
        let np = p.len();
        let w = 1.0 / (self.rows.len() as f64).sqrt();
        let nr = self.n_residuals();
        let mut r = DVector::zeros(nr);
        let mut jp = DMatrix::zeros(nr, np);
        let gamma = p[nk + GAM];
        for (i, row) in self.rows.iter().enumerate() {
            let c = &row.config;
            let kw = knot_weights(&self.knots, c.local_bsz);
            let base: f64 = kw.iter().map(|&(j, x)| x * p[j]).sum::<f64>().max(LOWER);
            let cf = pacer_compute_features(c);
            let m = 1.0 + cf.iter().map(|&(j, x)| p[nk + j] * x).sum::<f64>();
            let tc = base * m;
            // d ln tc / d param
            let mut dlog_tc: Vec<(usize, f64)> = Vec::with_capacity(4);
            for &(j, x) in &kw {
                if x != 0.0 {
                    dlog_tc.push((j, x * m / tc));
                }
            }
            for &(j, x) in &cf {
                if x != 0.0 {
                    dlog_tc.push((nk + j, x * base / tc));
                }
            }
            if let Some(ct) = row.compute_time_s() {
                let wc = w * COMPUTE_WEIGHT;
                r[2 * i] = wc * (tc.ln() - ct.ln());
                for &(j, d) in &dlog_tc {
                    jp[(2 * i, j)] += wc * d;
                }
            }
            let feats = pacer_network_features(c);
            let tn = if feats.is_empty() {
                NO_NETWORK_S
            } else {
                feats
                    .iter()
                    .map(|&(j, x)| p[nk + j] * x)
                    .sum::<f64>()
                    .max(LOWER)
            };
            let log_t = overlap(tc, tn, gamma).ln();
            r[2 * i + 1] = w * (log_t - row.step_time_s.ln());
            let ratio = (tn / tc).powf(gamma);
            let wcmp = 1.0 / (1.0 + ratio);
            let wn = 1.0 - wcmp;
            for &(j, d) in &dlog_tc {
                jp[(2 * i + 1, j)] += w * wcmp * d;
            }
            for &(j, x) in &feats {
                jp[(2 * i + 1, nk + j)] += w * wn / tn * x;
            }
            jp[(2 * i + 1, nk + GAM)] = w * (wcmp * tc.ln() + wn * tn.ln() - log_t) / gamma;
        }
        let k = 2 * self.rows.len();
        let sg = REG_GAMMA.sqrt();
        r[k] = sg * (gamma - 1.0);
        jp[(k, nk + GAM)] = sg;
        if let Some(j) = jac {
            for (c, &i) in self.free.iter().enumerate() {
                let dv = self.dvalue(i);
                for row in 0..nr {
                    j[(row, c)] = jp[(row, i)] * dv;
                }
            }
        }
        r
    }
}

impl LeastSquaresProblem<f64, Dyn, Dyn> for PacerProblem<'_> {
    type ResidualStorage = Owned<f64, Dyn>;
    type JacobianStorage = Owned<f64, Dyn, Dyn>;
    type ParameterStorage = Owned<f64, Dyn>;

    fn set_params(&mut self, x: &DVector<f64>) {
        self.x.copy_from(x);
        self.decode();
    }

    fn params(&self) -> DVector<f64> {
        self.x.clone()
    }

    fn residuals(&self) -> Option<DVector<f64>> {
        let r = self.eval(None);
        r.iter().all(|v| v.is_finite()).then_some(r)
    }

    fn jacobian(&self) -> Option<DMatrix<f64>> {
        let mut j = DMatrix::zeros(self.n_residuals(), self.free.len());
        self.eval(Some(&mut j));
        j.iter().all(|v| v.is_finite()).then_some(j)
    }
}

/// Knots at the measured local batches (thinned geometrically beyond [`MAX_KNOTS`]).
fn choose_knots(rows: &[StepRow]) -> Vec<f64> {
    let mut b: Vec<f64> = rows.iter().map(|r| r.config.local_bsz).collect();
    b.sort_by(|x, y| x.total_cmp(y));
    b.dedup_by(|x, y| (*x / *y - 1.0).abs() < 0.02);
    if b.len() <= MAX_KNOTS {
        return b;
    }
    let (lo, hi) = (b[0], b[b.len() - 1]);
    let mut out: Vec<f64> = (0..MAX_KNOTS)
        .map(|i| {
            let target = lo * (hi / lo).powf(i as f64 / (MAX_KNOTS - 1) as f64);
            *b.iter()
                .min_by(|x, y| {
                    (x.ln() - target.ln())
                        .abs()
                        .total_cmp(&(y.ln() - target.ln()).abs())
                })
                .unwrap()
        })
        .collect();
    out.dedup();
    out
}

fn fit_pacer(rows: &[StepRow]) -> Result<PacerParams, ItertimeError> {
    let knots = choose_knots(rows);
    let nk = knots.len();
    let np = nk + N_TAIL;
    // Start the compute curve at the median single-replica (else any) compute time
    // measured near each knot.
    let mut values = vec![0.0; np];
    let mean_step = rows.iter().map(|r| r.step_time_s).sum::<f64>() / rows.len().max(1) as f64;
    for (j, &kb) in knots.iter().enumerate() {
        let mut near: Vec<f64> = rows
            .iter()
            .filter(|r| (r.config.local_bsz / kb - 1.0).abs() < 0.05)
            .filter_map(|r| r.compute_time_s())
            .collect();
        near.sort_by(|a, b| a.total_cmp(b));
        values[j] = near.get(near.len() / 2).copied().unwrap_or(mean_step * 0.5);
    }
    for v in values.iter_mut().skip(nk).take(GAM) {
        *v = mean_step * 0.05;
    }
    values[nk + RHO_K] = 0.05;
    values[nk + RHO_D] = 0.05;
    values[nk + GAM] = 2.0;
    // Pin what the rows cannot identify (as Pollux does) so LM never wanders along
    // a flat direction.
    let mut fixed = vec![false; np];
    let pin = |i: usize, fixed: &mut Vec<bool>, values: &mut Vec<f64>| {
        fixed[nk + i] = true;
        values[nk + i] = LOWER;
    };
    let any = |f: &dyn Fn(&StepConfig) -> bool| rows.iter().any(|r| f(&r.config));
    let single = any(&|c| c.replicas == 1);
    if !any(&|c| c.nodes == 1 && c.replicas > 1) {
        pin(A_R, &mut fixed, &mut values);
        pin(B_R, &mut fixed, &mut values);
    }
    if !any(&|c| c.nodes == 1 && c.replicas > 2) {
        pin(B_R, &mut fixed, &mut values);
    }
    if !(single && any(&|c| c.replicas > 1)) {
        pin(RHO_D, &mut fixed, &mut values);
    }
    if !(any(&|c| c.max_per_node > 1) && any(&|c| c.replicas > 1 && c.max_per_node == 1)) {
        pin(RHO_K, &mut fixed, &mut values);
    }
    if !any(&|c| c.nodes > 1) {
        for i in [A_N, B_N, K_N, NU_N] {
            pin(i, &mut fixed, &mut values);
        }
    } else {
        if !any(&|c| c.nodes > 1 && c.replicas > 2) {
            pin(B_N, &mut fixed, &mut values);
        }
        let packed = any(&|c| c.nodes > 1 && c.max_per_node > 1);
        let spread = any(&|c| c.nodes > 1 && c.max_per_node == 1);
        if !(packed && spread) {
            pin(K_N, &mut fixed, &mut values);
        }
        if !any(&|c| c.nodes > 2) {
            pin(NU_N, &mut fixed, &mut values);
        }
    }
    let free: Vec<usize> = (0..np).filter(|&i| !fixed[i]).collect();
    let need = free.len();
    if rows.len() < need {
        return Err(ItertimeError::TooFewRows {
            model: "pacer",
            need,
            got: rows.len(),
        });
    }
    let g = nk + GAM;
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut last_failure = String::new();
    for gamma0 in [1.5, 3.0, 6.0] {
        let mut start = values.clone();
        start[g] = gamma0;
        let mut problem = PacerProblem {
            rows,
            knots: knots.clone(),
            x: PacerProblem::encode(&start, &free, g),
            values: start,
            free: free.clone(),
        };
        problem.decode();
        let (solved, report) = LevenbergMarquardt::new()
            .with_patience(100)
            .minimize(problem);
        if !report.objective_function.is_finite() {
            last_failure = format!("{:?}", report.termination);
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|(b, _)| report.objective_function < *b)
        {
            best = Some((report.objective_function, solved.values));
        }
    }
    let Some((_, mut values)) = best else {
        return Err(ItertimeError::NoConvergence {
            model: "pacer",
            reason: last_failure,
        });
    };
    // An unmeasured link across nodes is assumed no faster than the one inside a node.
    if !rows.iter().any(|r| r.config.nodes > 1) {
        values[nk + A_N] = values[nk + A_N].max(values[nk + A_R] * 1.1);
        values[nk + B_N] = values[nk + B_N].max(values[nk + B_R] * 1.1);
    }
    Ok(PacerParams::from_vec(knots, &values))
}

/// Absolute percentage errors of a model on test rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    pub rows: usize,
    pub median_abs_pct_error: f64,
    pub p90_abs_pct_error: f64,
    pub max_abs_pct_error: f64,
}

/// Errors of `model` on `rows`, in percent.
pub fn error_stats(model: &StepModel, rows: &[StepRow]) -> ErrorStats {
    let mut e: Vec<f64> = rows
        .iter()
        .map(|r| 100.0 * (model.step_time(&r.config) - r.step_time_s).abs() / r.step_time_s)
        .collect();
    e.sort_by(|a, b| a.total_cmp(b));
    ErrorStats {
        rows: e.len(),
        median_abs_pct_error: quantile(&e, 0.5),
        p90_abs_pct_error: quantile(&e, 0.9),
        max_abs_pct_error: e.last().copied().unwrap_or(f64::NAN),
    }
}

/// Linear-interpolated quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// How noisy single measurements are, estimated without any fitted model.
///
/// Each table row is one measurement of one `(placement, local batch)`; there are
/// no repeats to compare. So every interior row of a placement's curve is compared
/// with the straight line in `(ln b, ln t)` through its two neighbours:
/// `d = ln t_i − interp(ln t_{i−1}, ln t_{i+1})`. With independent noise of
/// standard deviation σ (in log time), `Var d = σ²(1 + w² + (1−w)²)`, so
/// `d / √(1 + w² + (1−w)²)` has the spread of one row's noise. Curvature of the
/// true curve inflates `d`; the part of it that every placement shares (yolov3's
/// dip at b = 8, ncf's knee) is removed by subtracting the median `d` of all
/// placements with the same batch triple (and the same table and single/multi-node
/// class). What remains is noise plus placement-specific curvature: an upper bound
/// on noise, hence a lower bound on the error no model can beat only if that
/// curvature is small (it is, where the raw and centred numbers agree).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseFloor {
    /// Interior rows that entered the centred estimate.
    pub rows: usize,
    /// Robust σ of one row's log noise (median |·| / 0.6745), in percent.
    pub sigma_pct: f64,
    /// Same without removing the shared curvature (a looser upper bound), in percent.
    pub sigma_raw_pct: f64,
    /// Median and 90th percentile of |noise| of one row, in percent: the errors a
    /// model that knew the true curve would still make on single rows.
    pub median_abs_pct: f64,
    pub p90_abs_pct: f64,
}

/// Smallest class of curve triples whose median is subtracted in [`noise_floor`].
const NOISE_MIN_CLASS: usize = 5;

/// Estimates the measurement noise of step-time rows (see [`NoiseFloor`]).
/// Rows are grouped by [`StepConfig::group`]; rows of group 0 are ignored.
pub fn noise_floor(rows: &[StepRow]) -> Option<NoiseFloor> {
    use std::collections::BTreeMap;
    let mut curves: BTreeMap<u64, Vec<(f64, f64, bool)>> = BTreeMap::new();
    for r in rows {
        let c = &r.config;
        if c.group == 0
            || r.step_time_s.is_nan()
            || r.step_time_s <= 0.0
            || c.local_bsz.is_nan()
            || c.local_bsz <= 0.0
        {
            continue;
        }
        curves.entry(c.group).or_default().push((
            c.local_bsz.ln(),
            r.step_time_s.ln(),
            c.nodes > 1,
        ));
    }
    // Class key: batch triple (ln b to 1e-3), table (placement or scalability), multi-node.
    type Key = (i64, i64, i64, bool, bool);
    let mut classes: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    let mut raw = Vec::new();
    for (&group, v) in curves.iter_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for t in v.windows(3) {
            let (x0, x1, x2) = (t[0].0, t[1].0, t[2].0);
            if x2 - x0 < 1e-9 {
                continue;
            }
            let w = (x1 - x0) / (x2 - x0);
            let d = (t[1].1 - (t[0].1 + (t[2].1 - t[0].1) * w))
                / (1.0 + w * w + (1.0 - w) * (1.0 - w)).sqrt();
            raw.push(d.abs());
            let q = |x: f64| (x * 1000.0).round() as i64;
            let scal = group & (1 << 40) != 0;
            classes
                .entry((q(x0), q(x1), q(x2), scal, t[1].2))
                .or_default()
                .push(d);
        }
    }
    let mut centred = Vec::new();
    for v in classes.values_mut() {
        let n = v.len();
        if n < NOISE_MIN_CLASS {
            continue;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let m = quantile(v, 0.5);
        // Subtracting an estimated centre shrinks the spread by about √((n−1)/n).
        let k = (n as f64 / (n as f64 - 1.0)).sqrt();
        centred.extend(v.iter().map(|d| (d - m).abs() * k));
    }
    if centred.is_empty() {
        return None;
    }
    centred.sort_by(|a, b| a.total_cmp(b));
    raw.sort_by(|a, b| a.total_cmp(b));
    let pct = |x: f64| 100.0 * x.exp_m1();
    Some(NoiseFloor {
        rows: centred.len(),
        sigma_pct: pct(quantile(&centred, 0.5) / 0.6745),
        sigma_raw_pct: pct(quantile(&raw, 0.5) / 0.6745),
        median_abs_pct: pct(quantile(&centred, 0.5)),
        p90_abs_pct: pct(quantile(&centred, 0.9)),
    })
}

/// Measurement noise from the repeats the Pollux traces do contain.
///
/// `placements.csv` measures some placements that differ only in the order of
/// their nodes — `1344`, `1434` and `1443` all put 1, 3, 4 and 4 replicas on four
/// nodes — at the same local batches. Every model here (and Ernest's and Pollux's)
/// sees a placement only through its multiset of per-node counts, so for them these
/// are repeated measurements of one configuration, taken in separate runs:
/// - `mean_abs_log_bound_pct` is a hard bound, with no assumption on the noise:
///   one prediction `p` for the `k` values `x` of a class at one batch has
///   `Σ|x − p| ≥ Σ|x − median|`, so any order-blind predictor's mean |ln error| over
///   these rows is at least this;
/// - `median_abs_pct` / `p90_abs_pct` are from `e = (x − m)·√(k/(k−1))` (`m` the
///   class mean at that batch), which has the spread of one row's noise when the
///   row's placement was never measured (its whole run is new). For Gaussian noise
///   they are the median and p90 of |noise|; with heavy tails (an occasional slow
///   run) a pair spreads one outlier over both rows and they overstate the median,
///   so they are an estimate of the noise level, not a bound;
/// - `within_*` first removes each placement's mean offset from its class over its
///   batches (the part of the noise one run shares). When a model beats it on held-out
///   rows of placements it has other rows of, the remaining noise is correlated
///   along a placement's batches, which interpolating neighbours exploits.
///
/// Only placements whose group id decodes to its per-node counts (one decimal digit
/// per node, as in the Pollux format) and with at least `min_replicas` replicas
/// enter. `None` when no class has two placements at a common batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatFloor {
    /// Classes (multisets of per-node counts) with at least two placements.
    pub classes: usize,
    /// Indices (into the input) of the rows that entered.
    pub members: Vec<usize>,
    pub median_abs_pct: f64,
    pub p90_abs_pct: f64,
    pub within_median_abs_pct: f64,
    pub within_p90_abs_pct: f64,
    pub mean_abs_log_bound_pct: f64,
}

/// Per-node replica counts of a placement group id (one decimal digit per node),
/// sorted; `None` for scalability or unknown groups.
fn group_multiset(group: u64) -> Option<Vec<u32>> {
    if group == 0 || group >= 1 << 40 {
        return None;
    }
    let mut g = group;
    let mut counts = Vec::new();
    while g > 0 {
        let d = (g % 10) as u32;
        if d == 0 {
            return None;
        }
        counts.push(d);
        g /= 10;
    }
    counts.sort_unstable();
    Some(counts)
}

/// Per-node replica counts of a placement group id, sorted, if it decodes
/// consistently with the row's configuration.
fn placement_multiset(c: &StepConfig) -> Option<Vec<u32>> {
    let counts = group_multiset(c.group)?;
    let ok = counts.len() as u32 == c.nodes
        && counts.iter().sum::<u32>() == c.replicas
        && counts.last().copied() == Some(c.max_per_node);
    ok.then_some(counts)
}

/// See [`RepeatFloor`].
pub fn repeat_floor(rows: &[StepRow], min_replicas: u32) -> Option<RepeatFloor> {
    use std::collections::BTreeMap;
    // class → batch key → [(group, row index, ln t)]
    type Cell = Vec<(u64, usize, f64)>;
    let mut classes: BTreeMap<Vec<u32>, BTreeMap<i64, Cell>> = BTreeMap::new();
    for (i, r) in rows.iter().enumerate() {
        let c = &r.config;
        if c.replicas < min_replicas
            || !(r.step_time_s > 0.0 && r.step_time_s.is_finite())
            || !(c.local_bsz > 0.0 && c.local_bsz.is_finite())
        {
            continue;
        }
        let Some(key) = placement_multiset(c) else {
            continue;
        };
        let b = (c.local_bsz.ln() * 1000.0).round() as i64;
        classes.entry(key).or_default().entry(b).or_default().push((
            c.group,
            i,
            r.step_time_s.ln(),
        ));
    }
    let mut members = Vec::new();
    let mut dev = Vec::new();
    let mut hard = Vec::new();
    let mut n_classes = 0;
    // (group) → [(deviation from the class mean, scale)] for the within estimate.
    let mut by_placement: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for cells in classes.values() {
        let mut used = false;
        for cell in cells.values() {
            let mut groups: Vec<u64> = cell.iter().map(|t| t.0).collect();
            groups.sort_unstable();
            groups.dedup();
            let k = cell.len();
            // One row per placement and batch; otherwise the cell is ambiguous.
            if groups.len() < 2 || groups.len() != k {
                continue;
            }
            used = true;
            let m = cell.iter().map(|t| t.2).sum::<f64>() / k as f64;
            let scale = (k as f64 / (k as f64 - 1.0)).sqrt();
            let mut xs: Vec<f64> = cell.iter().map(|t| t.2).collect();
            xs.sort_by(|a, b| a.total_cmp(b));
            let med = quantile(&xs, 0.5);
            for &(g, i, x) in cell {
                members.push(i);
                dev.push(((x - m) * scale).abs());
                hard.push((x - med).abs());
                by_placement.entry(g).or_default().push((x - m, scale));
            }
        }
        n_classes += usize::from(used);
    }
    if dev.is_empty() {
        return None;
    }
    let mut within = Vec::new();
    for v in by_placement.values() {
        let n = v.len();
        if n < 2 {
            continue;
        }
        let o = v.iter().map(|t| t.0).sum::<f64>() / n as f64;
        let k = (n as f64 / (n as f64 - 1.0)).sqrt();
        within.extend(v.iter().map(|&(d, s)| ((d - o) * s * k).abs()));
    }
    dev.sort_by(|a, b| a.total_cmp(b));
    within.sort_by(|a, b| a.total_cmp(b));
    members.sort_unstable();
    let pct = |x: f64| 100.0 * x.exp_m1();
    Some(RepeatFloor {
        classes: n_classes,
        members,
        median_abs_pct: pct(quantile(&dev, 0.5)),
        p90_abs_pct: pct(quantile(&dev, 0.9)),
        within_median_abs_pct: pct(quantile(&within, 0.5)),
        within_p90_abs_pct: pct(quantile(&within, 0.9)),
        mean_abs_log_bound_pct: 100.0 * hard.iter().sum::<f64>() / hard.len() as f64,
    })
}

/// A train/test split of rows (indices into the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub train: Vec<usize>,
    pub test: Vec<usize>,
}

impl Split {
    pub fn pick(&self, rows: &[StepRow]) -> (Vec<StepRow>, Vec<StepRow>) {
        let get = |ix: &[usize]| ix.iter().map(|&i| rows[i].clone()).collect();
        (get(&self.train), get(&self.test))
    }
}

/// SplitMix64: a tiny deterministic generator so a seed means the same split everywhere.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// A random `test_fraction` of the rows is held out (Fisher–Yates with `seed`).
pub fn split_random(n: usize, test_fraction: f64, seed: u64) -> Split {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        let j = rng.below(i + 1);
        idx.swap(i, j);
    }
    let n_test = ((n as f64 * test_fraction).round() as usize).min(n.saturating_sub(1));
    let mut test = idx[..n_test].to_vec();
    let mut train = idx[n_test..].to_vec();
    test.sort_unstable();
    train.sort_unstable();
    Split { train, test }
}

/// Holds out the rows with the largest replica counts: whole replica-count groups,
/// largest first, until at least `test_fraction` of the rows are held out (always
/// leaving the smallest count for training).
pub fn split_extrapolate(rows: &[StepRow], test_fraction: f64) -> Split {
    let mut counts: Vec<u32> = rows.iter().map(|r| r.config.replicas).collect();
    counts.sort_unstable();
    counts.dedup();
    let target = (rows.len() as f64 * test_fraction).ceil() as usize;
    let mut threshold = u32::MAX;
    let mut held = 0;
    for &c in counts.iter().rev().take(counts.len().saturating_sub(1)) {
        if held >= target {
            break;
        }
        threshold = c;
        held += rows.iter().filter(|r| r.config.replicas == c).count();
    }
    let (test, train): (Vec<usize>, Vec<usize>) =
        (0..rows.len()).partition(|&i| rows[i].config.replicas >= threshold);
    Split { train, test }
}

/// Fit on the training rows of `split`, measure on its test rows.
pub fn evaluate(
    kind: ModelKind,
    rows: &[StepRow],
    split: &Split,
) -> Result<(StepModel, ErrorStats), ItertimeError> {
    let (train, test) = split.pick(rows);
    let model = fit(kind, &train)?;
    let stats = error_stats(&model, &test);
    Ok((model, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth() -> PacerParams {
        PacerParams {
            knot_bsz: vec![8.0, 32.0, 128.0],
            knot_time_s: vec![0.028, 0.052, 0.148],
            rho_packed: 0.1,
            rho_dist: 0.02,
            alpha_r: 0.005,
            beta_r: 0.002,
            alpha_n: 0.03,
            beta_n: 0.001,
            kappa_n: 0.05,
            nu_n: 0.01,
            gamma: 2.0,
        }
    }

    /// A synthetic table in the Pollux layout: every placement up to 4 nodes × 4
    /// replicas and a few scalability rows, with ±1% deterministic "noise".
    fn table(p: &PacerParams) -> Vec<StepRow> {
        let mut rows = Vec::new();
        let mut rng = SplitMix64(7);
        let mut push = |c: StepConfig| {
            let noise = 1.0 + 0.02 * ((rng.next_u64() % 1000) as f64 / 1000.0 - 0.5);
            let step = p.step_time(&c) * noise;
            let tc = p.compute_time(&c);
            rows.push(StepRow {
                config: c,
                step_time_s: step,
                sync_time_s: (step - tc).max(0.0),
                source: format!("synthetic:{}", rows.len() + 2),
            });
        };
        for nodes in 1..=4u32 {
            for k in 1..=4u32 {
                for b in [8.0, 32.0, 128.0] {
                    push(StepConfig {
                        nodes,
                        replicas: nodes * k,
                        max_per_node: k,
                        group: placement_group(&vec![k; nodes as usize]),
                        local_bsz: b,
                    });
                }
            }
        }
        for (n, r) in [(6, 6), (8, 16), (12, 24), (16, 32), (16, 64)] {
            for b in [8.0, 64.0] {
                push(StepConfig::even(n, r, b));
            }
        }
        rows
    }

    #[test]
    fn every_model_fits_a_synthetic_table_and_pacer_fits_it_best() {
        let rows = table(&truth());
        let split = split_random(rows.len(), 0.3, 1);
        let mut med = Vec::new();
        for kind in ModelKind::ALL {
            let (_, stats) = evaluate(kind, &rows, &split).unwrap();
            assert_eq!(stats.rows, split.test.len());
            med.push(stats.median_abs_pct_error);
        }
        assert!(med[2] < 3.0, "pacer median {med:?}");
        assert!(med[2] <= med[0] && med[2] <= med[1] + 0.5, "{med:?}");
    }

    #[test]
    fn support_tells_measured_interpolated_and_extrapolated_apart() {
        let rows = table(&truth());
        let model = fit(ModelKind::PacerTable, &rows).unwrap();
        let c = rows
            .iter()
            .find(|r| r.config.local_bsz == 32.0)
            .unwrap()
            .config;
        let at = |b: f64| model.support(&StepConfig { local_bsz: b, ..c });
        assert_eq!(at(32.0), Support::Measured);
        assert_eq!(at(32.5), Support::Measured);
        assert_eq!(at(48.0), Support::Interpolated);
        assert_eq!(at(256.0), Support::Extrapolated);
        let unseen = StepConfig {
            group: u64::MAX,
            ..c
        };
        assert_eq!(model.support(&unseen), Support::Extrapolated);
        let plain = fit(ModelKind::Pacer, &rows).unwrap();
        assert_eq!(plain.support(&c), Support::Extrapolated);
    }

    #[test]
    fn extrapolation_split_holds_out_largest_replica_counts() {
        let rows = table(&truth());
        let s = split_extrapolate(&rows, 0.2);
        let max_train = s
            .train
            .iter()
            .map(|&i| rows[i].config.replicas)
            .max()
            .unwrap();
        let min_test = s
            .test
            .iter()
            .map(|&i| rows[i].config.replicas)
            .min()
            .unwrap();
        assert!(max_train < min_test);
        assert!(s.test.len() as f64 >= 0.2 * rows.len() as f64);
        let (_, stats) = evaluate(ModelKind::Pacer, &rows, &s).unwrap();
        assert!(stats.median_abs_pct_error < 5.0, "{stats:?}");
    }

    #[test]
    fn noise_floor_recovers_known_noise_and_ignores_shared_curvature() {
        // 40 placements, 9 batches each, on a curve with a shared wiggle; log noise
        // uniform in ±a has σ = a/√3.
        let mut rng = SplitMix64(3);
        let mut rows = Vec::new();
        let a = 0.05;
        for g in 1..=40u64 {
            for (j, b) in [4.0, 6.0, 8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0]
                .iter()
                .enumerate()
            {
                let wiggle = if j % 3 == 1 { 1.15 } else { 1.0 };
                let u = (rng.next_u64() % 100_000) as f64 / 100_000.0 * 2.0 - 1.0;
                rows.push(StepRow {
                    config: StepConfig {
                        nodes: 1,
                        replicas: 1,
                        max_per_node: 1,
                        local_bsz: *b,
                        group: g,
                    },
                    step_time_s: (0.01 + 0.001 * b) * wiggle * (a * u).exp(),
                    sync_time_s: 0.0,
                    source: String::new(),
                });
            }
        }
        let f = noise_floor(&rows).unwrap();
        let sigma = 100.0 * a / 3f64.sqrt();
        assert!((f.sigma_pct / sigma - 1.0).abs() < 0.25, "{f:?} vs {sigma}");
        // The shared wiggle inflates the raw estimate, not the centred one.
        assert!(f.sigma_raw_pct > 1.5 * f.sigma_pct, "{f:?}");
        assert!(f.median_abs_pct < f.p90_abs_pct);
    }

    #[test]
    fn repeat_floor_measures_noise_from_node_order_repeats() {
        // 4-node placements with 1..=4 replicas per node, each multiset in ascending
        // and descending node order (pairs, as in the traces), on one true curve with
        // Gaussian log noise σ = 4%.
        let sigma = 0.04;
        let mut rng = SplitMix64(11);
        let mut gauss = || {
            let u1 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            let u2 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        };
        let mut rows = Vec::new();
        let mut true_abs = Vec::new();
        for code in 0..256u32 {
            let p: Vec<u32> = (0..4).map(|i| (code >> (2 * i)) % 4 + 1).collect();
            let up = p.windows(2).all(|w| w[0] <= w[1]);
            let down = p.windows(2).all(|w| w[0] >= w[1]);
            if !(up || down) {
                continue;
            }
            for b in [8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0, 91.0] {
                let e = sigma * gauss();
                let c = StepConfig {
                    nodes: 4,
                    replicas: p.iter().sum(),
                    max_per_node: *p.iter().max().unwrap(),
                    local_bsz: b,
                    group: placement_group(&p),
                };
                rows.push(StepRow {
                    config: c,
                    step_time_s: (0.1 + 0.01 * b) * e.exp(),
                    sync_time_s: 0.0,
                    source: String::new(),
                });
                true_abs.push((rows.len() - 1, e.abs()));
            }
        }
        // A row whose group does not decode to its configuration stays out.
        rows.push(StepRow {
            config: StepConfig {
                nodes: 3,
                ..rows[0].config
            },
            ..rows[0].clone()
        });
        let f = repeat_floor(&rows, 0).unwrap();
        // 1111, 2222, 3333, 4444 have no partner; the odd row is excluded.
        assert_eq!(f.members.len(), 8 * 2 * (35 - 4), "{}", f.members.len());
        assert_eq!(f.classes, 35 - 4);
        let expect_med = 100.0 * (0.6745 * sigma).exp_m1();
        let expect_p90 = 100.0 * (1.6449 * sigma).exp_m1();
        assert!((f.median_abs_pct / expect_med - 1.0).abs() < 0.12, "{f:?}");
        assert!((f.p90_abs_pct / expect_p90 - 1.0).abs() < 0.12, "{f:?}");
        assert!(
            (f.within_median_abs_pct / expect_med - 1.0).abs() < 0.15,
            "{f:?}"
        );
        // The hard bound is below the error of the true curve itself.
        let truth_mean = 100.0
            * f.members
                .iter()
                .map(|&i| true_abs.iter().find(|t| t.0 == i).unwrap().1)
                .sum::<f64>()
            / f.members.len() as f64;
        assert!(
            f.mean_abs_log_bound_pct <= truth_mean,
            "{f:?} vs {truth_mean}"
        );
        assert!(
            f.mean_abs_log_bound_pct > 0.5 * truth_mean,
            "{f:?} vs {truth_mean}"
        );
        // The replica filter, and no repeats at all.
        let big = repeat_floor(&rows, 15).unwrap();
        assert!(big.members.iter().all(|&i| rows[i].config.replicas >= 15));
        assert!(big.members.len() < f.members.len());
        let singles: Vec<StepRow> = rows
            .iter()
            .filter(|r| [1111, 2222].contains(&r.config.group))
            .cloned()
            .collect();
        assert_eq!(repeat_floor(&singles, 0), None);
    }

    /// Rows of the three node orders of {1, 3, 4, 4} at 8 batches, with log-residual
    /// `res(placement index, batch index)` over the `truth()` model.
    fn sibling_rows(res: impl Fn(usize, usize) -> f64) -> Vec<StepRow> {
        let p = truth();
        let mut rows = Vec::new();
        for (i, place) in [[1, 3, 4, 4], [4, 1, 3, 4], [4, 4, 1, 3]]
            .iter()
            .enumerate()
        {
            for (j, b) in [8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0, 91.0]
                .iter()
                .enumerate()
            {
                let c = StepConfig {
                    nodes: 4,
                    replicas: 12,
                    max_per_node: 4,
                    local_bsz: *b,
                    group: placement_group(place),
                };
                rows.push(StepRow {
                    config: c,
                    step_time_s: p.step_time(&c) * res(i, j).exp(),
                    sync_time_s: 0.0,
                    source: format!("t:{i}:{j}"),
                });
            }
        }
        rows
    }

    #[test]
    fn table_borrows_node_order_siblings_only_when_leave_one_out_says_so() {
        // A batch-to-batch wiggle shared by the node orders, on top of a per-placement
        // offset: a held-out row is found in its siblings, not its own neighbours.
        let offset = [0.03, -0.02, 0.05];
        let wiggle = |j: usize| if j.is_multiple_of(2) { 0.06 } else { -0.04 };
        let mut rows = sibling_rows(|i, j| offset[i] + wiggle(j));
        let held = rows.remove(3); // placement 0, batch 23
        let t = PacerTable::new(truth(), &rows);
        assert_eq!(t.sibling_weight, 1.0);
        let want = offset[0] + wiggle(3);
        assert!(
            (t.residual(&held.config) - want).abs() < 1e-9,
            "{}",
            t.residual(&held.config)
        );
        let own_only = PacerTable {
            sibling_weight: 0.0,
            ..t.clone()
        };
        assert!((own_only.residual(&held.config) - want).abs() > 0.05);
        // Residuals linear in ln(batch) with a slope of each placement's own: its
        // neighbours know, its siblings mislead, and the weight stays 0.
        let slope = [0.04, -0.03, 0.01];
        let mut rows = sibling_rows(|i, j| slope[i] * j as f64);
        let held = rows.remove(3);
        let t = PacerTable::new(truth(), &rows);
        assert_eq!(t.sibling_weight, 0.0);
        assert!((t.residual(&held.config) - slope[0] * 3.0).abs() < 0.01);
    }

    #[test]
    fn table_extends_a_placement_by_the_shape_the_others_share_when_it_pays() {
        // Ten placements whose residuals share a knee at the largest batches the model
        // does not have, each with its own offset; one placement lacks its last batch.
        let batches = [8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0, 91.0];
        let knee = |j: usize| if j >= 6 { 0.08 * (j - 5) as f64 } else { 0.0 };
        let rows_for = |res: &dyn Fn(usize, usize) -> f64| {
            let p = truth();
            let mut rows = Vec::new();
            for g in 1..=10u64 {
                for (j, b) in batches.iter().enumerate() {
                    let c = StepConfig {
                        nodes: 1,
                        replicas: 1,
                        max_per_node: 1,
                        local_bsz: *b,
                        group: g,
                    };
                    rows.push(StepRow {
                        config: c,
                        step_time_s: p.step_time(&c) * res(g as usize, j).exp(),
                        sync_time_s: 0.0,
                        source: String::new(),
                    });
                }
            }
            rows
        };
        let mut rows = rows_for(&|g, j| 0.01 * g as f64 + knee(j));
        let held = rows.remove(7); // group 1 at batch 91
        let t = PacerTable::new(truth(), &rows);
        assert_eq!(t.edge_weight, 1.0);
        let want = 0.01 + knee(7);
        assert!((t.residual(&held.config) - want).abs() < 1e-9);
        let flat = PacerTable {
            edge_weight: 0.0,
            ..t.clone()
        };
        assert!((flat.residual(&held.config) - want).abs() > 0.07);
        // Fewer than three other placements measured both batches: no shape, the
        // nearest measured residual as before.
        let mut rows: Vec<StepRow> = rows_for(&|g, j| 0.01 * g as f64 + knee(j))
            .into_iter()
            .filter(|r| r.config.group <= 3)
            .collect();
        let held = rows.remove(7);
        let t = PacerTable::new(truth(), &rows);
        assert_eq!(t.edge_weight, 0.0);
        assert!((t.residual(&held.config) - (0.01 + knee(6))).abs() < 1e-9);
    }

    #[test]
    fn random_split_is_deterministic_and_disjoint() {
        let a = split_random(100, 0.3, 42);
        assert_eq!(a, split_random(100, 0.3, 42));
        assert_ne!(a, split_random(100, 0.3, 43));
        assert_eq!(a.test.len(), 30);
        assert!(a.test.iter().all(|i| !a.train.contains(i)));
    }

    #[test]
    fn too_few_rows_and_bad_rows_are_named() {
        let rows = table(&truth());
        let e = fit(ModelKind::Ernest, &rows[..2]).unwrap_err();
        assert!(e.to_string().contains("too few rows"), "{e}");
        let mut bad = rows.clone();
        bad[3].step_time_s = 0.0;
        let e = fit(ModelKind::Pacer, &bad).unwrap_err();
        assert!(e.to_string().starts_with("synthetic:5:"), "{e}");
    }

    #[test]
    fn rows_that_follow_no_model_are_reported_not_fitted() {
        // Step time that jumps by 10× between neighbouring batches.
        let mut rows = table(&truth());
        for (i, r) in rows.iter_mut().enumerate() {
            r.step_time_s *= if i % 2 == 0 { 10.0 } else { 0.1 };
            r.sync_time_s = 0.0;
        }
        let e = fit(ModelKind::Ernest, &rows).unwrap_err();
        assert!(e.to_string().contains("did not converge"), "{e}");
    }

    #[test]
    fn pacer_jacobian_matches_finite_differences() {
        let rows = table(&truth());
        let t = truth();
        let mut values = t.knot_time_s.clone();
        values.extend(t.tail());
        let np = values.len();
        let free: Vec<usize> = (0..np).collect();
        let x = PacerProblem::encode(&values, &free, 3 + GAM);
        let mut prob = PacerProblem {
            rows: &rows,
            knots: t.knot_bsz.clone(),
            values,
            free,
            x: x.clone(),
        };
        prob.set_params(&x);
        let j = prob.jacobian().unwrap();
        let r0 = prob.residuals().unwrap();
        for c in 0..np {
            let mut x2 = x.clone();
            x2[c] += 1e-6;
            prob.set_params(&x2);
            let r1 = prob.residuals().unwrap();
            for row in 0..r0.len() {
                let fd = (r1[row] - r0[row]) / 1e-6;
                assert!(
                    (fd - j[(row, c)]).abs() < 1e-4 * (1.0 + fd.abs()),
                    "row {row} col {c}: fd {fd} vs {}",
                    j[(row, c)]
                );
            }
            prob.set_params(&x);
        }
    }
}
