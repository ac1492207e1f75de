//! Validation metric as a function of samples processed and global batch
//! (Hemingway's `g(i, m)`), from measured `validation-<batch>.csv` curves.
//!
//! Each curve becomes its *running best* metric against samples processed
//! (`iteration × batch`) — what a job that keeps its best checkpoint reports — and
//! the model interpolates linearly in `ln samples` along a curve and in `ln batch`
//! between the two measured batches around the one asked for. Outside the measured
//! batches it uses the nearest curve; past a curve's end it holds its last value.
//! Why not a parametric `a − b·s^(−c)` per curve: the Pollux curves have 3 (bert) to
//! 100 points, step changes at learning-rate decays, and the question Courier asks
//! is "metric after N epochs at batch M" at batches close to measured ones, which
//! interpolation answers with the measurement itself; [`ConvergenceModel::leave_one_out`]
//! reports how well it predicts a batch it has not seen.
//!
//! The gradient noise statistics of the same files give the Pollux efficiency
//! ([`ConvergenceModel::grad_params`] → [`GradParams`](crate::goodput::GradParams)).

use crate::goodput::GradParams;
use pacer_model::ValidationCurve;
use serde::{Deserialize, Serialize};

/// Why a convergence model cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConvergenceError {
    #[error("no validation curves")]
    Empty,
    #[error("validation-{batch}.csv: needs at least one row with iteration > 0")]
    NoProgress { batch: u32 },
}

/// One curve: samples processed → running best metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestCurve {
    pub global_batch: f64,
    /// `(ln samples, running best metric)`, samples ascending.
    pub points: Vec<(f64, f64)>,
}

impl BestCurve {
    /// Running best metric after `samples` (held before the first and after the last point).
    pub fn at(&self, samples: f64) -> f64 {
        let x = samples.max(1.0).ln();
        let p = &self.points;
        match p.iter().position(|q| q.0 >= x) {
            None => p[p.len() - 1].1,
            Some(0) => p[0].1,
            Some(j) => {
                let (a, b) = (p[j - 1], p[j]);
                a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0).max(1e-12)
            }
        }
    }

    /// Samples processed at the last point.
    pub fn end_samples(&self) -> f64 {
        self.points.last().map(|p| p.0.exp()).unwrap_or(0.0)
    }

    /// Fewest samples after which the running best reaches `target`, if it does.
    pub fn samples_to(&self, target: f64, higher_is_better: bool) -> Option<f64> {
        let ok = |m: f64| {
            if higher_is_better {
                m >= target
            } else {
                m <= target
            }
        };
        let p = &self.points;
        let j = p.iter().position(|q| ok(q.1))?;
        if j == 0 {
            return Some(p[0].0.exp());
        }
        let (a, b) = (p[j - 1], p[j]);
        let t = ((target - a.1) / (b.1 - a.1)).clamp(0.0, 1.0);
        Some((a.0 + t * (b.0 - a.0)).exp())
    }
}

/// The fitted `g(samples, batch)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConvergenceModel {
    /// Ascending batch.
    pub curves: Vec<BestCurve>,
    /// Accuracy-like (true) or loss/error-like (false), from the smallest batch's
    /// first and last point.
    pub higher_is_better: bool,
    /// Samples in one epoch: the base run validates once per epoch, so its first
    /// point's `progress × batch`.
    pub epoch_samples: f64,
    /// Mean gradient statistics over the base run (Pollux's `sqr`, `var`).
    pub grad: GradParams,
    pub base_batch: f64,
}

