//! `pacer batching …`: worker-level adaptive batching (issue 3).
//!
//! - `eval`: run a worker scenario under a controller and a predictor and report
//!   efficiency against the oracle balancer and speedup against plain BSP. Names may
//!   be comma lists or `all`, giving one row per combination. `--gate off` runs the
//!   adaptive controllers without their noise gate (for comparison).
//! - `bench`: cost of predictions plus one controller decision for many workers.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use pacer_cli::json::BatchingEval;
use pacer_workersim::{
    bench::bench, evaluate_with, format_table, load_scenario, simulate, GateConfig, SimOptions,
    CONTROLLERS, PREDICTORS,
};
use std::path::PathBuf;

/// Worker-level adaptive batching.
#[derive(Debug, Args)]
pub struct BatchingArgs {
    #[command(subcommand)]
    pub command: BatchingCommand,
}

#[derive(Debug, Subcommand)]
pub enum BatchingCommand {
    /// Evaluate controller × predictor on scenario files.
    Eval(EvalArgs),
    /// Time predictions + one controller decision for N workers.
    Bench(BenchArgs),
    /// Step time and goodput of one job on devices of several types, balanced by the
    /// worker level (see docs/mixed-types.md).
    Mixed(MixedArgs),
}

#[derive(Debug, Args)]
pub struct MixedArgs {
    /// JSON file: `{"nodes", "global_batch", "min_local"?, "groups": [{"type",
    /// "replicas", "max_atomic", "perf": {alpha_c, beta_c, alpha_n, beta_n, alpha_r,
    /// beta_r, gamma}}]}` — per type its step-time model (seconds).
    pub file: PathBuf,
    /// Worker-level controller that balances the types: uniform | lbbsp | lbbsp-cpu |
    /// lbbsp-gpu | pid.
    #[arg(long, default_value = "lbbsp")]
    pub controller: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Scenario JSON file(s) (see scenarios/worker/README.md).
    #[arg(long, required = true, num_args = 1..)]
    pub scenario: Vec<PathBuf>,
    /// uniform | lbbsp | lbbsp-cpu | lbbsp-gpu | pid — or a comma list, or `all`.
    #[arg(long, default_value = "lbbsp")]
    pub controller: String,
    /// last | ewma | ets | narx — or a comma list, or `all`.
    #[arg(long, default_value = "narx")]
    pub predictor: String,
    /// Print JSON (one object for one combination, an array otherwise).
    #[arg(long)]
    pub json: bool,
    /// Noise gate of the adaptive controllers: `on` (default) or `off` (every
    /// prediction is acted on, the ungated rules — for comparison).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub gate: String,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 1000)]
    pub workers: usize,
    #[arg(long, default_value = "pid")]
    pub controller: String,
    #[arg(long, default_value = "narx")]
    pub predictor: String,
    #[arg(long, default_value_t = 200)]
    pub reps: u32,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

/// `all` or a comma list of names from `known`, each once; errors name `flag`.
fn names(flag: &str, arg: &str, all: &[&str], known: &[&str]) -> anyhow::Result<Vec<String>> {
    if arg == "all" {
        return Ok(all.iter().map(|s| s.to_string()).collect());
    }
    let mut out: Vec<String> = Vec::new();
    for n in arg.split(',').map(str::trim) {
        if !known.contains(&n) {
            bail!(
                "{flag}: unknown name `{n}`; expected `all` or a comma list of {}",
                known.join(", ")
            );
        }
        if out.iter().any(|o| o == n) {
            bail!("{flag}: `{n}` is named twice");
        }
        out.push(n.to_string());
    }
    Ok(out)
}

/// Most workers `batching bench` simulates (as many as a scenario file may have).
const MAX_BENCH_WORKERS: usize = 1_000_000;

pub fn run(args: BatchingArgs) -> anyhow::Result<()> {
    match args.command {
        BatchingCommand::Eval(a) => eval(a),
        BatchingCommand::Mixed(a) => mixed(a),
        BatchingCommand::Bench(a) => {
            if !(1..=MAX_BENCH_WORKERS).contains(&a.workers) {
                bail!(
                    "--workers: expected 1 to {MAX_BENCH_WORKERS}, got {}",
                    a.workers
                );
            }
            if a.reps == 0 {
                bail!("--reps: expected a whole number ≥ 1, got 0");
            }
            if !CONTROLLERS.contains(&a.controller.as_str()) {
                bail!(
                    "--controller: unknown controller `{}`; expected one of {}",
                    a.controller,
                    CONTROLLERS.join(", ")
                );
            }
            if !PREDICTORS.contains(&a.predictor.as_str()) {
                bail!(
                    "--predictor: unknown predictor `{}`; expected one of {}",
                    a.predictor,
                    PREDICTORS.join(", ")
                );
            }
            let r = bench(a.workers, &a.controller, &a.predictor, a.reps, a.seed)
                .map_err(anyhow::Error::msg)?;
            if a.json {
                crate::out::print(&format!("{}\n", pacer_cli::json::pretty(&r)?))
            } else {
                crate::out::print(&format!(
                    "{} workers, {} + {}: predict+decide {:.1} µs, observe {:.1} µs (mean of {} reps)\n",
                    r.workers,
                    r.predictor,
                    r.controller,
                    r.predict_and_decide_us,
                    r.observe_us,
                    r.reps
                ))
            }
        }
    }
}

fn eval(a: EvalArgs) -> anyhow::Result<()> {
    // The canonical order (lbbsp before its variants, narx last) keeps tables stable.
    let controllers = names(
        "--controller",
        &a.controller,
        &["uniform", "lbbsp", "pid"],
        &CONTROLLERS,
    )?;
    let predictors = names("--predictor", &a.predictor, &PREDICTORS, &PREDICTORS)?;
    let opts = SimOptions {
        gate: if a.gate == "off" {
            GateConfig::off()
        } else {
            GateConfig::default()
        },
    };
    let mut reports = Vec::new();
    for path in &a.scenario {
        let sc = load_scenario(path)?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let uniform = simulate(&sc, "uniform", "last")
            .with_context(|| format!("{}: uniform baseline", path.display()))?;
        for c in &controllers {
            for p in &predictors {
                reports.push(
                    evaluate_with(&sc, &name, c, p, Some(&uniform), &opts)
                        .with_context(|| format!("{}", path.display()))?,
                );
            }
        }
    }
    // A table of `inf` and `NaN` says nothing; the scenario's limits should keep
    // every number finite, and if one is not, that is an error, not a row.
    for r in &reports {
        for (field, v) in [
            ("mean_iter_s", r.mean_iter_s),
            ("ideal_iter_s", r.ideal_iter_s),
            ("efficiency", r.efficiency),
            ("uniform_iter_s", r.uniform_iter_s),
            ("uniform_efficiency", r.uniform_efficiency),
            ("speedup_vs_uniform", r.speedup_vs_uniform),
            ("speed_mape", r.speed_mape),
        ] {
            if !v.is_finite() {
                bail!(
                    "scenario `{}`, controller {} with predictor {}: {field} came out as {v}; \
                     refusing to print non-finite results (check the scenario's speeds, \
                     curves and slowdowns)",
                    r.scenario,
                    r.controller,
                    r.predictor
                );
            }
        }
    }
    let text = if !a.json {
        format_table(&reports)
    } else {
        let out = if reports.len() == 1 {
            BatchingEval::One(Box::new(reports.swap_remove(0)))
        } else {
            BatchingEval::Many(reports)
        };
        format!("{}\n", pacer_cli::json::pretty(&out)?)
    };
    crate::out::print(&text)
}

/// One device type of a `batching mixed` file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MixedGroupFile {
    #[serde(rename = "type")]
    type_name: String,
    replicas: u32,
    max_atomic: u64,
    perf: pacer_predict::goodput::PerfParams,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MixedFile {
    nodes: u32,
    global_batch: u64,
    #[serde(default = "one")]
    min_local: u64,
    groups: Vec<MixedGroupFile>,
}

fn one() -> u64 {
    1
}

/// Most bytes a `batching mixed` file may have.
const MIXED_FILE: pacer_fsio::Limit = pacer_fsio::Limit {
    what: "a mixed-allocation file",
    bytes: 1 << 20,
};

fn mixed(a: MixedArgs) -> anyhow::Result<()> {
    use pacer_control::job::mixed::{balanced_step, MixedJob, TypeGroup};
    let origin = a.file.display().to_string();
    let text = pacer_fsio::read_to_string_limited(&a.file, MIXED_FILE)?;
    let f: MixedFile = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    let job = MixedJob {
        nodes: f.nodes,
        global_batch: f.global_batch,
        min_local: f.min_local,
        groups: f
            .groups
            .iter()
            .map(|g| TypeGroup {
                perf: g.perf,
                replicas: g.replicas,
                max_atomic: g.max_atomic,
            })
            .collect(),
    };
    let step = balanced_step(&job, &a.controller).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
    let mut groups = Vec::new();
    let mut at = 0usize;
    for g in &f.groups {
        let n = g.replicas as usize;
        let local = &step.local[at..at + n];
        let compute = &step.compute_s[at..at + n];
        groups.push(serde_json::json!({
            "type": g.type_name,
            "replicas": g.replicas,
            "local_batches": local,
            "compute_s": compute,
        }));
        at += n;
    }
    if a.json {
        let v = serde_json::json!({
            "controller": a.controller,
            "global_batch": f.global_batch,
            "nodes": f.nodes,
            "micro_batches": step.micro_batches,
            "step_s": step.step_s,
            "network_s": step.network_s,
            "throughput": step.throughput(),
            "balance": step.balance(),
            "settle_iterations": step.settle_iterations,
            "groups": groups,
        });
        return crate::out::print(&format!("{}\n", pacer_cli::json::pretty(&v)?));
    }
    let mut out = format!(
        "{} samples over {} replicas on {} nodes, {}: step {:.4} s ({} micro-batch{}, all-reduce {:.4} s), {:.1} samples/s, balance {:.3}\n",
        f.global_batch,
        step.local.len(),
        f.nodes,
        a.controller,
        step.step_s,
        step.micro_batches,
        if step.micro_batches == 1 { "" } else { "es" },
        step.network_s,
        step.throughput(),
        step.balance()
    );
    at = 0;
    for g in &f.groups {
        let n = g.replicas as usize;
        let local = &step.local[at..at + n];
        let slow = step.compute_s[at..at + n]
            .iter()
            .copied()
            .fold(0.0, f64::max);
        out.push_str(&format!(
            "  {:<12} {:>3} replicas  local batches {:?}  compute {:.4} s\n",
            g.type_name, g.replicas, local, slow
        ));
        at += n;
    }
    crate::out::print(&out)
}
