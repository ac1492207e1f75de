use super::{usable, Exogenous, SpeedPredictor};

/// Shape and learning constants of [`Narx`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NarxConfig {
    /// Output delay order d_y: past log-speeds `v(k−1) … v(k−d_y)` fed back.
    pub speed_lags: usize,
    /// Input delay order d_u: exogenous signals at `k, k−1, …, k−d_u+1` (the one at `k`
    /// is observed before iteration `k` starts, so it is a legal input).
    pub exo_lags: usize,
    /// Number of random tanh features (the "hidden layer").
    pub hidden: usize,
    /// RLS forgetting factor λ: effective memory ≈ 1/(1−λ) iterations.
    pub forgetting: f64,
    /// Initial covariance `P0 = p0·I` (weak ridge prior towards w = 0).
    pub p0: f64,
    /// Rate of the slow level `m` that log-speeds are centred on.
    pub level_rate: f64,
}

impl Default for NarxConfig {
    fn default() -> Self {
        NarxConfig {
            speed_lags: 3,
            exo_lags: 2,
            hidden: 12,
            forgetting: 0.995,
            p0: 100.0,
            level_rate: 0.05,
        }
    }
}

/// Exogenous signals per delay (cpu_load, mem_load).
const EXO_DIM: usize = 2;
/// Largest log-ratio a prediction may move from the level: ×/÷ e³ ≈ 20.
const MAX_LOG_STEP: f64 = 3.0;

/// NARX speed predictor: a random-feature network fitted online by recursive least
/// squares (RLS), one model per worker.
///
/// Inputs (`d = speed_lags + 2·exo_lags`, 7 by default): centred log-speeds
/// `ln v(k−j) − m` for `j = 1..=3`, and `(cpu_load, mem_load)` at `k` and `k−1`.
/// Features: `φ = [1, x, tanh(W·x + c)]` with `W`, `c` drawn once from the seed
/// (12 hidden units by default ⇒ `p = 20` weights). Output: `ln v̂(k) = m + wᵀφ`.
///
/// Why this shape rather than a back-propagated MLP (the paper's NARX is a small
/// recurrent net of unknown size): with the hidden layer fixed, the output layer is a
/// linear least-squares problem that RLS solves *exactly* after each iteration, with
/// no learning rate to tune and no training loop — the model is useful after a
/// handful of observations, which matters when an interference burst is short. The
/// random tanh features still give the non-linear map (load → slowdown is `1/(1−load)`
/// like, and depends on the past speeds). Working in log-speed makes slowdowns
/// additive and keeps the model scale-free across workers.
///
/// Cost: a prediction is `hidden·d` multiply-adds + `hidden` tanh + a `p`-dot
/// (≈ 120 flops + 12 tanh, well under a microsecond); an observation adds the RLS
/// update, `O(p²)` ≈ 1.3 kflops. Memory: `p² + hidden·d` ≈ 500 f64 per worker.
///
/// Stability: λ < 1 lets the model track drift, but directions that are never
/// excited (load stays 0 for a long time) would make `P` grow like `λ^−k`; the trace
/// of `P` is therefore capped at `p·p0` (covariance limiting).
#[derive(Debug, Clone)]
pub struct Narx {
    cfg: NarxConfig,
    /// Hidden weights, row-major `hidden × d`.
    w_in: Vec<f64>,
    b_in: Vec<f64>,
    /// Output weights (length p).
    w: Vec<f64>,
    /// RLS inverse-correlation matrix, row-major `p × p`.
    p: Vec<f64>,
    /// Past one-step innovations `ln v − ln v̂`, most recent first.
    innovations: Vec<f64>,
    /// Past exogenous signals, most recent first (`exo_lags − 1` kept; the current one
    /// is an argument).
    exo_hist: Vec<Exogenous>,
    level: f64,
    seen: u64,
    // Scratch buffers so that `observe` does not allocate.
    phi: Vec<f64>,
    p_phi: Vec<f64>,
}

/// splitmix64: a tiny, portable generator, so the features are identical on every
/// platform and version (no dependency on a RNG crate's stream stability).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn uniform(state: &mut u64, lo: f64, hi: f64) -> f64 {
    let u = (splitmix64(state) >> 11) as f64 / (1u64 << 53) as f64;
    lo + (hi - lo) * u
}

