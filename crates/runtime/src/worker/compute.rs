//! The compute thread: for every Step, the batch of its range of the sample stream,
//! the real compute piece by piece as the parameters arrive (on an emulated clock),
//! the padding to the emulated speed, then the Gradient (and its parts ahead of it,
//! the chunked uplink) with the step's timings and the load signals.

use super::socket::{f32_wire_bytes, GradientSink, Incoming};
use super::{Fault, LoadSignal, WorkerConfig, WorkerSummary};
use crate::data::{Data, SampleStream};
use crate::error::RuntimeError;
use crate::model::{BatchStats, Model};
use crate::protocol::{self, Message, ProtocolError, Signals, StepTiming};
use crate::sysinfo::{thread_cpu_time, ProcMonitor, ProcReading};
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvError, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What the socket thread handed over, with what arrived while a step's padding
/// waited on it (read first).
struct Inbox {
    rx: Receiver<Incoming>,
    stash: VecDeque<Incoming>,
}

impl Inbox {
    fn recv(&mut self) -> Result<Incoming, RecvError> {
        match self.stash.pop_front() {
            Some(m) => Ok(m),
            None => self.rx.recv(),
        }
    }

    /// Waits until `end_s` after `start` — the padding of an emulated step — unless
    /// the controller stops the worker meanwhile (`Shutdown`, a failure, the socket
    /// side gone): `true` then. What arrives meanwhile (a retried task's Step, its
    /// parameters) is kept for later. The padding is `time_scale ×` the compute:
    /// at `--time-scale 1e6` a millisecond of compute is 17 minutes, and a plain
    /// sleep there kept `pacer train` from exiting on SIGTERM for as long (issue 23).
    fn pad_until(&mut self, start: Instant, end_s: f64) -> bool {
        loop {
            let elapsed = start.elapsed().as_secs_f64();
            if end_s <= elapsed {
                return false;
            }
            match self
                .rx
                .recv_timeout(Duration::from_secs_f64(end_s - elapsed))
            {
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return true,
                Ok(m) => {
                    let stop = matches!(m, Incoming::Shutdown(_) | Incoming::Failed(_));
                    self.stash.push_back(m);
                    if stop {
                        return true;
                    }
                }
            }
        }
    }
}

/// A Step as the compute thread works on it.
struct StepIn {
    task: u64,
    iteration: u64,
    version: u64,
    stream_start: u64,
    len: u32,
    /// Parameter values to come as `Params` (`None`: the worker holds this version).
    params: Option<usize>,
    /// When its header was decoded: the start of the emulated step.
    step0: Instant,
    decode_s: f64,
    recv_unix_s: f64,
}

/// What a step's compute measured, for its reply.
struct Computed {
    stats: BatchStats,
    queue_s: f64,
    clock: EmulatedClock,
}

/// The compute thread's state across steps.
struct Computer<'a> {
    cfg: &'a WorkerConfig,
    peer: String,
    model: &'a dyn Model,
    data: &'a Data,
    steps: Inbox,
    out: GradientSink,
    n_params: usize,
    stream_idx: SampleStream,
    params: Vec<f32>,
    /// The model version `params` holds.
    version: u64,
    /// Values of `params` that have arrived for the current Step.
    filled: usize,
    grad: Vec<f32>,
    idx: Vec<u32>,
    xb: Vec<f32>,
    yb: Vec<u32>,
    wbuf: Vec<u8>,
    state: Vec<f32>,
    wire: Vec<u8>,
    arrivals: Vec<(usize, Instant)>,
    /// Gradient blocks sent ahead of the Gradient frame (the chunked uplink), with
    /// the emulated time (since the Step's header) their compute ended.
    parts: Vec<(std::ops::Range<usize>, f64)>,
    monitor: ProcMonitor,
    last_proc: ProcReading,
    summary: WorkerSummary,
}

