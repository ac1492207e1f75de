//! Jobs on allocations across device types (`SimConfig::mixed_types`, issue 26;
//! docs/mixed-types.md, "In the simulator").
//!
//! A profiled job of a per-type application whose allocation spans several device
//! types progresses on its types' **measured tables** ([`TableMix`]), as a job on one
//! type does: per type, the rows its tables hold at the allocation's placement give
//! the compute (`step − sync`) of one replica at any local batch; the worker level's
//! own controller (`lbbsp`) balances the local batches over those compute curves; the
//! step is the slowest replica's compute plus the largest synchronisation of the
//! types involved at that placement, each at its replicas' local batch; and the
//! statistical efficiency is the whole global batch's. On one type this is exactly
//! the one-type step (compute × micro-batches + sync). The global batch is the job's
//! choice: the one it asked for under a fixed-batch policy, else the best of a
//! geometric grid for goodput under the models it knows (the fitted or online models
//! its view carries, what the policy sees too), as one-type jobs choose theirs.
//!
//! Settling the controller takes hundreds of iterations: step times are kept per
//! (types' tables, replicas, memory caps, placement, global batch) in a per-thread
//! cache, so jobs of one application on the same mix and batch share one computation.

use super::progress::spend_in_epoch;
use super::{BatchMode, JobState, Simulation};
use crate::apps::{AppModel, Resolved};
use pacer_control::job::mixed::balance_with;
use pacer_model::{Allocation, DeviceTypeId};
pub use pacer_policy::job_view::{batch_grid, MixModel, ViewMix};
use pacer_predict::goodput::GradParams;
use std::cell::RefCell;
use std::collections::HashMap;

/// The worker-level controller that balances a mixed job (the runtime's default).
pub const CONTROLLER: &str = "lbbsp";
/// Step times cached per thread before the cache is cleared.
const MAX_CACHED: usize = 200_000;

thread_local! {
    static STEPS: RefCell<HashMap<Vec<u64>, Option<f64>>> = RefCell::new(HashMap::new());
}

/// One type's part of a mixed allocation: its tables' rows at the allocation's
/// placement, its replicas and the largest local batch measured on it (memory).
#[derive(Debug, Clone, Copy)]
pub struct TableGroup<'a> {
    rows: Resolved<'a>,
    pub replicas: u32,
    pub max_atomic: u64,
    /// The tables' fingerprint (the cache's key).
    tables: u64,
}

/// The ground truth of a job on a mixed allocation: its types' measured tables.
#[derive(Debug, Clone)]
pub struct TableMix<'a> {
    /// Types ascending.
    pub groups: Vec<TableGroup<'a>>,
    /// Devices per node of the whole allocation: the row shape every type's tables
    /// are read at.
    pub placement: Vec<u32>,
    /// Smallest local batch of a replica (the largest of the types' smallest).
    pub min_local: u64,
    pub base_batch: f64,
    pub max_batch: f64,
}

/// One balanced step on the tables ([`TableMix::step`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TableStep {
    /// Local batch (all micro-batches) of every replica, groups in order.
    pub local: Vec<u64>,
    pub micro_batches: u32,
    /// Compute seconds of every replica's step: micro-batches × the table's
    /// `step − sync` at its micro-batch.
    pub compute_s: Vec<f64>,
    /// The largest of the replicas' table sync at their micro-batch.
    pub sync_s: f64,
    /// The slowest replica's compute plus `sync_s`.
    pub step_s: f64,
}

impl TableMix<'_> {
    /// The global batches the job may use ([`batch_grid`]).
    pub fn batches(&self) -> Vec<u64> {
        let replicas: u32 = self.groups.iter().map(|g| g.replicas).sum();
        batch_grid(replicas, self.min_local, self.base_batch, self.max_batch)
    }

    /// The step at global batch `batch`, computed: local batches by [`CONTROLLER`]
    /// over each type's table compute at the placement (`balance_with`), then the
    /// slowest compute plus the largest sync; `None` when the replicas cannot hold
    /// the batch.
    pub fn step(&self, batch: u64) -> Option<TableStep> {
        let caps: Vec<(u32, u64)> = self
            .groups
            .iter()
            .map(|g| (g.replicas, g.max_atomic))
            .collect();
        let compute = |g: usize, local: u64, micro: u64| {
            let (step, sync) = self.groups[g].rows.at(local as f64 / micro as f64);
            micro as f64 * (step - sync).max(1e-9)
        };
        let b = balance_with(&caps, batch, self.min_local, true, CONTROLLER, compute).ok()?;
        let micro = f64::from(b.micro_batches);
        let sync_s = b
            .local
            .iter()
            .zip(&b.group)
            .map(|(&l, &g)| self.groups[g].rows.at(l as f64 / micro).1)
            .fold(0.0, f64::max);
        let slowest = b.compute_s.iter().copied().fold(0.0, f64::max);
        let step_s = slowest + sync_s;
        (step_s.is_finite() && step_s > 0.0).then_some(TableStep {
            local: b.local,
            micro_batches: b.micro_batches,
            compute_s: b.compute_s,
            sync_s,
            step_s,
        })
    }

    /// Seconds per step at global batch `batch` ([`TableMix::step`], cached).
    pub fn step_s(&self, batch: u64) -> Option<f64> {
        let mut key = Vec::with_capacity(3 + 3 * self.groups.len() + self.placement.len());
        key.extend([batch, self.min_local, self.groups.len() as u64]);
        for g in &self.groups {
            key.extend([g.tables, u64::from(g.replicas), g.max_atomic]);
        }
        key.extend(self.placement.iter().map(|&c| u64::from(c)));
        if let Some(s) = STEPS.with(|c| c.borrow().get(&key).copied()) {
            return s;
        }
        let s = self.step(batch).map(|s| s.step_s);
        STEPS.with(|c| {
            let mut c = c.borrow_mut();
            if c.len() >= MAX_CACHED {
                c.clear();
            }
            c.insert(key, s);
        });
        s
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

/// The ground truth of `alloc` for `app` ([`TableMix`]): `None` unless it spans
/// several types, every one with tables.
pub fn table_mix<'a>(
    sim: &Simulation<'_>,
    app: &'a AppModel,
    alloc: &Allocation,
) -> Option<TableMix<'a>> {
    let groups = groups_of(sim, alloc);
    if groups.len() < 2 || app.typed().is_empty() {
        return None;
    }
    let placement = alloc.placement();
    let mut min_local = 1u64;
    let mut out = Vec::with_capacity(groups.len());
    for &(ty, replicas) in &groups {
        let name = &sim.cluster.device_types[ty.0 as usize];
        let k = app.type_index(name)?;
        let (lo, hi) = app.local_bsz_range_on(Some(name));
        min_local = min_local.max(lo.ceil().max(1.0) as u64);
        out.push(TableGroup {
            rows: app.table_at(k, &placement),
            replicas,
            max_atomic: hi.floor().max(1.0) as u64,
            tables: app.typed()[k].fingerprint,
        });
    }
    Some(TableMix {
        groups: out,
        placement,
        min_local,
        base_batch: app.init_batch,
        max_batch: app.max_batch,
    })
}

impl Simulation<'_> {
    /// The ground truth of a mixed allocation of a per-type application
    /// ([`table_mix`]); `None` when the mix is off or the allocation holds one type.
    pub(super) fn mixed_truth<'a>(
        &self,
        app: &'a AppModel,
        alloc: &Allocation,
    ) -> Option<TableMix<'a>> {
        if !self.config.mixed_types {
            return None;
        }
        table_mix(self, app, alloc)
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
