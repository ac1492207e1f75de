//! The data that crosses the wire: seeded pseudo-random parameters and per-worker
//! gradients, and the checks that every round delivered the right values.

/// `n` values drawn from `seed`.
pub fn vector(seed: u64, n: usize) -> Vec<f32> {
    // The runtime's generator (SplitMix64), in [-1, 1).
    let mut g = pacer_runtime::data::SplitMix64(seed);
    (0..n).map(|_| 2.0 * g.unit() - 1.0).collect()
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
