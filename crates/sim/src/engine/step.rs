//! How a running job advances: batch modes, online fits, one round of progress per kind of work.

use super::*;

impl Simulation<'_> {
    pub(super) fn batch_mode(&self, job: &SimJob, adaptive: bool) -> BatchMode {
        match (&job.work, adaptive) {
            (Work::Profiled { app }, true) => match pollux_fixed(&self.apps[*app]) {
                Some((b, r)) => BatchMode {
                    fixed: Some(b),
                    max_replicas_cap: Some(r),
                },
                None => BatchMode {
                    fixed: None,
                    max_replicas_cap: None,
                },
            },
            _ => BatchMode {
                fixed: Some(job.spec.requested_batch),
                max_replicas_cap: None,
            },
        }
    }

    pub(super) fn goodput_fn(&self, app: &AppModel, st: &JobState) -> Option<GoodputFn> {
        // Per-type applications: the model fitted to the tables of the type it runs
        // on; with online profiles, the job's own fit there (below), as for others.
        if !app.typed().is_empty() && self.config.profiles == ProfileMode::Fitted {
            let ty = self.alloc_type(&st.alloc)?;
            return Some(GoodputFn {
                perf: app.typed()[app.type_index(ty)?].perf?,
                grad: st.grad?,
                limits: limits(app),
            });
        }
        Some(GoodputFn {
            perf: st.perf?,
            grad: st.grad?,
            limits: limits(app),
        })
    }

    /// Device type of an allocation's first node (`None`: empty).
    pub(super) fn alloc_type(&self, alloc: &Allocation) -> Option<&str> {
        let &(node, _) = alloc.slots().first()?;
        let ty = self.cluster.nodes[node.0 as usize].device_type;
        Some(self.cluster.device_types[ty.0 as usize].as_str())
    }

    /// Goodput model per cluster device type of a per-type application (`None`
    /// for the types it has no tables for); empty for other jobs. Gradient
    /// statistics before the job has run: the application's at its base batch.
    pub(super) fn goodput_by_type(&self, app: &AppModel, st: &JobState) -> Vec<Option<GoodputFn>> {
        if app.typed().is_empty() {
            return Vec::new();
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
                    limits: limits(app),
                })
            })
            .collect()
    }

    /// Sets atomic batch and accumulation for the job's current allocation.
    pub(super) fn update_batch(&self, app: &AppModel, mode: BatchMode, st: &mut JobState) {
        let placement = st.alloc.placement();
        let (nodes, replicas) = (placement.len() as u32, placement.iter().sum::<u32>());
        if replicas == 0 {
            return;
        }
        let ty = self
            .alloc_type(&st.alloc)
            .filter(|_| !app.typed().is_empty());
        let (atomic, accum) = match (mode.fixed, self.goodput_fn(app, st)) {
            (Some(b), _) => split_fixed_on(app, ty, b, replicas),
            (None, Some(g)) => match g.optimize(nodes, replicas) {
                Some(c) => (c.atomic_bsz, c.accum_steps),
                None => split_fixed(
                    app,
                    app.init_batch.max(app.min_local_bsz * replicas as f64) as u32,
                    replicas,
                ),
            },
            (None, None) => {
                let b = app.init_batch.max(app.min_local_bsz * replicas as f64);
                split_fixed(app, b as u32, replicas)
            }
        };
        st.batch_version = st.goodput_version;
        let count = replicas * (accum + 1);
        st.atomic_bsz = atomic.min((app.max_batch / count as f64) as u32).max(1);
        st.accum_steps = accum;
    }

    /// Advances a profiled job by `dt` seconds starting at `now`.
    pub(super) fn step_profiled(
        &self,
        app: &AppModel,
        mode: BatchMode,
        st: &mut JobState,
        now: f64,
        mut dt: f64,
    ) {
        let replicas = st.replicas;
        let delay = st.rescale_left_s.min(dt);
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        dt -= delay;
        let mut t = now + delay;
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
            let goodput = gain / total;
            let next = app.epoch_end_progress(st.epoch);
            if st.progress + goodput * dt < next {
                st.progress += goodput * dt;
                st.attained_gpu_s += dt * replicas as f64;
                dt = 0.0;
            } else {
                // Whole seconds, as Pollux's simulator counts them.
                let delta = ((next - st.progress) / goodput).round().min(dt).max(0.0);
                st.epoch += 1;
                st.progress = next;
                st.attained_gpu_s += delta * replicas as f64;
                t += delta;
                dt -= delta;
                if st.epoch >= app.max_epochs {
                    st.completion_s = Some(t);
                }
            }
            // The goodput-optimal batch only moves when the job's model does.
            if mode.fixed.is_none() && st.goodput_version != st.batch_version {
                self.update_batch(app, mode, st);
            }
        }
    }

    /// [`Self::step_profiled`] after the restart delay for a job whose batch is fixed:
    /// the same arithmetic, with the step time of its placement and the gain of its
    /// epoch kept between rounds (they change only with the allocation or the epoch).
    pub(super) fn step_fixed(
        &self,
        app: &AppModel,
        st: &mut JobState,
        replicas: u32,
        mut t: f64,
        mut dt: f64,
    ) {
        while dt > 0.0 && st.completion_s.is_none() {
            let goodput = match st.fixed_goodput {
                Some((epoch, g)) if epoch == st.epoch => g,
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
                    st.fixed_goodput = Some((st.epoch, g));
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
    pub(super) fn observe(
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
        if let Ok(p) = fit_perf_params_from(&obs, warm) {
            st.perf = Some(p);
            st.goodput_version += 1;
        }
    }

    pub(super) fn step_duration(
        &self,
        job: &SimJob,
        duration_s: f64,
        st: &mut JobState,
        now: f64,
        mut dt: f64,
    ) {
        let replicas = st.alloc.replicas();
        let delay = st.rescale_left_s.min(dt);
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        dt -= delay;
        let req = job.spec.requested_replicas.max(1);
        let rate = replicas.min(req) as f64 / req as f64 / duration_s;
        if rate <= 0.0 || dt <= 0.0 {
            return;
        }
        let need = 1.0 - st.progress;
        if need <= rate * dt {
            let delta = need / rate;
            st.progress = 1.0;
            st.attained_gpu_s += delta * replicas as f64;
            st.completion_s = Some(now + delay + delta);
        } else {
            st.progress += rate * dt;
            st.attained_gpu_s += dt * replicas as f64;
        }
    }

    /// Advances a job whose speed is `speed.rate_of(allocation)` units/s towards
    /// `total` units (Throughput and LossCurve jobs).
    pub(super) fn step_rate(
        &self,
        speed: &SpeedTable,
        total: f64,
        st: &mut JobState,
        now: f64,
        mut dt: f64,
    ) {
        let replicas = st.alloc.replicas();
        let delay = st.rescale_left_s.min(dt);
        st.attained_gpu_s += delay * replicas as f64;
        st.rescale_left_s -= delay;
        dt -= delay;
        let rate = speed.rate_of(self.cluster, &st.alloc);
        if rate <= 0.0 || dt <= 0.0 {
            return;
        }
        let need = total - st.progress;
        if need <= rate * dt {
            let delta = need / rate;
            st.progress = total;
            st.attained_gpu_s += delta * replicas as f64;
            st.completion_s = Some(now + delay + delta);
        } else {
            st.progress += rate * dt;
            st.attained_gpu_s += dt * replicas as f64;
        }
    }
}
