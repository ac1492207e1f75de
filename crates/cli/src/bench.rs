//! `pacer bench`: speed measurements (never asserted in tests).
//!
//! - `pacer bench round`: one scheduling round of a policy on a large synthetic
//!   cluster (default 4,000 jobs on 16,000 GPUs), cold (first round, empty
//!   caches) and warm (later rounds where 10% of jobs changed their model).
//!   Jobs carry goodput models, speeds per device type (`--types 3` splits the
//!   cluster into V100/P100/K80), work estimates and fitted loss curves, so every
//!   policy has its inputs. Cold rounds are the decision latency of the
//!   auction-based (Themis: all devices up for auction) and LP-based (Gavel: a
//!   full solve) policies; their warm rounds mostly keep leases / reuse the LP.
//! - `pacer bench simulate`: whole simulations of the embedded Pollux workloads
//!   per policy, with the same run repeated to report the median wall time.
//! - `pacer bench scale`: whole simulations of seeded synthetic traces of growing
//!   size (default 1k, 10k, 100k jobs) on a cluster they overload, so queues grow
//!   to thousands of jobs: wall and CPU time per run and per round (the curve of
//!   simulation time against job count).

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use pacer_cli::json::{BenchRound, LpReport, RoundReport, ScaleReport, SimReport};
use pacer_control::job::decide::fit_step_model;
use pacer_model::{Allocation, ClusterSpec, JobId};
use pacer_policy::job_view::{JobFacts, ReplicaBound};
use pacer_policy::{ClusterView, JobView};
use pacer_predict::goodput::{BatchLimits, GoodputFn, GradParams, PerfObservation};
use pacer_sim::apps::EMBEDDED_WORKLOADS;
use pacer_sim::{trace, SimConfig, Simulation};
use rand::{Rng, SeedableRng};
use std::time::Instant;

mod round_sim;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchWhat,
}

