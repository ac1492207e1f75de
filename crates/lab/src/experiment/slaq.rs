//! `pacer-lab slaq`: SLAQ against work-conserving fair share on jobs that
//! replay real loss curves, as in the SLAQ paper (160 jobs, Poisson arrivals, a
//! mix of algorithms); and the loss-prediction error per algorithm.
//!
//! Quality metrics, per job with recorded initial loss `L_0` and best loss
//! `L_min`: normalised loss `(L − L_min) / (L_0 − L_min)` (1 at the start, 0 when
//! converged); the *average normalised loss over time* is the mean over the
//! active jobs, averaged over the rounds of the run; *time to q%* is the time
//! from a job's arrival until its loss first achieves q% of its reduction
//! `L_0 − L_min` (interpolated between rounds).

use super::{plot, record};
use anyhow::{bail, Context, Result};
use clap::Args;
use pacer_model::{ClusterSpec, JobSpec};
use pacer_predict::loss_curve::{last_delta_prediction, LossPredictor};
use pacer_sim::quality::{embedded_quality_profiles, QualityProfile};
use pacer_sim::{SimConfig, SimJob, Simulation, Work};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct SlaqArgs {
    /// Output folder (results.md, results.json, quality.svg). The default is
    /// outside the source tree's committed results; regenerate those with
    /// `--out experiments/slaq`.
    #[arg(long, default_value = "pacer-out/experiment-slaq")]
    pub out: PathBuf,
    /// Re-record the job-quality profiles first (trains real models on MNIST).
    #[arg(long)]
    pub record: bool,
    /// MNIST folder for --record.
    #[arg(long, default_value = "../shared/data/mnist")]
    pub mnist: PathBuf,
    /// Where --record writes the profiles (the simulator embeds this folder).
    #[arg(long, default_value = "crates/sim/data/slaq")]
    pub profiles_out: PathBuf,
    /// Read profiles from this folder instead of the embedded ones.
    #[arg(long)]
    pub profiles: Option<PathBuf>,
    #[arg(long, default_value_t = 160)]
    pub jobs: usize,
    /// Mean time between arrivals (s), Poisson process.
    #[arg(long, default_value_t = 0.05)]
    pub interarrival_s: f64,
    /// Cluster of workers (one device = one worker).
    #[arg(long, default_value = "16x4:cpu")]
    pub cluster: String,
    /// Scheduling epoch (s): SLAQ re-plans every epoch and predicts one epoch ahead.
    /// 2 ms is 2–3 iterations of a job on many workers and about 1/20 of the
    /// median job's time to 90% under fair share, the paper's regime (an epoch of
    /// seconds against jobs that run many epochs); see results.md.
    #[arg(long, default_value_t = 0.002)]
    pub round_s: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run the SLAQ variant normalising by each job's expected reduction.
    #[arg(long)]
    pub range_variant: bool,
    /// Also run SLAQ and fair on other loads (cluster × arrival rate) and report
    /// how the gains move.
    #[arg(long)]
    pub sweep: bool,
}

/// Loads of `--sweep`: (cluster, mean interarrival s, epoch s; `None` = `--round-s`).
/// The last two rows are the headline load at longer epochs (0.02 s was the
/// setup before the epoch was matched to the profiles' time scale).
const SWEEP: &[(&str, f64, Option<f64>)] = &[
    ("16x4:cpu", 0.1, None),
    ("16x4:cpu", 0.05, None),
    ("16x4:cpu", 0.03, None),
    ("16x4:cpu", 0.02, None),
    ("16x4:cpu", 0.01, None),
    ("32x4:cpu", 0.05, None),
    ("8x4:cpu", 0.1, None),
    ("16x4:cpu", 0.05, Some(0.005)),
    ("16x4:cpu", 0.05, Some(0.02)),
];

#[derive(Debug, Serialize)]
struct PolicyResult {
    policy: String,
    avg_norm_loss: f64,
    mean_time_to_90_s: f64,
    mean_time_to_95_s: f64,
    median_time_to_90_s: f64,
    mean_jct_s: f64,
    makespan_s: f64,
    wall_ms: f64,
    /// Mean time to 90% and 95% per profile.
    per_profile: Vec<(String, f64, f64)>,
    #[serde(skip)]
    series: Vec<(f64, f64)>,
}

