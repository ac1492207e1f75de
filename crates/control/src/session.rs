//! The job session: every worker-level decision of one synchronous data-parallel job, in
//! one I/O-free, clock-free state machine.
//!
//! A driver — the scenario simulator (`pacer-workersim`), the Rust runtime's controller
//! (`pacer-runtime`), the PyTorch binding — owns time, sockets and processes, and tells
//! the session what happened:
//! - [`JobSession::join`] / [`JobSession::leave`]: the job's membership changed;
//! - [`JobSession::set_next_signals`]: load signals of a worker's machine before the coming
//!   iteration (the exogenous inputs of the speed predictors, docs/algorithms.md §1b);
//! - [`JobSession::decide`]: the local batches of the coming iteration;
//! - [`JobSession::observe`]: what each worker measured in the iteration that ran.
//!
//! The session owns the predictors (one per worker; NARX ones share one load response,
//! [`PredictorFactory`]) and the batch controller. After a membership change it rebuilds
//! the batching problem and the controller and re-balances: batches in proportion to the
//! predicted speeds, a worker with no prediction yet counted at the mean of the others
//! (plain equal shares under `uniform`, or when nobody has a prediction). Otherwise it
//! predicts every worker's speed and lets the controller move the batches.
//!
//! Same calls, same decisions: the session is deterministic for its seed, so a replay of
//! one observation sequence through any driver decides the same batches.
//!
//! ```
//! use pacer_control::session::{IterationObservation, JobSession, SessionConfig, WorkerKey};
//! use pacer_predict::speed::Exogenous;
//!
//! let mut s = JobSession::new(SessionConfig::new(300, "lbbsp", "ewma", 7)).unwrap();
//! for w in 0..3 {
//!     s.join(WorkerKey(w), None).unwrap();
//! }
//! let mut batches = s.decide().unwrap().batches.to_vec();
//! assert_eq!(batches, [100, 100, 100]);
//! for _ in 0..5 {
//!     // Worker 2 runs at half the speed of the others.
//!     let obs: Vec<_> = (0..3)
//!         .map(|w| IterationObservation {
//!             worker: WorkerKey(w as u64),
//!             samples: batches[w],
//!             compute_s: batches[w] as f64 / if w == 2 { 500.0 } else { 1000.0 },
//!             signals: Exogenous::default(),
//!         })
//!         .collect();
//!     s.observe(&obs).unwrap();
//!     batches = s.decide().unwrap().batches.to_vec();
//! }
//! assert_eq!(batches.iter().sum::<u64>(), 300);
//! assert!(batches[2] < batches[0]);
//! ```

use std::fmt;

mod snapshot;
pub use snapshot::{MemberSnapshot, SessionSnapshot};

use crate::worker::{
    apportion, make_controller_with, BatchBounds, BatchController, BatchError, BatchProblem,
    GateConfig, Observation, CONTROLLERS,
};
use pacer_predict::speed::{Exogenous, PredictorFactory, SpeedPredictor, PREDICTORS};

/// A worker's stable identity within its job: it names the worker in observations and seeds
/// its predictor, so it must not be reused for another worker.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct WorkerKey(pub u64);

impl fmt::Display for WorkerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "worker {}", self.0)
    }
}

/// What a session is set up with.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionConfig {
    /// The global batch `B` the local batches always sum to.
    pub global_batch: u64,
    /// Batch controller by registry name ([`CONTROLLERS`]).
    pub controller: String,
    /// Speed predictor by registry name ([`PREDICTORS`]).
    pub predictor: String,
    /// Seed of every random choice (NARX's hidden units).
    pub seed: u64,
    /// Noise gate of the adaptive controllers.
    pub gate: GateConfig,
    /// Step time not linear in the batch (GPU-like devices): LB-BSP shifts samples
    /// instead of splitting proportionally.
    pub gpu_like: bool,
}

impl SessionConfig {
    /// Defaults for the rest: the default noise gate, CPU-like devices.
    pub fn new(global_batch: u64, controller: &str, predictor: &str, seed: u64) -> Self {
        SessionConfig {
            global_batch,
            controller: controller.to_string(),
            predictor: predictor.to_string(),
            seed,
            gate: GateConfig::default(),
            gpu_like: false,
        }
    }
}

