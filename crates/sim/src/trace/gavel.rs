//! Gavel's traces: the one parser of `.trace` files (tab separated: job_type,
//! command, num_steps_arg, needs_data_dir, total_steps, arrival_time,
//! scale_factor) and of `simulation_throughputs.json`, and the jobs they make:
//! [`Work::Throughput`] jobs whose speed on every device type is Gavel's measured
//! isolated throughput (consolidated and `_unconsolidated`).
//!
//! Throughputs are keyed by (job type, scale factor). Gavel measured scale
//! factors 1, 2, 4 and 8, and only for the job types it runs distributed; the
//! MSR traces ask for other pairs (e.g. `('A3C', 4)`, `('LM (batch size 20)', 16)`).
//! Gavel's simulator of the time the traces were made looked throughputs up by
//! job type alone: a job ran at its type's one-device throughput whatever its
//! scale factor (today's Gavel, keyed by the pair, raises a `KeyError` on them).
//! [`ScaleFallback::OneDevice`] does the same for a pair that was not measured;
//! [`ScaleFallback::Linear`] extrapolates the largest measured scale below it
//! linearly instead (optimistic; the Themis experiment's assumption).
//! A type with no measurement for the job is one it cannot run on; a missing
//! `_unconsolidated` entry means "as fast as consolidated".

use super::{TraceContext, TraceError, TraceFormat};
use crate::engine::{SimJob, TypeRate, Work};
use pacer_model::profile::parse_f64;
use pacer_model::{JobSpec, ParseError};

/// `gavel:FILE`.
pub const FORMAT: TraceFormat = TraceFormat {
    prefix: "gavel",
    arg: "FILE",
    summary: "Gavel .trace (needs --gavel-throughputs): per-device-type throughputs",
    uses_apps: true,
    load: |arg: &str, ctx: &TraceContext| -> Result<Vec<SimJob>, TraceError> {
        let Some(tp) = ctx.gavel_throughputs else {
            return Err(TraceError::Spec(
                "gavel traces need --gavel-throughputs FILE (Gavel's simulation_throughputs.json)"
                    .into(),
            ));
        };
        let tput = load_gavel_throughputs(&super::read(tp, pacer_fsio::limits::TABLE)?, tp)?;
        let mut jobs = load_jobs(
            &super::read(arg, pacer_fsio::limits::TRACE)?,
            arg,
            &tput,
            ScaleFallback::OneDevice,
            None,
        )?;
        if let Some(d) = ctx.gavel_device {
            let d = d.to_ascii_lowercase();
            for j in &mut jobs {
                j.spec.device_type = Some(d.clone());
            }
        }
        Ok(jobs)
    },
};

/// Device types Gavel measured.
pub const GAVEL_TYPES: &[&str] = &["v100", "p100", "k80"];

/// Steps per second of each Gavel job type on each device type, running alone.
pub type GavelThroughputs =
    std::collections::HashMap<(String, u32), std::collections::HashMap<String, f64>>;

