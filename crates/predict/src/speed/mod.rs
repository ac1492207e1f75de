//! One-step-ahead prediction of a worker's speed (samples/s), docs/algorithms.md §1b.
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
//! | `narx` | [`Narx`]        | additive non-linear autoregressive model with exogenous inputs: per-worker level + random-feature autoregression on past errors, plus a load response shared by the job's workers ([`LoadPool`]) over filtered monitor signals; all fitted by recursive least squares |
//!
//! Only `narx` uses the exogenous signals; the baselines are pure time-series
//! predictors, as in the LB-BSP paper's comparison. Build a job's predictors with
//! [`make_predictors`], which lets `narx` workers share their load response (one
//! worker's interference burst teaches the others); [`make_predictor`] builds one
//! independent worker.

mod ets;
mod ewma;
mod last;
mod narx;
mod state;

pub use ets::Ets;
pub use ewma::Ewma;
pub use last::LastValue;
pub use narx::{LoadPool, Narx, NarxConfig};
pub use state::{EtsState, ExoFilterState, NarxState, PredictorState, RlsState};

/// Resource signals a node monitor observes at the *start* of an iteration, before the
/// step runs. Both are fractions in `[0, 1]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Exogenous {
    /// Share of the worker's machine taken by co-located work (CPU load).
    pub cpu_load: f64,
    /// Share of memory (or memory bandwidth) taken by co-located work.
    pub mem_load: f64,
}

/// An online one-step-ahead speed predictor for one worker.
///
/// A minimal one — the mean of the last three observed speeds:
/// ```
/// use pacer_predict::speed::{Exogenous, SpeedPredictor};
///
/// #[derive(Default)]
/// struct MeanOfThree {
///     last: Vec<f64>,
/// }
///
/// impl SpeedPredictor for MeanOfThree {
///     fn name(&self) -> &'static str {
///         "mean3"
///     }
///     fn observe(&mut self, samples_per_s: f64, _exo: &Exogenous) {
///         if samples_per_s.is_finite() && samples_per_s > 0.0 {
///             self.last.push(samples_per_s);
///             if self.last.len() > 3 {
///                 self.last.remove(0);
///             }
///         }
///     }
///     fn predict_next(&self, _exo: &Exogenous) -> Option<f64> {
///         (!self.last.is_empty()).then(|| self.last.iter().sum::<f64>() / self.last.len() as f64)
///     }
/// }
///
/// let mut p = MeanOfThree::default();
/// assert_eq!(p.predict_next(&Exogenous::default()), None);
/// for v in [100.0, 110.0, 120.0, 130.0] {
///     p.observe(v, &Exogenous::default());
/// }
/// assert_eq!(p.predict_next(&Exogenous::default()), Some(120.0));
/// ```
pub trait SpeedPredictor: Send {
    /// Registry name (`last`, `ewma`, `ets`, `narx`).
    fn name(&self) -> &'static str;
    /// Record a finished iteration: its measured speed and the signals that were
    /// observed at its start. Non-finite or non-positive speeds are ignored.
    fn observe(&mut self, samples_per_s: f64, exo: &Exogenous);
    /// Predict the speed of the next iteration, whose starting signals are `exo`.
    /// `None` until the predictor has seen at least one observation.
    fn predict_next(&self, exo: &Exogenous) -> Option<f64>;
    /// The learnt state, for a session snapshot; `None` (the default) for a predictor
    /// the registry does not know, which makes a snapshot refuse.
    fn save(&self) -> Option<PredictorState> {
        None
    }
}

/// Names accepted by [`make_predictor`].
pub const PREDICTORS: [&str; 4] = ["last", "ewma", "ets", "narx"];

