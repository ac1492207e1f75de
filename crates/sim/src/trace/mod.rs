//! Workload loaders behind one registry. A trace is named `KIND:ARG` (e.g.
//! `philly:FILE`, `gavel:FILE`, `synthetic:JOBS`); [`TRACE_FORMATS`] maps each
//! kind to its loader, one file each:
//! - [`pollux`]: Pollux workload CSV;
//! - [`philly`]: Pollux's digest of the Philly trace;
//! - [`gavel`]: Gavel's `.trace` files with `simulation_throughputs.json`;
//! - [`synthetic`]: the seeded generators (`synthetic:`, `synthetic-philly:`);
//! - [`elasticflow`]: ElasticFlow's deadline traces with its throughput tables.
//!
//! Each returns [`SimJob`]s; errors name `file:line`. Adding a format is a new
//! file here with a [`TraceFormat`] and one line in [`TRACE_FORMATS`].

pub mod elasticflow;
pub mod gavel;
pub mod philly;
pub mod pollux;
pub mod synthetic;

pub use gavel::{load_gavel_throughputs, load_gavel_trace, GavelThroughputs};
pub use philly::{load_philly, parse_timestamp};
pub use pollux::load_pollux_workload;
pub use synthetic::{
    synthetic, synthetic_philly, SyntheticSpec, PHILLY_DURATION_QUANTILES, PHILLY_SIZE_SHARES,
};

use crate::apps::AppModel;
use crate::engine::SimJob;
use pacer_model::{ClusterSpec, ParseError};

/// Every trace format, in the order `--help` lists them.
pub const TRACE_FORMATS: &[TraceFormat] = &[
    pollux::FORMAT,
    philly::FORMAT,
    gavel::FORMAT,
    synthetic::FORMAT,
    synthetic::PHILLY_FORMAT,
    elasticflow::FORMAT,
];

/// One trace format: `PREFIX:ARG` loads through `load`.
#[derive(Clone, Copy)]
pub struct TraceFormat {
    /// The kind before the colon (`philly`).
    pub prefix: &'static str,
    /// What follows the colon, for messages (`FILE`, `JOBS`).
    pub arg: &'static str,
    /// One line for `--help`.
    pub summary: &'static str,
    /// Loads the jobs named by the argument.
    pub load: fn(&str, &TraceContext) -> Result<Vec<SimJob>, TraceError>,
    /// Its jobs name applications of [`TraceContext::apps`] (`false`: a run of such
    /// traces alone needs no applications loaded).
    pub uses_apps: bool,
}

/// Whether the trace `spec` names applications (an unknown kind: `true`, so that
/// loading it reports the error).
pub fn trace_uses_apps(spec: &str) -> bool {
    trace_format(spec).map_or(true, |(f, _)| f.uses_apps)
}

/// What a loader may use besides its argument (the command line's settings).
#[derive(Clone, Copy)]
pub struct TraceContext<'a> {
    /// The applications profiled jobs refer to.
    pub apps: &'a [AppModel],
    /// The cluster (synthetic jobs are drawn no larger than it).
    pub cluster: &'a ClusterSpec,
    /// Arrival-rate multiplier of Pollux workloads.
    pub load: f64,
    /// Seed and mean arrivals per hour of synthetic traces.
    pub seed: u64,
    pub arrivals_per_hour: f64,
    /// Gavel's `simulation_throughputs.json`, for `gavel:` traces.
    pub gavel_throughputs: Option<&'a str>,
    /// Pin Gavel jobs to this device type (`None`: every type they were measured on).
    pub gavel_device: Option<&'a str>,
    /// The folder of ElasticFlow's `throughputs_<GPU>/` tables, for `elasticflow:` traces.
    pub elasticflow_tables: Option<&'a str>,
}

