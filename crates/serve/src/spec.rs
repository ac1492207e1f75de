//! What users and jobs send: the job spec (TOML or JSON), the report a running
//! job posts, and the cluster spec. Every error names the field it is about.

use crate::error::ApiError;
use crate::launcher::Launcher;
use pacer_model::ClusterSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest global batch a spec or report may name.
pub use pacer_model::report::MAX_BATCH;
/// Largest request a user may ask for, per job (devices, replicas).
pub use pacer_model::report::MAX_REPLICAS;

/// A job as submitted (`pacer submit job.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Free-form name shown in listings (1–128 printable characters).
    pub name: String,
    /// The program to run, as an argument vector (exactly one of `command`, `trainer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The built-in trainer (`pacer train`) instead of a command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<TrainerSpec>,
    /// Devices asked for.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Fewest devices the job runs on (default: `replicas`, or 1 when adaptive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<u32>,
    /// Most devices the job can use (default: `replicas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<u32>,
    /// Global batch the user asked for (passed to the trainer; informative for commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<u64>,
    /// May be resized by checkpoint-restart between `min_replicas` and `max_replicas`.
    #[serde(default)]
    pub adaptive: bool,
    /// Device types the job accepts (empty: any type of the cluster).
    #[serde(default)]
    pub device_types: Vec<String>,
    /// May run on devices of several types at once (its ranks then get per-rank batches
    /// from the job's session, so the slower type does not hold back the step;
    /// docs/mixed-types.md). Default: one type per run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub mixed_types: bool,
    /// Who submitted it (informative).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Higher runs first among jobs that arrived at the same time (−1000…1000).
    #[serde(default)]
    pub priority: i32,
    /// Samples the job will process in total, when known (policies then know the work
    /// left; without it a job is assumed to need as much again as it has done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_samples: Option<u64>,
    /// Working directory of the job's processes: an absolute path on the service's
    /// machine (Slurm: on every node). `pacer submit` fills it in as sbatch does: the
    /// submitter's directory when absent, a relative one resolved against it. Absent in
    /// a request sent to the API directly: the service's own working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Environment variables added to the job's (names `[A-Za-z_][A-Za-z0-9_]*`); the
    /// service's own job variables ([`reserved_env`]) cannot be set here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Finish by this time: an RFC 3339 time (`2026-11-27T03:00:00Z`) or a duration
    /// from submission (`2h30m`, `90m`, `3600s`, `3600`). A deadline job is admitted
    /// only if its minimum share can be guaranteed beside the deadline jobs already
    /// admitted ([`crate::deadline`]); it needs `expected_runtime` and a service
    /// running a deadline policy. Absent: best effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// How long the job runs on `replicas` devices (a duration: `45m`, `3600`), what
    /// admission plans a deadline job with until it has reported (required with
    /// `deadline`; with `budget_device_hours`, what its expected cost is checked by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_runtime: Option<String>,
    /// A deadline job planned from a measured profile instead of `expected_runtime`
    /// ([`crate::goal`]): an embedded one (`bert`, `cifar10`, `deepspeech2`,
    /// `imagenet`, `ncf`, `yolov3`) or an absolute path to a folder in the Pollux
    /// layout on the service's machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// With `app`: `"accuracy"` (default; Courier: `epochs` at the batch with the best
    /// predicted metric that meets the deadline), `"time"` (reach `target_metric` at
    /// the batch that gets there soonest) or `"cost"` (in the fewest device-hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// With goal `accuracy`: epochs to train (default: what every measured run covers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<f64>,
    /// With goal `time` or `cost`: the metric to reach (default: what every measured
    /// batch reaches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_metric: Option<f64>,
    /// A cost budget in device-hours (devices held × hours, restarts included): the
    /// job is stopped once it has held that much ([`crate::core`]). With
    /// `expected_runtime`, a job whose expected cost (`expected_runtime` × `replicas`)
    /// is above it is declined on submission. Absent: no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_device_hours: Option<f64>,
    /// A cost budget in US dollars, spent at the service's per-type prices (`pacer
    /// serve --price TYPE=USD_PER_DEVICE_H`) while the job holds devices, restarts
    /// included: the job is stopped once it has spent that much. With
    /// `expected_runtime`, a job whose expected cost on the cheapest type is above it is
    /// declined on submission. Needs a service with prices. Absent: no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// Where the job may run among the device types it accepts: `"cheapest"` (the
    /// type(s) where its work costs the fewest dollars at the service's prices, from
    /// its measured speed on each type; [`crate::budget::cost_types`]) or `"any"` (the
    /// policy's choice). Needs a service with prices. Absent: `"cheapest"` for a job
    /// with `budget_usd`, else `"any"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// How `command` is started: `"none"` (default) or `"torchrun"`
    /// ([`crate::launcher`]: nproc, nodes, node rank and master from the allocation).
    #[serde(default, skip_serializing_if = "Launcher::is_none")]
    pub launcher: Launcher,
    /// With `launcher = "torchrun"`: run `PYTHON -m torch.distributed.run` instead of
    /// the `torchrun` on the job's PATH (e.g. a venv's python).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
}

