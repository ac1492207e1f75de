//! Worker level: per-worker local batches that remove stragglers while the global
//! batch `B` stays fixed (ALGORITHMS.md §1a, §1c).
//!
//! In synchronous data parallelism every iteration waits for the slowest worker, so
//! the goal is equal compute times: worker `i` gets `b_i` samples with `Σ b_i = B`,
//! each `b_i` within `[min_i, max_i]` (`max_i` already includes the memory cap).
//! Controllers are told the batches of the iteration that just ran, its measured
//! compute times and the *predicted* speeds for the coming iteration (from
//! `pacer_predict::speed`), and rewrite the batches in place.
//!
//! | name        | type                 | rule                                                        |
//! |-------------|----------------------|-------------------------------------------------------------|
//! | `uniform`   | [`Uniform`]          | plain BSP: `B/n` each (water-filled under caps)             |
//! | `lbbsp-cpu` | [`LbBsp`]            | `b_i ∝ v̂_i` every iteration (time linear in batch)          |
//! | `lbbsp-gpu` | [`LbBsp`]            | every `W` iterations move `δ` samples slowest → fastest with headroom; halve `δ` and widen `W` when a worker's direction flips |
//! | `lbbsp`     | [`LbBsp`]            | `-gpu` when the problem says step time is non-linear ([`BatchProblem::gpu_like`]), else `-cpu` |
//! | `pid`       | [`Pid`]              | Tyagi & Sharma P-control with dead-band and window averaging, plus a leaky integral term with anti-windup |
//!
//! Every controller's output goes through [`apportion`], which is where the
//! invariants live: the result sums exactly to `B`, respects every bound and is never
//! negative, whatever the (possibly NaN) predictions were.

mod lbbsp;
mod pid;
mod uniform;

pub use lbbsp::{LbBsp, LbBspMode};
pub use pid::{Pid, PidConfig};
pub use uniform::Uniform;

use std::fmt;

/// Bounds on one worker's local batch. `max` is the tighter of the configured
/// maximum and the memory cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBounds {
    pub min: u64,
    pub max: u64,
}

/// Why a batching problem has no solution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    NoWorkers,
    ZeroGlobalBatch,
    EmptyRange { worker: usize, min: u64, max: u64 },
    CapsTooSmall { sum_max: u64, global_batch: u64 },
    MinimaTooLarge { sum_min: u64, global_batch: u64 },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::NoWorkers => write!(f, "workers: at least one worker is needed"),
            BatchError::ZeroGlobalBatch => write!(f, "global_batch: must be > 0"),
            BatchError::EmptyRange { worker, min, max } => write!(
                f,
                "workers[{worker}]: min_batch {min} exceeds max batch / memory cap {max}"
            ),
            BatchError::CapsTooSmall {
                sum_max,
                global_batch,
            } => write!(
                f,
                "global_batch: {global_batch} cannot be held, the workers' max batch / memory caps sum to {sum_max}"
            ),
            BatchError::MinimaTooLarge {
                sum_min,
                global_batch,
            } => write!(
                f,
                "global_batch: {global_batch} is below the sum of the workers' min_batch ({sum_min})"
            ),
        }
    }
}

impl std::error::Error for BatchError {}

/// A validated worker-level problem: global batch, per-worker bounds, and whether step
/// time is non-linear in batch (GPU-like), which selects the LB-BSP variant.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchProblem {
    global_batch: u64,
    bounds: Vec<BatchBounds>,
    gpu_like: bool,
}

impl BatchProblem {
    /// Checks that some assignment satisfies every bound and sums to `global_batch`.
    pub fn new(
        global_batch: u64,
        bounds: Vec<BatchBounds>,
        gpu_like: bool,
    ) -> Result<Self, BatchError> {
        if bounds.is_empty() {
            return Err(BatchError::NoWorkers);
        }
        if global_batch == 0 {
            return Err(BatchError::ZeroGlobalBatch);
        }
        for (worker, b) in bounds.iter().enumerate() {
            if b.min > b.max {
                return Err(BatchError::EmptyRange {
                    worker,
                    min: b.min,
                    max: b.max,
                });
            }
        }
        let sum_max = bounds.iter().map(|b| b.max).fold(0u64, u64::saturating_add);
        let sum_min = bounds.iter().map(|b| b.min).fold(0u64, u64::saturating_add);
        if sum_max < global_batch {
            return Err(BatchError::CapsTooSmall {
                sum_max,
                global_batch,
            });
        }
        if sum_min > global_batch {
            return Err(BatchError::MinimaTooLarge {
                sum_min,
                global_batch,
            });
        }
        Ok(BatchProblem {
            global_batch,
            bounds,
            gpu_like,
        })
    }
    pub fn global_batch(&self) -> u64 {
        self.global_batch
    }
    pub fn bounds(&self) -> &[BatchBounds] {
        &self.bounds
    }
    pub fn n_workers(&self) -> usize {
        self.bounds.len()
    }
    pub fn gpu_like(&self) -> bool {
        self.gpu_like
    }
    /// Plain-BSP starting point: equal shares, water-filled under the caps.
    pub fn uniform(&self) -> Vec<u64> {
        let mut out = vec![0; self.n_workers()];
        apportion(
            &vec![1.0; self.n_workers()],
            self.global_batch,
            &self.bounds,
            &mut out,
        );
        out
    }
}

