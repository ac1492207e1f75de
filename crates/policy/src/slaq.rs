//! SLAQ: quality-driven scheduling (Zhang et al., SoCC'17; docs/algorithms.md §3a).
//!
//! Each job reports its loss; the job's driver fits its loss curve
//! ([`pacer_predict::loss_curve`], weighted NLS, decay 0.95) and hands the policy a
//! [`crate::QualityView`]. Every round SLAQ re-plans all workers:
//! 1. every job gets a minimum share (`min_share` workers; when there are fewer
//!    workers than jobs, the jobs with the least attained service get one);
//! 2. the remaining workers go one at a time to the job whose *normalised*
//!    predicted loss reduction over the next `horizon_s` grows most from one more
//!    worker: `gain_j(w) = (L_j − L̂_j(k_j + speed_j(w)·horizon)) / ΔL_j^max`,
//!    with `ΔL^max` the largest per-iteration decrease the job has shown (so jobs
//!    with different loss scales compare), via a max-heap on the marginal gain —
//!    `O(workers · log jobs)`;
//! 3. workers nobody gains from are still handed out (least attained service
//!    first, up to what speeds a job up), so the cluster stays work-conserving.
//!
//! A job that has not reported a decrease yet has no normaliser; it is valued
//! optimistically, as if each iteration of the epoch brought one of its largest
//! decreases (`speed(w)·horizon`), so newcomers are served first — SLAQ's new
//! jobs have the steepest curves — and their share is still bounded by how much
//! more workers speed them up. A job with no quality view at all is explored at
//! the top of the heap up to an equal share.
//! Until its fit exists ([`pacer_predict::loss_curve::MIN_FIT_POINTS`]) a job's
//! prediction continues its largest decrease ([`crate::QualityView::predict`]). Placement keeps a job's devices when its
//! share did not change ([`crate::fair::place_shares`]).

use crate::fair::place_shares;
use crate::{ClusterView, JobView, Policy};
use pacer_model::{Allocation, DeviceTypeId};
use std::collections::BinaryHeap;

#[derive(Debug, Clone)]
pub struct Slaq {
    /// Prediction horizon: the scheduling epoch (s).
    pub horizon_s: f64,
    /// Workers every job gets before the quality-driven part.
    pub min_share: u32,
    /// Normalise a job's predicted decrease by its whole expected reduction
    /// (first loss − fitted asymptote) instead of SLAQ's largest per-iteration
    /// decrease: then gains are fractions of each job's own reduction, the unit of
    /// the normalised-loss metric (a variant, off by default).
    pub normalise_by_range: bool,
}

impl Default for Slaq {
    fn default() -> Self {
        Slaq {
            horizon_s: 60.0,
            min_share: 1,
            normalise_by_range: false,
        }
    }
}

#[derive(PartialEq)]
struct Marginal {
    gain: f64,
    job: usize,
}
impl Eq for Marginal {}
impl PartialOrd for Marginal {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Marginal {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.gain.total_cmp(&o.gain).then(o.job.cmp(&self.job))
    }
}

impl Slaq {
    /// Normalised predicted loss reduction of `job` with `w` workers over the horizon;
    /// `None` when the job cannot be valued yet.
    pub fn gain(&self, job: &JobView, w: u32) -> Option<f64> {
        let q = job.quality.as_ref()?;
        let speed = job.rate(DeviceTypeId(0), w, true);
        if q.max_delta_per_iter <= 0.0 {
            // No decrease seen yet (a new job): optimistically, every iteration of
            // the epoch is worth one of the job's largest decreases.
            return Some(speed * self.horizon_s);
        }
        let k = q.iteration + speed * self.horizon_s;
        let predicted = q.predict(k);
        // Losses do not rise with more training; nor fall below zero for the
        // strawman's straight line.
        let drop = (q.loss - predicted).clamp(0.0, q.loss.max(0.0));
        let norm = match (&q.curve, self.normalise_by_range) {
            (Some(c), true) => {
                let floor = q.loss - (c.value(q.iteration) - c.asymptote());
                (q.first_loss - floor).max(q.max_delta_per_iter)
            }
            _ => q.max_delta_per_iter,
        };
        Some(drop / norm)
    }
}

