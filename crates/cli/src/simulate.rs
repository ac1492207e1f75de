//! `pacer simulate`: run workloads through the cluster simulator under one or
//! more policies and compare them.

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pacer_cli::json::SimulateRow;
use pacer_model::ClusterSpec;
use pacer_sim::apps::EMBEDDED_WORKLOADS;
use pacer_sim::trace;
use pacer_sim::{AppModel, SimConfig, SimJob, SimResult, Simulation, Work};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod apps_arg;
pub use apps_arg::{load_apps, load_apps_arg};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workload CSV in Pollux's format (`name,time,application,num_replicas,batch_size`);
    /// repeatable. `embedded:workload-N` or `embedded:all` use the bundled Pollux
    /// workloads. Default: `embedded:workload-1`.
    #[arg(long, value_name = "FILE")]
    pub workload: Vec<String>,
    /// Other trace formats, `KIND:ARG` (the list is in `--help`): `philly:FILE`,
    /// `gavel:FILE` (with --gavel-throughputs), `synthetic:JOBS`, ...
    #[arg(long, value_name = "KIND:ARG", long_help = trace_help())]
    pub trace: Vec<String>,
    /// Cluster: `COUNTxGPUS:TYPE[,...]`, e.g. `16x4:t4` (the default, Pollux's 64 T4s),
    /// or a TOML file with `[[nodes]]` tables of `count`, `gpus`, `type`.
    #[arg(long, default_value = "16x4:t4")]
    pub cluster: String,
    /// Policies to compare, comma separated, or `all` (the list is in `--help`).
    #[arg(long, default_value = "all", long_help = policy_help())]
    pub policy: String,
    /// Scheduling round length in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub round_s: f64,
    /// Seconds a job loses whenever its allocation changes, its first start included
    /// (checkpoint, relaunch, reload; Pollux's simulator charges 30 s).
    #[arg(long, default_value_t = 30.0)]
    pub restart_s: f64,
    /// Also start a round at a job's arrival: `never` (rounds only, as Pollux's and
    /// Gavel's simulators), `idle` (when the last allocation left devices idle),
    /// `always` (event-driven; the policy decides whether to preempt), `events`
    /// (ElasticFlow's simulator's clock: no fixed rounds, a round at each arrival,
    /// completion or policy wake-up such as `dlas-gpu`'s queue demotions, at least
    /// `--round-s` after the last) or `auto` (each policy's own: `always` for
    /// `deadline-*`, `events` for `elasticflow-*`, `edf` and `dlas-gpu`,
    /// `never` for the others; docs/elasticflow.md).
    #[arg(long, default_value = "auto")]
    pub replan_on_arrival: pacer_sim::ArrivalReplan,
    /// Per-type models the policies see for per-type applications (`--apps sia:DIR`):
    /// `fitted` (each type's model fitted to its whole table, from the start) or
    /// `online` (learned from the points each job has run at, as Sia does;
    /// docs/sia.md).
    #[arg(long, default_value = "fitted")]
    pub profiles: pacer_sim::ProfileMode,
    /// Jobs of per-type applications (`--apps sia:DIR`) accept allocations across
    /// device types: such a job runs at its balanced step (each type's model at the
    /// local batch the worker level gives it, one all-reduce over the slowest link)
    /// and `sia-pacer-mix` may offer it mixed configurations (docs/mixed-types.md).
    /// Off (the default): every job stays on one type, as before.
    #[arg(long)]
    pub mixed_types: bool,
    /// What-if, with `--apps sia:DIR`: the node types share one fabric, so every type's
    /// cross-node sync is TYPE's as measured (one-type jobs and mixes alike; Sia's
    /// tables were measured on each type's own network; docs/mixed-types.md).
    #[arg(long, value_name = "TYPE")]
    pub shared_fabric: Option<String>,
    /// Measure the devices left idle on one type while a job was held to others, and
    /// a bound on the avg JCT a policy across types could remove (`mixing` in
    /// `--json`; docs/mixed-types.md).
    #[arg(long)]
    pub mixing_opportunity: bool,
    /// Seed for synthetic workloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Arrival-rate multiplier for Pollux CSV workloads: the same jobs arrive this many
    /// times faster (2 halves every arrival time). Not Pollux's "job load" experiment,
    /// whose workloads at other loads are other job sets (`pacer validate pollux`).
    /// `--load` is the old name.
    #[arg(long = "arrival-scale", visible_alias = "load", default_value_t = 1.0)]
    pub load: f64,
    /// Mean arrivals per hour for `synthetic:` traces.
    #[arg(long, default_value_t = 20.0)]
    pub arrivals_per_hour: f64,
    /// Extra application profile folders (Pollux layout); a folder named like an
    /// embedded app replaces it.
    #[arg(long, value_name = "DIR")]
    pub app_dir: Vec<PathBuf>,
    /// Applications from Sia's trace folder with per-device-type tables:
    /// `sia:DIR` (step times times Sia's calibration slowdowns, as Sia's simulator;
    /// compare JCTs with Sia's numbers with this) or `sia-uncalibrated:DIR` (the
    /// tables as measured). Replaces the embedded Pollux applications.
    #[arg(long, value_name = "KIND:DIR")]
    pub apps: Option<String>,
    /// Gavel's `simulation_throughputs.json`, for `gavel:` traces.
    #[arg(long, value_name = "FILE")]
    pub gavel_throughputs: Option<PathBuf>,
    /// Run Gavel jobs on this device type only (default: each job on every type
    /// it has a throughput for, at that type's throughput).
    #[arg(long, value_name = "TYPE")]
    pub gavel_device: Option<String>,
    /// The folder of ElasticFlow's `throughputs_<GPU>/<model>.csv` tables, for
    /// `elasticflow:` traces (the bundled ones: `data/elasticflow`).
    #[arg(long, value_name = "DIR")]
    pub elasticflow_tables: Option<PathBuf>,
    /// Print machine-readable JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write per-job CSVs, per-round timelines and an allocation plot (SVG) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar (it is drawn on stderr, only when stderr is a terminal and
    /// the runs take over a second).
    #[arg(long)]
    pub quiet: bool,
}

