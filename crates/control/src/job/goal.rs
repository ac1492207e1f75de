//! Goal-driven jobs: what a job with a deadline needs, read from its profile by
//! Courier (the best final metric after N epochs, [`super::courier`]) or by the
//! configuration search (the least time to a target metric, [`super::search`]), in
//! the form a deadline planner reads — one [`GoalOption`] per global batch: the
//! samples it must process and its speed at each size it may run at — in the goal's
//! order of preference. A driver tries them in that order and admits the first whose
//! minimum share fits beside the jobs already admitted, so the batch follows what
//! the cluster can give by the deadline (docs/serve.md, "Deadlines from a profile").

use super::courier::Margins;
use super::{batch_grid, candidates, Candidate, MeasuredTable};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{
    error_stats, fit, split_random, ItertimeError, ModelKind, StepModel, StepRow,
};
use serde::{Deserialize, Serialize};

/// What the job must achieve by its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "goal")]
pub enum Goal {
    /// Train `epochs` epochs at the batch with the best predicted final metric that
    /// meets the deadline (Courier).
    Accuracy { epochs: f64 },
    /// Reach `target` at the batch that gets there soonest (the configuration search's
    /// time objective).
    Time { target: f64 },
    /// Reach `target` at the batch that gets there in the fewest device-seconds (the
    /// configuration search's cost objective, one price for every device).
    Cost { target: f64 },
}

impl Goal {
    /// The metric to reach (`None`: the accuracy goal, which trains epochs).
    pub fn target(&self) -> Option<f64> {
        match *self {
            Goal::Time { target } | Goal::Cost { target } => Some(target),
            Goal::Accuracy { .. } => None,
        }
    }
}

/// A profile's models, fitted once and read by every admission.
#[derive(Debug, Clone)]
pub struct GoalModel {
    pub conv: ConvergenceModel,
    /// The step-time model fitted on every row.
    pub model: StepModel,
    /// Courier's margins per support class: the held-out rows' p90 under-prediction
    /// (a configuration measured as such gets the interpolated one: the profiles have
    /// no repeated measurements to estimate its noise).
    pub margins: Margins,
    /// The configuration search's one margin: the held-out rows' p90 |error|.
    pub margin: f64,
    pub table: MeasuredTable,
}

impl GoalModel {
    /// Fits the models on `rows` (step times of measured configurations) and `conv`
    /// (validation curves); the margins come from a model fitted on 70 % of the rows
    /// (a random split by `seed`) and checked on the rest, as `pacer recommend` does.
    pub fn fit(rows: &[StepRow], conv: ConvergenceModel, seed: u64) -> Result<Self, ItertimeError> {
        let split = split_random(rows.len(), 0.3, seed);
        let (train, test) = split.pick(rows);
        let held = fit(ModelKind::PacerTable, &train)?;
        let margin = error_stats(&held, &test).p90_abs_pct_error / 100.0;
        let m = Margins::from_holdout(&held, &test, 0.0);
        Ok(GoalModel {
            conv,
            model: fit(ModelKind::PacerTable, rows)?,
            margins: Margins {
                measured: m.interpolated,
                ..m
            },
            margin,
            table: MeasuredTable::new(rows),
        })
    }

    /// The measured batches (ascending).
    pub fn measured_batches(&self) -> Vec<f64> {
        self.conv.curves.iter().map(|c| c.global_batch).collect()
    }

    /// The accuracy goal at every epoch every measured run covers.
    pub fn default_accuracy(&self) -> Goal {
        Goal::Accuracy {
            epochs: self.conv.max_common_epochs(),
        }
    }

    /// The metric every measured batch reaches (the time and cost goals' default).
    pub fn default_target(&self) -> f64 {
        self.conv.common_target()
    }

    /// The options for `goal`, best first (accuracy: the predicted final metric, ties
    /// to the faster; time: the least time on its fastest level; cost: the fewest
    /// device-seconds on its cheapest level): one per global batch
    /// (`batches`, or every measured batch and, for accuracy, the geometric midpoints
    /// Courier also scores), each with a level per size in `sizes` that a measured
    /// placement of that many replicas, at most `max_per_node` on a node, covers at
    /// that batch's local share. A level's speed is the fastest such placement's,
    /// its predicted step time raised by its margin (Courier's per support class for
    /// accuracy, the search's one margin otherwise): the planner's guarantee is then
    /// as safe as the recommendation's. A batch that reaches no level, or never
    /// reaches the target, gives no option.
    pub fn options(
        &self,
        goal: Goal,
        batches: Option<&[f64]>,
        sizes: &[u32],
        max_per_node: u32,
    ) -> Vec<GoalOption> {
        let measured = self.measured_batches();
        let grid = match batches {
            Some(b) => b.to_vec(),
            None => batch_grid(&measured, matches!(goal, Goal::Accuracy { .. })),
        };
        let top = sizes.iter().copied().max().unwrap_or(0);
        let cands: Vec<Candidate> = candidates(&self.table, &grid, 1, top)
            .into_iter()
            .filter(|c| c.config.max_per_node <= max_per_node && sizes.contains(&c.replicas()))
            .collect();
        let mut out: Vec<GoalOption> = Vec::new();
        for &b in &grid {
            let (samples, metric) = match goal {
                Goal::Accuracy { epochs } => (
                    epochs * self.conv.epoch_samples,
                    self.conv.metric_after_epochs(epochs, b),
                ),
                Goal::Time { target } | Goal::Cost { target } => {
                    match self.conv.samples_to(target, b) {
                        Some(s) => (s, target),
                        None => continue,
                    }
                }
            };
            let mut levels: Vec<(u32, f64)> = Vec::new();
            for c in cands.iter().filter(|c| c.global_batch == b) {
                let margin = match goal {
                    Goal::Accuracy { .. } => self.margins.at(&self.model, c),
                    Goal::Time { .. } | Goal::Cost { .. } => {
                        if self.model.interpolates(&c.config) {
                            0.0
                        } else {
                            self.margin
                        }
                    }
                };
                let step = self.model.step_time(&c.config) * (1.0 + margin);
                let rate = b / step;
                if !(rate.is_finite() && rate > 0.0) {
                    continue;
                }
                match levels.iter_mut().find(|l| l.0 == c.replicas()) {
                    Some(l) => l.1 = l.1.max(rate),
                    None => levels.push((c.replicas(), rate)),
                }
            }
            if levels.is_empty() || !(samples.is_finite() && samples > 0.0) {
                continue;
            }
            levels.sort_by_key(|l| l.0);
            out.push(GoalOption {
                global_batch: b,
                samples,
                metric,
                levels,
            });
        }
        let conv = &self.conv;
        out.sort_by(|a, b| match goal {
            Goal::Accuracy { .. } if (a.metric - b.metric).abs() > 1e-12 => {
                if conv.better(a.metric, b.metric) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                }
            }
            Goal::Cost { .. } => a.cheapest_device_s().total_cmp(&b.cheapest_device_s()),
            _ => a.fastest_s().total_cmp(&b.fastest_s()),
        });
        out
    }
}

