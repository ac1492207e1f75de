//! The `Session` binding: `pacer_control::session::JobSession` with a checkpointable state
//! of bounded size (python/README.md, "Elastic restart").

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use pacer_control::session::{
    IterationObservation, JobSession, SessionConfig, SessionError, SessionSnapshot, WorkerKey,
};
use pacer_control::worker::{BatchBounds, MAX_GLOBAL_BATCH};
use pacer_predict::speed::Exogenous;
use pyo3::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{session_error, value_error};

/// Version of [`SessionState`]'s JSON. Version 1 (the log of every call) is still read,
/// by replaying it; other versions are refused.
const STATE_VERSION: u32 = 2;

/// Observations a session keeps for [`Session::with_global_batch`] (its `recent` at
/// most): the only history in its state, so the state's size does not grow with steps.
const RECENT_CAP: usize = 64;

/// `(worker, samples, compute_s, cpu_load, mem_load)`: one worker's observation.
type ObsRow = (u64, u64, f64, f64, f64);

/// One call that changes a session (the entries of a version-1 log).
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Event {
    Join {
        worker: u64,
        bounds: Option<(u64, u64)>,
    },
    Leave {
        worker: u64,
    },
    Signals {
        worker: u64,
        cpu_load: f64,
        mem_load: f64,
    },
    Decide,
    Observe(Vec<ObsRow>),
    Override(Vec<u64>),
}

/// The configuration a session was made with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    global_batch: u64,
    controller: String,
    predictor: String,
    seed: u64,
    gpu_like: bool,
}

/// A session as JSON (version 2): configuration, exact snapshot, members with their
/// bounds, and the last [`RECENT_CAP`] observations; its size depends on the workers,
/// not on the steps.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionState {
    version: u32,
    config: Config,
    snapshot: SessionSnapshot,
    members: Vec<(u64, Option<(u64, u64)>)>,
    recent: VecDeque<Vec<ObsRow>>,
}

/// A version-1 state: the configuration and the log of every call that succeeded.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogStateV1 {
    version: u32,
    global_batch: u64,
    controller: String,
    predictor: String,
    seed: u64,
    gpu_like: bool,
    events: Vec<Event>,
}

type DecisionOut = (Vec<u64>, Vec<f64>, bool);

struct Inner {
    session: JobSession,
    config: Config,
    /// The members in key order, with the bounds they joined with.
    members: Vec<(u64, Option<(u64, u64)>)>,
    recent: VecDeque<Vec<ObsRow>>,
}

impl Inner {
    fn new(config: Config) -> PyResult<Self> {
        let mut cfg = SessionConfig::new(
            config.global_batch,
            &config.controller,
            &config.predictor,
            config.seed,
        );
        cfg.gpu_like = config.gpu_like;
        let session = JobSession::new(cfg).map_err(|e| match e {
            SessionError::UnknownController(_) => value_error(format!("controller: {e}")),
            SessionError::UnknownPredictor(_) => value_error(format!("predictor: {e}")),
            _ => value_error(format!("global_batch: {e}")),
        })?;
        Ok(Inner {
            session,
            config,
            members: Vec::new(),
            recent: VecDeque::new(),
        })
    }

