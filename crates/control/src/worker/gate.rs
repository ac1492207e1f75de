//! Noise gate: the significance filter every adaptive controller (`lbbsp-cpu`,
//! `lbbsp-gpu`, `pid`) puts between the speed predictions and its batching rule.
//!
//! ## Why
//! A prediction is an estimate, and on a noisy worker a poor one: with 15 % log-normal
//! jitter, `last` predictions scatter by ±15 % and EWMA ones by ±6 % around the true
//! speed. A rule that trusts every prediction (LB-BSP's `b ∝ v̂`, the PID's target)
//! turns that scatter into batch scatter, which widens the spread of step times and so
//! raises their expected maximum: on `noisy_homogeneous.json` it cost 7.9 % (`last`)
//! and 1.6 % (EWMA) against plain BSP. A fixed dead-band (the PID's τ = 5 %) does not
//! help once the prediction noise exceeds τ.
//!
//! ## What
//! Per worker the gate keeps an *accepted* log-speed `ℓ_i` — what the rule is fed —
//! and the worker's *noise level* `s_i`: the scale of its one-step prediction errors
//! `e = ln(b_i/t_i) − ln v̂_i` (the measured speed of the iteration that just ran
//! against the prediction made for it), learnt online as `1.2533 · mean|e|` over ~50
//! iterations with `|e|` clipped at `2.5·s_i` — a mean absolute error, so that the
//! large errors of a lagging predictor at a burst's edges barely inflate it. Each new
//! prediction `y = ln v̂_i` is then
//!
//! - **a jump** if `|y − ℓ_i| > z·s_i`: a change noise cannot explain, accepted at once
//!   (`ℓ_i ← y`); further predictions that keep moving in the same direction are
//!   accepted too, until one does not — a smoothing predictor (EWMA, ETS) converges
//!   to a new speed over several iterations, and waiting for each step to prove itself
//!   again cost 3 % efficiency on `interference_frequent.json` with EWMA;
//! - **evidence** otherwise: `d = y − ℓ_i` is added to a short window (leaky sum,
//!   λ = 0.95, ~20 iterations) and to a long one (every `d` since the last accepted
//!   change), and `ℓ_i` moves by a window's mean `d̄` once `|d̄|·√n_eff > z·s_i`. The
//!   short window catches a recent moderate shift; the long one, whose threshold
//!   shrinks as `1/√n`, refines a level that is off by less than one noise level —
//!   the first estimate, or a slow drift. Moving by the mean rather than to the last
//!   prediction is what keeps `last`'s noise out of the batches.
//!
//! `z = 3` for both. Why the one-step error is the yardstick for every predictor: it
//! bounds a prediction's own noise from above (error² = jitter² + prediction noise²),
//! and for exponential smoothers (EWMA, ETS, NARX's level) the *long-run* variance of
//! the prediction — what a window mean sees, smoothed predictions being strongly
//! autocorrelated — equals the jitter variance (`α/(2−α) · (1+ρ)/(1−ρ) = 1` with
//! `ρ = 1 − α`): the evidence test is close to calibrated for smooth predictors and
//! conservative (by √2) for `last`.
//!
//! A worker seen for the first time is anchored to the current allocation (the speed
//! its batch is right for, `v ∝ b`), so that even the first predictions must prove an
//! imbalance; before any error is scored the noise level is a prior of 5 % worth four
//! observations, so ratios of ~1.2× and more between workers are acted on at once.
//! [`NoiseGate::jumps`] tells the rule when a change was significant: `lbbsp-gpu`
//! restarts its step size and window then (see [`super::LbBsp`]).
//!
//! ## Measured
//! 2,000 iterations per scenario; `pacer batching eval --gate off` gives the ungated
//! rules. `noisy_homogeneous.json`, efficiency with `last / ewma / ets / narx`:
//! `lbbsp-cpu` 0.921 / 0.984 / 0.994 / 0.990 before, 0.999 / 0.999 / 0.999 / 1.000
//! gated; `pid` 0.921 / 0.984 / 0.994 / 0.991 → 0.999 for all four; `lbbsp-gpu`
//! 0.993–0.999 → 0.999 (uniform: 1.000); over 6 seeds the worst gated run is 0.996.
//! Batch changes over the run: ~2,000 (P rules) → 17–30; `lbbsp-gpu` 129–143 → 25–49. The gate also removes most of the
//! noise-chasing where speeds do differ (interference: `lbbsp-cpu` + `last` 0.976 →
//! 0.992, + NARX 0.988 → 0.996) and, through the restarts, lifts `lbbsp-gpu` from
//! 0.73–0.79 to 0.97–0.98 on `interference.json` and from 0.92–0.94 to 0.99 on
//! `gpu_imagenet_caps.json`. Its cost: on a slow drift (`slowing_worker.json`) the
//! accepted level lags in a saw-tooth of a few %, 0.997 → 0.993 (`lbbsp-cpu` +
//! NARX) and 0.998 → 0.994 (`pid` + ETS); and ~2 `ln` per worker and decision.

