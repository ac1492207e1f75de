//! Duration-only jobs (Philly, Gavel traces without throughputs): `duration_s` on
//! the requested devices, linear below that size and flat above.

use super::{DedicatedMemo, JobProgress, JobState, Round, SimJob, Simulation};
use pacer_policy::{SpeedCurve, SpeedTable};

pub(super) struct Duration {
    pub duration_s: f64,
}

impl JobProgress for Duration {
    fn speed_table(
        &self,
        sim: &Simulation<'_>,
        _job: &SimJob,
        req: u32,
        _memo: &mut DedicatedMemo,
    ) -> SpeedTable {
        let types = sim.cluster.device_types.len().max(1);
        SpeedTable::uniform(types, SpeedCurve::single(req, 1.0 / self.duration_s, 1.0))
    }

    fn total_work(&self) -> f64 {
        1.0
    }

    fn fastest_s(&self) -> Option<f64> {
        Some(self.duration_s)
    }

    fn dedicated_s(
        &self,
        _sim: &Simulation<'_>,
        job: &SimJob,
        replicas: u32,
        _memo: &mut DedicatedMemo,
    ) -> f64 {
        let req = job.spec.requested_replicas.max(1);
        self.duration_s * req as f64 / replicas.min(req) as f64
    }

    fn advance(
        &self,
        _sim: &Simulation<'_>,
        round: &Round<'_>,
        st: &mut JobState,
        now: f64,
        dt: f64,
    ) {
        let req = round.job.spec.requested_replicas.max(1);
        let rate = st.alloc.replicas().min(req) as f64 / req as f64 / self.duration_s;
        super::step_at(rate, 1.0, st, now, dt);
    }
}