#[derive(Debug, Serialize)]
struct PredRow {
    algorithm: String,
    horizon: u32,
    strawman_pct: f64,
    fit_pct: f64,
    points: usize,
}

fn load_profiles(args: &SlaqArgs) -> Result<Vec<Arc<QualityProfile>>> {
    if args.record {
        let v = record::record_all(&args.mnist, &args.profiles_out, args.seed)?;
        return Ok(v.into_iter().map(Arc::new).collect());
    }
    if let Some(dir) = &args.profiles {
        let mut out = Vec::new();
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("--profiles {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "csv"))
            .collect();
        paths.sort();
        for p in paths {
            let name = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let text = pacer_fsio::read_to_string_limited(&p, pacer_fsio::limits::TABLE)?;
            out.push(Arc::new(QualityProfile::parse(
                &text,
                &name,
                &p.display().to_string(),
            )?));
        }
        if out.is_empty() {
            bail!(
                "--profiles {}: no profiles here; expected *.csv files as written by --record",
                dir.display()
            );
        }
        return Ok(out);
    }
    let v = embedded_quality_profiles();
    if v.is_empty() {
        bail!("no embedded quality profiles (crates/sim/data/slaq is empty); run with --record");
    }
    Ok(v)
}

/// 160 jobs (by default) with Poisson arrivals, each a uniformly drawn profile.
fn workload(profiles: &[Arc<QualityProfile>], args: &SlaqArgs) -> Vec<SimJob> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut t = 0.0;
    (0..args.jobs)
        .map(|k| {
            if k > 0 {
                // Exponential gap by inversion.
                let u: f64 = rng.random();
                t += -args.interarrival_s * (1.0 - u).ln();
            }
            let p = profiles[rng.random_range(0..profiles.len())].clone();
            let max_w = p.iter_time.last().map_or(1, |x| x.0);
            SimJob {
                spec: JobSpec {
                    name: format!("{}-{k}", p.name),
                    arrival_s: t,
                    application: p.name.clone(),
                    requested_replicas: max_w,
                    requested_batch: 0,
                    service_gpu_s: None,
                    device_type: None,
                },
                work: Work::LossCurve { profile: p },
            }
        })
        .collect()
}

/// First recorded iteration at which the loss achieved `q` of its reduction.
fn iteration_at(p: &QualityProfile, q: f64) -> f64 {
    let (l0, lmin) = (p.initial_loss(), p.final_loss());
    let target = l0 - q * (l0 - lmin);
    p.curve
        .iter()
        .find(|c| c.1 <= target)
        .map_or(p.total_iterations(), |c| c.0)
}