impl Narx {
    /// A fresh model; `seed` fixes the random hidden layer.
    pub fn new(cfg: NarxConfig, seed: u64) -> Self {
        let cfg = NarxConfig {
            speed_lags: cfg.speed_lags.max(1),
            exo_lags: cfg.exo_lags.max(1),
            forgetting: cfg.forgetting.clamp(0.9, 1.0),
            p0: cfg.p0.max(1e-3),
            level_rate: cfg.level_rate.clamp(1e-4, 1.0),
            ..cfg
        };
        let d = cfg.speed_lags + EXO_DIM * cfg.exo_lags;
        let p = 1 + d + cfg.hidden;
        let mut s = seed;
        // Scale: centred log-speeds live in about ±0.7 and loads in [0, 1]; weights of
        // ±2 put the tanh units in their curved region for those ranges.
        let w_in = (0..cfg.hidden * d)
            .map(|_| uniform(&mut s, -2.0, 2.0))
            .collect();
        let b_in = (0..cfg.hidden)
            .map(|_| uniform(&mut s, -1.0, 1.0))
            .collect();
        let mut pm = vec![0.0; p * p];
        for i in 0..p {
            pm[i * p + i] = cfg.p0;
        }
        Narx {
            cfg,
            w_in,
            b_in,
            w: vec![0.0; p],
            p: pm,
            innovations: vec![0.0; cfg.speed_lags],
            exo_hist: vec![Exogenous::default(); cfg.exo_lags - 1],
            level: 0.0,
            seen: 0,
            phi: vec![0.0; p],
            p_phi: vec![0.0; p],
        }
    }

    /// Number of output weights `p = 1 + d + hidden`.
    pub fn n_weights(&self) -> usize {
        self.w.len()
    }

    fn input_dim(&self) -> usize {
        self.cfg.speed_lags + EXO_DIM * self.cfg.exo_lags
    }

    /// Features for predicting the iteration whose starting signals are `exo_now`.
    fn features(&self, exo_now: &Exogenous, phi: &mut [f64]) {
        let d = self.input_dim();
        phi[0] = 1.0;
        let x = &mut phi[1..1 + d];
        x[..self.cfg.speed_lags].copy_from_slice(&self.innovations);
        let mut o = self.cfg.speed_lags;
        for e in std::iter::once(exo_now).chain(self.exo_hist.iter()) {
            x[o] = e.cpu_load;
            x[o + 1] = e.mem_load;
            o += EXO_DIM;
        }
        let (head, hidden) = phi.split_at_mut(1 + d);
        let x = &head[1..];
        for (h, out) in hidden.iter_mut().enumerate() {
            let row = &self.w_in[h * d..(h + 1) * d];
            let a: f64 = row.iter().zip(x).map(|(w, x)| w * x).sum::<f64>() + self.b_in[h];
            *out = a.tanh();
        }
    }

    fn output(&self, phi: &[f64]) -> f64 {
        let y: f64 = self.w.iter().zip(phi).map(|(w, f)| w * f).sum();
        y.clamp(-MAX_LOG_STEP, MAX_LOG_STEP)
    }

    fn rls_update(&mut self, target: f64) {
        let n = self.w.len();
        let lambda = self.cfg.forgetting;
        let (phi, p_phi, pm) = (&self.phi, &mut self.p_phi, &mut self.p);
        for i in 0..n {
            let row = &pm[i * n..(i + 1) * n];
            p_phi[i] = row.iter().zip(phi.iter()).map(|(a, b)| a * b).sum();
        }
        let denom = lambda
            + phi
                .iter()
                .zip(p_phi.iter())
                .map(|(a, b)| a * b)
                .sum::<f64>();
        if !(denom.is_finite() && denom > 0.0) {
            return;
        }
        let err = target - self.w.iter().zip(phi).map(|(w, f)| w * f).sum::<f64>();
        let inv = 1.0 / denom;
        for (w, g) in self.w.iter_mut().zip(p_phi.iter()) {
            *w += g * inv * err;
        }
        // P ← (P − g gᵀ/denom)/λ, with g = Pφ (P symmetric).
        let mut trace = 0.0;
        for i in 0..n {
            let gi = p_phi[i] * inv;
            let row = &mut pm[i * n..(i + 1) * n];
            for (pij, gj) in row.iter_mut().zip(p_phi.iter()) {
                *pij = (*pij - gi * gj) / lambda;
            }
            trace += row[i];
        }
        let cap = self.cfg.p0 * n as f64;
        if trace > cap {
            let s = cap / trace;
            pm.iter_mut().for_each(|x| *x *= s);
        }
    }
}

