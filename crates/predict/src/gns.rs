//! Online gradient noise scale from a running data-parallel job (docs/algorithms.md §2b).
//!
//! McCandlish et al. 2018 ("An empirical model of large-batch training", app. A):
//! a gradient averaged over `b` samples has `E|g_b|² = |G|² + tr(Σ)/b`, where `G` is
//! the true gradient and `Σ` the per-sample covariance. Two measurements at
//! different batch sizes — the workers' local gradients (small) and the
//! all-reduced one (big) — give unbiased estimates of both unknowns:
//! `tr Σ = (|g_s|² − |g_b|²) / (x_s − x_b)` and `|G|² = (x_s|g_b|² − x_b|g_s|²) / (x_s − x_b)`
//! with `x = E[1/batch]` of each measurement.
//!
//! pacer's workers run *unequal* local batches `b_i` (that is what the worker-level
//! controllers decide), so the "small" measurement is the batch-weighted mean
//! `Σ b_i |g_i|² / B` (`x_s = n / B`, `B = Σ b_i`; larger batches give steadier
//! norms), and the "big" one is the aggregate `g = Σ w_i g_i`, for which
//! `x_b = Σ w_i² / b_i` — `1 / B` when the runtime weights by batch (`w_i = b_i / B`),
//! `Σ 1/b_i / n²` for a plain mean. With equal batches this is exactly the
//! estimator of Pollux's `adaptdl` (`GradientNoiseScale._final_callback`).
//!
//! Single-step estimates are very noisy (and `|G|²` is often negative), so both are
//! smoothed by exponential moving averages whose decay per step is
//! `smoothing^(B / base_batch)` (a step on more samples counts more), each with
//! Adam-style bias correction (divide by `1 − Π decay`) so early estimates are not
//! pulled towards zero. The noise scale is the ratio of the two averages, not an
//! average of ratios (a ratio of noisy estimates is badly biased).
//!
//! How the runtime calls it (`pacer_runtime::gns`): once per synchronous iteration
//! whose tasks all arrived whole, with each worker's local batch, the `|g_i|²` of its
//! local mean gradient (summed while the controller aggregates it) and the
//! aggregate's `|g|²`:
//! ```
//! use pacer_predict::gns::{Aggregation, GnsEstimator};
//! let mut gns = GnsEstimator::new(0.99, 32.0);
//! // per iteration: local batches, workers' local gradient norms², aggregate's norm²
//! let local_bsz = [24.0, 40.0];
//! let local_sqr = [1.30, 1.18];
//! let aggregate_sqr = 1.10;
//! gns.observe_norms(&local_bsz, &local_sqr, aggregate_sqr, Aggregation::BatchWeighted)
//!     .unwrap();
//! let b_noise = gns.noise_scale(); // samples; feeds goodput via gns.grad_params()
//! assert!(b_noise.is_some());
//! ```

use crate::goodput::GradParams;
use serde::{Deserialize, Serialize};

/// How the aggregate gradient was formed from the workers' local gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Aggregation {
    /// `g = Σ b_i g_i / B`: the mean over every sample of the step.
    BatchWeighted,
    /// `g = Σ g_i / n`: the plain mean of the workers' gradients.
    Mean,
}

/// Why an observation was rejected (the estimator is left unchanged).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GnsError {
    #[error("need at least two workers for the two-batch estimator, got {0}")]
    TooFewWorkers(usize),
    #[error("{what}: {got} values for {workers} workers")]
    Mismatch {
        what: &'static str,
        got: usize,
        workers: usize,
    },
    #[error("worker {worker}: local batch {bsz} must be finite and > 0")]
    BadBatch { worker: usize, bsz: f64 },
    #[error("gradient statistics must be finite and ≥ 0")]
    BadNorm,
    #[error("worker {worker}: gradient has {got} entries, worker 0 has {want}")]
    Dimension {
        worker: usize,
        got: usize,
        want: usize,
    },
}

/// One iteration's unbiased (unsmoothed) estimates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GnsSample {
    /// Estimate of `|G|²` (may be negative: it is a difference of noisy norms).
    pub grad_sqr: f64,
    /// Estimate of `tr Σ`, the per-sample gradient variance.
    pub trace_cov: f64,
    /// Samples in the step (`B = Σ b_i`).
    pub global_batch: f64,
}

