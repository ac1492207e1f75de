//! Courier: the global batch (and placement) with the best predicted metric after
//! N epochs whose predicted training time meets an SLO (ALGORITHMS.md §2c).
//!
//! Predicted time is `N·epoch_samples / batch × step_time`; a candidate is feasible
//! when `predicted_time × (1 + margin) ≤ SLO`. The margin is the step-time model's
//! held-out p90 error, so a prediction that is as wrong as one in ten still meets
//! the SLO. Among feasible candidates the best predicted metric wins; ties (the
//! same batch on other placements) go to the faster one.

use super::{Candidate, MeasuredTable};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::StepModel;
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

/// Courier with predictions.
pub fn choose(
    candidates: &[Candidate],
    model: &StepModel,
    conv: &ConvergenceModel,
    epochs: f64,
    slo_s: f64,
    margin: f64,
) -> CourierChoice {
    let scored = candidates
        .iter()
        .map(|c| Scored {
            candidate: c.clone(),
            time_s: job_time(conv, epochs, c, model.step_time(&c.config)),
            metric: conv.metric_after_epochs(epochs, c.global_batch),
        })
        .filter(|s| s.time_s * (1.0 + margin) <= slo_s)
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
    use pacer_predict::itertime::{fit, ModelKind};

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
}
