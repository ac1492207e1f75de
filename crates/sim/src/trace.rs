//! Workload loaders: Pollux workload CSV, Pollux's digest of the Philly trace,
//! Gavel's `.trace` files (with `simulation_throughputs.json`), and a seeded
//! synthetic generator. Each returns [`SimJob`]s; errors name `file:line`.

use crate::apps::AppModel;
use crate::engine::{SimJob, Work};
use pacer_model::profile::parse_f64;
use pacer_model::{JobSpec, ParseError};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};

fn app_index(
    apps: &[AppModel],
    name: &str,
    origin: &str,
    line: usize,
) -> Result<usize, ParseError> {
    apps.iter().position(|a| a.name() == name).ok_or_else(|| {
        let known: Vec<&str> = apps.iter().map(|a| a.name()).collect();
        ParseError::at(
            origin,
            line,
            format!(
                "unknown application `{name}`; expected one of {}",
                known.join(", ")
            ),
        )
    })
}

/// Column indices (in expected order) and the data records with their line numbers.
type CsvRows = (Vec<usize>, Vec<(usize, csv::StringRecord)>);

fn csv_records(text: &str, origin: &str, expected: &[&str]) -> Result<CsvRows, ParseError> {
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = rdr
        .headers()
        .map_err(|e| ParseError::at(origin, 1, format!("unreadable header: {e}")))?
        .clone();
    let idx = expected
        .iter()
        .map(|name| {
            header
                .iter()
                .position(|h| h.trim() == *name)
                .ok_or_else(|| {
                    ParseError::at(
                        origin,
                        1,
                        format!(
                            "missing column `{name}`; expected columns {}",
                            expected.join(",")
                        ),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::new();
    // One record read into and copied out compactly: `records()` clones the
    // reader's record with the field-end table of the widest row so far, so one
    // wide row made every later row as big (quadratic memory).
    let mut rec = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line() as usize);
                return Err(ParseError::at(
                    origin,
                    line,
                    format!("unreadable CSV record: {e}"),
                ));
            }
        }
        let line = rec.position().map_or(0, |p| p.line() as usize);
        if rec.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        if idx.iter().any(|&i| i >= rec.len()) {
            return Err(ParseError::at(
                origin,
                line,
                format!("has {} fields; expected {}", rec.len(), header.len()),
            ));
        }
        rows.push((line, rec.iter().collect()));
    }
    Ok((idx, rows))
}

fn positive_u32(field: &str, column: &str, origin: &str, line: usize) -> Result<u32, ParseError> {
    pacer_model::error::parse_whole(field, 1)
        .map_err(|e| ParseError::at(origin, line, format!("column `{column}`: {e}")))
}

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

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

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

/// Gavel `.trace` (tab separated: job_type, command, num_steps_arg,
/// needs_data_dir, total_steps, arrival_time, scale_factor). A job's duration is
/// `total_steps` at its isolated throughput on `device` with `scale_factor` devices.
pub fn load_gavel_trace(
    text: &str,
    origin: &str,
    tput: &GavelThroughputs,
    device: &str,
) -> Result<Vec<SimJob>, ParseError> {
    let mut jobs = Vec::new();
    for (k, line) in text.lines().enumerate() {
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
        let scale = positive_u32(f[6], "scale_factor", origin, line_no)?;
        if steps <= 0.0 || arrival < 0.0 {
            return Err(ParseError::at(
                origin,
                line_no,
                "total_steps must be > 0 and arrival_time ≥ 0",
            ));
        }
        let job_type = f[0].trim();
        let rate = tput
            .get(&(job_type.to_string(), scale))
            .and_then(|m| m.get(device))
            .copied()
            .filter(|r| *r > 0.0)
            .ok_or_else(|| {
                ParseError::at(
                    origin,
                    line_no,
                    format!(
                        "no throughput for job type `{job_type}` at scale {scale} on `{device}`"
                    ),
                )
            })?;
        jobs.push(SimJob {
            spec: JobSpec {
                name: format!("gavel-{}", jobs.len()),
                arrival_s: arrival,
                application: job_type.to_string(),
                requested_replicas: scale,
                requested_batch: 0,
                service_gpu_s: Some(steps / rate * scale as f64),
                // Its duration is `device`'s throughput: ground truth on that type only.
                device_type: Some(device.to_string()),
            },
            work: Work::Duration {
                duration_s: steps / rate,
            },
        });
    }
    if jobs.is_empty() {
        return Err(ParseError::whole(origin, "no jobs"));
    }
    Ok(jobs)
}

/// Settings of the synthetic generator.
#[derive(Debug, Clone)]
pub struct SyntheticSpec {
    pub jobs: usize,
    /// Mean arrivals per hour (Poisson process).
    pub arrivals_per_hour: f64,
    pub seed: u64,
    /// Largest job drawn (the cluster's size): a drawn size above it is lowered to
    /// it, as a generated job asks for what the cluster it is generated for has.
    /// `None`: Philly's sizes as drawn (up to 16).
    pub max_replicas: Option<u32>,
}

impl SyntheticSpec {
    fn size(&self, drawn: u32) -> u32 {
        self.max_replicas.map_or(drawn, |m| drawn.min(m.max(1)))
    }
}

/// Job-size mix of the Philly trace (Pollux's digest, 82,247 jobs): share of jobs
/// asking for 1, 2, 3–4, 5–8 and more than 8 GPUs (the last drawn as 16).
pub const PHILLY_SIZE_SHARES: [(u32, f64); 5] = [
    (1, 0.93167),
    (2, 0.0221),
    (4, 0.02274),
    (8, 0.01998),
    (16, 0.00351),
];

/// Duration quantiles (seconds) of Philly jobs per size class, at 0%, 5%, …, 100%,
/// read off the same digest.
pub const PHILLY_DURATION_QUANTILES: [[f64; 21]; 5] = [
    [
        1., 52., 62., 69., 76., 122., 215., 385., 600., 855., 1117., 1446., 1728., 2054., 2464.,
        2716., 3754., 5342., 8512., 19137., 3256045.,
    ],
    [
        2., 9., 11., 13., 15., 16., 17., 18., 19., 20., 21., 23., 25., 28., 33., 76., 150., 22165.,
        72361., 197004., 2582803.,
    ],
    [
        3., 75., 138., 179., 406., 772., 1696., 4456., 7475., 13082., 17388., 26253., 36253.,
        56900., 78636., 89422., 106275., 151663., 184426., 274339., 2750674.,
    ],
    [
        1., 125., 216., 463., 783., 1871., 4059., 7268., 12390., 16653., 23683., 36588., 64753.,
        105906., 140659., 173288., 203140., 242280., 352409., 525631., 4628226.,
    ],
    [
        1., 35., 73., 210., 345., 566., 880., 1571., 3165., 8846., 21137., 45047., 53862., 58735.,
        73728., 104218., 158329., 181596., 246825., 446126., 1710643.,
    ],
];

/// Index into [`PHILLY_SIZE_SHARES`] drawn by its shares.
fn philly_size_class(rng: &mut impl Rng) -> usize {
    let u: f64 = rng.random();
    let mut acc = 0.0;
    for (i, (_, p)) in PHILLY_SIZE_SHARES.iter().enumerate() {
        acc += p;
        if u <= acc {
            return i;
        }
    }
    PHILLY_SIZE_SHARES.len() - 1
}

/// A duration drawn from the class's empirical quantiles, log-linear between them.
fn philly_duration(class: usize, rng: &mut impl Rng) -> f64 {
    let q = &PHILLY_DURATION_QUANTILES[class];
    let x: f64 = rng.random::<f64>() * 20.0;
    let k = (x.floor() as usize).min(19);
    let t = x - k as f64;
    (q[k].ln() + t * (q[k + 1].ln() - q[k].ln())).exp()
}

/// Seeded synthetic duration-only workload shaped like the Philly trace: Poisson
/// arrivals, job sizes and durations drawn from Philly's empirical distributions.
pub fn synthetic_philly(spec: &SyntheticSpec) -> Vec<SimJob> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    let gap = Exp::new(spec.arrivals_per_hour.max(1e-9) / 3600.0).expect("positive rate");
    let mut t = 0.0;
    (0..spec.jobs)
        .map(|k| {
            t += gap.sample(&mut rng);
            let class = philly_size_class(&mut rng);
            let gpus = spec.size(PHILLY_SIZE_SHARES[class].0);
            let duration = philly_duration(class, &mut rng).max(1.0);
            SimJob {
                spec: JobSpec {
                    name: format!("synthetic-philly-{k}"),
                    arrival_s: t.round(),
                    application: "philly".into(),
                    requested_replicas: gpus,
                    requested_batch: 0,
                    service_gpu_s: Some(duration * gpus as f64),
                    device_type: None,
                },
                work: Work::Duration {
                    duration_s: duration,
                },
            }
        })
        .collect()
}

