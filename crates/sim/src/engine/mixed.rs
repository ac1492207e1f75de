//! Jobs on allocations across device types (`SimConfig::mixed_types`, issue 26;
//! docs/mixed-types.md, "In the simulator").
//!
//! A profiled job of a per-type application whose allocation spans several device
//! types progresses at the balanced step of `pacer_control::job::mixed`: each type's
//! step-time model (the one fitted to that type's measured table, [`TypedTables::perf`])
//! at the local batch the worker level's own controller (`lbbsp`) gives its replicas,
//! one all-reduce over the slowest link, and the statistical efficiency of the whole
//! global batch. The global batch is the job's choice: the one it asked for under a
//! fixed-batch policy, else the best of a geometric grid for goodput under the models
//! it knows (the same ones the policy sees), as one-type jobs choose theirs.
//!
//! `balanced_step` runs the controller until the batches settle (hundreds of
//! iterations): its step time is kept per (type models, replicas, memory caps, nodes,
//! global batch) in a per-thread cache, so jobs of one application on the same mix
//! and batch share one computation. Choices among many candidates — the job's global
//! batch, the policy's configurations ([`ViewMix`]) — use the same controller's fixed
//! point in closed form (`equal_finish_step_s`, within 1.5 % of `balanced_step` in its
//! tests); the progress a job makes uses `balanced_step` itself.
//!
//! [`TypedTables::perf`]: crate::apps::TypedTables::perf

use super::progress::spend_in_epoch;
use super::{BatchMode, JobState, Simulation};
use crate::apps::AppModel;
use pacer_control::job::mixed::{balanced_step, equal_finish_step_s, MixedJob, TypeGroup};
use pacer_model::{Allocation, DeviceTypeId};
use pacer_policy::MixedGoodput;
use pacer_predict::goodput::{GoodputFn, GradParams};
use std::cell::RefCell;
use std::collections::HashMap;

/// The worker-level controller that balances a mixed job (the runtime's default).
pub const CONTROLLER: &str = "lbbsp";
/// Global batches tried between the smallest and the largest a mixed job may use.
pub const BATCH_GRID: usize = 16;
/// Step times cached per thread before the cache is cleared.
const MAX_CACHED: usize = 200_000;

thread_local! {
    static STEPS: RefCell<HashMap<Vec<u64>, Option<f64>>> = RefCell::new(HashMap::new());
}

