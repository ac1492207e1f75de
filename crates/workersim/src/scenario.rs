//! Scenario files: parsing and validation.
//!
//! Every problem with a file is reported as one [`ScenarioError`] that names the file
//! and the offending field path (`workers[2].samples_per_s`), never a panic.

use pacer_control::worker::{BatchBounds, BatchProblem};
use serde::Deserialize;
use std::fmt;

/// A worker-level scenario (JSON). See `scenarios/worker/README.md`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free text (JSON has no comments): what the scenario shows, data attribution.
    #[serde(default)]
    pub comment: Option<String>,
    /// Global batch `B`, fixed for the whole run.
    pub global_batch: u64,
    pub iterations: u64,
    /// Seeds every random draw (jitter, monitor noise, NARX features).
    pub seed: u64,
    /// Synchronisation (all-reduce) seconds added to every iteration.
    #[serde(default)]
    pub sync_s: f64,
    /// Std of additive noise on the monitor's load readings (0 = exact readings).
    #[serde(default)]
    pub monitor_noise: f64,
    pub workers: Vec<WorkerSpec>,
}

/// One worker (or `count` identical ones).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    #[serde(default)]
    pub comment: Option<String>,
    /// Replicate this spec `count` times (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Linear step time `b / samples_per_s`.
    #[serde(default)]
    pub samples_per_s: Option<f64>,
    /// `(local batch, step seconds)` points; replaces `samples_per_s` with a piecewise
    /// linear (GPU-like) step time.
    #[serde(default)]
    pub curve: Option<Vec<(f64, f64)>>,
    #[serde(default)]
    pub min_batch: Option<u64>,
    #[serde(default)]
    pub max_batch: Option<u64>,
    /// Largest local batch that fits in device memory.
    #[serde(default)]
    pub mem_cap: Option<u64>,
    /// Log-normal sigma of per-iteration step-time jitter.
    #[serde(default)]
    pub noise: f64,
    #[serde(default)]
    pub interference: Vec<Interference>,
    #[serde(default)]
    pub drift: Option<Drift>,
}

fn one() -> u32 {
    1
}

/// Co-located work on iterations `[start, end)`: step time × `slowdown`, visible to a
/// monitor at the start of each affected iteration as `cpu_load` (default
/// `1 − 1/slowdown`, the share of the machine the intruder takes) and `mem_load`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interference {
    pub start: u64,
    pub end: u64,
    pub slowdown: f64,
    #[serde(default)]
    pub cpu_load: Option<f64>,
    #[serde(default)]
    pub mem_load: Option<f64>,
}

/// Gradual slowdown invisible to the monitor (thermal throttling, a degrading disk):
/// step time × a factor rising linearly from 1 at `start` to `slowdown` at `end`,
/// and staying there.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drift {
    pub start: u64,
    pub end: u64,
    pub slowdown: f64,
}

/// A scenario file that cannot be used: which file, which field, what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub origin: String,
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() || self.field == "." {
            write!(f, "{}: {}", self.origin, self.message)
        } else {
            write!(
                f,
                "{}: field `{}`: {}",
                self.origin, self.field, self.message
            )
        }
    }
}

impl std::error::Error for ScenarioError {}

impl Scenario {
    /// Parse and validate. `origin` (usually the path) is quoted in errors.
    pub fn from_json(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        let sc: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let inner = e.into_inner();
            // serde names a missing field in the message but not in the path.
            let msg = inner.to_string();
            let field = match (field.as_str(), missing_field(&msg)) {
                (".", Some(m)) => m.to_string(),
                (p, Some(m)) => format!("{p}.{m}"),
                (p, None) => p.to_string(),
            };
            ScenarioError {
                origin: origin.to_string(),
                field,
                message: msg,
            }
        })?;
        sc.validate().map_err(|(field, message)| ScenarioError {
            origin: origin.to_string(),
            field,
            message,
        })?;
        Ok(sc)
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let err = |f: &str, m: String| Err((f.to_string(), m));
        if self.global_batch == 0 {
            return err("global_batch", "must be > 0".into());
        }
        if self.iterations == 0 || self.iterations > 100_000_000 {
            return err(
                "iterations",
                format!("must be in 1..=1e8, got {}", self.iterations),
            );
        }
        if let Some(m) = outside(self.sync_s, limits::SYNC_S, " s") {
            return err("sync_s", m);
        }
        if !(self.monitor_noise.is_finite() && (0.0..=1.0).contains(&self.monitor_noise)) {
            return err(
                "monitor_noise",
                format!("must be in [0, 1], got {}", self.monitor_noise),
            );
        }
        if self.workers.is_empty() {
            return err("workers", "at least one worker is needed".into());
        }
        for (i, w) in self.workers.iter().enumerate() {
            w.validate(self.iterations, self.global_batch)
                .map_err(|(f, m)| (format!("workers[{i}].{f}"), m))?;
        }
        let total: u64 = self.workers.iter().map(|w| w.count as u64).sum();
        if total > 1_000_000 {
            return err("workers", format!("at most 1e6 workers, got {total}"));
        }
        self.problem().map_err(|e| {
            let text = e.to_string();
            let (field, msg) = text.split_once(": ").unwrap_or(("workers", &text));
            (field.to_string(), msg.to_string())
        })?;
        Ok(())
    }

    /// The batching problem (bounds per expanded worker).
    pub fn problem(&self) -> Result<BatchProblem, pacer_control::worker::BatchError> {
        let bounds = self
            .expanded()
            .map(|w| BatchBounds {
                min: w.min_batch.unwrap_or(1),
                max: w.cap(self.global_batch),
            })
            .collect();
        let gpu_like = self.workers.iter().any(|w| w.curve.is_some());
        BatchProblem::new(self.global_batch, bounds, gpu_like)
    }

    /// Workers with `count` expanded, in file order.
    pub fn expanded(&self) -> impl Iterator<Item = &WorkerSpec> {
        self.workers
            .iter()
            .flat_map(|w| std::iter::repeat_n(w, w.count as usize))
    }

    pub fn n_workers(&self) -> usize {
        self.workers.iter().map(|w| w.count as usize).sum()
    }
}

