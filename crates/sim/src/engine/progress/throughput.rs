//! Jobs with a measured speed per device type (Gavel's throughputs): `steps` to
//! run on the requested devices, linear below that size and flat above.

use super::{DedicatedMemo, JobProgress, SimJob, Simulation};
use crate::engine::TypeRate;
use pacer_model::DeviceTypeId;
use pacer_policy::{SpeedCurve, SpeedTable};

pub(super) struct Throughput<'w> {
    pub steps: f64,
    pub rates: &'w [TypeRate],
}

impl JobProgress for Throughput<'_> {
    fn speed_table(
        &self,
        sim: &Simulation<'_>,
        _job: &SimJob,
        req: u32,
        _memo: &mut DedicatedMemo,
    ) -> SpeedTable {
        SpeedTable {
            per_type: sim
                .cluster
                .device_types
                .iter()
                .map(|name| {
                    self.rates
                        .iter()
                        .find(|r| r.device_type == *name)
                        .filter(|r| r.consolidated > 0.0)
                        .map_or_else(SpeedCurve::default, |r| {
                            SpeedCurve::single(
                                req,
                                r.consolidated,
                                (r.unconsolidated / r.consolidated).min(1.0),
                            )
                        })
                })
                .collect(),
        }
    }

    fn total_work(&self) -> f64 {
        self.steps
    }

    fn fastest_s(&self) -> Option<f64> {
        let best = self
            .rates
            .iter()
            .map(|r| r.consolidated)
            .fold(0.0, f64::max);
        (best > 0.0).then(|| self.steps / best)
    }

    /// The 1/N share is a slice of every device type in proportion to its
    /// capacity (Gavel's isolated share), consolidated.
    fn dedicated_s(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        replicas: u32,
        _memo: &mut DedicatedMemo,
    ) -> f64 {
        let req = job.spec.requested_replicas.max(1);
        let total = sim.cluster.total_gpus() as f64;
        let rate: f64 = sim
            .cluster
            .device_types
            .iter()
            .enumerate()
            .map(|(t, name)| {
                let w = sim.cluster.gpus_of_type(DeviceTypeId(t as u16)) as f64 / total;
                let r = self
                    .rates
                    .iter()
                    .find(|r| r.device_type == *name)
                    .map_or(0.0, |r| r.consolidated);
                w * r * replicas.min(req) as f64 / req as f64
            })
            .sum();
        self.steps / rate.max(1e-300)
    }

    fn counts_steps(&self) -> bool {
        true
    }
}
