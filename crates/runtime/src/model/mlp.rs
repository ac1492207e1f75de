use super::{eval_chunks, gemm, softmax_xent, BatchStats, Model, Pipelined, Quality};
use crate::data::{Dataset, SplitMix64};
use crate::optim::OptimSpec;

/// Two-layer perceptron `x → ReLU(x·W1 + b1) → ·W2 + b2 → softmax`.
/// Parameters `[W1 (dim × hidden), b1, W2 (hidden × classes), b2]`.
#[derive(Debug, Clone)]
pub struct Mlp {
    dim: usize,
    hidden: usize,
    classes: usize,
}

impl Mlp {
    pub fn new(dim: usize, hidden: usize, classes: usize) -> Self {
        Mlp {
            dim,
            hidden,
            classes,
        }
    }
    fn offsets(&self) -> (usize, usize, usize, usize) {
        let w1 = 0;
        let b1 = self.dim * self.hidden;
        let w2 = b1 + self.hidden;
        let b2 = w2 + self.hidden * self.classes;
        (w1, b1, w2, b2)
    }

    /// Hidden activations (after ReLU) and logits for `b` rows.
    fn forward(&self, p: &[f32], x: &[f32], b: usize, h: &mut Vec<f32>, out: &mut Vec<f32>) {
        let (d, hd, c) = (self.dim, self.hidden, self.classes);
        let (w1, b1, w2, b2) = self.offsets();
        h.clear();
        for _ in 0..b {
            h.extend_from_slice(&p[b1..b1 + hd]);
        }
        gemm(b, d, hd, 1.0, x, false, &p[w1..b1], false, 1.0, h);
        h.iter_mut().for_each(|v| *v = v.max(0.0));
        out.clear();
        for _ in 0..b {
            out.extend_from_slice(&p[b2..b2 + c]);
        }
        gemm(b, hd, c, 1.0, h, false, &p[w2..b2], false, 1.0, out);
    }
}

/// Input features per block of the first layer's forward pass: W1's rows (one per
/// input feature) lead the parameters, so a worker can multiply each block as soon
/// as its rows have arrived.
const BLOCKS: usize = 8;

impl Mlp {
    fn rows_per_block(&self) -> usize {
        self.dim.div_ceil(BLOCKS).max(1)
    }
}