/// Steps until Shutdown (the summary) or a failure.
#[allow(clippy::too_many_arguments)]
pub(super) fn compute_loop(
    cfg: &WorkerConfig,
    peer: &str,
    model: &dyn Model,
    data: &Data,
    stream_seed: u64,
    worker_id: u32,
    steps: Receiver<Incoming>,
    out: GradientSink,
) -> Result<WorkerSummary, RuntimeError> {
    let n_params = model.n_params();
    let mut monitor = ProcMonitor::default();
    let last_proc = monitor.read();
    let mut c = Computer {
        cfg,
        peer: peer.to_string(),
        model,
        data,
        steps: Inbox {
            rx: steps,
            stash: VecDeque::new(),
        },
        out,
        n_params,
        stream_idx: SampleStream::new(data.train.n, stream_seed),
        params: Vec::new(),
        version: u64::MAX,
        filled: 0,
        grad: vec![0.0f32; n_params],
        idx: Vec::new(),
        xb: Vec::new(),
        yb: Vec::new(),
        wbuf: Vec::new(),
        state: Vec::new(),
        wire: Vec::new(),
        arrivals: Vec::new(),
        parts: Vec::new(),
        monitor,
        last_proc,
        summary: WorkerSummary {
            worker_id,
            ..Default::default()
        },
    };
    loop {
        let s = match c.next_step()? {
            Ok(s) => s,
            Err(reason) => {
                c.summary.shutdown_reason = reason;
                return Ok(c.summary);
            }
        };
        c.take_params(&s)?;
        if let Some(reason) = c.scripted_fault(s.iteration, false) {
            c.summary.shutdown_reason = reason;
            return Ok(c.summary);
        }
        let computed = c.compute(&s)?;
        if let Some(reason) = c.reply(&s, computed)? {
            c.summary.shutdown_reason = reason;
            return Ok(c.summary);
        }
        c.summary.steps += 1;
    }
}

