//! The `pacer` binary: every user-facing command. Only this crate knows about
//! command lines, JSON output and files written for people.

#[macro_use]
extern crate pacer_cli;
use pacer_cli::out;

mod batching;
mod bench;
mod fit;
mod recommend;
mod report;
mod runtime_cmd;
mod runtime_flags;
mod serve_cmd;
mod simulate;
mod train_ranks;
mod train_report;
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
    #[command(after_long_help = simulate::COLUMNS_HELP)]
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
    /// Coordinate a real training job: admit workers, set per-worker batches, aggregate.
    Controller(runtime_cmd::ControllerArgs),
    /// Join a controller as a worker process.
    Worker(runtime_cmd::WorkerArgs),
    /// Train with a controller and N local worker processes over loopback TCP.
    Train(runtime_cmd::TrainArgs),
    /// Run the multi-job scheduler service (docs/serve.md).
    Serve(pacer_serve::args::ServeArgs),
    /// Submit a job spec (TOML), or a command with --wrap, to a running service; prints the job id.
    Submit(serve_cmd::SubmitArgs),
    /// List the service's jobs.
    Jobs(serve_cmd::JobsArgs),
    /// Show one job with its events.
    Job(serve_cmd::JobShowArgs),
    /// Cancel a job (SIGTERM, then SIGKILL after the grace period).
    Cancel(serve_cmd::JobArgs),
    /// Print a job's output (--follow: until it finishes).
    Logs(serve_cmd::LogsArgs),
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    // Offline commands print and exit like other Unix tools: a reader that stops early
    // (`pacer simulate | head`) ends the process quietly by SIGPIPE (they write
    // through `out::print`, which turns any other stdout error into an error). The runtime commands keep Rust's default (SIGPIPE ignored), since
    // for them a peer closing its socket is an error to handle, not a reason to die.
    // So do the service's clients (`submit`, `jobs`, …): a service that closes the
    // connection early (413 to a large body) ended `pacer submit` by SIGPIPE, silently
    // with status 141; they print through `out` too.
    if !matches!(
        cli.command,
        Command::Controller(_)
            | Command::Worker(_)
            | Command::Train(_)
            | Command::Serve(_)
            | Command::Submit(_)
            | Command::Jobs(_)
            | Command::Job(_)
            | Command::Cancel(_)
            | Command::Logs(_)
    ) {
        default_sigpipe();
    }
    let result = match cli.command {
        Command::Simulate(a) => simulate::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Batching(a) => batching::run(a),
        Command::Fit(a) => fit::run(a),
        Command::Recommend(a) => recommend::run(a),
        Command::Controller(a) => runtime_cmd::run_controller(a),
        Command::Worker(a) => runtime_cmd::run_worker(a),
        Command::Train(a) => runtime_cmd::run_train(a),
        Command::Serve(a) => serve_cmd::run_serve(a),
        Command::Submit(a) => serve_cmd::run_submit(a),
        Command::Jobs(a) => serve_cmd::run_jobs(a),
        Command::Job(a) => serve_cmd::run_job(a),
        Command::Cancel(a) => serve_cmd::run_cancel(a),
        Command::Logs(a) => serve_cmd::run_logs(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of stdout stopped reading (`| head -1`): what it wanted it got.
        Err(e) if out::is_stdout_closed(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Prints what clap has to say (help and version to stdout, usage errors to stderr)
/// and exits with its status — or with 1 and a message when it cannot be written:
/// clap's own `exit` ignored write errors, so `pacer --help > /dev/full` exited 0.
/// A reader that went away (`pacer --help | head -1`) is not an error.
fn clap_exit(e: clap::Error) -> std::process::ExitCode {
    use std::io::Write;
    let stream = if e.use_stderr() {
        "standard error"
    } else {
        "standard output"
    };
    match e.print().and_then(|()| {
        if e.use_stderr() {
            Ok(())
        } else {
            std::io::stdout().flush()
        }
    }) {
        Ok(()) => std::process::ExitCode::from(e.exit_code().clamp(0, 255) as u8),
        Err(w) if w.kind() == std::io::ErrorKind::BrokenPipe => std::process::ExitCode::SUCCESS,
        Err(w) => {
            let _ = writeln!(std::io::stderr(), "error: cannot write to {stream}: {w}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: called once at start-up, before any other thread exists; SIG_DFL is a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}
