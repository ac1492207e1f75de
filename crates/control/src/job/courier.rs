//! Courier: the global batch (and placement) with the best predicted metric after
//! N epochs whose predicted training time meets an SLO (docs/algorithms.md §2c).
//!
//! Predicted time is `N·epoch_samples / batch × step_time`; a candidate is feasible
//! when `predicted_time × (1 + margin) ≤ SLO`. The margin depends on how the
//! measured rows support the candidate's prediction ([`Margins`]): a configuration
//! measured as such, one interpolated between measured batches of its placement,
//! or one extrapolated. Each is the 90th percentile of how much the model
//! *under*-predicted held-out rows of that kind (over-prediction cannot violate an
//! SLO), so a prediction as wrong as one in ten still meets it. Among feasible
//! candidates the best predicted metric wins; ties (the same batch on other
//! placements) go to the faster one.

use super::{Candidate, MeasuredTable};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{quantile, StepModel, StepRow, Support};
use serde::{Deserialize, Serialize};

/// One scored candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub candidate: Candidate,
    pub time_s: f64,
    pub metric: f64,
}

/// Courier's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CourierChoice {
    pub best: Option<Scored>,
    /// Best feasible candidate with a different global batch.
    pub runner_up: Option<Scored>,
}

/// Training time of `epochs` at `candidate` given a step time.
pub fn job_time(conv: &ConvergenceModel, epochs: f64, candidate: &Candidate, step_s: f64) -> f64 {
    epochs * conv.epoch_samples / candidate.global_batch * step_s
}

fn pick(scored: Vec<Scored>, conv: &ConvergenceModel) -> CourierChoice {
    let better = |a: &Scored, b: &Scored| {
        if (a.metric - b.metric).abs() > 1e-12 {
            conv.better(a.metric, b.metric)
        } else {
            a.time_s < b.time_s
        }
    };
    let mut best: Option<Scored> = None;
    for s in &scored {
        if best.as_ref().is_none_or(|b| better(s, b)) {
            best = Some(s.clone());
        }
    }
    let mut runner_up: Option<Scored> = None;
    if let Some(b) = &best {
        for s in scored
            .iter()
            .filter(|s| s.candidate.global_batch != b.candidate.global_batch)
        {
            if runner_up.as_ref().is_none_or(|r| better(s, r)) {
                runner_up = Some(s.clone());
            }
        }
    }
    CourierChoice { best, runner_up }
}

/// Safety margin (relative) per [`Support`] class of a prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Margins {
    pub measured: f64,
    pub interpolated: f64,
    pub extrapolated: f64,
}

/// Held-out rows of a class needed to estimate its own margin; fewer borrow the
/// margin of all held-out rows.
const MIN_CLASS_ROWS: usize = 10;

impl Margins {
    /// The same margin everywhere.
    pub fn uniform(m: f64) -> Self {
        Margins {
            measured: m,
            interpolated: m,
            extrapolated: m,
        }
    }

    /// Margins from held-out rows the model was not fitted on: per class, the 90th
    /// percentile of `measured / predicted − 1` (at least 0). Held-out rows are
    /// never measured configurations of the fit, so that class gets
    /// `measured_noise`: how far a repeated measurement of the same configuration
    /// may land above the first (the traces have no repeats; pass an estimate such
    /// as [`noise_floor`](pacer_predict::itertime::noise_floor)'s, or the
    /// interpolated margin to be safe). The extrapolated margin is never below the
    /// interpolated one.
    pub fn from_holdout(model: &StepModel, test: &[StepRow], measured_noise: f64) -> Self {
        let ratio = |r: &StepRow| r.step_time_s / model.step_time(&r.config) - 1.0;
        let q90 = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            quantile(&v, 0.9).max(0.0)
        };
        let all = q90(test.iter().map(ratio).collect());
        let class = |k: Support| {
            let v: Vec<f64> = test
                .iter()
                .filter(|r| model.support(&r.config) == k)
                .map(ratio)
                .collect();
            if v.len() >= MIN_CLASS_ROWS {
                q90(v)
            } else {
                all
            }
        };
        let interpolated = class(Support::Interpolated);
        Margins {
            measured: measured_noise.max(0.0),
            interpolated,
            extrapolated: class(Support::Extrapolated).max(interpolated),
        }
    }

    /// Margin for a prediction of `model` at `c`.
    pub fn at(&self, model: &StepModel, c: &Candidate) -> f64 {
        match model.support(&c.config) {
            Support::Measured => self.measured,
            Support::Interpolated => self.interpolated,
            Support::Extrapolated => self.extrapolated,
        }
    }
}

/// Courier with predictions and one margin for every candidate.
pub fn choose(
    candidates: &[Candidate],
    model: &StepModel,
    conv: &ConvergenceModel,
    epochs: f64,
    slo_s: f64,
    margin: f64,
) -> CourierChoice {
    choose_with(
        candidates,
        model,
        conv,
        epochs,
        slo_s,
        &Margins::uniform(margin),
    )
}

/// Courier with predictions, each candidate with the margin of its support class.
pub fn choose_with(
    candidates: &[Candidate],
    model: &StepModel,
    conv: &ConvergenceModel,
    epochs: f64,
    slo_s: f64,
    margins: &Margins,
) -> CourierChoice {
    let scored = candidates
        .iter()
        .filter_map(|c| {
            let s = Scored {
                candidate: c.clone(),
                time_s: job_time(conv, epochs, c, model.step_time(&c.config)),
                metric: conv.metric_after_epochs(epochs, c.global_batch),
            };
            (s.time_s * (1.0 + margins.at(model, c)) <= slo_s).then_some(s)
        })
        .collect();
    pick(scored, conv)
}

