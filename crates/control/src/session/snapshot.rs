//! A bounded, exact checkpoint of a [`JobSession`]: its size depends on the workers,
//! not on how long the job ran, and a restored session decides bit-identically to
//! the uninterrupted one (crates/control/tests/snapshot.rs).

use serde::{Deserialize, Serialize};

use super::{JobSession, Member, Predictors, SessionConfig, SessionError, WorkerKey};
use crate::worker::{BatchBounds, ControllerState, CONTROLLERS};
use pacer_predict::speed::{Exogenous, PredictorFactory, PredictorState, RlsState};

/// One member of a [`SessionSnapshot`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberSnapshot {
    pub key: WorkerKey,
    pub bounds: Option<BatchBounds>,
    pub predictor: PredictorState,
    /// Last measured speed (samples/s), compute seconds of its last iteration.
    pub speed: f64,
    pub compute_s: f64,
    pub next_signals: Exogenous,
}

/// Everything a [`JobSession`] decides from ([`JobSession::snapshot`],
/// [`JobSession::restore`]). The pooled NARX load response is saved once, in `pool`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionSnapshot {
    pub config: SessionConfig,
    pub members: Vec<MemberSnapshot>,
    pub pool: Option<RlsState>,
    /// The controller in force; `None` before the first decision and while a
    /// membership change is pending (the next decision rebuilds it).
    pub controller: Option<ControllerState>,
    pub variant: String,
    pub batches: Vec<u64>,
    pub predicted: Vec<f64>,
    pub compute_s: Vec<f64>,
    pub membership_changed: bool,
}

fn bad(what: String) -> SessionError {
    SessionError::Snapshot(what)
}

fn check_finite(field: &str, v: &[f64]) -> Result<(), SessionError> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(bad(format!(
            "{field}[{i}]: {} is not a finite number",
            v[i]
        ))),
        None => Ok(()),
    }
}

impl JobSession {
    /// The session's whole state. Refused (nothing changes) for a session whose
    /// predictors came from [`JobSession::with_predictors`], or whose controller or
    /// predictors cannot export their state.
    pub fn snapshot(&self) -> Result<SessionSnapshot, SessionError> {
        let Predictors::Registry(factory) = &self.make_predictor else {
            return Err(bad(
                "predictors: made by a caller's factory (with_predictors), not the registry; \
                 they cannot be restored"
                    .into(),
            ));
        };
        let mut members = Vec::with_capacity(self.members.len());
        for (i, m) in self.members.iter().enumerate() {
            let predictor = m.predictor.save().ok_or_else(|| {
                bad(format!(
                    "members[{i}].predictor: `{}` cannot export its state",
                    m.predictor.name()
                ))
            })?;
            members.push(MemberSnapshot {
                key: m.key,
                bounds: m.bounds,
                predictor,
                speed: m.speed,
                compute_s: m.compute_s,
                next_signals: m.next_signals,
            });
        }
        let controller = match (&self.controller, self.membership_changed) {
            (Some(c), false) => Some(c.save().ok_or_else(|| {
                bad(format!(
                    "controller: `{}` cannot export its state",
                    c.name()
                ))
            })?),
            _ => None,
        };
        Ok(SessionSnapshot {
            config: self.cfg.clone(),
            members,
            pool: factory.save_pool(),
            controller,
            variant: self.variant.to_string(),
            batches: self.batches.clone(),
            predicted: self.predicted.clone(),
            compute_s: self.compute_s.clone(),
            membership_changed: self.membership_changed,
        })
    }

