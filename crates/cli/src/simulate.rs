//! `pacer simulate`: run workloads through the cluster simulator under one or
//! more policies and compare them.

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pacer_model::ClusterSpec;
use pacer_sim::apps::EMBEDDED_WORKLOADS;
use pacer_sim::trace::{self, SyntheticSpec};
use pacer_sim::{
    embedded_profiles, load_app_dir, AppModel, SimConfig, SimJob, SimResult, Simulation, Work,
};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workload CSV in Pollux's format (`name,time,application,num_replicas,batch_size`);
    /// repeatable. `embedded:workload-N` or `embedded:all` use the bundled Pollux
    /// workloads. Default: `embedded:workload-1`.
    #[arg(long, value_name = "FILE")]
    pub workload: Vec<String>,
    /// Other trace formats: `philly:FILE`, `gavel:FILE` (with --gavel-throughputs),
    /// `synthetic:JOBS` (Poisson arrivals over the measured applications, Philly job
    /// sizes), `synthetic-philly:JOBS` (duration-only jobs with Philly's size and
    /// duration distributions).
    #[arg(long, value_name = "KIND:FILE")]
    pub trace: Vec<String>,
    /// Cluster: `COUNTxGPUS:TYPE[,...]`, e.g. `16x4:t4` (the default, Pollux's 64 T4s),
    /// or a TOML file with `[[nodes]]` tables of `count`, `gpus`, `type`.
    #[arg(long, default_value = "16x4:t4")]
    pub cluster: String,
    /// Policies to compare, comma separated (fifo, fair, tiresias, pollux) or `all`.
    #[arg(long, default_value = "all")]
    pub policy: String,
    /// Scheduling round length in seconds.
    #[arg(long, default_value_t = 60.0)]
    pub round_s: f64,
    /// Also start a round at a job's arrival: `never` (rounds only, as Pollux's and
    /// Gavel's simulators), `idle` (when the last allocation left devices idle) or
    /// `always` (event-driven; the policy decides whether to preempt).
    #[arg(long, default_value = "never")]
    pub replan_on_arrival: pacer_sim::ArrivalReplan,
    /// Seed for synthetic workloads.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Arrival-rate multiplier for Pollux workloads (Pollux's "job load": 0.5–2.0).
    #[arg(long, default_value_t = 1.0)]
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
    /// Device type whose Gavel throughputs set job durations.
    #[arg(long, default_value = "v100")]
    pub gavel_device: String,
    /// Print machine-readable JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write per-job CSVs, per-round timelines and an allocation plot (SVG) here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// One (workload, policy) row of the output.
#[derive(Debug, Serialize)]
pub struct Row {
    pub workload: String,
    #[serde(flatten)]
    pub summary: pacer_sim::Summary,
}

/// Applications for `--apps KIND:DIR` (`sia:` or `sia-uncalibrated:`), or the
/// embedded Pollux ones plus `--app-dir` folders when it is absent.
pub fn load_apps_arg(apps: Option<&str>, extra: &[PathBuf]) -> Result<Vec<AppModel>> {
    let Some(spec) = apps else {
        return load_apps(extra);
    };
    let (calibrate, dir) = match spec.split_once(':') {
        Some(("sia", d)) => (true, d),
        Some(("sia-uncalibrated", d)) => (false, d),
        _ => bail!("--apps {spec}: expected sia:DIR or sia-uncalibrated:DIR"),
    };
    if !extra.is_empty() {
        bail!("--apps {spec}: cannot be combined with --app-dir");
    }
    pacer_sim::apps::load_sia_dir(Path::new(dir), calibrate)
        .with_context(|| format!("--apps {spec}"))
}

pub fn load_apps(extra: &[PathBuf]) -> Result<Vec<AppModel>> {
    let mut profiles = embedded_profiles();
    for dir in extra {
        let p = load_app_dir(dir).with_context(|| format!("--app-dir {}", dir.display()))?;
        profiles.retain(|q| q.name != p.name);
        profiles.push(p);
    }
    Ok(profiles.into_iter().map(AppModel::new).collect())
}

fn read(path: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))
}

/// The simulator's settings for `args`.
fn sim_config(args: &SimulateArgs) -> SimConfig {
    SimConfig {
        round_s: args.round_s,
        replan_on_arrival: args.replan_on_arrival,
        ..SimConfig::default()
    }
}

