//! Pollux's digest of the Philly trace (`timestamp,duration,num_gpus,gpu_time,cluster`):
//! duration-only jobs.

use super::{csv_records, positive_u32, TraceContext, TraceError, TraceFormat};
use crate::engine::{SimJob, Work};
use pacer_model::civil::days_from_civil;
use pacer_model::profile::parse_f64;
use pacer_model::{JobSpec, ParseError};

/// `philly:FILE`.
pub const FORMAT: TraceFormat = TraceFormat {
    prefix: "philly",
    arg: "FILE",
    summary: "Pollux's digest of the Philly trace (duration-only jobs, any device type)",
    uses_apps: true,
    load: |arg: &str, _: &TraceContext| -> Result<Vec<SimJob>, TraceError> {
        Ok(load_philly(
            &super::read(arg, pacer_fsio::limits::TRACE)?,
            arg,
        )?)
    },
};

/// Parses `YYYY-MM-DD HH:MM:SS` to seconds since the epoch.
pub fn parse_timestamp(s: &str) -> Option<f64> {
    let (date, time) = s.trim().split_once(' ')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|x| x.parse::<f64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = match mo {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    // Four-digit years only: `days_from_civil` overflows i64 for years near ±2^63.
    if !(0..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=month_days).contains(&da)
        || !(0.0..24.0).contains(&h)
        || !(0.0..60.0).contains(&mi)
        || !(0.0..61.0).contains(&se)
    {
        return None;
    }
    Some(days_from_civil(y, mo, da) as f64 * 86_400.0 + h * 3600.0 + mi * 60.0 + se)
}

/// Pollux's digest of the Philly trace: `timestamp,duration,num_gpus,gpu_time,cluster`.
/// Jobs are duration-only: `duration` seconds on `num_gpus` devices. Arrivals are
/// relative to the earliest timestamp.
pub fn load_philly(text: &str, origin: &str) -> Result<Vec<SimJob>, ParseError> {
    let (idx, rows) = csv_records(text, origin, &["timestamp", "duration", "num_gpus"])?;
    let mut jobs = Vec::with_capacity(rows.len());
    for (line, rec) in rows {
        let ts = parse_timestamp(&rec[idx[0]]).ok_or_else(|| {
            ParseError::at(
                origin,
                line,
                format!(
                    "column `timestamp`: `{}` is not YYYY-MM-DD HH:MM:SS",
                    &rec[idx[0]]
                ),
            )
        })?;
        let duration = parse_f64(rec[idx[1]].trim(), "duration", origin, line)?;
        if duration <= 0.0 {
            return Err(ParseError::at(
                origin,
                line,
                format!("column `duration`: {duration} must be > 0"),
            ));
        }
        let gpus = positive_u32(&rec[idx[2]], "num_gpus", origin, line)?;
        jobs.push(SimJob {
            spec: JobSpec {
                name: format!("philly-{}", jobs.len()),
                arrival_s: ts,
                application: "philly".into(),
                requested_replicas: gpus,
                requested_batch: 0,
                service_gpu_s: Some(duration * gpus as f64),
                device_type: None,
            },
            work: Work::Duration {
                duration_s: duration,
            },
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

    #[test]
    fn philly_timestamps_relative() {
        let jobs = load_philly(
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 06:13:03,10,2,20,b\n",
            "p.csv",
        )
        .unwrap();
        assert_eq!(jobs[1].spec.arrival_s, 0.0);
        assert_eq!(jobs[0].spec.arrival_s, 48.0 * 60.0 + 52.0);
        let e = load_philly(
            "timestamp,duration,num_gpus\n2017-13-01 00:00:00,1,1\n",
            "p.csv",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("p.csv:2: column `timestamp`"),
            "{e}"
        );
        assert_eq!(parse_timestamp("1970-01-02 00:00:01"), Some(86_401.0));
        // Days the month does not have were silently moved into the next month.
        assert_eq!(parse_timestamp("2017-02-31 12:00:00"), None);
        assert_eq!(parse_timestamp("2017-04-31 12:00:00"), None);
        assert_eq!(parse_timestamp("2017-02-29 12:00:00"), None);
        assert!(parse_timestamp("2016-02-29 12:00:00").is_some());
        assert!(parse_timestamp("2000-02-29 12:00:00").is_some());
        assert_eq!(parse_timestamp("1900-02-29 12:00:00"), None);
    }
}