/// Reads Gavel's `simulation_throughputs.json` (isolated throughputs only).
pub fn load_gavel_throughputs(text: &str, origin: &str) -> Result<GavelThroughputs, ParseError> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ParseError::at(origin, e.line(), format!("not valid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ParseError::whole(origin, "expected an object keyed by device type"))?;
    let mut out = GavelThroughputs::new();
    for (device, jobs) in obj {
        let jobs = jobs
            .as_object()
            .ok_or_else(|| ParseError::whole(origin, format!("`{device}`: expected an object")))?;
        for (key, entry) in jobs {
            // Key: "('ResNet-18 (batch size 16)', 1)".
            let inner = key.trim().trim_start_matches('(').trim_end_matches(')');
            let (name, scale) = inner.rsplit_once(',').ok_or_else(|| {
                ParseError::whole(
                    origin,
                    format!("`{device}`: key `{key}` is not \"('JOB TYPE', SCALE)\""),
                )
            })?;
            let name = name.trim().trim_matches('\'').to_string();
            let scale: u32 = pacer_model::error::parse_whole(scale, 0).map_err(|e| {
                ParseError::whole(origin, format!("`{device}`: key `{key}`: scale {e}"))
            })?;
            if let Some(t) = entry.get("null").and_then(|t| t.as_f64()) {
                out.entry((name, scale))
                    .or_default()
                    .insert(device.to_ascii_lowercase(), t);
            }
        }
    }
    Ok(out)
}

/// One line of a `.trace` file.
#[derive(Debug, Clone, PartialEq)]
pub struct GavelRow {
    /// 1-based line number.
    pub line: usize,
    pub job_type: String,
    pub total_steps: f64,
    pub arrival_s: f64,
    pub scale_factor: u32,
}

/// Parses a Gavel `.trace` (blank lines skipped); `max_rows` keeps the first rows only.
pub fn parse_gavel_trace(
    text: &str,
    origin: &str,
    max_rows: Option<usize>,
) -> Result<Vec<GavelRow>, ParseError> {
    let mut rows = Vec::new();
    for (k, line) in text.lines().enumerate() {
        if max_rows.is_some_and(|m| rows.len() >= m) {
            break;
        }
        let line_no = k + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 7 {
            return Err(ParseError::at(
                origin,
                line_no,
                format!("has {} tab-separated fields; expected 7", f.len()),
            ));
        }
        let total_steps = parse_f64(f[4].trim(), "total_steps", origin, line_no)?;
        let arrival_s = parse_f64(f[5].trim(), "arrival_time", origin, line_no)?;
        let scale_factor: u32 = pacer_model::error::parse_whole(f[6], 1)
            .map_err(|e| ParseError::at(origin, line_no, format!("column `scale_factor`: {e}")))?;
        if total_steps <= 0.0 || arrival_s < 0.0 {
            return Err(ParseError::at(
                origin,
                line_no,
                "total_steps must be > 0 and arrival_time ≥ 0",
            ));
        }
        rows.push(GavelRow {
            line: line_no,
            job_type: f[0].trim().to_string(),
            total_steps,
            arrival_s,
            scale_factor,
        });
    }
    if rows.is_empty() {
        return Err(ParseError::whole(origin, "no jobs"));
    }
    Ok(rows)
}

/// What a (job type, scale factor) pair without a measurement runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleFallback {
    /// The job type's one-device throughput, whatever the scale (Gavel's simulator
    /// when the MSR traces were made: throughputs keyed by job type alone).
    OneDevice,
    /// The largest measured scale below, scaled linearly to the job's size.
    Linear,
}

/// Throughput of `job_type` at `scale` on `device` (steps/s): the measured pair,
/// else as `fallback` says. `None`: not measured on `device`.
pub fn gavel_rate_with(
    tput: &GavelThroughputs,
    job_type: &str,
    scale: u32,
    device: &str,
    fallback: ScaleFallback,
) -> Option<f64> {
    let at = |s: u32| {
        tput.get(&(job_type.to_string(), s))
            .and_then(|m| m.get(device))
            .copied()
            .filter(|r| *r > 0.0)
    };
    match fallback {
        ScaleFallback::OneDevice => at(scale).or_else(|| at(1)),
        ScaleFallback::Linear => {
            let mut s = scale;
            while s >= 1 {
                if let Some(r) = at(s) {
                    return Some(r * scale as f64 / s as f64);
                }
                s /= 2;
            }
            None
        }
    }
}

/// [`gavel_rate_with`] extrapolating linearly ([`ScaleFallback::Linear`]).
pub fn gavel_rate(
    tput: &GavelThroughputs,
    job_type: &str,
    scale: u32,
    device: &str,
) -> Option<f64> {
    gavel_rate_with(tput, job_type, scale, device, ScaleFallback::Linear)
}

/// The device types of a throughputs file: Gavel's [`GAVEL_TYPES`] first, then any
/// other type it names (sorted; `_unconsolidated` variants are not types), so a file
/// of other measurements (`scripts/serve-demo.sh` writes one for type `cpu`) loads too.
fn device_types(tput: &GavelThroughputs) -> Vec<String> {
    let others: std::collections::BTreeSet<&str> = tput
        .values()
        .flat_map(|m| m.keys())
        .map(String::as_str)
        .filter(|d| !d.ends_with("_unconsolidated") && !GAVEL_TYPES.contains(d))
        .collect();
    GAVEL_TYPES
        .iter()
        .copied()
        .chain(others)
        .map(str::to_string)
        .collect()
}

