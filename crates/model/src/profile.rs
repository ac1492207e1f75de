//! Measured application profiles in the Pollux artifact layout.
//!
//! A profile folder holds `placements.csv` (`placement,local_bsz,step_time,sync_time`),
//! `scalability.csv` (`num_nodes,num_replicas,local_bsz,step_time,sync_time`) and one
//! `validation-<global batch>.csv` per measured training run
//! (`progress,iteration,metric,grad_sqr,grad_var`). The parsers here take the text of
//! each file and the name to use in errors.

use crate::ParseError;
use serde::{Deserialize, Serialize};

/// One measured step time for a concrete placement (replicas per node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementRow {
    /// Replicas per node, e.g. `[2, 2]` for the trace's `22`.
    pub placement: Vec<u32>,
    pub local_bsz: f64,
    pub step_time_s: f64,
    pub sync_time_s: f64,
}

impl PlacementRow {
    pub fn num_nodes(&self) -> u32 {
        self.placement.len() as u32
    }
    pub fn num_replicas(&self) -> u32 {
        self.placement.iter().sum()
    }
}

/// One measured step time for `num_nodes × num_replicas` (evenly spread).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalabilityRow {
    pub num_nodes: u32,
    pub num_replicas: u32,
    pub local_bsz: f64,
    pub step_time_s: f64,
    pub sync_time_s: f64,
}

/// One validation point of a real training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationRow {
    /// Useful samples processed so far (the statistical-efficiency-weighted count).
    pub progress: f64,
    /// Optimiser steps so far.
    pub iteration: f64,
    /// Validation metric (accuracy, or a loss/error when it decreases).
    pub metric: f64,
    /// Squared norm of the true gradient (estimate).
    pub grad_sqr: f64,
    /// Gradient variance (estimate) at the application's base batch.
    pub grad_var: f64,
}

/// A training run at one global batch size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationCurve {
    pub global_batch: u32,
    pub rows: Vec<ValidationRow>,
}

/// The device type the Pollux artifact's tables were measured on (AWS g4dn.12xlarge,
/// 4 × T4 per node). Its layout has no device-type field, so a profile read from it
/// is ground truth for this type only.
pub const POLLUX_DEVICE_TYPE: &str = "t4";

/// Everything measured about one application.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppProfile {
    pub name: String,
    /// Device types (lower case, sorted, at least one) that `placements` and
    /// `scalability` are ground truth for; a simulator may place the application
    /// only on these. One type today ([`POLLUX_DEVICE_TYPE`]); per-type tables
    /// (issue #18) extend this set together with the tables it names.
    #[serde(default = "default_device_types")]
    pub device_types: std::collections::BTreeSet<String>,
    pub placements: Vec<PlacementRow>,
    pub scalability: Vec<ScalabilityRow>,
    /// Sorted by `global_batch`, at least one.
    pub validation: Vec<ValidationCurve>,
}

fn default_device_types() -> std::collections::BTreeSet<String> {
    std::iter::once(POLLUX_DEVICE_TYPE.to_string()).collect()
}

impl AppProfile {
    /// Assembles a profile and checks it is usable (non-empty tables, sorted curves).
    /// The tables are taken as measured on [`POLLUX_DEVICE_TYPE`], as the Pollux
    /// layout's are.
    pub fn new(
        name: &str,
        placements: Vec<PlacementRow>,
        scalability: Vec<ScalabilityRow>,
        mut validation: Vec<ValidationCurve>,
    ) -> Result<Self, ParseError> {
        if placements.is_empty() {
            return Err(ParseError::whole(name, "placements.csv has no data rows"));
        }
        if validation.is_empty() {
            return Err(ParseError::whole(name, "no validation-<batch>.csv curve"));
        }
        validation.sort_by_key(|c| c.global_batch);
        for w in validation.windows(2) {
            if w[0].global_batch == w[1].global_batch {
                return Err(ParseError::whole(
                    name,
                    format!("two validation curves for batch {}", w[0].global_batch),
                ));
            }
        }
        Ok(AppProfile {
            name: name.to_string(),
            device_types: default_device_types(),
            placements,
            scalability,
            validation,
        })
    }

    /// Whether the tables are ground truth for device type `ty` (any case).
    pub fn measured_on(&self, ty: &str) -> bool {
        self.device_types.iter().any(|t| t.eq_ignore_ascii_case(ty))
    }