/// A bias-corrected exponential moving average.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
struct Ema {
    biased: f64,
    /// `1 − Π decay`: the weight the average has accumulated.
    weight: f64,
}

impl Ema {
    fn update(&mut self, value: f64, decay: f64) {
        self.biased = decay * self.biased + (1.0 - decay) * value;
        self.weight = decay * self.weight + (1.0 - decay);
    }

    fn value(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.biased / self.weight)
    }
}

/// Online gradient-noise-scale estimator (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GnsEstimator {
    /// EMA decay per step at `base_batch` samples, e.g. 0.99 (adaptdl uses 0.999).
    pub smoothing: f64,
    /// Batch the decay and [`GradParams`] refer to (Pollux's `M0`).
    pub base_batch: f64,
    sqr: Ema,
    var: Ema,
    steps: u64,
}

/// Smallest `|G|²` the ratio divides by, relative to `tr Σ / base_batch`.
const MIN_SQR_FRACTION: f64 = 1e-6;

impl GnsEstimator {
    pub fn new(smoothing: f64, base_batch: f64) -> Self {
        GnsEstimator {
            smoothing: smoothing.clamp(0.0, 1.0 - 1e-12),
            base_batch: base_batch.max(1e-12),
            sqr: Ema::default(),
            var: Ema::default(),
            steps: 0,
        }
    }

    /// Iterations observed.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// One iteration from squared norms: each worker's local batch and
    /// `|g_i|²` of its local (mean) gradient, and `|g|²` of the aggregate.
    pub fn observe_norms(
        &mut self,
        local_bsz: &[f64],
        local_sqr: &[f64],
        aggregate_sqr: f64,
        aggregation: Aggregation,
    ) -> Result<GnsSample, GnsError> {
        let s = two_batch_estimate(local_bsz, local_sqr, aggregate_sqr, aggregation)?;
        self.observe_sample(s)
    }

    /// One iteration's estimates made elsewhere (e.g. from consecutive steps of one
    /// worker): `|G|²` and `tr Σ` may be negative (noisy differences), but must be
    /// finite, and the step's samples finite and > 0.
    pub fn observe_sample(&mut self, s: GnsSample) -> Result<GnsSample, GnsError> {
        if !(s.grad_sqr.is_finite() && s.trace_cov.is_finite()) {
            return Err(GnsError::BadNorm);
        }
        if !(s.global_batch.is_finite() && s.global_batch > 0.0) {
            return Err(GnsError::BadBatch {
                worker: 0,
                bsz: s.global_batch,
            });
        }
        let decay = self.smoothing.powf(s.global_batch / self.base_batch);
        self.sqr.update(s.grad_sqr, decay);
        self.var.update(s.trace_cov, decay);
        self.steps += 1;
        Ok(s)
    }

    /// One iteration from the workers' local (mean) gradient vectors; the aggregate
    /// is formed here as `aggregation` says.
    pub fn observe_gradients(
        &mut self,
        local_bsz: &[f64],
        local_grads: &[&[f64]],
        aggregation: Aggregation,
    ) -> Result<GnsSample, GnsError> {
        let n = local_bsz.len();
        if local_grads.len() != n {
            return Err(GnsError::Mismatch {
                what: "gradients",
                got: local_grads.len(),
                workers: n,
            });
        }
        let dim = local_grads.first().map_or(0, |g| g.len());
        if let Some((i, g)) = local_grads.iter().enumerate().find(|(_, g)| g.len() != dim) {
            return Err(GnsError::Dimension {
                worker: i,
                got: g.len(),
                want: dim,
            });
        }
        let w = weights(local_bsz, aggregation)?;
        let mut agg = vec![0.0; dim];
        for (g, wi) in local_grads.iter().zip(&w) {
            for (a, x) in agg.iter_mut().zip(g.iter()) {
                *a += wi * x;
            }
        }
        let local_sqr: Vec<f64> = local_grads
            .iter()
            .map(|g| g.iter().map(|x| x * x).sum())
            .collect();
        let agg_sqr = agg.iter().map(|x| x * x).sum();
        self.observe_norms(local_bsz, &local_sqr, agg_sqr, aggregation)
    }

