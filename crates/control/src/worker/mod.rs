//! Worker level: per-worker local batches that remove stragglers while the global
//! batch `B` stays fixed (docs/algorithms.md §1a, §1c).
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
//! The adaptive rules do not see raw predictions: each runs them through a
//! [`NoiseGate`], which learns every worker's prediction-noise level and passes a
//! worker's new speed only when it differs significantly (3 noise levels, or a
//! significant mean over recent predictions) from the one its batch is based on —
//! a noise-aware dead-band with hysteresis. It is what keeps adaptive batching from
//! losing to plain BSP on noisy identical workers; see `gate.rs` for the design and
//! the measurements, and [`make_controller_with`] / [`GateConfig::off`] for the
//! ungated rules.
//!
//! Every controller's output goes through [`apportion`], which is where the
//! invariants live: the result sums exactly to `B`, respects every bound and is never
//! negative, whatever the (possibly NaN) predictions were.

mod gate;
mod lbbsp;
mod pid;
mod state;
mod uniform;

pub use gate::{GateConfig, NoiseGate};
pub use lbbsp::{LbBsp, LbBspMode};
pub use pid::{Pid, PidConfig};
pub use state::ControllerState;
pub use uniform::Uniform;

use std::fmt;

/// Bounds on one worker's local batch. `max` is the tighter of the configured
/// maximum and the memory cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchBounds {
    pub min: u64,
    pub max: u64,
}

/// Largest global batch: 2^53, the last integer every `f64` share computation
/// represents exactly.
pub const MAX_GLOBAL_BATCH: u64 = 1 << 53;