/// Jobs of a Gavel `.trace`, each with its throughput on every device type of the
/// throughputs file ([`device_types`]) it was measured on; arrivals relative to the first.
pub fn load_jobs(
    text: &str,
    origin: &str,
    tput: &GavelThroughputs,
    fallback: ScaleFallback,
    max_jobs: Option<usize>,
) -> Result<Vec<SimJob>, ParseError> {
    let rows = parse_gavel_trace(text, origin, max_jobs)?;
    let types = device_types(tput);
    let mut jobs = Vec::with_capacity(rows.len());
    for row in rows {
        let (job_type, scale) = (row.job_type.as_str(), row.scale_factor);
        let rates: Vec<TypeRate> = types
            .iter()
            .map(String::as_str)
            .filter_map(|d| {
                let c = gavel_rate_with(tput, job_type, scale, d, fallback)?;
                let u = gavel_rate_with(
                    tput,
                    job_type,
                    scale,
                    &format!("{d}_unconsolidated"),
                    fallback,
                )
                .unwrap_or(c);
                Some(TypeRate {
                    device_type: d.to_string(),
                    consolidated: c,
                    unconsolidated: u,
                })
            })
            .collect();
        if rates.is_empty() {
            return Err(ParseError::at(
                origin,
                row.line,
                format!(
                    "no throughput for job type `{job_type}` on any of {}",
                    types.join(", ")
                ),
            ));
        }
        let fastest = rates.iter().map(|r| r.consolidated).fold(0.0, f64::max);
        jobs.push(SimJob {
            spec: JobSpec {
                name: format!("gavel-{}", jobs.len()),
                arrival_s: row.arrival_s,
                application: job_type.to_string(),
                requested_replicas: scale,
                requested_batch: 0,
                service_gpu_s: Some(row.total_steps / fastest * scale as f64),
                device_type: None,
            },
            work: Work::Throughput {
                steps: row.total_steps,
                rates,
            },
        });
    }
    let t0 = jobs
        .iter()
        .map(|j| j.spec.arrival_s)
        .fold(f64::INFINITY, f64::min);
    for j in &mut jobs {
        j.spec.arrival_s -= t0;
    }
    Ok(jobs)
}