    /// Smallest and largest local batch measured.
    pub fn local_bsz_range(&self) -> (f64, f64) {
        let lo = self
            .placements
            .iter()
            .map(|r| r.local_bsz)
            .fold(f64::INFINITY, f64::min);
        let hi = self
            .placements
            .iter()
            .map(|r| r.local_bsz)
            .fold(0.0, f64::max);
        (lo, hi)
    }

    /// Smallest validated global batch (the application's base batch, M0).
    pub fn min_batch(&self) -> u32 {
        self.validation[0].global_batch
    }

    /// Largest validated global batch.
    pub fn max_batch(&self) -> u32 {
        self.validation[self.validation.len() - 1].global_batch
    }
}

/// Reads a CSV with a header, checks the header names the expected columns (in
/// any order) and calls `row` with the fields in `expected` order and the line number.
fn read_csv<T>(
    text: &str,
    origin: &str,
    expected: &[&str],
    mut row: impl FnMut(&[&str], usize) -> Result<T, ParseError>,
) -> Result<Vec<T>, ParseError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = rdr
        .headers()
        .map_err(|e| ParseError::at(origin, 1, format!("unreadable header: {e}")))?
        .clone();
    let mut index = Vec::with_capacity(expected.len());
    for name in expected {
        match header.iter().position(|h| h.trim() == *name) {
            Some(i) => index.push(i),
            None => {
                return Err(ParseError::at(
                    origin,
                    1,
                    format!(
                        "missing column `{name}`; expected columns {}",
                        expected.join(",")
                    ),
                ))
            }
        }
    }
    let mut out = Vec::new();
    // One record read into, not `records()`: that clones the reader's record with
    // the field-end table of the widest row so far, so one wide row made every
    // later row cost as much (quadratic time).
    let mut rec = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map(|p| p.line() as usize).unwrap_or(0);
                return Err(ParseError::at(
                    origin,
                    line,
                    format!("unreadable CSV record: {e}"),
                ));
            }
        }
        let line = rec.position().map(|p| p.line() as usize).unwrap_or(0);
        if rec.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        let mut fields: Vec<&str> = Vec::with_capacity(expected.len());
        for &i in &index {
            match rec.get(i) {
                Some(f) => fields.push(f.trim()),
                None => {
                    return Err(ParseError::at(
                        origin,
                        line,
                        format!(
                            "has {} fields; expected {} ({})",
                            rec.len(),
                            header.len(),
                            expected.join(",")
                        ),
                    ))
                }
            }
        }
        out.push(row(&fields, line)?);
    }
    Ok(out)
}

/// Parses a finite number, naming the column on error.
pub fn parse_f64(field: &str, column: &str, origin: &str, line: usize) -> Result<f64, ParseError> {
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(ParseError::at(
            origin,
            line,
            format!("column `{column}`: `{field}` is not a finite number"),
        )),
    }
}

fn positive(field: &str, column: &str, origin: &str, line: usize) -> Result<f64, ParseError> {
    let v = parse_f64(field, column, origin, line)?;
    if v <= 0.0 {
        return Err(ParseError::at(
            origin,
            line,
            format!("column `{column}`: {v} must be > 0"),
        ));
    }
    Ok(v)
}

fn non_negative(field: &str, column: &str, origin: &str, line: usize) -> Result<f64, ParseError> {
    let v = parse_f64(field, column, origin, line)?;
    if v < 0.0 {
        return Err(ParseError::at(
            origin,
            line,
            format!("column `{column}`: {v} must be ≥ 0"),
        ));
    }
    Ok(v)
}

fn whole(field: &str, column: &str, origin: &str, line: usize) -> Result<u32, ParseError> {
    crate::error::parse_whole(field, 1)
        .map_err(|e| ParseError::at(origin, line, format!("column `{column}`: {e}")))
}