    /// Applies one call to the session; on success records what the state keeps (the
    /// members, the last observations). A decision is returned as `(batches,
    /// predicted speeds, rebalanced)`.
    fn apply(&mut self, event: Event) -> Result<Option<DecisionOut>, SessionError> {
        let s = &mut self.session;
        let mut out = None;
        match event {
            Event::Join { worker, bounds } => {
                s.join(
                    WorkerKey(worker),
                    bounds.map(|(min, max)| BatchBounds { min, max }),
                )?;
                let at = self.members.partition_point(|m| m.0 < worker);
                self.members.insert(at, (worker, bounds));
            }
            Event::Leave { worker } => {
                s.leave(WorkerKey(worker))?;
                self.members.retain(|m| m.0 != worker);
            }
            Event::Signals {
                worker,
                cpu_load,
                mem_load,
            } => s.set_next_signals(WorkerKey(worker), Exogenous { cpu_load, mem_load })?,
            Event::Decide => {
                let d = s.decide()?;
                out = Some((d.batches.to_vec(), d.predicted_speed.to_vec(), d.rebalanced));
            }
            Event::Observe(rows) => {
                let obs: Vec<IterationObservation> = rows
                    .iter()
                    .map(
                        |&(w, samples, compute_s, cpu_load, mem_load)| IterationObservation {
                            worker: WorkerKey(w),
                            samples,
                            compute_s,
                            signals: Exogenous { cpu_load, mem_load },
                        },
                    )
                    .collect();
                s.observe(&obs)?;
                if self.recent.len() == RECENT_CAP {
                    self.recent.pop_front();
                }
                self.recent.push_back(rows);
            }
            Event::Override(b) => s.override_batches(&b)?,
        }
        Ok(out)
    }

    fn state(&self) -> PyResult<SessionState> {
        Ok(SessionState {
            version: STATE_VERSION,
            config: self.config.clone(),
            snapshot: self.session.snapshot().map_err(session_error)?,
            members: self.members.clone(),
            recent: self.recent.clone(),
        })
    }

    /// The session `st` describes, checked whole: the snapshot (by the session), and
    /// that the configuration and members agree with it.
    fn restore(st: SessionState) -> PyResult<Self> {
        if st.version != STATE_VERSION {
            return Err(value_error(format!(
                "state: version {} (expected {STATE_VERSION}, or a version-1 log)",
                st.version
            )));
        }
        let c = &st.config;
        let sc = &st.snapshot.config;
        if (
            c.global_batch,
            &c.controller,
            &c.predictor,
            c.seed,
            c.gpu_like,
        ) != (
            sc.global_batch,
            &sc.controller,
            &sc.predictor,
            sc.seed,
            sc.gpu_like,
        ) {
            return Err(value_error("state: config differs from snapshot.config"));
        }
        let keys: Vec<(u64, Option<(u64, u64)>)> = (st.snapshot.members.iter())
            .map(|m| (m.key.0, m.bounds.map(|b| (b.min, b.max))))
            .collect();
        if keys != st.members {
            return Err(value_error(
                "state: members differ from the snapshot's members",
            ));
        }
        if st.recent.len() > RECENT_CAP {
            return Err(value_error(format!(
                "state: recent holds {} observations, at most {RECENT_CAP}",
                st.recent.len()
            )));
        }
        let session =
            JobSession::restore(st.snapshot).map_err(|e| value_error(format!("state: {e}")))?;
        Ok(Inner {
            session,
            config: st.config,
            members: st.members,
            recent: st.recent,
        })
    }

    /// A version-1 log, rebuilt by replaying its calls.
    fn replay(st: LogStateV1) -> PyResult<Self> {
        if st.version != 1 {
            return Err(value_error(format!(
                "state: version {} is not a log",
                st.version
            )));
        }
        let mut inner = Inner::new(Config {
            global_batch: st.global_batch,
            controller: st.controller,
            predictor: st.predictor,
            seed: st.seed,
            gpu_like: st.gpu_like,
        })?;
        for (i, e) in st.events.into_iter().enumerate() {
            inner
                .apply(e)
                .map_err(|err| value_error(format!("state: call {i} does not replay: {err}")))?;
        }
        Ok(inner)
    }

    fn from_json(state: &str) -> PyResult<Self> {
        let v: serde_json::Value = serde_json::from_str(state)
            .map_err(|e| value_error(format!("state: not a session state: {e}")))?;
        let version = v.get("version").and_then(|x| x.as_u64());
        let not_state =
            |e: serde_json::Error| value_error(format!("state: not a session state: {e}"));
        match version {
            Some(1) => Inner::replay(serde_json::from_value(v).map_err(not_state)?),
            _ => Inner::restore(serde_json::from_value(v).map_err(not_state)?),
        }
    }
}