fn run_policy(
    name: &str,
    cluster: &ClusterSpec,
    jobs: &[SimJob],
    args: &SlaqArgs,
) -> Result<PolicyResult> {
    let mut policy: Box<dyn pacer_policy::Policy> = if name.starts_with("slaq") {
        Box::new(pacer_policy::slaq::Slaq {
            horizon_s: args.round_s,
            min_share: 1,
            normalise_by_range: name == "slaq-range",
        })
    } else {
        pacer_policy::by_name(name).context("policy")?
    };
    let sim = Simulation {
        cluster,
        apps: &[],
        jobs,
        config: SimConfig {
            round_s: args.round_s,
            // Re-assigning a worker (an executor core) costs no restart here.
            restart_s: 0.0,
            record_timeline: false,
            ..SimConfig::default()
        },
    };
    let n = jobs.len();
    let profiles: Vec<&QualityProfile> = jobs
        .iter()
        .map(|j| match &j.work {
            Work::LossCurve { profile } => profile.as_ref(),
            _ => unreachable!("SLAQ workload"),
        })
        .collect();
    let mut series = Vec::new();
    let mut trace: Vec<Vec<(f64, f64)>> = vec![Vec::new(); n];
    let res = sim.run(policy.as_mut(), |info| {
        let mut sum = 0.0;
        let mut active = 0;
        for i in 0..n {
            if !info.arrived(i) {
                continue;
            }
            let p = profiles[i];
            let it = info.progress(i) * p.total_iterations();
            if trace[i].last().is_none_or(|l| l.1 < p.total_iterations()) {
                trace[i].push((info.now_s, it));
            }
            if info.finished(i) {
                continue;
            }
            let (l0, lmin) = (p.initial_loss(), p.final_loss());
            let l = info.loss(i).expect("loss-curve job");
            sum += ((l - lmin) / (l0 - lmin).max(1e-12)).clamp(0.0, 1.0);
            active += 1;
        }
        if active > 0 {
            series.push((info.now_s, sum / active as f64));
        }
    })?;
    let time_to = |q: f64| -> Vec<f64> {
        (0..n)
            .map(|i| {
                let k = iteration_at(profiles[i], q);
                let arr = jobs[i].spec.arrival_s;
                let tr = &trace[i];
                // Progress is linear within a round: interpolate the crossing.
                let mut prev = (arr, 0.0);
                for &(t, it) in tr {
                    if it >= k {
                        let f = if it > prev.1 {
                            (k - prev.1) / (it - prev.1)
                        } else {
                            1.0
                        };
                        return prev.0 + f * (t - prev.0) - arr;
                    }
                    prev = (t, it);
                }
                res.jobs[i].completion_s.unwrap_or(f64::NAN) - arr
            })
            .collect()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let t90 = time_to(0.90);
    let t95 = time_to(0.95);
    let mut s90 = t90.clone();
    s90.sort_by(f64::total_cmp);
    let mut names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    names.dedup();
    let per_profile = names
        .iter()
        .map(|n| {
            let sel: Vec<usize> = (0..n_jobs(jobs))
                .filter(|&i| profiles[i].name == *n)
                .collect();
            let m = |v: &[f64]| sel.iter().map(|&i| v[i]).sum::<f64>() / sel.len().max(1) as f64;
            (n.to_string(), m(&t90), m(&t95))
        })
        .collect();
    Ok(PolicyResult {
        policy: name.to_string(),
        avg_norm_loss: mean(&series.iter().map(|s| s.1).collect::<Vec<_>>()),
        mean_time_to_90_s: mean(&t90),
        mean_time_to_95_s: mean(&t95),
        median_time_to_90_s: s90[s90.len() / 2],
        mean_jct_s: res.summary.avg_jct_s,
        makespan_s: res.summary.makespan_s,
        wall_ms: res.summary.wall_ms,
        per_profile,
        series,
    })
}

fn n_jobs(jobs: &[SimJob]) -> usize {
    jobs.len()
}

/// Prediction error |L̂ − L| / L (%) of the strawman and the weighted fit, `h`
/// iterations ahead, from histories cut at 10%, 20%, … 80% of each run.
fn prediction_errors(profiles: &[Arc<QualityProfile>]) -> Vec<PredRow> {
    let mut algos: Vec<String> = profiles.iter().map(|p| p.algorithm().to_string()).collect();
    algos.sort();
    algos.dedup();
    let mut rows = Vec::new();
    for h in [1u32, 10, 100] {
        for a in &algos {
            let (mut s_err, mut f_err, mut count) = (0.0, 0.0, 0usize);
            for p in profiles.iter().filter(|p| p.algorithm() == a) {
                let total = p.total_iterations();
                for cut in 1..=8 {
                    let kc = (total * cut as f64 / 10.0).floor();
                    if kc < 8.0 || kc + h as f64 > total {
                        continue;
                    }
                    let mut pred = LossPredictor::default();
                    let mut k = 0.0;
                    while k <= kc {
                        pred.observe(k, p.loss_at(k));
                        k += 1.0;
                    }
                    pred.refit();
                    let target = kc + h as f64;
                    let actual = p.loss_at(target);
                    let fit = pred.predict(target).unwrap_or(f64::NAN);
                    let straw = last_delta_prediction(
                        &[kc - 1.0, kc],
                        &[p.loss_at(kc - 1.0), p.loss_at(kc)],
                        target,
                    )
                    .unwrap_or(f64::NAN);
                    let denom = actual.abs().max(1e-12);
                    s_err += (straw - actual).abs() / denom;
                    f_err += (fit - actual).abs() / denom;
                    count += 1;
                }
            }
            if count > 0 {
                rows.push(PredRow {
                    algorithm: a.clone(),
                    horizon: h,
                    strawman_pct: 100.0 * s_err / count as f64,
                    fit_pct: 100.0 * f_err / count as f64,
                    points: count,
                });
            }
        }
    }
    rows
}

pub fn run(args: SlaqArgs) -> Result<()> {
    super::check_round_s("--round-s", args.round_s)?;
    pacer_cli::out::check_out_dir("--out", &args.out)?;
    pacer_cli::out::check_targets(
        "--out",
        &args.out,
        &["results.md", "results.json", "quality.svg"],
    )?;
    if !(args.interarrival_s > 0.0 && args.interarrival_s.is_finite()) {
        bail!(
            "--interarrival-s: expected a number of seconds > 0, got {}",
            args.interarrival_s
        );
    }
    if args.jobs == 0 {
        bail!("--jobs: expected a whole number ≥ 1, got 0");
    }
    let profiles = load_profiles(&args)?;
    let cluster = ClusterSpec::parse(&args.cluster, "--cluster")?;
    let jobs = workload(&profiles, &args);
    let mut results = Vec::new();
    let mut names = vec!["slaq", "fair"];
    if args.range_variant {
        names.push("slaq-range");
    }
    for p in names {
        results.push(run_policy(p, &cluster, &jobs, &args)?);
    }
    let preds = prediction_errors(&profiles);
    let (s, f) = (&results[0], &results[1]);
    let quality_gain = 1.0 - s.avg_norm_loss / f.avg_norm_loss;
    let t90_gain = 1.0 - s.mean_time_to_90_s / f.mean_time_to_90_s;
    let t95_gain = 1.0 - s.mean_time_to_95_s / f.mean_time_to_95_s;
    let t90_median_gain = 1.0 - s.median_time_to_90_s / f.median_time_to_90_s;

    let gains = Gains {
        quality: quality_gain,
        t90: t90_gain,
        t95: t95_gain,
        t90_median: t90_median_gain,
    };
    let md = markdown(&args, &profiles, &cluster, &results, &preds, &gains)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    pacer_cli::out::write_bytes(&args.out.join("results.md"), &md)?;
    #[derive(Serialize)]
    struct All<'a> {
        policies: &'a [PolicyResult],
        prediction: &'a [PredRow],
        quality_gain: f64,
        time_to_90_gain: f64,
        time_to_95_gain: f64,
    }
    pacer_cli::out::write_bytes(
        &args.out.join("results.json"),
        serde_json::to_string_pretty(&All {
            policies: &results,
            prediction: &preds,
            quality_gain,
            time_to_90_gain: t90_gain,
            time_to_95_gain: t95_gain,
        })?,
    )?;
    plot::lines(
        &args.out.join("quality.svg"),
        "Average normalised loss of active jobs",
        "time (s)",
        "normalised loss",
        &results
            .iter()
            .map(|r| (r.policy.clone(), r.series.clone()))
            .collect::<Vec<_>>(),
    )?;
    pacer_cli::out::print(&format!("{md}written to {}\n", args.out.display()))
}