/// What one worker measured in one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IterationObservation {
    pub worker: WorkerKey,
    /// Samples it computed (its local batch).
    pub samples: u64,
    /// Seconds of compute, excluding waiting for the others.
    pub compute_s: f64,
    /// Load signals of its machine at the iteration's start.
    pub signals: Exogenous,
}

/// Why a session refused a call. Nothing changed when it did.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    #[error("unknown controller `{0}`; known: {known}", known = CONTROLLERS.join(", "))]
    UnknownController(String),
    #[error("unknown predictor `{0}`; known: {known}", known = PREDICTORS.join(", "))]
    UnknownPredictor(String),
    #[error("{0} is already in the job")]
    AlreadyJoined(WorkerKey),
    #[error("{0} is not in the job")]
    NotAMember(WorkerKey),
    #[error("{worker}: {what}")]
    BadObservation { worker: WorkerKey, what: String },
    #[error(
        "{given} batches for {workers} workers, or not summing to the global batch {global_batch}"
    )]
    BadBatches {
        given: usize,
        workers: usize,
        global_batch: u64,
    },
    #[error("{error} (with {workers} workers)")]
    Infeasible { workers: usize, error: BatchError },
    /// A snapshot could not be taken or restored: the field and what was expected.
    #[error("snapshot: {0}")]
    Snapshot(String),
}

/// The batches of the coming iteration, in membership order ([`JobSession::workers`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision<'a> {
    pub batches: &'a [u64],
    /// Each worker's predicted speed (samples/s) that the decision used; 0 where the
    /// predictor had nothing yet.
    pub predicted_speed: &'a [f64],
    /// Whether the membership changed since the last decision (problem and controller
    /// were rebuilt and the batches re-balanced).
    pub rebalanced: bool,
}

struct Member {
    key: WorkerKey,
    bounds: Option<BatchBounds>,
    predictor: Box<dyn SpeedPredictor>,
    /// Last measured speed (samples/s); 0 before the first observation.
    speed: f64,
    /// Compute seconds of its last iteration.
    compute_s: f64,
    next_signals: Exogenous,
}

type Factory = Box<dyn Fn(WorkerKey) -> Box<dyn SpeedPredictor> + Send>;

/// Where members' predictors come from: the registry (restorable from a snapshot) or
/// a caller's closure ([`JobSession::with_predictors`]).
enum Predictors {
    Registry(PredictorFactory),
    Custom(Factory),
}

impl Predictors {
    fn make(&self, key: WorkerKey) -> Box<dyn SpeedPredictor> {
        match self {
            Predictors::Registry(f) => f.make(key.0),
            Predictors::Custom(f) => f(key),
        }
    }
}

/// One job's worker-level decisions (module docs).
pub struct JobSession {
    cfg: SessionConfig,
    make_predictor: Predictors,
    members: Vec<Member>,
    controller: Option<Box<dyn BatchController>>,
    variant: &'static str,
    batches: Vec<u64>,
    predicted: Vec<f64>,
    compute_s: Vec<f64>,
    membership_changed: bool,
}

impl fmt::Debug for JobSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobSession")
            .field("cfg", &self.cfg)
            .field("workers", &self.workers().collect::<Vec<_>>())
            .field("batches", &self.batches)
            .finish()
    }
}

impl JobSession {
    /// A session with no workers yet; predictors by registry name.
    pub fn new(cfg: SessionConfig) -> Result<Self, SessionError> {
        let factory = PredictorFactory::new(&cfg.predictor, cfg.seed)
            .ok_or_else(|| SessionError::UnknownPredictor(cfg.predictor.clone()))?;
        Self::build(cfg, Predictors::Registry(factory))
    }

    /// A session whose predictors come from `make` (variants the registry does not name);
    /// `cfg.predictor` is then only a label.
    pub fn with_predictors(cfg: SessionConfig, make: Factory) -> Result<Self, SessionError> {
        Self::build(cfg, Predictors::Custom(make))
    }

