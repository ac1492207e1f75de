//! Runs the CLI's `pacer controller | worker | train` code (crates/cli/src/runtime_cmd.rs,
//! compiled as is) without the `pacer` binary:
//! `cargo run --release -p pacer-runtime --example pacer_rt -- train --dataset tiny --model mlp --workers 2`

#[path = "../../cli/src/runtime_cmd.rs"]
mod runtime_cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "pacer")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Coordinate a real training job: admit workers, set per-worker batches, aggregate.
    Controller(runtime_cmd::ControllerArgs),
    /// Join a controller as a worker.
    Worker(runtime_cmd::WorkerArgs),
    /// Train with a controller and N local workers over loopback TCP.
    Train(runtime_cmd::TrainArgs),
}

fn main() -> std::process::ExitCode {
    let r = match Cli::parse().command {
        Command::Controller(a) => runtime_cmd::run_controller(a),
        Command::Worker(a) => runtime_cmd::run_worker(a),
        Command::Train(a) => runtime_cmd::run_train(a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
