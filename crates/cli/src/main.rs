//! The `pacer` binary: every user-facing command. Only this crate knows about
//! command lines, JSON output and files written for people.

mod batching;
mod bench;
mod fit;
mod recommend;
mod report;
mod simulate;
mod validate;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "pacer",
    version,
    about = "Fast and fair distributed ML training on shared, heterogeneous clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate a shared cluster under scheduling policies on measured performance data.
    Simulate(simulate::SimulateArgs),
    /// Worker-level adaptive batching: evaluate controllers × predictors on scenarios.
    Batching(batching::BatchingArgs),
    /// Fit step-time models to measured tables and report held-out error.
    Fit(fit::FitArgs),
    /// Recommend batch, replicas and machine type under an SLO (Courier, configuration search).
    Recommend(recommend::RecommendArgs),
    /// Compare the simulator with a peer's published results (Pollux).
    Validate(validate::ValidateArgs),
    /// Measure speed: one scheduling round at scale, or whole simulations.
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(a) => simulate::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Batching(a) => batching::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Recommend(a) => recommend::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
