//! Jobs with measured iterations/s per device count and type (ElasticFlow's tables)
//! and an optional deadline: `steps` iterations at the table's rate, linear between
//! measured counts, flat beyond the largest; a restart costs ElasticFlow's overhead
//! for the new size.

use super::{DedicatedMemo, JobProgress, SimJob, Simulation};
use crate::engine::ElasticCurve;
use crate::trace::elasticflow::{ef_restart_s, EF_RESTART_S_PER_DOUBLING};
use pacer_model::Allocation;
use pacer_policy::{SpeedCurve, SpeedTable};

pub(super) struct Elastic<'w> {
    pub steps: f64,
    pub curves: &'w [ElasticCurve],
    pub deadline_s: Option<f64>,
}

impl Elastic<'_> {
    fn best_rate(&self) -> f64 {
        self.curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.1))
            .fold(0.0, f64::max)
    }
}

impl JobProgress for Elastic<'_> {
    fn speed_table(
        &self,
        sim: &Simulation<'_>,
        _job: &SimJob,
        _req: u32,
        _memo: &mut DedicatedMemo,
    ) -> SpeedTable {
        SpeedTable {
            per_type: sim
                .cluster
                .device_types
                .iter()
                .map(|name| {
                    self.curves
                        .iter()
                        .find(|c| c.device_type.eq_ignore_ascii_case(name))
                        .map_or_else(SpeedCurve::default, |c| SpeedCurve {
                            points: c.points.clone(),
                            spread_factor: 1.0,
                        })
                })
                .collect(),
        }
    }

    fn total_work(&self) -> f64 {
        self.steps
    }

    fn fastest_s(&self) -> Option<f64> {
        let best = self.best_rate();
        (best > 0.0).then(|| self.steps / best)
    }

    /// Alone on `replicas` devices of its fastest type (a 1/N share's worth).
    fn dedicated_s(
        &self,
        _sim: &Simulation<'_>,
        _job: &SimJob,
        replicas: u32,
        _memo: &mut DedicatedMemo,
    ) -> f64 {
        let rate = self
            .curves
            .iter()
            .map(|c| {
                SpeedCurve {
                    points: c.points.clone(),
                    spread_factor: 1.0,
                }
                .rate(replicas.max(1), true)
            })
            .fold(0.0, f64::max);
        self.steps / rate.max(1e-300)
    }

    fn counts_steps(&self) -> bool {
        true
    }

    fn deadline_s(&self) -> Option<f64> {
        self.deadline_s
    }

    fn restart_s(&self, sim: &Simulation<'_>) -> Option<f64> {
        Some(ef_restart_s(1, sim.cluster.total_gpus()))
    }

    fn restart_s_per_doubling(&self) -> f64 {
        EF_RESTART_S_PER_DOUBLING
    }

    fn restart_delay_s(&self, sim: &Simulation<'_>, to: &Allocation) -> f64 {
        ef_restart_s(to.replicas(), sim.cluster.total_gpus())
    }

    /// ElasticFlow's simulator (`scheduler.py`, the end of
    /// `ef_sim_jobs_access_control`; `utils.estimate_overhead`): at every event each
    /// running job pays 2 s (7 s from 256 GPUs) when its placement is cached
    /// (unchanged), the full restart overhead when not (a changed job pays that as
    /// its restart delay; after a periodic restart every placement is new); at every
    /// `scheduling_slot`-th event the jobs not cached pay 27 s (47 s from 256 GPUs)
    /// more.
    fn event_overhead_s(
        &self,
        sim: &Simulation<'_>,
        alloc: &Allocation,
        kept: bool,
        restart: bool,
        after_restart: bool,
    ) -> f64 {
        let gpus = sim.cluster.total_gpus();
        if kept {
            estimate_overhead_s(gpus, alloc.replicas(), !after_restart, restart)
        } else if restart {
            periodic_restart_s(gpus)
        } else {
            0.0
        }
    }

    /// ElasticFlow's `utils.estimate_overhead` by placement: 2 s (7 s from 256 GPUs)
    /// when the placement is cached, else the restart overhead for the size, 27 s
    /// (47 s from 256 GPUs) more at a periodic restart.
    fn placement_overhead_s(
        &self,
        sim: &Simulation<'_>,
        alloc: &Allocation,
        cached: bool,
        restart: bool,
    ) -> f64 {
        estimate_overhead_s(sim.cluster.total_gpus(), alloc.replicas(), cached, restart)
    }
}

/// ElasticFlow's `utils.estimate_overhead` on a cluster of `gpus`: 2 s (7 s from 256
/// GPUs) for a cached placement, else the restart overhead for `replicas` plus, at a
/// periodic restart, [`periodic_restart_s`].
fn estimate_overhead_s(gpus: u32, replicas: u32, cached: bool, restart: bool) -> f64 {
    if cached {
        ef_restart_s(1, gpus) - EF_RESTART_S_PER_DOUBLING
    } else if restart {
        ef_restart_s(replicas, gpus) + periodic_restart_s(gpus)
    } else {
        ef_restart_s(replicas, gpus)
    }
}

/// What a periodic restart adds for a placement not cached: 27 s (47 s from 256 GPUs).
fn periodic_restart_s(gpus: u32) -> f64 {
    if gpus >= 256 {
        47.0
    } else {
        27.0
    }
}
