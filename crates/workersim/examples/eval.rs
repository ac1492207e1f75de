//! Runs the CLI's `pacer batching …` code (crates/cli/src/batching.rs, compiled as is)
//! without the `pacer` binary:
//! `cargo run --release -p pacer-workersim --example eval -- eval --scenario F.json --controller pid --predictor narx --json`

#[path = "../../cli/src/batching.rs"]
mod batching;
// `batching.rs` prints through it; the rest of it serves other commands.
#[path = "../../cli/src/out.rs"]
#[allow(dead_code, unused_macros)]
mod out;

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: batching::BatchingArgs,
}

fn main() -> anyhow::Result<()> {
    batching::run(Cli::parse().args)
}