/// Seconds per step of `groups` on `nodes` nodes at global batch `batch`, balanced by
/// [`CONTROLLER`] ([`balanced_step`]); `None` when the replicas cannot hold the batch.
pub fn step_s(groups: &[TypeGroup], nodes: u32, batch: u64, min_local: u64) -> Option<f64> {
    let mut key = Vec::with_capacity(3 + 9 * groups.len());
    key.extend([u64::from(nodes), batch, min_local]);
    for g in groups {
        let p = &g.perf;
        key.extend(
            [
                p.alpha_c, p.beta_c, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r, p.gamma,
            ]
            .map(f64::to_bits),
        );
        key.extend([u64::from(g.replicas), g.max_atomic]);
    }
    if let Some(s) = STEPS.with(|c| c.borrow().get(&key).copied()) {
        return s;
    }
    let job = MixedJob {
        groups: groups.to_vec(),
        nodes,
        global_batch: batch,
        min_local,
    };
    let s = balanced_step(&job, CONTROLLER)
        .ok()
        .map(|s| s.step_s)
        .filter(|s| s.is_finite() && *s > 0.0);
    STEPS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MAX_CACHED {
            c.clear();
        }
        c.insert(key, s);
    });
    s
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
    /// The global batches a job may use here: [`BATCH_GRID`] geometric steps from
    /// the base batch (at least the smallest local batch on every replica) to the
    /// largest batch.
    pub fn batches(&self) -> Vec<u64> {
        let replicas: u32 = self.groups.iter().map(|g| g.replicas).sum();
        let lo = self
            .base_batch
            .max((self.min_local * u64::from(replicas)) as f64)
            .ceil();
        let hi = self.max_batch.floor();
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

    fn job(&self, batch: u64) -> MixedJob {
        MixedJob {
            groups: self.groups.clone(),
            nodes: self.nodes,
            global_batch: batch,
            min_local: self.min_local,
        }
    }

    /// Seconds per step at global batch `batch`: the worker level's controller run
    /// until it settles ([`step_s`], cached).
    pub fn step_s(&self, batch: u64) -> Option<f64> {
        step_s(&self.groups, self.nodes, batch, self.min_local)
    }

    /// [`Self::step_s`] at the controller's fixed point in closed form
    /// ([`equal_finish_step_s`]; within 1.5 % of it in its tests): what choices among
    /// many configurations or batches use.
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

/// What a policy sees of a mixed job's goodput ([`pacer_policy::JobView::mixed`]):
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

/// Replicas per device type of `alloc`, types ascending.
pub fn groups_of(sim: &Simulation<'_>, alloc: &Allocation) -> Vec<(DeviceTypeId, u32)> {
    let mut out: Vec<(DeviceTypeId, u32)> = Vec::new();
    for &(node, c) in alloc.slots() {
        let ty = sim.cluster.nodes[node.0 as usize].device_type;
        match out.iter_mut().find(|g| g.0 == ty) {
            Some(g) => g.1 += c,
            None => out.push((ty, c)),
        }
    }
    out.sort_by_key(|g| g.0 .0);
    out
}

impl Simulation<'_> {
    /// The ground truth of a mixed allocation of a per-type application: each type's
    /// fitted model and measured largest local batch. `None` when the mix is off,
    /// the allocation holds one type, or a type has no fitted model.
    pub(super) fn mixed_truth(&self, app: &AppModel, alloc: &Allocation) -> Option<MixModel> {
        if !self.config.mixed_types || app.typed().is_empty() {
            return None;
        }
        let groups = groups_of(self, alloc);
        if groups.len() < 2 {
            return None;
        }
        let by_type: Vec<Option<GoodputFn>> = groups
            .iter()
            .map(|&(ty, _)| {
                let name = &self.cluster.device_types[ty.0 as usize];
                let t = &app.typed()[app.type_index(name)?];
                let (min_atomic, max_atomic) = app.local_bsz_range_on(Some(name));
                Some(GoodputFn {
                    perf: t.perf?,
                    grad: GradParams { sqr: 1.0, var: 0.0 },
                    limits: pacer_predict::goodput::BatchLimits {
                        base_batch: app.init_batch,
                        max_batch: app.max_batch,
                        min_atomic,
                        max_atomic,
                        accumulation: true,
                    },
                })
            })
            .collect();
        let local: Vec<(DeviceTypeId, u32)> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| (DeviceTypeId(i as u16), g.1))
            .collect();
        MixModel::from_view(&by_type, &local, alloc.slots().len() as u32).map(|m| m.0)
    }

    /// Chooses the global batch of a job that just got a mixed allocation (or whose
    /// model changed): its fixed batch, else the best for goodput under the models
    /// its view carries (the fitted tables' or, with online profiles, its own);
    /// feasible on the ground truth. Sets `st.mixed_batch` (0: not mixed).
    pub(super) fn update_mixed_batch(
        &self,
        app: &AppModel,
        mode: BatchMode,
        st: &mut JobState,
    ) -> bool {
        let Some(truth) = self.mixed_truth(app, &st.alloc) else {
            st.mixed_batch = 0;
            return false;
        };
        let feasible = |b: u64| b > 0 && truth.step_s(b).is_some();
        let chosen = match mode.fixed {
            Some(b) => Some(u64::from(b)),
            None => {
                let groups = groups_of(self, &st.alloc);
                let by_type = self.goodput_by_type(app, st);
                MixModel::from_view(&by_type, &groups, st.alloc.slots().len() as u32)
                    .and_then(|(m, grad)| m.best_batch(&st.grad.unwrap_or(grad)))
                    .map(|b| b.0)
            }
        };
        let batch = chosen
            .filter(|&b| feasible(b))
            .or_else(|| truth.batches().into_iter().find(|&b| feasible(b)));
        st.batch_version = st.goodput_version;
        match batch {
            Some(b) => {
                st.mixed_batch = b;
                let r = st.alloc.replicas().max(1);
                st.atomic_bsz = (b / u64::from(r)).max(1) as u32;
                st.accum_steps = 0;
                true
            }
            None => {
                st.mixed_batch = 0;
                false
            }
        }
    }

    /// Advances a job on a mixed allocation by `dt` seconds from `t` (after its
    /// restart delay): the same epoch arithmetic as a one-type job's round, at the
    /// balanced step of its global batch.
    pub(super) fn step_mixed(
        &self,
        app: &AppModel,
        mode: BatchMode,
        st: &mut JobState,
        mut t: f64,
        mut dt: f64,
    ) {
        let Some(truth) = self.mixed_truth(app, &st.alloc) else {
            return;
        };
        let replicas = st.replicas;
        while dt > 0.0 && st.completion_s.is_none() {
            let batch = st.mixed_batch;
            let Some(step) = truth.step_s(batch) else {
                return;
            };
            let b = batch as f64;
            if mode.fixed.is_none() {
                let (sqr, var) = app.grad_stats(b, st.epoch);
                let grad = GradParams { sqr, var };
                if st.grad != Some(grad) {
                    st.grad = Some(grad);
                    st.goodput_version += 1;
                }
            }
            let goodput = app.gain(b, st.epoch) / step;
            let spent = spend_in_epoch(app, st, replicas, goodput, &mut t, &mut dt);
            st.mixed_gpu_s += spent * replicas as f64;
            if mode.fixed.is_none() && st.goodput_version != st.batch_version {
                self.update_mixed_batch(app, mode, st);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_predict::goodput::PerfParams;

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

    #[test]
    fn the_cached_step_is_balanced_step_s_own() {
        let groups = vec![
            TypeGroup {
                perf: perf(0.001),
                replicas: 4,
                max_atomic: 128,
            },
            TypeGroup {
                perf: perf(0.003),
                replicas: 2,
                max_atomic: 64,
            },
        ];
        for batch in [64u64, 300, 1000] {
            let direct = balanced_step(
                &MixedJob {
                    groups: groups.clone(),
                    nodes: 2,
                    global_batch: batch,
                    min_local: 1,
                },
                CONTROLLER,
            )
            .unwrap()
            .step_s;
            // Twice: computed, then from the cache.
            assert_eq!(step_s(&groups, 2, batch, 1), Some(direct));
            assert_eq!(step_s(&groups, 2, batch, 1), Some(direct));
        }
        // The slow type's replicas get smaller batches: faster than equal shares.
        let uniform = balanced_step(
            &MixedJob {
                groups: groups.clone(),
                nodes: 2,
                global_batch: 600,
                min_local: 1,
            },
            "uniform",
        )
        .unwrap()
        .step_s;
        assert!(step_s(&groups, 2, 600, 1).unwrap() < uniform);
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
                limits: pacer_predict::goodput::BatchLimits {
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
