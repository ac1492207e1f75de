//! The training loop: one [`Run`] holds the job's state (model, optimiser, members,
//! the job session, the sample stream's position, the report's sums) and steps it
//! iteration by iteration: boundary → stop? → batches → send → gather → update →
//! observe → evaluate. Sending and gathering are in `iteration.rs`, a lost worker's
//! retry in `retry.rs`, membership in `membership.rs`.

use super::connections::Event;
use super::iteration::Iteration;
use super::membership::{interrupted, sync_session, wait_for_first_workers, Member};
use super::report::{
    recent_rate, worker_means, EvalPoint, IterRecord, Progress, ProgressFn, Sums, TrainReport,
    WorkerStats,
};
use super::screen::{check_params, NormHistory};
use super::ControllerConfig;
use crate::checkpoint::Checkpoint;
use crate::data::Data;
use crate::error::RuntimeError;
use crate::gns::{sqr_norm, GnsTracker};
use crate::model::{Model, Quality};
use crate::optim::Optimizer;
use crate::protocol::StepTiming;
use crate::service::{reportable, JobReport, Reporter};
use pacer_control::session::{IterationObservation, JobSession, SessionConfig, WorkerKey};
use pacer_predict::speed::Exogenous;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Why the loop stops before its stop conditions hold.
pub(super) enum Halt {
    /// [`ControllerConfig::interrupt`]: the iteration in flight is abandoned, its
    /// partial aggregate never applied; the report covers the iterations completed.
    Interrupted,
    Failed(RuntimeError),
}

impl From<RuntimeError> for Halt {
    fn from(e: RuntimeError) -> Self {
        Halt::Failed(e)
    }
}

/// Eval-free clock: training time excludes evaluation and progress reporting.
pub(super) struct Clock {
    start: Instant,
    pub(super) excluded: Duration,
}

impl Clock {
    pub(super) fn now(&self) -> f64 {
        (self.start.elapsed() - self.excluded).as_secs_f64()
    }
}

/// The state of one training job across its iterations.
pub(super) struct Run<'a> {
    pub(super) cfg: &'a ControllerConfig,
    pub(super) data: &'a Data,
    pub(super) model: &'a dyn Model,
    pub(super) events: &'a mut mpsc::UnboundedReceiver<Event>,
    /// Gradient buffers the loop has accumulated, for the connections' next reads.
    pub(super) grad_pool: &'a Mutex<Vec<Vec<f32>>>,
    pub(super) report: TrainReport,
    pub(super) params: Vec<f32>,
    pub(super) optimizer: Optimizer,
    /// Model version: the optimiser steps taken.
    pub(super) version: u64,
    /// Members, by id.
    pub(super) active: Vec<Member>,
    /// Admitted by their connection, members at the next boundary.
    pub(super) joiners: Vec<Member>,
    pub(super) clock: Clock,
    pub(super) sums: Sums,
    /// The iteration's aggregate gradient `Σ (b_i / B) · g_i`.
    pub(super) acc: Vec<f32>,
    pub(super) batches: Vec<u64>,
    /// Every worker-level decision — membership, speed predictions, batches — is the
    /// job session's, the same code the scenario simulator drives.
    pub(super) session: JobSession,
    /// Position in the sample stream.
    pub(super) pos: u64,
    pub(super) next_task: u64,
    /// Iterations completed.
    pub(super) k: u64,
    pub(super) last_end: f64,
    pub(super) last_quality: Option<Quality>,
    /// The encoded parameters' buffer, reused.
    pub(super) tail: Vec<u8>,
    pub(super) wstats: BTreeMap<u32, WorkerStats>,
    /// The last optimiser step waits for the next send (`cfg.pipeline`).
    pub(super) deferred: bool,
    pub(super) gns: GnsTracker,
    pub(super) max_batch: f64,
    /// Reports to a scheduler service, when there is one.
    pub(super) reporter: Option<Reporter>,
    /// Mean training loss of the last iteration.
    pub(super) last_loss: Option<f64>,
    /// Accepted gradients' norms, the reference of the screen (`screen.rs`).
    pub(super) norms: NormHistory,
}

