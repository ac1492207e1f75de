//! `pacer experiment` as a stand-alone program, for use before (or without) the
//! `experiment` subcommand in the `pacer` binary:
//! `cargo run --release -p pacer-cli --example experiment -- slaq`.

#[path = "../src/experiment.rs"]
mod experiment;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "experiment")]
struct Cli {
    #[command(flatten)]
    args: experiment::ExperimentArgs,
}

fn main() -> std::process::ExitCode {
    match experiment::run(Cli::parse().args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