/// `--trace`'s long help: every registered trace format, one line each.
fn trace_help() -> String {
    let mut h = String::from(
        "Other trace formats, KIND:ARG (repeatable); the kinds (pacer_sim::trace::TRACE_FORMATS):",
    );
    for f in trace::TRACE_FORMATS {
        let k = format!("{}:{}", f.prefix, f.arg);
        h.push_str(&format!("\n  {k:<23} {}", f.summary));
    }
    h
}

/// `--policy`'s long help: every registered policy, one line each, and the knob forms,
/// all from the registry ([`pacer_policy::POLICIES`]).
fn policy_help() -> String {
    let mut h =
        String::from("Policies to compare, comma separated, or `all` (every one not marked `+`).");
    for e in &pacer_policy::POLICIES {
        let mark = if e.in_all { ' ' } else { '+' };
        h.push_str(&format!("\n  {mark}{:<13} {}", e.name, e.summary));
    }
    h.push_str("\nParameterised:");
    for k in pacer_policy::POLICIES.iter().filter_map(|e| e.knob) {
        h.push_str(&format!("\n  {k}"));
    }
    h
}

/// The table's columns, for `pacer simulate --help` (the README has the same list).
pub const COLUMNS_HELP: &str = "\
Table columns (one row per workload and policy; `--json` has the same numbers in seconds):
  jobs      jobs in the workload; F/N when only F finished by the simulator's time limit
  avg_jct   mean job completion time (arrival to completion), hours, finished jobs
  med_jct   median job completion time, hours
  p99_jct   99th-percentile job completion time, hours
  makespan  hours from the first arrival to the last completion
  queue_h   mean hours from a job's arrival to the first time it holds devices
  util      device-hours held by jobs / (devices x makespan), 0-1
  max_ρ     largest finish-time fairness ρ over the jobs: ρ = JCT / the time the job would
            take alone on a 1/N share of the cluster (N = average number of jobs active
            while it was), at the size and batch it asked for; ρ > 1: worse than its share
  avg_ρ     mean ρ over the jobs
  restarts  mean times a job was restarted on a new allocation after its first start
            (preempted, resized or moved); each restart costs 30 s without progress
  wall_ms   wall-clock milliseconds the simulation took here (not deterministic)
A policy that cannot act on the workload is marked `*` and the line under the table says why.";