#[derive(Debug, Subcommand)]
pub enum BenchWhat {
    /// Time one scheduling round at scale.
    Round(RoundArgs),
    /// Time whole simulations of the embedded Pollux workloads.
    Simulate(SimBenchArgs),
    /// Time whole simulations of synthetic traces of growing size (long queues).
    Scale(ScaleArgs),
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// Job counts, comma separated (a `synthetic:N` trace each).
    #[arg(long, default_value = "1000,10000,100000")]
    pub jobs: String,
    /// Policies, comma separated, or `all`.
    #[arg(long, default_value = "fifo,fair,tiresias")]
    pub policy: String,
    /// Cluster; the default, 512 T4s, is overloaded by 40 arrivals an hour (queues
    /// grow to tens of thousands of jobs) yet finishes 100k jobs within the horizon.
    #[arg(long, default_value = "128x4:t4")]
    pub cluster: String,
    /// Mean arrivals per hour of the synthetic traces.
    #[arg(long, default_value_t = 40.0)]
    pub arrivals_per_hour: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Scheduling round length (s).
    #[arg(long, default_value_t = 60.0)]
    pub round_s: f64,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RoundArgs {
    #[arg(long, default_value_t = 4000)]
    pub jobs: usize,
    #[arg(long, default_value_t = 16000)]
    pub gpus: u32,
    /// Devices per node.
    #[arg(long, default_value_t = 4)]
    pub gpus_per_node: u32,
    /// Device types (1–3: v100, p100, k80), nodes split evenly; jobs get a speed per
    /// type (for the heterogeneity-aware policies), a work estimate and a loss curve.
    #[arg(long, default_value_t = 1)]
    pub types: u32,
    /// Policies, comma separated, or `all`.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Warm rounds to time after the first.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Time every round of a whole simulation of this Pollux-format workload CSV
    /// instead of synthetic jobs (with `--apps` and `--cluster`; `--jobs`, `--gpus`,
    /// `--gpus-per-node`, `--types` and `--rounds` do not apply).
    #[arg(long, value_name = "FILE")]
    pub workload: Option<String>,
    /// Applications of `--workload`: `sia:DIR` or `sia-uncalibrated:DIR` (Sia's
    /// per-type tables); absent: the embedded Pollux ones.
    #[arg(long, value_name = "KIND:DIR")]
    pub apps: Option<String>,
    /// Cluster of `--workload` (spec or TOML file).
    #[arg(long, default_value = "6x4:aws,2x8:dgx-ext,3x8:rtx")]
    pub cluster: String,
    /// Scheduling round of `--workload` (s).
    #[arg(long, default_value_t = 60.0)]
    pub round_s: f64,
    /// `--workload`'s jobs accept allocations across device types (`pacer simulate
    /// --mixed-types`; for `sia-pacer-mix`).
    #[arg(long)]
    pub mixed_types: bool,
    /// `--workload`'s what-if: every type's cross-node sync is TYPE's (`pacer simulate
    /// --shared-fabric`).
    #[arg(long, value_name = "TYPE")]
    pub shared_fabric: Option<String>,
    /// Per-type models the policies see for `--workload`'s per-type applications
    /// (`pacer simulate --profiles`: `fitted` or `online`).
    #[arg(long, default_value = "fitted")]
    pub profiles: pacer_sim::ProfileMode,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SimBenchArgs {
    /// Policies, comma separated, or `all`.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Embedded workloads to run (`all` or a name such as workload-1).
    #[arg(long, default_value = "all")]
    pub workload: String,
    /// Repetitions of each run (median reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.what {
        BenchWhat::Round(a) => round(a),
        BenchWhat::Simulate(a) => simulate(a),
        BenchWhat::Scale(a) => scale(a),
    }
}

/// Goodput models fitted once to each embedded application's measured placements,
/// so the Pollux-style policy works on realistic curves.
fn app_goodputs() -> Vec<GoodputFn> {
    pacer_sim::embedded_profiles()
        .into_iter()
        .map(|p| {
            let m = pacer_sim::AppModel::new(p);
            let obs: Vec<PerfObservation> = m
                .profile
                .placements
                .iter()
                .map(|r| PerfObservation {
                    nodes: r.num_nodes(),
                    replicas: r.num_replicas(),
                    atomic_bsz: r.local_bsz,
                    compute_time_s: (r.step_time_s - r.sync_time_s).max(1e-6),
                    step_time_s: r.step_time_s,
                })
                .collect();
            let perf = fit_step_model(&obs, None).expect("embedded tables fit");
            let (sqr, var) = m.grad_stats(m.init_batch, 1);
            GoodputFn {
                perf,
                grad: GradParams { sqr, var },
                limits: BatchLimits {
                    base_batch: m.init_batch,
                    max_batch: m.max_batch,
                    min_atomic: m.min_local_bsz,
                    max_atomic: m.max_local_bsz,
                    accumulation: true,
                },
            }
        })
        .collect()
}

/// A job's speed (units/s) per device type: concave in devices up to twice its
/// request, V100 ≥ P100 ≥ K80 by job-dependent ratios, spreading costs 0–30%.
fn bench_speed(rng: &mut impl Rng, types: u32, r: u32) -> pacer_policy::SpeedTable {
    let base = rng.random_range(0.5..2.0);
    let factors = [1.0, rng.random_range(0.3..0.9), rng.random_range(0.1..0.4)];
    let alpha = rng.random_range(0.6..0.95);
    let top = r.saturating_mul(2).max(2);
    let sizes = pacer_policy::SpeedCurve::doubling_sizes(top);
    pacer_policy::SpeedTable {
        per_type: (0..types as usize)
            .map(|t| pacer_policy::SpeedCurve {
                points: sizes
                    .iter()
                    .map(|&d| (d, base * factors[t] * (d as f64).powf(alpha)))
                    .collect(),
                spread_factor: rng.random_range(0.7..1.0),
            })
            .collect(),
    }
}

/// A loss curve in progress, fitted (SLAQ's input).
fn bench_quality(rng: &mut impl Rng) -> pacer_policy::QualityView {
    use pacer_predict::loss_curve::{CurveForm, LossCurve};
    let curve = LossCurve {
        form: if rng.random_bool(0.5) {
            CurveForm::InverseQuadratic
        } else {
            CurveForm::Exponential
        },
        params: [
            rng.random_range(0.1..5.0),
            rng.random_range(0.5..5.0),
            rng.random_range(0.5..2.0),
            rng.random_range(0.0..0.3),
        ],
        k_scale: 1000.0,
        loss_scale: rng.random_range(0.5..10.0),
    };
    let k = rng.random_range(1.0..2000.0);
    pacer_policy::QualityView {
        iteration: k,
        loss: curve.value(k),
        first_loss: curve.value(0.0),
        max_delta_per_iter: (curve.value(0.0) - curve.value(1.0)).abs().max(1e-9),
        curve: Some(curve),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Most jobs `bench round` builds.
const MAX_BENCH_JOBS: usize = 10_000_000;

fn round(a: RoundArgs) -> Result<()> {
    if let Some(file) = &a.workload {
        return round_sim::round_sim(&a, file);
    }
    if a.apps.is_some() {
        bail!("--apps: only with --workload (the synthetic jobs carry their own models)");
    }
    if a.shared_fabric.is_some() {
        bail!("--shared-fabric: only with --workload and --apps sia:DIR");
    }
    if a.mixed_types {
        bail!("--mixed-types: only with --workload and --apps sia:DIR (the synthetic jobs have one model for every type)");
    }
    let cluster = round_cluster(&a)?;
    let policies = crate::simulate::policy_names(&a.policy)?;
    let mut jobs = bench_jobs(&a);
    let mut reports = Vec::new();
    for p in &policies {
        reports.push(time_policy(p, &a, &cluster, &mut jobs)?);
    }
    let gavel_lp = policies
        .iter()
        .any(|p| p.starts_with("gavel"))
        .then(|| time_gavel_lp(&a, &cluster, &mut jobs));
    let out = BenchRound {
        rounds: reports,
        gavel_lp,
    };
    if a.json {
        putline!("{}", pacer_cli::json::pretty(&out)?);
    } else {
        if let Some(l) = &out.gavel_lp {
            putline!(
                "gavel LP, {} jobs × {} device types: max-min {:.1} ms (1 LP); finish-time fairness {:.1} ms ({} LPs of bisection, max ρ bound {:.3})",
                l.jobs, l.device_types, l.max_min_ms, l.ftf_ms, l.ftf_lps, l.ftf_max_rho
            );
        }
        putline!(
            "{:<9} {:>6} {:>7} {:>10} {:>14} {:>10}  notes",
            "policy",
            "jobs",
            "gpus",
            "round_ms",
            "warm_round_ms",
            "allocated"
        );
        for r in &out.rounds {
            putline!(
                "{:<9} {:>6} {:>7} {:>10.2} {:>14.2} {:>10}  {}",
                r.policy,
                r.jobs,
                r.gpus,
                r.round_ms,
                r.warm_round_ms,
                r.allocated_gpus,
                r.notes
            );
        }
    }
    Ok(())
}

/// `bench round`'s flags checked, and the cluster they describe: `--types` device
/// types (v100, p100, k80) in near-equal node counts, or T4s alone.
fn round_cluster(a: &RoundArgs) -> Result<ClusterSpec> {
    if a.jobs == 0 || a.gpus == 0 || a.gpus_per_node == 0 || !a.gpus.is_multiple_of(a.gpus_per_node)
    {
        bail!("--jobs and --gpus must be ≥ 1 and --gpus a multiple of --gpus-per-node");
    }
    if !(1..=3).contains(&a.types) {
        bail!("--types: expected 1, 2 or 3");
    }
    // Job ids are u32 and every job holds its speed table and loss curve.
    if a.jobs > MAX_BENCH_JOBS {
        bail!("--jobs: at most {MAX_BENCH_JOBS}, got {}", a.jobs);
    }
    if a.rounds == 0 {
        bail!("--rounds: expected a whole number ≥ 1 (the warm rounds timed), got 0");
    }
    let nodes = a.gpus / a.gpus_per_node;
    let names = ["v100", "p100", "k80"];
    let spec = if a.types == 1 {
        format!("{nodes}x{}:t4", a.gpus_per_node)
    } else {
        (0..a.types)
            .map(|t| {
                let n = nodes / a.types + u32::from(t < nodes % a.types);
                format!("{n}x{}:{}", a.gpus_per_node, names[t as usize])
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    Ok(ClusterSpec::parse(&spec, "--gpus")?)
}

/// `--jobs` synthetic jobs, seeded: sizes, ages, attained service, goodput and
/// speed models, loss curves.
fn bench_jobs(a: &RoundArgs) -> Vec<JobView> {
    let goodputs = app_goodputs();
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let sizes = [1u32, 1, 1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 16];
    (0..a.jobs)
        .map(|i| {
            let r = sizes[rng.random_range(0..sizes.len())];
            JobFacts {
                id: JobId(i as u32),
                arrival_s: rng.random_range(0.0..36_000.0),
                attained_gpu_s: rng.random_range(0.0..100_000.0),
                requested_replicas: r,
                requested_batch: None,
                replicas: ReplicaBound {
                    limit: (2 * r).min(64),
                    explore: None,
                },
                num_restarts: rng.random_range(0..4),
                restart_s: None,
                restart_s_per_doubling: 0.0,
                current: Allocation::empty(),
                goodput: Some(goodputs[rng.random_range(0..goodputs.len())]),
                goodput_by_type: Vec::new(),
                measured_by_type: Vec::new(),
                goodput_version: 1,
                mixed_types: false,
                speed: Some(std::sync::Arc::new(bench_speed(&mut rng, a.types, r))),
                iterations_per_work: None,
                work_done: rng.random_range(0.0..10_000.0),
                work_left: rng.random_range(100.0..100_000.0),
                quality: Some(bench_quality(&mut rng)),
                one_type: false,
                deadline_s: None,
            }
            .view()
        })
        .collect()
}

/// One policy's first (cold) round on `jobs`, then `--rounds` warm rounds with
/// allocations carried over and a tenth of the jobs' models changed each round.
fn time_policy(
    p: &str,
    a: &RoundArgs,
    cluster: &ClusterSpec,
    jobs: &mut [JobView],
) -> Result<RoundReport> {
    let mut policy = pacer_policy::by_name(p).expect("validated");
    for j in jobs.iter_mut() {
        j.current = Allocation::empty();
    }
    let t = Instant::now();
    let view = ClusterView {
        now_s: 36_000.0,
        cluster,
        jobs,
    };
    let out = policy.allocate(&view);
    let cold = t.elapsed().as_secs_f64() * 1e3;
    pacer_policy::check_capacity(cluster, &out).map_err(anyhow::Error::msg)?;
    let mut allocs = out;
    let mut warm = Vec::new();
    for k in 0..a.rounds {
        for (j, al) in jobs.iter_mut().zip(&allocs) {
            j.current = al.clone();
            j.attained_gpu_s += 60.0 * al.replicas() as f64;
        }
        for j in jobs.iter_mut().skip(k % 10).step_by(10) {
            j.goodput_version += 1;
        }
        let view = ClusterView {
            now_s: 36_060.0 + 60.0 * k as f64,
            cluster,
            jobs,
        };
        let t = Instant::now();
        allocs = policy.allocate(&view);
        warm.push(t.elapsed().as_secs_f64() * 1e3);
        pacer_policy::check_capacity(cluster, &allocs).map_err(anyhow::Error::msg)?;
    }
    Ok(RoundReport {
        policy: p.to_string(),
        jobs: a.jobs,
        gpus: a.gpus,
        round_ms: cold,
        warm_round_ms: median(warm),
        allocated_gpus: allocs.iter().map(|x| x.replicas()).sum(),
        notes: policy.notes(),
    })
}

/// Gavel's LPs alone on `jobs` from empty allocations: max-min (one LP) and
/// finish-time fairness (its whole bisection).
fn time_gavel_lp(a: &RoundArgs, cluster: &ClusterSpec, jobs: &mut [JobView]) -> LpReport {
    use pacer_policy::gavel::{solve_ftf, solve_max_min, LpInput};
    for j in jobs.iter_mut() {
        j.current = Allocation::empty();
    }
    let view = ClusterView {
        now_s: 36_000.0,
        cluster,
        jobs,
    };
    let t = Instant::now();
    let inp = LpInput::new(&view);
    let _ = solve_max_min(&inp);
    let max_min_ms = t.elapsed().as_secs_f64() * 1e3;
    let elapsed: Vec<f64> = jobs.iter().map(|j| 36_000.0 - j.arrival_s).collect();
    let left: Vec<f64> = jobs.iter().map(|j| j.work_left).collect();
    // A tight tolerance forces the whole bisection (12 LPs), the worst case of
    // a re-solve; the policy itself stops at 2%.
    let t = Instant::now();
    let (_, rho, lps) = solve_ftf(&inp, &elapsed, &left, 1e-4, 12);
    LpReport {
        jobs: a.jobs,
        device_types: cluster.device_types.len(),
        max_min_ms,
        ftf_ms: t.elapsed().as_secs_f64() * 1e3,
        ftf_lps: lps,
        ftf_max_rho: rho,
    }
}

fn simulate(a: SimBenchArgs) -> Result<()> {
    let policies = crate::simulate::policy_names(&a.policy)?;
    let apps = crate::simulate::load_apps(&[])?;
    let cluster = ClusterSpec::parse("16x4:t4", "cluster")?;
    let chosen: Vec<&(&str, &str)> = EMBEDDED_WORKLOADS
        .iter()
        .filter(|(n, _)| a.workload == "all" || *n == a.workload)
        .collect();
    if chosen.is_empty() {
        bail!(
            "--workload {}: expected `all` or an embedded workload name (workload-1 … workload-8)",
            a.workload
        );
    }
    if a.repeat == 0 {
        bail!("--repeat: expected a whole number ≥ 1, got 0");
    }
    let repeat = a.repeat;
    let mut reports = Vec::new();
    for (name, text) in chosen {
        let jobs = trace::load_pollux_workload(text, name, &apps, 1.0)?;
        for p in &policies {
            let mut walls = Vec::new();
            let mut jct = 0.0;
            for _ in 0..repeat {
                let mut policy = pacer_policy::by_name(p).expect("validated");
                let sim = Simulation {
                    cluster: &cluster,
                    apps: &apps,
                    jobs: &jobs,
                    config: SimConfig::default(),
                };
                let t = Instant::now();
                let r = sim.run(policy.as_mut(), |_: &pacer_sim::engine::RoundInfo| {})?;
                walls.push(t.elapsed().as_secs_f64() * 1e3);
                jct = r.summary.avg_jct_s;
            }
            reports.push(SimReport {
                policy: p.to_string(),
                workload: name.to_string(),
                jobs: jobs.len(),
                wall_ms: median(walls),
                avg_jct_s: jct,
            });
        }
    }
    if a.json {
        putline!("{}", pacer_cli::json::pretty(&reports)?);
    } else {
        putline!(
            "{:<12} {:<9} {:>5} {:>10} {:>10}",
            "workload",
            "policy",
            "jobs",
            "wall_ms",
            "avg_jct_h"
        );
        for r in &reports {
            putline!(
                "{:<12} {:<9} {:>5} {:>10.1} {:>10.3}",
                r.workload,
                r.policy,
                r.jobs,
                r.wall_ms,
                r.avg_jct_s / 3600.0
            );
        }
        for p in &policies {
            let sel: Vec<f64> = reports
                .iter()
                .filter(|r| r.policy == *p)
                .map(|r| r.wall_ms)
                .collect();
            putline!(
                "{p}: mean wall {:.1} ms, max {:.1} ms",
                sel.iter().sum::<f64>() / sel.len() as f64,
                sel.iter().copied().fold(0.0, f64::max)
            );
        }
    }
    Ok(())
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    #[cfg(unix)]
    {
        // SAFETY: getrusage only writes the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0 {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
            return tv(u.ru_utime) + tv(u.ru_stime);
        }
    }
    f64::NAN
}

fn scale(a: ScaleArgs) -> Result<()> {
    let counts: Vec<usize> = a
        .jobs
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=MAX_BENCH_JOBS).contains(&n))
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "--jobs: expected comma-separated whole numbers 1..={MAX_BENCH_JOBS}, got `{x}`"
                    )
                })
        })
        .collect::<Result<_>>()?;
    if !(a.arrivals_per_hour > 0.0 && a.arrivals_per_hour.is_finite()) {
        bail!(
            "--arrivals-per-hour: expected a number > 0, got {}",
            a.arrivals_per_hour
        );
    }
    crate::simulate::check_round_s("--round-s", a.round_s)?;
    let policies = crate::simulate::policy_names(&a.policy)?;
    let apps = crate::simulate::load_apps(&[])?;
    let cluster = crate::simulate::parse_cluster(&a.cluster)?;
    let config = SimConfig {
        round_s: a.round_s,
        ..SimConfig::default()
    };
    let mut reports = Vec::new();
    let total: usize = counts.iter().sum::<usize>() * policies.len();
    let mut progress = crate::simulate::SimProgress::new(a.quiet, total);
    for &n in &counts {
        let jobs = trace::synthetic(
            &trace::SyntheticSpec {
                jobs: n,
                arrivals_per_hour: a.arrivals_per_hour,
                seed: a.seed,
                max_replicas: Some(cluster.total_gpus()),
            },
            &apps,
        );
        config
            .check_jobs(&jobs)
            .map_err(|e| anyhow::anyhow!("synthetic:{n}: {e}"))?;
        for p in &policies {
            let mut policy = pacer_policy::by_name(p).expect("validated");
            let sim = Simulation {
                cluster: &cluster,
                apps: &apps,
                jobs: &jobs,
                config: config.clone(),
            };
            progress.start_run(&format!("{n} jobs / {p}"));
            let cpu = cpu_seconds();
            let t = Instant::now();
            let r = sim.run(policy.as_mut(), |info| progress.on_round(info))?;
            let wall_s = t.elapsed().as_secs_f64();
            let cpu_s = cpu_seconds() - cpu;
            progress.end_run(n);
            let rounds = r.timeline.len();
            reports.push(ScaleReport {
                policy: p.to_string(),
                jobs: n,
                finished: r.summary.finished,
                wall_s,
                cpu_s,
                rounds,
                round_us: wall_s * 1e6 / rounds.max(1) as f64,
                max_active: r.timeline.iter().map(|x| x.active_jobs).max().unwrap_or(0),
                makespan_days: r.summary.makespan_s / 86_400.0,
                avg_restarts: r.summary.avg_restarts,
            });
        }
    }
    progress.finish();
    if a.json {
        println!("{}", pacer_cli::json::pretty(&reports)?);
    } else {
        println!(
            "synthetic traces, {} arrivals/h, seed {}, cluster {} ({} devices), {} s rounds",
            a.arrivals_per_hour,
            a.seed,
            cluster.describe(),
            cluster.total_gpus(),
            a.round_s
        );
        println!(
            "{:<9} {:>7} {:>8} {:>9} {:>9} {:>8} {:>9} {:>10} {:>9} {:>9}",
            "policy",
            "jobs",
            "finished",
            "wall_s",
            "cpu_s",
            "rounds",
            "round_us",
            "max_active",
            "makespan_d",
            "restarts"
        );
        for r in &reports {
            println!(
                "{:<9} {:>7} {:>8} {:>9.3} {:>9.3} {:>8} {:>9.2} {:>10} {:>9.1} {:>9.2}",
                r.policy,
                r.jobs,
                r.finished,
                r.wall_s,
                r.cpu_s,
                r.rounds,
                r.round_us,
                r.max_active,
                r.makespan_days,
                r.avg_restarts
            );
        }
    }
    Ok(())
}