use super::Observation;

/// Constants of [`NoiseGate`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GateConfig {
    /// Significance, in noise levels, of the jump and the evidence tests. `0`
    /// disables the gate (every new prediction is accepted: the ungated rule).
    pub z: f64,
    /// λ of the short (leaky) evidence window.
    pub evidence_leak: f64,
    /// Memory of the noise estimate, in iterations.
    pub noise_memory: f64,
    /// Prior noise level (log units) before errors have been scored…
    pub prior_noise: f64,
    /// …and how many observations that prior is worth.
    pub prior_weight: f64,
    /// Errors beyond `clip·s` count as `clip·s` in the noise estimate.
    pub clip: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig {
            z: 3.0,
            evidence_leak: 0.95,
            noise_memory: 50.0,
            prior_noise: 0.05,
            prior_weight: 4.0,
            clip: 2.5,
        }
    }
}

impl GateConfig {
    /// A gate that accepts every prediction (for comparisons).
    pub fn off() -> Self {
        GateConfig {
            z: 0.0,
            ..GateConfig::default()
        }
    }
}

/// `s = MEAN_ABS_TO_SIGMA · mean|e|` (√(π/2) ≈ 1.2533 for Gaussian errors; the 2.5 s
/// clip lowers the mean by 0.5 %, which is left uncorrected).
const MEAN_ABS_TO_SIGMA: f64 = 1.2533;

/// Per-worker significance filter on predicted speeds; see the module docs.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct NoiseGate {
    cfg: GateConfig,
    /// Accepted log-speed (NaN until the first usable prediction), and its `exp`.
    #[serde(with = "super::state::nan_vec")]
    level: Vec<f64>,
    #[serde(with = "super::state::nan_vec")]
    speed: Vec<f64>,
    /// Log of the prediction made for the iteration now running (NaN if none).
    #[serde(with = "super::state::nan_vec")]
    last_pred: Vec<f64>,
    /// Mean absolute one-step log error (clipped) and its effective sample count.
    err_abs: Vec<f64>,
    err_w: Vec<f64>,
    /// Short window: `A = Σ λ^j d_{k−j}` with `Σ λ^j` and `Σ λ^{2j}`.
    acc: Vec<f64>,
    acc_w1: Vec<f64>,
    acc_w2: Vec<f64>,
    /// Long window: sum and count of deviations since the last accepted change.
    seg: Vec<f64>,
    seg_n: Vec<f64>,
    /// Direction of the last jump while the predictions keep moving that way.
    track: Vec<i8>,
    accepted: u64,
    /// Workers whose prediction was accepted as a jump by the last [`Self::filter`].
    jumps: usize,
}