fn worker_seed(seed: u64, worker: u64) -> u64 {
    seed ^ worker.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Build one worker's predictor by registry name. `seed` feeds every random choice
/// (only `narx` has any); `worker` is mixed in so workers get independent but
/// reproducible models. A `narx` built here has a load response of its own; use
/// [`make_predictors`] for the workers of one job.
pub fn make_predictor(name: &str, seed: u64, worker: u64) -> Option<Box<dyn SpeedPredictor>> {
    Some(match name {
        "last" => Box::new(LastValue::default()),
        "ewma" => Box::new(Ewma::new(0.3)),
        "ets" => Box::new(Ets::default()),
        "narx" => Box::new(Narx::new(NarxConfig::default(), worker_seed(seed, worker))),
        _ => return None,
    })
}

/// Builds the predictors of one job's workers, by registry name, as workers come and go.
/// Worker `w`'s predictor is seeded as by [`make_predictor`]; `narx` predictors share one
/// [`LoadPool`]: workers of one job react alike to co-located load, so each worker's
/// bursts teach all of them (a worker that joins later joins the same pool).
pub struct PredictorFactory {
    name: &'static str,
    seed: u64,
    pool: Option<(NarxConfig, LoadPool)>,
}

impl PredictorFactory {
    /// `None` for a name not in [`PREDICTORS`].
    pub fn new(name: &str, seed: u64) -> Option<Self> {
        let name = *PREDICTORS.iter().find(|p| **p == name)?;
        let pool = (name == "narx").then(|| {
            let cfg = NarxConfig::default();
            (cfg, LoadPool::new(&cfg, seed))
        });
        Some(PredictorFactory { name, seed, pool })
    }

    /// The registry name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The predictor of worker `worker`.
    pub fn make(&self, worker: u64) -> Box<dyn SpeedPredictor> {
        match &self.pool {
            Some((cfg, pool)) => Box::new(Narx::pooled(
                *cfg,
                worker_seed(self.seed, worker),
                pool.clone(),
            )),
            None => make_predictor(self.name, self.seed, worker).expect("registered name"),
        }
    }
}

impl PredictorFactory {
    /// The learnt state of the pooled NARX load response (`None` for other kinds):
    /// saved once per job, not per worker.
    pub fn save_pool(&self) -> Option<RlsState> {
        self.pool.as_ref().map(|(_, pool)| pool.save())
    }

    /// Set the pooled load response to `state` (what [`Self::save_pool`] gave); every
    /// predictor this factory made or makes shares it. Nothing changes on an error.
    pub fn restore_pool(&self, state: &RlsState) -> Result<(), String> {
        match &self.pool {
            Some((_, pool)) => pool.restore(state),
            None => Err(format!("`{}` has no pooled load response", self.name)),
        }
    }

    /// Worker `worker`'s predictor, continuing from `state` (what its
    /// [`SpeedPredictor::save`] gave). The state is checked whole: kind, lengths,
    /// finiteness; the error names the field.
    pub fn restore(
        &self,
        worker: u64,
        state: &PredictorState,
    ) -> Result<Box<dyn SpeedPredictor>, String> {
        if state.kind() != self.name {
            return Err(format!(
                "kind: `{}` state for a `{}` predictor",
                state.kind(),
                self.name
            ));
        }
        Ok(match state {
            PredictorState::Last { last } => {
                state::speed_opt("last", *last)?;
                Box::new(LastValue::from_state(*last))
            }
            PredictorState::Ewma { state: s } => {
                state::speed_opt("state", *s)?;
                let mut p = Ewma::new(0.3);
                p.set_state(*s);
                Box::new(p)
            }
            PredictorState::Ets(s) => Box::new(Ets::restore(s)?),
            PredictorState::Narx(s) => {
                let (cfg, pool) = self.pool.as_ref().expect("narx factories have a pool");
                let mut p = Narx::pooled(*cfg, worker_seed(self.seed, worker), pool.clone());
                p.restore(s)?;
                Box::new(p)
            }
        })
    }
}

/// Build the predictors of a job's `workers` workers 0..workers ([`PredictorFactory`]).
pub fn make_predictors(
    name: &str,
    seed: u64,
    workers: usize,
) -> Option<Vec<Box<dyn SpeedPredictor>>> {
    let f = PredictorFactory::new(name, seed)?;
    Some((0..workers).map(|i| f.make(i as u64)).collect())
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