impl Computer<'_> {
    /// The next Step; `Ok(Err(reason))` on Shutdown.
    fn next_step(&mut self) -> Result<Result<StepIn, String>, RuntimeError> {
        let peer = self.peer.clone();
        let Ok(incoming) = self.steps.recv() else {
            // The socket side ended without a Shutdown.
            return Err(ProtocolError::Closed {
                peer,
                when: "waiting for a Step",
            }
            .into());
        };
        match incoming {
            Incoming::Step {
                task,
                iteration,
                version,
                stream_start,
                len,
                params,
                decoded,
                decode_s,
                recv_unix_s,
            } => Ok(Ok(StepIn {
                task,
                iteration,
                version,
                stream_start,
                len,
                params,
                step0: decoded,
                decode_s,
                recv_unix_s,
            })),
            Incoming::Shutdown(reason) => Ok(Err(reason)),
            Incoming::Failed(e) => Err(e),
            Incoming::Params(..) => Err(ProtocolError::Invalid {
                peer,
                frame: "Step",
                field: "params",
                message: "values without a Step".into(),
            }
            .into()),
        }
    }

    /// Values of this Step's parameters that are still to come (as `Params`): all
    /// of them, or none when the worker holds the Step's version.
    fn take_params(&mut self, s: &StepIn) -> Result<(), RuntimeError> {
        let n_params = self.n_params;
        self.arrivals.clear();
        if let Some(n) = s.params {
            if n != n_params {
                return Err(ProtocolError::Invalid {
                    peer: self.peer.clone(),
                    frame: "Step",
                    field: "params",
                    message: format!("{n} values, the model has {n_params}"),
                }
                .into());
            }
            self.params.resize(n_params, 0.0);
            self.filled = 0;
            self.version = s.version;
        } else if s.version != self.version {
            return Err(ProtocolError::Invalid {
                peer: self.peer.clone(),
                frame: "Step",
                field: "params",
                message: format!(
                    "omitted, but this worker holds version {}, not {}",
                    self.version, s.version
                ),
            }
            .into());
        } else {
            self.filled = n_params;
        }
        Ok(())
    }

    /// A scripted failure of this iteration (`after_parts`: the one between the
    /// gradient's parts and its Gradient); the reason to end with, if it fired.
    fn scripted_fault(&mut self, iteration: u64, after_parts: bool) -> Option<String> {
        let cfg = self.cfg;
        match cfg.fault {
            Some(Fault::DieAt(k)) if k == iteration && !after_parts => {
                if cfg.exit_on_fault {
                    std::process::exit(137);
                }
                self.out.abort();
                Some(format!("scripted death at iteration {k}"))
            }
            Some(Fault::GarbageAt(k)) if k == iteration && !after_parts => {
                let junk = vec![9u8, 0, 0, 0, 99, 1, 2, 3, 4, 5, 6, 7, 8];
                let _ = self.out.write_all(&junk);
                // The controller hangs up on us; the socket side then reports the
                // closed connection.
                let _ = self.steps.recv();
                Some(format!("scripted garbage at iteration {k}"))
            }
            Some(Fault::DieAfterPartsAt(k))
                if k == iteration && after_parts && !self.parts.is_empty() =>
            {
                if cfg.exit_on_fault {
                    std::process::exit(137);
                }
                self.out.abort();
                Some(format!("scripted death after parts at iteration {k}"))
            }
            _ => None,
        }
    }

    /// Parameter chunks until the first `need` values are there (see
    /// [`receive_params`]).
    fn params_up_to(&mut self, need: usize) -> Result<Option<Instant>, RuntimeError> {
        receive_params(
            &mut self.steps,
            &mut self.params,
            &mut self.filled,
            &mut self.arrivals,
            need,
            &self.peer,
        )
    }

    /// The real compute of a step on its emulated clock.
    ///
    /// The emulated step started when the Step's header was decoded: wait for a
    /// compute slot (if local workers share the cores), then real compute, piece by
    /// piece as the parameters arrive. Emulated clock (seconds since the header): a
    /// piece that used `cpu` seconds of this thread's CPU takes `factor · cpu`, and
    /// starts no earlier than the parameters it needs had arrived. Time the compute
    /// could not cover is a stall, reported with the time before the step (it is
    /// communication, not compute).
    fn compute(&mut self, s: &StepIn) -> Result<Computed, RuntimeError> {
        let cfg = self.cfg;
        let (slowdown, _, _) = cfg.emulation.conditions(s.iteration);
        self.parts.clear();
        let slot = cfg.emulation.slots.as_ref().map(|s| s.acquire());
        let queue_s = s.step0.elapsed().as_secs_f64();
        let factor = cfg.emulation.target_s(1.0, slowdown);
        let mut clock = EmulatedClock::new(s.step0, factor);
        let t = clock.begin();
        self.stream_idx
            .indices(s.stream_start, s.len as usize, &mut self.idx);
        self.xb.clear();
        self.yb.clear();
        for &i in &self.idx {
            self.xb.extend_from_slice(self.data.train.row(i as usize));
            self.yb.push(self.data.train.y[i as usize]);
        }
        debug_assert_eq!(self.xb.len(), self.idx.len() * self.data.train.dim);
        clock.end(t, None);
        let len = s.len as usize;
        let n_params = self.n_params;
        let model = self.model;
        let stats = match model.pipelined().filter(|_| cfg.pipeline) {
            Some(pl) => {
                pl.begin(len, &mut self.state);
                for j in 0..pl.blocks() {
                    let ready = self.params_up_to(pl.block_end(j))?;
                    let t = clock.begin();
                    pl.forward_block(&self.params, &self.xb, len, j, &mut self.state);
                    clock.end(t, ready);
                }
                let ready = self.params_up_to(n_params)?;
                let t = clock.begin();
                let stats = pl.finish_head(
                    &self.params,
                    &self.xb,
                    &self.yb,
                    &mut self.state,
                    &mut self.grad,
                );
                clock.end(t, ready);
                // The first layer's weight gradient, block by block: each block may
                // leave once the emulated clock has reached the end of its compute.
                let mut t = clock.begin();
                for j in 0..pl.grad_blocks() {
                    pl.backward_block(&self.xb, len, j, &self.state, &mut self.grad);
                    // One clock reading ends this block and begins the next.
                    t = clock.lap(t);
                    self.parts.push((pl.grad_block(j), clock.end_s));
                }
                // The last block goes with the Gradient frame itself.
                self.parts.pop();
                stats
            }
            None => {
                let ready = self.params_up_to(n_params)?;
                let t = clock.begin();
                let stats = model.loss_grad(&self.params, &self.xb, &self.yb, &mut self.grad);
                clock.end(t, ready);
                stats
            }
        };
        drop(slot);
        Ok(Computed {
            stats,
            queue_s,
            clock,
        })
    }

    /// Pads the step to its emulated time, sending the gradient's parts as their
    /// compute ends on the emulated clock, then the Gradient. `Some(reason)` when a
    /// scripted failure ended the worker in between.
    fn reply(&mut self, s: &StepIn, c: Computed) -> Result<Option<String>, RuntimeError> {
        let cfg = self.cfg;
        let Computed {
            stats,
            queue_s,
            clock,
        } = c;
        let (task, iteration) = (s.task, s.iteration);
        if let Some(Fault::PoisonFrom(p, from)) = cfg.fault {
            if iteration >= from {
                p.apply(&mut self.grad);
            }
        }
        let (cpu_s, wall_s) = (clock.cpu_s, clock.wall_s);
        // The monitor's reading belongs to a node agent, not to the step's critical
        // path: take it inside the padding.
        let proc_now = self.monitor.read();
        // --- emulated speed: pad after the real compute
        let target = clock.compute_s;
        let stall_s = clock.stall_s();
        let realtime =
            cfg.realtime_io && crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_WORKER);
        // Each block leaves at the emulated time its compute ended, never earlier.
        for j in 0..self.parts.len() {
            let (range, end_s) = self.parts[j].clone();
            if self.steps.pad_until(s.step0, end_s) {
                return self.stopped_while_padding().map(Some);
            }
            let part = Message::GradientPart {
                task,
                iteration,
                offset: range.start as u32,
                values: Vec::new(),
            };
            protocol::encode_gradient_head(&part, range.len(), &mut self.wbuf);
            self.out.write_all(&self.wbuf)?;
            self.out
                .write_all(f32_wire_bytes(&self.grad[range.clone()], &mut self.wire))?;
        }
        if let Some(reason) = self.scripted_fault(iteration, true) {
            return Ok(Some(reason));
        }
        let first = self.parts.last().map_or(0, |(r, _)| r.end);
        if self.steps.pad_until(s.step0, clock.end_s) {
            return self.stopped_while_padding().map(Some);
        }
        let step_s = s.step0.elapsed().as_secs_f64() - stall_s;
        let t_post = Instant::now();
        let signals = self.signals(iteration, proc_now);
        let t_enc = Instant::now();
        let reply = Message::Gradient {
            task,
            iteration,
            len: s.len,
            loss_sum: stats.loss_sum,
            correct: stats.correct,
            timing: StepTiming {
                cpu_s,
                wall_s,
                step_s,
                decode_s: s.decode_s,
                encode_s: 0.0,
                target_s: target,
                pre_s: s.decode_s + stall_s,
                post_s: 0.0,
                queue_s,
                recv_unix_s: s.recv_unix_s,
                send_unix_s: 0.0,
            },
            signals,
            first: first as u32,
            grad: Vec::new(),
        };
        // The frame's head; the values are written from `grad` itself.
        protocol::encode_gradient_head(&reply, self.grad.len() - first, &mut self.wbuf);
        let encode_s = t_enc.elapsed().as_secs_f64();
        // Fill in the times that encoding itself took.
        let wbuf = &mut self.wbuf;
        let off = StepTiming::ENCODE_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&encode_s.to_le_bytes());
        let off = StepTiming::POST_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&t_post.elapsed().as_secs_f64().to_le_bytes());
        let off = StepTiming::SEND_UNIX_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&protocol::unix_now_s().to_le_bytes());
        self.out.write_all(&self.wbuf)?;
        self.out
            .write_all(f32_wire_bytes(&self.grad[first..], &mut self.wire))?;
        if realtime {
            crate::sysinfo::set_thread_realtime(0);
        }
        Ok(None)
    }

    /// The worker was stopped in the middle of a step's padding: the controller's
    /// reason (the step is abandoned, as the controller abandoned its iteration).
    fn stopped_while_padding(&mut self) -> Result<String, RuntimeError> {
        while let Some(m) = self.steps.stash.pop_front() {
            match m {
                Incoming::Shutdown(reason) => return Ok(reason),
                Incoming::Failed(e) => return Err(e),
                _ => {}
            }
        }
        Err(ProtocolError::Closed {
            peer: self.peer.clone(),
            when: "in the middle of a step",
        }
        .into())
    }

    /// The load signals: at the start of this step (emulated windows of `iteration`
    /// and the /proc reading taken after the previous step), and at its end, which
    /// is the start of the next one.
    fn signals(&mut self, iteration: u64, proc_now: ProcReading) -> Signals {
        let cfg = self.cfg;
        let (slowdown, emu_cpu, emu_mem) = cfg.emulation.conditions(iteration);
        let (_, next_cpu, next_mem) = cfg.emulation.conditions(iteration + 1);
        let emulating = !cfg.emulation.windows.is_empty();
        let mix = |emu: f32, proc: f32| match cfg.load_signal {
            LoadSignal::Auto if emulating => emu,
            LoadSignal::Auto | LoadSignal::Proc => proc,
            LoadSignal::Emulated => emu,
            LoadSignal::Combined => 1.0 - (1.0 - emu) * (1.0 - proc),
        };
        let last_proc = self.last_proc;
        self.last_proc = proc_now;
        Signals {
            cpu_load: mix(emu_cpu, last_proc.cpu_busy),
            mem_load: mix(emu_mem, last_proc.mem_used),
            next_cpu_load: mix(next_cpu, proc_now.cpu_busy),
            next_mem_load: mix(next_mem, proc_now.mem_used),
            proc_cpu_busy: proc_now.cpu_busy,
            proc_mem_used: proc_now.mem_used,
            loadavg1: proc_now.loadavg1_per_core,
            slowdown: slowdown as f32,
        }
    }
}
/// Take parameter chunks until the first `need` values are there; returns when the
/// chunk completing them had arrived (`None`: they were there before this Step).
fn receive_params(
    steps: &mut Inbox,
    params: &mut [f32],
    filled: &mut usize,
    arrivals: &mut Vec<(usize, Instant)>,
    need: usize,
    peer: &str,
) -> Result<Option<Instant>, RuntimeError> {
    while *filled < need {
        match steps.recv() {
            Ok(Incoming::Params(chunk, at)) => {
                let end = *filled + chunk.len();
                if end > params.len() {
                    return Err(ProtocolError::Invalid {
                        peer: peer.to_string(),
                        frame: "Step",
                        field: "params",
                        message: format!("more than the {} values announced", params.len()),
                    }
                    .into());
                }
                params[*filled..end].copy_from_slice(&chunk);
                *filled = end;
                arrivals.push((end, at));
            }
            Ok(Incoming::Failed(e)) => return Err(e),
            Ok(_) | Err(_) => {
                return Err(ProtocolError::Closed {
                    peer: peer.to_string(),
                    when: "in the middle of a Step's parameters",
                }
                .into())
            }
        }
    }
    Ok(arrivals
        .iter()
        .find(|(end, _)| *end >= need)
        .map(|&(_, at)| at))
}

