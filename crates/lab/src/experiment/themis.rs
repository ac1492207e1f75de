//! `pacer-lab themis`: Themis (fairness knob f ∈ {0, 0.5, 0.8}) against
//! work-conserving fair share, Tiresias and the Gavel LPs (finish-time fairness
//! and max-min), on
//! - Gavel's Philly-derived traces on a heterogeneous cluster (36 V100, 36 P100
//!   and 36 K80 by default, Gavel's simulated cluster), jobs running at Gavel's
//!   measured throughput per device type (bundled as `data/gavel`);
//! - the eight Pollux workloads on 64 T4s (embedded).
//!
//! ρ is the simulator's finish-time fairness (`JCT / T_independent`, the same
//! definition for every policy, [`pacer_sim::Simulation::independent_time`]).

mod report;

use anyhow::{bail, Context, Result};
use clap::Args;
use pacer_model::ClusterSpec;
use pacer_sim::apps::EMBEDDED_WORKLOADS;
use pacer_sim::{embedded_profiles, AppModel, SimConfig, SimJob, Simulation};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ThemisArgs {
    /// Output folder (results.md, results.json, themis.svg). The default is
    /// outside the source tree's committed results; regenerate those with
    /// `--out experiments/themis`.
    #[arg(long, default_value = "pacer-out/experiment-themis")]
    pub out: PathBuf,
    /// Gavel's data folder (simulation_throughputs.json, msr-seed0/*.trace).
    #[arg(long, default_value = "data/gavel")]
    pub gavel: PathBuf,
    /// Gavel traces to run (file stems in msr-seed0/), comma separated, or `all`.
    #[arg(long, default_value = "6c71a0,b436b2")]
    pub traces: String,
    /// First jobs of each Gavel trace to keep (the traces run for months).
    #[arg(long, default_value_t = 300)]
    pub max_jobs: usize,
    /// Heterogeneous cluster for the Gavel traces.
    #[arg(long, default_value = "9x4:v100,9x4:p100,9x4:k80")]
    pub gavel_cluster: String,
    /// Round length for the Gavel traces (s; Gavel's is 360).
    #[arg(long, default_value_t = 360.0)]
    pub gavel_round_s: f64,
    /// Embedded Pollux workloads to run (`all`, `none` or names), on 16x4:t4.
    #[arg(long, default_value = "all")]
    pub pollux: String,
    /// Themis lease (s); at least two rounds of the trace's round length.
    #[arg(long, default_value_t = 600.0)]
    pub lease_s: f64,
    /// Jobs shorter than this many rounds alone on their 1/N share are left out of
    /// `max ρ (long)`: their ρ is bounded below by the round length, whatever the policy.
    #[arg(long, default_value_t = 10.0)]
    pub long_rounds: f64,
    /// Policies (registry names; `themis-fX` sets the knob).
    #[arg(
        long,
        default_value = "fair,tiresias,gavel-maxmin,gavel-ftf,themis-f0,themis-f0.5,themis-f0.8"
    )]
    pub policies: String,
    /// Also write one CSV per (group, policy) with every job's arrival, start,
    /// completion, restarts, device-seconds, N and T_independent (analysis).
    #[arg(long)]
    pub per_job: Option<PathBuf>,
    /// Also start a round at a job's arrival: `never` (rounds only), `idle` (when the
    /// last allocation left devices idle) or `always` (event-driven), for every policy.
    #[arg(long, default_value = "never")]
    pub replan_on_arrival: pacer_sim::ArrivalReplan,
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    group: String,
    policy: String,
    runs: usize,
    finished_frac: f64,
    max_rho: f64,
    mean_rho: f64,
    avg_jct_h: f64,
    utilization: f64,
    wall_ms: f64,
    /// The job with the largest ρ (of the first run).
    worst: String,
    /// Largest ρ among jobs whose T_independent is at least `--long-rounds` rounds.
    max_rho_long: f64,
    /// Mean fraction of devices idle in rounds where some job waited.
    idle_while_waiting: f64,
    /// Restarts per job.
    restarts: f64,
    /// Device-hours held per job (restart delays included): the price of the
    /// work done, so placement efficiency (device type, consolidation).
    device_h: f64,
}