/// One job's worker-level decisions (`pacer_control::session::JobSession`).
///
/// `Session(global_batch, controller="lbbsp", predictor="ewma", seed=0, gpu_like=False)`;
/// workers are integer keys (the PyTorch driver uses ranks).
#[pyclass(module = "pacer_torch._native")]
pub(crate) struct Session {
    inner: Mutex<Inner>,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while locked cannot leave the session half-changed (calls are
        // checked whole before they change anything), so a poisoned lock is usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (global_batch, controller="lbbsp", predictor="ewma", seed=0, gpu_like=false))]
    fn new(
        global_batch: u64,
        controller: &str,
        predictor: &str,
        seed: u64,
        gpu_like: bool,
    ) -> PyResult<Self> {
        Ok(Session {
            inner: Mutex::new(Inner::new(Config {
                global_batch,
                controller: controller.to_string(),
                predictor: predictor.to_string(),
                seed,
                gpu_like,
            })?),
        })
    }

    /// A worker joins, with its local-batch limits `[min_batch, max_batch]`. Neither
    /// given: at least one sample when the global batch allows, at most the global batch.
    /// One given: the other is 1, or no cap but the global batch (whatever it becomes
    /// under `with_global_batch`).
    #[pyo3(signature = (worker, min_batch=None, max_batch=None))]
    fn join(&self, worker: u64, min_batch: Option<u64>, max_batch: Option<u64>) -> PyResult<()> {
        let bounds = match (min_batch, max_batch) {
            (None, None) => None,
            (min, max) => {
                // A bound above the global batch binds nothing (the batches sum to it).
                let (min, max) = (min.unwrap_or(1), max.unwrap_or(MAX_GLOBAL_BATCH));
                if min > max {
                    return Err(value_error(format!(
                        "max_batch: {max} is below min_batch {min}"
                    )));
                }
                Some((min, max))
            }
        };
        self.lock()
            .apply(Event::Join { worker, bounds })
            .map(drop)
            .map_err(session_error)
    }

    /// A worker leaves; its share goes to the others at the next decision.
    fn leave(&self, worker: u64) -> PyResult<()> {
        self.lock()
            .apply(Event::Leave { worker })
            .map(drop)
            .map_err(session_error)
    }

    /// Load signals (fractions in [0, 1]) of a worker's machine before the coming step.
    fn set_next_signals(&self, worker: u64, cpu_load: f64, mem_load: f64) -> PyResult<()> {
        for (name, v) in [("cpu_load", cpu_load), ("mem_load", mem_load)] {
            if !v.is_finite() {
                return Err(value_error(format!("{name}: {v} is not a finite number")));
            }
        }
        self.lock()
            .apply(Event::Signals {
                worker,
                cpu_load,
                mem_load,
            })
            .map(drop)
            .map_err(session_error)
    }

    /// The local batches of the coming step: `(batches, predicted_speeds, rebalanced)`,
    /// in the order of `workers()`.
    fn decide(&self) -> PyResult<DecisionOut> {
        let out = self
            .lock()
            .apply(Event::Decide)
            .map_err(|e| value_error(format!("batch bounds: {e}")))?;
        Ok(out.expect("a decision returns its batches"))
    }

    /// What the workers measured in the step that ran: a list of
    /// `(worker, samples, compute_s, cpu_load, mem_load)`; checked whole first.
    fn observe(&self, observations: Vec<ObsRow>) -> PyResult<()> {
        for (i, r) in observations.iter().enumerate() {
            // The state keeps recent rows as JSON, which has no NaN or infinity.
            if !(r.3.is_finite() && r.4.is_finite()) {
                return Err(value_error(format!(
                    "observations[{i}]: cpu_load {} / mem_load {} is not a finite number",
                    r.3, r.4
                )));
            }
        }
        self.lock()
            .apply(Event::Observe(observations))
            .map(drop)
            .map_err(|e| value_error(format!("observations: {e}")))
    }

    /// Every worker's predicted speed (samples/s) for the coming step; changes nothing.
    fn predicted_speeds(&self) -> Vec<f64> {
        self.lock().session.predicted_speeds()
    }

    /// The batches that will run instead of the decided ones; the controller continues
    /// from them.
    fn override_batches(&self, batches: Vec<u64>) -> PyResult<()> {
        self.lock()
            .apply(Event::Override(batches))
            .map(drop)
            .map_err(|e| value_error(format!("batches: {e}")))
    }

    /// The workers, in the order of the decided batches.
    fn workers(&self) -> Vec<u64> {
        self.lock().session.workers().map(|w| w.0).collect()
    }

    /// The controller rule in force (`lbbsp` resolves to `lbbsp-cpu` or `lbbsp-gpu`).
    #[getter]
    fn controller_variant(&self) -> &'static str {
        self.lock().session.controller_variant()
    }

