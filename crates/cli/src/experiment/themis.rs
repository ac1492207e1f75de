//! `pacer experiment themis`: Themis (fairness knob f ∈ {0, 0.5, 0.8}) against
//! work-conserving fair share, Tiresias and the Gavel LPs (finish-time fairness
//! and max-min), on
//! - Gavel's Philly-derived traces on a heterogeneous cluster (36 V100, 36 P100
//!   and 36 K80 by default, Gavel's simulated cluster), jobs running at Gavel's
//!   measured throughput per device type (bundled as `data/gavel`);
//! - the eight Pollux workloads on 64 T4s (embedded).
//!
//! ρ is the simulator's finish-time fairness (`JCT / T_independent`, the same
//! definition for every policy, [`pacer_sim::Simulation::independent_time`]).

use super::plot;
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
        crate::out::write_bytes(&path, csv)?;
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
    let policies: Vec<String> = args
        .policies
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if policies.is_empty() {
        bail!("--policies: expected at least one policy name");
    }
    for (i, p) in policies.iter().enumerate() {
        if pacer_policy::by_name(p).is_none() {
            bail!(
                "--policies: unknown policy `{p}`; expected any of {} or themis-fX",
                pacer_policy::POLICY_NAMES.join(", ")
            );
        }
        if policies[..i].contains(p) {
            bail!("--policies: `{p}` is named twice");
        }
    }
    if args.max_jobs == 0 {
        bail!("--max-jobs: expected a whole number ≥ 1, got 0");
    }
    crate::simulate::check_round_s("--gavel-round-s", args.gavel_round_s)?;
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
    let gavel_cluster = ClusterSpec::parse(&args.gavel_cluster, "--gavel-cluster")?;
    let pollux_names: Vec<&str> = match args.pollux.as_str() {
        "none" => Vec::new(),
        "all" => EMBEDDED_WORKLOADS.iter().map(|w| w.0).collect(),
        list => {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            for (i, n) in names.iter().enumerate() {
                if !EMBEDDED_WORKLOADS.iter().any(|w| w.0 == *n) {
                    bail!(
                        "--pollux {}: unknown workload `{n}`; expected all, none or names among \
                         workload-1 … workload-8",
                        args.pollux
                    );
                }
                if names[..i].contains(n) {
                    bail!("--pollux {}: `{n}` is named twice", args.pollux);
                }
            }
            names
        }
    };
    if let Some(dir) = &args.per_job {
        std::fs::create_dir_all(dir).with_context(|| format!("--per-job {}", dir.display()))?;
    }
    crate::simulate::check_out_dir("--out", &args.out)?;
    crate::out::check_targets(
        "--out",
        &args.out,
        &["results.md", "results.json", "themis.svg"],
    )?;
    let mut rows: Vec<Row> = Vec::new();
    let mut notes = Vec::new();
    // Gavel traces, heterogeneous cluster.
    let tput_path = args.gavel.join("simulation_throughputs.json");
    if tput_path.exists() {
        let text = std::fs::read_to_string(&tput_path)
            .with_context(|| format!("reading {}", tput_path.display()))?;
        let tput =
            pacer_sim::trace::load_gavel_throughputs(&text, &tput_path.display().to_string())?;
        let cluster = gavel_cluster;
        let names: Vec<String> = if args.traces.trim() == "all" {
            let dir = args.gavel.join("msr-seed0");
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .with_context(|| format!("listing {}", dir.display()))?
                .filter_map(|e| {
                    let p = e.ok()?.path();
                    (p.extension()? == "trace")
                        .then(|| p.file_stem()?.to_str().map(String::from))?
                })
                .collect();
            v.sort();
            if v.is_empty() {
                bail!("--traces all: no *.trace files in {}", dir.display());
            }
            v
        } else {
            args.traces
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        for name in &names {
            let path = args.gavel.join("msr-seed0").join(format!("{name}.trace"));
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let jobs = pacer_sim::hetero::load_gavel_trace_hetero(
                &text,
                &path.display().to_string(),
                &tput,
                Some(args.max_jobs),
            )?;
            let group = format!("gavel {name} ({} jobs)", jobs.len());
            for p in &policies {
                let t0 = std::time::Instant::now();
                let s = simulate(&cluster, &[], &jobs, p, args.gavel_round_s, &args, name)?;
                eprintln!("{group} {p}: {:.1} s", t0.elapsed().as_secs_f64());
                rows.push(mean_row(&group, p, &[s]));
            }
        }
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
        let apps: Vec<AppModel> = embedded_profiles().into_iter().map(AppModel::new).collect();
        let cluster = ClusterSpec::parse("16x4:t4", "cluster")?;
        let chosen: Vec<&(&str, &str)> = EMBEDDED_WORKLOADS
            .iter()
            .filter(|(n, _)| pollux_names.contains(n))
            .collect();
        let loads: Vec<Vec<SimJob>> = chosen
            .iter()
            .map(|(n, text)| pacer_sim::trace::load_pollux_workload(text, n, &apps, 1.0))
            .collect::<Result<_, _>>()?;
        let group = format!("pollux ({} workloads, 64 T4)", chosen.len());
        for p in &policies {
            let t0 = std::time::Instant::now();
            let mut s = Vec::new();
            for (jobs, (name, _)) in loads.iter().zip(&chosen) {
                s.push(simulate(&cluster, &apps, jobs, p, 60.0, &args, name)?);
            }
            eprintln!("{group} {p}: {:.1} s", t0.elapsed().as_secs_f64());
            rows.push(mean_row(&group, p, &s));
        }
    }
    if rows.is_empty() {
        bail!("nothing ran: no Gavel data (or an empty --traces) and --pollux none");
    }
    write(&args, &policies, &rows, &notes)
}