fn simulate(
    cluster: &ClusterSpec,
    apps: &[AppModel],
    jobs: &[SimJob],
    policy: &str,
    round_s: f64,
    args: &ThemisArgs,
    tag: &str,
) -> Result<Run> {
    let p: Box<dyn pacer_policy::Policy> = match pacer_policy::themis::parse_knob(policy) {
        Some(f) => {
            let mut t = pacer_policy::themis::Themis::with_f(f);
            t.lease_s = args.lease_s.max(2.0 * round_s);
            Box::new(t)
        }
        None => pacer_policy::by_name(policy)
            .with_context(|| format!("--policies: unknown policy `{policy}`"))?,
    };
    let sim = Simulation {
        cluster,
        apps,
        jobs,
        config: SimConfig {
            round_s,
            record_timeline: true,
            replan_on_arrival: args.replan_on_arrival,
            ..SimConfig::default()
        },
    };
    let mut rec = Recorder {
        inner: p,
        round_s,
        types: cluster.device_types.len(),
        node_type: cluster
            .nodes
            .iter()
            .map(|n| n.device_type.0 as usize)
            .collect(),
        per_job: vec![JobUse::default(); jobs.len()],
        pending: None,
    };
    let r = sim.run(&mut rec, |_| {})?;
    rec.flush(None);
    if let Some(dir) = &args.per_job {
        std::fs::create_dir_all(dir).with_context(|| format!("--per-job {}", dir.display()))?;
        let path = dir.join(format!("{tag}-{policy}.csv"));
        let mut csv = String::from(
            "name,application,replicas,arrival_s,start_s,completion_s,restarts,gpu_s,contention,independent_s,rho,waiting_s,running_s,type_efficiency",
        );
        for t in &cluster.device_types {
            let _ = write!(csv, ",{t}_device_s");
        }
        csv.push('\n');
        for (j, u) in r.jobs.iter().zip(&rec.per_job) {
            let req = jobs
                .iter()
                .find(|x| x.spec.name == j.name)
                .map_or(0, |x| x.spec.requested_replicas);
            let _ = writeln!(
                csv,
                "{},{},{},{:.0},{},{},{},{:.0},{:.2},{:.0},{}",
                j.name,
                j.application.replace(',', ";"),
                req,
                j.arrival_s,
                j.start_s.map_or(String::new(), |v| format!("{v:.0}")),
                j.completion_s.map_or(String::new(), |v| format!("{v:.0}")),
                j.restarts,
                j.gpu_s,
                j.avg_contention,
                j.independent_s,
                j.ftf_rho().map_or(String::new(), |v| format!("{v:.3}")),
            );
            csv.pop();
            let _ = write!(
                csv,
                ",{:.0},{:.0},{:.3}",
                u.waiting_s,
                u.running_s,
                u.work / u.best_work.max(1e-300)
            );
            for d in &u.device_s {
                let _ = write!(csv, ",{d:.0}");
            }
            csv.push('\n');
        }
        pacer_cli::out::write_bytes(&path, csv)?;
    }
    let worst = r
        .jobs
        .iter()
        .filter(|j| j.ftf_rho().is_some())
        .max_by(|a, b| a.ftf_rho().unwrap().total_cmp(&b.ftf_rho().unwrap()))
        .map(|j| {
            format!(
                "{} ({}, {} devices): JCT {:.1} h, T_ind {:.2} h, N {:.1}",
                j.name,
                j.application,
                jobs.iter()
                    .find(|x| x.spec.name == j.name)
                    .map_or(0, |x| x.spec.requested_replicas),
                j.jct_s().unwrap_or(f64::NAN) / 3600.0,
                j.independent_s / 3600.0,
                j.avg_contention
            )
        })
        .unwrap_or_default();
    let long = r
        .jobs
        .iter()
        .filter(|j| j.independent_s >= args.long_rounds * round_s)
        .filter_map(|j| j.ftf_rho())
        .fold(f64::NAN, f64::max);
    // Devices left idle while some job waited (work conservation), per round.
    let waiting: Vec<f64> = r
        .timeline
        .iter()
        .filter(|t| t.active_jobs > t.running_jobs)
        .map(|t| 1.0 - t.used_gpus as f64 / cluster.total_gpus() as f64)
        .collect();
    let idle_while_waiting = if waiting.is_empty() {
        0.0
    } else {
        waiting.iter().sum::<f64>() / waiting.len() as f64
    };
    let device_h =
        r.jobs.iter().map(|j| j.gpu_s).sum::<f64>() / r.jobs.len().max(1) as f64 / 3600.0;
    Ok(Run {
        device_h,
        summary: r.summary,
        worst,
        max_rho_long: long,
        idle_while_waiting,
    })
}

