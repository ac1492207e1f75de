//! The gradient noise scale of the running job, measured from the gradients the
//! controller already aggregates (`pacer_predict::gns` does the estimating).
//!
//! Each worker sends the **mean** gradient `g_i` over its `b_i` samples
//! ([`crate::model`]) and the controller sums `(b_i / B) · g_i`, the mean gradient over
//! the global batch. Both squared norms the two-batch estimator needs come from
//! passes that exist anyway:
//! - `|g_i|²` is summed while `g_i`'s blocks are added into the aggregate
//!   ([`accumulate_sqr`]): the same loads (on MNIST the MLP's sums of an iteration
//!   took 0.145 ms instead of 0.126, the last one 0.0035 instead of 0.0029);
//! - `|g|²` of the aggregate is taken when the next iteration's gather clears the
//!   aggregate ([`clear_sqr`]), while the workers compute — off the critical path
//!   (and at an evaluation or the end of training, before reporting).
//!
//! Only iterations in which every task arrived whole from the worker it was sent to
//! are observed: one that lost a worker (partial gradients dropped, ranges retried
//! elsewhere) is skipped, so each `g_i` is one worker's mean over exactly the samples
//! counted once in the aggregate. Iterations with fewer than two non-empty tasks, or a
//! non-finite norm (the estimator refuses it), are skipped and counted.

use pacer_predict::gns::{Aggregation, GnsEstimator};
use pacer_predict::goodput::GlobalBatchChoice;
use serde::Serialize;

/// EMA decay per step at `base_batch` samples (the global batch): an effective window
/// of ~100 iterations, short enough to follow a run of a few hundred iterations.
pub const SMOOTHING: f64 = 0.99;

/// Values summed in `f32` before each partial sum is added in `f64`: short enough that
/// the sum is exact to ~1e-7 relative, long enough to keep the loop vectorised.
const BLOCK: usize = 1024;
/// Independent `f32` accumulators: a single one would serialise the loop on the add's
/// latency (in a standalone loop over 101,770 values, `f64` lanes cost ~2× the plain
/// sum; 16 `f32` lanes about the same as the plain sum).
const LANES: usize = 16;

/// `acc += w · g`, returning `Σ g²` (accumulated in `f64` per block).
pub fn accumulate_sqr(acc: &mut [f32], w: f32, g: &[f32]) -> f64 {
    debug_assert_eq!(acc.len(), g.len());
    let mut total = 0.0f64;
    for (ab, gb) in acc.chunks_mut(BLOCK).zip(g.chunks(BLOCK)) {
        let mut lanes = [0.0f32; LANES];
        let mut ac = ab.chunks_exact_mut(LANES);
        let mut gc = gb.chunks_exact(LANES);
        for (a, x) in (&mut ac).zip(&mut gc) {
            for j in 0..LANES {
                a[j] += w * x[j];
                lanes[j] += x[j] * x[j];
            }
        }
        for (a, x) in ac.into_remainder().iter_mut().zip(gc.remainder()) {
            *a += w * x;
            total += f64::from(*x) * f64::from(*x);
        }
        total += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    total
}

/// `Σ v²` over `v`, the same way as [`accumulate_sqr`].
pub fn sqr_norm(v: &[f32]) -> f64 {
    let mut total = 0.0f64;
    for b in v.chunks(BLOCK) {
        let mut lanes = [0.0f32; LANES];
        let mut c = b.chunks_exact(LANES);
        for x in &mut c {
            for j in 0..LANES {
                lanes[j] += x[j] * x[j];
            }
        }
        total += c
            .remainder()
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>();
        total += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    total
}

/// Sets `v` to zero, returning `Σ v²` it held (one pass instead of two).
pub fn clear_sqr(v: &mut [f32]) -> f64 {
    let mut total = 0.0f64;
    for b in v.chunks_mut(BLOCK) {
        let mut lanes = [0.0f32; LANES];
        let mut c = b.chunks_exact_mut(LANES);
        for x in &mut c {
            for j in 0..LANES {
                lanes[j] += x[j] * x[j];
                x[j] = 0.0;
            }
        }
        for x in c.into_remainder() {
            total += f64::from(*x) * f64::from(*x);
            *x = 0.0;
        }
        total += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    total
}

/// One task's contribution: its stream range and `|g_i|²` of its local mean gradient.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LocalNorm {
    pub stream_start: u64,
    pub len: u64,
    pub sqr: f64,
}

/// What the controller gave the estimator for one iteration (tests check it against
/// single-process gradients).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GnsInput {
    pub iteration: u64,
    /// In stream order.
    pub locals: Vec<LocalNorm>,
    /// `|g|²` of the aggregate `Σ (b_i / B) g_i`.
    pub aggregate_sqr: f64,
}

/// The estimate after an iteration (one per evaluation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NoiseScalePoint {
    /// Iterations done (as in `EvalPoint::iteration`).
    pub iteration: u64,
    /// `B_noise = tr Σ / |G|²` in samples.
    pub noise_scale: f64,
    pub grad_sqr: f64,
    pub trace_cov: f64,
    /// The global batch with the highest goodput at this point
    /// ([`pacer_control::job::decide::running_job_batch`] between the run's batch and
    /// `max_global_batch`, step time `B / Σ v_i + overhead` measured over the last
    /// iterations, [`StepRate`]), and its goodput over the run's batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_optimal_batch: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_gain: Option<f64>,
}

