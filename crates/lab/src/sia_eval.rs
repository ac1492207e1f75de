//! Sia's workloads under pacer's Sia policies and Sia's simulator's Gavel, next to
//! the numbers of Sia's own simulator (`pacer-lab sia-eval`; docs/sia.md).
//!
//! Runs every saturn and philly workload of Sia's data under `sia`, `sia-exact` and
//! `sia-pacer`
//! (60 s rounds) and `gavel-maxsum` (360 s rounds, as Sia's `--interval=360`) on Sia's
//! default cluster with the calibrated tables (`sia:DIR`), reads Sia's and Gavel's
//! numbers from the data folder's anchor table (its ANCHORS file), and writes
//! `results.md` and `results.json`.

use anyhow::{bail, Context, Result};
use pacer_model::ClusterSpec;
use pacer_sim::{ProfileMode, SimConfig, Simulation};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `pacer-lab sia-eval`
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Sia's data folder (`traces/`, `workloads/` and the ANCHORS file of Sia's numbers).
    #[arg(long, default_value = "../shared/data/sia")]
    pub data: PathBuf,
    /// Where `results.md` and `results.json` go.
    #[arg(long, default_value = "experiments/sia")]
    pub out: PathBuf,
    /// Cluster (Sia's default).
    #[arg(long, default_value = "6x4:aws,2x8:dgx-ext,3x8:rtx")]
    pub cluster: String,
    /// Traces to run, comma separated (`saturn`, `philly`).
    #[arg(long, default_value = "saturn,philly")]
    pub traces: String,
    /// Instead: run `sia`, `sia-exact` and `sia-pacer` with the fitted per-type models and with
    /// profiles learned online (`--profiles online`), and write `profiles.md` and
    /// `profiles.json` (`crates/lab/src/sia_profiles.rs`).
    #[arg(long)]
    pub compare_profiles: bool,
}

/// One run's numbers (hours, seconds of wall time).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    pub(crate) avg_jct_h: f64,
    pub(crate) p99_jct_h: f64,
    pub(crate) makespan_h: f64,
    pub(crate) finished: usize,
    pub(crate) jobs: usize,
    pub(crate) wall_s: f64,
}

/// Sia's simulator's numbers for one (policy, trace, workload).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Anchor {
    pub(crate) avg_jct_h: f64,
    p99_jct_h: f64,
    makespan_h: f64,
}

#[derive(Debug, Serialize)]
struct Row {
    trace: String,
    workload: String,
    sia_anchor: Option<Anchor>,
    sia: Run,
    sia_exact: Run,
    sia_pacer: Run,
    gavel_anchor: Option<Anchor>,
    gavel_maxsum: Run,
}