fn missing_field(msg: &str) -> Option<&str> {
    let rest = msg.strip_prefix("missing field `")?;
    rest.split('`').next()
}

fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// Accepted ranges of the scenario's physical quantities. Within them every
/// derived quantity of a run stays finite — a step time is at most
/// 2^53 samples / 1e-6 samples/s × 1e6 (interference) × 1e6 (drift) ≈ 1e28 s,
/// a run at most 1e8 such iterations, a speed at most 2^53 / 1e-9 s — so a
/// scenario like `samples_per_s: 1e-308` (step times of `inf`, efficiencies of
/// `NaN`) is refused with the field and the range instead.
pub mod limits {
    /// `samples_per_s` (samples per second).
    pub const SPEED: (f64, f64) = (1e-6, 1e12);
    /// Seconds of a `curve` point.
    pub const CURVE_S: (f64, f64) = (1e-9, 1e6);
    /// Batch of a `curve` point (samples).
    pub const CURVE_BATCH: (f64, f64) = (1e-6, 9_007_199_254_740_992.0);
    /// `sync_s` (seconds added to every iteration).
    pub const SYNC_S: (f64, f64) = (0.0, 1e6);
    /// `interference[].slowdown` (a factor ≥ 1).
    pub const SLOWDOWN: (f64, f64) = (1.0, 1e6);
    /// `drift.slowdown` (a factor; below 1 is a speed-up).
    pub const DRIFT: (f64, f64) = (1e-6, 1e6);
}

/// `Some(message)` unless `v` is finite and in `[lo, hi]`.
fn outside(v: f64, (lo, hi): (f64, f64), unit: &str) -> Option<String> {
    if v.is_finite() && v >= lo && v <= hi {
        None
    } else {
        // Plain where that is short, else scientific (1e-308 has 308 digits plain).
        let got = if v == 0.0 || !v.is_finite() || (1e-3..1e12).contains(&v.abs()) {
            format!("{v}")
        } else {
            format!("{v:e}")
        };
        Some(format!("must be in [{lo:e}, {hi:e}]{unit}, got {got}"))
    }
}

impl WorkerSpec {
    /// Tighter of `max_batch` and `mem_cap`; `B` when neither is given.
    pub fn cap(&self, global_batch: u64) -> u64 {
        self.max_batch
            .unwrap_or(global_batch)
            .min(self.mem_cap.unwrap_or(u64::MAX))
    }

