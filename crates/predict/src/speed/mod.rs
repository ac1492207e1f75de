//! One-step-ahead prediction of a worker's speed (samples/s), ALGORITHMS.md §1b.
//!
//! Worker-level batching re-sizes batches at iteration boundaries, so it needs each
//! worker's speed for the *coming* iteration before that iteration starts. Every
//! predictor here sees the same information: the measured speed of each finished
//! iteration, and the exogenous resource signals ([`Exogenous`]) a node monitor
//! reports at the start of each iteration (co-located CPU load, memory pressure).
//!
//! | name   | type            | idea                                                         |
//! |--------|-----------------|--------------------------------------------------------------|
//! | `last` | [`LastValue`]   | next = last measured speed                                   |
//! | `ewma` | [`Ewma`]        | exponentially weighted moving average (α = 0.3)              |
//! | `ets`  | [`Ets`]         | Holt damped-trend exponential smoothing, ETS(A,Ad,N), with α/β chosen online from a grid by discounted one-step error |
//! | `narx` | [`Narx`]        | non-linear autoregressive model with exogenous inputs: random tanh features + linear terms, fitted by recursive least squares |
//!
//! Only `narx` uses the exogenous signals; the baselines are pure time-series
//! predictors, as in the LB-BSP paper's comparison.

mod ets;
mod ewma;
mod last;
mod narx;

pub use ets::Ets;
pub use ewma::Ewma;
pub use last::LastValue;
pub use narx::{Narx, NarxConfig};

/// Resource signals a node monitor observes at the *start* of an iteration, before the
/// step runs. Both are fractions in `[0, 1]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Exogenous {
    /// Share of the worker's machine taken by co-located work (CPU load).
    pub cpu_load: f64,
    /// Share of memory (or memory bandwidth) taken by co-located work.
    pub mem_load: f64,
}

/// An online one-step-ahead speed predictor for one worker.
pub trait SpeedPredictor: Send {
    /// Registry name (`last`, `ewma`, `ets`, `narx`).
    fn name(&self) -> &'static str;
    /// Record a finished iteration: its measured speed and the signals that were
    /// observed at its start. Non-finite or non-positive speeds are ignored.
    fn observe(&mut self, samples_per_s: f64, exo: &Exogenous);
    /// Predict the speed of the next iteration, whose starting signals are `exo`.
    /// `None` until the predictor has seen at least one observation.
    fn predict_next(&self, exo: &Exogenous) -> Option<f64>;
}

/// Names accepted by [`make_predictor`].
pub const PREDICTORS: [&str; 4] = ["last", "ewma", "ets", "narx"];

/// Build a predictor by registry name. `seed` feeds every random choice (only `narx`
/// has any); `worker` is mixed in so workers get independent but reproducible models.
pub fn make_predictor(name: &str, seed: u64, worker: u64) -> Option<Box<dyn SpeedPredictor>> {
    Some(match name {
        "last" => Box::new(LastValue::default()),
        "ewma" => Box::new(Ewma::new(0.3)),
        "ets" => Box::new(Ets::default()),
        "narx" => Box::new(Narx::new(
            NarxConfig::default(),
            seed ^ worker.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        )),
        _ => return None,
    })
}

fn usable(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_knows_every_name() {
        for n in PREDICTORS {
            let p = make_predictor(n, 1, 0).unwrap();
            assert_eq!(p.name(), n);
            assert!(p.predict_next(&Exogenous::default()).is_none());
        }
        assert!(make_predictor("nope", 1, 0).is_none());
    }

    #[test]
    fn constant_speed_is_predicted_by_all() {
        for n in PREDICTORS {
            let mut p = make_predictor(n, 3, 0).unwrap();
            for _ in 0..50 {
                p.observe(500.0, &Exogenous::default());
            }
            let v = p.predict_next(&Exogenous::default()).unwrap();
            assert!((v - 500.0).abs() < 1.0, "{n}: {v}");
        }
    }

    #[test]
    fn bad_observations_are_ignored() {
        for n in PREDICTORS {
            let mut p = make_predictor(n, 3, 0).unwrap();
            p.observe(100.0, &Exogenous::default());
            p.observe(f64::NAN, &Exogenous::default());
            p.observe(-1.0, &Exogenous::default());
            let v = p.predict_next(&Exogenous::default()).unwrap();
            assert!(v.is_finite() && v > 0.0, "{n}: {v}");
        }
    }
}