    /// Whether the smoothed `|G|²` is above its floor: the unbiased estimate can go
    /// negative when `|G|²` is small against `tr Σ / B` (`B ≪ B_noise`) and the
    /// window holds too few steps to average the noise out; `B_noise` is then only
    /// known to be large (the floored value, `base_batch · 10⁶`, is not a measurement).
    pub fn resolved(&self) -> bool {
        match (self.sqr.value(), self.trace_cov()) {
            (Some(sqr), Some(var)) => sqr > MIN_SQR_FRACTION * var / self.base_batch,
            _ => false,
        }
    }

    /// Smoothed `|G|²`, floored at a tiny positive value relative to the noise.
    pub fn grad_sqr(&self) -> Option<f64> {
        let sqr = self.sqr.value()?;
        let var = self.trace_cov()?;
        Some(
            sqr.max(MIN_SQR_FRACTION * var / self.base_batch)
                .max(f64::MIN_POSITIVE),
        )
    }

    /// Smoothed `tr Σ` (per-sample gradient variance), floored at 0.
    pub fn trace_cov(&self) -> Option<f64> {
        self.var.value().map(|v| v.max(0.0))
    }

    /// Gradient noise scale `B_noise = tr Σ / |G|²` in samples.
    pub fn noise_scale(&self) -> Option<f64> {
        Some(self.trace_cov()? / self.grad_sqr()?)
    }

    /// The statistics in the form [`crate::goodput`] uses (`var` at the base batch).
    pub fn grad_params(&self) -> Option<GradParams> {
        Some(GradParams {
            sqr: self.grad_sqr()?,
            var: self.trace_cov()? / self.base_batch,
        })
    }
}

fn weights(local_bsz: &[f64], aggregation: Aggregation) -> Result<Vec<f64>, GnsError> {
    let n = local_bsz.len();
    if n < 2 {
        return Err(GnsError::TooFewWorkers(n));
    }
    if let Some((i, &b)) = local_bsz
        .iter()
        .enumerate()
        .find(|(_, b)| !(b.is_finite() && **b > 0.0))
    {
        return Err(GnsError::BadBatch { worker: i, bsz: b });
    }
    let total: f64 = local_bsz.iter().sum();
    Ok(match aggregation {
        Aggregation::BatchWeighted => local_bsz.iter().map(|b| b / total).collect(),
        Aggregation::Mean => vec![1.0 / n as f64; n],
    })
}