    /// The session `snap` was taken of, checked whole: names, members in strictly
    /// increasing key order with sane bounds, every predictor's and the controller's
    /// state (kind, lengths, finiteness), the batches against the members' problem.
    /// The error names the field.
    pub fn restore(snap: SessionSnapshot) -> Result<JobSession, SessionError> {
        let mut s = JobSession::new(snap.config)?;
        let Predictors::Registry(factory) = &s.make_predictor else {
            unreachable!("JobSession::new uses the registry")
        };
        restore_pool(factory, snap.pool.as_ref())?;
        for (i, m) in snap.members.iter().enumerate() {
            s.members.push(restore_member(factory, i, m)?);
            if i > 0 && snap.members[i - 1].key >= m.key {
                return Err(bad(format!(
                    "members[{i}].key: {} is not above the previous key {}",
                    m.key.0,
                    snap.members[i - 1].key.0
                )));
            }
        }
        check_finite("predicted", &snap.predicted)?;
        check_finite("compute_s", &snap.compute_s)?;
        s.membership_changed = snap.membership_changed;
        s.variant = static_variant(&snap.variant)?;
        if !snap.membership_changed {
            let n = s.members.len();
            let problem = s.problem().map_err(|e| bad(format!("members: {e}")))?;
            let controller = snap
                .controller
                .ok_or_else(|| bad("controller: missing while the members are settled".into()))?
                .restore(&problem)
                .map_err(|e| bad(format!("controller.{e}")))?;
            if controller.name() != s.variant {
                return Err(bad(format!(
                    "variant: `{}` but the controller is `{}`",
                    s.variant,
                    controller.name()
                )));
            }
            let fits = snap.batches.len() == n
                && snap.batches.iter().sum::<u64>() == problem.global_batch()
                && (snap.batches.iter().zip(problem.bounds()))
                    .all(|(b, r)| (r.min..=r.max).contains(b));
            if !fits {
                return Err(bad(format!(
                    "batches: expected {n} within the members' bounds summing to {}",
                    problem.global_batch()
                )));
            }
            if snap.predicted.len() != n || snap.compute_s.len() != n {
                return Err(bad(format!(
                    "predicted/compute_s: expected {n} values each"
                )));
            }
            s.controller = Some(controller);
        } else if snap.controller.is_some() {
            return Err(bad(
                "controller: present while a membership change is pending".into(),
            ));
        }
        s.batches = snap.batches;
        s.predicted = snap.predicted;
        s.compute_s = snap.compute_s;
        Ok(s)
    }
}

fn restore_pool(factory: &PredictorFactory, pool: Option<&RlsState>) -> Result<(), SessionError> {
    match (factory.save_pool().is_some(), pool) {
        (true, Some(p)) => factory
            .restore_pool(p)
            .map_err(|e| bad(format!("pool: {e}"))),
        (false, None) => Ok(()),
        (true, None) => Err(bad("pool: missing for `narx` predictors".into())),
        (false, Some(_)) => Err(bad(format!(
            "pool: given for `{}` predictors, which have none",
            factory.name()
        ))),
    }
}

fn restore_member(
    factory: &PredictorFactory,
    i: usize,
    m: &MemberSnapshot,
) -> Result<Member, SessionError> {
    let field = format!("members[{i}]");
    if let Some(b) = m.bounds {
        if b.min > b.max {
            return Err(bad(format!(
                "{field}.bounds: min {} exceeds max {}",
                b.min, b.max
            )));
        }
    }
    let sig = [m.next_signals.cpu_load, m.next_signals.mem_load];
    check_finite(&format!("{field}.next_signals"), &sig)?;
    if !(m.speed.is_finite() && m.speed >= 0.0 && m.compute_s.is_finite() && m.compute_s >= 0.0) {
        return Err(bad(format!(
            "{field}: speed {} and compute_s {} must be finite numbers ≥ 0",
            m.speed, m.compute_s
        )));
    }
    let predictor = factory
        .restore(m.key.0, &m.predictor)
        .map_err(|e| bad(format!("{field}.predictor.{e}")))?;
    Ok(Member {
        key: m.key,
        bounds: m.bounds,
        predictor,
        speed: m.speed,
        compute_s: m.compute_s,
        next_signals: m.next_signals,
    })
}

/// The registry's spelling of a controller variant ("" before the first decision).
fn static_variant(v: &str) -> Result<&'static str, SessionError> {
    if v.is_empty() {
        return Ok("");
    }
    CONTROLLERS
        .iter()
        .find(|c| **c == v)
        .copied()
        .ok_or_else(|| bad(format!("variant: unknown controller `{v}`")))
}
