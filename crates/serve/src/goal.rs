//! Deadline jobs planned from a profile (docs/serve.md, "Deadlines from a profile"):
//! a spec's `app` names a measured profile — one of the six embedded Pollux
//! applications, or a folder in the Pollux layout on the service's machine — and
//! `goal` what the job must achieve by its deadline: `accuracy` (Courier: `epochs`
//! epochs at the batch with the best predicted metric), `time` or `cost` (the
//! configuration search: reach `target_metric` at the batch that gets there soonest, or
//! in the fewest device-seconds). Admission then
//! plans the job with the profile's predicted speed at each size, trying the goal's
//! options best first ([`pacer_control::job::goal`]) and admitting the first whose
//! minimum share fits, instead of `expected_runtime` with linear speed-up.
//!
//! Fitting a profile's models takes 0.1–0.5 s, so they are fitted once per service and
//! kept ([`GoalModels`]): the embedded ones in the background at start, a folder on its
//! first submission (outside the service's lock), again when its `placements.csv`
//! changes. The profiles themselves come from the program that starts the service
//! ([`ProfileSource`]).

use crate::error::ApiError;
use crate::spec::JobSpec;
use pacer_control::job::goal::{Goal, GoalModel, GoalOption};
use pacer_model::profile::AppProfile;
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{rows_from_placements, rows_from_scalability};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Where the service reads profiles from: the embedded ones and folders in the Pollux
/// layout. The simulator owns both (`pacer_sim::embedded_profiles`,
/// `pacer_sim::load_app_dir`) and sits beside the service, not below it, so the program
/// that starts the service passes them in (`pacer serve` does; without a source a spec
/// with `app` is refused).
pub struct ProfileSource {
    /// The embedded profiles.
    pub embedded: Vec<AppProfile>,
    /// Reads a folder in the Pollux layout.
    pub folder: fn(&Path) -> Result<AppProfile, String>,
}

impl std::fmt::Debug for ProfileSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileSource")
            .field("embedded", &self.names())
            .finish_non_exhaustive()
    }
}

impl ProfileSource {
    /// The embedded profiles' names, for messages.
    pub fn names(&self) -> String {
        let n: Vec<&str> = self.embedded.iter().map(|p| p.name.as_str()).collect();
        n.join(", ")
    }
}

/// Most profiles kept at once (a folder's submissions past it refit).
const MAX_KEPT: usize = 64;

/// What admission chose for a job planned from a profile (its record's
/// `deadline.profile`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalPlan {
    /// The spec's `app`.
    pub app: String,
    pub goal: Goal,
    /// The option admitted: its global batch, samples, predicted metric and levels
    /// (`(devices, samples/s)`).
    pub option: GoalOption,
    /// Options tried before it (better for the goal, declined).
    pub declined_better: u32,
}

impl GoalPlan {
    /// Samples/s per device at `devices` (the level at or below it; 0 below every level).
    pub fn per_device_rate(&self, devices: u32) -> f64 {
        self.option
            .levels
            .iter()
            .rfind(|l| l.0 <= devices.max(1))
            .map_or(0.0, |l| l.1 / l.0 as f64)
    }

    /// One line for the admission answer and the job's events.
    pub fn describe(&self) -> String {
        let o = &self.option;
        let what = match self.goal {
            Goal::Accuracy { epochs } => format!(
                "{epochs:.4} epochs, predicted metric {:.4} (Courier)",
                o.metric
            ),
            Goal::Time { target } => {
                format!("to metric {target:.4} (configuration search, least time)")
            }
            Goal::Cost { target } => {
                format!("to metric {target:.4} (configuration search, fewest device-hours)")
            }
        };
        let tried = match self.declined_better {
            0 => String::new(),
            n => format!("; {n} better option(s) did not fit by the deadline"),
        };
        format!(
            "profile {}: global batch {}, {:.0} samples, {what}; speed per size from the \
             profile's predictions with their margins{tried}",
            self.app, o.global_batch, o.samples
        )
    }
}

/// Fitted profiles, shared by the service's requests.
#[derive(Clone, Default)]
pub struct GoalModels {
    source: Option<Arc<ProfileSource>>,
    kept: Arc<Mutex<HashMap<String, Kept>>>,
}

#[derive(Clone)]
struct Kept {
    /// A folder's `placements.csv` modification time (`None`: embedded).
    stamp: Option<SystemTime>,
    model: Arc<GoalModel>,
}

impl GoalModels {
    /// Profiles read from `source` (`None`: none; a spec with `app` is refused).
    pub fn new(source: Option<Arc<ProfileSource>>) -> Self {
        GoalModels {
            source,
            kept: Arc::default(),
        }
    }