    fn validate(&self, iterations: u64, global_batch: u64) -> Result<(), (String, String)> {
        let err = |f: &str, m: String| Err((f.to_string(), m));
        if self.count == 0 {
            return err("count", "must be ≥ 1".into());
        }
        let min = self.min_batch.unwrap_or(1);
        if min > self.cap(global_batch) {
            return err(
                "min_batch",
                format!(
                    "{min} exceeds the worker's max batch / memory cap {}",
                    self.cap(global_batch)
                ),
            );
        }
        match (&self.samples_per_s, &self.curve) {
            (None, None) => {
                return err(
                    "samples_per_s",
                    "missing: give `samples_per_s` or a `curve`".into(),
                )
            }
            (Some(v), _) if outside(*v, limits::SPEED, "").is_some() => {
                let m = outside(*v, limits::SPEED, " samples/s").unwrap_or_default();
                return err("samples_per_s", m);
            }
            _ => {}
        }
        if let Some(c) = &self.curve {
            if c.len() < 2 {
                return err("curve", "needs at least 2 (batch, seconds) points".into());
            }
            for (j, &(b, s)) in c.iter().enumerate() {
                if !positive(b) || !positive(s) {
                    return err(
                        &format!("curve[{j}]"),
                        format!("batch and seconds must be positive, got [{b}, {s}]"),
                    );
                }
                if let Some(m) = outside(b, limits::CURVE_BATCH, " samples") {
                    return err(&format!("curve[{j}][0]"), format!("batch {m}"));
                }
                if let Some(m) = outside(s, limits::CURVE_S, " s") {
                    return err(&format!("curve[{j}][1]"), format!("seconds {m}"));
                }
                if j > 0 && (b <= c[j - 1].0 || s < c[j - 1].1) {
                    return err(
                        &format!("curve[{j}]"),
                        "batches must increase and step times must not decrease".into(),
                    );
                }
            }
        }
        if self.max_batch == Some(0) {
            return err("max_batch", "must be > 0".into());
        }
        if self.mem_cap == Some(0) {
            return err("mem_cap", "must be > 0".into());
        }
        if !(self.noise.is_finite() && (0.0..=2.0).contains(&self.noise)) {
            return err("noise", format!("must be in [0, 2], got {}", self.noise));
        }
        for (j, w) in self.interference.iter().enumerate() {
            let f = |x: &str| format!("interference[{j}].{x}");
            if w.start >= w.end {
                return Err((f("end"), format!("must be > start ({})", w.start)));
            }
            if w.start >= iterations {
                return Err((f("start"), format!("must be < iterations ({iterations})")));
            }
            if let Some(m) = outside(w.slowdown, limits::SLOWDOWN, "") {
                return Err((f("slowdown"), m));
            }
            for (name, v) in [("cpu_load", w.cpu_load), ("mem_load", w.mem_load)] {
                if let Some(v) = v {
                    if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                        return Err((f(name), format!("must be in [0, 1], got {v}")));
                    }
                }
            }
        }
        if let Some(d) = &self.drift {
            if d.start >= d.end {
                return err("drift.end", format!("must be > start ({})", d.start));
            }
            if let Some(m) = outside(d.slowdown, limits::DRIFT, "") {
                return err("drift.slowdown", m);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"global_batch": 1024, "iterations": 2000, "seed": 7, "sync_s": 0.002,
     "workers": [
       {"samples_per_s": 800, "max_batch": 1024, "noise": 0.05,
        "curve": [[16, 0.03], [64, 0.08], [256, 0.30]],
        "interference": [{"start": 300, "end": 900, "slowdown": 2.5}]},
       {"samples_per_s": 400, "count": 3}]}"#;

    fn bad(text: &str) -> ScenarioError {
        Scenario::from_json(text, "s.json").unwrap_err()
    }

    #[test]
    fn issue_example_parses() {
        let s = Scenario::from_json(GOOD, "s.json").unwrap();
        assert_eq!(s.n_workers(), 4);
        assert!(s.problem().unwrap().gpu_like());
    }

    #[test]
    fn missing_field_is_named() {
        let e = bad(r#"{"iterations": 10, "seed": 1, "workers": [{"samples_per_s": 1}]}"#);
        assert_eq!(e.field, "global_batch");
        assert!(
            e.to_string().starts_with("s.json: field `global_batch`"),
            "{e}"
        );
        let e = bad(
            r#"{"global_batch": 8, "iterations": 10, "seed": 1, "workers": [{"samples_per_s": 1, "interference": [{"start": 1, "slowdown": 2}]}]}"#,
        );
        assert_eq!(e.field, "workers[0].interference[0].end", "{e}");
    }

    #[test]
    fn negative_speed_is_named() {
        let e = bad(
            r#"{"global_batch": 8, "iterations": 10, "seed": 1, "workers": [{"samples_per_s": 1}, {"samples_per_s": -3}]}"#,
        );
        assert_eq!(e.field, "workers[1].samples_per_s", "{e}");
    }

    #[test]
    fn wrong_type_and_unknown_field_are_named() {
        let e = bad(
            r#"{"global_batch": 8, "iterations": 10, "seed": 1, "workers": [{"samples_per_s": "fast"}]}"#,
        );
        assert_eq!(e.field, "workers[0].samples_per_s", "{e}");
        let e = bad(
            r#"{"global_batch": 8, "iterations": 10, "seed": 1, "workers": [{"samples_per_sec": 3}]}"#,
        );
        assert!(e.message.contains("samples_per_sec"), "{e}");
    }

    #[test]
    fn caps_that_cannot_hold_the_batch_are_rejected() {
        let e = bad(
            r#"{"global_batch": 1024, "iterations": 10, "seed": 1, "workers": [{"samples_per_s": 1, "mem_cap": 500, "count": 2}]}"#,
        );
        assert_eq!(e.field, "global_batch", "{e}");
        assert!(e.message.contains("1000"), "{e}");
        let e = bad(
            r#"{"global_batch": 10, "iterations": 10, "seed": 1, "workers": [{"samples_per_s": 1, "min_batch": 20, "max_batch": 10}]}"#,
        );
        assert_eq!(e.field, "workers[0].min_batch", "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for t in [
            "",
            "[]",
            "{",
            "null",
            r#"{"global_batch": -1}"#,
            "{\"workers\": 3}",
        ] {
            let e = bad(t);
            assert!(e.to_string().starts_with("s.json"), "{e}");
        }
    }
}