/// Why `policy` cannot act on these jobs or this cluster, when it cannot: its rows
/// then equal another policy's, and the table marks them (the registry entry's
/// [`pacer_policy::PolicyEntry::inert_when`]).
fn inert_reason(policy: &str, traits: &pacer_policy::WorkloadTraits) -> Option<String> {
    let e = pacer_policy::entry(policy)?;
    (e.inert_when)(traits).map(|why| format!("{policy}: {why}"))
}

/// A file named on the command line, at most `limit` bytes; errors name it (and the limit).
fn read(path: &str, limit: pacer_fsio::Limit) -> Result<String> {
    Ok(pacer_fsio::read_to_string_limited(Path::new(path), limit)?)
}

/// The simulator's settings for `args`.
fn sim_config(args: &SimulateArgs) -> SimConfig {
    SimConfig {
        round_s: args.round_s,
        restart_s: args.restart_s,
        replan_on_arrival: args.replan_on_arrival,
        profiles: args.profiles,
        mixed_types: args.mixed_types,
        mixing_opportunity: args.mixing_opportunity,
        ..SimConfig::default()
    }
}

/// Resolves workload and trace flags to named job lists.
pub fn workloads(args: &SimulateArgs, apps: &[AppModel]) -> Result<Vec<(String, Vec<SimJob>)>> {
    if !(args.load > 0.0 && args.load.is_finite()) {
        bail!("--arrival-scale: expected a number > 0, got {}", args.load);
    }
    // Synthetic jobs are drawn for this cluster; loaded ones are checked against it.
    let cluster = parse_cluster(&args.cluster)?;
    let mut out = Vec::new();
    // The flag each workload came from, for errors found after loading.
    let mut sources: Vec<String> = Vec::new();
    let mut specs = args.workload.clone();
    if specs.is_empty() && args.trace.is_empty() {
        specs.push("embedded:workload-1".into());
    }
    for w in &specs {
        if let Some(name) = w.strip_prefix("embedded:") {
            let chosen: Vec<&(&str, &str)> = if name == "all" {
                EMBEDDED_WORKLOADS.iter().collect()
            } else {
                EMBEDDED_WORKLOADS
                    .iter()
                    .filter(|(n, _)| *n == name)
                    .collect()
            };
            if chosen.is_empty() {
                let names: Vec<&str> = EMBEDDED_WORKLOADS.iter().map(|w| w.0).collect();
                bail!(
                    "--workload {w}: unknown embedded workload; expected `all` or one of {}",
                    names.join(", ")
                );
            }
            for (n, text) in chosen {
                sources.push(format!("--workload embedded:{n}"));
                out.push((
                    n.to_string(),
                    trace::load_pollux_workload(
                        text,
                        &format!("<embedded>/{n}.csv"),
                        apps,
                        args.load,
                    )?,
                ));
            }
        } else {
            let name = Path::new(w)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(w)
                .to_string();
            sources.push(format!("--workload {w}"));
            out.push((
                name,
                trace::load_pollux_workload(
                    &read(w, pacer_fsio::limits::TRACE)?,
                    w,
                    apps,
                    args.load,
                )?,
            ));
        }
    }
    let gavel_tp = args
        .gavel_throughputs
        .as_ref()
        .map(|p| p.display().to_string());
    let ef_tables = args
        .elasticflow_tables
        .as_ref()
        .map(|p| p.display().to_string());
    let ctx = trace::TraceContext {
        apps,
        cluster: &cluster,
        load: args.load,
        seed: args.seed,
        arrivals_per_hour: args.arrivals_per_hour,
        gavel_throughputs: gavel_tp.as_deref(),
        gavel_device: args.gavel_device.as_deref(),
        elasticflow_tables: ef_tables.as_deref(),
    };
    for t in &args.trace {
        let jobs = trace::load_trace(t, &ctx).map_err(|e| anyhow::anyhow!("--trace {t}: {e}"))?;
        let (kind, arg) = t.split_once(':').expect("loaded: KIND:ARG");
        let label = if kind.starts_with("synthetic") {
            format!("{kind}-{arg}-seed{}", args.seed)
        } else {
            Path::new(arg)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(arg)
                .to_string()
        };
        sources.push(format!("--trace {t}"));
        out.push((label, jobs));
    }
    // A job that arrives after the simulator's time limit, or could not finish by it
    // even started at once, was silently left unfinished (a `0/1` row of NaNs).
    let config = sim_config(args);
    // Device types the jobs have no measurements for, and requests larger than the
    // cluster, are refused before any run (`pacer_sim::admit`).
    for ((_, jobs), source) in out.iter().zip(&sources) {
        config
            .check_jobs(jobs)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        pacer_sim::admit::check_workload(&cluster, apps, jobs)
            .map_err(|e| anyhow::anyhow!("{source} on --cluster {}: {e}", cluster.describe()))?;
    }
    // Rows and `--out` files are named by workload: two of one name would be
    // indistinguishable, and the second's files would overwrite the first's.
    for (i, (name, _)) in out.iter().enumerate() {
        if out[..i].iter().any(|(n, _)| n == name) {
            bail!(
                "workload `{name}` is given twice (by --workload / --trace, or as files with the \
                 same name in different folders); runs are named by it, so each must be unique"
            );
        }
    }
    Ok(out)
}