/// Where a job may be placed among the types it accepts ([`JobSpec::placement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Wherever the policy places it.
    Any,
    /// On the type(s) where its work costs least at the service's prices.
    Cheapest,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How long a submission waits for the file system to say whether its `cwd` exists.
pub const CWD_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most entries of a spec's `env`.
pub const MAX_ENV: usize = 256;

/// The largest `budget_device_hours` (a million devices for a century is less).
pub const MAX_BUDGET_DEVICE_HOURS: f64 = 1e12;
/// The largest `budget_usd`.
pub const MAX_BUDGET_USD: f64 = 1e12;
/// Largest value of an `env` entry or `cwd`, bytes.
pub const MAX_ENV_VALUE: usize = 32 * 1024;

/// Whether `name` is one of the variables the service sets for every job (`PACER_*`,
/// the rendezvous and the device list), which a spec's `env` may not override.
pub fn reserved_env(name: &str) -> bool {
    name.starts_with("PACER_")
        || matches!(
            name,
            "WORLD_SIZE" | "MASTER_ADDR" | "MASTER_PORT" | "CUDA_VISIBLE_DEVICES"
        )
}

fn one() -> u32 {
    1
}

/// The built-in trainer: `pacer train --dataset D --model M --workers <allocated>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainerSpec {
    /// `--dataset` (e.g. `tiny`).
    pub dataset: String,
    /// `--model` (default the trainer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Further `pacer train` arguments, e.g. `["--speeds", "1,0.5"]`.
    #[serde(default)]
    pub args: Vec<String>,
}

impl JobSpec {
    /// Parses a spec from TOML; an error names `origin:line` and the key.
    pub fn from_toml(text: &str, origin: &str) -> Result<JobSpec, ApiError> {
        let spec: JobSpec = toml::from_str(text).map_err(|e| toml_error(&e, text, origin))?;
        Ok(spec)
    }

    /// Parses a spec from JSON; an error names the field path.
    pub fn from_json(bytes: &[u8]) -> Result<JobSpec, ApiError> {
        parse_json(bytes)
    }

    /// Whether the job is placed on its cheapest type(s): `placement`, else whether it
    /// has a dollar budget.
    /// A deadline job never is: its admitted share may need any type it accepts.
    pub fn placed_by_cost(&self) -> bool {
        self.deadline.is_none()
            && match self.placement {
                Some(p) => p == Placement::Cheapest,
                None => self.budget_usd.is_some(),
            }
    }

    pub fn min(&self) -> u32 {
        self.min_replicas
            .unwrap_or(if self.adaptive { 1 } else { self.replicas })
    }

    pub fn max(&self) -> u32 {
        self.max_replicas.unwrap_or(self.replicas)
    }