/// What each job was allocated, round by round (the `--per-job` CSV): a
/// pass-through around the policy under test.
struct Recorder {
    inner: Box<dyn pacer_policy::Policy>,
    round_s: f64,
    /// The last call's time and, per job index, what its allocation adds per second
    /// (`waiting, running, work, best_work, device-s per type`): counted over the
    /// time until the next call (at most a round), or a round after the last.
    pending: Option<(f64, Vec<(usize, JobUse)>)>,
    types: usize,
    node_type: Vec<usize>,
    /// By job index (the simulator's `JobId`).
    per_job: Vec<JobUse>,
}

#[derive(Debug, Clone, Default)]
struct JobUse {
    /// Rounds active without devices × round length (s).
    waiting_s: f64,
    /// Rounds holding devices × round length (s).
    running_s: f64,
    /// Devices allocated × round length, per device type (s).
    device_s: Vec<f64>,
    /// Work the allocations were worth (speed × round length) …
    work: f64,
    /// … and what the same device counts were worth on the job's best type,
    /// consolidated: their ratio is how well the policy chose types and placement.
    best_work: f64,
}

impl pacer_policy::Policy for Recorder {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn adaptive_batch(&self) -> bool {
        self.inner.adaptive_batch()
    }
    fn uses_quality(&self) -> bool {
        self.inner.uses_quality()
    }
    fn allocate(&mut self, view: &pacer_policy::ClusterView) -> Vec<pacer_model::Allocation> {
        self.flush(Some(view.now_s));
        let out = self.inner.allocate(view);
        let mut rates = Vec::with_capacity(out.len());
        for (j, a) in view.jobs.iter().zip(&out) {
            let mut u = JobUse {
                device_s: vec![0.0; self.types],
                ..JobUse::default()
            };
            if a.is_empty() {
                u.waiting_s = 1.0;
            } else {
                u.running_s = 1.0;
                u.work = j.alloc_rate(view.cluster, a);
                u.best_work = (0..self.types)
                    .map(|t| j.rate(pacer_model::DeviceTypeId(t as u16), a.replicas(), true))
                    .fold(0.0, f64::max);
                for &(node, count) in a.slots() {
                    if let Some(&t) = self.node_type.get(node.0 as usize) {
                        u.device_s[t] += count as f64;
                    }
                }
            }
            rates.push((j.id.0 as usize, u));
        }
        self.pending = Some((view.now_s, rates));
        out
    }
}

impl Recorder {
    /// Counts the last allocation until `now` (at most a round; a round after the
    /// last call when `now` is `None`).
    fn flush(&mut self, now: Option<f64>) {
        let Some((then, rates)) = self.pending.take() else {
            return;
        };
        let dt = now.map_or(self.round_s, |t| (t - then).clamp(0.0, self.round_s));
        for (i, r) in rates {
            let Some(u) = self.per_job.get_mut(i) else {
                continue;
            };
            u.device_s.resize(self.types, 0.0);
            u.waiting_s += r.waiting_s * dt;
            u.running_s += r.running_s * dt;
            u.work += r.work * dt;
            u.best_work += r.best_work * dt;
            for (d, x) in u.device_s.iter_mut().zip(&r.device_s) {
                *d += x * dt;
            }
        }
    }
}

struct Run {
    device_h: f64,
    summary: pacer_sim::Summary,
    worst: String,
    max_rho_long: f64,
    idle_while_waiting: f64,
}

