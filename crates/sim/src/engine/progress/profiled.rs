//! Measured applications (Pollux's tables): progress in base-batch-equivalent
//! steps, statistical efficiency included, until the progress the application's
//! measured run reached. Under an adaptive policy they choose their batch for
//! goodput from a model fitted online to the configurations they have run.

use super::{AdaptiveView, DedicatedMemo, JobProgress, JobState, Round, SimJob, Simulation};
use crate::apps::AppModel;
use crate::engine::{
    limits_on, pollux_fixed, split_fixed, split_fixed_on, BatchMode, ProfileMode, SURPRISE,
};
use pacer_control::job::decide;
use pacer_model::Allocation;
use pacer_model::DeviceTypeId;
use pacer_policy::{SpeedCurve, SpeedTable};
use pacer_predict::goodput::{GoodputFn, GradParams, PerfObservation};

pub(super) struct Profiled {
    /// Index into the simulation's apps.
    pub app: usize,
}

impl JobProgress for Profiled {
    fn speed_table(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        req: u32,
        memo: &mut DedicatedMemo,
    ) -> SpeedTable {
        let app = self.app;
        let b = job.spec.requested_batch;
        if !sim.apps[app].typed().is_empty() {
            return sim.typed_speed_table(memo, app, b, req);
        }
        let types = sim.cluster.device_types.len().max(1);
        let sizes = SpeedCurve::doubling_sizes(req);
        let points = sizes
            .iter()
            .map(|&r| (r, 1.0 / sim.dedicated_memo(memo, app, b, r, false, None)))
            .collect();
        let spread = if req > 1 {
            sim.dedicated_memo(memo, app, b, req, false, None)
                / sim.dedicated_memo(memo, app, b, req, true, None)
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

    fn total_work(&self) -> f64 {
        1.0
    }

    fn work_done(&self, sim: &Simulation<'_>, st: &JobState) -> f64 {
        st.progress / sim.apps[self.app].target_progress()
    }

    fn dedicated_s(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        replicas: u32,
        memo: &mut DedicatedMemo,
    ) -> f64 {
        sim.dedicated_memo(
            memo,
            self.app,
            job.spec.requested_batch,
            replicas,
            false,
            None,
        )
    }

    fn iterations_per_work(
        &self,
        sim: &Simulation<'_>,
        job: &SimJob,
        st: &mut JobState,
        cap: u32,
    ) -> Option<f64> {
        Some(*st.iterations.get_or_insert_with(|| {
            sim.job_iterations(
                &sim.apps[self.app],
                job.spec.requested_batch,
                job.spec.requested_replicas.min(cap),
            )
        }))
    }

    fn batch_mode(&self, sim: &Simulation<'_>, job: &SimJob, adaptive: bool) -> BatchMode {
        match (adaptive, pollux_fixed(&sim.apps[self.app])) {
            (true, Some((b, r))) => BatchMode {
                fixed: Some(b),
                max_replicas_cap: Some(r),
            },
            (true, None) => BatchMode {
                fixed: None,
                max_replicas_cap: None,
            },
            (false, _) => BatchMode {
                fixed: Some(job.spec.requested_batch),
                max_replicas_cap: None,
            },
        }
    }

    fn adaptive_view(&self, sim: &Simulation<'_>, st: &JobState, cap: u32) -> Option<AdaptiveView> {
        let app = &sim.apps[self.app];
        let by_batch = (app.max_batch / app.min_local_bsz) as u32;
        Some(AdaptiveView {
            limit: 64u32.min(by_batch).min(cap).max(1),
            measured_replicas: st.max_profiled_replicas,
            goodput: sim.goodput_fn(app, st),
            goodput_by_type: sim.goodput_by_type(app, st),
            measured_by_type: sim.measured_by_type(app, st),
        })
    }

    fn restart_s(&self, sim: &Simulation<'_>) -> Option<f64> {
        sim.apps[self.app].restart_s
    }

    fn advance(
        &self,
        sim: &Simulation<'_>,
        round: &Round<'_>,
        st: &mut JobState,
        now: f64,
        dt: f64,
    ) {
        sim.step_profiled(&sim.apps[self.app], round.mode, st, now, dt);
    }

    /// Measurements of another device type say nothing about the new one.
    fn reallocating(&self, sim: &Simulation<'_>, st: &mut JobState, to: &Allocation) {
        let app = &sim.apps[self.app];
        if !app.typed().is_empty()
            && !to.is_empty()
            && !st.alloc.is_empty()
            && sim.alloc_type(to) != sim.alloc_type(&st.alloc)
        {
            st.profile.clear();
            st.perf = None;
            st.goodput_version += 1;
        }
    }

    fn restarted(&self, sim: &Simulation<'_>, mode: BatchMode, st: &mut JobState) {
        sim.update_batch(&sim.apps[self.app], mode, st);
    }
}

/// Spends up to `dt` seconds from `t` at `goodput` (progress per second) within the
/// job's current epoch: all of them, or up to the epoch's end in whole seconds (as
/// Pollux's simulator counts them), finishing the job after its last epoch. Returns
/// the seconds spent.
pub(in crate::engine) fn spend_in_epoch(
    app: &AppModel,
    st: &mut JobState,
    replicas: u32,
    goodput: f64,
    t: &mut f64,
    dt: &mut f64,
) -> f64 {
    let next = app.epoch_end_progress(st.epoch);
    if st.progress + goodput * *dt < next {
        let spent = *dt;
        st.progress += goodput * spent;
        st.attained_gpu_s += spent * replicas as f64;
        *dt = 0.0;
        spent
    } else {
        let delta = ((next - st.progress) / goodput).round().min(*dt).max(0.0);
        st.epoch += 1;
        st.progress = next;
        st.attained_gpu_s += delta * replicas as f64;
        *t += delta;
        *dt -= delta;
        if st.epoch >= app.max_epochs {
            st.completion_s = Some(*t);
        }
        delta
    }
}

/// The batch choice, online fit and round arithmetic of profiled jobs.
impl Simulation<'_> {
    fn goodput_fn(&self, app: &AppModel, st: &JobState) -> Option<GoodputFn> {
        // Per-type applications: the model fitted to the tables of the type it runs
        // on; with online profiles, the job's own fit there (below), as for others.
        if !app.typed().is_empty() && self.config.profiles == ProfileMode::Fitted {
            let ty = self.alloc_type(&st.alloc)?;
            return Some(GoodputFn {
                perf: app.typed()[app.type_index(ty)?].perf?,
                grad: st.grad?,
                limits: limits_on(app, Some(ty)),
            });
        }
        let ty = self
            .alloc_type(&st.alloc)
            .filter(|_| !app.typed().is_empty());
        Some(GoodputFn {
            perf: st.perf?,
            grad: st.grad?,
            limits: limits_on(app, ty),
        })
    }

    /// Device type of an allocation's first node (`None`: empty).
    fn alloc_type(&self, alloc: &Allocation) -> Option<&str> {
        let &(node, _) = alloc.slots().first()?;
        let ty = self.cluster.nodes[node.0 as usize].device_type;
        Some(self.cluster.device_types[ty.0 as usize].as_str())
    }

    /// Goodput model per cluster device type of a per-type application (`None`
    /// for the types it has no tables for); empty for other jobs. Gradient
    /// statistics before the job has run: the application's at its base batch.
    pub(in crate::engine) fn goodput_by_type(
        &self,
        app: &AppModel,
        st: &JobState,
    ) -> Vec<Option<GoodputFn>> {
        if app.typed().is_empty() {
            return Vec::new();
        }
        if self.config.profiles == ProfileMode::Online {
            return self.online_goodput_by_type(app, st);
        }
        let grad = st.grad.unwrap_or_else(|| {
            let (sqr, var) = app.grad_stats(app.init_batch, st.epoch);
            GradParams { sqr, var }
        });
        self.cluster
            .device_types
            .iter()
            .map(|name| {
                let t = &app.typed()[app.type_index(name)?];
                Some(GoodputFn {
                    perf: t.perf?,
                    grad,
                    limits: limits_on(app, Some(name)),
                })
            })
            .collect()
    }

    /// Sets atomic batch and accumulation for the job's current allocation.
    fn update_batch(&self, app: &AppModel, mode: BatchMode, st: &mut JobState) {
        let (nodes, replicas) = (st.alloc.slots().len() as u32, st.alloc.replicas());
        if replicas == 0 {
            return;
        }
        // Across device types (`SimConfig::mixed_types`): the balanced step's batch.
        if self.config.mixed_types && self.update_mixed_batch(app, mode, st) {
            return;
        }
        let ty = self
            .alloc_type(&st.alloc)
            .filter(|_| !app.typed().is_empty());
        // (A fixed batch never reads the goodput model: its fields are cold.)
        let (atomic, accum) = match (mode.fixed, ty) {
            (Some(b), _) => split_fixed_on(app, ty, b, replicas),
            (None, Some(ty)) => self.typed_adaptive_batch(app, ty, st),
            (None, None) => match self.goodput_fn(app, st) {
                Some(g) => match decide::batch_on_allocation(&g, nodes, replicas) {
                    Some(c) => (c.atomic_bsz, c.accum_steps),
                    None => split_fixed(
                        app,
                        app.init_batch.max(app.min_local_bsz * replicas as f64) as u32,
                        replicas,
                    ),
                },
                None => {
                    let b = app.init_batch.max(app.min_local_bsz * replicas as f64);
                    split_fixed(app, b as u32, replicas)
                }
            },
        };
        st.batch_version = st.goodput_version;
        let count = replicas * (accum + 1);
        st.atomic_bsz = atomic.min((app.max_batch / count as f64) as u32).max(1);
        st.accum_steps = accum;
    }

    /// An adaptive job's (atomic batch, accumulation steps) on device type `ty` of a
    /// per-type application, as Sia's simulator chooses them (`update_local_bsz`):
    /// the goodput-optimal batch with the local batch at most the largest measured
    /// for the placement ([`AppModel::max_local_bsz_at`]); before the job has a
    /// model, the base batch (at least the smallest local batch per replica) split
    /// into that limit; then the atomic batch capped by the largest measured for
    /// the replica count ([`AppModel::max_local_bsz_for_replicas`]).
    fn typed_adaptive_batch(&self, app: &AppModel, ty: &str, st: &JobState) -> (u32, u32) {
        let placement = st.alloc.placement();
        let (nodes, replicas) = (placement.len() as u32, st.alloc.replicas());
        let max_local = app
            .max_local_bsz_at(Some(ty), &placement)
            .max(app.local_bsz_range_on(Some(ty)).0);
        let chosen = self.goodput_fn(app, st).and_then(|mut g| {
            g.limits.max_atomic = max_local;
            decide::batch_on_allocation(&g, nodes, replicas).map(|c| (c.atomic_bsz, c.accum_steps))
        });
        let (mut atomic, accum) = chosen.unwrap_or_else(|| {
            let eps = 1e-8;
            let b = app.init_batch.max(app.min_local_bsz * replicas as f64);
            let local = (b / replicas as f64 - eps).ceil();
            let mut accum = ((local / max_local - eps).ceil() - 1.0).max(0.0) as u32;
            if replicas == 1 && b > app.init_batch {
                accum = accum.max(1);
            }
            (
                (local / (accum + 1) as f64 - eps).ceil().max(1.0) as u32,
                accum,
            )
        });
        if let Some(m) = app.max_local_bsz_for_replicas(Some(ty), replicas) {
            atomic = atomic.min(m as u32);
        }
        (atomic, accum)
    }

    /// Advances a profiled job by `dt` seconds starting at `now`.
    fn step_profiled(
        &self,
        app: &AppModel,
        mode: BatchMode,
        st: &mut JobState,
        now: f64,
        mut dt: f64,
    ) {
        let replicas = st.replicas;
        let delay = super::spend_restart(st, replicas, dt);
        dt -= delay;
        let mut t = now + delay;
        if st.mixed_batch > 0 {
            return self.step_mixed(app, mode, st, t, dt);
        }
        if mode.fixed.is_some() {
            return self.step_fixed(app, st, replicas, t, dt);
        }
        let placement = st.alloc.placement();
        let nodes = placement.len() as u32;
        let ty = self
            .alloc_type(&st.alloc)
            .filter(|_| !app.typed().is_empty());
        while dt > 0.0 && st.completion_s.is_none() {
            let atomic = st.atomic_bsz as f64;
            let batch = replicas as f64 * atomic * (st.accum_steps + 1) as f64;
            let (step, sync) = match ty {
                Some(ty) => app.step_time_on(ty, &placement, atomic),
                None => app.step_time(&placement, atomic),
            };
            let compute = (step - sync).max(1e-9);
            let gain = app.gain(batch, st.epoch);
            if mode.fixed.is_none() {
                let (sqr, var) = app.grad_stats(batch, st.epoch);
                Self::observe(st, GradParams { sqr, var }, (nodes, replicas), step, sync);
            }
            let total = step + compute * st.accum_steps as f64;
            spend_in_epoch(app, st, replicas, gain / total, &mut t, &mut dt);
            // The goodput-optimal batch only moves when the job's model does.
            if mode.fixed.is_none() && st.goodput_version != st.batch_version {
                self.update_batch(app, mode, st);
            }
        }
    }

    /// [`Self::step_profiled`] after the restart delay for a job whose batch is fixed:
    /// the same arithmetic, with the step time of its placement and the gain of its
    /// epoch kept between rounds (they change only with the allocation or the epoch).
    fn step_fixed(
        &self,
        app: &AppModel,
        st: &mut JobState,
        replicas: u32,
        mut t: f64,
        mut dt: f64,
    ) {
        while dt > 0.0 && st.completion_s.is_none() {
            let goodput = match st.fixed_goodput {
                g if !g.is_nan() => g,
                _ => {
                    let atomic = st.atomic_bsz as f64;
                    let batch = replicas as f64 * atomic * (st.accum_steps + 1) as f64;
                    let (step, sync) = match st.fixed_step {
                        Some(s) => s,
                        None => {
                            // Per-type applications: the tables of the type it runs on.
                            let placement = st.alloc.placement();
                            let s = match self.alloc_type(&st.alloc) {
                                Some(ty) if !app.typed().is_empty() => {
                                    app.step_time_on(ty, &placement, atomic)
                                }
                                _ => app.step_time(&placement, atomic),
                            };
                            st.fixed_step = Some(s);
                            s
                        }
                    };
                    let compute = (step - sync).max(1e-9);
                    let gain = app.gain(batch, st.epoch);
                    let total = step + compute * st.accum_steps as f64;
                    let g = gain / total;
                    // (A NaN goodput is recomputed each round: the same value.)
                    st.fixed_goodput = g;
                    st.fixed_next = app.epoch_end_progress(st.epoch);
                    g
                }
            };
            let next = app.epoch_end_progress(st.epoch);
            if st.progress + goodput * dt < next {
                st.progress += goodput * dt;
                st.attained_gpu_s += dt * replicas as f64;
                dt = 0.0;
            } else {
                // Whole seconds, as Pollux's simulator counts them.
                let delta = ((next - st.progress) / goodput).round().min(dt).max(0.0);
                st.epoch += 1;
                st.fixed_goodput = f64::NAN;
                st.progress = next;
                st.attained_gpu_s += delta * replicas as f64;
                t += delta;
                dt -= delta;
                if st.epoch >= app.max_epochs {
                    st.completion_s = Some(t);
                }
            }
        }
    }

    /// Records what the job just measured and refits its model when it is new.
    fn observe(
        st: &mut JobState,
        grad: GradParams,
        (nodes, replicas): (u32, u32),
        step: f64,
        sync: f64,
    ) {
        if st.grad != Some(grad) {
            st.grad = Some(grad);
            st.goodput_version += 1;
        }
        let key = (nodes, replicas, st.atomic_bsz);
        if st.profile.contains_key(&key) {
            return;
        }
        // A new (nodes, replicas) shape can move the optimum far: fit cold. A new
        // atomic batch on a known shape only nudges it: warm-start from the last fit.
        let new_shape = !st
            .profile
            .keys()
            .any(|&(n, r, _)| n == nodes && r == replicas);
        st.profile.insert(key, (step, sync));
        st.max_profiled_replicas = st.max_profiled_replicas.max(replicas);
        let mut obs: Vec<PerfObservation> = st
            .profile
            .iter()
            .map(|(&(n, r, b), &(s, y))| PerfObservation {
                nodes: n,
                replicas: r,
                atomic_bsz: b as f64,
                compute_time_s: (s - y).max(1e-9),
                step_time_s: s,
            })
            .collect();
        // HashMap order is arbitrary; sort so the fit (and the run) is deterministic.
        obs.sort_by(|a, b| {
            (a.nodes, a.replicas, a.atomic_bsz as u64).cmp(&(
                b.nodes,
                b.replicas,
                b.atomic_bsz as u64,
            ))
        });
        // Refit only when the current model is surprised by the new measurement
        // (> 2% off); otherwise the fit would barely move and costs an LM solve.
        if let (false, Some(p)) = (new_shape, st.perf) {
            let ok = |pred: f64, seen: f64| (pred / seen - 1.0).abs() < SURPRISE;
            if ok(
                p.compute_time(st.atomic_bsz as f64),
                (step - sync).max(1e-9),
            ) && ok(p.step_time(nodes, replicas, st.atomic_bsz as f64, 0), step)
            {
                return;
            }
        }
        let warm = st.perf.as_ref();
        if let Ok(p) = crate::engine::fit_memo::memoised_fit(&obs, warm) {
            st.perf = Some(p);
            st.goodput_version += 1;
        }
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
        crate::engine::dedicated::fixed_iterations(app, (replicas * atomic * (accum + 1)) as f64)
    }
}
