//! Ground truth of the simulated workers: step time as a function of local batch and
//! iteration, the monitor's exogenous signals, and the oracle balancer.

use crate::scenario::{Scenario, WorkerSpec};
use pacer_predict::speed::Exogenous;

/// Noise-free step time of one worker at its nominal speed.
#[derive(Debug, Clone)]
pub enum StepTime {
    /// `b / samples_per_s`.
    Linear { samples_per_s: f64 },
    /// Piecewise-linear through `(batch, seconds)` points, extended with the end
    /// segments' slopes (and never below the line through the origin and the first
    /// point, so that tiny batches keep a positive time).
    Curve { points: Vec<(f64, f64)> },
}

impl StepTime {
    pub fn from_spec(w: &WorkerSpec) -> Self {
        match &w.curve {
            Some(points) => StepTime::Curve {
                points: points.clone(),
            },
            None => StepTime::Linear {
                samples_per_s: w.samples_per_s.unwrap_or(1.0),
            },
        }
    }

    /// Seconds for a local batch of `b` samples (monotone non-decreasing in `b`).
    pub fn seconds(&self, b: f64) -> f64 {
        match self {
            StepTime::Linear { samples_per_s } => b / samples_per_s,
            StepTime::Curve { points } => {
                let seg = match points.iter().position(|&(pb, _)| pb >= b) {
                    Some(0) => 0,
                    Some(j) => j - 1,
                    None => points.len() - 2,
                };
                let (b0, s0) = points[seg];
                let (b1, s1) = points[seg + 1];
                let t = s0 + (s1 - s0) * (b - b0) / (b1 - b0);
                if b < points[0].0 {
                    t.max(points[0].1 * b / points[0].0)
                } else {
                    t
                }
            }
        }
    }
}

/// Step-time multiplier and monitor signals of worker `w` at iteration `k`.
pub fn conditions(w: &WorkerSpec, k: u64) -> (f64, Exogenous) {
    let mut mult = 1.0;
    let mut free_cpu = 1.0;
    let mut free_mem = 1.0;
    for i in &w.interference {
        if (i.start..i.end).contains(&k) {
            mult *= i.slowdown;
            free_cpu *= 1.0 - i.cpu_load.unwrap_or(1.0 - 1.0 / i.slowdown);
            free_mem *= 1.0 - i.mem_load.unwrap_or(0.0);
        }
    }
    if let Some(d) = &w.drift {
        let frac = if k <= d.start {
            0.0
        } else if k >= d.end {
            1.0
        } else {
            (k - d.start) as f64 / (d.end - d.start) as f64
        };
        mult *= 1.0 + (d.slowdown - 1.0) * frac;
    }
    (
        mult,
        Exogenous {
            cpu_load: 1.0 - free_cpu,
            mem_load: 1.0 - free_mem,
        },
    )
}

/// The workers of a scenario, expanded.
#[derive(Debug, Clone)]
pub struct Workers {
    pub step: Vec<StepTime>,
    pub min: Vec<u64>,
    pub max: Vec<u64>,
}

impl Workers {
    pub fn new(sc: &Scenario) -> Self {
        let mut w = Workers {
            step: Vec::new(),
            min: Vec::new(),
            max: Vec::new(),
        };
        for spec in sc.expanded() {
            w.step.push(StepTime::from_spec(spec));
            w.min.push(spec.min_batch.unwrap_or(1));
            w.max.push(spec.cap(sc.global_batch));
        }
        w
    }

    /// Largest batch of worker `i` whose expected time (× `mult`) is ≤ `t`, or
    /// `None` if even its minimum batch takes longer.
    fn capacity(&self, i: usize, mult: f64, t: f64) -> Option<u64> {
        let f = |b: u64| self.step[i].seconds(b as f64) * mult;
        let (lo, hi) = (self.min[i], self.max[i]);
        if f(lo) > t {
            return None;
        }
        if let StepTime::Linear { samples_per_s } = self.step[i] {
            let b = (t * samples_per_s / mult).floor() as u64;
            return Some(b.clamp(lo, hi));
        }
        let (mut a, mut z) = (lo, hi);
        if f(z) <= t {
            return Some(z);
        }
        // f(a) ≤ t < f(z)
        while z - a > 1 {
            let m = a + (z - a) / 2;
            if f(m) <= t {
                a = m;
            } else {
                z = m;
            }
        }
        Some(a)
    }

    /// Oracle balancer: the integer batches minimising the largest expected step time
    /// given the true multipliers (it knows speeds, not the next jitter draw).
    pub fn oracle(&self, global_batch: u64, mult: &[f64], out: &mut [u64]) {
        let n = self.step.len();
        let time = |i: usize, b: u64| self.step[i].seconds(b as f64) * mult[i];
        let mut lo = (0..n).map(|i| time(i, self.min[i])).fold(0.0, f64::max);
        let mut hi = (0..n).map(|i| time(i, self.max[i])).fold(0.0, f64::max);
        let fits = |t: f64, out: &mut [u64]| -> bool {
            let mut s = 0u64;
            for (i, o) in out.iter_mut().enumerate() {
                match self.capacity(i, mult[i], t) {
                    Some(c) => *o = c,
                    None => return false,
                }
                s += *o;
            }
            s >= global_batch
        };
        if fits(lo, out) {
            hi = lo;
        }
        for _ in 0..60 {
            if hi - lo <= hi * 1e-12 {
                break;
            }
            let mid = 0.5 * (lo + hi);
            if fits(mid, out) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let ok = fits(hi, out);
        debug_assert!(ok);
        // Trim the excess from the workers that are slowest at their batch: removing
        // samples never raises a time, and trimming the slowest can only lower the max.
        let mut excess = out.iter().sum::<u64>() - global_batch;
        while excess > 0 {
            let mut best = None;
            let mut best_t = f64::MIN;
            for (i, &b) in out.iter().enumerate() {
                if b > self.min[i] {
                    let t = time(i, b);
                    if t > best_t {
                        best_t = t;
                        best = Some(i);
                    }
                }
            }
            let Some(i) = best else { break };
            let take = excess
                .min(out[i] - self.min[i])
                .min(excess.div_ceil(n as u64).max(1));
            out[i] -= take;
            excess -= take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_interpolates_and_extrapolates_monotonically() {
        let c = StepTime::Curve {
            points: vec![(16.0, 0.03), (64.0, 0.08), (256.0, 0.30)],
        };
        assert!((c.seconds(64.0) - 0.08).abs() < 1e-12);
        assert!((c.seconds(40.0) - 0.055).abs() < 1e-12);
        let mut prev = 0.0;
        for b in 1..600 {
            let t = c.seconds(b as f64);
            assert!(t > 0.0 && t >= prev);
            prev = t;
        }
    }

    #[test]
    fn oracle_balances_linear_workers() {
        let w = Workers {
            step: [600.0, 600.0, 400.0, 3200.0]
                .iter()
                .map(|&v| StepTime::Linear { samples_per_s: v })
                .collect(),
            min: vec![1; 4],
            max: vec![1024; 4],
        };
        let mut out = vec![0; 4];
        w.oracle(1024, &[1.0; 4], &mut out);
        assert_eq!(out.iter().sum::<u64>(), 1024);
        let t = (0..4)
            .map(|i| w.step[i].seconds(out[i] as f64))
            .fold(0.0, f64::max);
        assert!(t <= 1024.0 / 4800.0 * 1.01, "{out:?} {t}");
    }
}
