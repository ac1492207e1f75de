//! Online loss-curve prediction, as SLAQ does it (docs/algorithms.md §3a).
//!
//! A training job reports its loss `L_k` after iteration `k`. To know what one
//! more worker is worth, the scheduler needs `L` a few hundred iterations ahead.
//! SLAQ fits a curve to the recent history by *weighted* non-linear least
//! squares: the point `i` of `n` weighs `decay^(n−1−i)` (decay 0.95, so recent
//! points dominate and the fit follows the job's current regime), over at most
//! the last 1,000 points. Two forms:
//!
//! - [`CurveForm::InverseQuadratic`] `L(k) = 1/(a·k² + b·k + c) + d`, for
//!   sublinearly converging methods (SGD on convex losses, `O(1/k)` or
//!   `O(1/k²)`): SLAQ's default;
//! - [`CurveForm::Exponential`] `L(k) = a·exp(−b·k) + d` (SLAQ's `μ^(k−b) + c`
//!   rewritten), for linearly converging methods (full-batch gradient descent on
//!   strongly convex losses, Lloyd's K-means).
//!
//! [`fit_best`] fits both and keeps the one with the lower weighted residual:
//! the form is chosen per job by fit quality, and re-chosen at every refit.
//! `a, b, c > 0` are enforced by writing them as `exp(u)`; the fit is done on
//! `k / k_max` and `L / L_scale` so that the four parameters are O(1), and
//! Levenberg–Marquardt runs on the normal equations with analytic derivatives
//! (at most 4 parameters: a 4×4 Cholesky per step, no n×4 Jacobian stored or
//! QR-factored, which made the fit the simulator's hot spot).
//!
//! [`LossPredictor`] is the online wrapper a job (simulated or real) keeps:
//! `observe(k, loss)` per iteration, `refit()` when the scheduler is about to
//! ask, `predict(k)`. It also keeps the *normaliser* SLAQ uses to compare jobs
//! with different loss scales: the largest one-iteration loss decrease seen.
//! [`last_delta_prediction`] is the paper's strawman (the next decreases equal
//! the last one), kept for the prediction-error comparison.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// SLAQ's weight decay per point (most recent point weighs 1).
pub const DEFAULT_DECAY: f64 = 0.95;
/// SLAQ's history window.
pub const DEFAULT_MAX_POINTS: usize = 1000;

/// Shape of a fitted loss curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CurveForm {
    /// `1/(a·k² + b·k + c) + d`.
    InverseQuadratic,
    /// `a·exp(−b·k) + d`.
    Exponential,
}

/// A fitted loss curve `L(k)`; cheap to copy and evaluate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossCurve {
    pub form: CurveForm,
    /// `(a, b, c, d)` in scaled units (`c` unused by the exponential form).
    pub params: [f64; 4],
    /// Iterations are scaled by this before evaluation.
    pub k_scale: f64,
    /// Losses are scaled by this.
    pub loss_scale: f64,
}

impl LossCurve {
    fn scaled(form: CurveForm, p: &[f64; 4], x: f64) -> f64 {
        match form {
            CurveForm::InverseQuadratic => 1.0 / (p[0] * x * x + p[1] * x + p[2]) + p[3],
            CurveForm::Exponential => p[0] * (-p[1] * x).exp() + p[3],
        }
    }

    /// Predicted loss after iteration `k`.
    ///
    /// ```
    /// use pacer_predict::loss_curve::{CurveForm, LossCurve};
    /// let c = LossCurve { form: CurveForm::Exponential, params: [1.0, 1.0, 0.0, 0.5],
    ///                     k_scale: 10.0, loss_scale: 2.0 };
    /// assert!((c.value(0.0) - 3.0).abs() < 1e-12);
    /// assert!(c.value(100.0) < c.value(10.0));
    /// ```
    pub fn value(&self, k: f64) -> f64 {
        self.loss_scale * Self::scaled(self.form, &self.params, k / self.k_scale)
    }

    /// The loss the curve converges to (`k → ∞`).
    pub fn asymptote(&self) -> f64 {
        self.loss_scale * self.params[3]
    }
}

/// Errors of a curve fit.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LossFitError {
    #[error("need at least 4 finite (iteration, loss) points to fit a loss curve, got {0}")]
    TooFewPoints(usize),
    #[error("iterations and losses differ in length ({0} vs {1})")]
    Mismatch(usize, usize),
    #[error("Levenberg–Marquardt did not converge for either curve form")]
    NoConvergence,
}

