//! The one builder of [`JobView`] (issue 26): every driver — the simulator
//! (`crates/sim/src/engine/view.rs`) and the service (`crates/serve/src/job.rs`) —
//! translates what it knows of a job into [`JobFacts`] and calls [`JobFacts::view`];
//! none writes a `JobView` itself (rule `job-view` of pacer-tidy). The rules a view
//! follows whoever builds it live here: the replica bound with Pollux's exploration
//! cap ([`ReplicaBound`], `pacer_control::job::decide::exploration_cap`) and the
//! goodput across device types of a job that accepts a mix ([`ViewMix`], the
//! balanced step of `pacer_control::job::mixed`).

use crate::{JobView, MixedGoodput, QualityView, SpeedTable};
use pacer_control::job::decide::exploration_cap;
use pacer_control::job::mixed::{equal_finish_step_s, MixedJob, TypeGroup};
use pacer_model::{Allocation, DeviceTypeId, JobId};
use pacer_predict::goodput::{GoodputFn, GradParams};
use std::sync::Arc;

/// Global batches tried between the smallest and the largest a mixed job may use.
pub const BATCH_GRID: usize = 16;

/// The most replicas a job may be given now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaBound {
    /// What the job may use at all (its spec, its batch range, the devices of its
    /// types).
    pub limit: u32,
    /// An adaptive job still exploring its scaling: at most
    /// [`exploration_cap`] of the most replicas it has been measured at, but never
    /// fewer than `floor`; `None`: `limit` alone.
    pub explore: Option<Explore>,
}

/// Pollux's exploration limit of one job ([`ReplicaBound::explore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Explore {
    /// Most replicas the job has been measured at (0: none).
    pub measured_replicas: u32,
    /// Fewest replicas the bound may fall to (the job's own minimum).
    pub floor: u32,
}

impl ReplicaBound {
    /// The bound itself: `limit`, capped by the exploration limit when there is one.
    pub fn max_replicas(&self) -> u32 {
        match self.explore {
            Some(e) => self
                .limit
                .min(exploration_cap(e.measured_replicas).max(e.floor)),
            None => self.limit,
        }
    }
}

/// What a driver knows of one job, in the policy's units: the input of the one
/// [`JobView`] builder ([`JobFacts::view`]). The fields are [`JobView`]'s where the
/// view takes them as they are; [`JobFacts::replicas`] and [`JobFacts::mixed_types`]
/// are the facts the view's derived fields come from.
#[derive(Debug, Clone)]
pub struct JobFacts {
    pub id: JobId,
    /// Arrival time (s) on the policy's clock (ties broken by the driver, e.g. by
    /// priority).
    pub arrival_s: f64,
    pub attained_gpu_s: f64,
    /// Devices the user asked for (at least 1 in the view).
    pub requested_replicas: u32,
    /// [`JobView::requested_batch`].
    pub requested_batch: Option<f64>,
    /// The bound of [`JobView::max_replicas`].
    pub replicas: ReplicaBound,
    pub num_restarts: u32,
    pub restart_s: Option<f64>,
    pub restart_s_per_doubling: f64,
    pub current: Allocation,
    pub goodput: Option<GoodputFn>,
    /// Indexed like the cluster's device types; empty: no per-type models.
    pub goodput_by_type: Vec<Option<GoodputFn>>,
    /// [`JobView::measured_by_type`]; empty: every model is the job's own.
    pub measured_by_type: Vec<bool>,
    pub goodput_version: u64,
    /// The job accepts an allocation across device types whose replicas the worker
    /// level balances (the simulator's `--mixed-types`, a service spec's
    /// `mixed_types = true`): its view gets [`JobView::mixed`] once it has goodput
    /// models for more than one type.
    pub mixed_types: bool,
    pub speed: Option<Arc<SpeedTable>>,
    pub iterations_per_work: Option<f64>,
    pub work_done: f64,
    pub work_left: f64,
    pub quality: Option<QualityView>,
    pub one_type: bool,
    pub deadline_s: Option<f64>,
}

impl JobFacts {
    /// The job's view: the one place a [`JobView`] is assembled from a driver's facts.
    pub fn view(self) -> JobView {
        let mut out = JobView::basic(self.id, self.arrival_s, self.requested_replicas);
        self.view_into(&mut out);
        out
    }

