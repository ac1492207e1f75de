use super::{eval_chunks, gemm, softmax_xent, BatchStats, Model, Quality};
use crate::data::{Dataset, SplitMix64};
use crate::optim::OptimSpec;

/// Which loss a linear model minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearLoss {
    /// Multinomial logistic regression (softmax cross-entropy).
    Softmax,
    /// Crammer–Singer multiclass hinge: `max(0, 1 + max_{j≠y} s_j − s_y)`.
    Hinge,
}

/// Scores `s = x·W + b`; parameters `[W (dim × classes), b (classes)]`.
#[derive(Debug, Clone)]
pub struct Linear {
    dim: usize,
    classes: usize,
    loss: LinearLoss,
}

impl Linear {
    pub fn new(dim: usize, classes: usize, loss: LinearLoss) -> Self {
        Linear { dim, classes, loss }
    }

    fn scores(&self, params: &[f32], x: &[f32], b: usize, out: &mut Vec<f32>) {
        let (d, c) = (self.dim, self.classes);
        out.clear();
        for _ in 0..b {
            out.extend_from_slice(&params[d * c..]);
        }
        gemm(b, d, c, 1.0, x, false, &params[..d * c], false, 1.0, out);
    }

    /// Turns scores into d(loss)/d(scores) summed over the batch (not yet averaged).
    fn dscores(&self, s: &mut [f32], y: &[u32]) -> (f64, u32) {
        let c = self.classes;
        match self.loss {
            LinearLoss::Softmax => {
                let r = softmax_xent(s, y, c);
                for (row, &l) in s.chunks_mut(c).zip(y) {
                    row[l as usize] -= 1.0;
                }
                r
            }
            LinearLoss::Hinge => {
                let (mut loss, mut correct) = (0.0f64, 0u32);
                for (row, &l) in s.chunks_mut(c).zip(y) {
                    let l = l as usize;
                    let (mut rival, mut best) = (usize::MAX, f32::NEG_INFINITY);
                    for (j, &v) in row.iter().enumerate() {
                        if j != l && v > best {
                            best = v;
                            rival = j;
                        }
                    }
                    if row[l] > best {
                        correct += 1;
                    }
                    let margin = 1.0 + best - row[l];
                    row.iter_mut().for_each(|v| *v = 0.0);
                    if margin > 0.0 && rival != usize::MAX {
                        loss += margin as f64;
                        row[rival] = 1.0;
                        row[l] = -1.0;
                    }
                }
                (loss, correct)
            }
        }
    }
}

impl Model for Linear {
    fn name(&self) -> &'static str {
        match self.loss {
            LinearLoss::Softmax => "logreg",
            LinearLoss::Hinge => "svm",
        }
    }
    fn n_params(&self) -> usize {
        self.dim * self.classes + self.classes
    }
    fn init(&self, seed: u64, _train: &Dataset) -> Vec<f32> {
        // Small random weights: zero would do for a convex model, but random keeps the
        // correctness test meaningful (a zero start hides transposition bugs).
        let mut rng = SplitMix64(seed);
        (0..self.n_params())
            .map(|_| (rng.unit_f32() - 0.5) * 0.01)
            .collect()
    }
    fn loss_grad(&self, params: &[f32], x: &[f32], y: &[u32], grad: &mut [f32]) -> BatchStats {
        let (d, c, b) = (self.dim, self.classes, y.len());
        let mut s = Vec::with_capacity(b * c);
        self.scores(params, x, b, &mut s);
        let (loss_sum, correct) = self.dscores(&mut s, y);
        let inv = 1.0 / b.max(1) as f32;
        // gW = Xᵀ·dS / b ; gb = Σ_rows dS / b
        gemm(d, b, c, inv, x, true, &s, false, 0.0, &mut grad[..d * c]);
        let gb = &mut grad[d * c..];
        gb.iter_mut().for_each(|v| *v = 0.0);
        for row in s.chunks(c) {
            for (g, v) in gb.iter_mut().zip(row) {
                *g += v * inv;
            }
        }
        BatchStats { loss_sum, correct }
    }
    fn evaluate(&self, params: &[f32], _train: &Dataset, test: &Dataset) -> Quality {
        let mut s = Vec::new();
        eval_chunks(test, |x, y| {
            self.scores(params, x, y.len(), &mut s);
            self.dscores(&mut s, y)
        })
    }
    fn default_optimizer(&self) -> OptimSpec {
        match self.loss {
            LinearLoss::Softmax => OptimSpec::Sgd {
                lr: 0.5,
                momentum: 0.9,
                weight_decay: 0.0,
            },
            LinearLoss::Hinge => OptimSpec::Sgd {
                lr: 0.05,
                momentum: 0.9,
                weight_decay: 1e-4,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::check_gradient;

    #[test]
    fn gradients_match_finite_differences() {
        let d = crate::data::load("tiny").unwrap().train;
        check_gradient(&Linear::new(d.dim, d.classes, LinearLoss::Softmax), &d, 5);
        check_gradient(&Linear::new(d.dim, d.classes, LinearLoss::Hinge), &d, 6);
    }
}