/// [`load_jobs`] run on `device` only (Gavel's fallback for unmeasured pairs): every
/// job is pinned to that type, and a job without a throughput there is an error.
pub fn load_gavel_trace(
    text: &str,
    origin: &str,
    tput: &GavelThroughputs,
    device: &str,
) -> Result<Vec<SimJob>, ParseError> {
    let rows = parse_gavel_trace(text, origin, None)?;
    if let Some(row) = rows.iter().find(|r| {
        gavel_rate_with(
            tput,
            &r.job_type,
            r.scale_factor,
            device,
            ScaleFallback::OneDevice,
        )
        .is_none()
    }) {
        return Err(ParseError::at(
            origin,
            row.line,
            format!(
                "no throughput for job type `{}` on `{device}`",
                row.job_type
            ),
        ));
    }
    let mut jobs = load_jobs(text, origin, tput, ScaleFallback::OneDevice, None)?;
    for j in &mut jobs {
        j.spec.device_type = Some(device.to_string());
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tput() -> GavelThroughputs {
        load_gavel_throughputs(
            r#"{"v100": {"('A', 1)": {"null": 10.0}, "('A', 8)": {"null": 60.0}},
                "v100_unconsolidated": {"('A', 8)": {"null": 40.0}},
                "k80": {"('A', 1)": {"null": 2.0}, "('x', 1)": {"null": 1.0, "('A', 1)": [1, 2]}}}"#,
            "t.json",
        )
        .unwrap()
    }

    #[test]
    fn rates_measured_or_by_fallback() {
        let t = tput();
        // Measured pairs: the same either way.
        for f in [ScaleFallback::OneDevice, ScaleFallback::Linear] {
            assert_eq!(gavel_rate_with(&t, "A", 8, "v100", f), Some(60.0));
            assert_eq!(gavel_rate_with(&t, "A", 1, "k80", f), Some(2.0));
            assert_eq!(gavel_rate_with(&t, "A", 1, "p100", f), None);
        }
        // Unmeasured: Gavel's one-device throughput, or linear from below.
        assert_eq!(
            gavel_rate_with(&t, "A", 16, "v100", ScaleFallback::OneDevice),
            Some(10.0)
        );
        assert_eq!(gavel_rate(&t, "A", 16, "v100"), Some(120.0));
        assert_eq!(
            gavel_rate_with(&t, "A", 2, "k80", ScaleFallback::OneDevice),
            Some(2.0)
        );
        assert_eq!(gavel_rate(&t, "A", 2, "k80"), Some(4.0));
    }

    #[test]
    fn jobs_per_type_relative_arrivals() {
        let t = tput();
        let jobs = load_jobs(
            "A\tc\t-n\t1\t600\t5.0\t8\n\nA\tc\t-n\t1\t10\t9\t4\n",
            "a.trace",
            &t,
            ScaleFallback::OneDevice,
            None,
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].spec.arrival_s, jobs[1].spec.arrival_s), (0.0, 4.0));
        let Work::Throughput { rates, steps } = &jobs[0].work else {
            panic!()
        };
        assert_eq!(*steps, 600.0);
        assert_eq!(rates.len(), 2);
        assert_eq!(
            (rates[0].consolidated, rates[0].unconsolidated),
            (60.0, 40.0)
        );
        assert_eq!((rates[1].consolidated, rates[1].unconsolidated), (2.0, 2.0));
        let Work::Throughput { rates, .. } = &jobs[1].work else {
            panic!()
        };
        // (A, 4) was not measured: A's one-device throughputs.
        assert_eq!(rates[0].consolidated, 10.0);
        assert_eq!(jobs[1].spec.requested_replicas, 4);
    }

    #[test]
    fn other_device_types_load_too() {
        let t = load_gavel_throughputs(
            r#"{"cpu": {"('tiny-0', 1)": {"null": 3.5}}, "cpu_unconsolidated": {}}"#,
            "m.json",
        )
        .unwrap();
        assert_eq!(device_types(&t), ["v100", "p100", "k80", "cpu"]);
        let jobs = load_jobs(
            "tiny-0\tc\t-n\t1\t70\t0\t1\n",
            "m.trace",
            &t,
            ScaleFallback::OneDevice,
            None,
        )
        .unwrap();
        let Work::Throughput { rates, steps } = &jobs[0].work else {
            panic!()
        };
        assert_eq!((*steps, rates.len()), (70.0, 1));
        assert_eq!(
            (rates[0].device_type.as_str(), rates[0].consolidated),
            ("cpu", 3.5)
        );
        assert!(load_jobs(
            "B\tc\t-n\t1\t7\t0\t1\n",
            "m.trace",
            &t,
            ScaleFallback::OneDevice,
            None
        )
        .unwrap_err()
        .to_string()
        .contains("on any of v100, p100, k80, cpu"));
    }

    #[test]
    fn errors_name_the_line() {
        let t = tput();
        let e = parse_gavel_trace(
            "A\tc\t-n\t1\t10\t0\t1\nA\tc\t-n\t1\t10\t0\n",
            "a.trace",
            None,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("a.trace:2: has 6"), "{e}");
        let e = load_jobs(
            "B\tc\t-n\t1\t10\t0\t1\n",
            "b.trace",
            &t,
            ScaleFallback::Linear,
            None,
        )
        .unwrap_err();
        // The types listed plainly, not as a Debug array of strings.
        assert_eq!(
            e.to_string(),
            "b.trace:1: no throughput for job type `B` on any of v100, p100, k80"
        );
        let e = load_gavel_trace("A\tc\t-n\t1\t10\t0\t1\n", "a.trace", &t, "p100").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.trace:1: no throughput for job type `A` on `p100`"
        );
        let e = parse_gavel_trace("A\tc\t-n\t1\t0\t0\t1\n", "a.trace", None).unwrap_err();
        assert!(e.to_string().contains("total_steps must be > 0"), "{e}");
        assert!(parse_gavel_trace("\n\n", "e.trace", None).is_err());
    }
}