    /// [`JobFacts::view`] written over `out`, a view of any job: every field is
    /// assigned (the pattern below names them all, so a new field must be added
    /// here), and `out`'s allocation and buffers are reused. A driver that shows a
    /// policy the same jobs round after round refreshes their views so instead of
    /// building and dropping them.
    #[inline(always)]
    pub fn view_into(self, out: &mut JobView) {
        let JobView {
            id,
            arrival_s,
            attained_gpu_s,
            requested_replicas,
            requested_batch,
            max_replicas,
            num_restarts,
            restart_s,
            restart_s_per_doubling,
            current,
            goodput,
            goodput_by_type,
            measured_by_type,
            goodput_version,
            speed,
            iterations_per_work,
            work_done,
            work_left,
            quality,
            one_type,
            deadline_s,
            mixed,
        } = out;
        // Across device types: the balanced goodput under the models the job has.
        *mixed =
            (self.mixed_types && self.goodput_by_type.iter().flatten().count() > 1).then(|| {
                Arc::new(ViewMix {
                    by_type: self.goodput_by_type.clone(),
                }) as Arc<dyn MixedGoodput>
            });
        *id = self.id;
        *arrival_s = self.arrival_s;
        *attained_gpu_s = self.attained_gpu_s;
        *requested_replicas = self.requested_replicas.max(1);
        *requested_batch = self.requested_batch;
        *max_replicas = self.replicas.max_replicas();
        *num_restarts = self.num_restarts;
        *restart_s = self.restart_s;
        *restart_s_per_doubling = self.restart_s_per_doubling;
        *current = self.current;
        *goodput = self.goodput;
        *goodput_by_type = self.goodput_by_type;
        *measured_by_type = self.measured_by_type;
        *goodput_version = self.goodput_version;
        *speed = self.speed;
        *iterations_per_work = self.iterations_per_work;
        *work_done = self.work_done;
        *work_left = self.work_left;
        *quality = self.quality;
        *one_type = self.one_type;
        *deadline_s = self.deadline_s;
    }
}

/// The global batches a mixed job of `replicas` may use: [`BATCH_GRID`] geometric
/// steps from the base batch (at least the smallest local batch on every replica) to
/// the largest batch.
pub fn batch_grid(replicas: u32, min_local: u64, base_batch: f64, max_batch: f64) -> Vec<u64> {
    let lo = base_batch
        .max((min_local * u64::from(replicas)) as f64)
        .ceil();
    let hi = max_batch.floor();
    if !(lo.is_finite() && hi.is_finite()) || lo > hi || lo < 1.0 {
        return Vec::new();
    }
    let q = (hi / lo).powf(1.0 / (BATCH_GRID - 1) as f64);
    let mut out: Vec<u64> = (0..BATCH_GRID)
        .map(|i| {
            if i + 1 == BATCH_GRID {
                hi as u64
            } else {
                (lo * q.powi(i as i32)).round() as u64
            }
        })
        .collect();
    out.dedup();
    out
}

/// A mixed job's models: per group its type's step-time model and memory cap, and
/// the batch limits common to the groups.
#[derive(Debug, Clone)]
pub struct MixModel {
    pub groups: Vec<TypeGroup>,
    pub nodes: u32,
    /// Smallest local batch of a replica (the largest of the types' smallest).
    pub min_local: u64,
    pub base_batch: f64,
    pub max_batch: f64,
}

impl MixModel {
    /// The global batches a job may use here ([`batch_grid`]).
    pub fn batches(&self) -> Vec<u64> {
        let replicas: u32 = self.groups.iter().map(|g| g.replicas).sum();
        batch_grid(replicas, self.min_local, self.base_batch, self.max_batch)
    }

    fn job(&self, batch: u64) -> MixedJob {
        MixedJob {
            groups: self.groups.clone(),
            nodes: self.nodes,
            global_batch: batch,
            min_local: self.min_local,
        }
    }