/// A fit and its quality.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LossFit {
    pub curve: LossCurve,
    /// Weighted RMS residual in scaled loss units (lower is better).
    pub weighted_rms: f64,
}

/// Model value and its derivatives with respect to the unconstrained
/// coordinates `u` ((ln a, ln b, ln c, d) or (ln a, ln b, d)) at scaled `x`.
fn value_and_grad(form: CurveForm, p: &[f64; 4], x: f64) -> (f64, [f64; 4]) {
    match form {
        CurveForm::InverseQuadratic => {
            let g = p[0] * x * x + p[1] * x + p[2];
            let dg = -1.0 / (g * g);
            (
                1.0 / g + p[3],
                [dg * p[0] * x * x, dg * p[1] * x, dg * p[2], 1.0],
            )
        }
        CurveForm::Exponential => {
            let e = (-p[1] * x).exp();
            (p[0] * e + p[3], [p[0] * e, -p[0] * p[1] * x * e, 1.0, 0.0])
        }
    }
}

fn n_params(form: CurveForm) -> usize {
    match form {
        CurveForm::InverseQuadratic => 4,
        CurveForm::Exponential => 3,
    }
}

/// Curve parameters `(a, b, c, d)` from the unconstrained coordinates.
fn params_of(form: CurveForm, u: &[f64; 4]) -> [f64; 4] {
    let e = |v: f64| v.clamp(-50.0, 50.0).exp();
    match form {
        CurveForm::InverseQuadratic => [e(u[0]), e(u[1]), e(u[2]), u[3]],
        CurveForm::Exponential => [e(u[0]), e(u[1]), 0.0, u[2]],
    }
}

/// Weighted sum of squared residuals at `u`; with `normal`, also the normal
/// equations `JᵀJ` and `Jᵀr` (accumulated in one pass, J never stored).
fn weighted_sse(
    d: &Prepared,
    form: CurveForm,
    u: &[f64; 4],
    normal: Option<(&mut [[f64; 4]; 4], &mut [f64; 4])>,
) -> f64 {
    let p = params_of(form, u);
    let m = n_params(form);
    let mut sse = 0.0;
    match normal {
        None => {
            for i in 0..d.x.len() {
                let r = d.sqrt_w[i] * (LossCurve::scaled(form, &p, d.x[i]) - d.y[i]);
                sse += r * r;
            }
        }
        Some((jtj, jtr)) => {
            *jtj = [[0.0; 4]; 4];
            *jtr = [0.0; 4];
            for i in 0..d.x.len() {
                let w = d.sqrt_w[i];
                let (f, g) = value_and_grad(form, &p, d.x[i]);
                let r = w * (f - d.y[i]);
                sse += r * r;
                for a in 0..m {
                    let ja = w * g[a];
                    jtr[a] += ja * r;
                    for (cell, gb) in jtj[a][..m].iter_mut().zip(&g) {
                        *cell += ja * w * gb;
                    }
                }
            }
        }
    }
    sse
}

