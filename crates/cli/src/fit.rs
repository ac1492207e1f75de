//! `pacer fit`: fit step-time models to a `placements.csv` (and optionally a
//! `scalability.csv`) and report their error on held-out rows.

use anyhow::{bail, Context};
use clap::Args;
use pacer_cli::json::FitReport;
use pacer_model::profile::{parse_placements, parse_scalability};
use pacer_predict::itertime::{
    evaluate, fit, rows_from_placements, rows_from_scalability, split_extrapolate, split_random,
    ItertimeError, ModelKind, StepRow,
};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct FitArgs {
    /// `placements.csv` (placement,local_bsz,step_time,sync_time).
    #[arg(long)]
    pub placements: PathBuf,
    /// `scalability.csv` (num_nodes,num_replicas,local_bsz,step_time,sync_time).
    #[arg(long)]
    pub scalability: Option<PathBuf>,
    /// Fraction of rows held out for testing.
    #[arg(long, default_value_t = 0.3)]
    pub holdout: f64,
    /// Seed of the random holdout.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `random` (a random fraction) or `extrapolate` (the largest replica counts).
    #[arg(long, default_value = "random")]
    pub split: String,
    /// One model (ernest, pollux, pacer, pacer+table); all when omitted.
    #[arg(long)]
    pub model: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The rows of both files, and how many come from `--placements` (the first ones).
fn load(args: &FitArgs) -> anyhow::Result<(Vec<StepRow>, usize)> {
    let origin = args.placements.display().to_string();
    let text = pacer_fsio::read_to_string_limited(&args.placements, pacer_fsio::limits::TABLE)?;
    let mut rows = rows_from_placements(&parse_placements(&text, &origin)?, &origin);
    let n_placements = rows.len();
    if let Some(s) = &args.scalability {
        let origin = s.display().to_string();
        let text = pacer_fsio::read_to_string_limited(s, pacer_fsio::limits::TABLE)?;
        rows.extend(rows_from_scalability(
            &parse_scalability(&text, &origin)?,
            &origin,
        ));
    }
    Ok((rows, n_placements))
}

/// A fit to both files failed: blames the file at fault. When the placements alone
/// fit, the scalability row that model predicts worst (an outlier there made the
/// joint fit fail); otherwise the placements file.
fn diagnose(
    args: &FitArgs,
    kind: ModelKind,
    rows: &[StepRow],
    n_placements: usize,
    err: ItertimeError,
) -> anyhow::Error {
    let placements = args.placements.display();
    let Some(scal) = &args.scalability else {
        return anyhow::anyhow!("fitting {} to {placements}: {err}", kind.name());
    };
    let (own, extra) = rows.split_at(n_placements);
    match fit(kind, own) {
        Err(e) => anyhow::anyhow!("fitting {} to {placements}: {e}", kind.name()),
        Ok(model) => {
            let off = |r: &StepRow| {
                let p = model.step_time(&r.config);
                if p > 0.0 {
                    (p / r.step_time_s).ln().abs()
                } else {
                    f64::INFINITY
                }
            };
            match extra.iter().max_by(|a, b| off(a).total_cmp(&off(b))) {
                Some(r) => anyhow::anyhow!(
                    "{}: step time {} s with {} replica(s) on {} node(s) at local batch {} is \
                     {}× the {} s the {} model fitted to {placements} predicts; fitting it to \
                     both files failed: {err}",
                    r.source,
                    readable(r.step_time_s),
                    r.config.replicas,
                    r.config.nodes,
                    if (1e-3..1e6).contains(&r.config.local_bsz) {
                        r.config.local_bsz.to_string()
                    } else {
                        format!("{:e}", r.config.local_bsz)
                    },
                    readable(
                        (r.step_time_s / model.step_time(&r.config))
                            .max(model.step_time(&r.config) / r.step_time_s)
                    ),
                    readable(model.step_time(&r.config)),
                    kind.name()
                ),
                None => anyhow::anyhow!(
                    "fitting {} to {placements} and {}: {err}",
                    kind.name(),
                    scal.display()
                ),
            }
        }
    }
}

/// Plain for ordinary magnitudes, scientific otherwise.
fn readable(x: f64) -> String {
    if (1e-3..1e6).contains(&x.abs()) {
        format!("{:.4}", x)
    } else {
        format!("{x:.4e}")
    }
}

/// The files the rows come from, for messages.
fn files(args: &FitArgs) -> String {
    match &args.scalability {
        Some(s) => format!("{} and {}", args.placements.display(), s.display()),
        None => args.placements.display().to_string(),
    }
}

pub fn run(args: FitArgs) -> anyhow::Result<()> {
    if !(0.0..1.0).contains(&args.holdout) {
        bail!("--holdout {}: expected a fraction in [0, 1)", args.holdout);
    }
    let (rows, n_placements) = load(&args)?;
    let kinds: Vec<ModelKind> = match &args.model {
        None => ModelKind::ALL.to_vec(),
        Some(m) => vec![ModelKind::from_name(m).with_context(|| {
            format!("--model {m}: expected one of ernest, pollux, pacer, pacer+table")
        })?],
    };
    let split = match args.split.as_str() {
        "random" => split_random(rows.len(), args.holdout, args.seed),
        "extrapolate" => split_extrapolate(&rows, args.holdout),
        s => bail!("--split {s}: expected random or extrapolate"),
    };
    if split.train.is_empty() || split.test.is_empty() {
        bail!(
            "{}: {} rows cannot be split into training and test rows with --holdout {}",
            files(&args),
            rows.len(),
            args.holdout
        );
    }
    let mut reports = Vec::new();
    for kind in kinds {
        let (model, stats) = evaluate(kind, &rows, &split)
            .map_err(|e| diagnose(&args, kind, &rows, n_placements, e))?;
        reports.push(FitReport {
            model: kind.name().to_string(),
            split: args.split.clone(),
            rows_train: split.train.len(),
            rows_test: stats.rows,
            median_abs_pct_error: stats.median_abs_pct_error,
            p90_abs_pct_error: stats.p90_abs_pct_error,
            max_abs_pct_error: stats.max_abs_pct_error,
            params: match &model {
                // The table correction is large; its parametric part says enough.
                pacer_predict::itertime::StepModel::PacerTable(t) => serde_json::to_value(&t.base)?,
                m => serde_json::to_value(m)?,
            },
        });
    }
    let mut text = String::new();
    if args.json {
        writeln!(text, "{}", pacer_cli::json::pretty(&reports)?)?;
    } else {
        writeln!(
            text,
            "{:<12} {:>10} {:>9} {:>20} {:>17}",
            "model", "rows_train", "rows_test", "median_abs_pct_error", "p90_abs_pct_error"
        )?;
        for r in &reports {
            writeln!(
                text,
                "{:<12} {:>10} {:>9} {:>20.2} {:>17.2}",
                r.model, r.rows_train, r.rows_test, r.median_abs_pct_error, r.p90_abs_pct_error
            )?;
        }
    }
    crate::out::print(&text)
}