/// Rows `| policy | trace | workload | done | avg | p99 | makespan | …` of the anchor table.
pub(crate) fn anchors(path: &Path) -> Result<Vec<(String, String, String, Anchor)>> {
    let text = pacer_fsio::read_to_string_limited(path, pacer_fsio::limits::TABLE)
        .with_context(|| format!("{}: cannot read Sia's anchor numbers", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // Leading and trailing empty cells around 10 columns.
        if cells.len() < 9 || !matches!(cells[1], "sia" | "gavel") {
            continue;
        }
        let num = |k: usize| -> Result<f64> {
            cells[k].parse().with_context(|| {
                format!(
                    "{}:{}: column {k}: expected a number, got `{}`",
                    path.display(),
                    i + 1,
                    cells[k]
                )
            })
        };
        out.push((
            cells[1].to_string(),
            cells[2].to_string(),
            cells[3].to_string(),
            Anchor {
                avg_jct_h: num(5)?,
                p99_jct_h: num(6)?,
                makespan_h: num(7)?,
            },
        ));
    }
    if out.is_empty() {
        bail!("{}: no `| sia |` or `| gavel |` rows found", path.display());
    }
    Ok(out)
}

pub(crate) fn run_one(
    cluster: &ClusterSpec,
    apps: &[pacer_sim::AppModel],
    file: &Path,
    policy: &str,
    round_s: f64,
    profiles: ProfileMode,
) -> Result<Run> {
    let origin = file.display().to_string();
    let text = pacer_fsio::read_to_string_limited(file, pacer_fsio::limits::TRACE)?;
    let jobs = pacer_sim::trace::load_pollux_workload(&text, &origin, apps, 1.0)?;
    let sim = Simulation {
        cluster,
        apps,
        jobs: &jobs,
        config: SimConfig {
            round_s,
            profiles,
            ..SimConfig::default()
        },
    };
    let mut p = pacer_policy::by_name(policy).context("policy")?;
    let t = Instant::now();
    let r = sim.run(p.as_mut(), |_| {})?;
    let s = &r.summary;
    Ok(Run {
        avg_jct_h: s.avg_jct_s / 3600.0,
        p99_jct_h: s.p99_jct_s / 3600.0,
        makespan_h: s.makespan_s / 3600.0,
        finished: s.finished,
        jobs: s.jobs,
        wall_s: t.elapsed().as_secs_f64(),
    })
}

/// (trace, workload number, file) of every `workload-N.csv` of `--traces`, in order.
pub(crate) fn workload_files(a: &Args) -> Result<Vec<(String, u32, PathBuf)>> {
    let mut out = Vec::new();
    for trace in a.traces.split(',').map(str::trim) {
        let dir = a.data.join("workloads").join(trace);
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter_map(|p| {
                let n = p
                    .file_stem()?
                    .to_str()?
                    .strip_prefix("workload-")?
                    .parse()
                    .ok()?;
                Some((n, p))
            })
            .collect();
        files.sort();
        out.extend(files.into_iter().map(|(n, p)| (trace.to_string(), n, p)));
    }
    Ok(out)
}

pub fn run(a: Args) -> Result<()> {
    if !a.data.join("traces").is_dir() {
        bail!(
            "{}: Sia's data folder not found (expected traces/, workloads/ and ANCHORS.md)",
            a.data.display()
        );
    }
    let cluster = ClusterSpec::parse(&a.cluster, "--cluster")?;
    let apps = pacer_sim::apps::load_sia_dir(&a.data.join("traces"), true)?;
    let anchors = anchors(&a.data.join("ANCHORS.md"))?;
    let find = |policy: &str, trace: &str, w: &str| {
        anchors
            .iter()
            .find(|x| x.0 == policy && x.1 == trace && x.2 == w)
            .map(|x| x.3.clone())
    };
    if a.compare_profiles {
        return crate::sia_profiles::run(&a, &cluster, &apps, &find);
    }
    let mut rows = Vec::new();
    for (trace, n, file) in workload_files(&a)? {
        let w = format!("workload-{n}");
        eprintln!("{trace} {w}");
        let fitted = ProfileMode::Fitted;
        rows.push(Row {
            trace: trace.to_string(),
            sia_anchor: find("sia", &trace, &w),
            sia: run_one(&cluster, &apps, &file, "sia", 60.0, fitted)?,
            sia_exact: run_one(&cluster, &apps, &file, "sia-exact", 60.0, fitted)?,
            sia_pacer: run_one(&cluster, &apps, &file, "sia-pacer", 60.0, fitted)?,
            gavel_anchor: find("gavel", &trace, &w),
            gavel_maxsum: run_one(&cluster, &apps, &file, "gavel-maxsum", 360.0, fitted)?,
            workload: w,
        });
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let json = a.out.join("results.json");
    pacer_cli::out::write_bytes(&json, serde_json::to_string_pretty(&rows)?)?;
    let md = a.out.join("results.md");
    pacer_cli::out::write_bytes(&md, markdown(&rows, &a))?;
    println!("{}", markdown(&rows, &a));
    Ok(())
}

fn markdown(rows: &[Row], a: &Args) -> String {
    let f = |x: f64| format!("{x:.3}");
    let anchor = |x: &Option<Anchor>| {
        x.as_ref().map_or("— | — | —".to_string(), |x| {
            format!(
                "{} | {:.2} | {:.2}",
                f(x.avg_jct_h),
                x.p99_jct_h,
                x.makespan_h
            )
        })
    };
    let mark = |v: f64, x: &Option<Anchor>| match x {
        Some(x) if v <= x.avg_jct_h => " ✓",
        Some(_) => " ✗",
        None => "",
    };
    let mut s = format!(
        "# Sia's workloads: pacer vs Sia's simulator\n\n\
         `pacer-lab sia-eval --data {} --cluster {}` (calibrated `sia:` tables). JCT and \
         makespan in hours; Sia's and Gavel's numbers are Sia's own simulator's \
         (`{}/ANCHORS.md`). `sia`, `sia-exact`, `sia-pacer`: 60 s rounds (✓: avg JCT ≤ Sia's); \
         `gavel-maxsum`: 360 s rounds, `Δ` its avg JCT against Gavel's in Sia's simulator. \
         Wall: whole simulation, seconds.\n\n\
         | trace | workload | Sia avg | p99 | mk | sia avg | p99 | mk | wall | sia-exact avg | p99 | mk | wall | sia-pacer avg | p99 | mk | wall | Gavel avg | p99 | mk | gavel-maxsum avg | p99 | mk | Δ |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        a.data.display(),
        a.cluster,
        a.data.display()
    );
    for r in rows {
        let delta = r.gavel_anchor.as_ref().map_or("—".to_string(), |g| {
            format!(
                "{:+.1} %",
                100.0 * (r.gavel_maxsum.avg_jct_h / g.avg_jct_h - 1.0)
            )
        });
        let run = |x: &Run, m: &str| {
            format!(
                "{}{m} | {:.2} | {:.2} | {:.2}",
                f(x.avg_jct_h),
                x.p99_jct_h,
                x.makespan_h,
                x.wall_s
            )
        };
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {}{} | {:.2} | {:.2} | {} |\n",
            r.trace,
            r.workload,
            anchor(&r.sia_anchor),
            run(&r.sia, mark(r.sia.avg_jct_h, &r.sia_anchor)),
            run(&r.sia_exact, mark(r.sia_exact.avg_jct_h, &r.sia_anchor)),
            run(&r.sia_pacer, mark(r.sia_pacer.avg_jct_h, &r.sia_anchor)),
            anchor(&r.gavel_anchor),
            f(r.gavel_maxsum.avg_jct_h),
            if r.gavel_maxsum.finished < r.gavel_maxsum.jobs {
                " (unfinished)"
            } else {
                ""
            },
            r.gavel_maxsum.p99_jct_h,
            r.gavel_maxsum.makespan_h,
            delta
        );
    }
    let count = |pick: &dyn Fn(&Row) -> f64| {
        let with: Vec<&Row> = rows.iter().filter(|r| r.sia_anchor.is_some()).collect();
        let ok = with
            .iter()
            .filter(|r| pick(r) <= r.sia_anchor.as_ref().expect("filtered").avg_jct_h)
            .count();
        format!("{ok}/{}", with.len())
    };
    let gavel: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            r.gavel_anchor
                .as_ref()
                .map(|g| r.gavel_maxsum.avg_jct_h / g.avg_jct_h - 1.0)
        })
        .collect();
    let within = gavel.iter().filter(|d| d.abs() <= 0.15).count();
    s += &format!(
        "\navg JCT ≤ Sia's: sia {}, sia-exact {}, sia-pacer {}. gavel-maxsum within ±15 % of Sia's \
         simulator's Gavel: {within}/{} (largest |Δ| {:.1} %).\n",
        count(&|r| r.sia.avg_jct_h),
        count(&|r| r.sia_exact.avg_jct_h),
        count(&|r| r.sia_pacer.avg_jct_h),
        gavel.len(),
        100.0 * gavel.iter().fold(0.0f64, |m, d| m.max(d.abs()))
    );
    s
}