/// Runs the job until a stop condition holds; the report and the members to shut
/// down.
pub(super) async fn train_loop(
    cfg: &ControllerConfig,
    data: &Data,
    model: &dyn Model,
    events: &mut mpsc::UnboundedReceiver<Event>,
    progress: &mut Option<ProgressFn>,
    grad_pool: &Mutex<Vec<Vec<f32>>>,
    resume: Option<Checkpoint>,
) -> Result<(TrainReport, Vec<Member>), RuntimeError> {
    let b_total = cfg.global_batch;
    let (params, optimizer, k0, pos0) = match resume {
        Some(c) => {
            if let Some(dir) = &cfg.checkpoint_dir {
                eprintln!(
                    "pacer controller: resuming from {} at step {} ({} samples)",
                    Checkpoint::path(dir).display(),
                    c.meta.step,
                    c.meta.samples
                );
            }
            (c.params, c.optimizer, c.meta.step, c.meta.samples)
        }
        None => {
            let params = model.init(cfg.seed, &data.train);
            let optimizer = Optimizer::new(cfg.optimizer, params.len());
            (params, optimizer, 0, 0)
        }
    };
    let reporter = match &cfg.service {
        Some(env) => Some(Reporter::start(env.clone(), k0, pos0)?),
        None => None,
    };
    let mut report = TrainReport::start(cfg, model.name(), &data.spec);
    let joiners = wait_for_first_workers(cfg, events, &mut report).await?;
    report.workers = joiners.len();
    let clock = Clock {
        start: Instant::now(),
        excluded: Duration::ZERO,
    };
    let session = JobSession::new(SessionConfig::new(
        b_total,
        &cfg.controller,
        &cfg.predictor,
        cfg.seed,
    ))
    .map_err(|e| RuntimeError::config("controller/predictor", e.to_string()))?;
    let last_end = clock.now();
    let mut run = Run {
        cfg,
        data,
        model,
        events,
        grad_pool,
        report,
        acc: vec![0.0f32; params.len()],
        params,
        optimizer,
        version: k0,
        active: Vec::new(),
        joiners,
        clock,
        sums: Sums::default(),
        batches: Vec::new(),
        session,
        pos: pos0,
        next_task: 0,
        k: k0,
        last_end,
        last_quality: None,
        tail: Vec::new(),
        wstats: BTreeMap::new(),
        deferred: false,
        gns: GnsTracker::new(cfg.gns_smoothing, b_total, cfg.record_grads, cfg.verbose),
        max_batch: cfg
            .max_global_batch
            .unwrap_or_else(|| (16 * b_total).min(data.train.n as u64))
            .max(b_total) as f64,
        reporter,
        last_loss: None,
        norms: NormHistory::default(),
    };
    match run.iterate(progress).await {
        Ok(()) => {}
        Err(Halt::Interrupted) => run.report.interrupted = true,
        Err(Halt::Failed(e)) => return Err(e),
    }
    run.finish()
}

/// What the batch decision of an iteration produced besides the batches.
pub(super) struct Decision {
    /// Each member's predicted speed, by worker id: a worker lost in the iteration
    /// shifts the positions in `active`, and comparing by position then set one
    /// worker's prediction against another's speed in the speed MAPE.
    pub(super) predicted: HashMap<u32, f64>,
    pub(super) control_s: f64,
}

