//! What a policy sees: speed tables, work done and left, the job views.

use super::progress::AdaptiveView;
use super::*;
use pacer_policy::job_view::{Explore, JobFacts, ReplicaBound};
use pacer_policy::{QualityView, SpeedCurve};

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

    /// What the engine knows of active job `i` for its view (refits a loss-curve
    /// job's predictor when the policy reads quality): [`SimJobFacts`], translated by
    /// [`SimJobFacts::facts`] for the one `JobView` builder ([`JobFacts::view`], or
    /// [`JobFacts::view_into`] over last round's view). `consts` are the job's
    /// [`ViewConsts`], read once per run.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn job_facts(
        &self,
        i: usize,
        kind: &dyn JobProgress,
        st: &mut JobState,
        mode: BatchMode,
        speed: &Arc<SpeedTable>,
        cap: u32,
        consts: &ViewConsts,
        uses_quality: bool,
    ) -> SimJobFacts {
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
        SimJobFacts {
            index: i,
            arrival_s: job.spec.arrival_s,
            requested_replicas: job.spec.requested_replicas,
            requested_batch: Some(f64::from(job.spec.requested_batch)),
            attained_gpu_s: st.attained_gpu_s,
            restarts: st.restarts,
            restart_s: consts.restart_s,
            restart_s_per_doubling: consts.restart_s_per_doubling,
            alloc: st.alloc.clone(),
            goodput_version: st.goodput_version,
            max_replicas_cap: mode.max_replicas_cap,
            adaptive,
            speed: speed.clone(),
            iterations_per_work,
            work_done: kind.work_done(self, st),
            total_work: consts.total_work,
            quality,
            deadline_s: consts.deadline_s,
            mixed_types: self.config.mixed_types,
        }
    }
}

/// What a job's view reads of its progress model that does not change during a run
/// (each a method of [`JobProgress`] of the model alone, or of the model and the
/// simulation): read once per run instead of once per view.
#[derive(Debug, Clone, Copy)]
pub(super) struct ViewConsts {
    pub restart_s: Option<f64>,
    pub restart_s_per_doubling: f64,
    pub total_work: f64,
    pub deadline_s: Option<f64>,
}

impl ViewConsts {
    pub(super) fn of(sim: &Simulation<'_>, kind: &dyn JobProgress) -> Self {
        ViewConsts {
            restart_s: kind.restart_s(sim),
            restart_s_per_doubling: kind.restart_s_per_doubling(),
            total_work: kind.total_work(),
            deadline_s: kind.deadline_s(),
        }
    }
}

/// What the simulator knows of one active job when a policy looks at it, in the
/// engine's terms (its state read through the job's `JobProgress`).
#[derive(Debug, Clone)]
pub struct SimJobFacts {
    /// Index of the job in the simulation's jobs (its `JobId`).
    pub index: usize,
    pub arrival_s: f64,
    pub requested_replicas: u32,
    /// The global batch the workload asked for.
    pub requested_batch: Option<f64>,
    pub attained_gpu_s: f64,
    /// Restarts so far (`None`: never started).
    pub restarts: Option<u32>,
    /// The job's own restart delay (onto one device), when its kind has one.
    pub restart_s: Option<f64>,
    /// What a restart costs more per doubling of its new size.
    pub restart_s_per_doubling: f64,
    pub alloc: Allocation,
    pub goodput_version: u64,
    /// `BatchMode::max_replicas_cap`: the replicas a fixed-batch Pollux job keeps.
    pub max_replicas_cap: Option<u32>,
    /// The replica bound and models of a job that chooses its batch; `None`: it
    /// does not.
    pub adaptive: Option<AdaptiveView>,
    pub speed: Arc<SpeedTable>,
    pub iterations_per_work: Option<f64>,
    /// Work done and in all, in the speed table's units.
    pub work_done: f64,
    pub total_work: f64,
    pub quality: Option<QualityView>,
    pub deadline_s: Option<f64>,
    /// `SimConfig::mixed_types`.
    pub mixed_types: bool,
}

impl SimJobFacts {
    /// The simulator's translation into the driver-neutral facts of a view: an
    /// adaptive job's bound explores from the most replicas it has run at (Pollux's
    /// cap), a fixed-batch job's is its kept replicas or its request; the work left
    /// is never negative; any job may mix types where it runs equally fast on them
    /// (`one_type` false), and with `--mixed-types` also across its per-type models.
    #[inline(always)]
    pub fn facts(self) -> JobFacts {
        let req = self.requested_replicas;
        let (replicas, goodput, goodput_by_type, measured_by_type) = match self.adaptive {
            Some(v) => (
                ReplicaBound {
                    limit: self.max_replicas_cap.map_or(v.limit, |c| c.min(v.limit)),
                    explore: Some(Explore {
                        measured_replicas: v.measured_replicas,
                        floor: 1,
                    }),
                },
                v.goodput,
                v.goodput_by_type,
                v.measured_by_type,
            ),
            None => (
                ReplicaBound {
                    limit: self.max_replicas_cap.unwrap_or(req.max(1)),
                    explore: None,
                },
                None,
                Vec::new(),
                Vec::new(),
            ),
        };
        JobFacts {
            id: JobId(self.index as u32),
            arrival_s: self.arrival_s,
            attained_gpu_s: self.attained_gpu_s,
            requested_replicas: req,
            requested_batch: self.requested_batch,
            replicas,
            num_restarts: self.restarts.unwrap_or(0),
            restart_s: self.restart_s,
            restart_s_per_doubling: self.restart_s_per_doubling,
            current: self.alloc,
            goodput,
            goodput_by_type,
            measured_by_type,
            goodput_version: self.goodput_version,
            mixed_types: self.mixed_types,
            speed: Some(self.speed),
            iterations_per_work: self.iterations_per_work,
            work_done: self.work_done,
            work_left: (self.total_work - self.work_done).max(0.0),
            quality: self.quality,
            one_type: false,
            deadline_s: self.deadline_s,
        }
    }
}
