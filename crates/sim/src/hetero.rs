//! Gavel traces on heterogeneous clusters: each job becomes a
//! [`Work::Throughput`] job whose speed on every device type comes from Gavel's
//! `simulation_throughputs.json` (consolidated and `_unconsolidated`).
//!
//! Gavel measured scale factors 1, 2, 4 and 8. A job with a larger scale factor
//! (Philly's 16–64-GPU jobs) is given its largest measured scale's throughput,
//! scaled linearly to its size — an optimistic assumption, stated here. A type
//! with no measurement for the job is one it cannot run on; a missing
//! `_unconsolidated` entry means "as fast as consolidated".

use crate::engine::{SimJob, TypeRate, Work};
use crate::trace::GavelThroughputs;
use pacer_model::profile::parse_f64;
use pacer_model::{JobSpec, ParseError};

/// Device types Gavel measured.
pub const GAVEL_TYPES: &[&str] = &["v100", "p100", "k80"];

/// Throughput of `job_type` at `scale` on `device` (steps/s), extrapolated
/// linearly from the largest measured scale below it.
pub fn gavel_rate(
    tput: &GavelThroughputs,
    job_type: &str,
    scale: u32,
    device: &str,
) -> Option<f64> {
    let mut s = scale;
    while s >= 1 {
        if let Some(r) = tput
            .get(&(job_type.to_string(), s))
            .and_then(|m| m.get(device))
            .copied()
            .filter(|r| *r > 0.0)
        {
            return Some(r * scale as f64 / s as f64);
        }
        s /= 2;
    }
    None
}

/// Loads a Gavel `.trace` (tab separated: job_type, command, num_steps_arg,
/// needs_data_dir, total_steps, arrival_time, scale_factor) as heterogeneous jobs.
/// `max_jobs` keeps the first jobs only (the traces run for months).
pub fn load_gavel_trace_hetero(
    text: &str,
    origin: &str,
    tput: &GavelThroughputs,
    max_jobs: Option<usize>,
) -> Result<Vec<SimJob>, ParseError> {
    let mut jobs = Vec::new();
    for (k, line) in text.lines().enumerate() {
        if max_jobs.is_some_and(|m| jobs.len() >= m) {
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
        let steps = parse_f64(f[4].trim(), "total_steps", origin, line_no)?;
        let arrival = parse_f64(f[5].trim(), "arrival_time", origin, line_no)?;
        let scale: u32 = pacer_model::error::parse_whole(f[6], 1)
            .map_err(|e| ParseError::at(origin, line_no, format!("column `scale_factor`: {e}")))?;
        if steps <= 0.0 || arrival < 0.0 {
            return Err(ParseError::at(
                origin,
                line_no,
                "total_steps must be > 0 and arrival_time ≥ 0",
            ));
        }
        let job_type = f[0].trim();
        let rates: Vec<TypeRate> = GAVEL_TYPES
            .iter()
            .filter_map(|&d| {
                let c = gavel_rate(tput, job_type, scale, d)?;
                let u =
                    gavel_rate(tput, job_type, scale, &format!("{d}_unconsolidated")).unwrap_or(c);
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
                line_no,
                format!(
                    "no throughput for job type `{job_type}` on any of {}",
                    GAVEL_TYPES.join(", ")
                ),
            ));
        }
        let v100 = rates.iter().map(|r| r.consolidated).fold(0.0, f64::max);
        jobs.push(SimJob {
            spec: JobSpec {
                name: format!("gavel-{}", jobs.len()),
                arrival_s: arrival,
                application: job_type.to_string(),
                requested_replicas: scale,
                requested_batch: 0,
                service_gpu_s: Some(steps / v100 * scale as f64),
                device_type: None,
            },
            work: Work::Throughput { steps, rates },
        });
    }
    if jobs.is_empty() {
        return Err(ParseError::whole(origin, "no jobs"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::load_gavel_throughputs;

    #[test]
    fn hetero_rates_and_extrapolation() {
        let t = load_gavel_throughputs(
            r#"{"v100": {"('A', 1)": {"null": 10.0}, "('A', 8)": {"null": 60.0}},
                "v100_unconsolidated": {"('A', 8)": {"null": 40.0}},
                "k80": {"('A', 1)": {"null": 2.0}}}"#,
            "t.json",
        )
        .unwrap();
        assert_eq!(gavel_rate(&t, "A", 16, "v100"), Some(120.0));
        assert_eq!(gavel_rate(&t, "A", 2, "k80"), Some(4.0));
        let jobs = load_gavel_trace_hetero(
            "A\tc\t-n\t1\t600\t5.0\t8\nA\tc\t-n\t1\t10\t9\t1\n",
            "a.trace",
            &t,
            None,
        )
        .unwrap();
        assert_eq!(jobs[0].spec.arrival_s, 0.0);
        let Work::Throughput { rates, .. } = &jobs[0].work else {
            panic!()
        };
        assert_eq!(rates.len(), 2);
        assert_eq!(rates[0].consolidated, 60.0);
        assert_eq!(rates[0].unconsolidated, 40.0);
        assert_eq!(rates[1].unconsolidated, 16.0);
        let e =
            load_gavel_trace_hetero("B\tc\t-n\t1\t10\t0\t1\n", "b.trace", &t, None).unwrap_err();
        // The types listed plainly, not as a Debug array of strings.
        assert_eq!(
            e.to_string(),
            "b.trace:1: no throughput for job type `B` on any of v100, p100, k80"
        );
    }
}