impl Policy for Slaq {
    fn name(&self) -> &'static str {
        "slaq"
    }

    fn uses_quality(&self) -> bool {
        true
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let jobs = view.jobs;
        let n = jobs.len();
        if n == 0 {
            return Vec::new();
        }
        let cap = view.cluster.total_gpus();
        let limit: Vec<u32> = jobs
            .iter()
            .map(|j| j.max_useful(DeviceTypeId(0)).max(1).min(cap))
            .collect();
        let mut share = vec![0u32; n];
        let mut left = cap;
        // 1. Minimum share, least attained service first when short.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| {
            jobs[a]
                .attained_gpu_s
                .total_cmp(&jobs[b].attained_gpu_s)
                .then(jobs[a].arrival_s.total_cmp(&jobs[b].arrival_s))
                .then(a.cmp(&b))
        });
        for &i in &order {
            let m = self.min_share.min(limit[i]).min(left);
            share[i] = m;
            left -= m;
        }
        // 2. Marginal predicted gain, max-heap.
        let cur: Vec<Option<f64>> = (0..n).map(|i| self.gain(&jobs[i], share[i])).collect();
        let mut value: Vec<f64> = cur.iter().map(|g| g.unwrap_or(0.0)).collect();
        let marginal = |i: usize, w: u32, base: f64| -> Option<f64> {
            self.gain(&jobs[i], w + 1).map(|g| g - base)
        };
        let mut first: Vec<Option<f64>> = (0..n)
            .map(|i| {
                if share[i] >= limit[i] {
                    None
                } else {
                    marginal(i, share[i], value[i])
                }
            })
            .collect();
        let top = first
            .iter()
            .flatten()
            .copied()
            .fold(0.0f64, f64::max)
            .max(1e-9);
        let unknown: Vec<bool> = (0..n).map(|i| cur[i].is_none()).collect();
        let mut heap = BinaryHeap::with_capacity(n);
        for i in 0..n {
            if share[i] >= limit[i] {
                continue;
            }
            let g = if unknown[i] {
                Some(top)
            } else {
                first[i].take()
            };
            if let Some(g) = g.filter(|g| *g > 0.0) {
                heap.push(Marginal { gain: g, job: i });
            }
        }
        while left > 0 {
            let Some(m) = heap.pop() else { break };
            let i = m.job;
            share[i] += 1;
            left -= 1;
            if share[i] >= limit[i] {
                continue;
            }
            let next = if unknown[i] {
                // Unvalued (new) jobs: at the top of the heap up to an equal share.
                (share[i] < (cap / n as u32).max(1)).then_some(top)
            } else {
                let g = self.gain(&jobs[i], share[i]).unwrap_or(value[i]);
                value[i] = g;
                marginal(i, share[i], g)
            };
            if let Some(g) = next.filter(|g| *g > 0.0) {
                heap.push(Marginal { gain: g, job: i });
            }
        }
        // 3. Work conservation.
        while left > 0 {
            let mut gave = false;
            for &i in &order {
                if left == 0 {
                    break;
                }
                if share[i] < limit[i] {
                    share[i] += 1;
                    left -= 1;
                    gave = true;
                }
            }
            if !gave {
                break;
            }
        }
        place_shares(view, &share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{QualityView, SpeedCurve, SpeedTable};
    use pacer_model::{ClusterSpec, JobId};
    use pacer_predict::loss_curve::{CurveForm, LossCurve};
    use std::sync::Arc;

    fn job(id: u32, steep: f64) -> JobView {
        let mut j = JobView::basic(JobId(id), 0.0, 1);
        j.speed = Some(Arc::new(SpeedTable::uniform(
            1,
            SpeedCurve {
                points: vec![(1, 1.0), (8, 6.0)],
                spread_factor: 1.0,
            },
        )));
        j.quality = Some(QualityView {
            iteration: 10.0,
            loss: 1.0,
            first_loss: 2.0,
            max_delta_per_iter: 0.2,
            curve: Some(LossCurve {
                form: CurveForm::Exponential,
                params: [1.0, steep, 0.0, 0.0],
                k_scale: 100.0,
                loss_scale: 1.0,
            }),
        });
        j
    }

    #[test]
    fn steep_job_gets_more_workers_and_everyone_gets_one() {
        let c = ClusterSpec::parse("4x4:cpu", "t").unwrap();
        let jobs = vec![job(0, 0.5), job(1, 0.05), job(2, 0.02)];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = Slaq {
            horizon_s: 30.0,
            min_share: 1,
            normalise_by_range: false,
        }
        .allocate(&view);
        crate::check_capacity(&c, &out).unwrap();
        assert!(out.iter().all(|a| a.replicas() >= 1), "{out:?}");
        assert!(out[0].replicas() > out[1].replicas(), "{out:?}");
        // 3 jobs × at most 8 useful workers each: 16 devices all handed out.
        assert_eq!(out.iter().map(|a| a.replicas()).sum::<u32>(), 16);
    }
}