/// `pacer-lab sia-gap`: where the fast solver's choices differ from the exact
/// optimum, round by round, on one workload run under `sia`.
#[derive(clap::Args, Debug)]
pub struct GapArgs {
    /// A Pollux-format workload of Sia's (e.g. `../shared/data/sia/workloads/saturn/workload-3.csv`).
    pub workload: PathBuf,
    /// Sia's trace folder.
    #[arg(long, default_value = "../shared/data/sia/traces")]
    pub traces: PathBuf,
    #[arg(long, default_value = "6x4:aws,2x8:dgx-ext,3x8:rtx")]
    pub cluster: String,
    /// Node bound of the exact solves (rounds that hit it are counted).
    #[arg(long, default_value_t = 200_000)]
    pub node_limit: u64,
}

/// The fast Sia policy that also solves each round exactly and compares.
struct GapProbe {
    sia: pacer_policy::sia::Sia,
    node_limit: u64,
    rounds: usize,
    gap_rounds: usize,
    at_limit: usize,
    gaps: Vec<f64>,
    /// Jobs the exact optimum runs that fast leaves waiting, and the reverse.
    exact_only: usize,
    fast_only: usize,
    /// Both run the job, on different types; on one type with fewer / more devices
    /// under fast.
    other_type: usize,
    fast_smaller: usize,
    fast_larger: usize,
}