    /// Checks every field against the cluster: sizes, names, device types.
    pub fn validate(&self, cluster: &ClusterSpec) -> Result<(), ApiError> {
        let bad = |field: &str, why: String| Err(ApiError::bad(field, why));
        if self.name.is_empty() || self.name.chars().count() > 128 {
            return bad("name", "must be 1 to 128 characters".into());
        }
        if self.name.chars().any(char::is_control) {
            return bad("name", "must not contain control characters".into());
        }
        match (&self.command, &self.trainer) {
            (None, None) => {
                return bad(
                    "command",
                    "one of `command` or `[trainer]` is required".into(),
                )
            }
            (Some(_), Some(_)) => {
                return bad(
                    "trainer",
                    "give either `command` or `[trainer]`, not both".into(),
                )
            }
            (Some(argv), None) => check_argv("command", argv)?,
            (None, Some(t)) => {
                if t.dataset.is_empty() || t.dataset.len() > 4096 || t.dataset.contains('\0') {
                    return bad(
                        "trainer.dataset",
                        "must be 1 to 4096 bytes without NUL".into(),
                    );
                }
                if let Some(m) = &t.model {
                    check_argv("trainer.model", std::slice::from_ref(m))?;
                }
                if !t.args.is_empty() {
                    check_argv("trainer.args", &t.args)?;
                }
            }
        }
        for (field, v) in [
            ("replicas", Some(self.replicas)),
            ("min_replicas", self.min_replicas),
            ("max_replicas", self.max_replicas),
        ] {
            if let Some(v) = v {
                if v == 0 || v > MAX_REPLICAS {
                    return bad(field, format!("{v} is out of range 1..={MAX_REPLICAS}"));
                }
            }
        }
        if !(self.min() <= self.replicas && self.replicas <= self.max()) {
            return bad(
                "replicas",
                format!(
                    "need min_replicas ≤ replicas ≤ max_replicas, got {} ≤ {} ≤ {}",
                    self.min(),
                    self.replicas,
                    self.max()
                ),
            );
        }
        if let Some(b) = self.global_batch {
            if b == 0 || b > MAX_BATCH {
                return bad(
                    "global_batch",
                    format!("{b} is out of range 1..={MAX_BATCH}"),
                );
            }
        }
        if !(-1000..=1000).contains(&self.priority) {
            return bad(
                "priority",
                format!("{} is out of range -1000..=1000", self.priority),
            );
        }
        if let Some(u) = &self.user {
            if u.is_empty() || u.len() > 128 || u.chars().any(char::is_control) {
                return bad("user", "must be 1 to 128 printable characters".into());
            }
        }
        if self.device_types.len() > 64 {
            return bad("device_types", "at most 64 entries".into());
        }
        for t in &self.device_types {
            if cluster.type_id(t).is_none() {
                return bad(
                    "device_types",
                    format!(
                        "`{t}` is not a device type of this cluster (it has: {})",
                        cluster.device_types.join(", ")
                    ),
                );
            }
        }
        self.validate_cwd_env()?;
        self.validate_goal()?;
        if self.launcher == Launcher::Torchrun && self.command.is_none() {
            return bad(
                "launcher",
                "`launcher = \"torchrun\"` runs a `command` (the script and its arguments \
                 as after torchrun's options), not a `[trainer]`"
                    .into(),
            );
        }
        if let Some(p) = &self.python {
            if self.launcher != Launcher::Torchrun {
                return bad(
                    "python",
                    "only with `launcher = \"torchrun\"` (it runs PYTHON -m torch.distributed.run)"
                        .into(),
                );
            }
            check_argv("python", std::slice::from_ref(p))?;
        }
        let usable = self.usable_devices(cluster);
        if self.min() > usable {
            return bad(
                "min_replicas",
                format!(
                    "the job needs at least {} devices but the cluster has {usable} of its types",
                    self.min()
                ),
            );
        }
        let per_type = self.devices_per_type(cluster);
        let types: Vec<&str> = per_type
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(t, _)| t.as_str())
            .collect();
        if self.mixed_types && types.len() < 2 {
            return bad(
                "mixed_types",
                format!(
                    "the job can use one device type of this cluster ({}), so it cannot mix types; \
                     remove `mixed_types` to run it on that type",
                    types.first().copied().unwrap_or("none")
                ),
            );
        }
        let (largest_type, largest) = per_type
            .iter()
            .max_by_key(|(_, n)| *n)
            .map_or(("none", 0), |(t, n)| (t.as_str(), *n));
        if !self.mixed_types && self.min() > largest {
            return bad(
                "min_replicas",
                format!(
                    "the job needs at least {} devices of one type but the largest type it \
                     accepts has {largest} (`{largest_type}`); set `mixed_types = true` to \
                     run it across types ({usable} devices)",
                    self.min()
                ),
            );
        }
        Ok(())
    }

    /// The goal fields (`deadline`, `expected_runtime`, the budgets, `app`, `goal`,
    /// `epochs`, `target_metric`), which need no cluster: `pacer submit` checks them
    /// before it sends the spec, because JSON has no NaN or infinity (serde_json writes
    /// `null`), so a non-finite number from a TOML file or a flag would otherwise arrive
    /// as no value at all.
    pub fn validate_goal(&self) -> Result<(), ApiError> {
        crate::goal::validate(self)?;
        self.validate_deadline()
    }

    /// `deadline` and `expected_runtime` as text (the deadline's time is resolved
    /// against the submission by the service: [`crate::deadline::resolve_deadline`]).
    fn validate_deadline(&self) -> Result<(), ApiError> {
        use crate::deadline::{check_deadline_form, parse_duration};
        if let Some(b) = self.budget_device_hours {
            if !(b.is_finite() && b > 0.0 && b <= MAX_BUDGET_DEVICE_HOURS) {
                return Err(ApiError::bad(
                    "budget_device_hours",
                    format!(
                        "{b}: expected device-hours, a number above 0 and at most \
                         {MAX_BUDGET_DEVICE_HOURS}"
                    ),
                ));
            }
        }
        if let Some(b) = self.budget_usd {
            if !(b.is_finite() && b > 0.0 && b <= MAX_BUDGET_USD) {
                return Err(ApiError::bad(
                    "budget_usd",
                    format!(
                        "{b}: expected US dollars, a number above 0 and at most {MAX_BUDGET_USD}"
                    ),
                ));
            }
        }
        let budgeted = self.budget_device_hours.is_some() || self.budget_usd.is_some();
        match (&self.deadline, &self.expected_runtime) {
            (None, None) => Ok(()),
            (None, Some(r)) if budgeted => {
                parse_duration(r).map_err(|e| ApiError::bad("expected_runtime", e))?;
                Ok(())
            }
            (None, Some(_)) => Err(ApiError::bad(
                "expected_runtime",
                "only with `deadline` (it is what admission plans a deadline job with), \
                 `budget_device_hours` or `budget_usd` (its expected cost is checked \
                 against the budget)"
                    .into(),
            )),
            (Some(d), None) if self.app.is_some() => {
                check_deadline_form(d).map_err(|e| ApiError::bad("deadline", e))
            }
            (Some(d), r) => {
                check_deadline_form(d).map_err(|e| ApiError::bad("deadline", e))?;
                let Some(r) = r else {
                    return Err(ApiError::bad(
                        "expected_runtime",
                        "a job with a `deadline` needs `expected_runtime`: how long it runs \
                         on `replicas` devices (e.g. `45m`), which admission plans with \
                         (or `app`: a profile to plan from)"
                            .into(),
                    ));
                };
                parse_duration(r).map_err(|e| ApiError::bad("expected_runtime", e))?;
                Ok(())
            }
        }
    }

    /// `expected_runtime` in seconds (`None`: absent or not a duration).
    pub fn expected_runtime_s(&self) -> Option<f64> {
        crate::deadline::parse_duration(self.expected_runtime.as_deref()?).ok()
    }

    pub fn devices_per_type(&self, cluster: &ClusterSpec) -> Vec<(String, u32)> {
        let mut out: Vec<(String, u32)> = cluster
            .device_types
            .iter()
            .map(|t| (t.clone(), 0))
            .collect();
        for n in &cluster.nodes {
            let t = &cluster.device_types[n.device_type.0 as usize];
            if self.accepts(t) {
                out[n.device_type.0 as usize].1 += n.gpus;
            }
        }
        out
    }

    /// `cwd` and `env` as text: sizes, names, reserved variables (nothing is looked up).
    fn validate_cwd_env(&self) -> Result<(), ApiError> {
        if let Some(d) = &self.cwd {
            if d.is_empty() || d.len() > MAX_ENV_VALUE || d.contains('\0') {
                return Err(ApiError::bad(
                    "cwd",
                    format!("must be 1 to {MAX_ENV_VALUE} bytes without NUL"),
                ));
            }
            if !d.starts_with('/') {
                return Err(ApiError::bad(
                    "cwd",
                    format!(
                        "`{}` is not an absolute path (`pacer submit` resolves a relative \
                         one against the submitter's directory; the API takes absolute paths)",
                        d.escape_debug()
                    ),
                ));
            }
        }
        if self.env.len() > MAX_ENV {
            return Err(ApiError::bad("env", format!("at most {MAX_ENV} entries")));
        }
        for (k, v) in &self.env {
            let field = format!("env.{}", k.escape_debug());
            let name_ok = k.len() <= 256
                && k.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !name_ok {
                return Err(ApiError::bad(
                    &field,
                    format!(
                        "`{}` is not a variable name ([A-Za-z_][A-Za-z0-9_]*, ≤ 256 bytes)",
                        k.escape_debug()
                    ),
                ));
            }
            if reserved_env(k) {
                return Err(ApiError::bad(
                    &field,
                    format!(
                        "`{k}` is set by the service for every job (PACER_*, WORLD_SIZE, \
                         MASTER_ADDR, MASTER_PORT, CUDA_VISIBLE_DEVICES) and cannot be overridden"
                    ),
                ));
            }
            if v.len() > MAX_ENV_VALUE || v.contains('\0') {
                return Err(ApiError::bad(
                    &field,
                    format!("the value must be ≤ {MAX_ENV_VALUE} bytes without NUL"),
                ));
            }
        }
        Ok(())
    }

    /// What only the service's machine can tell: `cwd` exists and is a directory. The
    /// service checks it at submission (a 400 naming `cwd`) and the executor again at
    /// launch.
    pub fn check_cwd_exists(&self) -> Result<(), ApiError> {
        let Some(d) = &self.cwd else { return Ok(()) };
        match std::fs::metadata(d) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(ApiError::bad(
                "cwd",
                format!("`{d}` is not a directory on the service's machine"),
            )),
            Err(e) => Err(ApiError::bad(
                "cwd",
                format!("`{d}` does not exist on the service's machine ({e})"),
            )),
        }
    }

    /// [`JobSpec::check_cwd_exists`] off the async threads and bounded in time, so a
    /// hung file system (a stale NFS mount) holds up this request only, never the
    /// service: no answer within [`CWD_CHECK_TIMEOUT`] is a 400 naming `cwd`.
    pub async fn check_cwd_exists_bounded(&self) -> Result<(), ApiError> {
        if self.cwd.is_none() {
            return Ok(());
        }
        // A relative or malformed cwd is refused as such, not looked up.
        self.validate_cwd_env()?;
        let spec = self.clone();
        let check = tokio::task::spawn_blocking(move || spec.check_cwd_exists());
        match tokio::time::timeout(CWD_CHECK_TIMEOUT, check).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(ApiError::internal(format!("checking cwd: {e}"))),
            Err(_) => Err(ApiError::bad(
                "cwd",
                format!(
                    "the file system did not answer within {CWD_CHECK_TIMEOUT:?} whether `{}` is a directory",
                    self.cwd.as_deref().unwrap_or("")
                ),
            )),
        }
    }

    /// What `pacer submit` does before sending a spec, as sbatch does: no `cwd` becomes
    /// `submit_dir` (the submitter's working directory), a relative one is resolved
    /// against it.
    pub fn resolve_cwd(&mut self, submit_dir: &std::path::Path) -> Result<(), ApiError> {
        let dir = match &self.cwd {
            None => submit_dir.to_path_buf(),
            Some(d) if d.starts_with('/') => return Ok(()),
            Some(d) => submit_dir.join(d),
        };
        let text = dir
            .to_str()
            .ok_or_else(|| ApiError::bad("cwd", format!("`{}` is not UTF-8", dir.display())))?;
        self.cwd = Some(text.to_string());
        Ok(())
    }

    /// Whether the job may run on device type `name`.
    pub fn accepts(&self, name: &str) -> bool {
        self.device_types.is_empty()
            || self
                .device_types
                .iter()
                .any(|t| t.eq_ignore_ascii_case(name))
    }

    /// Devices of the cluster the job may use.
    pub fn usable_devices(&self, cluster: &ClusterSpec) -> u32 {
        cluster
            .nodes
            .iter()
            .filter(|n| self.accepts(&cluster.device_types[n.device_type.0 as usize]))
            .map(|n| n.gpus)
            .sum()
    }

    /// The argument vector to run with `replicas` devices (`pacer_bin` runs the trainer).
    pub fn argv(&self, pacer_bin: &str, replicas: u32) -> Vec<String> {
        if let Some(c) = &self.command {
            return match self.launcher {
                Launcher::None => c.clone(),
                Launcher::Torchrun => crate::launcher::torchrun_argv(self.python.as_deref(), c),
            };
        }
        let t = self
            .trainer
            .as_ref()
            .expect("validated: command or trainer");
        let mut v = vec![
            pacer_bin.to_string(),
            "train".into(),
            "--dataset".into(),
            t.dataset.clone(),
            "--workers".into(),
            replicas.to_string(),
        ];
        if let Some(m) = &t.model {
            v.extend(["--model".into(), m.clone()]);
        }
        if let Some(b) = self.global_batch {
            v.extend(["--global-batch".into(), b.to_string()]);
        }
        v.extend(t.args.iter().cloned());
        v
    }
}