    fn build(cfg: SessionConfig, make: Predictors) -> Result<Self, SessionError> {
        if !CONTROLLERS.contains(&cfg.controller.as_str()) {
            return Err(SessionError::UnknownController(cfg.controller.clone()));
        }
        // The global batch itself is checked by the first decision's problem; refusing
        // 0 and oversize values here too keeps a session from starting half-valid.
        let probe = BatchProblem::new(
            cfg.global_batch,
            vec![BatchBounds {
                min: 0,
                max: cfg.global_batch,
            }],
            cfg.gpu_like,
        );
        if let Err(error) = probe {
            return Err(SessionError::Infeasible { workers: 0, error });
        }
        Ok(JobSession {
            cfg,
            make_predictor: make,
            members: Vec::new(),
            controller: None,
            variant: "",
            batches: Vec::new(),
            predicted: Vec::new(),
            compute_s: Vec::new(),
            membership_changed: true,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// A worker joins; `bounds` are its local-batch limits (e.g. a memory cap), or by
    /// default at least one sample (when `B` allows) and at most `B`.
    pub fn join(
        &mut self,
        key: WorkerKey,
        bounds: Option<BatchBounds>,
    ) -> Result<(), SessionError> {
        if self.members.iter().any(|m| m.key == key) {
            return Err(SessionError::AlreadyJoined(key));
        }
        // Members stay in key order, whatever order they join in.
        let at = self.members.partition_point(|m| m.key < key);
        self.members.insert(
            at,
            Member {
                key,
                bounds,
                predictor: self.make_predictor.make(key),
                speed: 0.0,
                compute_s: 0.0,
                next_signals: Exogenous::default(),
            },
        );
        self.membership_changed = true;
        Ok(())
    }

    /// A worker leaves (lost or removed); its share goes to the others at the next
    /// decision.
    pub fn leave(&mut self, key: WorkerKey) -> Result<(), SessionError> {
        let i = self.index(key)?;
        self.members.remove(i);
        self.membership_changed = true;
        Ok(())
    }

    /// The workers, in the order of [`Decision::batches`].
    pub fn workers(&self) -> impl Iterator<Item = WorkerKey> + '_ {
        self.members.iter().map(|m| m.key)
    }

    /// The controller rule in force (e.g. `lbbsp` resolved to `lbbsp-gpu`); empty before
    /// the first decision.
    pub fn controller_variant(&self) -> &'static str {
        self.variant
    }

    /// Load signals of `key`'s machine before the coming iteration.
    pub fn set_next_signals(
        &mut self,
        key: WorkerKey,
        signals: Exogenous,
    ) -> Result<(), SessionError> {
        let i = self.index(key)?;
        self.members[i].next_signals = signals;
        Ok(())
    }

    fn index(&self, key: WorkerKey) -> Result<usize, SessionError> {
        self.members
            .iter()
            .position(|m| m.key == key)
            .ok_or(SessionError::NotAMember(key))
    }

    /// Every member's predicted speed for the coming iteration (samples/s; its last
    /// measured speed where the predictor has nothing yet, 0 before any), in member order.
    /// Asking changes nothing.
    pub fn predicted_speeds(&self) -> Vec<f64> {
        self.members
            .iter()
            .map(|m| m.predictor.predict_next(&m.next_signals).unwrap_or(m.speed))
            .collect()
    }

    /// The batches that will actually run instead of the decided ones (fixed batches of an
    /// ablation): the controller continues from them. One per member, summing to `B`.
    pub fn override_batches(&mut self, batches: &[u64]) -> Result<(), SessionError> {
        let n = self.members.len();
        if batches.len() != n || batches.iter().sum::<u64>() != self.cfg.global_batch {
            return Err(SessionError::BadBatches {
                given: batches.len(),
                workers: n,
                global_batch: self.cfg.global_batch,
            });
        }
        self.batches.clear();
        self.batches.extend_from_slice(batches);
        Ok(())
    }

    fn predict(&mut self) {
        self.predicted.clear();
        self.predicted.extend(
            self.members
                .iter()
                .map(|m| m.predictor.predict_next(&m.next_signals).unwrap_or(m.speed)),
        );
    }

    /// The batching problem of the current members.
    fn problem(&self) -> Result<BatchProblem, SessionError> {
        let n = self.members.len();
        let b = self.cfg.global_batch;
        let bounds = self
            .members
            .iter()
            .map(|m| {
                m.bounds.unwrap_or(BatchBounds {
                    // ≥ 1 sample each when possible: a worker with none measures no speed.
                    min: u64::from(b >= n as u64),
                    max: b,
                })
            })
            .collect();
        BatchProblem::new(b, bounds, self.cfg.gpu_like)
            .map_err(|error| SessionError::Infeasible { workers: n, error })
    }

    /// The local batches of the coming iteration.
    pub fn decide(&mut self) -> Result<Decision<'_>, SessionError> {
        let n = self.members.len();
        let rebalanced = self.membership_changed;
        if rebalanced {
            let problem = self.problem()?;
            let controller = make_controller_with(&self.cfg.controller, &problem, self.cfg.gate)
                .expect("controller name checked by the constructor");
            self.variant = controller.name();
            self.controller = Some(controller);
            self.predict();
            self.batches = self.rebalance(&problem);
            self.compute_s = vec![0.0; n];
            self.membership_changed = false;
        } else {
            self.predict();
            for (c, m) in self.compute_s.iter_mut().zip(&self.members) {
                *c = m.compute_s;
            }
            if let Some(c) = self.controller.as_mut() {
                c.decide(
                    &Observation {
                        compute_s: &self.compute_s,
                        predicted_speed: &self.predicted,
                    },
                    &mut self.batches,
                );
            }
        }
        Ok(Decision {
            batches: &self.batches,
            predicted_speed: &self.predicted,
            rebalanced,
        })
    }