fn mean_row(group: &str, policy: &str, runs: &[Run]) -> Row {
    let s: Vec<pacer_sim::Summary> = runs.iter().map(|r| r.summary.clone()).collect();
    let m = |f: &dyn Fn(&pacer_sim::Summary) -> f64| s.iter().map(f).sum::<f64>() / s.len() as f64;
    Row {
        group: group.to_string(),
        policy: policy.to_string(),
        runs: s.len(),
        finished_frac: m(&|x| x.finished as f64 / x.jobs as f64),
        max_rho: m(&|x| x.max_ftf_rho),
        mean_rho: m(&|x| x.avg_ftf_rho),
        avg_jct_h: m(&|x| x.avg_jct_s / 3600.0),
        utilization: m(&|x| x.utilization),
        wall_ms: m(&|x| x.wall_ms),
        worst: runs.first().map(|r| r.worst.clone()).unwrap_or_default(),
        max_rho_long: runs.iter().map(|r| r.max_rho_long).sum::<f64>() / runs.len() as f64,
        idle_while_waiting: runs.iter().map(|r| r.idle_while_waiting).sum::<f64>()
            / runs.len() as f64,
        restarts: m(&|x| x.avg_restarts),
        device_h: runs.iter().map(|r| r.device_h).sum::<f64>() / runs.len() as f64,
    }
}

pub fn run(args: ThemisArgs) -> Result<()> {
    // Every flag is checked before the first simulation, so that a mistake in one
    // does not show only after minutes of runs (or after part of the output).
    let policies = parse_policies(&args.policies)?;
    check_numbers(&args)?;
    let gavel_cluster = ClusterSpec::parse(&args.gavel_cluster, "--gavel-cluster")?;
    let pollux_names = parse_pollux(&args.pollux)?;
    if let Some(dir) = &args.per_job {
        std::fs::create_dir_all(dir).with_context(|| format!("--per-job {}", dir.display()))?;
    }
    pacer_cli::out::check_out_dir("--out", &args.out)?;
    pacer_cli::out::check_targets(
        "--out",
        &args.out,
        &["results.md", "results.json", "themis.svg"],
    )?;
    let mut rows: Vec<Row> = Vec::new();
    let mut notes = Vec::new();
    // Gavel traces, heterogeneous cluster.
    let tput_path = args.gavel.join("simulation_throughputs.json");
    if tput_path.exists() {
        run_gavel(&args, &policies, &gavel_cluster, &mut rows)?;
    } else {
        let msg = format!(
            "Gavel data not found at {} (expected simulation_throughputs.json and msr-seed0/); \
             the heterogeneous part was skipped — pass --gavel DIR",
            args.gavel.display()
        );
        eprintln!("warning: {msg}");
        notes.push(msg);
    }
    // Pollux workloads, 64 T4s.
    if !pollux_names.is_empty() {
        run_pollux(&args, &policies, &pollux_names, &mut rows)?;
    }
    if rows.is_empty() {
        bail!("nothing ran: no Gavel data (or an empty --traces) and --pollux none");
    }
    report::write(&args, &policies, &rows, &notes)
}

/// `--policies`: registry names (or `themis-fX`), at least one, none twice.
fn parse_policies(list: &str) -> Result<Vec<String>> {
    let policies: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if policies.is_empty() {
        bail!("--policies: expected at least one policy name");
    }
    for (i, p) in policies.iter().enumerate() {
        if let Err(e) = pacer_policy::parse(p) {
            bail!("--policies: {e}");
        }
        if policies[..i].contains(p) {
            bail!("--policies: `{p}` is named twice");
        }
    }
    Ok(policies)
}

/// `--max-jobs`, `--gavel-round-s`, `--lease-s` and `--long-rounds`.
fn check_numbers(args: &ThemisArgs) -> Result<()> {
    if args.max_jobs == 0 {
        bail!("--max-jobs: expected a whole number ≥ 1, got 0");
    }
    super::check_round_s("--gavel-round-s", args.gavel_round_s)?;
    if !(args.lease_s > 0.0 && args.lease_s.is_finite()) {
        bail!(
            "--lease-s: expected a number of seconds > 0, got {}",
            args.lease_s
        );
    }
    if !(args.long_rounds >= 0.0 && args.long_rounds.is_finite()) {
        bail!(
            "--long-rounds: expected a number ≥ 0, got {}",
            args.long_rounds
        );
    }
    Ok(())
}