fn check_argv(field: &str, argv: &[String]) -> Result<(), ApiError> {
    if argv.is_empty() || argv.len() > 256 {
        return Err(ApiError::bad(field, "must have 1 to 256 entries".into()));
    }
    if argv[0].is_empty() {
        return Err(ApiError::bad(field, "the program name is empty".into()));
    }
    for a in argv {
        if a.len() > 4096 || a.contains('\0') {
            return Err(ApiError::bad(
                field,
                "entries must be ≤ 4096 bytes without NUL".into(),
            ));
        }
    }
    Ok(())
}

/// What a running job posts to `/v1/jobs/{id}/reports` (the contract in docs/serve.md):
/// the one report type the trainers send ([`pacer_model::report`]).
pub use pacer_model::report::JobReport as Report;

/// A report from a request body: parsed, then checked; errors name the field.
pub fn report_from_json(bytes: &[u8]) -> Result<Report, ApiError> {
    let r: Report = parse_json(bytes)?;
    r.validate()
        .map_err(|e| ApiError::bad(e.field, e.message))?;
    Ok(r)
}

/// Parses JSON into `T`, naming the field path of the first error.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner().to_string();
        let field =
            unknown_field(&inner).unwrap_or(if path.is_empty() || path == "." || path == "?" {
                "body".into()
            } else {
                path
            });
        ApiError::bad(&field, format!("malformed JSON: {inner}"))
    })
}