fn usable(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

impl NoiseGate {
    pub fn new(n: usize, cfg: GateConfig) -> Self {
        let cfg = GateConfig {
            z: if cfg.z.is_finite() {
                cfg.z.max(0.0)
            } else {
                0.0
            },
            evidence_leak: cfg.evidence_leak.clamp(0.0, 0.999),
            noise_memory: cfg.noise_memory.max(1.0),
            prior_noise: cfg.prior_noise.max(1e-6),
            prior_weight: cfg.prior_weight.max(1.0),
            clip: cfg.clip.max(1.0),
        };
        NoiseGate {
            cfg,
            level: vec![f64::NAN; n],
            speed: vec![f64::NAN; n],
            last_pred: vec![f64::NAN; n],
            err_abs: vec![cfg.prior_noise / MEAN_ABS_TO_SIGMA; n],
            err_w: vec![cfg.prior_weight; n],
            acc: vec![0.0; n],
            acc_w1: vec![0.0; n],
            acc_w2: vec![0.0; n],
            seg: vec![0.0; n],
            seg_n: vec![0.0; n],
            track: vec![0; n],
            accepted: 0,
            jumps: 0,
        }
    }

    /// `Err(what)` unless the state fits `n` workers: every vector of length `n`, the
    /// accepted levels finite or unset (NaN), everything else finite.
    pub(super) fn check(&self, n: usize) -> Result<(), String> {
        let c = &self.cfg;
        let cfg = [
            c.z,
            c.evidence_leak,
            c.noise_memory,
            c.prior_noise,
            c.prior_weight,
            c.clip,
        ];
        if cfg.iter().any(|x| !x.is_finite()) {
            return Err("gate.cfg: every constant must be finite".into());
        }
        for (f, v) in [
            ("level", &self.level),
            ("speed", &self.speed),
            ("last_pred", &self.last_pred),
        ] {
            if v.len() != n || v.iter().any(|x| x.is_infinite()) {
                return Err(format!("gate.{f}: expected {n} finite or unset values"));
            }
        }
        let finite = [
            ("err_abs", &self.err_abs),
            ("err_w", &self.err_w),
            ("acc", &self.acc),
            ("acc_w1", &self.acc_w1),
            ("acc_w2", &self.acc_w2),
            ("seg", &self.seg),
            ("seg_n", &self.seg_n),
        ];
        for (f, v) in finite {
            if v.len() != n || v.iter().any(|x| !x.is_finite()) {
                return Err(format!("gate.{f}: expected {n} finite values"));
            }
        }
        if self.track.len() != n || self.track.iter().any(|t| !(-1..=1).contains(t)) {
            return Err(format!("gate.track: expected {n} values in -1..=1"));
        }
        if self.jumps > n {
            return Err(format!("gate.jumps: {} exceeds {n} workers", self.jumps));
        }
        Ok(())
    }

    pub fn config(&self) -> &GateConfig {
        &self.cfg
    }

    /// Worker `i`'s noise level `s_i` (≈ std of its one-step log prediction errors).
    pub fn noise(&self, i: usize) -> f64 {
        MEAN_ABS_TO_SIGMA * self.err_abs[i]
    }

    /// How many (worker, iteration) predictions were accepted as a change so far.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// How many workers the last [`Self::filter`] saw jump (a change beyond `z·s`,
    /// not counting first sight or a disabled gate).
    pub fn jumps(&self) -> usize {
        self.jumps
    }

    fn accept(&mut self, i: usize, level: f64) {
        if self.level[i] != level {
            self.accepted += 1;
            self.level[i] = level;
            self.speed[i] = level.exp();
        }
        self.acc[i] = 0.0;
        self.acc_w1[i] = 0.0;
        self.acc_w2[i] = 0.0;
        self.seg[i] = 0.0;
        self.seg_n[i] = 0.0;
    }

    /// Score the last predictions against the iteration that just ran (`batches`,
    /// `obs.compute_s`), test the new predictions and write the speeds the rule
    /// should use into `out` (an unusable prediction is passed through unchanged, so
    /// that the rule's own handling of bad input applies).
    // One pass over workers touching a dozen per-worker arrays: indexing reads better
    // than a twelve-way zip.
    #[allow(clippy::needless_range_loop)]
    pub fn filter(&mut self, obs: &Observation<'_>, batches: &[u64], out: &mut Vec<f64>) {
        let n = self.level.len();
        out.clear();
        out.resize(n, f64::NAN);
        let c = self.cfg;
        self.jumps = 0;
        // Workers seen for the first time are anchored to the current allocation: the
        // speed their batch would be right for (`v ∝ b`, scaled by the geometric mean
        // of predicted speed per sample over those workers), so that a prediction must
        // *prove* an imbalance before it moves a batch, from the first decision on.
        let mut anchor = (0.0, 0usize);
        for i in 0..n {
            let v = obs.predicted_speed.get(i).copied().unwrap_or(f64::NAN);
            let b = batches.get(i).map_or(0, |&b| b);
            if !self.level[i].is_finite() && usable(v) && b > 0 {
                anchor.0 += v.ln() - (b as f64).ln();
                anchor.1 += 1;
            }
        }
        let anchor = if anchor.1 > 0 {
            anchor.0 / anchor.1 as f64
        } else {
            f64::NAN
        };
        for i in 0..n {
            // 1. The noise level: how far off was the prediction for the last iteration?
            let b = batches.get(i).map_or(0.0, |&b| b as f64);
            let t = obs.compute_s.get(i).copied().unwrap_or(f64::NAN);
            if self.last_pred[i].is_finite() && b > 0.0 && usable(t) {
                let cap = c.clip * self.noise(i);
                let e = ((b / t).ln() - self.last_pred[i]).abs().min(cap);
                self.err_w[i] = (self.err_w[i] + 1.0).min(c.noise_memory);
                self.err_abs[i] += (e - self.err_abs[i]) / self.err_w[i];
            }
            // 2. Is the new prediction a change?
            let v = obs.predicted_speed.get(i).copied().unwrap_or(f64::NAN);
            if !usable(v) {
                self.last_pred[i] = f64::NAN;
                out[i] = v;
                continue;
            }
            let y = v.ln();
            self.last_pred[i] = y;
            if !self.level[i].is_finite() && b > 0.0 && anchor.is_finite() {
                self.level[i] = b.ln() + anchor;
                self.speed[i] = self.level[i].exp();
            }
            let bar = c.z * self.noise(i);
            let d = y - self.level[i];
            let dir: i8 = if d > 0.0 {
                1
            } else if d < 0.0 {
                -1
            } else {
                0
            };
            let tracking = self.track[i] != 0 && dir == self.track[i];
            if !tracking {
                self.track[i] = 0;
            }
            if !self.level[i].is_finite() || c.z == 0.0 {
                self.accept(i, y);
            } else if d.abs() > bar {
                // A jump the noise cannot explain: take it now, and keep following the
                // predictions while they move on in the same direction (a smoothing
                // predictor converges over several iterations).
                self.accept(i, y);
                self.track[i] = dir;
                self.jumps += 1;
            } else if tracking {
                self.accept(i, y);
            } else {
                let l = c.evidence_leak;
                self.acc[i] = l * self.acc[i] + d;
                self.acc_w1[i] = l * self.acc_w1[i] + 1.0;
                self.acc_w2[i] = l * l * self.acc_w2[i] + 1.0;
                self.seg[i] += d;
                self.seg_n[i] += 1.0;
                // Significant mean deviation: move by that mean (not to the last,
                // noisy prediction). Short window first: it reacts to recent shifts.
                if self.acc[i].abs() > bar * self.acc_w2[i].sqrt() {
                    let m = self.acc[i] / self.acc_w1[i];
                    self.accept(i, self.level[i] + m);
                } else if self.seg[i].abs() > bar * self.seg_n[i].sqrt() {
                    let m = self.seg[i] / self.seg_n[i];
                    self.accept(i, self.level[i] + m);
                }
            }
            out[i] = self.speed[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::testutil::Normals;

    /// One worker at a constant 700 samples/s with 15 % jitter, predicted by `last`.
    #[test]
    fn holds_on_noise_and_learns_the_noise_level() {
        let mut g = NoiseGate::new(1, GateConfig::default());
        let mut rng = Normals::new(1);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        let mut pred = 700.0;
        for _ in 0..1000 {
            let v = 700.0 * (0.15 * rng.next()).exp();
            g.filter(
                &Observation {
                    compute_s: &[100.0 / v],
                    predicted_speed: &[pred],
                },
                &[100],
                &mut out,
            );
            seen.push(out[0]);
            pred = v;
        }
        // `last` errors have std √2·0.15 ≈ 0.21.
        assert!((g.noise(0) - 0.21).abs() < 0.05, "{}", g.noise(0));
        let late = &seen[200..];
        let moves = late.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(moves <= 2, "{moves} moves on pure noise");
        assert!(late.iter().all(|v| (v / 700.0).ln().abs() < 0.1));
    }

    #[test]
    fn off_passes_every_prediction() {
        let mut g = NoiseGate::new(2, GateConfig::off());
        let mut out = Vec::new();
        for v in [100.0, 101.0, 99.0, f64::NAN] {
            g.filter(
                &Observation {
                    compute_s: &[1.0, 1.0],
                    predicted_speed: &[v, 5.0],
                },
                &[100, 100],
                &mut out,
            );
            assert!((out[0] - v).abs() < 1e-9 * v || (v.is_nan() && out[0].is_nan()));
            assert!((out[1] - 5.0).abs() < 1e-12);
        }
    }
}