/// SLAQ's gains over fair share (fractions; > 0: SLAQ better).
struct Gains {
    quality: f64,
    t90: f64,
    t95: f64,
    t90_median: f64,
}

/// `results.md`: the headline table, the sweep (`--sweep`), the per-profile
/// times, the prediction errors, the profiles and the analysis.
fn markdown(
    args: &SlaqArgs,
    profiles: &[Arc<QualityProfile>],
    cluster: &ClusterSpec,
    results: &[PolicyResult],
    preds: &[PredRow],
    gains: &Gains,
) -> Result<String> {
    let (quality_gain, t90_gain, t95_gain, t90_median_gain) =
        (gains.quality, gains.t90, gains.t95, gains.t90_median);
    let mut md = String::new();
    writeln!(md, "# SLAQ vs work-conserving fair share\n")?;
    writeln!(
        md,
        "Regenerate: `pacer-lab slaq --out {}{}{}{}` (seed {}). {} jobs, Poisson arrivals every {:.2} s on \
         average, each replaying one of {} recorded profiles ({}); cluster `{}` ({} workers); \
         scheduling epoch {} s; no restart cost.\n",
        args.out.display(),
        if args.record { " --record" } else { "" },
        if args.range_variant { " --range-variant" } else { "" },
        if args.sweep { " --sweep" } else { "" },
        args.seed,
        args.jobs,
        args.interarrival_s,
        profiles.len(),
        profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
        cluster.describe(),
        cluster.total_gpus(),
        args.round_s
    )?;
    writeln!(md, "| policy | avg normalised loss | mean time to 90% (s) | mean time to 95% (s) | median time to 90% (s) | mean JCT (s) | makespan (s) | wall (ms) |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for r in results {
        writeln!(
            md,
            "| {} | {:.4} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} |",
            r.policy,
            r.avg_norm_loss,
            r.mean_time_to_90_s,
            r.mean_time_to_95_s,
            r.median_time_to_90_s,
            r.mean_jct_s,
            r.makespan_s,
            r.wall_ms
        )?;
    }
    writeln!(
        md,
        "\nSLAQ vs fair: average normalised loss {:+.1}% ({:.1}% better), mean time to 90% {:+.1}% \
         (median {:+.1}%), mean time to 95% {:+.1}%.\n",
        -100.0 * quality_gain,
        100.0 * quality_gain,
        -100.0 * t90_gain,
        -100.0 * t90_median_gain,
        -100.0 * t95_gain
    )?;
    if args.sweep {
        sweep_table(&mut md, args, profiles)?;
    }
    writeln!(md, "Per profile, mean time to 90% / 95% (s):\n")?;
    writeln!(
        md,
        "| profile | {} |",
        results
            .iter()
            .map(|r| format!("{} t90 | {} t95", r.policy, r.policy))
            .collect::<Vec<_>>()
            .join(" | ")
    )?;
    writeln!(md, "|---|{}", "---|---|".repeat(results.len()))?;
    for (k, (name, _, _)) in results[0].per_profile.iter().enumerate() {
        let cells: Vec<String> = results
            .iter()
            .map(|r| format!("{:.3} | {:.3}", r.per_profile[k].1, r.per_profile[k].2))
            .collect();
        writeln!(md, "| {name} | {} |", cells.join(" | "))?;
    }
    writeln!(md)?;
    writeln!(md, "## Loss-prediction error per algorithm\n")?;
    writeln!(
        md,
        "|L̂ − L| / L in %, predicting `h` iterations ahead from the history cut at 10%…80% of each run; \
         strawman = last Δ continued, fit = weighted NLS (decay 0.95, best of 1/(ak²+bk+c)+d and a·e^(−bk)+d).\n"
    )?;
    writeln!(
        md,
        "| algorithm | h | strawman (last Δ) | weighted fit | cuts |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    for r in preds {
        writeln!(
            md,
            "| {} | {} | {:.2}% | {:.2}% | {} |",
            r.algorithm, r.horizon, r.strawman_pct, r.fit_pct, r.points
        )?;
    }
    writeln!(md, "\n## Profiles\n")?;
    writeln!(
        md,
        "| profile | algorithm | iterations | loss start → best | ms/iter on 1 / 8 / 32 workers |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    for p in profiles {
        let t = |w: u32| 1e3 / p.iterations_per_s(w);
        writeln!(
            md,
            "| {} | {} | {} | {:.4} → {:.4} | {:.2} / {:.2} / {:.2} |",
            p.name,
            p.algorithm(),
            p.total_iterations(),
            p.initial_loss(),
            p.final_loss(),
            t(1),
            t(8),
            t(32)
        )?;
    }
    writeln!(md, "{ANALYSIS}")?;
    Ok(md)
}

