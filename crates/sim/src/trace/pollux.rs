//! Pollux's workload CSV (`name,time,application,num_replicas,batch_size`): jobs of
//! the measured applications.

use super::{app_index, csv_records, positive_u32, TraceContext, TraceError, TraceFormat};
use crate::apps::AppModel;
use crate::engine::{SimJob, Work};
use pacer_model::profile::parse_f64;
use pacer_model::{JobSpec, ParseError};

/// `pollux:FILE`.
pub const FORMAT: TraceFormat = TraceFormat {
    prefix: "pollux",
    arg: "FILE",
    summary: "Pollux workload CSV (name,time,application,num_replicas,batch_size); --load scales arrivals",
    uses_apps: true,
    load: |arg: &str, ctx: &TraceContext| -> Result<Vec<SimJob>, TraceError> {
        Ok(load_pollux_workload(&super::read(arg, pacer_fsio::limits::TRACE)?, arg, ctx.apps, ctx.load)?)
    },
};

/// Pollux workload CSV: `name,time,application,num_replicas,batch_size`.
///
/// `load_factor` scales the arrival rate (2.0 = arrivals twice as dense), as in
/// Pollux's job-load experiments.
pub fn load_pollux_workload(
    text: &str,
    origin: &str,
    apps: &[AppModel],
    load_factor: f64,
) -> Result<Vec<SimJob>, ParseError> {
    let (idx, rows) = csv_records(
        text,
        origin,
        &["name", "time", "application", "num_replicas", "batch_size"],
    )?;
    let mut jobs = Vec::with_capacity(rows.len());
    for (line, rec) in rows {
        let f = |k: usize| rec[idx[k]].trim();
        let time = parse_f64(f(1), "time", origin, line)?;
        if time < 0.0 {
            return Err(ParseError::at(
                origin,
                line,
                format!("column `time`: {time} must be ≥ 0"),
            ));
        }
        let app = app_index(apps, f(2), origin, line)?;
        jobs.push(SimJob {
            spec: JobSpec {
                name: f(0).to_string(),
                arrival_s: time / load_factor,
                application: f(2).to_string(),
                requested_replicas: positive_u32(f(3), "num_replicas", origin, line)?,
                requested_batch: positive_u32(f(4), "batch_size", origin, line)?,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Profiled { app },
        });
    }
    if jobs.is_empty() {
        return Err(ParseError::whole(origin, "no jobs"));
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::embedded_profiles;

    fn apps() -> Vec<AppModel> {
        embedded_profiles().into_iter().map(AppModel::new).collect()
    }

    #[test]
    fn pollux_workload_errors_name_line() {
        let a = apps();
        let e = load_pollux_workload(
            "name,time,application,num_replicas,batch_size\nx,1,cifar10,1,128\ny,2,gpt9,1,1\n",
            "w.csv",
            &a,
            1.0,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("w.csv:3: unknown application `gpt9`"),
            "{e}"
        );
        let e = load_pollux_workload(
            "name,time,application,num_replicas,batch_size\nx,1,cifar10,0,128\n",
            "w.csv",
            &a,
            1.0,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("w.csv:2: column `num_replicas`"),
            "{e}"
        );
        let e = load_pollux_workload("name,time,application,batch_size\n", "w.csv", &a, 1.0)
            .unwrap_err();
        assert!(
            e.to_string().contains("missing column `num_replicas`"),
            "{e}"
        );
    }
}
