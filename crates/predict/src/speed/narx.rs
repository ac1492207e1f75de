mod state;

use super::{usable, Exogenous, PredictorState, SpeedPredictor};
use std::sync::{Arc, Mutex};

/// Shape and learning constants of [`Narx`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NarxConfig {
    /// Output delay order d_y: past one-step innovations `ε(k−1) … ε(k−d_y)` fed back.
    pub speed_lags: usize,
    /// Input delay order d_u: exogenous signals at `k, k−1, …, k−d_u+1` (the one at `k`
    /// is observed before iteration `k` starts, so it is a legal input).
    pub exo_lags: usize,
    /// Random hidden units (rational tanh) of the per-worker autoregressive part.
    pub hidden: usize,
    /// Random hidden units (rational tanh) of the pooled load response.
    pub load_hidden: usize,
    /// RLS forgetting factor λ of the per-worker part: memory ≈ 1/(1−λ) iterations.
    pub forgetting: f64,
    /// RLS forgetting factor of the pooled load response, per *loaded* observation
    /// (it sees every worker's, so its memory in iterations is shorter by ~n).
    pub load_forgetting: f64,
    /// Initial covariance `P0 = p0·I` of the per-worker part: a ridge prior towards
    /// `w = 0` (no autoregressive correction) worth ~`σ²/p0` observations.
    pub p0: f64,
    /// Initial covariance of the pooled load response (weak prior: loads are rare).
    pub load_p0: f64,
    /// Rate of the per-worker level `m` (the worker's unloaded log-speed).
    pub level_rate: f64,
    /// Smallest gain of the exogenous-signal filter between detected load changes
    /// (it averages all readings since the last change until `1/n` falls to this).
    /// `1` disables the filter.
    pub exo_gain: f64,
    /// Include `ln(1 − load)` (processor sharing) among the load features.
    pub sharing_basis: bool,
}

impl Default for NarxConfig {
    fn default() -> Self {
        NarxConfig {
            speed_lags: 3,
            exo_lags: 2,
            hidden: 4,
            load_hidden: 6,
            forgetting: 0.995,
            load_forgetting: 0.999,
            p0: 1.0,
            load_p0: 100.0,
            level_rate: 0.05,
            exo_gain: 0.05,
            sharing_basis: true,
        }
    }
}

/// Exogenous signals per delay (cpu_load, mem_load).
const EXO_DIM: usize = 2;
/// Largest log-ratio a prediction may move from the level: ×/÷ e³ ≈ 20.
const MAX_LOG_STEP: f64 = 3.0;
/// Loads are clamped below this before `ln(1 − load)` (a 20× slowdown).
const MAX_LOAD: f64 = 0.95;

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

/// The hidden units' bend: a rational approximation of `tanh`,
/// `x(27 + x²)/(27 + 9x²)` on `[−3, 3]` and `±1` beyond (it reaches ±1 at ±3 with zero
/// slope, and is within 0.025 of `tanh` everywhere). Random units need a smooth,
/// bounded bend, not tanh's exact shape, and one division costs a fraction of the
/// `exp` inside `tanh` — ten of which were most of a prediction's cost.
fn squash(x: f64) -> f64 {
    let x = x.clamp(-3.0, 3.0);
    let x2 = x * x;
    x * (27.0 + x2) / (27.0 + 9.0 * x2)
}

