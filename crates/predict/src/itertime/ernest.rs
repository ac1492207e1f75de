//! The Ernest / Hemingway system model and its exact non-negative least-squares fit.

use super::*;

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

/// Exact non-negative least squares on relative error: every subset of the four
/// features is solved unconstrained and the best all-non-negative solution kept
/// (16 tiny solves; the Jacobian of a linear model is its design matrix).
pub(super) fn fit_ernest(rows: &[StepRow]) -> Result<ErnestParams, ItertimeError> {
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