    /// Seconds per step at global batch `batch` at the worker level's controller's
    /// fixed point in closed form ([`equal_finish_step_s`]; within 1.5 % of running
    /// the controller until it settles, `balanced_step`, in its tests): what choices
    /// among many configurations or batches use.
    pub fn predicted_step_s(&self, batch: u64) -> Option<f64> {
        equal_finish_step_s(&self.job(batch))
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0)
    }

    /// The global batch of the best predicted goodput under `grad` and that goodput
    /// (base samples per second); the first of the grid on ties.
    pub fn best_batch(&self, grad: &GradParams) -> Option<(u64, f64)> {
        let mut best: Option<(u64, f64)> = None;
        for b in self.batches() {
            let Some(s) = self.predicted_step_s(b) else {
                continue;
            };
            let g = b as f64 / s * grad.efficiency(b as f64, self.base_batch);
            if best.is_none_or(|x| g > x.1) {
                best = Some((b, g));
            }
        }
        best
    }

    /// From per-type goodput models (a job's view, indexed by cluster type).
    pub fn from_view(
        by_type: &[Option<GoodputFn>],
        groups: &[(DeviceTypeId, u32)],
        nodes: u32,
    ) -> Option<(MixModel, GradParams)> {
        let mut out = Vec::with_capacity(groups.len());
        let (mut min_local, mut base, mut max_batch, mut grad) =
            (1u64, 0.0f64, f64::INFINITY, None);
        for &(ty, n) in groups {
            let m = by_type.get(ty.0 as usize)?.as_ref()?;
            out.push(TypeGroup {
                perf: m.perf,
                replicas: n,
                max_atomic: m.limits.max_atomic.floor().max(1.0) as u64,
            });
            min_local = min_local.max(m.limits.min_atomic.ceil().max(1.0) as u64);
            base = base.max(m.limits.base_batch);
            max_batch = max_batch.min(m.limits.max_batch);
            grad.get_or_insert(m.grad);
        }
        Some((
            MixModel {
                groups: out,
                nodes,
                min_local,
                base_batch: base,
                max_batch,
            },
            grad?,
        ))
    }
}

/// What a policy sees of a mixed job's goodput ([`JobView::mixed`]):
/// the balanced step under the per-type models the job's view carries.
#[derive(Debug)]
pub struct ViewMix {
    pub by_type: Vec<Option<GoodputFn>>,
}

