//! The pacer step-time model: knotted compute curve, co-location slowdown, node- and packing-aware network term; fitted by Levenberg–Marquardt.

use super::*;

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
pub(super) const N_TAIL: usize = 9;
pub(super) const RHO_K: usize = 0;
pub(super) const RHO_D: usize = 1;
pub(super) const A_R: usize = 2;
pub(super) const B_R: usize = 3;
pub(super) const A_N: usize = 4;
pub(super) const B_N: usize = 5;
pub(super) const K_N: usize = 6;
pub(super) const NU_N: usize = 7;
pub(super) const GAM: usize = 8;
/// Most knots in the compute curve (more measured batches are thinned).
pub(super) const MAX_KNOTS: usize = 24;
pub(super) const LOWER: f64 = 1e-9;
pub(super) const GAMMA_MAX: f64 = 10.0;
pub(super) const NO_NETWORK_S: f64 = 1e-8;

/// `(tc^γ + tn^γ)^(1/γ)` without overflow.
pub(super) fn overlap(tc: f64, tn: f64, gamma: f64) -> f64 {
    let hi = tc.max(tn);
    let lo = tc.min(tn);
    hi * (1.0 + (lo / hi).powf(gamma)).powf(1.0 / gamma)
}

/// Network parameters (tail offsets) a config uses, with their feature values.
pub(super) fn pacer_network_features(c: &StepConfig) -> Vec<(usize, f64)> {
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
pub(super) fn pacer_compute_features(c: &StepConfig) -> [(usize, f64); 2] {
    [
        (RHO_K, if c.max_per_node > 1 { 1.0 } else { 0.0 }),
        (RHO_D, if c.replicas > 1 { 1.0 } else { 0.0 }),
    ]
}

/// Knot weights of the piecewise-linear compute curve at `b`: `(i, 1−w), (i+1, w)`.
/// Below the first knot the curve is flat (a GPU is no faster on fewer samples);
/// above the last it continues the last segment.
pub(super) fn knot_weights(knots: &[f64], b: f64) -> [(usize, f64); 2] {
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
    pub(super) fn tail(&self) -> [f64; N_TAIL] {
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

/// Weight of the compute-time residuals relative to the step-time ones: compute
/// time pins the compute curve so the network terms cannot absorb compute.
pub(super) const COMPUTE_WEIGHT: f64 = 0.5;
pub(super) const REG_GAMMA: f64 = 1e-3;

/// The pacer model's residuals over measured rows, in the parameter layout of
/// [`PacerParams::from_vec`]: knot times, then the tail (γ at `knots + GAM`).
pub(super) struct PacerModel<'a> {
    pub(super) rows: &'a [StepRow],
    pub(super) knots: Vec<f64>,
}

impl PacerModel<'_> {
    /// Every parameter positive except γ in `[1, GAMMA_MAX]`.
    pub(super) fn bounds(&self, np: usize) -> Vec<Bound> {
        let g = self.knots.len() + GAM;
        (0..np)
            .map(|i| {
                if i == g {
                    Bound::Between(1.0, GAMMA_MAX)
                } else {
                    Bound::Above(LOWER)
                }
            })
            .collect()
    }

    /// Unconstrained coordinates of the free parameters at `values`.
    pub(super) fn encode(values: &[f64], free: &[usize], g: usize) -> DVector<f64> {
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
}

impl Residuals for PacerModel<'_> {
    fn n_residuals(&self) -> usize {
        2 * self.rows.len() + 1
    }

    /// Residuals (log-time errors) and their analytic Jacobian in parameter space.
    fn eval(&self, p: &[f64], jp: &mut DMatrix<f64>) -> DVector<f64> {
        let nk = self.knots.len();
        let w = 1.0 / (self.rows.len() as f64).sqrt();
        let nr = self.n_residuals();
        let mut r = DVector::zeros(nr);
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
        r
    }
}

/// Knots at the measured local batches (thinned geometrically beyond [`MAX_KNOTS`]).
pub(super) fn choose_knots(rows: &[StepRow]) -> Vec<f64> {
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

pub(super) fn fit_pacer(rows: &[StepRow]) -> Result<PacerParams, ItertimeError> {
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
    let model = PacerModel {
        rows,
        knots: knots.clone(),
    };
    let bounds = model.bounds(np);
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut last_failure = String::new();
    for gamma0 in [1.5, 3.0, 6.0] {
        let mut start = values.clone();
        start[g] = gamma0;
        let x = PacerModel::encode(&start, &free, g);
        let (solved, report) = Bounded::new(&model, &bounds, start, free.clone(), x).minimize();
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