/// `--cluster`: a compact spec, or a TOML file such as
/// ```toml
/// [[nodes]]
/// count = 8
/// gpus = 4
/// type = "v100"
/// ```
pub fn parse_cluster(arg: &str) -> Result<ClusterSpec> {
    if !arg.ends_with(".toml") && Path::new(arg).is_file() {
        bail!("--cluster {arg}: a cluster file must be TOML, named *.toml; or give COUNTxGPUS:TYPE[,...] such as `16x4:t4`");
    }
    if !arg.ends_with(".toml") {
        return Ok(ClusterSpec::parse(arg, "--cluster")?);
    }
    let text = read(arg, pacer_fsio::limits::CLUSTER)?;
    Ok(pacer_model::cluster_file::parse_cluster_toml(&text, arg)?)
}

/// The policies named by `--policy`: `all` or a comma-separated list of registry
/// names, plus parameterised forms the registry accepts (e.g. `themis-f0.5`).
pub fn policy_names(arg: &str) -> Result<Vec<String>> {
    if arg == "all" {
        // Sia's policies are for per-type applications (`--apps sia:DIR`) and are
        // named explicitly (`PolicyEntry::in_all`).
        return Ok(pacer_policy::default_policy_names()
            .map(str::to_string)
            .collect());
    }
    let mut seen: Vec<&str> = Vec::new();
    arg.split(',')
        .map(|p| {
            let p = p.trim();
            if seen.contains(&p) {
                bail!("--policy: `{p}` is named twice");
            }
            seen.push(p);
            match pacer_policy::parse(p) {
                Ok(_) => Ok(p.to_string()),
                Err(e) => bail!("--policy: {e}; or `all`"),
            }
        })
        .collect()
}

/// An output folder given by `flag` that is a file (or under one) would only fail
/// after all the runs; this fails first.
pub fn check_out_dir(flag: &str, dir: &Path) -> Result<()> {
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.exists() {
            if !p.is_dir() {
                bail!(
                    "{flag} {}: {} is a file; expected a folder (created if missing)",
                    dir.display(),
                    p.display()
                );
            }
            break;
        }
        d = p.parent();
    }
    Ok(())
}

/// A round length given by `flag`: > 0, finite, and long enough for the simulated
/// clock to advance over the whole horizon (the engine's own check, named by flag).
pub fn check_round_s(flag: &str, round_s: f64) -> Result<()> {
    if !(round_s > 0.0 && round_s.is_finite()) {
        bail!("{flag}: expected a number of seconds > 0, got {round_s}");
    }
    SimConfig {
        round_s,
        ..SimConfig::default()
    }
    .validate()
    .map_err(|e| match e {
        pacer_sim::engine::SimError::BadConfig { message, .. } => {
            anyhow::anyhow!("{flag}: {message}")
        }
        e => anyhow::anyhow!("{flag}: {e}"),
    })
}