/// The key an "unknown field `k`" message names.
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.split("unknown field `").nth(1)?;
    // An empty key (`{"": 1}`) names nothing: the caller falls back to the path.
    Some(rest.split('`').next()?.to_string()).filter(|k| !k.is_empty())
}

/// A TOML error as `origin:line: message`, with the key it is about when known.
fn toml_error(e: &toml::de::Error, text: &str, origin: &str) -> ApiError {
    let message = e.message().trim_end().to_string();
    let (line, key) = match e.span() {
        Some(s) => {
            let at = s.start.min(text.len());
            let line_no = text.as_bytes()[..at]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            let line_text = text.lines().nth(line_no - 1).unwrap_or("");
            let key = line_text
                .split_once('=')
                .map(|(k, _)| k.trim().trim_matches('"').to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('['));
            (Some(line_no), key)
        }
        None => (None, None),
    };
    let field = unknown_field(&message)
        .or(key)
        .unwrap_or_else(|| "body".into());
    let place = match line {
        Some(l) => format!("{origin}:{l}"),
        None => origin.to_string(),
    };
    ApiError::bad(&field, format!("{place}: {message}"))
}

/// A cluster from `--cluster`: `COUNTxSLOTS:TYPE[,…]` or a TOML file (`[[nodes]]`).
pub fn load_cluster(arg: &str) -> anyhow::Result<ClusterSpec> {
    let c = if arg.ends_with(".toml") {
        use std::io::Read;
        let f = std::fs::File::open(arg)
            .map_err(|e| anyhow::anyhow!("--cluster {arg}: cannot read: {e}"))?;
        let mut text = String::new();
        f.take(MAX_CLUSTER_FILE + 1)
            .read_to_string(&mut text)
            .map_err(|e| anyhow::anyhow!("--cluster {arg}: cannot read: {e}"))?;
        anyhow::ensure!(
            text.len() as u64 <= MAX_CLUSTER_FILE,
            "--cluster {arg}: larger than {MAX_CLUSTER_FILE} bytes; a cluster file describes node groups (`[[nodes]] count, gpus, type`)"
        );
        pacer_model::cluster_file::parse_cluster_toml(&text, arg)?
    } else {
        ClusterSpec::parse(arg, "--cluster")?
    };
    check_cluster_size(&c, &format!("--cluster {arg}"))?;
    Ok(c)
}