impl MixedGoodput for ViewMix {
    fn goodput(&self, groups: &[(DeviceTypeId, u32)], nodes: u32) -> f64 {
        let replicas: u32 = groups.iter().map(|g| g.1).sum();
        if replicas == 0 || nodes == 0 || nodes > replicas {
            return 0.0;
        }
        MixModel::from_view(&self.by_type, groups, nodes)
            .and_then(|(m, grad)| m.best_batch(&grad))
            .map_or(0.0, |b| b.1.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_predict::goodput::{BatchLimits, PerfParams};

    fn perf(beta_c: f64) -> PerfParams {
        PerfParams {
            alpha_c: 0.01,
            beta_c,
            alpha_n: 0.02,
            beta_n: 0.001,
            alpha_r: 0.005,
            beta_r: 0.0005,
            gamma: 1.5,
        }
    }

    fn model(beta_c: f64) -> Option<GoodputFn> {
        Some(GoodputFn {
            perf: perf(beta_c),
            grad: GradParams {
                sqr: 1.0,
                var: 200.0,
            },
            limits: BatchLimits {
                base_batch: 64.0,
                max_batch: 4096.0,
                min_atomic: 8.0,
                max_atomic: 256.0,
                accumulation: true,
            },
        })
    }

    fn facts() -> JobFacts {
        JobFacts {
            id: JobId(3),
            arrival_s: 5.0,
            attained_gpu_s: 0.0,
            requested_replicas: 0,
            requested_batch: None,
            replicas: ReplicaBound {
                limit: 16,
                explore: None,
            },
            num_restarts: 0,
            restart_s: None,
            restart_s_per_doubling: 0.0,
            current: Allocation::empty(),
            goodput: model(0.001),
            goodput_by_type: vec![model(0.001), model(0.004)],
            measured_by_type: Vec::new(),
            goodput_version: 1,
            mixed_types: false,
            speed: None,
            iterations_per_work: None,
            work_done: 0.0,
            work_left: 1.0,
            quality: None,
            one_type: false,
            deadline_s: None,
        }
    }

    /// A view refreshed in place over another job's equals one built afresh: no field
    /// of the old view survives (each differs between the two jobs here).
    #[test]
    fn a_view_written_over_another_equals_a_fresh_one() {
        let mut other = facts();
        other.id = JobId(9);
        other.arrival_s = 7.0;
        other.attained_gpu_s = 11.0;
        other.requested_replicas = 5;
        other.requested_batch = Some(256.0);
        other.replicas.limit = 3;
        other.num_restarts = 2;
        other.restart_s = Some(4.0);
        other.restart_s_per_doubling = 1.5;
        other.current = Allocation::from_pairs([(pacer_model::NodeId(1), 2)]);
        other.goodput = None;
        other.goodput_version = 8;
        other.mixed_types = true;
        other.speed = Some(Arc::new(SpeedTable::uniform(
            1,
            crate::SpeedCurve {
                points: vec![(1, 2.0)],
                spread_factor: 1.0,
            },
        )));
        other.iterations_per_work = Some(3.0);
        other.work_done = 0.25;
        other.work_left = 0.75;
        other.quality = Some(QualityView {
            iteration: 3.0,
            loss: 0.5,
            first_loss: 2.0,
            max_delta_per_iter: 0.1,
            curve: None,
        });
        other.one_type = true;
        other.deadline_s = Some(99.0);
        let mut v = other.clone().view();
        assert!(v.mixed.is_some() && v.speed.is_some());
        facts().view_into(&mut v);
        assert_eq!(format!("{v:?}"), format!("{:?}", facts().view()));
        let mut w = facts().view();
        let mut mixed = other.clone();
        mixed.goodput_by_type = vec![model(0.002), model(0.003)];
        mixed.clone().view_into(&mut w);
        assert_eq!(format!("{w:?}"), format!("{:?}", mixed.view()));
    }

    #[test]
    fn the_bound_explores_at_twice_the_most_measured_within_limit_and_floor() {
        let b = |limit, measured, floor| {
            ReplicaBound {
                limit,
                explore: Some(Explore {
                    measured_replicas: measured,
                    floor,
                }),
            }
            .max_replicas()
        };
        assert_eq!(b(16, 3, 1), 6);
        assert_eq!(b(16, 0, 1), 1);
        assert_eq!(b(16, 1, 4), 4, "never below the floor");
        assert_eq!(b(5, 4, 1), 5, "never above the limit");
        let free = ReplicaBound {
            limit: 7,
            explore: None,
        };
        assert_eq!(free.max_replicas(), 7);
        let mut f = facts();
        f.replicas.explore = Some(Explore {
            measured_replicas: 2,
            floor: 1,
        });
        let v = f.view();
        assert_eq!((v.max_replicas, v.requested_replicas), (4, 1));
    }

    #[test]
    fn a_job_that_accepts_a_mix_gets_one_with_models_of_two_types() {
        assert!(facts().view().mixed.is_none(), "not asked for");
        let mut f = facts();
        f.mixed_types = true;
        let groups = [(DeviceTypeId(0), 4), (DeviceTypeId(1), 4)];
        let mixed = f.clone().view().mixed.expect("two models: a mix");
        let alone = ViewMix {
            by_type: f.goodput_by_type.clone(),
        };
        assert_eq!(mixed.goodput(&groups, 2), alone.goodput(&groups, 2));
        assert!(mixed.goodput(&groups, 2) > 0.0);
        f.goodput_by_type[1] = None;
        assert!(f.view().mixed.is_none(), "one model: nothing to mix");
    }

    #[test]
    fn the_view_s_goodput_is_the_best_batch_of_the_balanced_step() {
        let grad = GradParams {
            sqr: 1.0,
            var: 200.0,
        };
        let m = |beta: f64| {
            Some(GoodputFn {
                perf: perf(beta),
                grad,
                limits: BatchLimits {
                    base_batch: 64.0,
                    max_batch: 4096.0,
                    min_atomic: 8.0,
                    max_atomic: 256.0,
                    accumulation: true,
                },
            })
        };
        let view = ViewMix {
            by_type: vec![m(0.001), m(0.004)],
        };
        let groups = [(DeviceTypeId(0), 4), (DeviceTypeId(1), 4)];
        let g = view.goodput(&groups, 2);
        let (model, _) = MixModel::from_view(&view.by_type, &groups, 2).unwrap();
        let best = model
            .batches()
            .into_iter()
            .filter_map(|b| {
                model
                    .predicted_step_s(b)
                    .map(|s| b as f64 / s * grad.efficiency(b as f64, 64.0))
            })
            .fold(0.0, f64::max);
        assert_eq!(g, best);
        assert!(g > 0.0);
        // More devices of the fast type beat the same count with slow ones.
        let fast = view.goodput(&[(DeviceTypeId(0), 8), (DeviceTypeId(1), 0)], 2);
        assert!(fast > g, "{fast} vs {g}");
        // A type without a model, or nodes beyond the replicas: not usable.
        let none = ViewMix {
            by_type: vec![m(0.001), None],
        };
        assert_eq!(none.goodput(&groups, 2), 0.0);
        assert_eq!(view.goodput(&groups, 9), 0.0);
    }
}