/// `--pollux`: `none`, `all` or embedded workload names, none twice.
fn parse_pollux(list: &str) -> Result<Vec<&'static str>> {
    Ok(match list {
        "none" => Vec::new(),
        "all" => EMBEDDED_WORKLOADS.iter().map(|w| w.0).collect(),
        list => {
            let mut names: Vec<&'static str> = Vec::new();
            for n in list.split(',').map(str::trim) {
                let Some(w) = EMBEDDED_WORKLOADS.iter().find(|w| w.0 == n) else {
                    bail!(
                        "--pollux {list}: unknown workload `{n}`; expected all, none or names among \
                         workload-1 … workload-8"
                    );
                };
                if names.contains(&w.0) {
                    bail!("--pollux {list}: `{n}` is named twice");
                }
                names.push(w.0);
            }
            names
        }
    })
}

/// The Gavel traces named by `--traces` (`all`: every `msr-seed0/*.trace`).
fn trace_names(args: &ThemisArgs) -> Result<Vec<String>> {
    if args.traces.trim() == "all" {
        let dir = args.gavel.join("msr-seed0");
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .filter_map(|e| {
                let p = e.ok()?.path();
                (p.extension()? == "trace").then(|| p.file_stem()?.to_str().map(String::from))?
            })
            .collect();
        v.sort();
        if v.is_empty() {
            bail!("--traces all: no *.trace files in {}", dir.display());
        }
        Ok(v)
    } else {
        Ok(args
            .traces
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect())
    }
}

/// Every policy on every Gavel trace, on the heterogeneous cluster: one row each.
fn run_gavel(
    args: &ThemisArgs,
    policies: &[String],
    cluster: &ClusterSpec,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let tput_path = args.gavel.join("simulation_throughputs.json");
    let text = pacer_fsio::read_to_string_limited(&tput_path, pacer_fsio::limits::TABLE)?;
    let tput = pacer_sim::trace::load_gavel_throughputs(&text, &tput_path.display().to_string())?;
    for name in &trace_names(args)? {
        let path = args.gavel.join("msr-seed0").join(format!("{name}.trace"));
        let text = pacer_fsio::read_to_string_limited(&path, pacer_fsio::limits::TRACE)?;
        let jobs = pacer_sim::hetero::load_gavel_trace_hetero(
            &text,
            &path.display().to_string(),
            &tput,
            Some(args.max_jobs),
        )?;
        let group = format!("gavel {name} ({} jobs)", jobs.len());
        for p in policies {
            let t0 = std::time::Instant::now();
            let s = simulate(cluster, &[], &jobs, p, args.gavel_round_s, args, name)?;
            eprintln!("{group} {p}: {:.1} s", t0.elapsed().as_secs_f64());
            rows.push(mean_row(&group, p, &[s]));
        }
    }
    Ok(())
}

/// Every policy on the chosen Pollux workloads, 64 T4s: one row per policy, the
/// mean over the workloads.
fn run_pollux(
    args: &ThemisArgs,
    policies: &[String],
    names: &[&str],
    rows: &mut Vec<Row>,
) -> Result<()> {
    let apps: Vec<AppModel> = embedded_profiles().into_iter().map(AppModel::new).collect();
    let cluster = ClusterSpec::parse("16x4:t4", "cluster")?;
    let chosen: Vec<&(&str, &str)> = EMBEDDED_WORKLOADS
        .iter()
        .filter(|(n, _)| names.contains(n))
        .collect();
    let loads: Vec<Vec<SimJob>> = chosen
        .iter()
        .map(|(n, text)| pacer_sim::trace::load_pollux_workload(text, n, &apps, 1.0))
        .collect::<Result<_, _>>()?;
    let group = format!("pollux ({} workloads, 64 T4)", chosen.len());
    for p in policies {
        let t0 = std::time::Instant::now();
        let mut s = Vec::new();
        for (jobs, (name, _)) in loads.iter().zip(&chosen) {
            s.push(simulate(&cluster, &apps, jobs, p, 60.0, args, name)?);
        }
        eprintln!("{group} {p}: {:.1} s", t0.elapsed().as_secs_f64());
        rows.push(mean_row(&group, p, &s));
    }
    Ok(())
}
