//! Jobs that replay a recorded training run: its loss curve at the iterations per
//! second their worker count gives them; done after the profile's last iteration.
//! They keep an online loss-curve fit that quality-driven policies see.

use super::{DedicatedMemo, JobProgress, JobState, Round, SimJob, Simulation};
use crate::quality::QualityProfile;
use pacer_policy::{QualityView, SpeedCurve, SpeedTable};

pub(super) struct LossCurve<'w> {
    pub profile: &'w QualityProfile,
}

impl LossCurve<'_> {
    /// Feeds the job's predictor the recorded losses of the iterations it passed
    /// since `from` (at most the last window's worth).
    fn observe_losses(&self, st: &mut JobState, from: f64) {
        let pred = st.loss.get_or_insert_with(Box::default);
        let to = st.progress.floor();
        let mut k = from.floor() + 1.0;
        if pred.is_empty() {
            k = 0.0;
        }
        k = k.max(to - pacer_predict::loss_curve::DEFAULT_MAX_POINTS as f64);
        while k <= to {
            pred.observe(k, self.profile.loss_at(k));
            k += 1.0;
        }
    }
}

impl JobProgress for LossCurve<'_> {
    fn speed_table(
        &self,
        sim: &Simulation<'_>,
        _job: &SimJob,
        _req: u32,
        _memo: &mut DedicatedMemo,
    ) -> SpeedTable {
        let types = sim.cluster.device_types.len().max(1);
        SpeedTable::uniform(
            types,
            SpeedCurve {
                points: self
                    .profile
                    .iter_time
                    .iter()
                    .map(|&(w, t)| (w, 1.0 / t))
                    .collect(),
                spread_factor: 1.0,
            },
        )
    }

    fn total_work(&self) -> f64 {
        self.profile.total_iterations()
    }

    fn loss(&self, progress: f64) -> Option<f64> {
        Some(self.profile.loss_at(progress))
    }

    fn dedicated_s(
        &self,
        _sim: &Simulation<'_>,
        _job: &SimJob,
        replicas: u32,
        _memo: &mut DedicatedMemo,
    ) -> f64 {
        self.profile.total_iterations() / self.profile.iterations_per_s(replicas).max(1e-300)
    }

    fn quality(&self, st: &mut JobState, uses_quality: bool) -> Option<QualityView> {
        if !uses_quality {
            return None;
        }
        if st.loss.is_none() {
            self.observe_losses(st, 0.0);
        }
        let pred = st.loss.as_mut().expect("initialised");
        pred.refit();
        let (k, loss) = pred.last().expect("observed");
        Some(QualityView {
            iteration: k,
            loss,
            first_loss: pred.first_loss().unwrap_or(loss),
            max_delta_per_iter: pred.max_delta_per_iter(),
            curve: pred.fit().map(|f| f.curve),
        })
    }

    fn counts_steps(&self) -> bool {
        true
    }

    fn advance(
        &self,
        sim: &Simulation<'_>,
        round: &Round<'_>,
        st: &mut JobState,
        now: f64,
        dt: f64,
    ) {
        let from = st.progress;
        sim.step_rate(round.speed, self.profile.total_iterations(), st, now, dt);
        if round.uses_quality && st.progress > from {
            self.observe_losses(st, from);
        }
    }
}