/// The unbiased two-batch-size estimate of one iteration (module docs).
pub fn two_batch_estimate(
    local_bsz: &[f64],
    local_sqr: &[f64],
    aggregate_sqr: f64,
    aggregation: Aggregation,
) -> Result<GnsSample, GnsError> {
    let w = weights(local_bsz, aggregation)?;
    let n = local_bsz.len();
    if local_sqr.len() != n {
        return Err(GnsError::Mismatch {
            what: "local squared norms",
            got: local_sqr.len(),
            workers: n,
        });
    }
    if local_sqr
        .iter()
        .chain(std::iter::once(&aggregate_sqr))
        .any(|v| !(v.is_finite() && *v >= 0.0))
    {
        return Err(GnsError::BadNorm);
    }
    let total: f64 = local_bsz.iter().sum();
    // Small: batch-weighted mean of the local norms, E = |G|² + trΣ · n/B.
    let y_s: f64 = local_bsz
        .iter()
        .zip(local_sqr)
        .map(|(b, s)| b * s)
        .sum::<f64>()
        / total;
    let x_s = n as f64 / total;
    // Big: the aggregate, E = |G|² + trΣ · Σ w_i²/b_i.
    let x_b: f64 = w.iter().zip(local_bsz).map(|(wi, b)| wi * wi / b).sum();
    let y_b = aggregate_sqr;
    // x_s > x_b for any n ≥ 2 (Cauchy–Schwarz), so the division is safe.
    let trace_cov = (y_s - y_b) / (x_s - x_b);
    let grad_sqr = (x_s * y_b - x_b * y_s) / (x_s - x_b);
    Ok(GnsSample {
        grad_sqr,
        trace_cov,
        global_batch: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::itertime::SplitMix64;

    /// Standard normal by Box–Muller.
    fn normal(rng: &mut SplitMix64) -> f64 {
        let u1 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let u2 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Per-sample gradients `G + σ z`: a local mean over `b` samples is `G + σ z/√b`.
    /// True `tr Σ = d σ²`, `B_noise = d σ² / |G|²`.
    struct Synthetic {
        g: Vec<f64>,
        sigma: f64,
        rng: SplitMix64,
    }

    impl Synthetic {
        fn new(dim: usize, sigma: f64, seed: u64) -> Self {
            let mut rng = SplitMix64(seed);
            let g = (0..dim).map(|_| 0.1 * normal(&mut rng)).collect();
            Synthetic { g, sigma, rng }
        }

        fn true_noise_scale(&self) -> f64 {
            let g2: f64 = self.g.iter().map(|x| x * x).sum();
            self.g.len() as f64 * self.sigma * self.sigma / g2
        }

        fn local(&mut self, b: f64) -> Vec<f64> {
            let s = self.sigma / b.sqrt();
            let g = self.g.clone();
            g.iter().map(|x| x + s * normal(&mut self.rng)).collect()
        }
    }

    fn run(aggregation: Aggregation, seed: u64, steps: usize) -> (f64, f64) {
        let mut syn = Synthetic::new(64, 0.5, seed);
        let mut est = GnsEstimator::new(0.99, 32.0);
        // Unequal and changing local batches, as pacer's controllers produce.
        let mut rng = SplitMix64(seed ^ 0xabc);
        for _ in 0..steps {
            let bsz: Vec<f64> = (0..4).map(|_| (4 + rng.below(60)) as f64).collect();
            let grads: Vec<Vec<f64>> = bsz.iter().map(|&b| syn.local(b)).collect();
            let refs: Vec<&[f64]> = grads.iter().map(|g| g.as_slice()).collect();
            est.observe_gradients(&bsz, &refs, aggregation).unwrap();
        }
        (est.noise_scale().unwrap(), syn.true_noise_scale())
    }

    #[test]
    fn a_negative_grad_sqr_estimate_is_not_resolved() {
        // Batches 10 and 30, batch-weighted: |G|² = (x_s·y_b − x_b·y_s)/(x_s − x_b)
        // with x_s = 2/40, x_b = 1/40, y_s = 1: −0.8 for an aggregate norm of 0.1,
        // +0.8 for 0.9.
        let mut est = GnsEstimator::new(0.99, 40.0);
        assert!(!est.resolved(), "no data");
        est.observe_norms(&[10.0, 30.0], &[1.0, 1.0], 0.1, Aggregation::BatchWeighted)
            .unwrap();
        assert!(!est.resolved());
        assert!(est.noise_scale().unwrap() >= 40.0 * 1e6 * 0.999, "floored");
        let mut est = GnsEstimator::new(0.99, 40.0);
        est.observe_norms(&[10.0, 30.0], &[1.0, 1.0], 0.9, Aggregation::BatchWeighted)
            .unwrap();
        assert!(est.resolved());
        assert!(est.noise_scale().unwrap() < 1e3);
    }

    #[test]
    fn converges_to_the_true_noise_scale_with_unequal_batches() {
        for aggregation in [Aggregation::BatchWeighted, Aggregation::Mean] {
            for seed in [1, 2, 3] {
                let (est, truth) = run(aggregation, seed, 3000);
                assert!(
                    (est / truth - 1.0).abs() < 0.15,
                    "{aggregation:?} seed {seed}: {est} vs {truth}"
                );
            }
        }
    }

    #[test]
    fn assuming_equal_batches_would_be_biased() {
        // The same data through the equal-batch formula (every worker at the mean
        // batch) misses the truth: the test above can tell a wrong estimator.
        let mut syn = Synthetic::new(64, 0.5, 5);
        let truth = syn.true_noise_scale();
        let mut est = GnsEstimator::new(0.99, 32.0);
        for _ in 0..3000 {
            let bsz = [2.0, 4.0, 60.0, 120.0];
            let grads: Vec<Vec<f64>> = bsz.iter().map(|&b| syn.local(b)).collect();
            let local_sqr: Vec<f64> = grads
                .iter()
                .map(|g| g.iter().map(|x| x * x).sum())
                .collect();
            let total: f64 = bsz.iter().sum();
            let agg_sqr: f64 = (0..64)
                .map(|k| {
                    let v: f64 = grads.iter().zip(&bsz).map(|(g, b)| g[k] * b / total).sum();
                    v * v
                })
                .sum();
            let mean = vec![total / 4.0; 4];
            est.observe_norms(&mean, &local_sqr, agg_sqr, Aggregation::BatchWeighted)
                .unwrap();
        }
        let wrong = est.noise_scale().unwrap();
        assert!((wrong / truth - 1.0).abs() > 0.5, "{wrong} vs {truth}");
    }

    #[test]
    fn single_step_is_unbiased_on_average_and_ema_is_bias_corrected() {
        let mut syn = Synthetic::new(32, 0.3, 11);
        let g2: f64 = syn.g.iter().map(|x| x * x).sum();
        let trace = 32.0 * 0.09;
        let (mut m_sqr, mut m_var) = (0.0, 0.0);
        let n = 4000;
        for _ in 0..n {
            let bsz = [3.0, 17.0, 40.0];
            let grads: Vec<Vec<f64>> = bsz.iter().map(|&b| syn.local(b)).collect();
            let refs: Vec<&[f64]> = grads.iter().map(|g| g.as_slice()).collect();
            let mut est = GnsEstimator::new(0.999, 32.0);
            let s = est
                .observe_gradients(&bsz, &refs, Aggregation::BatchWeighted)
                .unwrap();
            // After one step the bias-corrected EMA is that step's estimate.
            assert!((est.trace_cov().unwrap() - s.trace_cov.max(0.0)).abs() < 1e-12);
            m_sqr += s.grad_sqr / n as f64;
            m_var += s.trace_cov / n as f64;
        }
        assert!((m_var / trace - 1.0).abs() < 0.05, "{m_var} vs {trace}");
        assert!((m_sqr / g2 - 1.0).abs() < 0.1, "{m_sqr} vs {g2}");
    }

    #[test]
    fn bad_input_is_rejected_and_leaves_the_estimate_alone() {
        let mut est = GnsEstimator::new(0.99, 32.0);
        let e = est.observe_norms(&[8.0], &[1.0], 1.0, Aggregation::Mean);
        assert_eq!(e, Err(GnsError::TooFewWorkers(1)));
        let e = est.observe_norms(&[8.0, 0.0], &[1.0, 1.0], 1.0, Aggregation::Mean);
        assert!(matches!(e, Err(GnsError::BadBatch { worker: 1, .. })));
        let e = est.observe_norms(&[8.0, 8.0], &[1.0], 1.0, Aggregation::Mean);
        assert!(matches!(e, Err(GnsError::Mismatch { .. })));
        let e = est.observe_norms(&[8.0, 8.0], &[1.0, f64::NAN], 1.0, Aggregation::Mean);
        assert_eq!(e, Err(GnsError::BadNorm));
        let e = est.observe_gradients(&[8.0, 8.0], &[&[1.0, 2.0], &[1.0]], Aggregation::Mean);
        assert!(matches!(e, Err(GnsError::Dimension { worker: 1, .. })));
        assert_eq!(est.steps(), 0);
        assert_eq!(est.noise_scale(), None);
    }

    #[test]
    fn grad_params_match_the_goodput_convention() {
        let mut est = GnsEstimator::new(0.9, 16.0);
        est.observe_norms(&[8.0, 24.0], &[2.0, 1.2], 1.0, Aggregation::BatchWeighted)
            .unwrap();
        let p = est.grad_params().unwrap();
        let b = p.noise_scale(16.0);
        assert!((b / est.noise_scale().unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_sample_made_elsewhere_is_smoothed_as_a_measured_one() {
        let mut a = GnsEstimator::new(0.9, 32.0);
        let mut b = a.clone();
        let s = a
            .observe_norms(&[16.0, 16.0], &[2.0, 2.2], 1.5, Aggregation::BatchWeighted)
            .unwrap();
        b.observe_sample(s).unwrap();
        assert_eq!(a, b);
        // Negative estimates are noise and allowed; non-finite ones and empty steps not.
        let neg = GnsSample {
            grad_sqr: -0.1,
            trace_cov: 3.0,
            global_batch: 8.0,
        };
        assert!(b.observe_sample(neg).is_ok());
        let before = b.clone();
        for bad in [
            GnsSample {
                grad_sqr: f64::NAN,
                ..neg
            },
            GnsSample {
                trace_cov: f64::INFINITY,
                ..neg
            },
            GnsSample {
                global_batch: 0.0,
                ..neg
            },
        ] {
            assert!(b.observe_sample(bad).is_err());
        }
        assert_eq!(b, before, "a rejected sample changed the estimate");
    }
}