pub fn run(args: SimulateArgs) -> Result<()> {
    check_round_s("--round-s", args.round_s)?;
    if !(args.restart_s >= 0.0 && args.restart_s <= 86_400.0) {
        bail!(
            "--restart-s: expected seconds in 0..=86400, got {}",
            args.restart_s
        );
    }
    if let Some(dir) = &args.out {
        check_out_dir("--out", dir)?;
    }
    if !(args.arrivals_per_hour > 0.0 && args.arrivals_per_hour.is_finite()) {
        bail!(
            "--arrivals-per-hour: expected a number > 0, got {}",
            args.arrivals_per_hour
        );
    }
    let cluster = parse_cluster(&args.cluster)?;
    let policies = policy_names(&args.policy)?;
    // Traces whose jobs name no application (`elasticflow:`) alone: the embedded
    // applications are not parsed (a few ms of start-up for nothing).
    let needs_apps = args.apps.is_some()
        || args.shared_fabric.is_some()
        || !args.app_dir.is_empty()
        || !args.workload.is_empty()
        || args.trace.is_empty()
        || args.trace.iter().any(|t| trace::trace_uses_apps(t));
    let apps = if needs_apps {
        load_apps_arg(
            args.apps.as_deref(),
            &args.app_dir,
            args.shared_fabric.as_deref(),
            &cluster,
        )?
    } else {
        Vec::new()
    };
    if args.mixed_types && apps.iter().all(|a| a.typed().is_empty()) {
        bail!(
            "--mixed-types: needs per-type applications (--apps sia:DIR); the applications \
             loaded have one model for every device type"
        );
    }
    let loads = workloads(&args, &apps)?;
    if let Some(dir) = &args.out {
        let mut names = vec!["allocation.svg".to_string()];
        for (w, _) in &loads {
            for p in &policies {
                names.push(format!("{w}-{p}-jobs.csv"));
                names.push(format!("{w}-{p}-timeline.csv"));
            }
        }
        crate::out::check_targets("--out", dir, &names)?;
    }
    let loss_curves = loads.iter().any(|(_, jobs)| {
        jobs.iter()
            .any(|j| matches!(j.work, Work::LossCurve { .. }))
    });
    let typed_speeds = cluster.device_types.len() > 1
        && loads.iter().any(|(_, jobs)| {
            jobs.iter().any(|j| match &j.work {
                Work::Throughput { .. } => true,
                // Per-type tables (`--apps sia:DIR`): a speed per device type.
                Work::Profiled { app } => !apps[*app].typed().is_empty(),
                _ => false,
            })
        });
    let traits = pacer_policy::WorkloadTraits {
        typed_speeds,
        loss_curves,
    };
    let notes: Vec<(String, String)> = policies
        .iter()
        .filter_map(|p| inert_reason(p, &traits).map(|r| (p.clone(), r)))
        .collect();
    let total_jobs: usize = loads.iter().map(|(_, j)| j.len()).sum::<usize>() * policies.len();
    let mut progress = SimProgress::new(args.quiet, total_jobs);
    let mut rows = Vec::new();
    let mut results: Vec<(String, SimResult)> = Vec::new();
    for (wname, jobs) in &loads {
        for p in &policies {
            let mut policy = pacer_policy::by_name(p).expect("validated name");
            let sim = Simulation {
                cluster: &cluster,
                apps: &apps,
                jobs,
                config: sim_config(&args),
            };
            progress.start_run(&format!("{wname} / {p}"));
            let res = sim.run(policy.as_mut(), |info| progress.on_round(info))?;
            progress.end_run(jobs.len());
            if res.summary.finished < res.summary.jobs {
                progress.suspend(|| {
                    eprintln!(
                        "warning: workload `{wname}` under `{p}`: {} of {} job(s) still \
                         unfinished at the simulator's time limit of {} days; the JCT, \
                         queueing, makespan and ρ columns cover the finished jobs only",
                        res.summary.jobs - res.summary.finished,
                        res.summary.jobs,
                        SimConfig::default().max_time_s / 86_400.0
                    )
                });
            }
            let mut res = res;
            // Parameterised names (themis-f0.5) stay distinguishable in the output.
            res.summary.policy = p.clone();
            rows.push(SimulateRow {
                workload: wname.clone(),
                summary: res.summary.clone(),
            });
            results.push((wname.clone(), res));
        }
    }
    progress.finish();
    if let Some(dir) = &args.out {
        crate::report::write_outputs(dir, &results, cluster.total_gpus())?;
    }
    if args.json {
        crate::out::print(&format!("{}\n", pacer_cli::json::pretty(&rows)?))
    } else {
        let mut text = format_table(&rows, &cluster, loads.len(), &notes)?;
        if let Some(dir) = &args.out {
            writeln!(
                text,
                "\nper-job CSVs, timelines and allocation plot written to {}",
                dir.display()
            )?;
        }
        crate::out::print(&text)
    }
}