/// Measured time and metric of a candidate: the table's step time and the measured
/// curve at its batch (`None` unless the batch has a curve and the table covers it).
pub fn measure(
    c: &Candidate,
    table: &MeasuredTable,
    conv: &ConvergenceModel,
    epochs: f64,
) -> Option<Scored> {
    let curve = conv
        .curves
        .iter()
        .find(|k| (k.global_batch - c.global_batch).abs() < 1e-9)?;
    let step = table.step_time(&c.config)?;
    Some(Scored {
        candidate: c.clone(),
        time_s: job_time(conv, epochs, c, step),
        metric: curve.at(epochs * conv.epoch_samples),
    })
}

/// The oracle: the same rule applied to measurements, no margin.
pub fn oracle(
    candidates: &[Candidate],
    table: &MeasuredTable,
    conv: &ConvergenceModel,
    epochs: f64,
    slo_s: f64,
) -> CourierChoice {
    let scored = candidates
        .iter()
        .filter_map(|c| measure(c, table, conv, epochs))
        .filter(|s| s.time_s <= slo_s)
        .collect();
    pick(scored, conv)
}

#[cfg(test)]
mod tests {
    use super::super::{batch_grid, candidates, testdata};
    use super::*;
    use pacer_predict::itertime::{fit, ModelKind, StepConfig};

    #[test]
    fn tighter_slo_means_bigger_faster_batch_and_choices_meet_the_slo() {
        let rows = testdata::rows();
        let table = MeasuredTable::new(&rows);
        let conv = ConvergenceModel::fit(&testdata::curves()).unwrap();
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let cands = candidates(&table, &batch_grid(&measured, false), 1, 64);
        let model = fit(ModelKind::Pacer, &rows).unwrap();
        let epochs = 20.0;
        let loose = choose(&cands, &model, &conv, epochs, 1e9, 0.1);
        let best = loose.best.unwrap();
        assert_eq!(best.candidate.global_batch, 32.0);
        assert!(loose.runner_up.unwrap().candidate.global_batch != 32.0);
        // An SLO only large batches on many replicas can meet.
        let all: Vec<Scored> = cands
            .iter()
            .filter_map(|c| measure(c, &table, &conv, epochs))
            .collect();
        let fastest = all.iter().map(|s| s.time_s).fold(f64::INFINITY, f64::min);
        let slo = fastest * 1.5;
        let tight = choose(&cands, &model, &conv, epochs, slo, 0.1)
            .best
            .unwrap();
        let orac = oracle(&cands, &table, &conv, epochs, slo).best.unwrap();
        let m = measure(&tight.candidate, &table, &conv, epochs).unwrap();
        assert!(m.time_s <= slo, "{m:?}");
        assert!(tight.candidate.global_batch > 32.0);
        assert!((m.metric - orac.metric).abs() <= 0.011, "{m:?} vs {orac:?}");
        assert!(choose(&cands, &model, &conv, epochs, fastest * 0.5, 0.1)
            .best
            .is_none());
    }

    #[test]
    fn margins_count_only_under_prediction_per_support_class() {
        let rows = testdata::rows();
        let model = fit(ModelKind::PacerTable, &rows).unwrap();
        // Held-out rows 20% slower than predicted at interpolated batches, and
        // 50% faster (over-predicted) on an unseen placement.
        let c = rows[0].config;
        let mut test = Vec::new();
        for i in 0..12 {
            let b = 9.0 + i as f64 * 10.0;
            let config = StepConfig { local_bsz: b, ..c };
            assert_eq!(model.support(&config), Support::Interpolated);
            test.push(StepRow {
                config,
                step_time_s: model.step_time(&config) * 1.2,
                sync_time_s: 0.0,
                source: format!("t{i}"),
            });
            let unseen = StepConfig {
                group: u64::MAX,
                ..config
            };
            test.push(StepRow {
                config: unseen,
                step_time_s: model.step_time(&unseen) * 0.5,
                sync_time_s: 0.0,
                source: format!("u{i}"),
            });
        }
        let m = Margins::from_holdout(&model, &test, 0.03);
        assert!((m.interpolated - 0.2).abs() < 1e-9, "{m:?}");
        // Over-prediction is no risk, but extrapolation is never trusted more.
        assert!((m.extrapolated - 0.2).abs() < 1e-9, "{m:?}");
        assert_eq!(m.measured, 0.03);
    }

    #[test]
    fn a_measured_configuration_can_use_a_tighter_margin() {
        let rows = testdata::rows();
        let table = MeasuredTable::new(&rows);
        let conv = ConvergenceModel::fit(&testdata::curves()).unwrap();
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let cands = candidates(&table, &batch_grid(&measured, false), 1, 64);
        let model = fit(ModelKind::PacerTable, &rows).unwrap();
        let epochs = 20.0;
        // The best-metric candidate, measured as such; an SLO 2% above its time.
        let best = choose(&cands, &model, &conv, epochs, 1e9, 0.0)
            .best
            .unwrap();
        assert_eq!(model.support(&best.candidate.config), Support::Measured);
        let slo = best.time_s * 1.02;
        let uniform = choose(&cands, &model, &conv, epochs, slo, 0.1)
            .best
            .unwrap();
        assert!(uniform.candidate.global_batch > best.candidate.global_batch);
        let per_class = Margins {
            measured: 0.01,
            interpolated: 0.1,
            extrapolated: 0.1,
        };
        let tight = choose_with(&cands, &model, &conv, epochs, slo, &per_class)
            .best
            .unwrap();
        assert_eq!(tight.candidate, best.candidate);
    }
}