/// Largest cluster file `pacer serve` reads, bytes.
pub const MAX_CLUSTER_FILE: u64 = 1 << 20;
/// Most devices (slots) a service manages: it keeps state per device and rebuilds it
/// every round.
pub const MAX_DEVICES: u64 = 1 << 20;
/// Most nodes a service manages.
pub const MAX_NODES: usize = 100_000;

/// Refuses a cluster larger than a service manages ([`MAX_NODES`], [`MAX_DEVICES`]),
/// before any per-device state is built.
pub fn check_cluster_size(c: &ClusterSpec, origin: &str) -> anyhow::Result<()> {
    let devices: u64 = c.nodes.iter().map(|n| u64::from(n.gpus)).sum();
    anyhow::ensure!(
        c.nodes.len() <= MAX_NODES && devices <= MAX_DEVICES,
        "{origin}: {} nodes with {devices} devices in all; pacer serve manages at most {MAX_NODES} nodes and {MAX_DEVICES} devices",
        c.nodes.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterSpec {
        ClusterSpec::parse("2x2:cpu", "test").unwrap()
    }

    #[test]
    fn minimal_spec_parses_and_validates() {
        let s = JobSpec::from_toml(
            "name = \"a\"\ncommand = [\"sleep\", \"1\"]\nreplicas = 2\n",
            "j.toml",
        )
        .unwrap();
        s.validate(&cluster()).unwrap();
        assert_eq!((s.min(), s.max()), (2, 2));
        assert_eq!(s.argv("pacer", 2), vec!["sleep", "1"]);
    }

    #[test]
    fn mixed_types_is_answered_against_the_cluster() {
        let two = ClusterSpec::parse("1x2:t4,1x2:a100", "test").unwrap();
        let spec = |extra: &str| {
            JobSpec::from_toml(
                &format!("name = \"a\"\ncommand = [\"true\"]\nreplicas = 4\n{extra}"),
                "j.toml",
            )
            .unwrap()
        };
        // Four devices exist, but two of each type: one type cannot hold the job.
        let e = spec("").validate(&two).unwrap_err();
        assert_eq!(e.field, "min_replicas");
        assert!(
            e.message.contains("largest type it accepts has 2"),
            "{}",
            e.message
        );
        assert!(e.message.contains("mixed_types = true"), "{}", e.message);
        spec("mixed_types = true\n").validate(&two).unwrap();
        // Mixing on a cluster (or a type choice) that leaves one type: refused, saying why.
        let e = spec("mixed_types = true\n")
            .validate(&ClusterSpec::parse("2x2:t4", "test").unwrap())
            .unwrap_err();
        assert_eq!(e.field, "mixed_types");
        assert!(
            e.message.contains("one device type of this cluster (t4)"),
            "{}",
            e.message
        );
        let e = JobSpec::from_toml(
            "name = \"a\"\ncommand = [\"true\"]\nmixed_types = true\ndevice_types = [\"a100\"]\n",
            "j.toml",
        )
        .unwrap()
        .validate(&two)
        .unwrap_err();
        assert!(e.message.contains("(a100)"), "{}", e.message);
        // The default is unchanged on one type, and the flag round-trips.
        spec("")
            .validate(&ClusterSpec::parse("2x2:t4", "test").unwrap())
            .unwrap();
        let json = serde_json::to_string(&spec("mixed_types = true\n")).unwrap();
        assert!(json.contains("\"mixed_types\":true"), "{json}");
        assert!(!serde_json::to_string(&spec(""))
            .unwrap()
            .contains("mixed_types"));
    }

    /// Found by the `serve_job_json` fuzz target: an unknown empty key was a 400
    /// naming the field `` (nothing).
    #[test]
    fn an_empty_unknown_key_still_names_a_field() {
        for body in [&br#"{"": 1}"#[..], br#"{"step":5,"samples":0,"":1}"#] {
            let e = JobSpec::from_json(body).unwrap_err();
            assert!(!e.field.is_empty(), "{e:?}");
            let e = report_from_json(body).unwrap_err();
            assert!(!e.field.is_empty(), "{e:?}");
        }
        assert_eq!(JobSpec::from_json(br#"{"": 1}"#).unwrap_err().field, "body");
        let e = JobSpec::from_toml("name = \"a\"\n\"\" = 1\n", "j.toml").unwrap_err();
        assert!(!e.field.is_empty(), "{e:?}");
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = JobSpec::from_toml("name = \"a\"\ncommand = [\"x\"]\nreplicaz = 2\n", "j.toml")
            .unwrap_err();
        assert_eq!(e.field, "replicaz");
        assert!(e.message.starts_with("j.toml:3:"), "{}", e.message);
    }

    #[test]
    fn negative_and_absurd_numbers_are_named() {
        let e = JobSpec::from_toml("name = \"a\"\ncommand = [\"x\"]\nreplicas = -2\n", "j.toml")
            .unwrap_err();
        assert_eq!(e.field, "replicas");
        let s = JobSpec::from_toml(
            "name = \"a\"\ncommand = [\"x\"]\nreplicas = 4000\n",
            "j.toml",
        )
        .unwrap();
        assert_eq!(s.validate(&cluster()).unwrap_err().field, "min_replicas");
        let s = JobSpec::from_toml(
            "name = \"a\"\ncommand = [\"x\"]\ndevice_types = [\"t4\"]\n",
            "j",
        )
        .unwrap();
        assert_eq!(s.validate(&cluster()).unwrap_err().field, "device_types");
    }

    #[test]
    fn trainer_maps_to_pacer_train() {
        let s = JobSpec::from_toml(
            "name = \"t\"\nglobal_batch = 64\n[trainer]\ndataset = \"tiny\"\nargs = [\"--speeds\", \"1,0.5\"]\n",
            "j",
        )
        .unwrap();
        s.validate(&cluster()).unwrap();
        assert_eq!(
            s.argv("/bin/pacer", 2).join(" "),
            "/bin/pacer train --dataset tiny --workers 2 --global-batch 64 --speeds 1,0.5"
        );
    }

    #[test]
    fn cwd_and_env_are_checked_and_reserved_names_refused() {
        let spec = |extra: &str| {
            JobSpec::from_toml(&format!("name = \"a\"\ncommand = [\"x\"]\n{extra}"), "j").unwrap()
        };
        let s = spec("cwd = \"/tmp\"\nenv = { HF_HOME = \"/data/hf\", _X1 = \"\" }\n");
        s.validate(&cluster()).unwrap();
        s.check_cwd_exists().unwrap();
        assert_eq!(s.env["HF_HOME"], "/data/hf");
        for (key, field) in [
            ("PACER_JOB_ID", "env.PACER_JOB_ID"),
            ("PACER_ANYTHING", "env.PACER_ANYTHING"),
            ("WORLD_SIZE", "env.WORLD_SIZE"),
            ("MASTER_ADDR", "env.MASTER_ADDR"),
            ("MASTER_PORT", "env.MASTER_PORT"),
            ("CUDA_VISIBLE_DEVICES", "env.CUDA_VISIBLE_DEVICES"),
            ("\"1X\"", "env.1X"),
            ("\"A-B\"", "env.A-B"),
            ("\"A=B\"", "env.A=B"),
        ] {
            let e = spec(&format!("env = {{ {key} = \"v\" }}\n"))
                .validate(&cluster())
                .unwrap_err();
            assert_eq!(e.field, field, "{}", e.message);
        }
        let e = spec("env = { A = \"a\\u0000b\" }\n")
            .validate(&cluster())
            .unwrap_err();
        assert_eq!(e.field, "env.A");
        let e = spec("cwd = \"rel/dir\"\n")
            .validate(&cluster())
            .unwrap_err();
        assert_eq!(e.field, "cwd");
        assert!(e.message.contains("absolute"), "{}", e.message);
        // Existence is the service machine's to tell.
        let missing = spec("cwd = \"/nonexistent-pacer-dir/x\"\n");
        missing.validate(&cluster()).unwrap();
        let e = missing.check_cwd_exists().unwrap_err();
        assert_eq!(e.field, "cwd");
        assert!(e.message.contains("does not exist"), "{}", e.message);
        let e = spec("cwd = \"/proc/self/stat\"\n")
            .check_cwd_exists()
            .unwrap_err();
        assert!(e.message.contains("not a directory"), "{}", e.message);
    }

    #[test]
    fn submit_resolves_cwd_against_the_submitters_directory() {
        let here = std::path::Path::new("/home/ana/proj");
        let mut s = JobSpec::from_toml("name = \"a\"\ncommand = [\"x\"]\n", "j").unwrap();
        s.resolve_cwd(here).unwrap();
        assert_eq!(s.cwd.as_deref(), Some("/home/ana/proj"));
        s.cwd = Some("runs/1".into());
        s.resolve_cwd(here).unwrap();
        assert_eq!(s.cwd.as_deref(), Some("/home/ana/proj/runs/1"));
        s.cwd = Some("/scratch".into());
        s.resolve_cwd(here).unwrap();
        assert_eq!(s.cwd.as_deref(), Some("/scratch"));
        // The JSON a client sends parses back to the same spec.
        let back = JobSpec::from_json(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn torchrun_launcher_wraps_commands_only() {
        let s = JobSpec::from_toml(
            "name = \"d\"\nlauncher = \"torchrun\"\ncommand = [\"train.py\", \"--lr\", \"0.1\"]\n",
            "j",
        )
        .unwrap();
        s.validate(&cluster()).unwrap();
        let argv = s.argv("pacer", 2);
        assert_eq!(argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(argv[4..], ["1", "torchrun", "train.py", "--lr", "0.1"]);
        let py = JobSpec {
            python: Some("/venv/bin/python3".into()),
            ..s.clone()
        };
        py.validate(&cluster()).unwrap();
        assert_eq!(
            py.argv("pacer", 2)[4..8],
            ["3", "/venv/bin/python3", "-m", "torch.distributed.run"]
        );
        let e = JobSpec::from_toml(
            "name = \"d\"\nlauncher = \"mpirun\"\ncommand = [\"x\"]\n",
            "j",
        )
        .unwrap_err();
        assert_eq!(e.field, "launcher");
        let e = JobSpec::from_toml(
            "name = \"d\"\nlauncher = \"torchrun\"\n[trainer]\ndataset = \"tiny\"\n",
            "j",
        )
        .unwrap()
        .validate(&cluster())
        .unwrap_err();
        assert_eq!(e.field, "launcher");
        let e = JobSpec::from_toml(
            "name = \"d\"\npython = \"python3\"\ncommand = [\"x\"]\n",
            "j",
        )
        .unwrap()
        .validate(&cluster())
        .unwrap_err();
        assert_eq!(e.field, "python");
    }

    #[test]
    fn report_errors_name_the_field() {
        let ok = br#"{"step":1,"samples":10,"time_s":1.0,"replicas":1,"device_type":"cpu","throughput":10.0}"#;
        report_from_json(ok).unwrap();
        let neg = br#"{"step":-1,"samples":10,"time_s":1.0,"replicas":1,"device_type":"cpu","throughput":10.0}"#;
        assert_eq!(report_from_json(neg).unwrap_err().field, "step");
        let unk = br#"{"step":1,"samples":10,"time_s":1.0,"replicas":1,"device_type":"cpu","throughput":10.0,"x":1}"#;
        assert_eq!(report_from_json(unk).unwrap_err().field, "x");
        let inf = br#"{"step":1,"samples":10,"time_s":1e400,"replicas":1,"device_type":"cpu","throughput":10.0}"#;
        assert!(report_from_json(inf).is_err());
        let big = br#"{"step":1,"samples":10,"time_s":1.0,"replicas":1,"device_type":"cpu","throughput":1e300}"#;
        assert_eq!(report_from_json(big).unwrap_err().field, "throughput");
    }
}