/// Resolves workload and trace flags to named job lists.
pub fn workloads(args: &SimulateArgs, apps: &[AppModel]) -> Result<Vec<(String, Vec<SimJob>)>> {
    if !(args.load > 0.0 && args.load.is_finite()) {
        bail!("--load: expected a number > 0, got {}", args.load);
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
                trace::load_pollux_workload(&read(w)?, w, apps, args.load)?,
            ));
        }
    }
    for t in &args.trace {
        let Some((kind, arg)) = t.split_once(':') else {
            bail!(
                "--trace {t}: expected KIND:FILE with KIND one of pollux, philly, gavel, synthetic"
            );
        };
        let name = Path::new(arg)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(arg)
            .to_string();
        let jobs = match kind {
            "pollux" => trace::load_pollux_workload(&read(arg)?, arg, apps, args.load)?,
            "philly" => trace::load_philly(&read(arg)?, arg)?,
            "gavel" => {
                let Some(tp) = &args.gavel_throughputs else {
                    bail!("--trace {t}: gavel traces need --gavel-throughputs FILE (Gavel's simulation_throughputs.json)");
                };
                let tp_text = read(&tp.display().to_string())?;
                let tput = trace::load_gavel_throughputs(&tp_text, &tp.display().to_string())?;
                trace::load_gavel_trace(
                    &read(arg)?,
                    arg,
                    &tput,
                    &args.gavel_device.to_ascii_lowercase(),
                )?
            }
            "synthetic" => {
                let n: usize = arg.parse().ok().filter(|n| *n > 0).with_context(|| {
                    format!("--trace {t}: expected synthetic:JOBS with JOBS a whole number ≥ 1")
                })?;
                let spec = SyntheticSpec {
                    jobs: n,
                    arrivals_per_hour: args.arrivals_per_hour,
                    seed: args.seed,
                    max_replicas: Some(cluster.total_gpus()),
                };
                trace::synthetic(&spec, apps)
            }
            "synthetic-philly" => {
                let n: usize = arg.parse().ok().filter(|n| *n > 0).with_context(|| {
                    format!("--trace {t}: expected synthetic-philly:JOBS with JOBS a whole number ≥ 1")
                })?;
                trace::synthetic_philly(&SyntheticSpec { jobs: n, arrivals_per_hour: args.arrivals_per_hour, seed: args.seed, max_replicas: Some(cluster.total_gpus()) })
            }
            _ => bail!("--trace {t}: unknown kind `{kind}`; expected pollux, philly, gavel, synthetic or synthetic-philly"),
        };
        let label = if kind.starts_with("synthetic") {
            format!("{kind}-{arg}-seed{}", args.seed)
        } else {
            name
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

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClusterFile {
    nodes: Vec<NodeGroupFile>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeGroupFile {
    count: u32,
    gpus: u32,
    #[serde(rename = "type")]
    device_type: String,
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
    let text = read(arg)?;
    let file: ClusterFile = toml::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{arg}: {}", e.to_string().trim_end()))?;
    let groups: Vec<pacer_model::cluster::NodeGroup> = file
        .nodes
        .into_iter()
        .map(|g| pacer_model::cluster::NodeGroup {
            count: g.count,
            gpus_per_node: g.gpus,
            device_type: g.device_type.to_ascii_lowercase(),
        })
        .collect();
    Ok(ClusterSpec::from_groups(&groups, arg)?)
}

/// The policies named by `--policy`: `all` or a comma-separated list of registry
/// names, plus parameterised forms the registry accepts (e.g. `themis-f0.5`).
pub fn policy_names(arg: &str) -> Result<Vec<String>> {
    if arg == "all" {
        // Sia's policies are for per-type applications (`--apps sia:DIR`) and are
        // named explicitly; `all` stays the set it was before them.
        return Ok(pacer_policy::POLICY_NAMES
            .iter()
            .filter(|n| !n.starts_with("sia"))
            .map(|n| n.to_string())
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
            if pacer_policy::by_name(p).is_some() {
                Ok(p.to_string())
            } else {
                bail!(
                    "--policy: unknown policy `{p}`; expected `all`, any of {}, or `themis-fF` \
                     with a fairness knob 0 <= F <= 1 (e.g. themis-f0.8)",
                    pacer_policy::POLICY_NAMES.join(", ")
                )
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
    let apps = load_apps_arg(args.apps.as_deref(), &args.app_dir)?;
    let loads = workloads(&args, &apps)?;
    let any_loss_curve = loads.iter().any(|(_, jobs)| {
        jobs.iter()
            .any(|j| matches!(j.work, Work::LossCurve { .. }))
    });
    if !any_loss_curve {
        for p in &policies {
            if pacer_policy::by_name(p).is_some_and(|x| x.uses_quality()) {
                eprintln!(
                    "note: `{p}` is driven by each job's loss curve, and these jobs carry none \
                     (only SLAQ's recorded profiles do: `pacer experiment slaq`), so it falls \
                     back to equal shares and its rows match `fair`"
                );
            }
        }
    }
    let runs = loads.len() * policies.len();
    let bar = ProgressBar::new(runs as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("template"),
    );
    // Only draw if the whole thing takes a while.
    bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    let started = std::time::Instant::now();
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
            bar.set_message(format!("{wname} / {p}"));
            let mut last_tick = std::time::Instant::now();
            let res = sim.run(policy.as_mut(), |info| {
                let now = info.now_s;
                if last_tick.elapsed().as_millis() > 200 {
                    last_tick = std::time::Instant::now();
                    if started.elapsed().as_secs_f64() > 1.0 && bar.is_hidden() {
                        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                    }
                    bar.set_message(format!("{wname} / {p}: t = {:.1} h", now / 3600.0));
                }
            })?;
            if res.summary.finished < res.summary.jobs {
                bar.suspend(|| {
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
            rows.push(Row {
                workload: wname.clone(),
                summary: res.summary.clone(),
            });
            results.push((wname.clone(), res));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if let Some(dir) = &args.out {
        crate::report::write_outputs(dir, &results, cluster.total_gpus())?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&rows, &cluster, loads.len());
        if let Some(dir) = &args.out {
            println!(
                "\nper-job CSVs, timelines and allocation plot written to {}",
                dir.display()
            );
        }
    }
    Ok(())
}

fn print_table(rows: &[Row], cluster: &ClusterSpec, n_workloads: usize) {
    println!(
        "cluster {} ({} devices); JCT in hours; ρ = finish-time fairness (JCT / time alone on a 1/N share)",
        cluster.describe(),
        cluster.total_gpus()
    );
    let pw = rows
        .iter()
        .map(|r| r.summary.policy.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    println!(
        "{:<14} {:<pw$} {:>5} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6} {:>7} {:>7} {:>8} {:>8}",
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
    );
    let h = |s: f64| s / 3600.0;
    for r in rows {
        let s = &r.summary;
        let jobs = if s.finished == s.jobs {
            format!("{}", s.jobs)
        } else {
            format!("{}/{}", s.finished, s.jobs)
        };
        println!(
            "{:<14} {:<pw$} {:>5} {:>8.3} {:>8.3} {:>8.3} {:>9.2} {:>8.3} {:>6.2} {:>7.2} {:>7.2} {:>8.2} {:>8.1}",
            r.workload,
            s.policy,
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
        );
    }
    if n_workloads > 1 {
        println!("\nmean over {n_workloads} workloads:");
        let mut names: Vec<&str> = rows.iter().map(|r| r.summary.policy.as_str()).collect();
        names.dedup();
        names.sort();
        names.dedup();
        for p in names {
            let sel: Vec<&Row> = rows.iter().filter(|r| r.summary.policy == p).collect();
            let m =
                |f: &dyn Fn(&Row) -> f64| sel.iter().map(|r| f(r)).sum::<f64>() / sel.len() as f64;
            println!(
                "{:<9} avg_jct {:.3} h   p99_jct {:.3} h   makespan {:.2} h   max_ρ {:.2}   avg_ρ {:.2}   util {:.2}   wall {:.1} ms",
                p,
                m(&|r| h(r.summary.avg_jct_s)),
                m(&|r| h(r.summary.p99_jct_s)),
                m(&|r| h(r.summary.makespan_s)),
                m(&|r| r.summary.max_ftf_rho),
                m(&|r| r.summary.avg_ftf_rho),
                m(&|r| r.summary.utilization),
                m(&|r| r.summary.wall_ms)
            );
        }
    }
}