/// `ln(1 − load)`: log-speed left by processor sharing when co-located work holds
/// `load` of the machine (0 at zero load without calling `ln`).
fn sharing(load: f64) -> f64 {
    if load <= 0.0 {
        0.0
    } else {
        (1.0 - load.min(MAX_LOAD)).ln()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Recursive least squares with exponential forgetting and covariance limiting.
#[derive(Debug, Clone)]
struct Rls {
    w: Vec<f64>,
    /// Inverse-correlation matrix, row-major `p × p`.
    p: Vec<f64>,
    lambda: f64,
    trace_cap: f64,
    p_phi: Vec<f64>,
}

impl Rls {
    fn new(n: usize, p0: f64, lambda: f64) -> Self {
        let mut p = vec![0.0; n * n];
        for i in 0..n {
            p[i * n + i] = p0;
        }
        Rls {
            w: vec![0.0; n],
            p,
            lambda,
            trace_cap: p0 * n as f64,
            p_phi: vec![0.0; n],
        }
    }

    fn predict(&self, phi: &[f64]) -> f64 {
        dot(&self.w, phi)
    }

    fn update(&mut self, phi: &[f64], target: f64) {
        let n = self.w.len();
        let (p_phi, pm) = (&mut self.p_phi, &mut self.p);
        for i in 0..n {
            p_phi[i] = dot(&pm[i * n..(i + 1) * n], phi);
        }
        let denom = self.lambda + dot(phi, p_phi);
        if !(denom.is_finite() && denom > 0.0) {
            return;
        }
        let err = target - dot(&self.w, phi);
        let inv = 1.0 / denom;
        for (w, g) in self.w.iter_mut().zip(p_phi.iter()) {
            *w += g * inv * err;
        }
        // P ← (P − g gᵀ/denom)/λ with g = Pφ (P symmetric). Directions that are never
        // excited would grow like λ^−k: the trace is capped at its initial value.
        let mut trace = 0.0;
        for i in 0..n {
            let gi = p_phi[i] * inv;
            let row = &mut pm[i * n..(i + 1) * n];
            for (pij, gj) in row.iter_mut().zip(p_phi.iter()) {
                *pij = (*pij - gi * gj) / self.lambda;
            }
            trace += row[i];
        }
        if trace > self.trace_cap {
            let s = self.trace_cap / trace;
            pm.iter_mut().for_each(|x| *x *= s);
        }
    }
}

/// Change-aware smoother of one exogenous signal.
///
/// Monitor readings are noisy (sampled utilisation), and through a load response
/// like `ln(1 − load)` reading noise is amplified where load is high (×2.5 at 0.6,
/// ×4 at 0.75), so raw readings make every in-burst prediction noisy: on
/// `interference.json` NARX on raw readings had a larger in-burst error than `last`.
/// Co-located load is mostly piecewise steady, so the filter treats a reading further
/// than `3·s` from its value (`s` = robust scale of the reading-to-filter gaps, learnt
/// online) as a change, taken at once, and otherwise averages: the mean of all
/// readings since the last change, until `1/n` falls to the floor gain `κ = 0.05`
/// (then an EWMA, so that slow ramps are still followed). Exact readings (no noise)
/// pass through unchanged.
#[derive(Debug, Clone, Copy)]
struct ExoFilter {
    value: f64,
    scale: f64,
    seen: f64,
    /// Readings since the last detected change.
    run: f64,
}

/// Prior scale of reading noise and its weight in observations.
const EXO_PRIOR_SCALE: f64 = 0.02;
const EXO_PRIOR_WEIGHT: f64 = 4.0;
/// Memory of the reading-noise scale (iterations).
const EXO_SCALE_MEMORY: f64 = 50.0;

/// Loads are fractions; a missing or broken reading counts as no load.
fn clean(x: f64) -> f64 {
    if x.is_finite() {
        x.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

impl ExoFilter {
    fn new() -> Self {
        ExoFilter {
            value: f64::NAN,
            scale: EXO_PRIOR_SCALE,
            seen: EXO_PRIOR_WEIGHT,
            run: 0.0,
        }
    }

    /// The filtered value after reading `x` (state not changed).
    fn peek(&self, x: f64, gain: f64) -> f64 {
        let x = clean(x);
        if !self.value.is_finite() {
            return x;
        }
        let d = x - self.value;
        if d.abs() > 3.0 * self.scale {
            x
        } else {
            // The mean of the readings since the change, then an EWMA of gain `gain`.
            self.value + gain.max(1.0 / (self.run + 2.0)) * d
        }
    }

    fn commit(&mut self, x: f64, gain: f64) {
        let next = self.peek(x, gain);
        let x = clean(x);
        let jumped = !self.value.is_finite() || (x - self.value).abs() > 3.0 * self.scale;
        if self.value.is_finite() {
            // Mean absolute gap, clipped so that load changes do not inflate it;
            // 1.25·mean|gap| ≈ σ for Gaussian reading noise.
            let d = (x - self.value).abs().min(3.0 * self.scale);
            self.seen = (self.seen + 1.0).min(EXO_SCALE_MEMORY);
            self.scale += (1.25 * d - self.scale) / self.seen;
            self.scale = self.scale.max(1e-9);
        }
        self.run = if jumped { 0.0 } else { self.run + 1.0 };
        self.value = next;
    }
}

/// The load response `g(x̃)` shared by the workers of one job, and its RLS fit.
///
/// Features (all zero at zero load, so `g(0) = 0` and the per-worker level keeps the
/// unloaded speed): for each exogenous delay `j < d_u` and signal, `x̃` and
/// `ln(1 − x̃)`, plus `load_hidden = 6` random units `σ(W x̃ + c) − σ(c)` over all
/// delayed signals (σ: the rational tanh of `squash`). `ln(1 − load)` is the
/// first-order model of processor sharing
/// (co-located work holding a share `L` leaves `1 − L`, so log-speed moves by
/// `ln(1 − L)`); its coefficient is *learnt* (prior mean 0), and the linear and tanh
/// terms absorb whatever the monitor's notion of load does differently.
#[derive(Debug)]
struct LoadModel {
    /// Hidden weights, row-major `load_hidden × (EXO_DIM·d_u)`, biases, and `σ` of
    /// the biases (each unit's value at zero load, subtracted).
    w_in: Vec<f64>,
    b_in: Vec<f64>,
    squash_b: Vec<f64>,
    rls: Mutex<Rls>,
}

/// A load response shared by the [`Narx`] predictors of one job (see
/// [`Narx::pooled`]). Cloning shares, it does not copy.
#[derive(Debug, Clone)]
pub struct LoadPool {
    model: Arc<LoadModel>,
    exo_lags: usize,
    sharing_basis: bool,
}

impl LoadPool {
    /// A fresh, untrained load response for predictors built with `cfg`.
    pub fn new(cfg: &NarxConfig, seed: u64) -> Self {
        let cfg = sane(*cfg);
        let d = EXO_DIM * cfg.exo_lags;
        let mut s = seed ^ 0x4C4F_4144_504F_4F4C;
        // Loads live in [0, 1]: weights of ±3 put the units' bends inside that range.
        let w_in = (0..cfg.load_hidden * d)
            .map(|_| uniform(&mut s, -3.0, 3.0))
            .collect();
        let b_in: Vec<f64> = (0..cfg.load_hidden)
            .map(|_| uniform(&mut s, -1.0, 1.0))
            .collect();
        let p = 2 * d + cfg.load_hidden;
        let squash_b = b_in.iter().map(|&b| squash(b)).collect();
        LoadPool {
            model: Arc::new(LoadModel {
                w_in,
                b_in,
                squash_b,
                rls: Mutex::new(Rls::new(p, cfg.load_p0, cfg.load_forgetting)),
            }),
            exo_lags: cfg.exo_lags,
            sharing_basis: cfg.sharing_basis,
        }
    }

    fn n_features(&self) -> usize {
        2 * EXO_DIM * self.exo_lags + self.model.b_in.len()
    }

    /// `xl` holds the filtered signals, most recent delay first, then their
    /// [`sharing`] logs in the same order.
    fn features(&self, xl: &[f64], psi: &mut [f64]) {
        let d = xl.len() / 2;
        let (x, lx) = xl.split_at(d);
        for j in 0..d {
            psi[2 * j] = x[j];
            psi[2 * j + 1] = if self.sharing_basis { lx[j] } else { 0.0 };
        }
        for (h, out) in psi[2 * d..].iter_mut().enumerate() {
            let row = &self.model.w_in[h * d..(h + 1) * d];
            *out = squash(dot(row, x) + self.model.b_in[h]) - self.model.squash_b[h];
        }
    }

    fn with_rls<T>(&self, f: impl FnOnce(&mut Rls) -> T) -> T {
        // A panic elsewhere cannot leave the RLS half-updated in a way that matters
        // more than a lost observation: recover the state rather than propagate.
        let mut g = self.model.rls.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    /// The current log-speed effect of load: `x` holds the (filtered) signals
    /// `(cpu, mem)` of the coming iteration, then of the one before, and so on.
    pub fn response(&self, x: &[f64]) -> f64 {
        let mut xl = x.to_vec();
        xl.extend(x.iter().map(|&v| sharing(v)));
        let mut psi = vec![0.0; self.n_features()];
        self.features(&xl, &mut psi);
        self.with_rls(|r| r.predict(&psi))
    }
}

fn sane(cfg: NarxConfig) -> NarxConfig {
    NarxConfig {
        speed_lags: cfg.speed_lags.max(1),
        exo_lags: cfg.exo_lags.max(1),
        forgetting: cfg.forgetting.clamp(0.9, 1.0),
        load_forgetting: cfg.load_forgetting.clamp(0.9, 1.0),
        p0: cfg.p0.max(1e-6),
        load_p0: cfg.load_p0.max(1e-6),
        level_rate: cfg.level_rate.clamp(1e-4, 1.0),
        exo_gain: cfg.exo_gain.clamp(1e-3, 1.0),
        ..cfg
    }
}

/// NARX speed predictor: an additive non-linear autoregressive model with exogenous
/// inputs, fitted online by recursive least squares (RLS); the load response is
/// pooled over the workers of a job.
///
/// ```text
/// ln v̂_i(k) = m_i + h_i(ε_i(k−1..k−d_y)) + g(x̃_i(k..k−d_u+1))
/// ```
///
/// - `m_i`: the worker's level (unloaded log-speed), moved by `level_rate = 0.05` of
///   each one-step innovation `ε = ln v − ln v̂` — only what the model could not
///   explain, so a slowdown the model attributes to load leaves it alone and the
///   prediction snaps back when the load goes.
/// - `h_i`: per-worker autoregression on the last `d_y = 3` innovations, features
///   `[1, ε, σ(Wε + c)]` with `hidden = 4` random units `σ` (a rational tanh, see
///   `squash`), `p = 8` weights, RLS with λ = 0.995 and a ridge prior `P0 = I` that
///   keeps it at zero unless the innovations are really predictable (slow drifts,
///   oscillation).
/// - `g`: the load response over the *filtered* monitor signals `x̃` (cpu, mem) at `k`
///   and `k−1` (`d_u = 2`; see [`LoadPool`] for its 14 features; the filter averages
///   readings between detected load changes). One `g` per job, fitted on every
///   worker's loaded observations.
///
/// Why pooled: a worker's first interference burst used to be unexplained (the
/// per-worker model had never seen load), and those first bursts were most of NARX's
/// error. Workers of one job run the same code and react alike to co-located load, so
/// one worker's burst now teaches all of them; with `n` workers `g` also sees ~`n`×
/// the data, which lowers its estimation noise. What stays per worker — level and
/// autoregression — is what differs between machines.
///
/// Why this shape rather than a back-propagated MLP (the paper's NARX is a small
/// recurrent net of unknown size): with fixed random hidden units the model is linear
/// in its weights, so RLS solves each fit *exactly* after every observation, with no
/// learning rate and no training loop, and is useful after a handful of observations,
/// which matters when bursts are short. Log-speed makes slowdowns additive and the
/// model scale-free across workers.
///
/// Cost: a prediction is two small feature maps (`4·3 + 6·4` multiply-adds, 10
/// rational units, up to 2 `ln` — past loads' logs are cached), two dots (8 + 14),
/// one `exp` and one uncontended lock of the pool: ≈ 0.2 µs (1,000 workers: ≈ 0.2 ms,
/// see `pacer batching bench`). An observation adds the RLS updates, `O(8²)` per
/// worker plus `O(14²)` on the pool when loaded (≈ 0.5 µs). Memory per worker ≈ 100
/// f64, plus ≈ 220 f64 per job.
///
/// Measured (speed MAPE, 8 workers × 2000 iterations, `uniform` controller; the
/// floor set by 3 % jitter is ≈ 0.024; `cargo run --release -p pacer-lab --
/// narx-ablation scenarios/worker/*.json`):
///
/// | scenario              | ewma   | ets    | NARX before | NARX   | unpooled | raw exo | no ln basis |
/// |-----------------------|--------|--------|-------------|--------|----------|---------|-------------|
/// | interference          | 0.0296 | 0.0279 | 0.0278      | 0.0253 | 0.0258   | 0.0264  | 0.0258      |
/// | interference_frequent | 0.0557 | 0.0441 | 0.0313      | 0.0263 | 0.0271   | 0.0290  | 0.0265      |
/// | interference_membw    | 0.0375 | 0.0344 | —           | 0.0258 | 0.0272   | 0.0281  | 0.0264      |
///
/// ("NARX before": per-worker model, raw readings, 12 random units over speeds and
/// loads together, `P0 = 100·I`.) Each of the three changes helps on its own; where
/// the gain is, on `interference.json`: the first 3 iterations after each load change
/// (0.0010 of the MAPE before, 0.0003 now), in-burst noise (MAPE within bursts 0.0365
/// before — worse than `last` — 0.0269 now), and the steady state (0.0255 → 0.0249:
/// the smaller per-worker model overfits less). Without any load signal NARX is
/// within ±0.0004 of ETS (static, noisy: slightly better), except on a slow drift
/// where ETS's trend term wins (0.0245 vs 0.0248 on `slowing_worker.json`).
///
/// Limits: the pooled response assumes the job's workers react alike to the same
/// readings; a worker that does not (another CPU count, a different memory system)
/// is corrected only through its level and autoregression, i.e. over ~20 iterations.
/// Cloning a `Narx` shares its pool.
#[derive(Debug, Clone)]
pub struct Narx {
    cfg: NarxConfig,
    /// Per-worker hidden weights, row-major `hidden × d_y`, and biases.
    w_in: Vec<f64>,
    b_in: Vec<f64>,
    ar: Rls,
    pool: LoadPool,
    /// Past one-step innovations, most recent first.
    innovations: Vec<f64>,
    /// One filter per signal (cpu, mem).
    filters: [ExoFilter; EXO_DIM],
    /// Filtered signals of past iterations, most recent first (`EXO_DIM·(d_u − 1)`),
    /// and their [`sharing`] logs.
    exo_hist: Vec<f64>,
    ln_hist: Vec<f64>,
    level: f64,
    seen: u64,
}

impl Narx {
    /// A model with its own (unshared) load response; `seed` fixes the random units.
    pub fn new(cfg: NarxConfig, seed: u64) -> Self {
        let pool = LoadPool::new(&cfg, seed);
        Self::pooled(cfg, seed, pool)
    }

    /// A model whose load response is `pool`, shared with the job's other workers.
    /// `seed` fixes this worker's random units; the pool must have been built with
    /// the same `exo_lags` and `load_hidden` (it panics otherwise).
    pub fn pooled(cfg: NarxConfig, seed: u64, pool: LoadPool) -> Self {
        let cfg = sane(cfg);
        assert_eq!(pool.exo_lags, cfg.exo_lags, "NARX pool: exo_lags differ");
        assert_eq!(
            pool.model.b_in.len(),
            cfg.load_hidden,
            "NARX pool: load_hidden differs"
        );
        let d = cfg.speed_lags;
        let mut s = seed;
        // Innovations are a few hundredths to tenths: weights of ±4 reach the bends.
        let w_in = (0..cfg.hidden * d)
            .map(|_| uniform(&mut s, -4.0, 4.0))
            .collect();
        let b_in = (0..cfg.hidden)
            .map(|_| uniform(&mut s, -0.5, 0.5))
            .collect();
        let p = 1 + d + cfg.hidden;
        Narx {
            cfg,
            w_in,
            b_in,
            ar: Rls::new(p, cfg.p0, cfg.forgetting),
            pool,
            innovations: vec![0.0; d],
            filters: [ExoFilter::new(); EXO_DIM],
            exo_hist: vec![0.0; EXO_DIM * (cfg.exo_lags - 1)],
            ln_hist: vec![0.0; EXO_DIM * (cfg.exo_lags - 1)],
            level: 0.0,
            seen: 0,
        }
    }

    /// Number of per-worker weights `1 + d_y + hidden` plus pooled ones.
    pub fn n_weights(&self) -> usize {
        self.ar.w.len() + self.pool.n_features()
    }

    /// The shared load response this model uses.
    pub fn pool(&self) -> &LoadPool {
        &self.pool
    }

    fn ar_features(&self, phi: &mut [f64]) {
        let d = self.cfg.speed_lags;
        phi[0] = 1.0;
        phi[1..1 + d].copy_from_slice(&self.innovations);
        for (h, out) in phi[1 + d..].iter_mut().enumerate() {
            let row = &self.w_in[h * d..(h + 1) * d];
            *out = squash(dot(row, &self.innovations) + self.b_in[h]);
        }
    }

    /// Filtered signals for the iteration that starts with `exo`, most recent first,
    /// then their [`sharing`] logs (the past ones cached).
    fn exo_inputs(&self, exo: &Exogenous, xl: &mut [f64]) {
        let g = self.cfg.exo_gain;
        let (x, lx) = xl.split_at_mut(xl.len() / 2);
        x[0] = self.filters[0].peek(exo.cpu_load, g);
        x[1] = self.filters[1].peek(exo.mem_load, g);
        x[EXO_DIM..].copy_from_slice(&self.exo_hist);
        if self.cfg.sharing_basis {
            lx[0] = sharing(x[0]);
            lx[1] = sharing(x[1]);
            lx[EXO_DIM..].copy_from_slice(&self.ln_hist);
        }
    }
}

/// Fixed-size scratch for the usual model sizes (a heap allocation would cost as
/// much as a prediction).
const STACK: usize = 24;

/// Zeroed scratch for one step's φ (AR features), ψ (load features) and x
/// (exogenous inputs): on the stack when each fits in [`STACK`], else on the heap.
struct Scratch {
    stack: [[f64; STACK]; 3],
    heap: [Vec<f64>; 3],
}

impl Scratch {
    fn new() -> Self {
        Self {
            stack: [[0.0; STACK]; 3],
            heap: Default::default(),
        }
    }

    /// φ, ψ and x of lengths `np`, `nq` and `nx`.
    fn split(&mut self, np: usize, nq: usize, nx: usize) -> (&mut [f64], &mut [f64], &mut [f64]) {
        if np.max(nq).max(nx) <= STACK {
            let [phi, psi, x] = &mut self.stack;
            (&mut phi[..np], &mut psi[..nq], &mut x[..nx])
        } else {
            self.heap = [vec![0.0; np], vec![0.0; nq], vec![0.0; nx]];
            let [phi, psi, x] = &mut self.heap;
            (phi, psi, x)
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
        let y = v.ln();
        let nx = 2 * EXO_DIM * self.cfg.exo_lags;
        let mut scratch = Scratch::new();
        let (phi, psi, x) = scratch.split(self.ar.w.len(), self.pool.n_features(), nx);
        self.exo_inputs(exo, x);
        let innovation = if self.seen == 0 {
            // The first speed is the level; the load it ran under is unknown in effect.
            self.pool.features(x, psi);
            let g = self.pool.with_rls(|r| r.predict(psi));
            self.level = y - g;
            0.0
        } else {
            self.pool.features(x, psi);
            let loaded = psi.iter().any(|&f| f != 0.0);
            let g = self.pool.with_rls(|r| r.predict(psi));
            self.ar_features(phi);
            let h = self.ar.predict(phi);
            let e = (y - self.level - h - g).clamp(-MAX_LOG_STEP, MAX_LOG_STEP);
            // Load first: it is the known cause. Only loaded iterations carry
            // information about g (ψ(0) = 0); skipping the others keeps forgetting
            // from eroding what a burst taught.
            let g_new = if loaded {
                self.pool.with_rls(|r| {
                    r.update(psi, y - self.level - h);
                    r.predict(psi)
                })
            } else {
                g
            };
            self.ar.update(phi, y - self.level - g_new);
            e
        };
        self.seen += 1;
        self.level += self.cfg.level_rate * innovation;
        self.innovations.rotate_right(1);
        self.innovations[0] = innovation;
        let gain = self.cfg.exo_gain;
        self.filters[0].commit(exo.cpu_load, gain);
        self.filters[1].commit(exo.mem_load, gain);
        if !self.exo_hist.is_empty() {
            let k = self.exo_hist.len();
            let d = nx / 2;
            self.exo_hist.copy_within(0..k - EXO_DIM, EXO_DIM);
            self.exo_hist[..EXO_DIM].copy_from_slice(&x[..EXO_DIM]);
            self.ln_hist.copy_within(0..k - EXO_DIM, EXO_DIM);
            self.ln_hist[..EXO_DIM].copy_from_slice(&x[d..d + EXO_DIM]);
        }
    }

    fn predict_next(&self, exo: &Exogenous) -> Option<f64> {
        if self.seen == 0 {
            return None;
        }
        let nx = 2 * EXO_DIM * self.cfg.exo_lags;
        let mut scratch = Scratch::new();
        let (phi, psi, x) = scratch.split(self.ar.w.len(), self.pool.n_features(), nx);
        self.exo_inputs(exo, x);
        self.pool.features(x, psi);
        let g = self.pool.with_rls(|r| r.predict(psi));
        self.ar_features(phi);
        let out = (self.ar.predict(phi) + g).clamp(-MAX_LOG_STEP, MAX_LOG_STEP);
        Some((self.level + out).exp())
    }

    fn save(&self) -> Option<PredictorState> {
        Some(PredictorState::Narx(self.save_state()))
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

    /// Worker 0 meets load first; worker 1's first burst, later, is then predicted
    /// by the pooled response, but not by an unpooled model.
    #[test]
    fn one_workers_burst_teaches_the_others() {
        let cfg = NarxConfig::default();
        let pool = LoadPool::new(&cfg, 3);
        let mut w0 = Narx::pooled(cfg, 10, pool.clone());
        let mut w1 = Narx::pooled(cfg, 11, pool);
        let mut alone = Narx::new(cfg, 11);
        let (mut err_pooled, mut err_alone) = (0.0, 0.0);
        for k in 0..400 {
            // w0: bursts of load 0.6 (2.5× slower) at 50..100 and 150..200;
            // w1: its first burst, load 0.5 (2× slower), at 300..340.
            let l0 = if (50..100).contains(&k) || (150..200).contains(&k) {
                0.6
            } else {
                0.0
            };
            let l1 = if (300..340).contains(&k) { 0.5 } else { 0.0 };
            let (v0, v1) = (800.0 * (1.0 - l0), 500.0 * (1.0 - l1));
            if (300..305).contains(&k) {
                let p = w1.predict_next(&load(l1)).unwrap();
                let a = alone.predict_next(&load(l1)).unwrap();
                err_pooled += (p - v1).abs() / v1;
                err_alone += (a - v1).abs() / v1;
            }
            w0.observe(v0, &load(l0));
            w1.observe(v1, &load(l1));
            alone.observe(v1, &load(l1));
        }
        // The first 5 iterations of w1's burst (summed relative errors): pooled, ~1 %
        // each; alone, 100 % on the first (it has never seen load) and ~20 % on
        // average.
        assert!(err_pooled < 0.15, "pooled {err_pooled}");
        assert!(
            err_alone > 5.0 * err_pooled,
            "alone {err_alone} pooled {err_pooled}"
        );
    }

    #[test]
    fn noisy_readings_are_smoothed_and_changes_pass() {
        let mut f = ExoFilter::new();
        let mut s = 5u64;
        let mut dev = 0.0f64;
        for k in 0..300 {
            let x = 0.6 + uniform(&mut s, -0.03, 0.03);
            f.commit(x, 0.2);
            if k > 50 {
                dev = dev.max((f.value - 0.6).abs());
            }
        }
        assert!(dev < 0.02, "{dev}");
        assert_eq!(f.peek(0.0, 0.2), 0.0);
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
        assert!(m.ar.p.iter().all(|x| x.is_finite()));
        m.pool
            .with_rls(|r| assert!(r.p.iter().all(|x| x.is_finite())));
    }
}