impl Pipelined for Mlp {
    fn blocks(&self) -> usize {
        self.dim.div_ceil(self.rows_per_block())
    }
    fn block_end(&self, j: usize) -> usize {
        ((j + 1) * self.rows_per_block()).min(self.dim) * self.hidden
    }
    fn begin(&self, b: usize, h: &mut Vec<f32>) {
        h.clear();
        h.resize(b * self.hidden, 0.0);
    }
    fn forward_block(&self, p: &[f32], x: &[f32], b: usize, j: usize, h: &mut Vec<f32>) {
        let (d, hd) = (self.dim, self.hidden);
        let r = self.rows_per_block();
        let (r0, r1) = (j * r, ((j + 1) * r).min(d));
        if r0 >= r1 || b == 0 {
            return;
        }
        assert!(x.len() >= b * d && p.len() >= r1 * hd && h.len() >= b * hd);
        // h += x[:, r0..r1] · W1[r0..r1, :] (a column block of x: row stride d).
        // SAFETY: the assert bounds every element sgemm reads or writes: x rows
        // i < b at columns r0..r1 < d, W1 rows r0..r1 of length hd, h b × hd.
        unsafe {
            matrixmultiply::sgemm(
                b,
                r1 - r0,
                hd,
                1.0,
                x.as_ptr().add(r0),
                d as isize,
                1,
                p.as_ptr().add(r0 * hd),
                hd as isize,
                1,
                1.0,
                h.as_mut_ptr(),
                hd as isize,
                1,
            );
        }
    }
    fn finish(
        &self,
        p: &[f32],
        x: &[f32],
        y: &[u32],
        h: &mut Vec<f32>,
        grad: &mut [f32],
    ) -> BatchStats {
        let (d, hd, c, b) = (self.dim, self.hidden, self.classes, y.len());
        let (w1, b1, w2, b2) = self.offsets();
        // h holds x·W1 (all blocks): add b1, ReLU, then the output layer.
        for row in h.chunks_mut(hd) {
            for (v, bias) in row.iter_mut().zip(&p[b1..b1 + hd]) {
                *v = (*v + bias).max(0.0);
            }
        }
        let h = &*h;
        let mut s = Vec::with_capacity(b * c);
        for _ in 0..b {
            s.extend_from_slice(&p[b2..b2 + c]);
        }
        gemm(b, hd, c, 1.0, h, false, &p[w2..b2], false, 1.0, &mut s);
        let (loss_sum, correct) = softmax_xent(&mut s, y, c);
        let inv = 1.0 / b.max(1) as f32;
        for (row, &l) in s.chunks_mut(c).zip(y) {
            row[l as usize] -= 1.0;
        }
        // Output layer: gW2 = hᵀ·dS/b, gb2 = Σ dS/b.
        gemm(hd, b, c, inv, h, true, &s, false, 0.0, &mut grad[w2..b2]);
        let gb2 = &mut grad[b2..b2 + c];
        gb2.iter_mut().for_each(|v| *v = 0.0);
        for row in s.chunks(c) {
            for (g, v) in gb2.iter_mut().zip(row) {
                *g += v * inv;
            }
        }
        // Back through W2 and the ReLU: dH = (dS·W2ᵀ) ⊙ [h > 0].
        let mut dh = vec![0.0f32; b * hd];
        gemm(b, c, hd, 1.0, &s, false, &p[w2..b2], true, 0.0, &mut dh);
        for (g, &a) in dh.iter_mut().zip(h) {
            if a <= 0.0 {
                *g = 0.0;
            }
        }
        gemm(d, b, hd, inv, x, true, &dh, false, 0.0, &mut grad[w1..b1]);
        let gb1 = &mut grad[b1..w2];
        gb1.iter_mut().for_each(|v| *v = 0.0);
        for row in dh.chunks(hd) {
            for (g, v) in gb1.iter_mut().zip(row) {
                *g += v * inv;
            }
        }
        BatchStats { loss_sum, correct }
    }
}

impl Model for Mlp {
    fn name(&self) -> &'static str {
        "mlp"
    }
    fn n_params(&self) -> usize {
        self.offsets().3 + self.classes
    }
    fn init(&self, seed: u64, _train: &Dataset) -> Vec<f32> {
        // He-uniform for the ReLU layer, Glorot-uniform for the output; zero biases.
        let mut rng = SplitMix64(seed);
        let (_, b1, w2, b2) = self.offsets();
        let mut p = vec![0.0f32; self.n_params()];
        let a1 = (6.0 / self.dim as f32).sqrt();
        for v in &mut p[..b1] {
            *v = (rng.unit() * 2.0 - 1.0) * a1;
        }
        let a2 = (6.0 / (self.hidden + self.classes) as f32).sqrt();
        for v in &mut p[w2..b2] {
            *v = (rng.unit() * 2.0 - 1.0) * a2;
        }
        p
    }
    fn loss_grad(&self, p: &[f32], x: &[f32], y: &[u32], grad: &mut [f32]) -> BatchStats {
        // The same blocks as a worker that starts before all parameters arrived, so
        // both give the same numbers.
        let mut h = Vec::new();
        self.begin(y.len(), &mut h);
        for j in 0..self.blocks() {
            self.forward_block(p, x, y.len(), j, &mut h);
        }
        self.finish(p, x, y, &mut h, grad)
    }
    fn pipelined(&self) -> Option<&dyn Pipelined> {
        Some(self)
    }
    fn evaluate(&self, p: &[f32], _train: &Dataset, test: &Dataset) -> Quality {
        let (mut h, mut s) = (Vec::new(), Vec::new());
        eval_chunks(test, |x, y| {
            self.forward(p, x, y.len(), &mut h, &mut s);
            softmax_xent(&mut s, y, self.classes)
        })
    }
    fn default_optimizer(&self) -> OptimSpec {
        OptimSpec::Adam {
            lr: 2e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
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
        check_gradient(&Mlp::new(d.dim, 16, d.classes), &d, 7);
    }
}