/// Why the JCT target (Themis within +10% of the best baseline) does not hold
/// everywhere; the per-job data behind it: `pacer experiment themis --per-job DIR`.
const ANALYSIS: &str = "\
## Where Themis loses JCT, and why

Target: avg JCT no worse than +10% of the best baseline. Per-job data: `--per-job DIR` writes \
every job's timings, the time it waited and ran, the device-seconds it got per device type \
and `type_efficiency` (speed of what it got over the speed of as many devices of its best \
type); compare each job's JCT under Themis and under gavel-ftf.

- Device types (fixed). Themis used to lose on b436b2 by handing each job its *fastest* \
  type, which is the V100 for almost every job: winner determination was greedy by value \
  alone and a job's type is fixed by its first bundle. Jobs that gain little from a V100 \
  (Recommendation: 0.7x of its K80 speed; some LM jobs: 3x) took V100s while jobs that are \
  10-14x faster there (ResNet-18, CycleGAN) ran on K80s. Device-weighted type efficiency was \
  0.68 against Gavel's 0.73 (5% more device-hours per job), and at scale devices idled: in \
  `pacer bench round --jobs 1000 --gpus 4000 --types 3` Themis at f = 0 put 963 of 1,000 \
  jobs on V100s and left 2,378 of 4,000 GPUs (every K80) idle. Winner determination now runs \
  at per-type clearing prices (tâtonnement, keeping the best Σ log(1/ρ)), the leftovers go \
  by the same priced auction, and a job starting this round moves to free devices of \
  another type when they make it faster: type efficiency 0.70-0.74, device-h/job 197-206 \
  (Gavel: 203), all 4,000 GPUs allocated in that bench at f = 0 and 0.5 (3,958 at f = 0.8). \
  b436b2 went from +17.0/+21.0/+26.2% to the numbers above; on the first 200 and 400 jobs \
  of b436b2 from +14.0/+15.3/+25.6% and +21.4/+27.6/+42.2% to +7.9/+12.1/+12.0% and \
  +13.7/+13.8/+22.6% (f = 0/0.5/0.8); 6c71a0 stays within -3.5 ... -0.4%. Cost: max ρ (long) at f = 0.5 \
  on b436b2 rose from 1.82 to 2.46 (1.35/1.34 -> 1.44/1.39 at f = 0/0.8).