/// The running job's step as a function of its global batch, from its last
/// iterations: `B / samples_per_s + overhead_s` (workers balanced, per-sample cost
/// independent of the local batch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRate {
    /// Σ of the workers' speeds (samples/s).
    pub samples_per_s: f64,
    /// Iteration time outside the slowest worker's step (s).
    pub overhead_s: f64,
}

impl StepRate {
    pub fn step_time(&self, global_batch: f64) -> f64 {
        global_batch / self.samples_per_s + self.overhead_s
    }
}

/// The controller's side of the estimate: the norms of the last complete iteration
/// wait for its aggregate's norm, which is taken when the aggregate is next cleared.
#[derive(Debug)]
pub struct GnsTracker {
    est: GnsEstimator,
    pending: Option<(u64, Vec<LocalNorm>)>,
    /// Iterations the estimator took.
    pub observed: u64,
    /// Iterations not observed (disrupted, fewer than two tasks, rejected norms).
    pub skipped: u64,
    /// Keep the inputs of the first this many observed iterations.
    record: usize,
    pub inputs: Vec<GnsInput>,
    pub curve: Vec<NoiseScalePoint>,
    verbose: bool,
}

impl GnsTracker {
    /// The EMA decays by `smoothing` per iteration of `global_batch` samples.
    pub fn new(smoothing: f64, global_batch: u64, record: usize, verbose: bool) -> Self {
        GnsTracker {
            est: GnsEstimator::new(smoothing, global_batch as f64),
            pending: None,
            observed: 0,
            skipped: 0,
            record,
            inputs: Vec::new(),
            curve: Vec::new(),
            verbose,
        }
    }

    /// End of iteration `iteration`'s gather: its tasks' norms, or `None` when it was
    /// disrupted. Empty tasks (no samples, zero weight) do not count.
    pub fn gathered(&mut self, iteration: u64, locals: Option<Vec<LocalNorm>>) {
        debug_assert!(self.pending.is_none(), "aggregate norm not taken");
        match locals {
            Some(mut l) => {
                l.retain(|t| t.len > 0);
                if l.len() >= 2 {
                    l.sort_by_key(|t| t.stream_start);
                    self.pending = Some((iteration, l));
                } else {
                    self.skipped += 1;
                }
            }
            None => self.skipped += 1,
        }
    }

    /// Whether an iteration waits for its aggregate's norm.
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// The waiting iteration's aggregate `|g|²`: feeds the estimator.
    pub fn aggregate(&mut self, aggregate_sqr: f64) {
        let Some((iteration, locals)) = self.pending.take() else {
            return;
        };
        let bsz: Vec<f64> = locals.iter().map(|t| t.len as f64).collect();
        let sqr: Vec<f64> = locals.iter().map(|t| t.sqr).collect();
        match self
            .est
            .observe_norms(&bsz, &sqr, aggregate_sqr, Aggregation::BatchWeighted)
        {
            Ok(_) => {
                self.observed += 1;
                if self.inputs.len() < self.record {
                    self.inputs.push(GnsInput {
                        iteration,
                        locals,
                        aggregate_sqr,
                    });
                }
            }
            Err(e) => {
                // A NaN or infinite gradient: the estimate keeps its state.
                self.skipped += 1;
                if self.verbose {
                    eprintln!(
                        "pacer controller: iteration {iteration}: gradient noise scale not updated: {e}"
                    );
                }
            }
        }
    }

