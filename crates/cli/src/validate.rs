//! `pacer validate pollux`: fidelity of pacer's simulator against Pollux's own.
//!
//! Runs the eight Pollux workloads (embedded) on 64 T4 GPUs with 60 s rounds under
//! pacer's Tiresias and Pollux-style policies at each job load, and compares mean
//! JCT per workload with the numbers Pollux's simulator produced
//! (`results-jobload/<policy>-<load>/summary.json` of the Pollux artifact, read
//! from `--data`, by default the copy bundled in the repository, `data/pollux`).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use pacer_cli::json::ValidateRow;
use pacer_model::ClusterSpec;
use pacer_sim::apps::EMBEDDED_WORKLOADS;
use pacer_sim::{trace, SimConfig, Simulation};
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(subcommand)]
    pub what: ValidateWhat,
}

#[derive(Debug, Subcommand)]
pub enum ValidateWhat {
    /// Compare mean JCT with Pollux's simulator on its eight workloads.
    Pollux(PolluxArgs),
}

#[derive(Debug, Args)]
pub struct PolluxArgs {
    /// Folder of the Pollux artifact data (with `results-jobload/`); the default is
    /// the copy bundled in the repository (run from its root).
    #[arg(long, default_value = "data/pollux")]
    pub data: PathBuf,
    /// Write the comparison as Markdown to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

fn their_avgs(
    data: &std::path::Path,
    policy: &str,
    load: f64,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let path = data
        .join("results-jobload")
        .join(format!("{policy}-{load:.1}"))
        .join("summary.json");
    let text = pacer_fsio::read_to_string_limited(&path, pacer_fsio::limits::TABLE).with_context(|| {
        format!("cannot read {} (Pollux's results; pass --data DIR pointing at the Pollux artifact data)", path.display())
    })?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not valid JSON", path.display()))?;
    let avgs = v
        .get("avgs")
        .and_then(|a| a.as_object())
        .with_context(|| format!("{}: no `avgs` object", path.display()))?;
    avgs.iter()
        .map(|(k, v)| {
            let s = v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0)
                .with_context(|| {
                    format!(
                        "{}: avgs.{k}: expected a mean JCT in seconds > 0, got {v}",
                        path.display()
                    )
                })?;
            Ok((k.clone(), s / 3600.0))
        })
        .collect()
}

fn job_count(data: &std::path::Path, policy: &str, load: f64, workload: &str) -> Result<usize> {
    let path = data
        .join("results-jobload")
        .join(format!("{policy}-{load:.1}"))
        .join("summary.json");
    let text = pacer_fsio::read_to_string_limited(&path, pacer_fsio::limits::TABLE)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{}: not valid JSON", path.display()))?;
    v.get("jcts")
        .and_then(|j| j.get(workload))
        .and_then(|w| w.as_object())
        .map(|o| o.len())
        .with_context(|| {
            format!(
                "{}: no `jcts.{workload}` object (one entry per job) next to `avgs.{workload}`",
                path.display()
            )
        })
}

pub fn run(args: ValidateArgs) -> Result<()> {
    let ValidateWhat::Pollux(a) = args.what;
    if !a.data.join("results-jobload").is_dir() {
        bail!(
            "--data {}: no results-jobload/ folder here; this comparison needs Pollux's published results (bundled in the pacer repository as data/pollux: run from the repository's root or pass --data REPO/data/pollux)",
            a.data.display()
        );
    }
    if let Some(path) = &a.markdown {
        crate::out::check_file("--markdown", path)?;
    }
    let apps = crate::simulate::load_apps(&[])?;
    let cluster = ClusterSpec::parse("16x4:t4", "cluster")?;
    // Only the 1.0x workloads are published; Pollux's other job loads are different
    // workloads (80 or 320 jobs), so they cannot be compared like for like.
    let loads = [1.0];
    let mut rows = Vec::new();
    let per_load: usize = EMBEDDED_WORKLOADS
        .iter()
        .map(|(name, text)| {
            trace::load_pollux_workload(text, name, &apps, 1.0).map_or(0, |j| j.len())
        })
        .sum();
    let mut progress = crate::simulate::SimProgress::new(false, 2 * loads.len() * per_load);
    for &load in &loads {
        for policy in ["tiresias", "pollux"] {
            let theirs = their_avgs(&a.data, policy, load)?;
            for (name, text) in EMBEDDED_WORKLOADS {
                let Some(&their) = theirs.get(*name) else {
                    continue;
                };
                let their_jobs = job_count(&a.data, policy, load, name)?;
                let jobs = trace::load_pollux_workload(text, name, &apps, load)?;
                if their_jobs != jobs.len() {
                    bail!(
                        "{}: jcts.{name} covers {their_jobs} jobs, the embedded workload has {}",
                        a.data
                            .join("results-jobload")
                            .join(format!("{policy}-{load:.1}"))
                            .join("summary.json")
                            .display(),
                        jobs.len()
                    );
                }
                let sim = Simulation {
                    cluster: &cluster,
                    apps: &apps,
                    jobs: &jobs,
                    config: SimConfig::default(),
                };
                let mut p = pacer_policy::by_name(policy).expect("registered");
                progress.start_run(&format!("{name} / {policy}"));
                let r = sim.run(p.as_mut(), |info| progress.on_round(info))?;
                progress.end_run(jobs.len());
                let ours = r.summary.avg_jct_s / 3600.0;
                rows.push(ValidateRow {
                    policy: policy.to_string(),
                    load,
                    workload: name.to_string(),
                    pacer_avg_jct_h: ours,
                    pollux_sim_avg_jct_h: their,
                    diff_pct: (ours / their - 1.0) * 100.0,
                    pacer_wall_ms: r.summary.wall_ms,
                });
            }
        }
    }
    progress.finish();
    let mut md = String::new();
    md.push_str("| load | policy | pacer mean JCT (h) | Pollux simulator (h) | diff | per-workload diffs (%) |\n|---|---|---|---|---|---|\n");
    for &load in &loads {
        let mut means = Vec::new();
        for policy in ["tiresias", "pollux"] {
            let sel: Vec<&ValidateRow> = rows
                .iter()
                .filter(|r| r.policy == policy && r.load == load)
                .collect();
            if sel.is_empty() {
                continue;
            }
            let ours = sel.iter().map(|r| r.pacer_avg_jct_h).sum::<f64>() / sel.len() as f64;
            let theirs = sel.iter().map(|r| r.pollux_sim_avg_jct_h).sum::<f64>() / sel.len() as f64;
            let diffs: Vec<String> = sel.iter().map(|r| format!("{:+.0}", r.diff_pct)).collect();
            md.push_str(&format!(
                "| {load:.1} | {policy} | {ours:.3} | {theirs:.3} | {:+.1}% | {} |\n",
                (ours / theirs - 1.0) * 100.0,
                diffs.join(" ")
            ));
            means.push((policy, ours, theirs));
        }
        if let [(_, t_ours, t_theirs), (_, p_ours, p_theirs)] = means[..] {
            md.push_str(&format!(
                "| {load:.1} | pollux / tiresias | {:.3} | {:.3} | | |\n",
                p_ours / t_ours,
                p_theirs / t_theirs
            ));
        }
    }
    if let Some(path) = &a.markdown {
        crate::out::write_bytes(path, &md)?;
    }
    if a.json {
        crate::out::print(&format!("{}\n", pacer_cli::json::pretty(&rows)?))
    } else {
        crate::out::print(&md)
    }
}
