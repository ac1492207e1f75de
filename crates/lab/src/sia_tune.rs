//! `pacer-lab sia-tune`: where the Sia-style policies lose time on Sia's workloads,
//! and the parameter search of `sia-pacer` (docs/sia.md, "sia-pacer").
//!
//! For each policy (named, or `sia-pacer` at each `τ` of `--taus`, with and without
//! holding restarting jobs) and each workload of `--workloads` it runs the whole
//! simulation and splits the average JCT: hours before a job first runs, hours it
//! waits after that (preempted), hours it runs on each device type, restarts and
//! the hours they cost, GPU-hours per job; and the avg JCT of the short 80 % and
//! the long 20 % of jobs (by GPU-hours under that policy). The protocol of
//! `sia-pacer`: `τ` chosen on saturn workloads 1–5 only (`--workloads saturn:1-5`),
//! then every workload reported by `sia-eval`.

use anyhow::{bail, Context, Result};
use pacer_model::{Allocation, ClusterSpec, JobId};
use pacer_policy::sia::{SiaPacer, Weights};
use pacer_policy::{ClusterView, Policy};
use pacer_sim::{ProfileMode, SimConfig, Simulation};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `pacer-lab sia-tune`
#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// Sia's data folder (`traces/`, `workloads/`).
    #[arg(long, default_value = "../shared/data/sia")]
    pub data: PathBuf,
    #[arg(long, default_value = "6x4:aws,2x8:dgx-ext,3x8:rtx")]
    pub cluster: String,
    /// Workloads: `TRACE:A-B` ranges, comma separated (`saturn:1-5,philly:1-8`).
    #[arg(long, default_value = "saturn:1-5")]
    pub workloads: String,
    /// Registry policies to run as they are, comma separated (may be empty).
    #[arg(long, default_value = "sia,sia-exact")]
    pub policies: String,
    /// `sia-pacer` variants to try, comma separated, each `WEIGHTS:TAU:P:HOLD`:
    /// WEIGHTS `none`, `young` (τ/(τ+a)) or `old` ((τ+a)/τ), τ in GPU-seconds,
    /// P the generalised mean's exponent, HOLD 1 to keep restarting jobs in place;
    /// optional fifth field: `sia1` offers new jobs every type at S = 1 as Sia
    /// does (otherwise at their one-device goodput per type), `liftN` lifts the exploration cap only from a cap of N (4: after two device counts), `capped` keeps
    /// Sia's exploration cap on replicas (otherwise up to the batch limit).
    #[arg(
        long,
        default_value = "none:0:-0.5:1,none:0:-0.5:0,none:0:-0.5:1:capped,young:3600:-0.5:1"
    )]
    pub variants: String,
    /// `fitted` or `online` per-type profiles.
    #[arg(long, default_value = "fitted")]
    pub profiles: String,
}

/// One round's decisions: per job, whether it had run before and the type it got.
type RoundRows = (f64, Vec<(JobId, bool, Option<u16>)>);
/// A label and how to build the policy it names.
type Builder = (String, Box<dyn Fn() -> Result<Box<dyn Policy>>>);

/// Per-round bookkeeping of a wrapped policy's decisions.
struct Observe<'a> {
    inner: &'a mut dyn Policy,
    types: usize,
    last: Option<RoundRows>,
    /// Per job: seconds waiting after its first start, seconds per device type.
    waiting: HashMap<JobId, f64>,
    on_type: HashMap<JobId, Vec<f64>>,
}

impl Observe<'_> {
    fn account(&mut self, now: f64) {
        if let Some((t0, rows)) = self.last.take() {
            let dt = (now - t0).max(0.0);
            for (id, started, ty) in rows {
                match ty {
                    Some(t) => {
                        self.on_type
                            .entry(id)
                            .or_insert_with(|| vec![0.0; self.types])[t as usize] += dt
                    }
                    None if started => *self.waiting.entry(id).or_default() += dt,
                    None => {}
                }
            }
        }
    }
}

impl Policy for Observe<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn adaptive_batch(&self) -> bool {
        self.inner.adaptive_batch()
    }
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        self.account(view.now_s);
        let out = self.inner.allocate(view);
        let rows = view
            .jobs
            .iter()
            .zip(&out)
            .map(|(j, a)| {
                let ty = a
                    .slots()
                    .first()
                    .map(|s| view.cluster.nodes[s.0 .0 as usize].device_type.0);
                (j.id, j.attained_gpu_s > 0.0, ty)
            })
            .collect();
        self.last = Some((view.now_s, rows));
        out
    }
    fn notes(&self) -> String {
        self.inner.notes()
    }
}