    /// Batches after a membership change: proportional to the predicted speeds, a worker
    /// without a prediction at the mean of those with one; equal shares under `uniform`
    /// or when nobody has a prediction.
    fn rebalance(&self, problem: &BatchProblem) -> Vec<u64> {
        let usable = |s: f64| s > 0.0 && s.is_finite();
        let known: Vec<f64> = self
            .predicted
            .iter()
            .copied()
            .filter(|s| usable(*s))
            .collect();
        if self.cfg.controller == "uniform" || known.is_empty() {
            return problem.uniform();
        }
        let mean = known.iter().sum::<f64>() / known.len() as f64;
        let v: Vec<f64> = self
            .predicted
            .iter()
            .map(|&s| if usable(s) { s } else { mean })
            .collect();
        let mut out = vec![0; v.len()];
        apportion(&v, problem.global_batch(), problem.bounds(), &mut out);
        out
    }

    /// What the workers measured in the iteration that ran. Checked whole before any of
    /// it is applied: every worker named must be a member, once, with a finite
    /// non-negative compute time.
    pub fn observe(&mut self, observations: &[IterationObservation]) -> Result<(), SessionError> {
        let mut idx = Vec::with_capacity(observations.len());
        for (k, o) in observations.iter().enumerate() {
            let i = self.index(o.worker)?;
            if observations[..k].iter().any(|p| p.worker == o.worker) {
                return Err(SessionError::BadObservation {
                    worker: o.worker,
                    what: "observed twice in one iteration".into(),
                });
            }
            if !(o.compute_s.is_finite() && o.compute_s >= 0.0) {
                return Err(SessionError::BadObservation {
                    worker: o.worker,
                    what: format!("compute time {} s is not a finite number ≥ 0", o.compute_s),
                });
            }
            idx.push(i);
        }
        for (o, i) in observations.iter().zip(idx) {
            let m = &mut self.members[i];
            let speed = o.samples as f64 / o.compute_s.max(1e-9);
            m.predictor.observe(speed, &o.signals);
            m.speed = speed;
            m.compute_s = o.compute_s;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(batches: &[u64], speeds: &[f64]) -> Vec<IterationObservation> {
        batches
            .iter()
            .zip(speeds)
            .enumerate()
            .map(|(i, (&b, &v))| IterationObservation {
                worker: WorkerKey(i as u64),
                samples: b,
                compute_s: b as f64 / v,
                signals: Exogenous::default(),
            })
            .collect()
    }

    #[test]
    fn unknown_names_and_bad_batches_are_refused_up_front() {
        let e = JobSession::new(SessionConfig::new(64, "nope", "ewma", 1)).unwrap_err();
        assert!(e.to_string().contains("unknown controller `nope`"), "{e}");
        let e = JobSession::new(SessionConfig::new(64, "pid", "nope", 1)).unwrap_err();
        assert!(e.to_string().contains("unknown predictor `nope`"), "{e}");
        assert!(JobSession::new(SessionConfig::new(0, "pid", "ewma", 1)).is_err());
    }

    #[test]
    fn a_lost_worker_s_share_goes_to_the_others_in_proportion_to_speed() {
        let mut s = JobSession::new(SessionConfig::new(600, "lbbsp", "last", 3)).unwrap();
        for w in 0..3 {
            s.join(WorkerKey(w), None).unwrap();
        }
        let b = s.decide().unwrap().batches.to_vec();
        assert_eq!(b, [200, 200, 200]);
        s.observe(&obs(&b, &[1000.0, 1000.0, 500.0])).unwrap();
        s.leave(WorkerKey(1)).unwrap();
        let d = s.decide().unwrap();
        assert!(d.rebalanced);
        assert_eq!(d.batches, [400, 200]);
        // A newcomer without a prediction counts at the mean of the others.
        s.join(WorkerKey(9), None).unwrap();
        let d = s.decide().unwrap();
        assert_eq!(d.batches, [267, 133, 200]);
        assert_eq!(
            s.workers().collect::<Vec<_>>(),
            [WorkerKey(0), WorkerKey(2), WorkerKey(9)]
        );
    }

    #[test]
    fn bad_observations_change_nothing() {
        let mut s = JobSession::new(SessionConfig::new(100, "pid", "ewma", 3)).unwrap();
        s.join(WorkerKey(0), None).unwrap();
        s.join(WorkerKey(1), None).unwrap();
        let b = s.decide().unwrap().batches.to_vec();
        let mut o = obs(&b, &[100.0, 100.0]);
        o[1].compute_s = f64::NAN;
        assert!(matches!(
            s.observe(&o),
            Err(SessionError::BadObservation { .. })
        ));
        let mut twice = obs(&b, &[100.0, 100.0]);
        twice[1].worker = WorkerKey(0);
        assert!(s.observe(&twice).is_err());
        let mut stranger = obs(&b, &[100.0, 100.0]);
        stranger[0].worker = WorkerKey(5);
        assert_eq!(
            s.observe(&stranger),
            Err(SessionError::NotAMember(WorkerKey(5)))
        );
        // Nothing was applied: no speed is known yet.
        s.leave(WorkerKey(1)).unwrap();
        assert_eq!(s.decide().unwrap().predicted_speed, [0.0]);
        assert!(s.join(WorkerKey(0), None).is_err());
    }

    #[test]
    fn infeasible_caps_are_an_error_naming_the_worker_count() {
        let mut s = JobSession::new(SessionConfig::new(100, "lbbsp", "ewma", 3)).unwrap();
        s.join(WorkerKey(0), Some(BatchBounds { min: 1, max: 30 }))
            .unwrap();
        s.join(WorkerKey(1), Some(BatchBounds { min: 1, max: 30 }))
            .unwrap();
        let e = s.decide().unwrap_err();
        assert!(e.to_string().contains("with 2 workers"), "{e}");
    }

    #[test]
    fn the_same_calls_give_the_same_decisions() {
        let run = || {
            let mut s = JobSession::new(SessionConfig::new(512, "pid", "narx", 11)).unwrap();
            for w in 0..4 {
                s.join(WorkerKey(w), None).unwrap();
            }
            let mut all = Vec::new();
            for k in 0..40u32 {
                let b = s.decide().unwrap().batches.to_vec();
                let v = [1000.0, 900.0 + f64::from(k % 7) * 10.0, 500.0, 250.0];
                s.observe(&obs(&b, &v)).unwrap();
                all.push(b);
            }
            all
        };
        assert_eq!(run(), run());
    }
}
