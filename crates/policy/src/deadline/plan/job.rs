//! What the planner knows of one job: its levels on a device type, its work and
//! deadline ([`PlanJob`]).

use crate::{JobView, SpeedCurve};
use pacer_model::{ClusterSpec, DeviceTypeId, JobId};
use std::sync::Arc;

/// A job's levels, `(devices, work units/s)`, shared: a round's jobs take the levels
/// read in an earlier round without a copy ([`PlanJob::with_levels`]).
pub type LevelList = Arc<[(u32, f64)]>;

/// What the planner knows of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanJob {
    pub id: JobId,
    /// The device type it is planned on (index into the cluster's types).
    pub ty: usize,
    /// `(devices, work units/s)` at the sizes it may run at, ascending devices.
    pub levels: LevelList,
    pub work_left: f64,
    /// Finish by this time (s); `None`: best effort.
    pub deadline_s: Option<f64>,
    /// Seconds a (re)start onto one device costs, budgeted before its work when
    /// planning (0: none).
    pub restart_s: f64,
    /// Seconds a (re)start costs more per doubling of its size ([`PlanJob::restart_to`]).
    pub restart_s_per_doubling: f64,
    /// Devices it holds now (no restart is budgeted while its size stays).
    pub current: u32,
}

impl PlanJob {
    /// The job as `view` shows it, on its best device type of `cluster`: the type where
    /// its largest measured size is fastest (lowest index on ties). Levels are its speed
    /// table's measured sizes, at most the devices of that type (no table: 1, 2, 4, …
    /// up to its request, linear). `restart_s` is budgeted only when `budget_restarts`.
    pub fn from_view(view: &JobView, cluster: &ClusterSpec, budget_restarts: bool) -> Self {
        let types = cluster.device_types.len().max(1);
        let levels_on = |t: usize| Self::levels_on(view, cluster, t);
        let (mut ty, mut levels, mut best) = (0, LevelList::from([]), 0.0);
        for t in 0..types {
            let l = levels_on(t);
            let top = l.iter().map(|p| p.1).fold(0.0, f64::max);
            if top > best {
                (ty, levels, best) = (t, l, top);
            }
        }
        Self::with_levels(view, ty, levels, budget_restarts)
    }

    /// The job as `view` shows it, planned on device type `t` of `cluster` (not
    /// necessarily its best: [`PlanJob::from_view`]), up to its fastest level.
    pub fn on_type(view: &JobView, cluster: &ClusterSpec, t: usize, budget_restarts: bool) -> Self {
        Self::with_levels(view, t, Self::levels_on(view, cluster, t), budget_restarts)
            .up_to_fastest()
    }

    /// `view`'s levels on device type `t` of `cluster`: its speed table's measured
    /// sizes there, at most the type's devices (no table: 1, 2, 4, … up to its request,
    /// linear); empty where it cannot run.
    pub fn levels_on(view: &JobView, cluster: &ClusterSpec, t: usize) -> LevelList {
        let cap = cluster.gpus_of_type(DeviceTypeId(t as u16));
        let fits = |&(d, r): &(u32, f64)| d >= 1 && d <= cap && r > 0.0;
        match &view.speed {
            Some(s) => s
                .per_type
                .get(t)
                .map(|c| c.points.iter().copied().filter(fits).collect())
                .unwrap_or_else(|| LevelList::from([])),
            None => SpeedCurve::doubling_sizes(view.requested_replicas)
                .into_iter()
                .map(|d| (d, view.rate(DeviceTypeId(t as u16), d, true)))
                .filter(fits)
                .collect(),
        }
    }

    /// The job as `view` shows it, planned on type `ty` at `levels` (what
    /// [`PlanJob::from_view`] reads from its speed table).
    pub fn with_levels(
        view: &JobView,
        ty: usize,
        levels: LevelList,
        budget_restarts: bool,
    ) -> Self {
        PlanJob {
            id: view.id,
            ty,
            levels,
            work_left: view.work_left,
            deadline_s: view.deadline_s,
            restart_s: if budget_restarts {
                view.restart_s.unwrap_or(0.0)
            } else {
                0.0
            },
            restart_s_per_doubling: if budget_restarts && view.restart_s.is_some() {
                view.restart_s_per_doubling
            } else {
                0.0
            },
            current: view.current.replicas(),
        }
    }

    /// Seconds a (re)start onto `devices` costs, as budgeted.
    pub fn restart_to(&self, devices: u32) -> f64 {
        if self.restart_s_per_doubling == 0.0 {
            return self.restart_s;
        }
        self.restart_s + self.restart_s_per_doubling * crate::log2_devices(devices)
    }

    /// Drops the levels above the fastest one: more devices that run slower are never
    /// worth planning (ElasticFlow caps each model's GPUs by hand for the same reason).
    pub fn up_to_fastest(mut self) -> Self {
        if let Some(best) = self
            .levels
            .iter()
            .enumerate()
            .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
        {
            if best + 1 < self.levels.len() {
                self.levels = self.levels[..=best].into();
            }
        }
        self
    }

    /// The largest level of at most `devices` (0 when none fits).
    pub fn level_at_most(&self, devices: u32) -> u32 {
        self.levels
            .iter()
            .rev()
            .find(|l| l.0 <= devices)
            .map_or(0, |l| l.0)
    }

    /// Work units/s on `devices` (one of its levels, or 0).
    pub fn rate(&self, devices: u32) -> f64 {
        self.levels
            .iter()
            .find(|l| l.0 == devices)
            .map_or(0.0, |l| l.1)
    }

    /// The next level above `devices` (`None`: none).
    pub fn next_level(&self, devices: u32) -> Option<u32> {
        self.levels.iter().find(|l| l.0 > devices).map(|l| l.0)
    }
}