/// One run, split up (hours per job unless said).
#[derive(Debug, Clone)]
struct Split {
    avg_jct_h: f64,
    p99_jct_h: f64,
    makespan_h: f64,
    finished: usize,
    jobs: usize,
    queue_h: f64,
    waiting_h: f64,
    on_type_h: Vec<f64>,
    restarts: f64,
    restart_h: f64,
    gpu_h: f64,
    short_jct_h: f64,
    long_jct_h: f64,
}

fn simulate(
    cluster: &ClusterSpec,
    apps: &[pacer_sim::AppModel],
    file: &Path,
    policy: &mut dyn Policy,
    profiles: ProfileMode,
) -> Result<Split> {
    let origin = file.display().to_string();
    let text = pacer_fsio::read_to_string_limited(file, pacer_fsio::limits::TRACE)?;
    let jobs = pacer_sim::trace::load_pollux_workload(&text, &origin, apps, 1.0)?;
    let config = SimConfig {
        round_s: 60.0,
        profiles,
        ..SimConfig::default()
    };
    let default_restart = config.restart_s;
    let sim = Simulation {
        cluster,
        apps,
        jobs: &jobs,
        config,
    };
    let types = cluster.device_types.len().max(1);
    let mut obs = Observe {
        inner: policy,
        types,
        last: None,
        waiting: HashMap::new(),
        on_type: HashMap::new(),
    };
    let r = sim.run(&mut obs, |_| {})?;
    let n = r.jobs.len().max(1) as f64;
    let h = |s: f64| s / 3600.0;
    let restart_of = |app: &str| {
        apps.iter()
            .find(|a| a.name() == app)
            .and_then(|a| a.restart_s)
            .unwrap_or(default_restart)
    };
    let mut on_type_h = vec![0.0; types];
    for v in obs.on_type.values() {
        for (t, s) in v.iter().enumerate() {
            on_type_h[t] += h(*s) / n;
        }
    }
    // Short 80 % / long 20 % of jobs by GPU-hours held.
    let mut by_gpu: Vec<(f64, f64)> = r
        .jobs
        .iter()
        .filter_map(|j| j.jct_s().map(|c| (j.gpu_s, c)))
        .collect();
    by_gpu.sort_by(|a, b| a.0.total_cmp(&b.0));
    let cut = (by_gpu.len() as f64 * 0.8).round() as usize;
    let mean = |x: &[(f64, f64)]| h(x.iter().map(|p| p.1).sum::<f64>() / x.len().max(1) as f64);
    Ok(Split {
        avg_jct_h: h(r.summary.avg_jct_s),
        p99_jct_h: h(r.summary.p99_jct_s),
        makespan_h: h(r.summary.makespan_s),
        finished: r.summary.finished,
        jobs: r.summary.jobs,
        queue_h: r
            .jobs
            .iter()
            .filter_map(|j| j.queueing_s())
            .map(h)
            .sum::<f64>()
            / n,
        waiting_h: obs.waiting.values().map(|s| h(*s)).sum::<f64>() / n,
        on_type_h,
        restarts: r.jobs.iter().map(|j| j.restarts as f64).sum::<f64>() / n,
        restart_h: r
            .jobs
            .iter()
            .map(|j| h(j.restarts as f64 * restart_of(&j.application)))
            .sum::<f64>()
            / n,
        gpu_h: r.jobs.iter().map(|j| h(j.gpu_s)).sum::<f64>() / n,
        short_jct_h: mean(&by_gpu[..cut]),
        long_jct_h: mean(&by_gpu[cut..]),
    })
}

/// `(trace, n, file)` of `TRACE:A-B,…`.
fn parse_workloads(data: &Path, spec: &str) -> Result<Vec<(String, u32, PathBuf)>> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad =
            || anyhow::anyhow!("--workloads: `{part}`: expected TRACE:A-B or TRACE:N (saturn:1-5)");
        let (trace, range) = part.split_once(':').ok_or_else(bad)?;
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if a > b || b > 1000 {
            return Err(bad());
        }
        for n in a..=b {
            let f = data
                .join("workloads")
                .join(trace)
                .join(format!("workload-{n}.csv"));
            if !f.is_file() {
                bail!("--workloads: {}: no such workload file", f.display());
            }
            out.push((trace.to_string(), n, f));
        }
    }
    if out.is_empty() {
        bail!("--workloads: no workload named");
    }
    Ok(out)
}