/// Why a trace could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The `KIND:ARG` spec itself (unknown kind, bad argument, missing setting).
    #[error("{0}")]
    Spec(String),
    /// A file that could not be read, or is larger than its limit.
    #[error(transparent)]
    Read(#[from] pacer_fsio::ReadError),
    #[error(transparent)]
    Parse(#[from] ParseError),
}

/// The kinds [`TRACE_FORMATS`] knows, for messages (`pollux, philly, …`).
pub fn trace_kinds() -> String {
    let k: Vec<&str> = TRACE_FORMATS.iter().map(|f| f.prefix).collect();
    k.join(", ")
}

/// The format and argument of a `KIND:ARG` spec.
pub fn trace_format(spec: &str) -> Result<(&'static TraceFormat, &str), TraceError> {
    let Some((kind, arg)) = spec.split_once(':') else {
        return Err(TraceError::Spec(format!(
            "expected KIND:ARG with KIND one of {}",
            trace_kinds()
        )));
    };
    let f = TRACE_FORMATS
        .iter()
        .find(|f| f.prefix == kind)
        .ok_or_else(|| {
            TraceError::Spec(format!(
                "unknown kind `{kind}`; expected one of {}",
                trace_kinds()
            ))
        })?;
    Ok((f, arg))
}

/// Loads the jobs of a `KIND:ARG` spec.
pub fn load_trace(spec: &str, ctx: &TraceContext) -> Result<Vec<SimJob>, TraceError> {
    let (f, arg) = trace_format(spec)?;
    (f.load)(arg, ctx)
}

/// A file's text, at most `limit` bytes, or an error naming it (and the limit).
pub(crate) fn read(path: &str, limit: pacer_fsio::Limit) -> Result<String, TraceError> {
    Ok(pacer_fsio::read_to_string_limited(
        std::path::Path::new(path),
        limit,
    )?)
}

pub(super) fn app_index(
    apps: &[AppModel],
    name: &str,
    origin: &str,
    line: usize,
) -> Result<usize, ParseError> {
    apps.iter().position(|a| a.name() == name).ok_or_else(|| {
        let known: Vec<&str> = apps.iter().map(|a| a.name()).collect();
        ParseError::at(
            origin,
            line,
            format!(
                "unknown application `{name}`; expected one of {}",
                known.join(", ")
            ),
        )
    })
}

/// Column indices (in expected order) and the data records with their line numbers.
type CsvRows = (Vec<usize>, Vec<(usize, csv::StringRecord)>);

pub(super) fn csv_records(
    text: &str,
    origin: &str,
    expected: &[&str],
) -> Result<CsvRows, ParseError> {
    let mut rdr = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = rdr
        .headers()
        .map_err(|e| ParseError::at(origin, 1, format!("unreadable header: {e}")))?
        .clone();
    let idx = expected
        .iter()
        .map(|name| {
            header
                .iter()
                .position(|h| h.trim() == *name)
                .ok_or_else(|| {
                    ParseError::at(
                        origin,
                        1,
                        format!(
                            "missing column `{name}`; expected columns {}",
                            expected.join(",")
                        ),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut rows = Vec::new();
    // One record read into and copied out compactly: `records()` clones the
    // reader's record with the field-end table of the widest row so far, so one
    // wide row made every later row as big (quadratic memory).
    let mut rec = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line() as usize);
                return Err(ParseError::at(
                    origin,
                    line,
                    format!("unreadable CSV record: {e}"),
                ));
            }
        }
        let line = rec.position().map_or(0, |p| p.line() as usize);
        if rec.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        if idx.iter().any(|&i| i >= rec.len()) {
            return Err(ParseError::at(
                origin,
                line,
                format!("has {} fields; expected {}", rec.len(), header.len()),
            ));
        }
        rows.push((line, rec.iter().collect()));
    }
    Ok((idx, rows))
}

pub(super) fn positive_u32(
    field: &str,
    column: &str,
    origin: &str,
    line: usize,
) -> Result<u32, ParseError> {
    pacer_model::error::parse_whole(field, 1)
        .map_err(|e| ParseError::at(origin, line, format!("column `{column}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_resolve_through_the_registry() {
        let cluster = ClusterSpec::parse("2x4:t4", "t").unwrap();
        let apps: Vec<AppModel> = crate::apps::embedded_profiles()
            .into_iter()
            .map(AppModel::new)
            .collect();
        let ctx = TraceContext {
            apps: &apps,
            cluster: &cluster,
            load: 1.0,
            seed: 1,
            arrivals_per_hour: 20.0,
            gavel_throughputs: None,
            gavel_device: None,
            elasticflow_tables: None,
        };
        assert_eq!(load_trace("synthetic:7", &ctx).unwrap().len(), 7);
        assert_eq!(load_trace("synthetic-philly:5", &ctx).unwrap().len(), 5);
        let e = |s: &str| load_trace(s, &ctx).unwrap_err().to_string();
        assert_eq!(
            e("nope:x"),
            "unknown kind `nope`; expected one of pollux, philly, gavel, synthetic, synthetic-philly, elasticflow"
        );
        assert!(
            e("philly").starts_with("expected KIND:ARG"),
            "{}",
            e("philly")
        );
        assert!(e("gavel:x.trace").contains("--gavel-throughputs"));
        assert!(
            e("synthetic:0").starts_with("expected JOBS"),
            "{}",
            e("synthetic:0")
        );
        assert!(e("philly:/nonexistent/p.csv").starts_with("cannot read /nonexistent/p.csv"));
        // Every prefix is listed once.
        for (i, f) in TRACE_FORMATS.iter().enumerate() {
            assert!(TRACE_FORMATS[..i].iter().all(|g| g.prefix != f.prefix));
        }
    }
}
