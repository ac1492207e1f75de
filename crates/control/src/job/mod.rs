//! Job level: which global batch, how many replicas on which placement, and which
//! machine type (docs/algorithms.md §2c, §2d).
//!
//! - [`courier`]: the batch (and placement) with the best predicted final metric
//!   whose predicted time to train N epochs meets an SLO, with the runner-up.
//! - [`search`]: time-optimal, cost-optimal and Pareto configurations over
//!   placement × batch × machine type to reach a target metric, offline (every
//!   configuration predicted) and online (profile a few chosen by experiment design).
//! - [`decide`]: the job-level decisions every driver makes — global batch and gain,
//!   the exploration cap, the online step-time fit — in one place.
//!
//! Both score [`Candidate`]s with a fitted step-time model
//! ([`StepModel`](pacer_predict::itertime::StepModel)) and a
//! [`ConvergenceModel`](pacer_predict::convergence::ConvergenceModel), and both
//! come with an *oracle* that scores the same candidates from the measured tables
//! ([`MeasuredTable`]) so every recommendation can be checked.

pub mod courier;
pub mod decide;
pub mod goal;
pub mod mixed;
pub mod search;

use pacer_predict::itertime::{StepConfig, StepRow};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A machine type: price per GPU-hour and speed relative to the measured one
/// (the Pollux traces measure one GPU type; others are emulated by scaling time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineType {
    pub name: String,
    pub usd_per_gpu_hour: f64,
    /// Step time on this type = measured step time / `speed`.
    pub speed: f64,
}

/// One configuration to score: a measured placement, a global batch, a machine type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub config: StepConfig,
    pub global_batch: f64,
    /// Index into the machine types.
    pub machine: usize,
}

impl Candidate {
    pub fn replicas(&self) -> u32 {
        self.config.replicas
    }
}

/// `(local_bsz, step_s, sync_s)` of one measured row.
type Measured = (f64, f64, f64);

/// Measured step (and sync) times by placement group, interpolated linearly along
/// the local batch as the Pollux simulator does; `None` outside the measured range.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MeasuredTable {
    /// Per group: the placement and its `(local_bsz, step_s, sync_s)`, sorted by batch.
    groups: BTreeMap<u64, (StepConfig, Vec<Measured>)>,
}

impl MeasuredTable {
    pub fn new(rows: &[StepRow]) -> Self {
        let mut groups: BTreeMap<u64, (StepConfig, Vec<Measured>)> = BTreeMap::new();
        for r in rows {
            groups
                .entry(r.config.group)
                .or_insert_with(|| (r.config, Vec::new()))
                .1
                .push((r.config.local_bsz, r.step_time_s, r.sync_time_s));
        }
        for (_, v) in groups.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        MeasuredTable { groups }
    }

    /// Measured `(step, sync)` time of `config` (by its group) at its local batch.
    pub fn step_and_sync(&self, config: &StepConfig) -> Option<(f64, f64)> {
        let (_, v) = self.groups.get(&config.group)?;
        let b = config.local_bsz;
        let j = v.iter().position(|p| p.0 >= b - 1e-9)?;
        if (v[j].0 - b).abs() < 1e-9 {
            return Some((v[j].1, v[j].2));
        }
        if j == 0 {
            return None;
        }
        let (a, c) = (v[j - 1], v[j]);
        let w = (b - a.0) / (c.0 - a.0);
        Some((a.1 + (c.1 - a.1) * w, a.2 + (c.2 - a.2) * w))
    }

    /// Measured step time of `config` (by its group) at its local batch.
    pub fn step_time(&self, config: &StepConfig) -> Option<f64> {
        self.step_and_sync(config).map(|(t, _)| t)
    }

    /// Every measured placement with its local-batch range.
    pub fn placements(&self) -> impl Iterator<Item = (StepConfig, f64, f64)> + '_ {
        self.groups
            .values()
            .map(|(c, v)| (*c, v[0].0, v[v.len() - 1].0))
    }
}