- What is left on b436b2 is not efficiency (Themis spends fewer device-hours per job than \
  Gavel now) but *whose* JCT the devices shorten. Themis only asks ρ ≤ 1: a job that is \
  ahead (ρ < 1) does not bid at f > 0 and has small bids at f = 0, because its ρ hardly moves \
  when it waits. Jobs with T_independent of 10-100 h end at mean ρ 0.79 under Themis \
  against 0.68 under gavel-ftf and account for most of the extra job-hours (f = 0.8: +1,108 h \
  of +1,650 h; the six worst jobs waited 45-103 h under Themis against 0-39 h under Gavel, \
  on as many device-hours; traced round by round, such a job waits at ρ ≈ 0.6 outside the \
  bidding set while the jobs with worse ρ are served); short jobs (T_independent < 10 h) gain a little (-10 h in total). Gavel's LP \
  shares devices among all jobs every round instead. Themis also runs jobs at 66-80% of \
  their requested gang (partial bundles); offering only whole gangs (tried on the \
  previous auction) made JCT worse (63 -> 73 h at f = 0), so partial bundles are not the \
  cause. Longer leases (1,440 s, 3,600 s; tried during this change) did not help \
  consistently.
- Pollux workloads (one device type, so prices cannot change types): f = 0 unchanged, \
  f = 0.5 and 0.8 moved from +7.4/+5.2% to +7.8/+8.8% because leftovers now go by the \
  proportional-fair auction instead of worst ρ first (max ρ 7.09 -> 5.98 at f = 0.8 but \
  6.23 -> 6.43 at f = 0.5; max ρ (long) 2.39/2.26 -> 2.62/2.52). Fairness (max ρ) is worse than fair share on these workloads: \
  the largest ρ are very short jobs (see 'Job with the largest ρ').
- Partial allocation (changed after the numbers above were first written). A winner's \
  fraction c_j compares the others' Σ log(1/ρ) with and without j. It used to re-run the \
  whole auction without j, once per winner: at f = 0, 1,000 jobs / 4,000 GPUs, 449 ms of a \
  round (`pacer bench round --types 3`; 126 ms at f = 0.5, 53 ms at f = 0.8), and a greedy \
  re-run can hand the others *less* than they won with j (property test \
  `the_others_never_lose_without_a_winner` fails for it), so c_j > 1 was clamped to 1. Now \
  j's devices are returned and the same greedy continues from the auction's outcome, \
  re-planning only the bidders that can use them: c_j ≤ 1 by construction, and the round \
  takes 68 / 27 / 26 ms at f = 0 / 0.5 / 0.8 (same bench, load ~4). On the 15 Gavel traces \
  of msr-seed0 (first 300 jobs each; `--traces` with all 15 stems, `--pollux none`) the JCT gap to the best of gavel-maxmin / gavel-ftf \
  changed from a mean of +1.04 / +1.11 / +0.28% to +0.90 / +1.06 / +0.24% (f = 0 / 0.5 / \
  0.8), within ±0.4 points on 12 traces, better on ee9e8c (+11.8 / +7.8 / +2.4% -> \
  +7.9 / +3.7 / +2.6%) and worse on b436b2 (+9.1 / +11.1 / +10.2% -> the table above).
- Gavel's realisation is not handicapped here: its placements change at most once per \
  360 s Gavel round, and on the Pollux workloads (60 s simulator rounds) it no longer \
  re-picks jobs every simulator round.

## All 15 Gavel traces

`pacer experiment themis --traces all --pollux none --out experiments/themis/all-traces` \
(one minute) runs every trace of msr-seed0, first 300 jobs (four traces have only 3-18 \
jobs); its Summary table gives each trace's JCT gap and fairness gains. JCT within +10% of \
the best baseline: 14/15 traces at f = 0 and 0.5, 15/15 at f = 0.8 (b436b2 is the one \
that fails, +12.3 / +14.6 / +10.0%). Max ρ over all jobs ≥ 2x better than fair share on \
1/15 (7f04ca, 4.2x): on every trace Themis' largest ρ belongs to a job of minutes (a \
Recommendation job on 14, a 0.1-h Transformer job on one), whose ρ is set by the wait for \
the next 360 s round, and on 12 of them fair share's largest does too. Over jobs of at least 10 rounds: ≥ 2x on 10/15 — every \
300-job trace but 103959 (1.94x) — and 1.0-1.1x on the four small traces, where jobs hardly \
contend. Against Tiresias: 4/15 over all jobs, 10/15 over long jobs.

## Re-planning at arrivals (`--replan-on-arrival idle|always`)

