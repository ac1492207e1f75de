//! What a running job tells its scheduler service: one [`JobReport`] type, posted by the
//! Rust trainer (`pacer train`, `pacer_runtime::service`), by `pacer_torch` (through its
//! native module) and parsed and checked by the service (`pacer serve`,
//! `POST /v1/jobs/{id}/reports`; the contract in docs/serve.md).

use serde::{Deserialize, Serialize};

/// Most replicas a job (and so a report) may have.
pub const MAX_REPLICAS: u32 = 4096;
/// Largest global or local batch.
pub const MAX_BATCH: u64 = 1 << 30;

/// Where a run stands, as the job reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobReport {
    /// Optimiser steps so far, across restarts.
    pub step: u64,
    /// Samples processed so far, across restarts.
    pub samples: u64,
    /// Wall seconds since this run started.
    pub time_s: f64,
    /// Replicas (workers, ranks' devices) training now.
    pub replicas: u32,
    /// The run's device type as the service named it (`PACER_DEVICE_TYPE`): one type,
    /// or for a run across types its types joined by `+` (`t4+a100`).
    pub device_type: String,
    #[serde(default)]
    pub global_batch: u64,
    /// Each replica's local batch of the last step.
    #[serde(default)]
    pub local_batches: Vec<u64>,
    /// Samples per second over the window since the last report.
    pub throughput: f64,
    /// Mean seconds per step over that window.
    #[serde(default)]
    pub step_time_s: f64,
    #[serde(default)]
    pub noise_scale: Option<f64>,
    /// Mean training loss of the last step.
    #[serde(default)]
    pub loss: Option<f64>,
    #[serde(default)]
    pub done: bool,
}

/// Why a report is refused: the field and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportError {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ReportError {}

/// `Some(v)` when `v` is a number a report may carry (finite, ≥ 0).
pub fn reportable(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite() && *v >= 0.0)
}

/// Whether `name` is a device type a report may name: one type
/// (`[A-Za-z0-9_-]{1,64}`) or several joined by `+`.
pub fn is_device_type(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name.split('+').all(|t| {
            !t.is_empty()
                && t.len() <= 64
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

impl JobReport {
    /// Checks every number and name; the first fault names its field.
    pub fn validate(&self) -> Result<(), ReportError> {
        let bad = |field: &'static str, message: String| Err(ReportError { field, message });
        let finite = |field: &'static str, v: f64, max: f64| {
            if v.is_finite() && (0.0..=max).contains(&v) {
                Ok(())
            } else {
                bad(field, format!("{v} must be finite, ≥ 0 and ≤ {max:e}"))
            }
        };
        finite("time_s", self.time_s, 1e9)?;
        finite("throughput", self.throughput, 1e12)?;
        finite("step_time_s", self.step_time_s, 1e6)?;
        if let Some(n) = self.noise_scale {
            finite("noise_scale", n, 1e15)?;
        }
        if let Some(l) = self.loss {
            finite("loss", l, 1e15)?;
        }
        if self.replicas == 0 || self.replicas > MAX_REPLICAS {
            return bad(
                "replicas",
                format!("{} is out of range 1..={MAX_REPLICAS}", self.replicas),
            );
        }
        if self.global_batch > MAX_BATCH {
            return bad(
                "global_batch",
                format!("{} exceeds {MAX_BATCH}", self.global_batch),
            );
        }
        if self.local_batches.len() > MAX_REPLICAS as usize
            || self.local_batches.iter().any(|&b| b > MAX_BATCH)
        {
            return bad(
                "local_batches",
                "too many entries or an entry too large".into(),
            );
        }
        if self.step > 1 << 53 || self.samples > 1 << 53 {
            return bad("samples", "step and samples must be ≤ 2^53".into());
        }
        if !is_device_type(&self.device_type) {
            return bad(
                "device_type",
                "must be a device type name such as cpu or t4 (several joined by +)".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> JobReport {
        JobReport {
            step: 10,
            samples: 5120,
            time_s: 3.0,
            replicas: 4,
            device_type: "t4".into(),
            global_batch: 512,
            local_batches: vec![128; 4],
            throughput: 1700.0,
            step_time_s: 0.3,
            noise_scale: Some(800.0),
            loss: Some(0.4),
            done: false,
        }
    }

    #[test]
    fn faults_name_their_field() {
        ok().validate().unwrap();
        type Spoil = fn(&mut JobReport);
        let cases: [(&str, Spoil); 6] = [
            ("time_s", |r| r.time_s = f64::NAN),
            ("throughput", |r| r.throughput = -1.0),
            ("replicas", |r| r.replicas = 0),
            ("global_batch", |r| r.global_batch = MAX_BATCH + 1),
            ("samples", |r| r.samples = (1 << 53) + 1),
            ("device_type", |r| r.device_type = "t4 gpu".into()),
        ];
        for (field, spoil) in cases {
            let mut r = ok();
            spoil(&mut r);
            assert_eq!(r.validate().unwrap_err().field, field);
        }
    }

    #[test]
    fn a_run_across_types_names_them_with_plus() {
        for good in ["cpu", "t4", "a100+t4", "rtx_2080-ti+a100"] {
            assert!(is_device_type(good), "{good}");
        }
        for bad in ["", "+", "t4+", "+t4", "t4++a100", "t4 a100", "t4,a100"] {
            assert!(!is_device_type(bad), "{bad}");
        }
    }

    #[test]
    fn json_round_trip_and_unknown_fields() {
        let r = ok();
        let back: JobReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let e = serde_json::from_str::<JobReport>(
            r#"{"step":1,"samples":1,"time_s":1,"replicas":1,"device_type":"t4","throughput":1,"x":1}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
    }
}