impl pacer_policy::Policy for GapProbe {
    fn name(&self) -> &'static str {
        "sia"
    }
    fn adaptive_batch(&self) -> bool {
        true
    }
    fn allocate(&mut self, view: &pacer_policy::ClusterView) -> Vec<pacer_model::Allocation> {
        use pacer_policy::sia::{place, solve_exact_bounded, solve_fast, ExactOutcome};
        let p = self.sia.problem(view);
        let held = self.sia.held(view);
        let fast = solve_fast(&p, &held);
        let (exact, how) = solve_exact_bounded(&p, &fast, self.node_limit);
        self.rounds += 1;
        self.at_limit += usize::from(how != ExactOutcome::Optimal);
        let (vf, _) = p.evaluate(&fast);
        let (ve, _) = p.evaluate(&exact);
        if ve > vf + 1e-9 {
            self.gap_rounds += 1;
            self.gaps.push((ve - vf) / ve.max(1e-12));
            for (f, e) in fast.iter().zip(&exact) {
                match (f, e) {
                    (None, Some(_)) => self.exact_only += 1,
                    (Some(_), None) => self.fast_only += 1,
                    (Some(f), Some(e)) if f != e => {
                        let (cf, ce) = (p.configs[*f], p.configs[*e]);
                        if cf.ty != ce.ty {
                            self.other_type += 1;
                        } else if cf.gpus < ce.gpus {
                            self.fast_smaller += 1;
                        } else {
                            self.fast_larger += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        place(view.cluster, view.jobs, &p.configs, &fast)
    }
}

pub fn gap(a: GapArgs) -> Result<()> {
    let cluster = ClusterSpec::parse(&a.cluster, "--cluster")?;
    let apps = pacer_sim::apps::load_sia_dir(&a.traces, true)?;
    let origin = a.workload.display().to_string();
    let text = pacer_fsio::read_to_string_limited(&a.workload, pacer_fsio::limits::TRACE)?;
    let jobs = pacer_sim::trace::load_pollux_workload(&text, &origin, &apps, 1.0)?;
    let sim = Simulation {
        cluster: &cluster,
        apps: &apps,
        jobs: &jobs,
        config: SimConfig::default(),
    };
    let mut probe = GapProbe {
        sia: pacer_policy::sia::Sia::new(pacer_policy::sia::SiaSolver::Fast),
        node_limit: a.node_limit,
        rounds: 0,
        gap_rounds: 0,
        at_limit: 0,
        gaps: Vec::new(),
        exact_only: 0,
        fast_only: 0,
        other_type: 0,
        fast_smaller: 0,
        fast_larger: 0,
    };
    let r = sim.run(&mut probe, |_| {})?;
    let mut g = probe.gaps.clone();
    g.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        g.get(((g.len().max(1) - 1) as f64 * q).round() as usize)
            .map_or(0.0, |x| 100.0 * x)
    };
    println!(
        "{origin}: avg JCT {:.3} h under sia; {} rounds, {} below the exact optimum \
         ({} exact solves stopped at {} nodes); gap when below: median {:.2} %, p95 {:.2} %, \
         max {:.2} %\njob decisions differing in those rounds: exact runs, fast leaves \
         waiting {}; fast runs, exact leaves waiting {}; other type {}; same type, fast fewer \
         devices {}, more devices {}",
        r.summary.avg_jct_s / 3600.0,
        probe.rounds,
        probe.gap_rounds,
        probe.at_limit,
        a.node_limit,
        pct(0.5),
        pct(0.95),
        pct(1.0),
        probe.exact_only,
        probe.fast_only,
        probe.other_type,
        probe.fast_smaller,
        probe.fast_larger
    );
    Ok(())
}