    #[getter]
    fn global_batch(&self) -> u64 {
        self.lock().config.global_batch
    }

    #[getter]
    fn controller(&self) -> String {
        self.lock().config.controller.clone()
    }

    #[getter]
    fn predictor(&self) -> String {
        self.lock().config.predictor.clone()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.lock().config.seed
    }

    /// Observations the state keeps (at most `RECENT_CAP` = 64).
    fn recent_observations(&self) -> usize {
        self.lock().recent.len()
    }

    /// The session as JSON text (version 2; its size does not grow with the steps);
    /// `Session.from_state` rebuilds the same session.
    fn state(&self) -> PyResult<String> {
        let st = self.lock().state()?;
        serde_json::to_string(&st).map_err(value_error)
    }

    /// The session `state()` described: a version-2 state restored exactly, or a
    /// version-1 log (earlier releases) replayed.
    #[staticmethod]
    fn from_state(state: &str) -> PyResult<Self> {
        Ok(Session {
            inner: Mutex::new(Inner::from_json(state)?),
        })
    }

    /// A new session with global batch `global_batch` and this one's configuration and
    /// members with the bounds they joined with; its predictors have seen this session's
    /// last `recent` observations (at most 64, the ones a session keeps; a changed global
    /// batch changes the batching problem, so the controller starts anew).
    #[pyo3(signature = (global_batch, recent=32))]
    fn with_global_batch(&self, global_batch: u64, recent: usize) -> PyResult<Self> {
        if recent > RECENT_CAP {
            return Err(value_error(format!(
                "recent: {recent} exceeds the {RECENT_CAP} observations a session keeps"
            )));
        }
        let g = self.lock();
        let mut inner = Inner::new(Config {
            global_batch,
            ..g.config.clone()
        })?;
        // Bounds as joined, not narrowed to this batch: a cap above it binds nothing now
        // and must still hold when the batch grows again.
        for &(worker, bounds) in &g.members {
            inner
                .apply(Event::Join { worker, bounds })
                .map_err(|e| value_error(format!("global_batch: {e}")))?;
        }
        let members: Vec<u64> = g.members.iter().map(|m| m.0).collect();
        for rows in g.recent.iter().skip(g.recent.len().saturating_sub(recent)) {
            let rows: Vec<_> = rows
                .iter()
                .copied()
                .filter(|r| members.contains(&r.0))
                .collect();
            inner.apply(Event::Observe(rows)).map_err(session_error)?;
        }
        // Refuse a global batch the members' bounds cannot hold now, not at the next step.
        let mut probe = Inner::restore(inner.state()?)?;
        probe
            .apply(Event::Decide)
            .map_err(|e| value_error(format!("global_batch: {e}")))?;
        Ok(Session {
            inner: Mutex::new(inner),
        })
    }

    fn __repr__(&self) -> String {
        let g = self.lock();
        format!(
            "Session(global_batch={}, controller={:?}, predictor={:?}, seed={}, workers={:?})",
            g.config.global_batch,
            g.config.controller,
            g.config.predictor,
            g.config.seed,
            g.session.workers().map(|w| w.0).collect::<Vec<_>>()
        )
    }
}