impl SpeedPredictor for Narx {
    fn name(&self) -> &'static str {
        "narx"
    }

    fn observe(&mut self, v: f64, exo: &Exogenous) {
        if !usable(v) {
            return;
        }
        let lv = v.ln();
        let innovation = if self.seen == 0 {
            self.exo_hist.iter_mut().for_each(|e| *e = *exo);
            self.level = lv;
            0.0
        } else {
            let mut phi = std::mem::take(&mut self.phi);
            self.features(exo, &mut phi);
            self.phi = phi;
            let e = lv - self.level - self.output(&self.phi);
            self.rls_update(lv - self.level);
            e
        };
        self.seen += 1;
        // The level absorbs only what the model could not explain: a burst the model
        // attributes to the load signal leaves it alone, so the prediction snaps back
        // the moment the load goes away.
        self.level += self.cfg.level_rate * innovation.clamp(-MAX_LOG_STEP, MAX_LOG_STEP);
        self.innovations.rotate_right(1);
        self.innovations[0] = innovation.clamp(-MAX_LOG_STEP, MAX_LOG_STEP);
        if !self.exo_hist.is_empty() {
            self.exo_hist.rotate_right(1);
            self.exo_hist[0] = *exo;
        }
    }

    fn predict_next(&self, exo: &Exogenous) -> Option<f64> {
        if self.seen == 0 {
            return None;
        }
        // Stack buffer for the usual sizes: a heap allocation would cost as much as the
        // prediction itself.
        let n = self.w.len();
        let mut stack = [0.0f64; 64];
        let mut heap = Vec::new();
        let phi: &mut [f64] = if n <= stack.len() {
            &mut stack[..n]
        } else {
            heap.resize(n, 0.0);
            &mut heap
        };
        self.features(exo, phi);
        Some((self.level + self.output(phi)).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(l: f64) -> Exogenous {
        Exogenous {
            cpu_load: l,
            mem_load: 0.0,
        }
    }

    /// Speed halves whenever co-located load is 0.5, in bursts that come and go.
    fn bursty(k: usize) -> (f64, Exogenous) {
        let on = (k / 40) % 2 == 1;
        let l = if on { 0.5 } else { 0.0 };
        (1000.0 * (1.0 - l), load(l))
    }

    #[test]
    fn learns_exogenous_slowdown_and_beats_ewma() {
        let mut narx = Narx::new(NarxConfig::default(), 11);
        let mut ewma = super::super::Ewma::new(0.3);
        let (mut e_narx, mut e_ewma) = (0.0, 0.0);
        for k in 0..800 {
            let (v, exo) = bursty(k);
            if k >= 400 {
                e_narx += (narx.predict_next(&exo).unwrap() - v).abs() / v;
                e_ewma += (ewma.predict_next(&exo).unwrap() - v).abs() / v;
            }
            narx.observe(v, &exo);
            ewma.observe(v, &exo);
        }
        assert!(e_narx < 0.5 * e_ewma, "narx {e_narx} ewma {e_ewma}");
    }

    #[test]
    fn same_seed_same_predictions() {
        let run = |seed| {
            let mut m = Narx::new(NarxConfig::default(), seed);
            let mut out = Vec::new();
            for k in 0..200 {
                let (v, exo) = bursty(k);
                out.push(m.predict_next(&exo).unwrap_or(0.0).to_bits());
                m.observe(v * (1.0 + 0.01 * ((k * 7919) % 13) as f64), &exo);
            }
            out
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn stays_finite_after_long_unexcited_stretch() {
        let mut m = Narx::new(NarxConfig::default(), 2);
        for _ in 0..20_000 {
            m.observe(300.0, &load(0.0));
        }
        m.observe(150.0, &load(0.5));
        let v = m.predict_next(&load(0.5)).unwrap();
        assert!(v.is_finite() && v > 0.0);
        assert!(m.p.iter().all(|x| x.is_finite()));
    }
}