/// Candidates: every measured placement (at most `max_replicas`) × every global
/// batch in `batches` whose local share lies in that placement's measured range ×
/// every machine type.
pub fn candidates(
    table: &MeasuredTable,
    batches: &[f64],
    machines: usize,
    max_replicas: u32,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (c, lo, hi) in table.placements() {
        if c.replicas > max_replicas {
            continue;
        }
        for &m in batches {
            let local = m / c.replicas as f64;
            if local < lo - 1e-9 || local > hi + 1e-9 {
                continue;
            }
            for machine in 0..machines.max(1) {
                out.push(Candidate {
                    config: StepConfig {
                        local_bsz: local,
                        ..c
                    },
                    global_batch: m,
                    machine,
                });
            }
        }
    }
    out
}

/// The measured batches and, when `midpoints`, the geometric mean of each
/// neighbouring pair (batches the convergence model must interpolate).
pub fn batch_grid(measured: &[f64], midpoints: bool) -> Vec<f64> {
    let mut out = Vec::new();
    for (i, &b) in measured.iter().enumerate() {
        out.push(b);
        if midpoints && i + 1 < measured.len() {
            out.push((b * measured[i + 1]).sqrt().round());
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod testdata {
    //! A small synthetic application: step time from a known model, accuracy
    //! curves that favour small batches.
    use pacer_model::{ValidationCurve, ValidationRow};
    use pacer_predict::itertime::{scalability_group, StepConfig, StepRow};

    pub fn step(c: &StepConfig) -> f64 {
        let compute = 0.01 + 0.001 * c.local_bsz;
        let net = if c.replicas > 1 {
            0.02 + 0.002 * c.replicas as f64 + if c.nodes > 1 { 0.03 } else { 0.0 }
        } else {
            0.0
        };
        compute + net
    }

    pub fn rows() -> Vec<StepRow> {
        let mut rows = Vec::new();
        for (n, r) in [(1, 1), (1, 2), (1, 4), (2, 8), (4, 16)] {
            for b in [8.0, 16.0, 32.0, 64.0, 128.0, 256.0] {
                let config = StepConfig::even(n, r, b);
                let config = StepConfig {
                    group: scalability_group(n, r),
                    ..config
                };
                let t = step(&config);
                rows.push(StepRow {
                    config,
                    step_time_s: t,
                    sync_time_s: t - (0.01 + 0.001 * b),
                    source: format!("t:{}", rows.len() + 2),
                });
            }
        }
        rows
    }

    /// Accuracy after `e` epochs (1000 samples) at batch `m`: saturates at
    /// `0.95 − 0.01·log2(m/32)`.
    pub fn curves() -> Vec<ValidationCurve> {
        [32u32, 64, 128, 256, 512]
            .iter()
            .map(|&m| {
                let top = 0.95 - 0.01 * (m as f64 / 32.0).log2();
                ValidationCurve {
                    global_batch: m,
                    rows: (1..=30)
                        .map(|e| ValidationRow {
                            progress: e as f64 * 1000.0 / 32.0,
                            iteration: e as f64 * 1000.0 / m as f64,
                            metric: top * (1.0 - (-(e as f64) / 5.0).exp()),
                            grad_sqr: 1.0,
                            grad_var: 4.0,
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_interpolates_inside_and_refuses_outside() {
        let t = MeasuredTable::new(&testdata::rows());
        let (c, lo, hi) = t.placements().next().unwrap();
        assert_eq!((lo, hi), (8.0, 256.0));
        let at = |b| t.step_time(&StepConfig { local_bsz: b, ..c });
        assert!(
            (at(24.0).unwrap()
                - testdata::step(&StepConfig {
                    local_bsz: 24.0,
                    ..c
                }))
            .abs()
                < 1e-9
        );
        assert!(at(4.0).is_none() && at(512.0).is_none());
        let cands = candidates(&t, &[32.0, 512.0], 2, 8);
        assert!(cands.iter().all(|c| c.config.replicas <= 8));
        assert!(cands
            .iter()
            .any(|c| c.global_batch == 512.0 && c.config.replicas == 2));
        assert!(!cands
            .iter()
            .any(|c| c.global_batch == 512.0 && c.config.replicas == 1));
        assert_eq!(batch_grid(&[32.0, 128.0], true), vec![32.0, 64.0, 128.0]);
    }
}
