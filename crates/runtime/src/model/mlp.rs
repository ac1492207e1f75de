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

/// Where the backward pass splits the first layer's weight gradient (the bulk of the
/// gradient), as fractions of W1's rows, rounded to multiples of 8 rows (the sgemm
/// kernel's tile height; other cuts cost twice as much): a worker sends each block
/// as soon as it is computed. Few blocks because each product repacks dH (measured
/// on MNIST at 190 samples: the gradient of W1 in these 3 blocks takes 451 µs
/// against 443 µs in one product, in 8 equal blocks 499 µs, and at time scale 3 that
/// cost more than the uplink it saved); the last one small because only it is left
/// to send and sum once the slowest worker is done.
const GRAD_SPLITS: [f64; 2] = [0.5, 0.875];

impl Mlp {
    fn rows_per_block(&self) -> usize {
        self.dim.div_ceil(BLOCKS).max(1)
    }
    /// W1's rows `[r0, r1)` whose gradient backward block `j` computes.
    fn grad_rows(&self, j: usize) -> (usize, usize) {
        let at = |i: usize| match i {
            0 => 0,
            i if i > GRAD_SPLITS.len() => self.dim,
            i => {
                (((GRAD_SPLITS[i - 1] * self.dim as f64 / 8.0).round() as usize) * 8).min(self.dim)
            }
        };
        (at(j), at(j + 1))
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
    fn finish_head(
        &self,
        p: &[f32],
        _x: &[f32],
        y: &[u32],
        state: &mut Vec<f32>,
        grad: &mut [f32],
    ) -> BatchStats {
        let (hd, c, b) = (self.hidden, self.classes, y.len());
        let (_, b1, w2, b2) = self.offsets();
        // state holds x·W1 (all blocks): add b1, ReLU, then the output layer.
        for row in state.chunks_mut(hd) {
            for (v, bias) in row.iter_mut().zip(&p[b1..b1 + hd]) {
                *v = (*v + bias).max(0.0);
            }
        }
        let h = &*state;
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
        let gb1 = &mut grad[b1..w2];
        gb1.iter_mut().for_each(|v| *v = 0.0);
        for row in dh.chunks(hd) {
            for (g, v) in gb1.iter_mut().zip(row) {
                *g += v * inv;
            }
        }
        // gW1 = xᵀ·dH/b, block by block of W1's rows (`backward_block`).
        *state = dh;
        BatchStats { loss_sum, correct }
    }
    fn grad_blocks(&self) -> usize {
        GRAD_SPLITS.len() + 1
    }
    fn grad_block(&self, j: usize) -> std::ops::Range<usize> {
        let (r0, r1) = self.grad_rows(j);
        r0 * self.hidden..r1 * self.hidden
    }
    fn backward_block(&self, x: &[f32], b: usize, j: usize, dh: &[f32], grad: &mut [f32]) {
        let (d, hd) = (self.dim, self.hidden);
        let (r0, r1) = self.grad_rows(j);
        if r0 >= r1 {
            return;
        }
        if b == 0 {
            grad[r0 * hd..r1 * hd].iter_mut().for_each(|v| *v = 0.0);
            return;
        }
        let inv = 1.0 / b as f32;
        assert!(x.len() >= b * d && dh.len() >= b * hd && grad.len() >= r1 * hd);
        // gW1[r0..r1, :] = x[:, r0..r1]ᵀ · dH / b (xᵀ's rows r0..r1: column stride d).
        // SAFETY: the assert bounds every element sgemm reads or writes: x rows
        // i < b at columns r0..r1 < d, dH b × hd, gW1 rows r0..r1 of length hd.
        unsafe {
            matrixmultiply::sgemm(
                r1 - r0,
                b,
                hd,
                inv,
                x.as_ptr().add(r0),
                1,
                d as isize,
                dh.as_ptr(),
                hd as isize,
                1,
                0.0,
                grad.as_mut_ptr().add(r0 * hd),
                hd as isize,
                1,
            );
        }
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
            *v = (rng.unit_f32() * 2.0 - 1.0) * a1;
        }
        let a2 = (6.0 / (self.hidden + self.classes) as f32).sqrt();
        for v in &mut p[w2..b2] {
            *v = (rng.unit_f32() * 2.0 - 1.0) * a2;
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