/// Seeded synthetic workload over the measured applications: Poisson arrivals,
/// application uniform, requested devices from the Philly trace's job-size mix
/// ([`PHILLY_SIZE_SHARES`], at most [`SyntheticSpec::max_replicas`]), and a requested batch among the application's
/// validated sizes that fits those devices. How long a job runs follows from its
/// application's measured convergence, not from Philly's durations.
pub fn synthetic(spec: &SyntheticSpec, apps: &[AppModel]) -> Vec<SimJob> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(spec.seed);
    let gap = Exp::new(spec.arrivals_per_hour.max(1e-9) / 3600.0).expect("positive rate");
    let mut t = 0.0;
    let mut jobs = Vec::with_capacity(spec.jobs);
    for k in 0..spec.jobs {
        t += gap.sample(&mut rng);
        let app_i = rng.random_range(0..apps.len());
        let app = &apps[app_i];
        let replicas = spec.size(PHILLY_SIZE_SHARES[philly_size_class(&mut rng)].0);
        let fits: Vec<u32> = app
            .profile
            .validation
            .iter()
            .map(|c| c.global_batch)
            .filter(|&b| {
                b as f64 >= app.min_local_bsz * replicas as f64
                    && b as f64 <= app.max_local_bsz * replicas as f64 * 4.0
            })
            .collect();
        let batch = if fits.is_empty() {
            app.max_batch as u32
        } else {
            fits[rng.random_range(0..fits.len())]
        };
        jobs.push(SimJob {
            spec: JobSpec {
                name: format!("{}-{k}", app.name()),
                arrival_s: t.round(),
                application: app.name().to_string(),
                requested_replicas: replicas,
                requested_batch: batch,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Profiled { app: app_i },
        });
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::{embedded_profiles, AppModel};

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

    #[test]
    fn gavel_trace_and_throughputs() {
        let t = load_gavel_throughputs(
            r#"{"v100": {"('ResNet-18 (batch size 16)', 1)": {"null": 20.0, "('x', 1)": [1, 2]}}}"#,
            "t.json",
        )
        .unwrap();
        let jobs = load_gavel_trace(
            "ResNet-18 (batch size 16)\tcmd\t-n\t1\t2000\t6.0\t1\n",
            "a.trace",
            &t,
            "v100",
        )
        .unwrap();
        assert_eq!(jobs.len(), 1);
        assert!(
            matches!(jobs[0].work, Work::Duration { duration_s } if (duration_s - 100.0).abs() < 1e-9)
        );
        let e = load_gavel_trace(
            "ResNet-18 (batch size 16)\tcmd\t-n\t1\t2000\t6.0\n",
            "a.trace",
            &t,
            "v100",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("a.trace:1: has 6"), "{e}");
        let e = load_gavel_trace("Other\tcmd\t-n\t1\t2000\t6.0\t1\n", "a.trace", &t, "v100")
            .unwrap_err();
        assert!(e.to_string().contains("no throughput"), "{e}");
    }

    #[test]
    fn synthetic_is_seeded() {
        let a = apps();
        let s = SyntheticSpec {
            jobs: 50,
            arrivals_per_hour: 20.0,
            seed: 3,
            max_replicas: None,
        };
        let x = synthetic(&s, &a);
        let y = synthetic(&s, &a);
        assert_eq!(
            x.iter()
                .map(|j| (&j.spec.name, j.spec.arrival_s))
                .collect::<Vec<_>>(),
            y.iter()
                .map(|j| (&j.spec.name, j.spec.arrival_s))
                .collect::<Vec<_>>()
        );
        let z = synthetic(
            &SyntheticSpec {
                seed: 4,
                ..s.clone()
            },
            &a,
        );
        let p = synthetic_philly(&SyntheticSpec { jobs: 4000, ..s });
        let singles = p.iter().filter(|j| j.spec.requested_replicas == 1).count() as f64 / 4000.0;
        assert!((singles - 0.93).abs() < 0.02, "{singles}");
        let mut d: Vec<f64> = p
            .iter()
            .filter(|j| j.spec.requested_replicas == 1)
            .map(|j| match j.work {
                Work::Duration { duration_s } => duration_s,
                _ => unreachable!(),
            })
            .collect();
        d.sort_by(f64::total_cmp);
        let median = d[d.len() / 2];
        assert!(
            (700.0..1600.0).contains(&median),
            "median single-GPU duration {median}"
        );
        assert_ne!(x[0].spec.arrival_s, z[0].spec.arrival_s);
        // Sizes capped at the cluster's; arrivals unchanged.
        let capped = SyntheticSpec {
            jobs: 300,
            max_replicas: Some(2),
            ..s.clone()
        };
        let free = SyntheticSpec {
            max_replicas: None,
            ..capped.clone()
        };
        for (a, b) in [
            (synthetic(&capped, &a), synthetic(&free, &a)),
            (synthetic_philly(&capped), synthetic_philly(&free)),
        ] {
            assert!(b.iter().any(|j| j.spec.requested_replicas > 2));
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.spec.requested_replicas, y.spec.requested_replicas.min(2));
                assert_eq!(x.spec.arrival_s, y.spec.arrival_s);
            }
        }
    }
}