    /// The noise scale, once it is a measurement: `None` while `|G|²` is at its floor
    /// (`GnsEstimator::resolved`), where the estimator's value (`base_batch · 10⁶`)
    /// only says "much larger than the batch" and was reported as if measured.
    pub fn noise_scale(&self) -> Option<f64> {
        if self.est.resolved() {
            self.est.noise_scale()
        } else {
            None
        }
    }

    pub fn grad_sqr(&self) -> Option<f64> {
        self.est.grad_sqr()
    }

    pub fn trace_cov(&self) -> Option<f64> {
        self.est.trace_cov()
    }

    /// The goodput-optimal global batch between the estimator's base batch (the
    /// run's) and `max_batch`, for a step of `rate`; `None` without an estimate or
    /// while `|G|²` is at its floor (`GnsEstimator::resolved`).
    pub fn best_batch(&self, rate: &StepRate, max_batch: f64) -> Option<GlobalBatchChoice> {
        pacer_control::job::decide::running_job_batch(
            &self.est,
            rate.samples_per_s,
            rate.overhead_s,
            max_batch,
        )
    }

    /// Record the estimate after `iteration` iterations, if there is one, with the
    /// goodput-optimal batch when the step's rate is known.
    pub fn record_point(&mut self, iteration: u64, rate: Option<&StepRate>, max_batch: f64) {
        if let (Some(noise_scale), Some(grad_sqr), Some(trace_cov)) =
            (self.noise_scale(), self.grad_sqr(), self.trace_cov())
        {
            let best = rate.and_then(|r| self.best_batch(r, max_batch));
            crate::controller::report::push_capped(
                &mut self.curve,
                NoiseScalePoint {
                    iteration,
                    noise_scale,
                    grad_sqr,
                    trace_cov,
                    goodput_optimal_batch: best.map(|c| c.batch),
                    goodput_gain: best.map(|c| c.gain),
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) % 2001) as f32 - 1000.0
            })
            .map(|v| v * 1e-3)
            .collect()
    }

    fn exact(v: &[f32]) -> f64 {
        v.iter().map(|&x| f64::from(x) * f64::from(x)).sum()
    }

    #[test]
    fn fused_sums_match_the_plain_ones() {
        // Lengths around the block and lane sizes, and the MLP's on MNIST.
        for n in [0, 1, 15, 16, 17, 1023, 1024, 1025, 5000, 101_770] {
            let g = values(n, 7);
            let start = values(n, 3);
            let mut acc = start.clone();
            let s = accumulate_sqr(&mut acc, 0.25, &g);
            let want = exact(&g);
            assert!(
                (s - want).abs() <= 1e-6 * want.max(1e-30),
                "{n}: {s} vs {want}"
            );
            for ((a, b), x) in acc.iter().zip(&start).zip(&g) {
                assert_eq!(*a, b + 0.25 * x);
            }
            let s = sqr_norm(&acc);
            let want = exact(&acc);
            assert!(
                (s - want).abs() <= 1e-6 * want.max(1e-30),
                "{n}: {s} vs {want}"
            );
            assert_eq!(clear_sqr(&mut acc), s);
            assert!(acc.iter().all(|&v| v == 0.0));
        }
    }

    #[test]
    fn disrupted_and_single_task_iterations_are_skipped() {
        let mut t = GnsTracker::new(SMOOTHING, 64, 10, false);
        let l = |s, len, sqr| LocalNorm {
            stream_start: s,
            len,
            sqr,
        };
        t.gathered(0, None);
        assert!(!t.waiting());
        // One non-empty task: no two-batch estimate.
        t.gathered(1, Some(vec![l(64, 64, 1.0), l(128, 0, 0.0)]));
        assert!(!t.waiting());
        t.gathered(2, Some(vec![l(170, 20, 1.5), l(128, 44, 1.2)]));
        assert!(t.waiting());
        t.aggregate(1.1);
        assert_eq!((t.observed, t.skipped), (1, 2));
        assert_eq!(t.inputs[0].locals[0].stream_start, 128, "stream order");
        assert!(t.noise_scale().is_some_and(|b| b.is_finite() && b > 0.0));
        // A NaN norm is refused and leaves the estimate alone.
        let before = t.noise_scale();
        t.gathered(3, Some(vec![l(192, 20, f64::NAN), l(212, 44, 1.2)]));
        t.aggregate(1.0);
        t.gathered(4, Some(vec![l(256, 20, 1.0), l(276, 44, 1.2)]));
        t.aggregate(f64::INFINITY);
        assert_eq!((t.observed, t.skipped), (1, 4));
        assert_eq!(t.noise_scale(), before);
        assert!(!t.waiting());
    }
}
