//! `pacer-serve`: the service alone (what `pacer serve` runs), for tests and the load
//! benchmark without building the whole `pacer` binary.

use clap::Parser;

#[derive(Parser)]
#[command(name = "pacer-serve", about = "pacer's multi-job scheduler service")]
enum Cmd {
    /// Run the service (same arguments as `pacer serve`).
    Run(pacer_serve::args::ServeArgs),
    /// Load benchmark: submissions, then reports at a fixed rate, on loopback.
    Bench(pacer_serve::bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let result = match Cmd::parse() {
        Cmd::Run(a) => a.run(),
        Cmd::Bench(a) => std::env::current_exe()
            .map_err(anyhow::Error::from)
            .and_then(|exe| pacer_serve::bench::run(a, exe)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