/// The `--sweep` table: SLAQ's gains over fair at other loads and epochs.
fn sweep_table(md: &mut String, args: &SlaqArgs, profiles: &[Arc<QualityProfile>]) -> Result<()> {
    writeln!(
        md,
        "Other loads and epochs (same seed; gains of SLAQ over fair, negative = SLAQ lower):\n"
    )?;
    writeln!(md, "| cluster | mean interarrival (s) | epoch (s) | avg normalised loss | mean time to 90% | median time to 90% | mean time to 95% |")?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for &(c, ia, epoch) in SWEEP {
        let round_s = epoch.unwrap_or(args.round_s);
        let a2 = SlaqArgs {
            cluster: c.to_string(),
            interarrival_s: ia,
            out: args.out.clone(),
            record: false,
            mnist: args.mnist.clone(),
            profiles_out: args.profiles_out.clone(),
            profiles: args.profiles.clone(),
            jobs: args.jobs,
            round_s,
            seed: args.seed,
            range_variant: false,
            sweep: false,
        };
        let cl = ClusterSpec::parse(c, "sweep")?;
        let w = workload(profiles, &a2);
        let s2 = run_policy("slaq", &cl, &w, &a2)?;
        let f2 = run_policy("fair", &cl, &w, &a2)?;
        let pct = |a: f64, b: f64| 100.0 * (a / b - 1.0);
        writeln!(
            md,
            "| {c} | {ia} | {round_s} | {:+.1}% | {:+.1}% | {:+.1}% | {:+.1}% |",
            pct(s2.avg_norm_loss, f2.avg_norm_loss),
            pct(s2.mean_time_to_90_s, f2.mean_time_to_90_s),
            pct(s2.median_time_to_90_s, f2.median_time_to_90_s),
            pct(s2.mean_time_to_95_s, f2.mean_time_to_95_s)
        )?;
    }
    writeln!(md)?;
    Ok(())
}