    /// The fitted profile `app` names (fitting it unless kept); a 400 naming `app`
    /// when it names none or its files do not fit.
    pub fn get(&self, app: &str) -> Result<Arc<GoalModel>, ApiError> {
        let Some(source) = &self.source else {
            return Err(ApiError::bad(
                "app",
                "this service reads no profiles (it was not started by `pacer serve`); \
                 submit the job with `expected_runtime` instead"
                    .into(),
            ));
        };
        let embedded = source.embedded.iter().find(|p| p.name == app);
        let stamp = match embedded {
            Some(_) => None,
            None => Some(folder_stamp(app, source)?),
        };
        if let Some(k) = self.lock().get(app).filter(|k| k.stamp == stamp) {
            return Ok(k.model.clone());
        }
        let loaded;
        let profile = match embedded {
            Some(p) => p,
            None => {
                loaded = (source.folder)(Path::new(app))
                    .map_err(|e| ApiError::bad("app", format!("{app}: {e}")))?;
                &loaded
            }
        };
        let model =
            Arc::new(fit(profile).map_err(|e| ApiError::bad("app", format!("{app}: {e}")))?);
        let mut kept = self.lock();
        if kept.len() >= MAX_KEPT {
            kept.retain(|_, k| k.stamp.is_none());
        }
        kept.insert(
            app.to_string(),
            Kept {
                stamp,
                model: model.clone(),
            },
        );
        Ok(model)
    }

    /// Fits every embedded profile (at start, in the background, so that the first
    /// submission naming one is answered without fitting).
    pub fn prewarm(&self) {
        let names: Vec<String> = self
            .source
            .iter()
            .flat_map(|s| s.embedded.iter().map(|p| p.name.clone()))
            .collect();
        for name in names {
            if let Err(e) = self.get(&name) {
                tracing::warn!("profile {name}: {}", e.message);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Kept>> {
        // A panic while holding it leaves a map that is still whole.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A folder's `placements.csv` modification time; a 400 naming `app` when `app` is
/// not an embedded name or an absolute path to a folder that has one.
fn folder_stamp(app: &str, source: &ProfileSource) -> Result<SystemTime, ApiError> {
    let p = Path::new(app);
    let not = |why: String| {
        ApiError::bad(
            "app",
            format!(
                "`{app}` is neither an embedded profile ({}) nor {why}",
                source.names()
            ),
        )
    };
    if !p.is_absolute() {
        return Err(not(
            "an absolute path to a folder in the Pollux layout".into()
        ));
    }
    std::fs::metadata(p.join("placements.csv"))
        .and_then(|m| m.modified())
        .map_err(|e| not(format!("a folder with a readable placements.csv ({e})")))
}

/// The models of `profile` (seed 0 for the margins' split, as `pacer recommend`).
fn fit(profile: &AppProfile) -> anyhow::Result<GoalModel> {
    let mut rows = rows_from_placements(&profile.placements, "placements.csv");
    rows.extend(rows_from_scalability(
        &profile.scalability,
        "scalability.csv",
    ));
    let conv = ConvergenceModel::fit(&profile.validation)?;
    Ok(GoalModel::fit(&rows, conv, 0)?)
}

/// The spec's goal on `model`: `goal` (default `accuracy`) with `epochs` (default:
/// every epoch every measured run covers) or, for `time` and `cost`, `target_metric`
/// (default: the metric every measured batch reaches).
pub fn goal_of(spec: &JobSpec, model: &GoalModel) -> Goal {
    let target = || spec.target_metric.unwrap_or_else(|| model.default_target());
    match spec.goal.as_deref() {
        Some("time") => Goal::Time { target: target() },
        Some("cost") => Goal::Cost { target: target() },
        _ => Goal::Accuracy {
            epochs: spec
                .epochs
                .unwrap_or_else(|| model.conv.max_common_epochs()),
        },
    }
}

/// `app`, `goal`, `epochs` and `target_metric` as text (the profile is looked up on
/// submission).
pub fn validate(spec: &JobSpec) -> Result<(), ApiError> {
    let bad = |f: &str, m: &str| Err(ApiError::bad(f, m.into()));
    let Some(app) = &spec.app else {
        for (f, set) in [
            ("goal", spec.goal.is_some()),
            ("epochs", spec.epochs.is_some()),
            ("target_metric", spec.target_metric.is_some()),
        ] {
            if set {
                return bad(f, "only with `app` (the profile the goal is read from)");
            }
        }
        return Ok(());
    };
    if app.is_empty() || app.len() > 4096 || app.chars().any(char::is_control) {
        return bad(
            "app",
            "expected a profile name or a folder path of 1 to 4096 printable characters",
        );
    }
    if spec.deadline.is_none() {
        return bad(
            "app",
            "only with `deadline`: the profile is what admission plans a deadline job with",
        );
    }
    if spec.expected_runtime.is_some() {
        return bad(
            "expected_runtime",
            "give `expected_runtime` or `app`, not both: with `app` admission plans from \
             the profile's predictions",
        );
    }
    let time = match spec.goal.as_deref() {
        None | Some("accuracy") => false,
        Some("time" | "cost") => true,
        Some(_) => {
            return bad(
                "goal",
                "expected `accuracy` (Courier), `time` (least time) or `cost` (fewest \
                 device-hours)",
            )
        }
    };
    if let Some(e) = spec.epochs {
        if time {
            return bad(
                "epochs",
                "only with goal `accuracy` (`time` and `cost` train to `target_metric`)",
            );
        }
        if !(e.is_finite() && e > 0.0 && e <= 1e6) {
            return bad(
                "epochs",
                "expected a number of epochs above 0 and at most 1e6",
            );
        }
    }
    if let Some(t) = spec.target_metric {
        if !time {
            return bad(
                "target_metric",
                "only with goal `time` or `cost` (`accuracy` trains `epochs`)",
            );
        }
        if !t.is_finite() {
            return bad("target_metric", "expected a finite number");
        }
    }
    Ok(())
}
