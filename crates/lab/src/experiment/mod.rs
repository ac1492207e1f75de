//! The cluster-policy experiments that regenerate the numbers of the research
//! reproductions from scratch, each writing a Markdown table (`results.md`), the
//! raw numbers (`results.json`) and a plot (`*.svg`) under `--out DIR`
//! (default `pacer-out/experiment-<name>/`; the committed results in
//! `experiments/<name>/` are regenerated only with `--out experiments/<name>`).
//!
//! - `pacer-lab slaq`: SLAQ vs work-conserving fair share on 160 jobs
//!   with Poisson arrivals replaying recorded loss curves (quality over time,
//!   time to 90% / 95% of the loss reduction), and the loss-prediction error per
//!   algorithm (last-Δ strawman vs weighted curve fit). `--record` first
//!   re-records the profiles by training real models single-process on MNIST.
//! - `pacer-lab themis`: Themis (f ∈ {0, 0.5, 0.8}) vs fair share,
//!   Tiresias and the Gavel LPs on Gavel's heterogeneous traces
//!   (bundled as `data/gavel`) and on the Pollux workloads: max and mean ρ, average
//!   JCT, utilisation.
//!
//! Files are written through `pacer_cli::out` (whole or not at all, errors naming
//! the path), as the `pacer` binary writes its own.

mod plot;
mod record;
pub mod slaq;
pub mod themis;

use anyhow::Result;
use pacer_sim::SimConfig;

/// A round length given by `flag`: > 0, finite, and long enough for the simulated
/// clock to advance over the whole horizon (the engine's own check, named by flag).
fn check_round_s(flag: &str, round_s: f64) -> Result<()> {
    if !(round_s > 0.0 && round_s.is_finite()) {
        anyhow::bail!("{flag}: expected a number of seconds > 0, got {round_s}");
    }
    SimConfig {
        round_s,
        ..SimConfig::default()
    }
    .validate()
    .map_err(|e| match e {
        pacer_sim::engine::SimError::BadConfig { message, .. } => {
            anyhow::anyhow!("{flag}: {message}")
        }
        e => anyhow::anyhow!("{flag}: {e}"),
    })
}