/// Solves the `m × m` symmetric positive definite system `A x = b` (Cholesky);
/// `None` when `A` is not positive definite.
fn solve_spd(a: &[[f64; 4]; 4], b: &[f64; 4], m: usize) -> Option<[f64; 4]> {
    let mut l = [[0.0f64; 4]; 4];
    for i in 0..m {
        for j in 0..=i {
            let s = a[i][j] - (0..j).map(|k| l[i][k] * l[j][k]).sum::<f64>();
            if i == j {
                if !(s > 0.0 && s.is_finite()) {
                    return None;
                }
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let mut y = [0.0f64; 4];
    for i in 0..m {
        y[i] = (b[i] - (0..i).map(|k| l[i][k] * y[k]).sum::<f64>()) / l[i][i];
    }
    let mut x = [0.0f64; 4];
    for i in (0..m).rev() {
        x[i] = (y[i] - (i + 1..m).map(|k| l[k][i] * x[k]).sum::<f64>()) / l[i][i];
    }
    Some(x)
}

/// Convergence: the step shrinks the weighted SSE by less than this fraction, or
/// moves no coordinate by more than this (relative). MINPACK's recommended
/// tolerance, √ε ≈ 1.5e-8: tighter only polishes digits that no prediction uses,
/// while the ill-determined directions of the 4-parameter form (a, b, c trade
/// off along a flat valley) take hundreds of tiny steps.
const LM_TOL: f64 = 1.5e-8;
/// Most Levenberg–Marquardt iterations of one fit.
const LM_MAX_ITERATIONS: usize = 200;

/// Weighted Levenberg–Marquardt from `u0` on the normal equations (the problem
/// has at most 4 parameters, so a 4×4 Cholesky per step replaces a QR of the
/// n×4 Jacobian); Marquardt's diagonal scaling, kept monotone as in MINPACK.
/// Returns the solution and its weighted sum of squared residuals.
fn levenberg_marquardt(d: &Prepared, form: CurveForm, u0: [f64; 4]) -> Option<([f64; 4], f64)> {
    let m = n_params(form);
    let mut u = u0;
    let (mut jtj, mut jtr) = ([[0.0; 4]; 4], [0.0; 4]);
    let mut sse = weighted_sse(d, form, &u, Some((&mut jtj, &mut jtr)));
    if !sse.is_finite() {
        return None;
    }
    let mut scale = [0.0f64; 4];
    let mut lambda = 1e-3;
    for _ in 0..LM_MAX_ITERATIONS {
        for a in 0..m {
            scale[a] = scale[a].max(jtj[a][a]).max(1e-300);
        }
        let mut accepted = None;
        while lambda < 1e16 {
            let mut damped = jtj;
            for a in 0..m {
                damped[a][a] += lambda * scale[a];
            }
            let neg: [f64; 4] = std::array::from_fn(|a| -jtr[a]);
            if let Some(step) = solve_spd(&damped, &neg, m) {
                let mut trial = u;
                for a in 0..m {
                    trial[a] += step[a];
                }
                let t = weighted_sse(d, form, &trial, None);
                if t.is_finite() && t < sse {
                    accepted = Some((trial, t, step));
                    break;
                }
            }
            lambda *= 4.0;
        }
        let Some((trial, t, step)) = accepted else {
            break;
        };
        lambda = (lambda / 3.0).max(1e-12);
        let decrease = sse - t;
        let small_step = (0..m).all(|a| step[a].abs() <= LM_TOL * (1.0 + trial[a].abs()));
        u = trial;
        sse = weighted_sse(d, form, &u, Some((&mut jtj, &mut jtr)));
        if decrease <= LM_TOL * sse || small_step {
            break;
        }
    }
    Some((u, sse))
}

/// Scaled data of one fit.
struct Prepared {
    x: Vec<f64>,
    y: Vec<f64>,
    sqrt_w: Vec<f64>,
    k_scale: f64,
    loss_scale: f64,
}

fn prepare(ks: &[f64], losses: &[f64], decay: f64) -> Result<Prepared, LossFitError> {
    if ks.len() != losses.len() {
        return Err(LossFitError::Mismatch(ks.len(), losses.len()));
    }
    let pts: Vec<(f64, f64)> = ks
        .iter()
        .zip(losses)
        .filter(|(k, l)| k.is_finite() && l.is_finite() && **k >= 0.0)
        .map(|(&k, &l)| (k, l))
        .collect();
    if pts.len() < 4 {
        return Err(LossFitError::TooFewPoints(pts.len()));
    }
    let k_scale = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let loss_scale = pts.iter().map(|p| p.1.abs()).fold(0.0, f64::max).max(1e-12);
    let n = pts.len();
    let decay = decay.clamp(1e-6, 1.0);
    Ok(Prepared {
        x: pts.iter().map(|p| p.0 / k_scale).collect(),
        y: pts.iter().map(|p| p.1 / loss_scale).collect(),
        sqrt_w: (0..n)
            .map(|i| decay.powi((n - 1 - i) as i32).sqrt())
            .collect(),
        k_scale,
        loss_scale,
    })
}

fn starts(form: CurveForm, d: &Prepared) -> Vec<[f64; 4]> {
    let n = d.y.len();
    let (y0, y1) = (d.y[0], d.y[n - 1]);
    let ymin = d.y.iter().copied().fold(f64::INFINITY, f64::min);
    let span = (y0 - ymin).abs().max(1e-6);
    let mut out = Vec::new();
    for floor in [ymin - 0.05 * span, ymin - 0.5 * span, 0.0] {
        let drop = (y0 - floor).max(1e-6);
        match form {
            CurveForm::InverseQuadratic => {
                let c = 1.0 / drop;
                // 1/(b·x + c) through the last point.
                let b = ((1.0 / (y1 - floor).max(1e-6) - c) / d.x[n - 1].max(1e-9)).max(1e-6);
                out.push([(0.1 * b).ln(), b.ln(), c.ln(), floor]);
                out.push([(b * b / c).max(1e-6).ln(), (0.1 * b).ln(), c.ln(), floor]);
            }
            CurveForm::Exponential => {
                let ratio = ((y1 - floor).max(1e-6 * drop) / drop).clamp(1e-9, 1.0 - 1e-9);
                let b = (-ratio.ln() / d.x[n - 1].max(1e-9)).max(1e-3);
                out.push([drop.ln(), b.ln(), floor, 0.0]);
            }
        }
    }
    out
}

/// Fits one form by weighted LM; returns the best of a few starts.
pub fn fit_form(
    ks: &[f64],
    losses: &[f64],
    form: CurveForm,
    decay: f64,
) -> Result<LossFit, LossFitError> {
    let d = prepare(ks, losses, decay)?;
    fit_prepared(&d, form)
}

/// Unconstrained LM coordinates of `prev` re-expressed in `d`'s scaling.
fn warm_start(prev: &LossCurve, d: &Prepared) -> Option<[f64; 4]> {
    let (kr, lr) = (d.k_scale / prev.k_scale, prev.loss_scale / d.loss_scale);
    let p = prev.params;
    let ln = |v: f64| (v > 0.0 && v.is_finite()).then(|| v.ln());
    Some(match prev.form {
        CurveForm::InverseQuadratic => [
            ln(p[0] * kr * kr / lr)?,
            ln(p[1] * kr / lr)?,
            ln(p[2] / lr)?,
            p[3] * lr,
        ],
        CurveForm::Exponential => [ln(p[0] * lr)?, ln(p[1] * kr)?, p[3] * lr, 0.0],
    })
}

/// Refits `prev`'s form from `prev` only (one LM run): the cheap online update.
pub fn fit_warm(
    ks: &[f64],
    losses: &[f64],
    prev: &LossCurve,
    decay: f64,
) -> Result<LossFit, LossFitError> {
    let d = prepare(ks, losses, decay)?;
    let u = warm_start(prev, &d).ok_or(LossFitError::NoConvergence)?;
    fit_from(&d, prev.form, vec![u])
}

fn fit_prepared(d: &Prepared, form: CurveForm) -> Result<LossFit, LossFitError> {
    fit_from(d, form, starts(form, d))
}

fn fit_from(d: &Prepared, form: CurveForm, starts: Vec<[f64; 4]>) -> Result<LossFit, LossFitError> {
    let wsum: f64 = d.sqrt_w.iter().map(|w| w * w).sum();
    let mut best: Option<LossFit> = None;
    for u in starts {
        let Some((u, sse)) = levenberg_marquardt(d, form, u) else {
            continue;
        };
        let rms = (sse / wsum).sqrt();
        let curve = LossCurve {
            form,
            params: params_of(form, &u),
            k_scale: d.k_scale,
            loss_scale: d.loss_scale,
        };
        if curve.params.iter().all(|v| v.is_finite()) && best.is_none_or(|b| rms < b.weighted_rms) {
            best = Some(LossFit {
                curve,
                weighted_rms: rms,
            });
        }
    }
    best.ok_or(LossFitError::NoConvergence)
}

/// Fits both forms and keeps the one with the lower weighted residual.
///
/// ```
/// use pacer_predict::loss_curve::{fit_best, CurveForm};
/// let ks: Vec<f64> = (0..200).map(|k| k as f64).collect();
/// let ls: Vec<f64> = ks.iter().map(|k| 2.0 * (-0.03 * k).exp() + 0.1).collect();
/// let fit = fit_best(&ks, &ls, 0.95).unwrap();
/// assert_eq!(fit.curve.form, CurveForm::Exponential);
/// assert!((fit.curve.value(300.0) - (2.0 * (-9.0f64).exp() + 0.1)).abs() < 1e-3);
/// ```
pub fn fit_best(ks: &[f64], losses: &[f64], decay: f64) -> Result<LossFit, LossFitError> {
    let d = prepare(ks, losses, decay)?;
    let a = fit_prepared(&d, CurveForm::InverseQuadratic);
    let b = fit_prepared(&d, CurveForm::Exponential);
    match (a, b) {
        (Ok(a), Ok(b)) => Ok(if b.weighted_rms < a.weighted_rms {
            b
        } else {
            a
        }),
        (Ok(a), Err(_)) => Ok(a),
        (Err(_), Ok(b)) => Ok(b),
        (Err(e), Err(_)) => Err(e),
    }
}

/// The strawman predictor: the loss keeps falling by the last observed decrease
/// per iteration, `L(k_n + h) = L_n − h·(L_{n−1} − L_n)/(k_n − k_{n−1})`.
pub fn last_delta_prediction(ks: &[f64], losses: &[f64], k: f64) -> Option<f64> {
    let n = ks.len().min(losses.len());
    if n < 2 {
        return None;
    }
    let dk = (ks[n - 1] - ks[n - 2]).max(1e-12);
    let slope = (losses[n - 1] - losses[n - 2]) / dk;
    Some(losses[n - 1] + slope * (k - ks[n - 1]))
}

/// Online loss history of one job with SLAQ's normaliser and curve fit.
#[derive(Debug, Clone)]
pub struct LossPredictor {
    history: VecDeque<(f64, f64)>,
    max_points: usize,
    decay: f64,
    first_loss: Option<f64>,
    last: Option<(f64, f64)>,
    max_delta_per_iter: f64,
    fit: Option<LossFit>,
    /// Points observed since the last refit.
    fresh: usize,
    /// Points observed since the last cold fit (after [`COLD_REFIT_POINTS`] the
    /// next refit re-chooses the form).
    since_cold: usize,
}

/// Fewest points before the curve fit is trusted over the last-Δ strawman.
pub const MIN_FIT_POINTS: usize = 10;
/// A full fit of both forms from cold starts once this many points arrived since
/// the last one; warm single-form updates in between. Counted in points, not
/// refits, so the fitting cost per iteration does not grow when the scheduler
/// asks more often (a shorter epoch).
pub const COLD_REFIT_POINTS: usize = 32;

impl Default for LossPredictor {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_POINTS, DEFAULT_DECAY)
    }
}

impl LossPredictor {
    pub fn new(max_points: usize, decay: f64) -> Self {
        LossPredictor {
            history: VecDeque::new(),
            max_points: max_points.max(4),
            decay,
            first_loss: None,
            last: None,
            max_delta_per_iter: 0.0,
            fit: None,
            fresh: 0,
            since_cold: 0,
        }
    }

    /// Records the loss after iteration `k` (iterations must increase).
    pub fn observe(&mut self, k: f64, loss: f64) {
        if !(k.is_finite() && loss.is_finite()) {
            return;
        }
        if let Some((k0, l0)) = self.last {
            if k <= k0 {
                return;
            }
            // SLAQ's Δ is per iteration; points may be several iterations apart.
            let d = (l0 - loss) / (k - k0);
            self.max_delta_per_iter = self.max_delta_per_iter.max(d);
        }
        self.first_loss.get_or_insert(loss);
        self.last = Some((k, loss));
        self.history.push_back((k, loss));
        while self.history.len() > self.max_points {
            self.history.pop_front();
        }
        self.fresh += 1;
        self.since_cold += 1;
    }

    /// Number of points kept.
    pub fn len(&self) -> usize {
        self.history.len()
    }

    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// Iteration and loss of the latest observation.
    pub fn last(&self) -> Option<(f64, f64)> {
        self.last
    }

    pub fn first_loss(&self) -> Option<f64> {
        self.first_loss
    }

    /// SLAQ's normaliser: the largest per-iteration loss decrease seen so far.
    pub fn max_delta_per_iter(&self) -> f64 {
        self.max_delta_per_iter
    }

    /// Refits if new points arrived since the last fit (and at least
    /// [`MIN_FIT_POINTS`] are kept); returns whether the fit changed. Refits
    /// warm-start from the previous fit; once [`COLD_REFIT_POINTS`] points arrived
    /// since the last cold fit, the refit fits both forms from scratch and keeps
    /// the better.
    pub fn refit(&mut self) -> bool {
        if self.fresh == 0 || self.history.len() < 4 {
            return false;
        }
        // Points weighing less than 1e-6 of the latest cannot move the fit; leave
        // them out (with decay 0.95: the last ~270 of the 1,000 kept).
        let window = if self.decay < 1.0 {
            ((1e-6f64).ln() / self.decay.ln()).ceil() as usize + 1
        } else {
            usize::MAX
        };
        let skip = self.history.len().saturating_sub(window);
        let (ks, ls): (Vec<f64>, Vec<f64>) = self.history.iter().skip(skip).copied().unzip();
        self.fresh = 0;
        if self.history.len() < MIN_FIT_POINTS {
            return false;
        }
        let warm = match self.fit {
            Some(prev) if self.since_cold < COLD_REFIT_POINTS => {
                fit_warm(&ks, &ls, &prev.curve, self.decay).ok()
            }
            _ => None,
        };
        if warm.is_none() {
            self.since_cold = 0;
        }
        match warm.map_or_else(|| fit_best(&ks, &ls, self.decay), Ok) {
            Ok(f) => {
                self.fit = Some(f);
                true
            }
            Err(_) => false,
        }
    }

    pub fn fit(&self) -> Option<LossFit> {
        self.fit
    }

    /// Predicted loss after iteration `k`: the fitted curve shifted to pass through
    /// the latest observation (the fit explains the shape; the last point anchors the
    /// level), or the strawman until a fit exists.
    pub fn predict(&self, k: f64) -> Option<f64> {
        let (kn, ln) = self.last?;
        match self.fit {
            Some(f) => Some(ln + f.curve.value(k) - f.curve.value(kn)),
            None => {
                let (ks, ls): (Vec<f64>, Vec<f64>) =
                    self.history.iter().rev().take(2).rev().copied().unzip();
                last_delta_prediction(&ks, &ls, k)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_inverse_quadratic() {
        let ks: Vec<f64> = (1..400).map(|k| k as f64).collect();
        let truth = |k: f64| 1.0 / (1e-5 * k * k + 0.02 * k + 0.5) + 0.3;
        let ls: Vec<f64> = ks.iter().map(|&k| truth(k)).collect();
        let f = fit_best(&ks, &ls, 0.95).unwrap();
        assert_eq!(f.curve.form, CurveForm::InverseQuadratic);
        for k in [450.0, 600.0] {
            assert!(
                (f.curve.value(k) - truth(k)).abs() < 2e-3,
                "{k}: {} vs {}",
                f.curve.value(k),
                truth(k)
            );
        }
    }

    #[test]
    fn warm_refit_matches_cold_fit() {
        let ks: Vec<f64> = (0..300).map(|k| k as f64).collect();
        let ls: Vec<f64> = ks
            .iter()
            .map(|k| 1.0 / (1e-4 * k * k + 0.05 * k + 1.0) + 0.2)
            .collect();
        let a = fit_best(&ks[..200], &ls[..200], 0.95).unwrap();
        let warm = fit_warm(&ks, &ls, &a.curve, 0.95).unwrap();
        let cold = fit_best(&ks, &ls, 0.95).unwrap();
        assert!((warm.curve.value(400.0) - cold.curve.value(400.0)).abs() < 2e-3);
    }

    #[test]
    fn analytic_gradient_matches_finite_differences() {
        for (form, u) in [
            (
                CurveForm::InverseQuadratic,
                [0.3f64.ln(), 2.0f64.ln(), 1.1f64.ln(), 0.1],
            ),
            (
                CurveForm::Exponential,
                [0.9f64.ln(), 2.5f64.ln(), 0.15, 0.0],
            ),
        ] {
            for i in 0..20 {
                let x = i as f64 / 19.0;
                let (_, g) = value_and_grad(form, &params_of(form, &u), x);
                for c in 0..n_params(form) {
                    let h = 1e-6;
                    let (mut up, mut dn) = (u, u);
                    up[c] += h;
                    dn[c] -= h;
                    let fd = (value_and_grad(form, &params_of(form, &up), x).0
                        - value_and_grad(form, &params_of(form, &dn), x).0)
                        / (2.0 * h);
                    assert!((fd - g[c]).abs() < 1e-6, "{form:?} col {c} x {x}");
                }
            }
        }
    }

    #[test]
    fn predictor_normaliser_and_anchor() {
        let mut p = LossPredictor::default();
        assert!(p.predict(1.0).is_none());
        for k in 0..100 {
            let k = k as f64;
            p.observe(k, 2.0 * (-0.05 * k).exp() + 0.5);
        }
        assert!((p.max_delta_per_iter() - 2.0 * (1.0 - (-0.05f64).exp())).abs() < 1e-9);
        let straw = p.predict(120.0).unwrap();
        assert!(p.refit());
        assert!(!p.refit(), "no new points: no refit");
        let fit = p.predict(120.0).unwrap();
        let truth = 2.0 * (-6.0f64).exp() + 0.5;
        assert!((fit - truth).abs() < 1e-3, "{fit} vs {truth}");
        assert!((straw - truth).abs() > (fit - truth).abs());
        assert!(matches!(
            fit_best(&[1.0, 2.0], &[1.0, 0.5], 0.95),
            Err(LossFitError::TooFewPoints(2))
        ));
    }
}