Whatever the policy, a job that arrives mid-round waits for the next round here, as in \
Gavel's and Pollux's simulators; a job of minutes then has ρ ≈ 360 s / its own time. The \
simulator can also start a round at an arrival, for every policy: `idle` when the last \
allocation left devices idle (nobody is preempted), `always` at every arrival (an \
event-driven scheduler; the policy decides whether to preempt). Outputs: \
`experiments/themis/replan-idle/`, `experiments/themis/replan-always/` (same groups as \
above). Neither makes Themis 2x fairer than fair share over all jobs, and the reason is \
Themis' own design: its leases. A newcomer gets devices when a lease expires or from \
leftovers, and Themis is work-conserving, so devices are rarely idle at an arrival.
- `idle`: gains over fair share 1.96x on 6c71a0 (max ρ 10.45 vs 5.34, both a minute-long \
  Recommendation job that arrived while every device was allocated), 1.36 / 2.70 / 1.54x on b436b2, \
  0.43-0.44x on the Pollux workloads (a saturated cluster: nothing is idle); JCT vs the best \
  baseline -1.9 / -1.0 / -1.7%, +7.2 / +17.1 / +11.0%, +10.7 / +11.8 / +9.4% (f = 0 / 0.5 / \
  0.8). Over all 15 traces (`--traces all --pollux none`): ≥ 2x over all jobs on 3-4/15, \
  over long jobs on 8-9/15; JCT within +10% on 14-15/15.
- `always`: fair share re-plans for every newcomer and becomes the fairest policy (max ρ \
  4.85 on b436b2, 1.72 on the Pollux workloads) at the price of JCT (b436b2: 136.5 h \
  against 54.1 h for Gavel-FTF and 61.5 h for Themis at f = 0.8); Themis 0.25-0.30x of \
  its fairness there, 1.33x on 6c71a0. Over all 15 traces: ≥ 2x over all jobs on 3/15, \
  over long jobs on 10/15.
Over jobs of at least 10 rounds Themis stays 2.7-19x fairer than fair share on both Gavel \
traces in every setting; the all-jobs target is decided by minute-long jobs and by how \
soon a scheduler lets them in.

Fixed earlier: a Themis winner renewing its lease kept a gang spread over more nodes than \
needed although a consolidated bundle was free; bundles are valued by whether they can be \
consolidated now, held devices at their real placement, and spread gangs are re-placed \
when the lease is renewed.
";

