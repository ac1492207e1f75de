use super::{eval_chunks, gemm, BatchStats, Model, Quality};
use crate::data::{Dataset, SplitMix64};
use crate::optim::OptimSpec;

/// Mini-batch K-means as gradient descent on `L = mean_x ½‖x − c(x)‖²`
/// (`c(x)` the nearest centroid); parameters are the `K × dim` centroids.
///
/// The gradient for centroid `k` is `(n_k/b)·(c_k − mean of its points)`, so one SGD
/// step with rate `lr` moves it `lr·n_k/b` of the way to its points' mean. Written as
/// a gradient, K-means aggregates across workers exactly like the other models.
/// Accuracy is that of nearest-centroid classification with each centroid labelled
/// by the majority class of its training points (cluster purity on the test set).
#[derive(Debug, Clone)]
pub struct KMeans {
    dim: usize,
    k: usize,
    classes: usize,
}

impl KMeans {
    pub fn new(dim: usize, k: usize, classes: usize) -> Self {
        KMeans { dim, k, classes }
    }

    /// Nearest centroid and squared distance of every row.
    fn assign(&self, c: &[f32], x: &[f32], b: usize, out: &mut Vec<(usize, f32)>) {
        let (d, k) = (self.dim, self.k);
        let cn: Vec<f32> = c.chunks(d).map(|r| r.iter().map(|v| v * v).sum()).collect();
        let mut dots = vec![0.0f32; b * k];
        gemm(b, d, k, 1.0, x, false, c, true, 0.0, &mut dots);
        out.clear();
        for (i, row) in dots.chunks(k).enumerate() {
            let xn: f32 = x[i * d..(i + 1) * d].iter().map(|v| v * v).sum();
            let (mut best, mut arg) = (f32::INFINITY, 0);
            for (j, &dot) in row.iter().enumerate() {
                let dist = xn - 2.0 * dot + cn[j];
                if dist < best {
                    best = dist;
                    arg = j;
                }
            }
            out.push((arg, best.max(0.0)));
        }
    }

    fn cluster_labels(&self, c: &[f32], train: &Dataset) -> Vec<u32> {
        let mut votes = vec![0u64; self.k * self.classes];
        let mut a = Vec::new();
        for (start, chunk) in train.x.chunks(1000 * self.dim).enumerate() {
            let b = chunk.len() / self.dim;
            self.assign(c, chunk, b, &mut a);
            for (i, &(j, _)) in a.iter().enumerate() {
                votes[j * self.classes + train.y[start * 1000 + i] as usize] += 1;
            }
        }
        votes
            .chunks(self.classes)
            .map(|v| {
                v.iter()
                    .enumerate()
                    .max_by_key(|(_, n)| **n)
                    .map_or(0, |(l, _)| l as u32)
            })
            .collect()
    }
}

impl Model for KMeans {
    fn name(&self) -> &'static str {
        "kmeans"
    }
    fn n_params(&self) -> usize {
        self.k * self.dim
    }
    fn init(&self, seed: u64, train: &Dataset) -> Vec<f32> {
        // Forgy initialisation: K distinct random training samples.
        let mut rng = SplitMix64(seed);
        let mut picked: Vec<usize> = Vec::with_capacity(self.k);
        while picked.len() < self.k.min(train.n) {
            let i = (rng.next_u64() % train.n as u64) as usize;
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        let mut p = Vec::with_capacity(self.n_params());
        for j in 0..self.k {
            p.extend_from_slice(train.row(picked[j % picked.len().max(1)]));
        }
        p
    }
    fn loss_grad(&self, c: &[f32], x: &[f32], y: &[u32], grad: &mut [f32]) -> BatchStats {
        let (d, b) = (self.dim, y.len());
        let mut a = Vec::new();
        self.assign(c, x, b, &mut a);
        grad.iter_mut().for_each(|v| *v = 0.0);
        let inv = 1.0 / b.max(1) as f32;
        let mut loss_sum = 0.0f64;
        for (i, &(j, dist)) in a.iter().enumerate() {
            loss_sum += 0.5 * dist as f64;
            let g = &mut grad[j * d..(j + 1) * d];
            for ((gv, cv), xv) in g.iter_mut().zip(&c[j * d..(j + 1) * d]).zip(&x[i * d..]) {
                *gv += (cv - xv) * inv;
            }
        }
        BatchStats {
            loss_sum,
            correct: 0,
        }
    }
    fn evaluate(&self, c: &[f32], train: &Dataset, test: &Dataset) -> Quality {
        let labels = self.cluster_labels(c, train);
        let mut a = Vec::new();
        eval_chunks(test, |x, y| {
            self.assign(c, x, y.len(), &mut a);
            let loss: f64 = a.iter().map(|&(_, dist)| 0.5 * dist as f64).sum();
            let correct = a
                .iter()
                .zip(y)
                .filter(|((j, _), &l)| labels[*j] == l)
                .count() as u32;
            (loss, correct)
        })
    }
    fn default_optimizer(&self) -> OptimSpec {
        // lr = K/2: a centroid holding its fair share 1/K of a batch moves half way to
        // its points' mean each step.
        OptimSpec::Sgd {
            lr: self.k as f32 * 0.5,
            momentum: 0.0,
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
        check_gradient(&KMeans::new(d.dim, 10, d.classes), &d, 8);
    }
}