/// The time scale of the replay, and why the time-to-90% target (≥ 30% lower than
/// fair share) does not hold on the mean.
const ANALYSIS: &str = "\
## Time scale and epoch

The profiles are replayed at the time per iteration measured when they were recorded \
(MNIST-sized jobs: 0.6–26 ms per iteration, 150–400 iterations), so only ratios matter: \
with no restart cost, scaling every iteration time, the interarrival time and the epoch by \
the same factor changes no result. What matters is the epoch against the jobs. SLAQ \
re-plans every few seconds while its MLlib jobs run many epochs (its prototype, \
`PoolReweighterLoss` in andrewor14/spark, re-plans every `spark.slaq.intervalMs`, 5,000 ms \
in its experiment scripts). The former epoch here, 0.02 s, was half of the median job's \
time to 90% and ~20 iterations of a job on many workers: an allocation then holds for \
most of a short job's useful life (a k-means job given 20 workers for its first epoch \
reaches 90% in its first few iterations and keeps them for the rest of it). The default \
is now 2 ms, 2–3 iterations on many workers and ~1/20 of the median time to 90%; the \
sweep's last rows show the headline load at 5 ms and at the former 0.02 s.

## Why mean time-to-90% is not lower

Read from the per-profile table: SLAQ reaches 90% sooner than fair share for the short \
profiles and later for the long ones (mlp-b, svm-b), whose times dominate the mean; the \
median falls. This is how SLAQ allocates: workers go to the largest predicted *normalised* \
loss decrease over the next epoch. A job's decrease is normalised by its own largest \
per-iteration decrease, so a newcomer is worth ~1 per iteration, while mlp-b between 15% \
and 35% of its run (before its 90% point) decreases by 0.4 to 0.07 of its own largest step \
per iteration and svm-b between 10% and 22% by 0.14 to 0.03 (read from the recorded \
curves). The policy therefore moves workers from these jobs to every newcomer, as \
specified; the predicted gains are not the cause (the prediction-error table: \
10 iterations ahead within ~1.5%). Jobs past their steep part keep the minimum share, one \
worker, which for these profiles is the least efficient size (1 → 2 workers speeds them \
up 1.4–2.9×), so more jobs stay active and the makespan grows. The allocation (minimum share, \
then a max-heap on marginal predicted gain, re-planned every epoch) follows the paper; \
no constant was tuned to move this number. Nor does the load move it to the target: over \
the sweep's loads the mean time to 90% changes by +23% to -11% (best -11.5% at one arrival \
every 0.01 s, where the quality gain has shrunk to -6.5%; the heavier the load beyond the \
headline one, the smaller the quality gain).
";
