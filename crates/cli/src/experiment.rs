//! `pacer experiment`: commands that regenerate the numbers of the research
//! reproductions from scratch, each writing a Markdown table (`results.md`), the
//! raw numbers (`results.json`) and a plot (`*.svg`) under `--out DIR`
//! (default `pacer-out/experiment-<name>/`; the committed results in
//! `experiments/<name>/` are regenerated only with `--out experiments/<name>`).
//!
//! - `pacer experiment slaq`: SLAQ vs work-conserving fair share on 160 jobs
//!   with Poisson arrivals replaying recorded loss curves (quality over time,
//!   time to 90% / 95% of the loss reduction), and the loss-prediction error per
//!   algorithm (last-Δ strawman vs weighted curve fit). `--record` first
//!   re-records the profiles by training real models single-process on MNIST.
//! - `pacer experiment themis`: Themis (f ∈ {0, 0.5, 0.8}) vs fair share,
//!   Tiresias and the Gavel LPs on Gavel's heterogeneous traces
//!   (bundled as `data/gavel`) and on the Pollux workloads: max and mean ρ, average
//!   JCT, utilisation.

// Explicit paths so that `examples/experiment.rs` can include this file too.
#[path = "experiment/plot.rs"]
mod plot;
#[path = "experiment/record.rs"]
mod record;
#[path = "experiment/slaq.rs"]
mod slaq;
#[path = "experiment/themis.rs"]
mod themis;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    pub what: ExperimentWhat,
}

#[derive(Debug, Subcommand)]
pub enum ExperimentWhat {
    /// SLAQ vs fair share on recorded loss curves; loss-prediction error.
    Slaq(slaq::SlaqArgs),
    /// Themis vs fair share, Tiresias and Gavel on heterogeneous and Pollux traces.
    Themis(themis::ThemisArgs),
}

pub fn run(args: ExperimentArgs) -> Result<()> {
    match args.what {
        ExperimentWhat::Slaq(a) => slaq::run(a),
        ExperimentWhat::Themis(a) => themis::run(a),
    }
}
