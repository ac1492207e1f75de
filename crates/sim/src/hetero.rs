//! Gavel traces on heterogeneous clusters, as the Themis experiment reads them:
//! [`crate::trace::gavel`]'s jobs with unmeasured (job type, scale) pairs
//! extrapolated linearly from the largest measured scale below
//! ([`ScaleFallback::Linear`], an optimistic assumption stated there).

use crate::engine::SimJob;
pub use crate::trace::gavel::{gavel_rate, ScaleFallback, GAVEL_TYPES};
use crate::trace::GavelThroughputs;
use pacer_model::ParseError;

/// Loads a Gavel `.trace` as heterogeneous jobs ([`crate::trace::gavel::load_jobs`]
/// with [`ScaleFallback::Linear`]). `max_jobs` keeps the first jobs only (the traces
/// run for months).
pub fn load_gavel_trace_hetero(
    text: &str,
    origin: &str,
    tput: &GavelThroughputs,
    max_jobs: Option<usize>,
) -> Result<Vec<SimJob>, ParseError> {
    crate::trace::gavel::load_jobs(text, origin, tput, ScaleFallback::Linear, max_jobs)
}