impl ConvergenceModel {
    /// Builds the model from measured curves (any order).
    pub fn fit(curves: &[ValidationCurve]) -> Result<Self, ConvergenceError> {
        if curves.is_empty() {
            return Err(ConvergenceError::Empty);
        }
        let mut sorted: Vec<&ValidationCurve> = curves.iter().collect();
        sorted.sort_by_key(|c| c.global_batch);
        let base = sorted[0];
        let first = &base.rows[0];
        let last = &base.rows[base.rows.len() - 1];
        let higher_is_better = last.metric >= first.metric;
        let epoch_samples = first.progress.max(1.0) * base.global_batch as f64;
        let mut out = Vec::new();
        for c in &sorted {
            let mut best = if higher_is_better {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            let mut points: Vec<(f64, f64)> = Vec::new();
            for r in c.rows.iter().filter(|r| r.iteration > 0.0) {
                best = if higher_is_better {
                    best.max(r.metric)
                } else {
                    best.min(r.metric)
                };
                let x = (r.iteration * c.global_batch as f64).ln();
                match points.last_mut() {
                    Some(p) if x <= p.0 => p.1 = best,
                    _ => points.push((x, best)),
                }
            }
            if points.is_empty() {
                return Err(ConvergenceError::NoProgress {
                    batch: c.global_batch,
                });
            }
            out.push(BestCurve {
                global_batch: c.global_batch as f64,
                points,
            });
        }
        let n = base.rows.len() as f64;
        let grad = GradParams {
            sqr: base.rows.iter().map(|r| r.grad_sqr).sum::<f64>() / n,
            var: base.rows.iter().map(|r| r.grad_var).sum::<f64>() / n,
        };
        Ok(ConvergenceModel {
            curves: out,
            higher_is_better,
            epoch_samples,
            grad,
            base_batch: base.global_batch as f64,
        })
    }

    /// The two measured curves around `batch` and the weight of the upper one.
    fn bracket(&self, batch: f64) -> (usize, usize, f64) {
        let c = &self.curves;
        if batch <= c[0].global_batch {
            return (0, 0, 0.0);
        }
        match c.iter().position(|k| k.global_batch >= batch) {
            None => (c.len() - 1, c.len() - 1, 0.0),
            Some(j) => {
                let (a, b) = (c[j - 1].global_batch.ln(), c[j].global_batch.ln());
                (j - 1, j, (batch.ln() - a) / (b - a))
            }
        }
    }

    /// Predicted (running best) metric after `samples` at global batch `batch`.
    pub fn metric(&self, samples: f64, batch: f64) -> f64 {
        let (i, j, w) = self.bracket(batch);
        (1.0 - w) * self.curves[i].at(samples) + w * self.curves[j].at(samples)
    }

    /// Predicted metric after `epochs` epochs at `batch`.
    pub fn metric_after_epochs(&self, epochs: f64, batch: f64) -> f64 {
        self.metric(epochs * self.epoch_samples, batch)
    }

    /// Samples needed to reach `target` at `batch` (interpolated in ln samples
    /// between the neighbouring measured batches); `None` if either never reaches it.
    pub fn samples_to(&self, target: f64, batch: f64) -> Option<f64> {
        let (i, j, w) = self.bracket(batch);
        let a = self.curves[i].samples_to(target, self.higher_is_better)?;
        let b = self.curves[j].samples_to(target, self.higher_is_better)?;
        Some(((1.0 - w) * a.ln() + w * b.ln()).exp())
    }

    /// Epochs every measured curve covers (so no prediction is extrapolated).
    pub fn max_common_epochs(&self) -> f64 {
        self.curves
            .iter()
            .map(|c| c.end_samples())
            .fold(f64::INFINITY, f64::min)
            / self.epoch_samples
    }

    /// The metric every measured batch reaches: the worst of the curves' last points
    /// (a curve without points is passed over).
    pub fn common_target(&self) -> f64 {
        self.curves
            .iter()
            .map(|c| c.points.last().map_or(f64::NAN, |p| p.1))
            .fold(
                if self.higher_is_better {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                },
                |a, b| {
                    if self.higher_is_better {
                        a.min(b)
                    } else {
                        a.max(b)
                    }
                },
            )
    }

    /// `better(a, b)`: is metric `a` better than `b`.
    pub fn better(&self, a: f64, b: f64) -> bool {
        if self.higher_is_better {
            a > b
        } else {
            a < b
        }
    }

    /// Gradient statistics for [`GoodputFn`](crate::goodput::GoodputFn).
    pub fn grad_params(&self) -> GradParams {
        self.grad
    }

    /// Leave-one-curve-out: for each inner measured batch, predict its metric after
    /// `epochs` from the other curves; returns `(batch, measured, predicted)`.
    pub fn leave_one_out(&self, epochs: f64) -> Vec<(f64, f64, f64)> {
        let mut out = Vec::new();
        for k in 1..self.curves.len().saturating_sub(1) {
            let mut m = self.clone();
            let held = m.curves.remove(k);
            let s = epochs * self.epoch_samples;
            out.push((
                held.global_batch,
                held.at(s),
                m.metric(s, held.global_batch),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_model::ValidationRow;

    /// Accuracy `1 − exp(−samples / (1000·batch^0.3))`, validated every epoch of 1000.
    fn curve(batch: u32) -> ValidationCurve {
        let rows = (1..=20)
            .map(|e| {
                let samples = e as f64 * 1000.0;
                let it = samples / batch as f64;
                ValidationRow {
                    progress: e as f64 * 1000.0 / 10.0,
                    iteration: it,
                    metric: 1.0 - (-samples / (1000.0 * (batch as f64).powf(0.3))).exp(),
                    grad_sqr: 1.0,
                    grad_var: 2.0,
                }
            })
            .collect();
        ValidationCurve {
            global_batch: batch,
            rows,
        }
    }

    #[test]
    fn interpolates_between_batches_and_detects_direction() {
        let m = ConvergenceModel::fit(&[curve(40), curve(10), curve(20)]).unwrap();
        assert!(m.higher_is_better);
        assert_eq!(m.curves[0].global_batch, 10.0);
        assert!((m.epoch_samples - 1000.0).abs() < 1e-9);
        // Measured batch: exact at a validation point.
        let exact = 1.0 - (-5.0f64 / 20f64.powf(0.3)).exp();
        assert!((m.metric_after_epochs(5.0, 20.0) - exact).abs() < 1e-9);
        // Between batches: between the neighbours.
        let mid = m.metric_after_epochs(5.0, 28.0);
        assert!(mid < m.metric_after_epochs(5.0, 20.0) && mid > m.metric_after_epochs(5.0, 40.0));
        let loo = m.leave_one_out(5.0);
        assert_eq!(loo.len(), 1);
        assert!((loo[0].1 - loo[0].2).abs() < 0.02, "{loo:?}");
        let s = m.samples_to(0.9, 10.0).unwrap();
        assert!(s > 2000.0 && s < 6000.0, "{s}");
        assert!(m.samples_to(2.0, 10.0).is_none());
    }

    #[test]
    fn common_target_is_the_worst_last_point() {
        let m = ConvergenceModel::fit(&[curve(32), curve(128)]).unwrap();
        let lasts: Vec<f64> = m
            .curves
            .iter()
            .map(|c| c.points.last().unwrap().1)
            .collect();
        let worst = if m.higher_is_better {
            lasts.iter().copied().fold(f64::INFINITY, f64::min)
        } else {
            lasts.iter().copied().fold(f64::NEG_INFINITY, f64::max)
        };
        assert_eq!(m.common_target(), worst);
        let mut empty = m.clone();
        empty.curves[1].points.clear();
        assert_eq!(empty.common_target(), lasts[0]);
    }

    #[test]
    fn running_best_never_gets_worse_and_loss_is_lower_better() {
        let mut c = curve(10);
        for r in c.rows.iter_mut() {
            r.metric = 10.0 - r.metric; // a loss
        }
        c.rows[5].metric = 100.0; // a spike
        let m = ConvergenceModel::fit(&[c]).unwrap();
        assert!(!m.higher_is_better);
        let p = &m.curves[0].points;
        assert!(p.windows(2).all(|w| w[1].1 <= w[0].1));
        assert!(ConvergenceModel::fit(&[]).is_err());
    }
}