impl Run<'_> {
    /// Iterations until a stop condition holds.
    async fn iterate(&mut self, progress: &mut Option<ProgressFn>) -> Result<(), Halt> {
        let cfg = self.cfg;
        loop {
            if self.report.interrupted {
                return Ok(());
            }
            self.boundary();
            if cfg.verbose && self.k > 0 && self.k.is_multiple_of(50) {
                // A heartbeat scripts can wait for (`scripts/multihost.sh` kills a worker
                // at iteration 200 by it).
                eprintln!(
                    "pacer controller: iteration {}, {} worker(s)",
                    self.k,
                    self.active.len()
                );
            }
            if self.active.is_empty() {
                self.await_capacity(false).await?;
                self.last_end = self.clock.now();
            }

            // ---- stop conditions
            let reached = self.report.reached && cfg.stop_at_target;
            if interrupted(cfg) {
                return Err(Halt::Interrupted);
            }
            if reached
                || self.clock.now() >= cfg.max_time_s
                || cfg.max_iterations.is_some_and(|m| self.k >= m)
            {
                return Ok(());
            }

            let decision = self.decide()?;
            let mut it = self.send().await;
            self.gather(&mut it).await?;
            let now = self.update(&mut it);
            let (observed, next_signals) = self.observe(&mut it, &decision);
            let t_eval = Instant::now();
            self.evaluate(now)?;
            if self.reporter.as_ref().is_some_and(Reporter::due) {
                self.send_report(false);
            }
            if let Some(p) = progress.as_mut() {
                p(&Progress {
                    iteration: self.k,
                    epoch: self.pos as f64 / self.data.train.n as f64,
                    train_time_s: now,
                    accuracy: self.last_quality.map(|q| q.accuracy),
                    batches: self
                        .active
                        .iter()
                        .map(|m| m.id)
                        .zip(self.batches.iter().copied())
                        .collect(),
                    noise_scale: self.gns.noise_scale(),
                    observed,
                    next_signals,
                });
            }
            self.clock.excluded += t_eval.elapsed();
        }
    }

    /// The batches of this iteration: the session's decision (or the fixed batches).
    fn decide(&mut self) -> Result<Decision, Halt> {
        let (cfg, b_total, k) = (self.cfg, self.cfg.global_batch, self.k);
        let t_control = Instant::now();
        let n = self.active.len();
        sync_session(&mut self.session, &self.active);
        let decision = self
            .session
            .decide()
            .map_err(|e| RuntimeError::config("global_batch", e.to_string()))?;
        self.batches.clear();
        self.batches.extend_from_slice(decision.batches);
        let predicted = decision.predicted_speed.to_vec();
        self.report.controller_variant = self.session.controller_variant().to_string();
        if let Some(f) = &cfg.fixed_batches {
            if f.len() == n && f.iter().sum::<u64>() == b_total {
                self.batches.clone_from(f);
                self.session
                    .override_batches(f)
                    .expect("length and sum checked");
            } else if k == 0 {
                return Err(RuntimeError::config(
                    "fixed_batches",
                    format!(
                        "{} must have one entry per worker ({n}) summing to the global batch {b_total}",
                        f.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                    ),
                )
                .into());
            }
        }
        let predicted = self.active.iter().map(|m| m.id).zip(predicted).collect();
        Ok(Decision {
            predicted,
            control_s: t_control.elapsed().as_secs_f64(),
        })
    }

    /// The optimiser step (deferred to the next send when pipelining), the stream's
    /// position and the iteration count; the training time now.
    fn update(&mut self, it: &mut Iteration) -> f64 {
        let cfg = self.cfg;
        // An iteration that lost a worker is not observed (its retried ranges are not
        // one worker's batch; conservative when the lost worker had already answered).
        self.gns.gathered(
            self.k,
            (!it.disrupted).then(|| std::mem::take(&mut it.local_norms)),
        );
        for b in it.blocks.drain(..) {
            super::connections::recycle(self.grad_pool, b.3);
        }
        if let Some(t) = it.shared_tail.take() {
            self.tail = std::sync::Arc::try_unwrap(t).unwrap_or_default();
        }
        let t_opt = Instant::now();
        if self.report.grads.len() < cfg.record_grads {
            self.report.grads.push(self.acc.clone());
        }
        // With pipelining the step is deferred to the next send. An evaluation in
        // between steps a copy (evaluation time, not training time): applying the
        // step here instead put a whole Adam step on every tenth iteration's critical
        // path (+0.6 points of overhead at time scale 3, experiments/runtime/RESULTS.md).
        if cfg.pipeline {
            self.deferred = true;
        } else {
            self.optimizer.step(&mut self.params, &self.acc);
        }
        self.version += 1;
        it.optimizer_s = t_opt.elapsed().as_secs_f64() + it.overlapped_opt_s;
        self.pos += cfg.global_batch;
        self.k += 1;
        if it.weight_sum > 0 {
            self.last_loss = Some(it.loss_sum / it.weight_sum as f64);
        }
        let now = self.clock.now();
        it.iter_s = now - self.last_end;
        self.last_end = now;
        now
    }

    /// Each member's measured speed to the session (and the report's sums); what the
    /// session observed and the signals for the next iteration, for [`Progress`].
    fn observe(
        &mut self,
        it: &mut Iteration,
        decision: &Decision,
    ) -> (Vec<IterationObservation>, Vec<(u32, Exogenous)>) {
        let mut max_step: f64 = 0.0;
        let mut sum_speed = 0.0;
        let mut iter_speeds = Vec::with_capacity(self.active.len());
        sync_session(&mut self.session, &self.active);
        let mut observed = Vec::with_capacity(self.active.len());
        let mut next_signals = Vec::with_capacity(self.active.len());
        for m in self.active.iter_mut() {
            let Some((len, timing, _, signals)) = it.main_results.get(&m.id) else {
                continue;
            };
            let speed = *len as f64 / timing.step_s.max(1e-9);
            if m.speed > 0.0 {
                if let Some(p) = decision.predicted.get(&m.id) {
                    if *p > 0.0 && p.is_finite() {
                        let ape = (p - speed).abs() / speed;
                        self.sums.ape += ape;
                        self.sums.ape_n += 1;
                        self.sums.apes.push(ape as f32);
                    }
                }
            }
            let key = WorkerKey(u64::from(m.id));
            // A time no clock measures (a peer's garbage) teaches no predictor.
            let measured = timing.step_s.is_finite() && timing.step_s >= 0.0;
            if measured {
                observed.push(IterationObservation {
                    worker: key,
                    samples: *len,
                    compute_s: timing.step_s,
                    signals: Exogenous {
                        cpu_load: signals.cpu_load as f64,
                        mem_load: signals.mem_load as f64,
                    },
                });
            }
            let next = Exogenous {
                cpu_load: signals.next_cpu_load as f64,
                mem_load: signals.next_mem_load as f64,
            };
            self.session.set_next_signals(key, next).expect("synced");
            next_signals.push((m.id, next));
            m.speed = speed;
            let w = self.wstats.entry(m.id).or_insert_with(|| WorkerStats {
                id: m.id,
                name: m.name.clone(),
                addr: m.addr.to_string(),
                ..Default::default()
            });
            w.steps += 1;
            w.samples += *len;
            w.mean_sent_ms +=
                (f64::from_bits(m.written.load(Ordering::Relaxed)) - it.t_sent_unix).max(0.0) * 1e3;
            w.mean_downlink_ms += (timing.recv_unix_s - it.t_sent_unix) * 1e3;
            if let Some(a) = it.arrivals.get(&m.id) {
                w.mean_uplink_ms += (a - timing.send_unix_s) * 1e3;
            }
            // Sums for now; divided by `steps` at the end.
            w.mean_cpu_ms += timing.cpu_s * 1e3;
            w.mean_step_ms += timing.step_s * 1e3;
            w.mean_samples_per_s += speed;
            w.mean_cpu_load += signals.cpu_load as f64;
            w.max_cpu_load = w.max_cpu_load.max(signals.cpu_load as f64);
            w.mean_proc_cpu_busy += signals.proc_cpu_busy as f64;
            w.mean_proc_mem_used += signals.proc_mem_used as f64;
            w.mean_loadavg1 += signals.loadavg1 as f64;
            let overran = overran(timing);
            if overran {
                w.overruns += 1;
            }
            max_step = max_step.max(timing.step_s);
            sum_speed += speed;
            iter_speeds.push((m.id, speed));
            self.sums.steps += 1;
            if overran {
                self.sums.overruns += 1;
            }
        }
        self.session
            .observe(&observed)
            .expect("members synced and compute times checked");
        if it.disrupted {
            self.report.disrupted_iterations += 1;
        } else if sum_speed > 0.0 {
            self.count_iteration(it, decision, max_step, sum_speed, iter_speeds);
        }
        self.report.final_batches.clone_from(&self.batches);
        // Paired when the Steps went out: a worker lost since shifted `active`.
        self.report.final_batches_named = std::mem::take(&mut it.named_batches);
        (observed, next_signals)
    }

    /// An undisturbed iteration's times into the sums.
    fn count_iteration(
        &mut self,
        it: &Iteration,
        decision: &Decision,
        max_step: f64,
        sum_speed: f64,
        iter_speeds: Vec<(u32, f64)>,
    ) {
        let b_total = self.cfg.global_batch;
        let iter_s = it.iter_s;
        let sums = &mut self.sums;
        sums.iters += 1;
        sums.iter_s += iter_s;
        sums.compute_s += max_step;
        let balanced = b_total as f64 / sum_speed;
        sums.balanced_s += balanced;
        sums.ideal_s += balanced + (iter_s - max_step).max(0.0);
        sums.records.push(IterRecord {
            batch: b_total as f64,
            overhead_s: (iter_s - max_step).max(0.0),
            speeds: iter_speeds,
        });
        sums.control_s += decision.control_s;
        sums.encode_s += it.encode_s;
        // Without the controller's own work between the Step chunks (counted in
        // encode and optimiser).
        sums.wait_s += (it.gather_s() - it.send_work_s).max(0.0);
        sums.gather_s += it.gather_s();
        sums.downlink_s += it.last_links.0;
        sums.uplink_s += it.last_links.1;
        let (timing, decode_s, agg_s): &(StepTiming, f64, f64) = &it.last_piece;
        sums.last_step_s += timing.step_s;
        sums.worker_pre_s += timing.pre_s;
        sums.worker_decode_s += timing.decode_s;
        sums.worker_post_s += timing.post_s;
        sums.worker_encode_s += timing.encode_s;
        sums.ctrl_decode_s += decode_s;
        sums.aggregate_last_s += agg_s;
        sums.aggregate_total_s += it.aggregate_total_s;
        sums.optimizer_s += it.optimizer_s;
    }

    /// Evaluates on the test set every `eval_every` iterations and at the last
    /// (not training time; the caller excludes it).
    fn evaluate(&mut self, now: f64) -> Result<(), RuntimeError> {
        let (cfg, k) = (self.cfg, self.k);
        let stopping = cfg.max_iterations.is_some_and(|m| k >= m) || now >= cfg.max_time_s;
        if !(k.is_multiple_of(cfg.eval_every) || stopping) {
            return Ok(());
        }
        let stepped;
        // The step the evaluated model needs is training work: a target reached
        // here is reached that much later.
        let mut step_s = 0.0;
        let eval_params = if self.deferred {
            let mut o = self.optimizer.clone();
            let mut p = self.params.clone();
            let t = Instant::now();
            o.step(&mut p, &self.acc);
            step_s = t.elapsed().as_secs_f64();
            stepped = p;
            &stepped
        } else {
            &self.params
        };
        // Never go on (or report, or checkpoint) with a poisoned model.
        check_params(eval_params, k, "at an evaluation")?;
        // A long computation: not at real-time priority.
        let realtime = cfg.realtime_io && crate::sysinfo::thread_is_realtime();
        if realtime {
            crate::sysinfo::set_thread_realtime(0);
        }
        let q = self
            .model
            .evaluate(eval_params, &self.data.train, &self.data.test);
        if realtime {
            crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_CONTROLLER);
        }
        let report = &mut self.report;
        super::report::push_capped(
            &mut report.accuracy_curve,
            EvalPoint {
                iteration: k,
                train_time_s: now,
                accuracy: q.accuracy,
                loss: q.loss,
            },
        );
        report.best_accuracy = report.best_accuracy.max(q.accuracy);
        if self.gns.waiting() {
            self.gns.aggregate(sqr_norm(&self.acc));
        }
        self.gns
            .record_point(k, recent_rate(&self.sums.records).as_ref(), self.max_batch);
        if let Some(target) = cfg.target_accuracy {
            if q.accuracy >= target && !report.reached {
                report.reached = true;
                report.time_to_target_s = Some(now + step_s);
                report.iterations_to_target = Some(k);
            }
        }
        self.last_quality = Some(q);
        Ok(())
    }

    /// The final numbers: the deferred step applied, the last evaluation (unless the
    /// last iteration had one), the noise scale and goodput-optimal batch, the means.
    fn finish(mut self) -> Result<(TrainReport, Vec<Member>), RuntimeError> {
        let k = self.k;
        if self.deferred {
            self.optimizer.step(&mut self.params, &self.acc);
        }
        check_params(&self.params, k, "at the end of the run")?;
        let mut report = self.report;
        let q = match (report.accuracy_curve.last(), self.last_quality) {
            (Some(p), Some(q)) if p.iteration == k => q,
            _ => {
                let t = Instant::now();
                let q = self
                    .model
                    .evaluate(&self.params, &self.data.train, &self.data.test);
                self.clock.excluded += t.elapsed();
                super::report::push_capped(
                    &mut report.accuracy_curve,
                    EvalPoint {
                        iteration: k,
                        train_time_s: self.clock.now(),
                        accuracy: q.accuracy,
                        loss: q.loss,
                    },
                );
                q
            }
        };
        let gns = &mut self.gns;
        let max_batch = self.max_batch;
        if gns.waiting() {
            gns.aggregate(sqr_norm(&self.acc));
        }
        let rate = recent_rate(&self.sums.records);
        if gns.curve.last().is_none_or(|p| p.iteration != k) {
            gns.record_point(k, rate.as_ref(), max_batch);
        }
        report.max_global_batch = max_batch as u64;
        if let Some(c) = rate.and_then(|r| gns.best_batch(&r, max_batch)) {
            report.goodput_optimal_batch = Some(c.batch);
            report.goodput_gain = Some(c.gain);
        }
        report.gradient_noise_scale = gns.noise_scale();
        report.grad_sqr = gns.grad_sqr();
        report.trace_cov = gns.trace_cov();
        report.gns_iterations = gns.observed;
        report.gns_skipped = gns.skipped;
        report.noise_scale_curve = std::mem::take(&mut gns.curve);
        report.gns_inputs = std::mem::take(&mut gns.inputs);
        report.final_accuracy = q.accuracy;
        report.final_loss = q.loss;
        report.best_accuracy = report.best_accuracy.max(q.accuracy);
        report.iterations = k;
        report.epochs = self.pos as f64 / self.data.train.n as f64;
        report.train_time_s = self.last_end;
        report.fill_timing(&mut self.sums);
        report.worker_stats = worker_means(std::mem::take(&mut self.wstats));
        let interrupted = report.interrupted;
        self.report = report;
        // Stopped by a signal: the state after `k` steps, for the next start.
        if let (Some(dir), true) = (&self.cfg.checkpoint_dir, interrupted) {
            let c = Checkpoint::of_run(
                self.data,
                self.cfg,
                k,
                self.pos,
                self.params.clone(),
                self.optimizer.clone(),
            );
            let path = c.save(dir)?;
            eprintln!(
                "pacer controller: checkpoint of step {k} ({} samples) written to {}",
                self.pos,
                path.display()
            );
        }
        if let Some(last) = self.job_report(!interrupted) {
            if let Some(r) = self.reporter.take() {
                r.finish(last);
            }
        }
        let mut report = self.report;
        report.final_params = self.params;
        self.active.append(&mut self.joiners);
        Ok((report, self.active))
    }

    /// A report for the service of where the run stands (closing the report window);
    /// `None` without a service, or without a worker (nothing trains; the service
    /// takes at least one replica).
    fn job_report(&mut self, done: bool) -> Option<JobReport> {
        if self.active.is_empty() {
            return None;
        }
        let r = self.reporter.as_mut()?;
        let (time_s, throughput, step_time_s) = r.close_window(self.k, self.pos);
        Some(JobReport {
            step: self.k,
            samples: self.pos,
            time_s,
            replicas: self.active.len().min(u32::MAX as usize) as u32,
            device_type: r.device_type.clone(),
            global_batch: self.cfg.global_batch,
            local_batches: self.batches.clone(),
            throughput,
            step_time_s,
            noise_scale: reportable(self.gns.noise_scale()),
            loss: reportable(self.last_loss),
            done,
        })
    }

    /// Hands the report of now to the reporting thread.
    fn send_report(&mut self, done: bool) {
        if let Some(j) = self.job_report(done) {
            if let Some(r) = &self.reporter {
                r.offer(j);
            }
        }
    }
}

/// A step overran: the worker's real work — waiting for a compute slot (and for its
/// compute thread to wake) plus the real compute — took longer than the emulated
/// target, so the padding could not hide the contention. 2 % slack for clock reads.
/// Not `step_s > target_s`: the padded step always ends a little after its target
/// (the sleep's timer slack, ~50–100 µs), which on sub-millisecond steps counted
/// every padded step as an overrun.
fn overran(t: &StepTiming) -> bool {
    t.target_s > 0.0 && t.queue_s + t.wall_s > t.target_s * 1.02
}