/// Themis against the baselines in every group at once: the JCT gap to the best
/// baseline and the fairness gains, with how many groups meet the targets.
fn summary(md: &mut String, groups: &[String], rows: &[Row]) -> Result<()> {
    let themis: Vec<String> = {
        let mut v: Vec<String> = rows
            .iter()
            .filter(|r| r.policy.starts_with("themis"))
            .map(|r| r.policy.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    };
    if themis.is_empty() {
        return Ok(());
    }
    writeln!(md, "## Summary\n")?;
    writeln!(
        md,
        "Per group: Themis' avg JCT against the best baseline, and the baselines' max ρ over \
         Themis' (all jobs; jobs of at least `--long-rounds` rounds in brackets). Targets: JCT \
         ≤ +10%, fairness gain ≥ 2x.\n"
    )?;
    writeln!(
        md,
        "| group | Themis | JCT vs best baseline | gain vs fair | gain vs Tiresias |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    // Per Themis policy: groups, JCT within 10 %, ≥ 2x vs fair (all, long), vs Tiresias.
    let mut counts: Vec<[usize; 6]> = vec![[0; 6]; themis.len()];
    for g in groups {
        let sel: Vec<&Row> = rows.iter().filter(|r| &r.group == g).collect();
        let best = sel
            .iter()
            .filter(|r| !r.policy.starts_with("themis"))
            .map(|r| r.avg_jct_h)
            .fold(f64::INFINITY, f64::min);
        let get = |p: &str| sel.iter().find(|r| r.policy == p).copied();
        for (ti, t) in themis.iter().enumerate() {
            let Some(t) = get(t) else { continue };
            let c = &mut counts[ti];
            c[0] += 1;
            let gap = t.avg_jct_h / best - 1.0;
            if best.is_finite() && gap <= 0.10 {
                c[1] += 1;
            }
            let mut gain = |p: &str, slot: usize| {
                get(p).map_or("-".to_string(), |b| {
                    let (all, long) = (b.max_rho / t.max_rho, b.max_rho_long / t.max_rho_long);
                    if all >= 2.0 {
                        c[slot] += 1;
                    }
                    if long >= 2.0 {
                        c[slot + 1] += 1;
                    }
                    format!("{all:.2}x ({long:.2}x)")
                })
            };
            let fair = gain("fair", 2);
            let tiresias = gain("tiresias", 4);
            let jct = if best.is_finite() {
                format!("{:+.1}%", 100.0 * gap)
            } else {
                "-".to_string()
            };
            writeln!(md, "| {g} | {} | {jct} | {fair} | {tiresias} |", t.policy)?;
        }
    }
    writeln!(md)?;
    for (t, c) in themis.iter().zip(&counts) {
        writeln!(
            md,
            "- {t}: JCT within +10% in {}/{} groups; ≥ 2x fairer than fair share in {}/{} ({}/{} over long jobs), than Tiresias in {}/{} ({}/{}).",
            c[1], c[0], c[2], c[0], c[3], c[0], c[4], c[0], c[5], c[0]
        )?;
    }
    writeln!(md)?;
    Ok(())
}

fn write(args: &ThemisArgs, policies: &[String], rows: &[Row], notes: &[String]) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut groups: Vec<String> = rows.iter().map(|r| r.group.clone()).collect();
    groups.dedup();
    let mut md = String::new();
    writeln!(md, "# Themis vs fair share, Tiresias and Gavel\n")?;
    writeln!(
        md,
        "Regenerate: `pacer experiment themis --out {}` (Gavel traces `{}`, first {} jobs each, cluster `{}`, \
         {} s rounds; Pollux workloads on 16x4:t4, 60 s rounds; Themis lease max({} s, 2 rounds){}). ρ = JCT / time \
         alone on a 1/N share (same definition for every policy); max ρ and JCT are means over the \
         group's runs.\n",
        args.out.display(),
        args.traces,
        args.max_jobs,
        args.gavel_cluster,
        args.gavel_round_s,
        args.lease_s,
        match args.replan_on_arrival {
            pacer_sim::ArrivalReplan::Never => "",
            pacer_sim::ArrivalReplan::WhenIdle =>
                "; `--replan-on-arrival idle`: a round also starts when a job arrives while devices are idle",
            pacer_sim::ArrivalReplan::Always =>
                "; `--replan-on-arrival always`: a round also starts at every arrival",
        }
    )?;
    writeln!(
        md,
        "`max ρ (long)`: jobs whose T_independent is at least {} rounds; a shorter job's ρ is \
         bounded below by the round length (it waits for the next round, then pays the restart), \
         whatever the policy.\n",
        args.long_rounds
    )?;
    for n in notes {
        writeln!(md, "> {n}\n")?;
    }
    summary(&mut md, &groups, rows)?;
    for g in &groups {
        writeln!(md, "## {g}\n")?;
        writeln!(
            md,
            "| policy | max ρ | max ρ (long) | mean ρ | avg JCT (h) | utilisation | idle while jobs wait | restarts/job | device-h/job | finished | wall (ms) |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
        let sel: Vec<&Row> = rows.iter().filter(|r| &r.group == g).collect();
        for r in &sel {
            writeln!(
                md,
                "| {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.1} | {:.2} | {:.0}% | {:.0} |",
                r.policy,
                r.max_rho,
                r.max_rho_long,
                r.mean_rho,
                r.avg_jct_h,
                r.utilization,
                r.idle_while_waiting,
                r.restarts,
                r.device_h,
                100.0 * r.finished_frac,
                r.wall_ms
            )?;
        }
        let get = |p: &str| sel.iter().find(|r| r.policy == p).copied();
        let baselines: Vec<&Row> = sel
            .iter()
            .filter(|r| !r.policy.starts_with("themis"))
            .copied()
            .collect();
        let best_jct = baselines
            .iter()
            .map(|r| r.avg_jct_h)
            .fold(f64::INFINITY, f64::min);
        let best_name = baselines
            .iter()
            .min_by(|a, b| a.avg_jct_h.total_cmp(&b.avg_jct_h))
            .map_or("-", |r| r.policy.as_str());
        writeln!(md, "\nJob with the largest ρ:\n")?;
        for r in &sel {
            writeln!(md, "- {}: {}", r.policy, r.worst)?;
        }
        writeln!(md, "\nFairness gain = baseline's max ρ / Themis' max ρ (all jobs; long jobs in brackets).\n")?;
        writeln!(md, "| Themis | vs fair | vs Tiresias | vs Gavel-FTF | avg JCT vs best baseline ({best_name}) |")?;
        writeln!(md, "|---|---|---|---|---|")?;
        for t in sel.iter().filter(|r| r.policy.starts_with("themis")) {
            let ratio = |p: &str| {
                get(p).map_or("-".to_string(), |b| {
                    format!(
                        "{:.2}x ({:.2}x)",
                        b.max_rho / t.max_rho,
                        b.max_rho_long / t.max_rho_long
                    )
                })
            };
            writeln!(
                md,
                "| {} | {} | {} | {} | {:+.1}% |",
                t.policy,
                ratio("fair"),
                ratio("tiresias"),
                ratio("gavel-ftf"),
                100.0 * (t.avg_jct_h / best_jct - 1.0)
            )?;
        }
        writeln!(md)?;
    }
    writeln!(md, "{ANALYSIS}")?;
    crate::out::write_bytes(&args.out.join("results.md"), &md)?;
    crate::out::write_bytes(
        &args.out.join("results.json"),
        serde_json::to_string_pretty(rows)?,
    )?;
    let panel = |f: &dyn Fn(&Row) -> f64| -> Vec<Vec<f64>> {
        groups
            .iter()
            .map(|g| {
                policies
                    .iter()
                    .map(|p| {
                        rows.iter()
                            .find(|r| &r.group == g && &r.policy == p)
                            .map_or(f64::NAN, f)
                    })
                    .collect()
            })
            .collect()
    };
    plot::grouped_bars(
        &args.out.join("themis.svg"),
        "Finish-time fairness and efficiency",
        &groups,
        policies,
        &[
            ("max ρ (lower is fairer)".to_string(), panel(&|r| r.max_rho)),
            ("max ρ, long jobs".to_string(), panel(&|r| r.max_rho_long)),
            ("mean ρ".to_string(), panel(&|r| r.mean_rho)),
            ("average JCT (h)".to_string(), panel(&|r| r.avg_jct_h)),
            ("utilisation".to_string(), panel(&|r| r.utilization)),
        ],
    )?;
    crate::out::print(&format!("{md}written to {}\n", args.out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(group: &str, policy: &str, max_rho: f64, max_rho_long: f64, jct_h: f64) -> Row {
        Row {
            group: group.into(),
            policy: policy.into(),
            runs: 1,
            finished_frac: 1.0,
            max_rho,
            mean_rho: 1.0,
            avg_jct_h: jct_h,
            utilization: 0.5,
            wall_ms: 1.0,
            worst: String::new(),
            max_rho_long,
            idle_while_waiting: 0.0,
            restarts: 1.0,
            device_h: 1.0,
        }
    }

    #[test]
    fn the_summary_counts_the_groups_that_meet_each_target() {
        let groups = vec!["a".to_string(), "b".to_string()];
        let rows = vec![
            // a: Themis +5 % JCT, 2.67x / 4x fairer than fair, 5.33x / 8x than Tiresias.
            row("a", "fair", 4.0, 4.0, 1.0),
            row("a", "tiresias", 8.0, 8.0, 1.2),
            row("a", "themis-f0", 1.5, 1.0, 1.05),
            // b: +20 % JCT, 1.2x / 3x fairer than fair, 1x / 1x than Tiresias.
            row("b", "fair", 1.2, 3.0, 1.0),
            row("b", "tiresias", 1.0, 1.0, 2.0),
            row("b", "themis-f0", 1.0, 1.0, 1.2),
        ];
        let mut md = String::new();
        summary(&mut md, &groups, &rows).unwrap();
        assert!(
            md.contains("| a | themis-f0 | +5.0% | 2.67x (4.00x) | 5.33x (8.00x) |"),
            "{md}"
        );
        assert!(
            md.contains("| b | themis-f0 | +20.0% | 1.20x (3.00x) | 1.00x (1.00x) |"),
            "{md}"
        );
        assert!(
            md.contains(
                "- themis-f0: JCT within +10% in 1/2 groups; ≥ 2x fairer than fair share in 1/2 \
                 (2/2 over long jobs), than Tiresias in 1/2 (1/2)."
            ),
            "{md}"
        );
        // Without Themis rows there is nothing to summarise.
        let mut md = String::new();
        summary(&mut md, &groups, &rows[..2]).unwrap();
        assert!(md.is_empty());
    }
}
