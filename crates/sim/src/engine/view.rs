//! What a policy sees: speed tables, work done and left, the job views.

use super::*;
use pacer_policy::SpeedCurve;

impl Simulation<'_> {
    /// Speed table of every job (work units per second by device type and count).
    /// A type the job has no measurements for ([`crate::admit::usable_types`]) gets
    /// an empty curve: the job cannot run there. Curves stop at the devices the
    /// cluster has of the job's types, so no table outgrows the cluster.
    pub fn speed_tables(&self) -> Vec<Arc<SpeedTable>> {
        let kinds = progress::all(self.jobs);
        self.speed_tables_of(&kinds)
    }

    /// [`Self::speed_tables`] with the jobs' progress models built.
    pub(super) fn speed_tables_of(&self, kinds: &[progress::Kind<'_>]) -> Vec<Arc<SpeedTable>> {
        let mut memo = DedicatedMemo::default();
        self.jobs
            .iter()
            .zip(kinds)
            .map(|(job, kind)| {
                let usable = crate::admit::usable_types(self.cluster, self.apps, job);
                let cap = crate::admit::capacity(self.cluster, &usable).min(u32::MAX as u64);
                let req = job.spec.requested_replicas.max(1).min(cap.max(1) as u32);
                let mut t = kind.speed_table(self, job, req, &mut memo);
                for (curve, ok) in t.per_type.iter_mut().zip(&usable) {
                    if !ok {
                        *curve = SpeedCurve::default();
                    }
                }
                Arc::new(t)
            })
            .collect()
    }

    /// The view a policy gets of active job `i` (refits a loss-curve job's
    /// predictor when the policy reads quality).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn job_view(
        &self,
        i: usize,
        kind: &dyn JobProgress,
        st: &mut JobState,
        mode: BatchMode,
        speed: &Arc<SpeedTable>,
        cap: u32,
        uses_quality: bool,
    ) -> JobView {
        let job = &self.jobs[i];
        let quality = kind.quality(st, uses_quality);
        let iterations_per_work = kind.iterations_per_work(self, job, st, cap);
        if let (Work::Profiled { app }, ProfileMode::Online) = (&job.work, self.config.profiles) {
            self.record_online(&self.apps[*app], st);
        }
        let st = &*st;
        let adaptive = match mode.fixed {
            None => kind.adaptive_view(self, st, cap),
            Some(_) => None,
        };
        let (max_replicas, goodput, goodput_by_type) = match adaptive {
            Some(v) => (v.max_replicas, v.goodput, v.goodput_by_type),
            None => (
                mode.max_replicas_cap
                    .unwrap_or(job.spec.requested_replicas)
                    .max(1),
                None,
                Vec::new(),
            ),
        };
        let work_done = kind.work_done(self, st);
        // Across device types: the balanced goodput under the models the job has.
        let mixed =
            (self.config.mixed_types && goodput_by_type.iter().flatten().count() > 1).then(|| {
                Arc::new(super::mixed::ViewMix {
                    by_type: goodput_by_type.clone(),
                }) as Arc<dyn pacer_policy::MixedGoodput>
            });
        JobView {
            id: JobId(i as u32),
            arrival_s: job.spec.arrival_s,
            attained_gpu_s: st.attained_gpu_s,
            requested_replicas: job.spec.requested_replicas.max(1),
            max_replicas: mode
                .max_replicas_cap
                .map_or(max_replicas, |c| c.min(max_replicas)),
            num_restarts: st.restarts.unwrap_or(0),
            restart_s: kind.restart_s(self),
            current: st.alloc.clone(),
            goodput,
            goodput_by_type,
            goodput_version: st.goodput_version,
            speed: Some(speed.clone()),
            iterations_per_work,
            work_done,
            work_left: (kind.total_work() - work_done).max(0.0),
            quality,
            one_type: false,
            mixed,
            deadline_s: kind.deadline_s(),
        }
    }
}