/// What a controller sees after an iteration.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// Compute seconds each worker spent on the iteration that just ran (measured).
    pub compute_s: &'a [f64],
    /// Predicted samples/s of each worker for the coming iteration.
    pub predicted_speed: &'a [f64],
}

/// A worker-level batch controller.
pub trait BatchController: Send {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// `batches` holds the batches of the iteration that just ran; overwrite it with
    /// the next iteration's. Must keep `Σ = B` and the bounds (use [`apportion`]).
    fn decide(&mut self, obs: &Observation<'_>, batches: &mut [u64]);
}

/// Names accepted by [`make_controller`].
pub const CONTROLLERS: [&str; 5] = ["uniform", "lbbsp", "lbbsp-cpu", "lbbsp-gpu", "pid"];

/// Build a controller by registry name for `problem`.
pub fn make_controller(name: &str, problem: &BatchProblem) -> Option<Box<dyn BatchController>> {
    Some(match name {
        "uniform" => Box::new(Uniform::new(problem)),
        "lbbsp" => Box::new(LbBsp::new(
            problem,
            if problem.gpu_like() {
                LbBspMode::Shift
            } else {
                LbBspMode::Proportional
            },
        )),
        "lbbsp-cpu" => Box::new(LbBsp::new(problem, LbBspMode::Proportional)),
        "lbbsp-gpu" => Box::new(LbBsp::new(problem, LbBspMode::Shift)),
        "pid" => Box::new(Pid::new(problem, PidConfig::default())),
        _ => return None,
    })
}

/// Replace unusable weights (NaN, ∞, ≤ 0) so that a bad prediction can only shrink a
/// worker to its minimum, never break the allocation.
fn sanitize(weights: &[f64], out: &mut Vec<f64>) {
    out.clear();
    let good: Vec<f64> = weights
        .iter()
        .copied()
        .filter(|w| w.is_finite() && *w > 0.0)
        .collect();
    let fallback = if good.is_empty() {
        1.0
    } else {
        good.iter().sum::<f64>() / good.len() as f64
    };
    out.extend(weights.iter().map(|&w| {
        if w.is_finite() && w > 0.0 {
            w
        } else if good.is_empty() {
            fallback
        } else {
            fallback * 1e-9
        }
    }));
}

/// Continuous water-filling: `x_i = clamp(λ·w_i, min_i, max_i)` with `λ` chosen so that
/// `Σ x_i = total`. Bounds must admit `total`.
pub fn water_fill(weights: &[f64], total: f64, bounds: &[BatchBounds], out: &mut [f64]) {
    let mut w = Vec::with_capacity(weights.len());
    sanitize(weights, &mut w);
    let fill = |lambda: f64, out: &mut [f64]| -> f64 {
        let mut s = 0.0;
        for ((o, &wi), b) in out.iter_mut().zip(&w).zip(bounds) {
            *o = (lambda * wi).clamp(b.min as f64, b.max as f64);
            s += *o;
        }
        s
    };
    // λ_hi puts every worker at its max, so Σ ≥ total there; Σ is monotone in λ.
    let mut hi = w
        .iter()
        .zip(bounds)
        .map(|(wi, b)| b.max as f64 / wi)
        .fold(0.0f64, f64::max);
    let mut lo = 0.0;
    // Bisection to relative precision 2^-60: exact enough that rounding decides.
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if fill(mid, out) < total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    fill(hi, out);
}

/// Integer apportionment: proportional to `weights` (water-filled under `bounds`),
/// rounded by largest remainder so that the result sums to exactly `total` and every
/// entry is within its bounds. `bounds` must admit `total`
/// (`Σ min ≤ total ≤ Σ max`, guaranteed by [`BatchProblem::new`]).
pub fn apportion(weights: &[f64], total: u64, bounds: &[BatchBounds], out: &mut [u64]) {
    let n = weights.len();
    debug_assert_eq!(n, bounds.len());
    debug_assert_eq!(n, out.len());
    let mut x = vec![0.0; n];
    water_fill(weights, total as f64, bounds, &mut x);
    let mut sum: u64 = 0;
    for ((o, &xi), b) in out.iter_mut().zip(&x).zip(bounds) {
        *o = (xi.floor() as u64).clamp(b.min, b.max);
        sum += *o;
    }
    if sum == total {
        return;
    }
    // Order by fractional part: add to the largest remainders, take from the smallest.
    let mut order: Vec<usize> = (0..n).collect();
    let frac = |i: usize| x[i] - out[i] as f64;
    order.sort_by(|&a, &b| frac(b).total_cmp(&frac(a)).then(a.cmp(&b)));
    while sum < total {
        let before = sum;
        for &i in &order {
            if sum == total {
                break;
            }
            if out[i] < bounds[i].max {
                out[i] += 1;
                sum += 1;
            }
        }
        assert!(sum > before, "apportion: bounds cannot hold total");
    }
    while sum > total {
        let before = sum;
        for &i in order.iter().rev() {
            if sum == total {
                break;
            }
            if out[i] > bounds[i].min {
                out[i] -= 1;
                sum -= 1;
            }
        }
        assert!(sum < before, "apportion: bounds cannot hold total");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn problem_strategy() -> impl Strategy<Value = (BatchProblem, Vec<f64>, Vec<f64>)> {
        (1usize..24)
            .prop_flat_map(|n| {
                (
                    proptest::collection::vec((0u64..20, 0u64..400), n),
                    proptest::collection::vec(
                        prop_oneof![
                            4 => 0.1f64..5000.0,
                            1 => Just(0.0),
                            1 => Just(f64::NAN),
                            1 => Just(-3.0),
                        ],
                        n,
                    ),
                    proptest::collection::vec(0.001f64..2.0, n),
                    0.0f64..1.0,
                    any::<bool>(),
                )
            })
            .prop_map(|(mm, speeds, times, frac, gpu)| {
                let bounds: Vec<BatchBounds> = mm
                    .iter()
                    .map(|&(lo, span)| BatchBounds {
                        min: lo,
                        max: lo + span,
                    })
                    .collect();
                let smin: u64 = bounds.iter().map(|b| b.min).sum();
                let smax: u64 = bounds.iter().map(|b| b.max).sum();
                let total = (smin + ((smax - smin) as f64 * frac) as u64).max(1);
                let smax = smax.max(1);
                let bounds = if smax < total {
                    // all-zero spans with zero minima: give worker 0 room
                    let mut b = bounds;
                    b[0].max = total;
                    b
                } else {
                    bounds
                };
                (
                    BatchProblem::new(total, bounds, gpu).unwrap(),
                    speeds,
                    times,
                )
            })
    }

    fn check(p: &BatchProblem, b: &[u64]) {
        assert_eq!(b.iter().sum::<u64>(), p.global_batch());
        for (x, bd) in b.iter().zip(p.bounds()) {
            assert!(*x >= bd.min && *x <= bd.max, "{x} not in {bd:?}");
        }
    }

    proptest! {
        #[test]
        fn every_controller_keeps_sum_and_bounds((p, speeds, times) in problem_strategy()) {
            for name in CONTROLLERS {
                let mut c = make_controller(name, &p).unwrap();
                let mut b = p.uniform();
                check(&p, &b);
                for k in 0..12 {
                    // rotate the speeds so that controllers keep moving
                    let s: Vec<f64> = (0..speeds.len()).map(|i| speeds[(i + k) % speeds.len()]).collect();
                    c.decide(&Observation { compute_s: &times, predicted_speed: &s }, &mut b);
                    check(&p, &b);
                }
            }
        }

        #[test]
        fn controllers_are_deterministic((p, speeds, times) in problem_strategy()) {
            for name in CONTROLLERS {
                let run = || {
                    let mut c = make_controller(name, &p).unwrap();
                    let mut b = p.uniform();
                    let mut all = Vec::new();
                    for _ in 0..5 {
                        c.decide(&Observation { compute_s: &times, predicted_speed: &speeds }, &mut b);
                        all.extend_from_slice(&b);
                    }
                    all
                };
                prop_assert_eq!(run(), run());
            }
        }

        #[test]
        fn apportion_is_proportional_when_unbounded(ws in proptest::collection::vec(1.0f64..100.0, 1..16), total in 1u64..10_000) {
            let n = ws.len();
            let bounds = vec![BatchBounds { min: 0, max: total }; n];
            let mut out = vec![0; n];
            apportion(&ws, total, &bounds, &mut out);
            prop_assert_eq!(out.iter().sum::<u64>(), total);
            let sw: f64 = ws.iter().sum();
            for (o, w) in out.iter().zip(&ws) {
                prop_assert!((*o as f64 - total as f64 * w / sw).abs() <= 1.0 + 1e-6);
            }
        }
    }

    #[test]
    fn infeasible_problems_are_rejected() {
        let b = |min, max| BatchBounds { min, max };
        assert_eq!(
            BatchProblem::new(100, vec![b(0, 40), b(0, 40)], false),
            Err(BatchError::CapsTooSmall {
                sum_max: 80,
                global_batch: 100
            })
        );
        assert!(matches!(
            BatchProblem::new(10, vec![b(8, 40), b(8, 40)], false),
            Err(BatchError::MinimaTooLarge { .. })
        ));
        assert!(matches!(
            BatchProblem::new(10, vec![b(8, 4)], false),
            Err(BatchError::EmptyRange { worker: 0, .. })
        ));
        assert_eq!(
            BatchProblem::new(10, vec![], false),
            Err(BatchError::NoWorkers)
        );
    }

    #[test]
    fn water_filling_respects_caps() {
        let bounds = vec![
            BatchBounds { min: 0, max: 100 },
            BatchBounds { min: 0, max: 1000 },
            BatchBounds { min: 0, max: 1000 },
        ];
        let mut out = vec![0; 3];
        apportion(&[10.0, 1.0, 1.0], 600, &bounds, &mut out);
        assert_eq!(out, vec![100, 250, 250]);
    }
}
