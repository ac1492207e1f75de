//! # pacer-lab
//!
//! The research behind pacer's published numbers, kept out of the product: evaluation
//! harnesses over measured traces and ablations of design choices. Every number in
//! `docs/` and `experiments/` that does not come from the `pacer` binary comes from one
//! command here (`pacer-lab --help`).
//!
//! Architecture invariant: nothing depends on this crate; it uses only the public APIs
//! of the product crates.

use clap::{Parser, Subcommand};

mod app_traces;
mod experiment;
mod goal_eval;
mod itertime_eval;
mod job_eval;
mod narx_ablation;
mod sia_eval;
mod sia_profiles;
mod sia_tune;

#[derive(Parser)]
#[command(
    name = "pacer-lab",
    version,
    about = "pacer's evaluation harnesses and ablations"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Held-out step-time error of every model on every application (docs/job-models.md).
    ItertimeEval(itertime_eval::Args),
    /// Courier and configuration search checked against the measured tables
    /// (docs/job-models.md).
    JobEval(job_eval::Args),
    /// Deadline jobs' minimum shares from a profile (Courier's options) against linear
    /// speed-up from one measurement, checked on the measured tables (docs/serve.md).
    GoalEval(goal_eval::Args),
    /// Speed-prediction error of NARX variants next to the baselines on scenario files.
    NarxAblation(narx_ablation::Args),
    /// SLAQ vs fair share on recorded loss curves; loss-prediction error
    /// (experiments/slaq).
    Slaq(experiment::slaq::SlaqArgs),
    /// Themis vs fair share, Tiresias and Gavel on heterogeneous and Pollux traces
    /// (experiments/themis).
    Themis(experiment::themis::ThemisArgs),
    /// Sia's workloads under sia, sia-exact and gavel-maxsum next to Sia's simulator's
    /// numbers (docs/sia.md; writes experiments/sia/).
    SiaEval(sia_eval::Args),
    /// Where the fast Sia solver's choices differ from the exact optimum, round by
    /// round, on one workload (docs/sia.md).
    SiaGap(sia_eval::GapArgs),
    /// Where the Sia-style policies lose time (queueing, waiting, device types,
    /// restarts) and the search of sia-pacer's τ on saturn 1-5 (docs/sia.md).
    SiaTune(sia_tune::TuneArgs),
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::ItertimeEval(a) => itertime_eval::run(a),
        Command::JobEval(a) => job_eval::run(a),
        Command::GoalEval(a) => goal_eval::run(a),
        Command::NarxAblation(a) => narx_ablation::run(a),
        Command::Slaq(a) => experiment::slaq::run(a),
        Command::Themis(a) => experiment::themis::run(a),
        Command::SiaEval(a) => sia_eval::run(a),
        Command::SiaGap(a) => sia_eval::gap(a),
        Command::SiaTune(a) => sia_tune::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of stdout stopped reading (`| head -1`): what it wanted it got.
        Err(e) if pacer_cli::out::is_stdout_closed(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
