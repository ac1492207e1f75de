//! Time a job would take alone (finish-time fairness) and dedicated step times.

use super::*;

impl Simulation<'_> {
    /// Time the job would take alone on a 1/N share of the cluster (N = average
    /// number of contending jobs while it was active), at the batch and size the
    /// user asked for, consolidated, with no restarts: Themis' T_independent. The
    /// same definition for every policy, so ρ compares across policies.
    pub fn independent_time(&self, job: &SimJob, contention: f64) -> f64 {
        let kind = progress::of(&job.work);
        self.independent_time_with(job, &*kind, contention, &mut DedicatedMemo::default())
    }

    /// [`Self::independent_time`] with dedicated times remembered across jobs.
    pub(super) fn independent_time_with(
        &self,
        job: &SimJob,
        kind: &dyn JobProgress,
        contention: f64,
        memo: &mut DedicatedMemo,
    ) -> f64 {
        let share = self.cluster.total_gpus() as f64 / contention.max(1.0);
        let req = job.spec.requested_replicas.max(1);
        let (replicas, slowdown) = if share >= 1.0 {
            (req.min(share.floor() as u32), 1.0)
        } else {
            (1, 1.0 / share)
        };
        let dedicated = kind.dedicated_s(self, job, replicas, memo);
        dedicated * slowdown
    }

    /// [`Self::dedicated_time`] (`spread`: one device per node,
    /// [`Self::dedicated_time_on`]) of embedded app `app`, computed once per key: many
    /// jobs share an application, batch and size, and each costs a pass over its epochs.
    /// `ty`: on that device type's tables ([`Self::dedicated_time_typed`]).
    pub(super) fn dedicated_memo(
        &self,
        memo: &mut DedicatedMemo,
        app: usize,
        batch: u32,
        replicas: u32,
        spread: bool,
        ty: Option<DeviceTypeId>,
    ) -> f64 {
        let key = (app, batch, replicas, spread, ty.map_or(u16::MAX, |t| t.0));
        *memo.entry(key).or_insert_with(|| {
            let a = &self.apps[app];
            if spread {
                let name = ty.map(|t| self.cluster.device_types[t.0 as usize].as_str());
                self.dedicated_time_on_type(a, name, batch, &vec![1; replicas as usize])
            } else {
                self.dedicated_time_typed(a, ty, batch, replicas)
            }
        })
    }

    /// Time to train `app` at a fixed global batch on `replicas` consolidated devices.
    pub fn dedicated_time(&self, app: &AppModel, batch: u32, replicas: u32) -> f64 {
        self.dedicated_time_typed(app, None, batch, replicas)
    }

    /// [`Self::dedicated_time`] on device type `ty` (its nodes' size, and its own
    /// tables for a per-type application); `None`: the largest node, default tables.
    pub fn dedicated_time_typed(
        &self,
        app: &AppModel,
        ty: Option<DeviceTypeId>,
        batch: u32,
        replicas: u32,
    ) -> f64 {
        let per_node = match ty {
            Some(t) => self
                .cluster
                .nodes
                .iter()
                .filter(|n| n.device_type == t)
                .map(|n| n.gpus)
                .max()
                .unwrap_or(1),
            None => self.cluster.max_gpus_per_node(),
        }
        .max(1);
        let mut placement = vec![per_node; (replicas / per_node) as usize];
        if !replicas.is_multiple_of(per_node) {
            placement.push(replicas % per_node);
        }
        let name = ty.map(|t| self.cluster.device_types[t.0 as usize].as_str());
        self.dedicated_time_on_type(app, name, batch, &placement)
    }

    /// Time to train `app` at a fixed global batch on a given placement (devices per node).
    pub fn dedicated_time_on(&self, app: &AppModel, batch: u32, placement: &[u32]) -> f64 {
        self.dedicated_time_on_type(app, None, batch, placement)
    }

    /// [`Self::dedicated_time_on`] on device type `ty`'s tables (per-type applications).
    fn dedicated_time_on_type(
        &self,
        app: &AppModel,
        ty: Option<&str>,
        batch: u32,
        placement: &[u32],
    ) -> f64 {
        let ty = ty.filter(|_| !app.typed().is_empty());
        let replicas: u32 = placement.iter().sum();
        let (atomic, accum) = split_fixed_on(app, ty, batch, replicas);
        let atomic = atomic
            .min((app.max_batch / (replicas * (accum + 1)) as f64) as u32)
            .max(1);
        let global = (replicas * atomic * (accum + 1)) as f64;
        let (step, sync) = match ty {
            Some(t) => app.step_time_on(t, placement, atomic as f64),
            None => app.step_time(placement, atomic as f64),
        };
        let total = step + (step - sync).max(0.0) * accum as f64;
        let mut t = 0.0;
        let mut progress = 0.0;
        for e in 0..app.max_epochs {
            let next = app.epoch_end_progress(e);
            t += (next - progress) * total / app.gain(global, e);
            progress = next;
        }
        t
    }
}

/// Optimiser steps to train `app` to completion at global batch `global`: the
/// progress of each epoch over the gain of one step at that batch.
pub(super) fn fixed_iterations(app: &AppModel, global: f64) -> f64 {
    let mut steps = 0.0;
    let mut progress = 0.0;
    for e in 0..app.max_epochs {
        let next = app.epoch_end_progress(e);
        steps += (next - progress) / app.gain(global, e);
        progress = next;
    }
    steps
}