/// The emulated clock of one step (see `compute_loop`).
pub(super) struct EmulatedClock {
    pub(super) start: Instant,
    pub(super) factor: f64,
    /// Emulated time of the step so far, from `start`, stalls included.
    pub(super) end_s: f64,
    /// Emulated compute: `factor ×` the CPU time of the pieces.
    pub(super) compute_s: f64,
    pub(super) cpu_s: f64,
    pub(super) wall_s: f64,
}

impl EmulatedClock {
    pub(super) fn new(start: Instant, factor: f64) -> Self {
        EmulatedClock {
            start,
            factor,
            end_s: 0.0,
            compute_s: 0.0,
            cpu_s: 0.0,
            wall_s: 0.0,
        }
    }
    fn begin(&self) -> (Duration, Instant) {
        (thread_cpu_time(), Instant::now())
    }
    /// A piece of real compute begun at `t`, whose inputs were there at `ready`.
    fn end(&mut self, t: (Duration, Instant), ready: Option<Instant>) {
        let cpu = (thread_cpu_time().saturating_sub(t.0)).as_secs_f64();
        self.wall_s += t.1.elapsed().as_secs_f64();
        let ready_s = ready.map_or(0.0, |r| {
            r.saturating_duration_since(self.start).as_secs_f64()
        });
        self.piece(ready_s, cpu);
    }
    /// End a piece begun at `t` whose inputs were there before the step, and begin
    /// the next one (a single reading of the clocks).
    fn lap(&mut self, t: (Duration, Instant)) -> (Duration, Instant) {
        let now = self.begin();
        self.wall_s += (now.1 - t.1).as_secs_f64();
        self.piece(0.0, now.0.saturating_sub(t.0).as_secs_f64());
        now
    }
    /// A piece that used `cpu` seconds of CPU and could start `ready_s` after `start`.
    pub(super) fn piece(&mut self, ready_s: f64, cpu: f64) {
        self.cpu_s += cpu;
        self.end_s = self.end_s.max(ready_s) + self.factor * cpu;
        self.compute_s += self.factor * cpu;
    }
    /// Emulated time spent waiting for parameters.
    pub(super) fn stall_s(&self) -> f64 {
        (self.end_s - self.compute_s).max(0.0)
    }
}
