//! Seeded synthetic workloads: Poisson arrivals with the Philly trace's job sizes,
//! over the measured applications (`synthetic:JOBS`) or as duration-only jobs with
//! Philly's durations (`synthetic-philly:JOBS`).

use super::{TraceContext, TraceError, TraceFormat};
use crate::apps::AppModel;
use crate::engine::{SimJob, Work};
use pacer_model::JobSpec;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};

/// `synthetic:JOBS`.
pub const FORMAT: TraceFormat = TraceFormat {
    prefix: "synthetic",
    arg: "JOBS",
    summary: "Poisson arrivals (--arrivals-per-hour, --seed) over the measured applications, Philly's job sizes",
    uses_apps: true,
    load: |arg: &str, ctx: &TraceContext| -> Result<Vec<SimJob>, TraceError> {
        Ok(synthetic(&spec(arg, ctx)?, ctx.apps))
    },
};

/// `synthetic-philly:JOBS`.
pub const PHILLY_FORMAT: TraceFormat = TraceFormat {
    prefix: "synthetic-philly",
    arg: "JOBS",
    summary: "duration-only jobs with Philly's size and duration distributions (--arrivals-per-hour, --seed)",
    uses_apps: true,
    load: |arg: &str, ctx: &TraceContext| -> Result<Vec<SimJob>, TraceError> {
        Ok(synthetic_philly(&spec(arg, ctx)?))
    },
};

/// The most jobs a synthetic trace may have (docs/limits.md). Checked before anything
/// is allocated: `synthetic:1000000000` aborted allocating 136 GB. 10^7 jobs take
/// about 1.4 GB as a trace, and a simulation of them hours.
pub const MAX_JOBS: usize = 10_000_000;

/// The generator's settings for `JOBS` jobs drawn for the context's cluster.
fn spec(arg: &str, ctx: &TraceContext) -> Result<SyntheticSpec, TraceError> {
    let jobs: usize = pacer_model::error::parse_whole(arg, 1)
        .map_err(|e| TraceError::Spec(format!("expected JOBS, a whole number ≥ 1: {e}")))?;
    if jobs > MAX_JOBS {
        return Err(TraceError::Spec(format!(
            "JOBS {jobs} is too many; at most {MAX_JOBS} jobs"
        )));
    }
    if !(ctx.arrivals_per_hour > 0.0 && ctx.arrivals_per_hour.is_finite()) {
        return Err(TraceError::Spec(format!(
            "arrivals per hour: expected a number > 0, got {}",
            ctx.arrivals_per_hour
        )));
    }
    Ok(SyntheticSpec {
        jobs,
        arrivals_per_hour: ctx.arrivals_per_hour,
        seed: ctx.seed,
        max_replicas: Some(ctx.cluster.total_gpus()),
    })
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
    use crate::apps::embedded_profiles;

    fn apps() -> Vec<AppModel> {
        embedded_profiles().into_iter().map(AppModel::new).collect()
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