/// Why a batching problem has no solution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    NoWorkers,
    ZeroGlobalBatch,
    /// Above [`MAX_GLOBAL_BATCH`]: the controllers' floating-point shares would no
    /// longer be exact, and apportionment could not reach the total.
    GlobalBatchTooLarge {
        global_batch: u64,
    },
    EmptyRange {
        worker: usize,
        min: u64,
        max: u64,
    },
    CapsTooSmall {
        sum_max: u64,
        global_batch: u64,
    },
    MinimaTooLarge {
        sum_min: u64,
        global_batch: u64,
    },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::NoWorkers => write!(f, "workers: at least one worker is needed"),
            BatchError::ZeroGlobalBatch => write!(f, "global_batch: must be > 0"),
            BatchError::GlobalBatchTooLarge { global_batch } => write!(
                f,
                "global_batch: {global_batch} exceeds the largest global batch, {MAX_GLOBAL_BATCH} (2^53)"
            ),
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
        if global_batch > MAX_GLOBAL_BATCH {
            return Err(BatchError::GlobalBatchTooLarge { global_batch });
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
///
/// A minimal one — batches in proportion to the predicted speeds, within each worker's
/// bounds, summing exactly to the global batch:
/// ```
/// use pacer_control::worker::{apportion, BatchBounds, BatchController, BatchProblem, Observation};
///
/// struct Proportional {
///     problem: BatchProblem,
/// }
///
/// impl BatchController for Proportional {
///     fn name(&self) -> &'static str {
///         "proportional"
///     }
///     fn decide(&mut self, obs: &Observation<'_>, batches: &mut [u64]) {
///         let b = self.problem.global_batch();
///         apportion(obs.predicted_speed, b, self.problem.bounds(), batches);
///     }
/// }
///
/// let bounds = vec![BatchBounds { min: 1, max: 512 }; 3];
/// let mut c = Proportional { problem: BatchProblem::new(512, bounds, false).unwrap() };
/// let mut batches = [171, 171, 170];
/// let obs = Observation { compute_s: &[1.0, 1.0, 2.0], predicted_speed: &[200.0, 200.0, 100.0] };
/// c.decide(&obs, &mut batches);
/// assert_eq!(batches.iter().sum::<u64>(), 512);
/// assert!(batches[0] > batches[2]);
/// ```
pub trait BatchController: Send {
    /// Registry name.
    fn name(&self) -> &'static str;
    /// `batches` holds the batches of the iteration that just ran; overwrite it with
    /// the next iteration's. Must keep `Σ = B` and the bounds (use [`apportion`]).
    fn decide(&mut self, obs: &Observation<'_>, batches: &mut [u64]);
    /// The controller's state, for a session snapshot; `None` (the default) for a
    /// controller the registry does not know, which makes a snapshot refuse.
    fn save(&self) -> Option<ControllerState> {
        None
    }
}

/// Names accepted by [`make_controller`].
pub const CONTROLLERS: [&str; 5] = ["uniform", "lbbsp", "lbbsp-cpu", "lbbsp-gpu", "pid"];

/// Build a controller by registry name for `problem` (adaptive ones with the default
/// [`NoiseGate`]).
pub fn make_controller(name: &str, problem: &BatchProblem) -> Option<Box<dyn BatchController>> {
    make_controller_with(name, problem, GateConfig::default())
}

/// [`make_controller`] with explicit noise-gate constants for the adaptive
/// controllers ([`GateConfig::off`] reproduces the ungated rules).
pub fn make_controller_with(
    name: &str,
    problem: &BatchProblem,
    gate: GateConfig,
) -> Option<Box<dyn BatchController>> {
    Some(match name {
        "uniform" => Box::new(Uniform::new(problem)),
        "lbbsp" => Box::new(LbBsp::with_gate(
            problem,
            if problem.gpu_like() {
                LbBspMode::Shift
            } else {
                LbBspMode::Proportional
            },
            gate,
        )),
        "lbbsp-cpu" => Box::new(LbBsp::with_gate(problem, LbBspMode::Proportional, gate)),
        "lbbsp-gpu" => Box::new(LbBsp::with_gate(problem, LbBspMode::Shift, gate)),
        "pid" => Box::new(Pid::new(
            problem,
            PidConfig {
                gate,
                ..PidConfig::default()
            },
        )),
        _ => return None,
    })
}

/// Deterministic random numbers for the unit tests (no RNG dependency).
#[cfg(test)]
pub(crate) mod testutil {
    use pacer_model::rng::SplitMix64;

    /// Standard normals by Box–Muller on splitmix64.
    pub(crate) struct Normals(SplitMix64);
    impl Normals {
        pub(crate) fn new(seed: u64) -> Self {
            Normals(SplitMix64::new(seed))
        }
        fn uniform(&mut self) -> f64 {
            self.0.next_f64()
        }
        pub(crate) fn next(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        }
    }
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
///
/// `Σ x_i(λ)` is continuous, piecewise linear and non-decreasing in `λ`, so Newton
/// steps (slope = `Σ w_i` over the unclamped workers) land on the solution as soon as
/// they see the right set of clamped workers — one or two passes over the workers
/// when few bounds bind — and bisection of the bracket guards the rest. (A plain
/// 64-step bisection was half the cost of a 1,000-worker decision.)
pub fn water_fill(weights: &[f64], total: f64, bounds: &[BatchBounds], out: &mut [f64]) {
    let mut w = Vec::with_capacity(weights.len());
    sanitize(weights, &mut w);
    let fill = |lambda: f64, out: &mut [f64]| -> (f64, f64) {
        let (mut s, mut slope) = (0.0, 0.0);
        for ((o, &wi), b) in out.iter_mut().zip(&w).zip(bounds) {
            let x = lambda * wi;
            let (lo, hi) = (b.min as f64, b.max as f64);
            *o = if x <= lo {
                lo
            } else if x >= hi {
                hi
            } else {
                slope += wi;
                x
            };
            s += *o;
        }
        (s, slope)
    };
    // λ_hi puts every worker at its max, so Σ ≥ total there.
    let mut hi = w
        .iter()
        .zip(bounds)
        .map(|(wi, b)| b.max as f64 / wi)
        .fold(0.0f64, f64::max);
    let mut lo = 0.0;
    let sum_w: f64 = w.iter().sum();
    let mut lambda = (total / sum_w).clamp(lo, hi);
    let tol = 1e-9 * total.max(1.0);
    for _ in 0..200 {
        let (s, slope) = fill(lambda, out);
        let err = total - s;
        if err.abs() <= tol {
            return;
        }
        if err > 0.0 {
            lo = lambda;
        } else {
            hi = lambda;
        }
        if hi - lo <= hi * 1e-15 {
            break;
        }
        let newton = if slope > 0.0 {
            lambda + err / slope
        } else {
            f64::NAN
        };
        lambda = if newton > lo && newton < hi {
            newton
        } else {
            0.5 * (lo + hi)
        };
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
    // Largest remainders get the missing units (smallest give up the excess); ties go
    // to the lower index. One pass suffices when `x` is feasible (every non-integer
    // `x_i` has room both ways), and a selection finds that pass's workers in O(n).
    for (xi, &o) in x.iter_mut().zip(out.iter()) {
        *xi -= o as f64;
    }
    let frac = &x;
    let by_frac_desc = |a: &usize, b: &usize| frac[*b].total_cmp(&frac[*a]).then(a.cmp(b));
    let mut pick: Vec<usize> = Vec::with_capacity(n);
    while sum < total {
        pick.clear();
        pick.extend((0..n).filter(|&i| out[i] < bounds[i].max));
        let need = ((total - sum) as usize).min(pick.len());
        assert!(need > 0, "apportion: bounds cannot hold total");
        if need < pick.len() {
            pick.select_nth_unstable_by(need - 1, by_frac_desc);
            pick.truncate(need);
        }
        for &i in &pick {
            out[i] += 1;
            sum += 1;
        }
    }
    while sum > total {
        pick.clear();
        pick.extend((0..n).filter(|&i| out[i] > bounds[i].min));
        let need = ((sum - total) as usize).min(pick.len());
        assert!(need > 0, "apportion: bounds cannot hold total");
        if need < pick.len() {
            // The smallest remainders: the last `need` in descending order.
            let at = pick.len() - need;
            pick.select_nth_unstable_by(at, by_frac_desc);
            pick.drain(..at);
        }
        for &i in &pick {
            out[i] -= 1;
            sum -= 1;
        }
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
        // u64::MAX once made `uniform` loop for ~2^63 steps (the f64 shares lost the
        // units that apportionment then added one at a time).
        let huge = u64::MAX;
        assert_eq!(
            BatchProblem::new(huge, vec![b(1, huge / 2); 3], false),
            Err(BatchError::GlobalBatchTooLarge { global_batch: huge })
        );
        let top = MAX_GLOBAL_BATCH;
        let p = BatchProblem::new(top, vec![b(1, top); 3], false).unwrap();
        assert_eq!(p.uniform().iter().sum::<u64>(), top);
    }

    /// What one run of [`noisy_run`] saw.
    struct NoisyRun {
        /// Samples moved between workers per iteration, over iterations 100..600
        /// (pure noise).
        quiet_moved: f64,
        /// Mean over those iterations of the largest batch over the mean batch, − 1:
        /// the straggler's extra load that noise-chasing costs.
        quiet_excess: f64,
        /// Worker 0's batch at each iteration from 600 (its 2× slowdown) on.
        after: Vec<u64>,
        /// Largest over smallest expected time at the end.
        final_imbalance: f64,
    }

    /// 8 identical workers at 700 samples/s with 15 % log-normal jitter, predicted by
    /// `last` (the noisiest predictor: next = last measured speed); from iteration
    /// 600 on, worker 0 runs 2× slower.
    fn noisy_run(name: &str, gate: GateConfig) -> NoisyRun {
        use testutil::Normals;
        let n = 8;
        let p = BatchProblem::new(1024, vec![BatchBounds { min: 1, max: 1024 }; n], false).unwrap();
        let mut c = make_controller_with(name, &p, gate).unwrap();
        let mut rng = Normals::new(7);
        let mut b = p.uniform();
        let (mut pred, mut compute) = (vec![700.0; n], vec![0.0; n]);
        let mean = |i: usize, k: usize| if i == 0 && k >= 600 { 350.0 } else { 700.0 };
        let mut run = NoisyRun {
            quiet_moved: 0.0,
            quiet_excess: 0.0,
            after: Vec::new(),
            final_imbalance: 0.0,
        };
        for k in 0..1000 {
            if k > 0 {
                let before = b.clone();
                c.decide(
                    &Observation {
                        compute_s: &compute,
                        predicted_speed: &pred,
                    },
                    &mut b,
                );
                if (100..600).contains(&k) {
                    let moved: u64 = b.iter().zip(&before).map(|(x, y)| x.abs_diff(*y)).sum();
                    run.quiet_moved += moved as f64 / 2.0 / 500.0;
                    let top = *b.iter().max().unwrap() as f64;
                    run.quiet_excess += (top / 128.0 - 1.0) / 500.0;
                }
            }
            if k >= 600 {
                run.after.push(b[0]);
            }
            for i in 0..n {
                let v = mean(i, k) * (0.15 * rng.next()).exp();
                compute[i] = b[i] as f64 / v;
                pred[i] = v;
            }
        }
        let t: Vec<f64> = (0..n).map(|i| b[i] as f64 / mean(i, 999)).collect();
        run.final_imbalance =
            t.iter().cloned().fold(0.0, f64::max) / t.iter().cloned().fold(f64::MAX, f64::min);
        run
    }

    #[test]
    fn adaptive_controllers_hold_on_noise_and_react_to_a_real_2x_slowdown() {
        for name in ["lbbsp-cpu", "lbbsp-gpu", "pid"] {
            let ungated = noisy_run(name, GateConfig::off());
            let r = noisy_run(name, GateConfig::default());
            // Pure noise: the ungated proportional rules move tens of samples every
            // iteration and their largest batch is 20+ % above the mean (the shift
            // rule's own 2 % gap test holds it back more); gated, under one sample per
            // iteration moves (rare small refinements) and batches stay within a few %.
            if name != "lbbsp-gpu" {
                assert!(
                    ungated.quiet_moved > 20.0 && ungated.quiet_excess > 0.2,
                    "{name} ungated: {:.1} samples moved per iteration, excess {:.3}",
                    ungated.quiet_moved,
                    ungated.quiet_excess
                );
            }
            assert!(
                r.quiet_moved < 1.0 && r.quiet_excess < 0.05,
                "{name}: {:.2} samples moved per iteration, excess {:.3} on noise",
                r.quiet_moved,
                r.quiet_excess
            );
            // A real 2× slowdown: worker 0 gives up samples within a few iterations…
            let first = r.after.iter().position(|&b| b < 100).unwrap_or(usize::MAX);
            assert!(first <= 4, "{name}: reacted after {first} iterations");
            // …and ends up balanced (its balanced batch: 1024·350/(350 + 7·700) ≈ 68).
            assert!(r.final_imbalance < 1.15, "{name}: {}", r.final_imbalance);
        }
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