/// Parses `placements.csv`.
///
/// ```
/// let rows = pacer_model::profile::parse_placements(
///     "placement,local_bsz,step_time,sync_time\n22,32,0.1,0.02\n", "p.csv").unwrap();
/// assert_eq!(rows[0].placement, vec![2, 2]);
/// let err = pacer_model::profile::parse_placements(
///     "placement,local_bsz,step_time,sync_time\n22,32,-1,0.02\n", "p.csv").unwrap_err();
/// assert_eq!(err.to_string(), "p.csv:2: column `step_time`: -1 must be > 0");
/// ```
pub fn parse_placements(text: &str, origin: &str) -> Result<Vec<PlacementRow>, ParseError> {
    read_csv(
        text,
        origin,
        &["placement", "local_bsz", "step_time", "sync_time"],
        |f, line| {
            let placement: Option<Vec<u32>> = f[0]
                .chars()
                .map(|c| c.to_digit(10).filter(|d| *d > 0))
                .collect();
            let placement = match placement {
            Some(p) if !p.is_empty() => p,
            _ => {
                return Err(ParseError::at(
                    origin,
                    line,
                    format!("column `placement`: `{}` is not a digit string of replicas per node such as `22`", f[0]),
                ))
            }
        };
            let row = PlacementRow {
                placement,
                local_bsz: positive(f[1], "local_bsz", origin, line)?,
                step_time_s: positive(f[2], "step_time", origin, line)?,
                sync_time_s: non_negative(f[3], "sync_time", origin, line)?,
            };
            Ok(row)
        },
    )
}

/// Parses `scalability.csv`.
pub fn parse_scalability(text: &str, origin: &str) -> Result<Vec<ScalabilityRow>, ParseError> {
    read_csv(
        text,
        origin,
        &[
            "num_nodes",
            "num_replicas",
            "local_bsz",
            "step_time",
            "sync_time",
        ],
        |f, line| {
            let num_nodes = whole(f[0], "num_nodes", origin, line)?;
            let num_replicas = whole(f[1], "num_replicas", origin, line)?;
            if num_replicas < num_nodes {
                return Err(ParseError::at(
                    origin,
                    line,
                    "num_replicas must be ≥ num_nodes",
                ));
            }
            Ok(ScalabilityRow {
                num_nodes,
                num_replicas,
                local_bsz: positive(f[2], "local_bsz", origin, line)?,
                step_time_s: positive(f[3], "step_time", origin, line)?,
                sync_time_s: non_negative(f[4], "sync_time", origin, line)?,
            })
        },
    )
}

/// Parses one `validation-<batch>.csv`.
pub fn parse_validation(
    text: &str,
    global_batch: u32,
    origin: &str,
) -> Result<ValidationCurve, ParseError> {
    let rows = read_csv(
        text,
        origin,
        &["progress", "iteration", "metric", "grad_sqr", "grad_var"],
        |f, line| {
            Ok(ValidationRow {
                progress: non_negative(f[0], "progress", origin, line)?,
                iteration: non_negative(f[1], "iteration", origin, line)?,
                metric: parse_f64(f[2], "metric", origin, line)?,
                grad_sqr: non_negative(f[3], "grad_sqr", origin, line)?,
                grad_var: non_negative(f[4], "grad_var", origin, line)?,
            })
        },
    )?;
    if rows.is_empty() {
        return Err(ParseError::whole(origin, "no data rows"));
    }
    for (i, w) in rows.windows(2).enumerate() {
        if w[1].progress < w[0].progress {
            return Err(ParseError::at(
                origin,
                i + 3,
                "column `progress` must not decrease",
            ));
        }
    }
    Ok(ValidationCurve { global_batch, rows })
}

/// The global batch in a file name such as `validation-512.csv`.
pub fn validation_batch_from_name(file_name: &str) -> Option<u32> {
    file_name
        .strip_prefix("validation-")?
        .strip_suffix(".csv")?
        .parse()
        .ok()
        .filter(|b| *b > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_column_is_named() {
        let e = parse_scalability(
            "num_nodes,local_bsz,step_time,sync_time\n1,2,3,4\n",
            "s.csv",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("missing column `num_replicas`"),
            "{e}"
        );
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn bad_number_names_line() {
        let e = parse_validation(
            "progress,iteration,metric,grad_sqr,grad_var\n1,2,3,4,5\n1,2,x,4,5\n",
            8,
            "v.csv",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "v.csv:3: column `metric`: `x` is not a finite number"
        );
    }

    #[test]
    fn batch_from_name() {
        assert_eq!(validation_batch_from_name("validation-512.csv"), Some(512));
        assert_eq!(validation_batch_from_name("validation-0.csv"), None);
        assert_eq!(validation_batch_from_name("placements.csv"), None);
    }
}