/// One way to meet the goal: a global batch, the samples to process at it, the
/// predicted metric there, and its speed (samples/s) at each size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalOption {
    pub global_batch: f64,
    pub samples: f64,
    pub metric: f64,
    /// `(replicas, samples/s)`, ascending replicas.
    pub levels: Vec<(u32, f64)>,
}

impl GoalOption {
    /// Predicted time on its fastest level.
    pub fn fastest_s(&self) -> f64 {
        let best = self.levels.iter().map(|l| l.1).fold(0.0, f64::max);
        self.samples / best
    }

    /// Predicted device-seconds on its cheapest level.
    pub fn cheapest_device_s(&self) -> f64 {
        self.levels
            .iter()
            .map(|&(n, rate)| self.samples / rate * n as f64)
            .fold(f64::INFINITY, f64::min)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::testdata;

    fn model() -> GoalModel {
        let conv = ConvergenceModel::fit(&testdata::curves()).unwrap();
        GoalModel::fit(&testdata::rows(), conv, 0).unwrap()
    }

    #[test]
    fn options_come_in_each_goals_order() {
        let m = model();
        let sizes: Vec<u32> = (1..=16).collect();
        let acc = m.options(m.default_accuracy(), None, &sizes, 4);
        assert!(acc.len() >= 3, "{acc:?}");
        for w in acc.windows(2) {
            assert!(!m.conv.better(w[1].metric, w[0].metric), "{w:?}");
        }
        // Every option trains the same epochs.
        assert!(acc.iter().all(|o| o.samples == acc[0].samples));
        let target = m.default_target();
        let time = m.options(Goal::Time { target }, None, &sizes, 4);
        assert!(!time.is_empty());
        for w in time.windows(2) {
            assert!(w[0].fastest_s() <= w[1].fastest_s(), "{w:?}");
        }
        let cost = m.options(Goal::Cost { target }, None, &sizes, 4);
        assert_eq!(cost.len(), time.len());
        for w in cost.windows(2) {
            assert!(
                w[0].cheapest_device_s() <= w[1].cheapest_device_s(),
                "{w:?}"
            );
        }
        // The same options, in another order: the cheapest need not be the fastest.
        assert!(cost.iter().all(|o| time.contains(o)));
    }

    #[test]
    fn levels_are_the_sizes_asked_for_and_placements_that_fit_a_node() {
        let m = model();
        let all = m.options(m.default_accuracy(), None, &[1, 2, 3, 4, 8], 4);
        let one_node = m.options(m.default_accuracy(), None, &[1, 2, 4, 8], 2);
        for o in &all {
            assert!(o.levels.iter().all(|l| [1, 2, 3, 4, 8].contains(&l.0)));
            assert!(o.levels.windows(2).all(|w| w[0].0 < w[1].0));
        }
        // At most 2 per node: the placements of 4 and 8 (4 per node) are left out.
        assert!(!one_node.is_empty());
        for o in &one_node {
            assert!(o.levels.iter().all(|l| l.0 <= 2), "{o:?}");
            let wide = all
                .iter()
                .find(|a| a.global_batch == o.global_batch)
                .unwrap();
            for &(r, rate) in &o.levels {
                let w = wide.levels.iter().find(|l| l.0 == r).map_or(0.0, |l| l.1);
                assert!(
                    rate <= w + 1e-9,
                    "batch {} r {r}: {rate} > {w}",
                    o.global_batch
                );
            }
        }
        // A batch given: one option at most, at that batch.
        let b = all[0].global_batch;
        let one = m.options(m.default_accuracy(), Some(&[b]), &[1, 2, 4], 4);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].global_batch, b);
    }

    #[test]
    fn a_level_runs_no_faster_than_the_recommendation_predicts() {
        // The level's time is the prediction raised by the margin: never below the
        // raw prediction of the same placement.
        let m = model();
        for o in m.options(m.default_accuracy(), None, &[1, 2, 4, 8, 16], 4) {
            for &(r, rate) in &o.levels {
                let best_raw = candidates(&m.table, &[o.global_batch], 1, r)
                    .into_iter()
                    .filter(|c| c.replicas() == r && c.config.max_per_node <= 4)
                    .map(|c| o.global_batch / m.model.step_time(&c.config))
                    .fold(0.0, f64::max);
                assert!(rate <= best_raw + 1e-9, "{rate} > {best_raw}");
            }
        }
    }
}
