//! The data that crosses the wire: seeded pseudo-random parameters and per-worker
//! gradients, and the checks that every round delivered the right values.

/// SplitMix64: a small, well-mixed generator, enough for filler values.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// `n` values drawn from `seed`.
pub fn vector(seed: u64, n: usize) -> Vec<f32> {
    let mut g = SplitMix64::new(seed);
    (0..n).map(|_| g.next_f32()).collect()
}

/// Worker `w`'s gradient (fixed: the benchmark does no compute).
pub fn gradient(seed: u64, w: usize, n: usize) -> Vec<f32> {
    vector(
        seed ^ (0xD1B5_4A32_D192_ED03u64.wrapping_mul(w as u64 + 1)),
        n,
    )
}

/// What a worker reports as its loss: a function of the parameters it received, so
/// the controller can tell that this round's parameters arrived whole (first and
/// last value).
pub fn probe(params: &[f32]) -> f64 {
    match params {
        [] => 0.0,
        [a, .., b] => f64::from(*a) + f64::from(*b),
        [a] => f64::from(*a),
    }
}

/// The 11 `StepTiming` fields and 8 `Signals` a worker sends (fixed filler).
pub const TIMING: [f64; 11] = [
    1.5e-3, 1.6e-3, 3.0e-3, 1e-5, 2e-5, 2.9e-3, 1e-5, 2e-5, 0.0, 1.7e9, 1.7e9,
];
pub const SIGNALS: [f32; 8] = [0.3, 0.4, 0.3, 0.4, 0.5, 0.6, 0.9, 1.0];

/// The task id of worker `w` in round `iteration`.
pub fn task(iteration: u64, workers: usize, w: usize) -> u64 {
    iteration * workers as u64 + w as u64
}

/// Local batch of every worker (the MLP job's global batch 512 over 4 workers).
pub const LOCAL_BATCH: u32 = 128;
