//! What a policy sees: speed tables, work done and left, the job views.

use super::*;

impl Simulation<'_> {
    /// Speed table of every job (work units per second by device type and count).
    /// A type the job has no measurements for ([`crate::admit::usable_types`]) gets
    /// an empty curve: the job cannot run there. Curves stop at the devices the
    /// cluster has of the job's types, so no table outgrows the cluster.
    pub fn speed_tables(&self) -> Vec<Arc<SpeedTable>> {
        let types = self.cluster.device_types.len().max(1);
        let mut memo = DedicatedMemo::default();
        self.jobs
            .iter()
            .map(|job| {
                let usable = crate::admit::usable_types(self.cluster, self.apps, job);
                let cap = crate::admit::capacity(self.cluster, &usable).min(u32::MAX as u64);
                let req = job.spec.requested_replicas.max(1).min(cap.max(1) as u32);
                let mut t = match &job.work {
                    Work::Duration { duration_s } => {
                        SpeedTable::uniform(types, SpeedCurve::single(req, 1.0 / duration_s, 1.0))
                    }
                    Work::Profiled { app } if !self.apps[*app].typed().is_empty() => {
                        self.typed_speed_table(&mut memo, *app, job.spec.requested_batch, req)
                    }
                    Work::Profiled { app } => {
                        let app = *app;
                        let b = job.spec.requested_batch;
                        let sizes = SpeedCurve::doubling_sizes(req);
                        let points = sizes
                            .iter()
                            .map(|&r| {
                                (
                                    r,
                                    1.0 / self.dedicated_memo(&mut memo, app, b, r, false, None),
                                )
                            })
                            .collect();
                        let spread = if req > 1 {
                            self.dedicated_memo(&mut memo, app, b, req, false, None)
                                / self.dedicated_memo(&mut memo, app, b, req, true, None)
                        } else {
                            1.0
                        };
                        SpeedTable::uniform(
                            types,
                            SpeedCurve {
                                points,
                                spread_factor: spread.min(1.0),
                            },
                        )
                    }
                    Work::Throughput { rates, .. } => SpeedTable {
                        per_type: self
                            .cluster
                            .device_types
                            .iter()
                            .map(|name| {
                                rates
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
                    },
                    Work::LossCurve { profile } => SpeedTable::uniform(
                        types,
                        SpeedCurve {
                            points: profile
                                .iter_time
                                .iter()
                                .map(|&(w, t)| (w, 1.0 / t))
                                .collect(),
                            spread_factor: 1.0,
                        },
                    ),
                };
                for (curve, ok) in t.per_type.iter_mut().zip(&usable) {
                    if !ok {
                        *curve = SpeedCurve::default();
                    }
                }
                Arc::new(t)
            })
            .collect()
    }

    /// Speed table of a fixed-batch job of per-type application `app`: on each
    /// cluster type with tables, one over its dedicated time on that type's tables
    /// and nodes (at most the type's devices); no curve on the others.
    fn typed_speed_table(
        &self,
        memo: &mut DedicatedMemo,
        app: usize,
        batch: u32,
        req: u32,
    ) -> SpeedTable {
        let a = &self.apps[app];
        SpeedTable {
            per_type: (0..self.cluster.device_types.len())
                .map(|t| {
                    let ty = DeviceTypeId(t as u16);
                    let cap = self.cluster.gpus_of_type(ty);
                    if a.type_index(&self.cluster.device_types[t]).is_none() || cap == 0 {
                        return SpeedCurve::default();
                    }
                    let top = req.min(cap);
                    let points = SpeedCurve::doubling_sizes(top)
                        .iter()
                        .map(|&r| {
                            (
                                r,
                                1.0 / self.dedicated_memo(memo, app, batch, r, false, Some(ty)),
                            )
                        })
                        .collect();
                    let spread = if top > 1 {
                        self.dedicated_memo(memo, app, batch, top, false, Some(ty))
                            / self.dedicated_memo(memo, app, batch, top, true, Some(ty))
                    } else {
                        1.0
                    };
                    SpeedCurve {
                        points,
                        spread_factor: spread.min(1.0),
                    }
                })
                .collect(),
        }
    }

    /// Optimiser steps a fixed-batch profiled job takes to finish at its requested
    /// batch on its requested devices (default tables' batch split).
    fn job_iterations(&self, app: &AppModel, batch: u32, replicas: u32) -> f64 {
        let replicas = replicas.max(1);
        let (atomic, accum) = split_fixed(app, batch, replicas);
        let atomic = atomic
            .min((app.max_batch / (replicas * (accum + 1)) as f64) as u32)
            .max(1);
        super::dedicated::fixed_iterations(app, (replicas * atomic * (accum + 1)) as f64)
    }

    /// Total work of job `i` in its speed table's units.
    pub(super) fn total_work(&self, job: &SimJob) -> f64 {
        match &job.work {
            Work::Profiled { .. } | Work::Duration { .. } => 1.0,
            Work::Throughput { steps, .. } => *steps,
            Work::LossCurve { profile } => profile.total_iterations(),
        }
    }

    /// Work done by a job, in its speed table's units.
    pub(super) fn work_done(&self, job: &SimJob, st: &JobState) -> f64 {
        match &job.work {
            Work::Profiled { app } => st.progress / self.apps[*app].target_progress(),
            _ => st.progress,
        }
    }

    /// Feeds a LossCurve job's predictor the recorded losses of the iterations it
    /// passed since `from` (at most the last window's worth).
    pub(super) fn observe_losses(profile: &QualityProfile, st: &mut JobState, from: f64) {
        let pred = st.loss.get_or_insert_with(LossPredictor::default);
        let to = st.progress.floor();
        let mut k = from.floor() + 1.0;
        if pred.is_empty() {
            k = 0.0;
        }
        k = k.max(to - pacer_predict::loss_curve::DEFAULT_MAX_POINTS as f64);
        while k <= to {
            pred.observe(k, profile.loss_at(k));
            k += 1.0;
        }
    }

    /// The view a policy gets of active job `i` (refits a loss-curve job's
    /// predictor when the policy reads quality).
    pub(super) fn job_view(
        &self,
        i: usize,
        st: &mut JobState,
        mode: BatchMode,
        speed: &Arc<SpeedTable>,
        cap: u32,
        uses_quality: bool,
    ) -> JobView {
        let job = &self.jobs[i];
        let quality = match &job.work {
            Work::LossCurve { profile } if uses_quality => {
                if st.loss.is_none() {
                    Self::observe_losses(profile, st, 0.0);
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
            _ => None,
        };
        let iterations_per_work = match &job.work {
            Work::Profiled { app } => Some(*st.iterations.get_or_insert_with(|| {
                self.job_iterations(
                    &self.apps[*app],
                    job.spec.requested_batch,
                    job.spec.requested_replicas.min(cap),
                )
            })),
            Work::Throughput { .. } | Work::LossCurve { .. } => Some(1.0),
            Work::Duration { .. } => None,
        };
        let (max_replicas, goodput, goodput_by_type) = match (&job.work, mode.fixed) {
            (Work::Profiled { app }, None) => {
                let app = &self.apps[*app];
                let by_batch = (app.max_batch / app.min_local_bsz) as u32;
                let explore = (2 * st.max_profiled_replicas).max(1);
                let by_type = if self.config.profiles == ProfileMode::Online {
                    self.online_goodput_by_type(app, st)
                } else {
                    self.goodput_by_type(app, st)
                };
                (
                    explore.min(64).min(by_batch).min(cap).max(1),
                    self.goodput_fn(app, st),
                    by_type,
                )
            }
            _ => (
                mode.max_replicas_cap
                    .unwrap_or(job.spec.requested_replicas)
                    .max(1),
                None,
                Vec::new(),
            ),
        };
        let st = &*st;
        JobView {
            id: JobId(i as u32),
            arrival_s: job.spec.arrival_s,
            attained_gpu_s: st.attained_gpu_s,
            requested_replicas: job.spec.requested_replicas.max(1),
            max_replicas: mode
                .max_replicas_cap
                .map_or(max_replicas, |c| c.min(max_replicas)),
            num_restarts: st.restarts.unwrap_or(0),
            restart_s: match &job.work {
                Work::Profiled { app } => self.apps[*app].restart_s,
                _ => None,
            },
            current: st.alloc.clone(),
            goodput,
            goodput_by_type,
            goodput_version: st.goodput_version,
            speed: Some(speed.clone()),
            iterations_per_work,
            work_done: self.work_done(job, st),
            work_left: (self.total_work(job) - self.work_done(job, st)).max(0.0),
            quality,
        }
    }
}