fn format_table(
    rows: &[SimulateRow],
    cluster: &ClusterSpec,
    n_workloads: usize,
    notes: &[(String, String)],
) -> Result<String> {
    let marked = |p: &str| {
        if notes.iter().any(|(n, _)| n == p) {
            format!("{p}*")
        } else {
            p.to_string()
        }
    };
    let mut text = String::new();
    writeln!(
        text,
        "cluster {} ({} devices); JCT in hours; ρ = finish-time fairness (JCT / time alone on a 1/N share)",
        cluster.describe(),
        cluster.total_gpus()
    )?;
    let pw = rows
        .iter()
        .map(|r| marked(&r.summary.policy).chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    // The workload column fits the longest name (a file path can be long).
    let ww = rows
        .iter()
        .map(|r| r.workload.chars().count())
        .max()
        .unwrap_or(0)
        .max(14);
    let jobs_of = |s: &pacer_sim::Summary| {
        if s.finished == s.jobs {
            format!("{}", s.jobs)
        } else {
            format!("{}/{}", s.finished, s.jobs)
        }
    };
    let jw = rows
        .iter()
        .map(|r| jobs_of(&r.summary).len())
        .max()
        .unwrap_or(0)
        .max(5);
    writeln!(
        text,
        "{:<ww$} {:<pw$} {:>jw$} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6} {:>7} {:>7} {:>8} {:>8}",
        "workload",
        "policy",
        "jobs",
        "avg_jct",
        "med_jct",
        "p99_jct",
        "makespan",
        "queue_h",
        "util",
        "max_ρ",
        "avg_ρ",
        "restarts",
        "wall_ms"
    )?;
    let h = |s: f64| s / 3600.0;
    for r in rows {
        let s = &r.summary;
        let jobs = jobs_of(s);
        writeln!(
            text,
            "{:<ww$} {:<pw$} {:>jw$} {:>8.3} {:>8.3} {:>8.3} {:>9.2} {:>8.3} {:>6.2} {:>7.2} {:>7.2} {:>8.2} {:>8.1}",
            r.workload,
            marked(&s.policy),
            jobs,
            h(s.avg_jct_s),
            h(s.median_jct_s),
            h(s.p99_jct_s),
            h(s.makespan_s),
            h(s.avg_queueing_s),
            s.utilization,
            s.max_ftf_rho,
            s.avg_ftf_rho,
            s.avg_restarts,
            s.wall_ms
        )?;
    }
    if rows.iter().any(|r| r.summary.deadlines.is_some()) {
        writeln!(
            text,
            "\n{:<ww$} {:<pw$} {:>8} {:>10} {:>11} {:>8} {:>9} {:>8}",
            "workload",
            "policy",
            "ddl_jobs",
            "met_strict",
            "met_planned",
            "be_jobs",
            "be_jct_h",
            "clus_eff"
        )?;
        for r in rows {
            if let Some(d) = &r.summary.deadlines {
                writeln!(
                    text,
                    "{:<ww$} {:<pw$} {:>8} {:>10.3} {:>11.3} {:>8} {:>9.3} {:>8.3}",
                    r.workload,
                    marked(&r.summary.policy),
                    d.deadline_jobs,
                    d.met_strict,
                    d.met_planned,
                    d.best_effort_jobs,
                    h(d.best_effort_avg_jct_s),
                    d.cluster_efficiency
                )?;
            }
        }
    }
    if n_workloads > 1 {
        writeln!(text, "\nmean over {n_workloads} workloads:")?;
        let mut names: Vec<&str> = rows.iter().map(|r| r.summary.policy.as_str()).collect();
        names.dedup();
        names.sort();
        names.dedup();
        for p in names {
            let sel: Vec<&SimulateRow> = rows.iter().filter(|r| r.summary.policy == p).collect();
            let m = |f: &dyn Fn(&SimulateRow) -> f64| {
                sel.iter().map(|r| f(r)).sum::<f64>() / sel.len() as f64
            };
            writeln!(
            text,
                "{:<pw$} avg_jct {:.3} h   p99_jct {:.3} h   makespan {:.2} h   max_ρ {:.2}   avg_ρ {:.2}   util {:.2}   wall {:.1} ms",
                marked(p),
                m(&|r| h(r.summary.avg_jct_s)),
                m(&|r| h(r.summary.p99_jct_s)),
                m(&|r| h(r.summary.makespan_s)),
                m(&|r| r.summary.max_ftf_rho),
                m(&|r| r.summary.avg_ftf_rho),
                m(&|r| r.summary.utilization),
                m(&|r| r.summary.wall_ms)
            )?;
        }
    }
    if !notes.is_empty() {
        writeln!(text)?;
        for (_, why) in notes {
            writeln!(text, "* {why}")?;
        }
    }
    writeln!(text, "(columns: `pacer simulate --help`)")?;
    Ok(text)
}

/// The progress bar of long simulations, on stderr: jobs finished of all runs,
/// the current run's simulated time, elapsed and ETA. Drawn only when stderr is a
/// terminal, not `--quiet`, and a second has passed (short runs print nothing
/// extra); never on stdout. The engine pushes [`pacer_sim::engine::RoundInfo`]
/// after each round and reads no clock; this reads it, every 256 rounds.
pub struct SimProgress {
    bar: ProgressBar,
    enabled: bool,
    started: Instant,
    /// Jobs of the runs already done.
    done: u64,
    label: String,
    next_update: Instant,
}

impl SimProgress {
    /// A bar over `total_jobs` (summed over every run it will see).
    pub fn new(quiet: bool, total_jobs: usize) -> Self {
        let bar =
            ProgressBar::with_draw_target(Some(total_jobs as u64), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:20} {pos}/{len} jobs, ETA {eta}  {wide_msg}",
            )
            .expect("template"),
        );
        SimProgress {
            bar,
            enabled: !quiet && std::io::stderr().is_terminal(),
            started: Instant::now(),
            done: 0,
            label: String::new(),
            next_update: Instant::now(),
        }
    }

    /// A run named `label` starts.
    pub fn start_run(&mut self, label: &str) {
        self.label = label.to_string();
    }

    /// After each round of the current run.
    pub fn on_round(&mut self, info: &pacer_sim::engine::RoundInfo) {
        if !self.enabled {
            return;
        }
        // One clock read per round (tens of ns); the bar is redrawn at most every 100 ms.
        let now = Instant::now();
        if now < self.next_update {
            return;
        }
        self.next_update = now + Duration::from_millis(100);
        if !self.show(now) {
            return;
        }
        self.bar
            .set_position(self.done + info.finished_jobs() as u64);
        let t = info.now_s;
        let when = if t >= 2.0 * 86_400.0 {
            format!("{:.1} d", t / 86_400.0)
        } else {
            format!("{:.1} h", t / 3600.0)
        };
        self.bar
            .set_message(format!("simulated {when}: {}", self.label));
    }

    /// Whether the bar is drawn, drawing it once a second has passed.
    fn show(&mut self, now: Instant) -> bool {
        if self.bar.is_hidden() {
            if now.duration_since(self.started) < Duration::from_secs(1) {
                return false;
            }
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(200));
        }
        true
    }

    /// The current run, of `jobs` jobs, is over.
    pub fn end_run(&mut self, jobs: usize) {
        self.done += jobs as u64;
        if self.enabled && self.show(Instant::now()) {
            self.bar.set_position(self.done);
        }
    }

    /// Runs `f` (which prints to stderr) with the bar out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::inert_reason;
    use pacer_policy::WorkloadTraits;
    fn t(typed_speeds: bool, loss_curves: bool) -> WorkloadTraits {
        WorkloadTraits {
            typed_speeds,
            loss_curves,
        }
    }

    #[test]
    fn gavel_objectives_differ_only_with_per_type_speeds() {
        assert!(inert_reason("gavel-ftf", &t(false, false)).is_some());
        assert!(inert_reason("gavel-ftf", &t(true, false)).is_none());
        assert!(inert_reason("gavel-maxmin", &t(false, false)).is_none());
        assert!(inert_reason("slaq", &t(true, false)).is_some());
        assert!(inert_reason("slaq", &t(true, true)).is_none());
        assert!(inert_reason("fair", &t(false, false)).is_none());
    }
}
