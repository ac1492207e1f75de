//! ElasticFlow's traces (ASPLOS'23, `gudiandian/ElasticFlow`,
//! `microsoft/elasticflow-traces`): `job_id,submit_time,iteration,model_name,ddl,
//! batch_size,num_gpu,duration[,best_effort]`, and its per-model throughput tables
//! (`throughputs_<GPU>/<model>.csv`: iterations/s per global batch, one row each, and
//! GPU count, one column each; `nan` where not measured).
//!
//! Each job becomes a [`Work::Elastic`]: `iteration` optimiser steps at the measured
//! iterations/s of its (model, global batch) on 1, 2, 4, … GPUs of every cluster
//! device type that has a table directory, with its deadline (`ddl`, unless
//! `best_effort` is 1) and ElasticFlow's restart overhead ([`ef_restart_s`]). Times
//! are relative to the earliest `submit_time`.

use super::{csv_records, positive_u32, TraceContext, TraceError, TraceFormat};
use crate::engine::{ElasticCurve, SimJob, Work};
use pacer_model::profile::parse_f64;
use pacer_model::{JobSpec, ParseError};
use std::collections::BTreeMap;

/// `elasticflow:FILE`.
pub const FORMAT: TraceFormat = TraceFormat {
    prefix: "elasticflow",
    arg: "FILE",
    summary: "ElasticFlow trace (needs --elasticflow-tables DIR): deadline jobs, iterations/s per GPU count",
    uses_apps: false,
    load: |arg: &str, ctx: &TraceContext| -> Result<Vec<SimJob>, TraceError> {
        let Some(dir) = ctx.elasticflow_tables else {
            return Err(TraceError::Spec(
                "elasticflow traces need --elasticflow-tables DIR (the folder holding \
                 throughputs_<GPU>/<model>.csv, e.g. data/elasticflow)"
                    .into(),
            ));
        };
        let text = super::read(arg, pacer_fsio::limits::TRACE)?;
        let mut tables = TableCache::default();
        load_elasticflow(&text, arg, &ctx.cluster.device_types, &mut |ty, model| {
            tables.get(dir, ty, model)
        })
    },
};

/// Iterations/s by global batch, then `(GPUs, iterations/s)` sorted by GPUs.
pub type ThroughputTable = BTreeMap<u32, Vec<(u32, f64)>>;

/// Parses one `throughputs_<GPU>/<model>.csv`: header `global_batch_size,1,2,4,…`,
/// one row per global batch; `nan` or empty cells are sizes that were not measured.
pub fn parse_throughput_table(text: &str, origin: &str) -> Result<ThroughputTable, ParseError> {
    let mut lines = text.lines().enumerate();
    let (_, header) = lines
        .next()
        .ok_or_else(|| ParseError::at(origin, 1, "empty; expected a header line".to_string()))?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    if cols.first() != Some(&"global_batch_size") || cols.len() < 2 {
        return Err(ParseError::at(
            origin,
            1,
            "expected header `global_batch_size,1,2,4,…` (GPU counts)".to_string(),
        ));
    }
    let gpus = cols[1..]
        .iter()
        .map(|c| positive_u32(c, "header", origin, 1))
        .collect::<Result<Vec<u32>, _>>()?;
    let mut table = ThroughputTable::new();
    for (k, line) in lines {
        let line_no = k + 1;
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != cols.len() {
            return Err(ParseError::at(
                origin,
                line_no,
                format!("has {} fields; expected {}", cells.len(), cols.len()),
            ));
        }
        let batch = positive_u32(cells[0], "global_batch_size", origin, line_no)?;
        let mut points = Vec::new();
        for (&g, cell) in gpus.iter().zip(&cells[1..]) {
            if cell.is_empty() || cell.eq_ignore_ascii_case("nan") {
                continue;
            }
            let r = parse_f64(cell, &format!("{g} GPUs"), origin, line_no)?;
            if !(r > 0.0 && r.is_finite()) {
                return Err(ParseError::at(
                    origin,
                    line_no,
                    format!("{g} GPUs: `{cell}`; expected iterations/s > 0 or nan"),
                ));
            }
            points.push((g, r));
        }
        points.sort_by_key(|p| p.0);
        if points.is_empty() {
            return Err(ParseError::at(
                origin,
                line_no,
                "no measured GPU count; expected at least one number".to_string(),
            ));
        }
        if table.insert(batch, points).is_some() {
            return Err(ParseError::at(
                origin,
                line_no,
                format!("global batch {batch} appears twice"),
            ));
        }
    }
    Ok(table)
}

/// The throughput table of a model on a device type (`None`: not measured there).
pub type TableLookup<'a> =
    dyn FnMut(&str, &str) -> Result<Option<ThroughputTable>, TraceError> + 'a;

/// Tables read from `DIR/throughputs_<TYPE>/<model>.csv` once each.
#[derive(Default)]
struct TableCache {
    loaded: BTreeMap<(String, String), Option<ThroughputTable>>,
}

impl TableCache {
    fn get(
        &mut self,
        dir: &str,
        ty: &str,
        model: &str,
    ) -> Result<Option<ThroughputTable>, TraceError> {
        let key = (ty.to_string(), model.to_string());
        if let Some(t) = self.loaded.get(&key) {
            return Ok(t.clone());
        }
        let path = format!("{dir}/throughputs_{}/{model}.csv", ty.to_ascii_uppercase());
        let t = if std::path::Path::new(&path).is_file() {
            let text = super::read(&path, pacer_fsio::limits::TABLE)?;
            Some(parse_throughput_table(&text, &path)?)
        } else {
            None
        };
        self.loaded.insert(key, t.clone());
        Ok(t)
    }
}