/// `WEIGHTS:TAU:P:HOLD` of `--variants`.
fn parse_variant(v: &str) -> Result<(Weights, f64, bool, bool, bool, u32)> {
    let bad = || {
        anyhow::anyhow!(
            "--variants: `{v}`: expected WEIGHTS:TAU:P:HOLD (none|young|old, GPU-seconds ≥ 0, \
             a negative number, 0|1)"
        )
    };
    let f: Vec<&str> = v.split(':').collect();
    let sia1 = f.get(4) == Some(&"sia1");
    let capped = f.get(4) == Some(&"capped");
    let lift = f
        .get(4)
        .and_then(|x| x.strip_prefix("lift"))
        .and_then(|n| n.parse::<u32>().ok());
    if f.len() == 5 && !sia1 && !capped && lift.is_none() {
        return Err(bad());
    }
    if !(4..=5).contains(&f.len()) {
        return Err(bad());
    }
    let tau: f64 = f[1].parse().map_err(|_| bad())?;
    let p: f64 = f[2].parse().map_err(|_| bad())?;
    if !(tau.is_finite() && tau >= 0.0 && p.is_finite() && p < 0.0) {
        return Err(bad());
    }
    let w = match f[0] {
        "none" => Weights::Uniform,
        "young" => Weights::Young { tau_gpu_s: tau },
        "old" => Weights::Old { tau_gpu_s: tau },
        _ => return Err(bad()),
    };
    let hold = match f[3] {
        "0" => false,
        "1" => true,
        _ => return Err(bad()),
    };
    Ok((w, p, hold, sia1, capped, lift.unwrap_or(2)))
}

pub fn run(a: TuneArgs) -> Result<()> {
    let cluster = ClusterSpec::parse(&a.cluster, "--cluster")?;
    let profiles = match a.profiles.as_str() {
        "fitted" => ProfileMode::Fitted,
        "online" => ProfileMode::Online,
        x => bail!("--profiles: `{x}`: expected fitted or online"),
    };
    let apps = pacer_sim::apps::load_sia_dir(&a.data.join("traces"), true)?;
    let files = parse_workloads(&a.data, &a.workloads)?;
    // (label, builder)
    let mut runs: Vec<Builder> = Vec::new();
    for p in a
        .policies
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let name = p.to_string();
        runs.push((
            name.clone(),
            Box::new(move || pacer_policy::by_name(&name).context("--policies")),
        ));
    }
    for v in a
        .variants
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        let (w, p, hold, sia1, capped, lift) = parse_variant(v)?;
        runs.push((
            format!("sia-pacer {v}"),
            Box::new(move || {
                let mut s = SiaPacer::new(w, p, hold);
                s.sia.fresh_by_speed = !sia1;
                s.sia.explore_cap = capped;
                s.sia.explore_from = lift;
                Ok(Box::new(s) as Box<dyn Policy>)
            }),
        ));
    }
    let type_names: Vec<&str> = cluster.device_types.iter().map(|t| t.as_str()).collect();
    println!(
        "| policy | trace | workload | avg JCT h | p99 | makespan | done | queue h | waiting h | {} | restarts | restart h | GPU-h | short 80 % JCT | long 20 % JCT |",
        type_names
            .iter()
            .map(|t| format!("on {t} h"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|{}", "---|".repeat(15 + type_names.len() - 1));
    let mut means = Vec::new();
    for (label, build) in &runs {
        let mut sum = 0.0;
        for (trace, n, file) in &files {
            let mut p = build()?;
            let s = simulate(&cluster, &apps, file, p.as_mut(), profiles)?;
            sum += s.avg_jct_h;
            println!(
                "| {label} | {trace} | {n} | {:.4} | {:.2} | {:.2} | {}/{} | {:.3} | {:.3} | {} | {:.2} | {:.3} | {:.2} | {:.3} | {:.3} |",
                s.avg_jct_h,
                s.p99_jct_h,
                s.makespan_h,
                s.finished,
                s.jobs,
                s.queue_h,
                s.waiting_h,
                s.on_type_h
                    .iter()
                    .map(|x| format!("{x:.3}"))
                    .collect::<Vec<_>>()
                    .join(" | "),
                s.restarts,
                s.restart_h,
                s.gpu_h,
                s.short_jct_h,
                s.long_jct_h
            );
        }
        means.push((label.clone(), sum / files.len() as f64));
    }
    println!(
        "\nmean avg JCT over {} workloads ({}):",
        files.len(),
        a.workloads
    );
    for (label, m) in &means {
        println!("  {label}: {m:.4} h");
    }
    Ok(())
}
