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
use pacer_control::job::mixed::{balanced_step, MixedJob, TypeGroup};
use pacer_model::{Allocation, DeviceTypeId};
pub use pacer_policy::job_view::{MixModel, ViewMix};
use pacer_predict::goodput::{GoodputFn, GradParams};
use std::cell::RefCell;
use std::collections::HashMap;

/// The worker-level controller that balances a mixed job (the runtime's default).
pub const CONTROLLER: &str = "lbbsp";
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

/// A mixed job's step time as the simulator advances it: [`step_s`], the worker
/// level's controller run until it settles (cached), on a [`MixModel`] (the model
/// and [`ViewMix`], the goodput a policy sees, live with the one `JobView` builder,
/// `pacer_policy::job_view`).
pub trait BalancedStep {
    /// Seconds per step at global batch `batch`.
    fn step_s(&self, batch: u64) -> Option<f64>;
}

impl BalancedStep for MixModel {
    fn step_s(&self, batch: u64) -> Option<f64> {
        step_s(&self.groups, self.nodes, batch, self.min_local)
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
}