/// ElasticFlow's restart overhead (`utils.estimate_overhead`, no cache hit, no
/// periodic restart) of a job that starts on `gpus` GPUs of a `cluster_gpus` cluster:
/// 2 s (7 s from 256 GPUs) plus 2 s per doubling, counting the first GPU.
pub fn ef_restart_s(gpus: u32, cluster_gpus: u32) -> f64 {
    let base = if cluster_gpus >= 256 { 7.0 } else { 2.0 };
    base + (f64::from(gpus.max(1)).log2() + 1.0) * EF_RESTART_S_PER_DOUBLING
}

/// Seconds [`ef_restart_s`] adds per doubling of the new size.
pub const EF_RESTART_S_PER_DOUBLING: f64 = 2.0;

/// Parses an ElasticFlow trace; `table(type, model)` gives the throughput table of a
/// model on a device type (`None`: not measured there).
pub fn load_elasticflow(
    text: &str,
    origin: &str,
    device_types: &[String],
    table: &mut TableLookup<'_>,
) -> Result<Vec<SimJob>, TraceError> {
    let cols = [
        "job_id",
        "submit_time",
        "iteration",
        "model_name",
        "ddl",
        "batch_size",
        "num_gpu",
    ];
    let (idx, rows) = csv_records(text, origin, &cols)?;
    let be_col = text
        .lines()
        .next()
        .and_then(|h| h.split(',').position(|c| c.trim() == "best_effort"));
    let mut parsed = Vec::with_capacity(rows.len());
    for (line, rec) in &rows {
        let line = *line;
        let f = |k: usize| rec[idx[k]].trim();
        let submit = parse_f64(f(1), "submit_time", origin, line)?;
        let ddl = parse_f64(f(4), "ddl", origin, line)?;
        if !(submit.is_finite() && submit >= 0.0) {
            return Err(ParseError::at(
                origin,
                line,
                "column `submit_time`: expected seconds ≥ 0".to_string(),
            )
            .into());
        }
        if !(ddl.is_finite() && ddl > submit) {
            return Err(ParseError::at(
                origin,
                line,
                format!("column `ddl`: {ddl}; expected a time after submit_time {submit}"),
            )
            .into());
        }
        let iterations = positive_u32(f(2), "iteration", origin, line)?;
        let batch = positive_u32(f(5), "batch_size", origin, line)?;
        let gpus = positive_u32(f(6), "num_gpu", origin, line)?;
        let best_effort = match be_col.and_then(|c| rec.get(c)).map(str::trim) {
            None | Some("0") | Some("") => false,
            Some("1") => true,
            Some(x) => {
                return Err(ParseError::at(
                    origin,
                    line,
                    format!("column `best_effort`: `{x}`; expected 0 or 1"),
                )
                .into())
            }
        };
        let model = f(3).to_string();
        if model.is_empty() || model.contains(['/', '\\']) || model.starts_with('.') {
            return Err(ParseError::at(
                origin,
                line,
                format!("column `model_name`: `{model}`; expected a model name"),
            )
            .into());
        }
        let mut curves = Vec::new();
        // A type whose table lacks the batch is one the job was not measured on;
        // an error only when no type has it.
        let mut missing_batch = None;
        for ty in device_types {
            let Some(t) = table(ty, &model)? else {
                continue;
            };
            let Some(points) = t.get(&batch) else {
                let known: Vec<String> = t.keys().map(u32::to_string).collect();
                missing_batch.get_or_insert(format!(
                    "model `{model}` on {ty} has no throughputs for global batch {batch}; \
                     measured: {}",
                    known.join(", ")
                ));
                continue;
            };
            // ElasticFlow never gives a job more GPUs than its global batch or 64.
            let points: Vec<(u32, f64)> = points
                .iter()
                .copied()
                .filter(|&(g, _)| g <= batch.min(64))
                .collect();
            if !points.is_empty() {
                curves.push(ElasticCurve {
                    device_type: ty.clone(),
                    points,
                });
            }
        }
        if curves.is_empty() {
            let why = missing_batch.unwrap_or_else(|| {
                format!(
                    "no throughput table for model `{model}` on any device type of the cluster \
                     ({}); expected throughputs_<TYPE>/{model}.csv",
                    device_types.join(", ")
                )
            });
            return Err(ParseError::at(origin, line, why).into());
        }
        parsed.push(Row {
            id: f(0).to_string(),
            submit,
            ddl,
            iterations,
            model,
            batch,
            gpus,
            best_effort,
            curves,
        });
    }
    let t0 = parsed
        .iter()
        .map(|p| p.submit)
        .fold(f64::INFINITY, f64::min);
    Ok(parsed
        .into_iter()
        .map(|r| SimJob {
            spec: JobSpec {
                name: format!("job-{}", r.id),
                arrival_s: r.submit - t0,
                application: r.model,
                requested_replicas: r.gpus,
                requested_batch: r.batch,
                service_gpu_s: None,
                device_type: None,
            },
            work: Work::Elastic {
                steps: f64::from(r.iterations),
                curves: r.curves,
                deadline_s: (!r.best_effort).then_some(r.ddl - t0),
            },
        })
        .collect())
}

/// One parsed trace row.
struct Row {
    id: String,
    submit: f64,
    ddl: f64,
    iterations: u32,
    model: String,
    batch: u32,
    gpus: u32,
    best_effort: bool,
    curves: Vec<ElasticCurve>,
}
