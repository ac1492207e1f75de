//! The controller service: admits workers, runs synchronous data-parallel iterations
//! with per-worker batches, aggregates gradients weighted by batch, applies the
//! optimiser, evaluates, and handles workers that join, leave or die.
//!
//! ## One iteration (the same order as the scenario simulator, `pacer-workersim`)
//! Steps 1, 2 and the observation of step 5 are the job session's
//! ([`pacer_control::session::JobSession`]), the code the scenario simulator drives:
//! 1. Boundary: admit workers whose handshake finished, drop the dead; the session's
//!    membership follows. A change of membership rebuilds the batching problem and the
//!    controller and re-balances `B` over the members: in proportion to the predicted
//!    speeds (newcomers at the mean prediction), or equal shares for `uniform`.
//! 2. Otherwise each member's predictor predicts its speed from the signals it
//!    reported for the start of this iteration, and the controller rewrites the
//!    batches from the last compute times and those predictions.
//! 3. Worker `i` gets the next `b_i` positions of the sample stream and the model.
//! 4. Gradients are accumulated as they arrive: `g += (b_i / B) · g_i`, block by
//!    block when a worker sends its gradient in parts (the chunked uplink), so that
//!    after the last worker's step only its last, small block is left to read and sum.
//! 5. The optimiser steps; the session observes each worker's speed
//!    `b_i / step_s_i` with the signals of the iteration's start.
//! 6. The gradient noise scale ([`crate::gns`]): each task's `|g_i|²` is summed in
//!    the accumulation of step 4, the aggregate's `|g|²` when the next iteration's
//!    gather clears it; an iteration that lost a worker is not observed.
//!
//! ## A worker lost in the middle of an iteration: retried
//! Its tasks are split among the survivors (by predicted speed) with the same model
//! version, and the iteration completes on exactly the samples it was given. Why retry
//! rather than re-weight over the survivors: the step is then the very step BSP would
//! have taken (same samples, same weights `len/B` summing to 1), the epoch still
//! covers every sample once, and a failure costs one extra round of a fraction of a
//! batch instead of silently changing the effective batch of one step. Results are
//! accepted only for a task that is still pending and assigned to the sender, so a
//! late answer from a worker declared dead can never be counted twice. Parts of a
//! gradient are summed into the aggregate as they arrive, and every block summed in
//! the iteration is kept until its end: if a worker is lost after some parts of its
//! task arrived, the aggregate is rebuilt from the blocks of the other tasks (rare,
//! and exact: the partial gradient is never in the sum, the retried range counts
//! once). Buffering each task's parts and adding them only when its last block
//! arrived would have been as exact but would leave the whole sum of the last
//! worker's gradient on the critical path.

use crate::data::Data;
use crate::error::RuntimeError;
use crate::gns::{
    accumulate_sqr, clear_sqr, sqr_norm, GnsInput, GnsTracker, LocalNorm, NoiseScalePoint, StepRate,
};
use crate::model::{Model, ModelSpec, Quality};
use crate::optim::{OptimSpec, Optimizer};
use crate::protocol::{self, JobSpec, Message, ProtocolError, Signals, StepTiming};
use pacer_control::session::{IterationObservation, JobSession, SessionConfig, WorkerKey};
use pacer_control::worker::{apportion, make_controller, BatchBounds, BatchProblem};
use pacer_predict::speed::{make_predictor, Exogenous};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub model: ModelSpec,
    pub optimizer: OptimSpec,
    pub global_batch: u64,
    /// `pacer_control::worker` registry name.
    pub controller: String,
    /// `pacer_predict::speed` registry name.
    pub predictor: String,
    /// Fixed batches in admission order, bypassing the controller (tests, ablations).
    pub fixed_batches: Option<Vec<u64>>,
    pub target_accuracy: Option<f64>,
    /// Stop at the first evaluation that reaches the target.
    pub stop_at_target: bool,
    pub max_time_s: f64,
    pub max_iterations: Option<u64>,
    /// Evaluate every this many iterations (evaluation time is not training time).
    pub eval_every: u64,
    pub seed: u64,
    /// Wait for this many workers before the first iteration.
    pub min_workers: usize,
    /// A task unanswered for this long marks its worker dead.
    pub worker_timeout_s: f64,
    /// How long to wait for the first `min_workers` workers.
    pub join_timeout_s: f64,
    /// How long to wait for a worker to join once every worker is gone (the
    /// controller says so on stderr at once, then fails if none came).
    pub rejoin_timeout_s: f64,
    /// A connection must send its `Hello` within this many seconds; it is also how
    /// long any frame of a handshake may stall.
    pub hello_timeout_s: f64,
    /// Connections still in their handshake (accepted, not yet admitted) at most;
    /// more are refused at once. Each holds at most [`protocol::MAX_HELLO_FRAME`]
    /// bytes before its `Hello` and [`protocol::MAX_CONTROL_FRAME`] after it.
    pub max_pending: usize,
    /// Set (e.g. by a SIGINT handler, [`crate::interrupt`]) to stop: the run ends at
    /// once, abandoning the iteration in flight, and the report says `interrupted`.
    pub interrupt: Option<&'static std::sync::atomic::AtomicBool>,
    /// Keep the ledger of accumulated ranges (elasticity test).
    pub record_ledger: bool,
    /// Keep the aggregated gradients (and the gradient-noise estimator's inputs) of
    /// the first this many iterations.
    pub record_grads: usize,
    /// EMA decay per iteration of the gradient-noise-scale estimate
    /// ([`crate::gns::SMOOTHING`] by default: a window of ~100 iterations).
    pub gns_smoothing: f64,
    /// Print refusals and membership changes to stderr.
    pub verbose: bool,
    /// Write Steps in chunks, the connections taking turns (off: each whole, one
    /// connection after the other).
    pub pipeline: bool,
    /// The runtime's threads ask for real-time priority (`serve_blocking`,
    /// `train_local`; see `sysinfo::set_thread_realtime`); evaluation drops it.
    pub realtime_io: bool,
    /// Largest global batch the reported goodput-optimal batch may take; `None`:
    /// 16 × `global_batch`, at most the training set.
    pub max_global_batch: Option<u64>,
}

impl ControllerConfig {
    /// Defaults for `model` (its own optimiser).
    pub fn new(model: ModelSpec) -> Result<Self, RuntimeError> {
        let m = model
            .build()
            .ok_or_else(|| RuntimeError::config("model", "unknown model kind"))?;
        Ok(ControllerConfig {
            model,
            optimizer: m.default_optimizer(),
            global_batch: 512,
            controller: "lbbsp".into(),
            predictor: "ewma".into(),
            fixed_batches: None,
            target_accuracy: None,
            stop_at_target: true,
            max_time_s: 600.0,
            max_iterations: None,
            eval_every: 10,
            seed: 1,
            min_workers: 1,
            worker_timeout_s: 120.0,
            join_timeout_s: 120.0,
            rejoin_timeout_s: DEFAULT_REJOIN_TIMEOUT_S,
            hello_timeout_s: DEFAULT_HELLO_TIMEOUT_S,
            max_pending: DEFAULT_MAX_PENDING,
            interrupt: None,
            record_ledger: false,
            record_grads: 0,
            gns_smoothing: crate::gns::SMOOTHING,
            verbose: false,
            pipeline: true,
            realtime_io: true,
            max_global_batch: None,
        })
    }
}

/// Default of [`ControllerConfig::rejoin_timeout_s`].
pub const DEFAULT_REJOIN_TIMEOUT_S: f64 = 30.0;
/// Default of [`ControllerConfig::hello_timeout_s`].
pub const DEFAULT_HELLO_TIMEOUT_S: f64 = 10.0;
/// Default of [`ControllerConfig::max_pending`].
pub const DEFAULT_MAX_PENDING: usize = 256;
/// How long a connection may take to send `Ready` after `Welcome` (loading a dataset
/// from a slow disk).
const READY_TIMEOUT_S: f64 = 600.0;
/// How often the training loop looks at [`ControllerConfig::interrupt`] while it
/// waits for events.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);
/// Refusals kept in the report; more are counted in its last line.
const MAX_REJECTED_LISTED: usize = 1000;

/// Progress after each iteration (for a progress bar).
#[derive(Debug, Clone)]
pub struct Progress {
    pub iteration: u64,
    pub epoch: f64,
    pub train_time_s: f64,
    pub accuracy: Option<f64>,
    /// (worker id, local batch) of the iteration that just ran.
    pub batches: Vec<(u32, u64)>,
    /// Gradient noise scale so far (samples; one iteration behind, see [`crate::gns`]).
    pub noise_scale: Option<f64>,
    /// What the job session observed of the iteration that just ran (a replay of these
    /// through a fresh [`JobSession`] decides the same batches; test
    /// `the_runtime_decides_what_the_session_decides_on_a_replay`).
    pub observed: Vec<IterationObservation>,
    /// The load signals each worker reported for the start of its next iteration.
    pub next_signals: Vec<(u32, Exogenous)>,
}

/// A callback called after every iteration.
pub type ProgressFn = Box<dyn FnMut(&Progress) + Send>;

/// One accumulated gradient: which stream range, from whom, in which iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    pub iteration: u64,
    pub stream_start: u64,
    pub len: u64,
    pub worker: u32,
    pub retry: bool,
}

/// A test-set evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EvalPoint {
    pub iteration: u64,
    pub train_time_s: f64,
    pub accuracy: f64,
    pub loss: f64,
}

/// Where an iteration's time goes: mean milliseconds per undisturbed iteration.
/// `iter = control + encode_params + wait + aggregate + optimizer + other`, and the
/// wait for the last gradient splits into that worker's `pre + step + post`, the
/// controller's decode of it, and `network` (transfer both ways, wake-ups, queuing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Overhead {
    pub iter_ms: f64,
    /// Slowest worker's step (real compute + emulation padding): not overhead.
    pub compute_ms: f64,
    /// Controller: predictions + batch decision.
    pub control_ms: f64,
    /// Controller: encoding the parameters (once for all workers).
    pub encode_params_ms: f64,
    /// Controller: from the Steps queued to the last gradient received, less its
    /// own work meanwhile (the deferred optimiser step and parameter encoding, in
    /// their columns), so that `iter` adds up.
    pub wait_ms: f64,
    /// The whole interval from the Steps queued to the last gradient received
    /// (`wait` plus the controller's work meanwhile): what the last worker's
    /// `pre + step + post`, the controller's decode and `network` add up to.
    pub gather_ms: f64,
    /// The last worker to answer: its step, the part before it (decoding the
    /// parameters, of which `worker_decode_ms`) and after it (signals, encoding the
    /// gradient, of which `worker_encode_ms`).
    pub last_step_ms: f64,
    pub worker_pre_ms: f64,
    pub worker_decode_ms: f64,
    pub worker_post_ms: f64,
    pub worker_encode_ms: f64,
    /// Controller: decoding the last gradient.
    pub ctrl_decode_ms: f64,
    /// `gather − last_step − worker_pre − worker_post − ctrl_decode`: the time
    /// outside the last worker's own interval (transfers both ways, wake-ups,
    /// queuing). Each term is a duration on one clock, so it is ≥ 0 up to timer
    /// noise, on one host or across hosts.
    pub network_ms: f64,
    /// Of the last worker: Steps queued → its Step fully read (includes the queue
    /// of writes to the other workers and its thread's wake-up), and its Gradient
    /// written → fully read by the controller. From wall clocks on both sides:
    /// exact on one host, offset by the clock difference across hosts.
    pub downlink_ms: f64,
    pub uplink_ms: f64,
    /// Controller: accumulating the last gradient (the earlier ones overlap waiting).
    pub aggregate_ms: f64,
    /// Controller: all accumulations of the iteration (CPU, mostly off the path).
    pub aggregate_total_ms: f64,
    pub optimizer_ms: f64,
    /// Bookkeeping between iterations.
    pub other_ms: f64,
}

/// What one worker did and reported (means over its main tasks): the NARX inputs
/// as the controller saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkerStats {
    pub id: u32,
    pub name: String,
    pub addr: String,
    pub steps: u64,
    pub samples: u64,
    pub mean_batch: f64,
    /// Thread CPU time of the real compute.
    pub mean_cpu_ms: f64,
    /// Emulated step (compute + padding).
    pub mean_step_ms: f64,
    pub mean_samples_per_s: f64,
    /// Load signal the predictor saw at the start of the worker's iterations.
    pub mean_cpu_load: f64,
    pub max_cpu_load: f64,
    /// /proc: machine CPU busy share, memory in use, 1-minute load per core.
    pub mean_proc_cpu_busy: f64,
    pub mean_proc_mem_used: f64,
    pub mean_loadavg1: f64,
    /// Steps whose real work exceeded their emulated target (see
    /// [`TrainReport::overrun_frac`]).
    pub overruns: u64,
    /// Controller: Steps queued → the first chunk of this worker's Step written
    /// into its socket.
    pub mean_sent_ms: f64,
    /// Steps queued → this worker's Step fully read by it (wall clocks of both
    /// sides: exact on one host).
    pub mean_downlink_ms: f64,
    /// Its Gradient written → fully read by the controller.
    pub mean_uplink_ms: f64,
}

/// The result of a training run.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    pub controller: String,
    pub controller_variant: String,
    pub predictor: String,
    pub model: String,
    pub dataset: String,
    pub workers: usize,
    pub global_batch: u64,
    pub optimizer: OptimSpec,
    pub target_accuracy: Option<f64>,
    pub reached: bool,
    pub time_to_target_s: Option<f64>,
    pub iterations_to_target: Option<u64>,
    pub iterations: u64,
    pub epochs: f64,
    pub final_accuracy: f64,
    pub final_loss: f64,
    pub best_accuracy: f64,
    pub train_time_s: f64,
    pub mean_iter_s: f64,
    /// Mean iteration time of an oracle balancer that knows every worker's true
    /// speed but not the next step's jitter — the scenario simulator's oracle. Per
    /// iteration `k`: worker `i`'s true speed `v̄_ik` is the median of its measured
    /// speeds `v_i = b_i / step_s_i` over iterations `k ± ORACLE_WINDOW`; the
    /// oracle gives it `b*_i = B · v̄_ik / Σ_j v̄_jk` samples, which take
    /// `b*_i / v_ik` at the speed it actually had; the iteration lasts the slowest
    /// of those plus this iteration's `overhead_k` (iteration time − slowest step),
    /// the synchronisation cost the simulator's oracle pays as `sync_s`.
    pub ideal_iter_s: f64,
    /// `ideal_iter_s / mean_iter_s`: how close the batches came to the oracle's balance.
    pub efficiency: f64,
    /// Stricter, with hindsight no balancer has: the oracle also knows each
    /// iteration's jitter, i.e. mean of `B / Σ_i v_ik + overhead_k` over the mean
    /// iteration time (`v_ik` measured in the same iteration).
    pub hindsight_efficiency: f64,
    /// Stricter: `mean(B / Σ_i v_i) / mean_iter_s`, perfect balance and zero
    /// overhead (= efficiency × (1 − overhead) when balanced).
    pub compute_efficiency: f64,
    /// `1 − Σ max_i step_s / Σ iteration time`: time not spent in worker compute.
    pub overhead_frac: f64,
    pub overhead: Overhead,
    /// Mean absolute percentage error of the one-step speed predictions (fraction):
    /// mean over steps of `|predicted − measured| / measured`, measured speed =
    /// local batch / step time. A step slowed k-fold by contention adds `k − 1`, so
    /// on a loaded machine a few such steps dominate it: see `speed_ape_median`.
    pub speed_mape: f64,
    /// Median of the same absolute percentage errors: the typical step.
    pub speed_ape_median: f64,
    /// Share of steps whose real work (wait for a compute slot and for the compute
    /// thread to wake, plus the real compute's wall time) exceeded the emulated
    /// target by more than 2 %: contention the padding could not hide, so the
    /// worker ran slower than its emulated speed.
    pub overrun_frac: f64,
    /// Whether the controller's training loop ran at real-time priority
    /// (`ControllerConfig::realtime_io`, granted).
    pub realtime_io: bool,
    /// The run was stopped by [`ControllerConfig::interrupt`] (SIGINT): the numbers
    /// are those of the iterations completed before it.
    pub interrupted: bool,
    /// Iterations disturbed by a failure (excluded from the timing means).
    pub disrupted_iterations: u64,
    pub joins: u64,
    pub leaves: u64,
    pub retried_tasks: u64,
    pub stale_results: u64,
    /// Connections refused, with the reason sent to the peer.
    pub rejected: Vec<String>,
    /// Workers admitted (`id name address`), in admission order.
    pub admitted: Vec<String>,
    /// In worker-id order (ids are given in connection order).
    pub final_batches: Vec<u64>,
    /// (worker name, local batch) of the last iteration: which worker got what.
    pub final_batches_named: Vec<(String, u64)>,
    pub accuracy_curve: Vec<EvalPoint>,
    /// Gradient noise scale `B_noise = tr Σ / |G|²` (samples) at the end of training,
    /// from the workers' gradients (`crate::gns`); `None` without an observed iteration
    /// (one worker, every iteration disrupted).
    pub gradient_noise_scale: Option<f64>,
    /// Its smoothed `|G|²` (squared norm of the true gradient) and `tr Σ` (per-sample
    /// gradient variance), as `pacer_predict::gns::GnsEstimator` reports them.
    pub grad_sqr: Option<f64>,
    pub trace_cov: Option<f64>,
    /// Iterations the estimate observed, and those it skipped (disrupted, fewer than
    /// two non-empty tasks, a non-finite norm).
    pub gns_iterations: u64,
    pub gns_skipped: u64,
    /// The estimate at every evaluation (and at the end).
    pub noise_scale_curve: Vec<NoiseScalePoint>,
    /// The global batch with the highest goodput at the end of training, between
    /// the run's `global_batch` and `max_global_batch` (Pollux's efficiency from the
    /// noise scale; step time `B / Σ v_i + overhead` from the medians over the last
    /// 10–50 undisturbed iterations), and its goodput over the run's batch. `None`
    /// without a noise scale or those iterations. Reported, not applied: the run's
    /// batch stays what was asked.
    pub goodput_optimal_batch: Option<f64>,
    pub goodput_gain: Option<f64>,
    pub max_global_batch: u64,
    /// Per worker, in id order (including those that left).
    pub worker_stats: Vec<WorkerStats>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ledger: Vec<LedgerEntry>,
    #[serde(skip)]
    pub grads: Vec<Vec<f32>>,
    /// What the gradient-noise estimator was fed, first `record_grads` observations.
    #[serde(skip)]
    pub gns_inputs: Vec<GnsInput>,
    #[serde(skip)]
    pub final_params: Vec<f32>,
}

// ------------------------------------------------------------------ connections

/// Bytes of a Step's parameters written before a connection's writer yields.
const WRITE_CHUNK: usize = 64 << 10;

enum Out {
    Frame(Vec<u8>),
    /// A Step's header announcing its parameters, which follow as `Chunk`s.
    Head(Vec<u8>),
    Chunk(Arc<Vec<u8>>),
    Step {
        header: Vec<u8>,
        tail: Arc<Vec<u8>>,
    },
    /// Shut the socket; the sender (if any) is told once everything before it was
    /// written, so `Shutdown` reaches the worker before the runtime goes away.
    Close(Option<tokio::sync::oneshot::Sender<()>>),
}

struct GradientMsg {
    task: u64,
    iteration: u64,
    len: u32,
    loss_sum: f64,
    timing: StepTiming,
    signals: Signals,
    /// Index of `grad[0]` in the gradient (the values before came as parts).
    first: u32,
    grad: Vec<f32>,
}

enum Event {
    Joined {
        id: u32,
        name: String,
        addr: SocketAddr,
        tx: mpsc::UnboundedSender<Out>,
        written: Arc<AtomicU64>,
    },
    Gradient {
        id: u32,
        msg: GradientMsg,
        decode_s: f64,
        /// UNIX time the frame had fully arrived.
        arrived_unix_s: f64,
    },
    /// Values `[offset, offset + values.len())` of a task's gradient, ahead of its
    /// Gradient (the chunked uplink).
    GradientPart {
        id: u32,
        task: u64,
        iteration: u64,
        offset: u32,
        values: Vec<f32>,
    },
    Lost {
        id: u32,
        reason: String,
    },
}

struct Shared {
    job: JobSpec,
    events: mpsc::UnboundedSender<Event>,
    rejected: Mutex<Vec<String>>,
    admitted: Mutex<Vec<String>>,
    verbose: bool,
    /// Bytes of a Step written before a connection's writer yields to the others.
    write_chunk: usize,
    /// Gradient buffers the training loop has accumulated, for the next reads.
    grad_pool: Arc<Mutex<Vec<Vec<f32>>>>,
    /// Connections in their handshake now, and the most allowed.
    pending: std::sync::atomic::AtomicUsize,
    max_pending: usize,
    hello_timeout: Duration,
    /// What an admitted worker's frames may be (the job's size), and how long one
    /// may stall.
    job_limits: protocol::Limits,
}

/// One connection in its handshake, counted in `Shared::pending` while it lives.
struct PendingSlot(Arc<Shared>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

fn note_rejected(shared: &Shared, line: String) {
    let mut r = shared.rejected.lock().expect("rejected list");
    if r.len() < MAX_REJECTED_LISTED {
        r.push(line);
    } else if r.len() == MAX_REJECTED_LISTED {
        r.push("(more refusals not listed)".into());
    }
}

async fn reject(stream: &mut TcpStream, shared: &Shared, addr: SocketAddr, reason: String) {
    let mut buf = Vec::new();
    Message::Reject {
        reason: reason.clone(),
    }
    .encode(&mut buf);
    let _ = stream.write_all(&buf).await;
    let _ = stream.shutdown().await;
    if shared.verbose {
        eprintln!("pacer controller: refused {addr}: {reason}");
    }
    note_rejected(shared, format!("{addr}: {reason}"));
}

/// Handshake, then forward frames as events. Every failure ends only this
/// connection.
///
/// Until the peer is admitted it holds a `PendingSlot`; before its `Hello` nothing
/// larger than [`protocol::MAX_HELLO_FRAME`] is allocated for it, and every wait has
/// a timeout (`hello_timeout`, then [`READY_TIMEOUT_S`] for `Ready`).
async fn connection(
    mut stream: TcpStream,
    addr: SocketAddr,
    id: u32,
    shared: Arc<Shared>,
    slot: PendingSlot,
) {
    let peer = format!("worker {addr}");
    let _ = stream.set_nodelay(true);
    crate::sysinfo::set_socket_buffers(&stream, 4 << 20);
    let mut buf = Vec::new();
    let hello = protocol::timed(
        Some(shared.hello_timeout),
        &peer,
        "waiting for Hello",
        protocol::read_message_with(
            &mut stream,
            &mut buf,
            protocol::Limits::hello(shared.hello_timeout),
            &peer,
            "waiting for Hello",
        ),
    )
    .await;
    let name = match hello {
        Err(e) => {
            reject(&mut stream, &shared, addr, e.to_string()).await;
            return;
        }
        Ok(Message::Hello { name, .. }) => name,
        Ok(other) => {
            let e = ProtocolError::Unexpected {
                peer,
                expected: "Hello",
                got: other.kind(),
            };
            reject(&mut stream, &shared, addr, e.to_string()).await;
            return;
        }
    };
    let mut wbuf = Vec::new();
    Message::Welcome {
        worker_id: id,
        job: shared.job.clone(),
    }
    .encode(&mut wbuf);
    if stream.write_all(&wbuf).await.is_err() {
        return;
    }
    // Loading a dataset can take a while on a slow disk.
    let ready = protocol::timed(
        Some(Duration::from_secs_f64(READY_TIMEOUT_S)),
        &peer,
        "waiting for Ready",
        protocol::read_message_with(
            &mut stream,
            &mut buf,
            protocol::Limits::control(shared.hello_timeout),
            &peer,
            "waiting for Ready",
        ),
    )
    .await;
    match ready {
        Ok(Message::Ready {
            fingerprint,
            n_train,
        }) => {
            if fingerprint != shared.job.fingerprint || n_train != shared.job.n_train {
                let reason = format!(
                    "wrong dataset: the job trains on `{}` ({} training samples, fingerprint {:016x}), \
                     the worker holds {} training samples with fingerprint {:016x}; give the worker the same data (--dataset)",
                    shared.job.dataset, shared.job.n_train, shared.job.fingerprint, n_train, fingerprint
                );
                reject(&mut stream, &shared, addr, reason).await;
                return;
            }
        }
        Ok(Message::Error { message }) => {
            reject(
                &mut stream,
                &shared,
                addr,
                format!("worker could not join: {message}"),
            )
            .await;
            return;
        }
        Ok(other) => {
            let e = ProtocolError::Unexpected {
                peer,
                expected: "Ready",
                got: other.kind(),
            };
            reject(&mut stream, &shared, addr, e.to_string()).await;
            return;
        }
        Err(e) => {
            reject(&mut stream, &shared, addr, e.to_string()).await;
            return;
        }
    }
    drop(slot);
    shared
        .admitted
        .lock()
        .expect("admitted list")
        .push(format!("{id} {name} {addr}"));
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
    let ev = shared.events.clone();
    let written = Arc::new(AtomicU64::new(0));
    let written_w = written.clone();
    let write_chunk = shared.write_chunk;
    // A worker that stops reading must not pin the writer (and what it queued)
    // forever: each write has the job's stall timeout.
    let stall = shared.job_limits.stall;
    // Dropped when the writer ends (the member was dropped, or closed): the reader
    // then stops waiting on a peer nobody listens to any more.
    let (writer_done, mut writer_gone) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _done = writer_done;
        let mut first_chunk = false;
        while let Some(out) = rx.recv().await {
            let r = match out {
                Out::Frame(f) => write_timed(&mut wr, &f, stall).await,
                Out::Head(h) => {
                    first_chunk = true;
                    write_timed(&mut wr, &h, stall).await
                }
                Out::Chunk(c) => {
                    let r = write_timed(&mut wr, &c, stall).await;
                    if std::mem::take(&mut first_chunk) {
                        written_w.store(protocol::unix_now_s().to_bits(), Ordering::Relaxed);
                    }
                    r
                }
                Out::Step { header, tail } => {
                    // In chunks, yielding between them: the connections' writers take
                    // turns, so every worker gets its first parameters (and starts
                    // computing) early instead of the last one waiting for the whole
                    // model to be written to all the others.
                    let mut r = write_timed(&mut wr, &header, stall).await;
                    let mut first = true;
                    for c in tail.chunks(write_chunk) {
                        if r.is_err() {
                            break;
                        }
                        r = write_timed(&mut wr, c, stall).await;
                        if first {
                            first = false;
                            written_w.store(protocol::unix_now_s().to_bits(), Ordering::Relaxed);
                        }
                        if write_chunk < tail.len() {
                            tokio::task::yield_now().await;
                        }
                    }
                    r
                }
                Out::Close(ack) => {
                    let _ = wr.shutdown().await;
                    if let Some(a) = ack {
                        let _ = a.send(());
                    }
                    return;
                }
            };
            if let Err(e) = r {
                let _ = ev.send(Event::Lost {
                    id,
                    reason: format!("sending to worker {id}: {e}"),
                });
                return;
            }
        }
    });
    if shared
        .events
        .send(Event::Joined {
            id,
            name,
            addr,
            tx,
            written,
        })
        .is_err()
    {
        return;
    }
    let limits = shared.job_limits;
    loop {
        let r = tokio::select! {
            biased;
            r = protocol::read_message_streaming_step_with(
                &mut rd,
                &mut buf,
                limits,
                &peer,
                "waiting for a Gradient",
            ) => r,
            _ = &mut writer_gone => return,
        };
        // A gradient's values go straight from the socket into a recycled buffer
        // (no frame buffer to clear, no decode copy, no fresh pages to fault in).
        let msg = match r {
            Ok((mut m, Some(n))) => {
                let mut values = shared
                    .grad_pool
                    .lock()
                    .expect("gradient pool")
                    .pop()
                    .unwrap_or_default();
                values.resize(n, 0.0);
                let read = protocol::read_f32s_with(
                    &mut rd,
                    &mut values,
                    limits.stall,
                    &peer,
                    "reading a Gradient",
                );
                let read = tokio::select! {
                    biased;
                    r = read => r,
                    _ = &mut writer_gone => return,
                };
                match read {
                    Ok(()) => {
                        match &mut m {
                            Message::Gradient { grad, .. } => *grad = values,
                            Message::GradientPart { values: v, .. } => *v = values,
                            _ => {}
                        }
                        Ok(m)
                    }
                    Err(e) => Err(e),
                }
            }
            Ok((m, None)) => Ok(m),
            Err(e) => Err(e),
        };
        let arrived_unix_s = protocol::unix_now_s();
        // Decoding happened while reading (the header; the values are read in
        // place), so what is left is the event's construction.
        let t0 = Instant::now();
        let event = match msg {
            Ok(Message::Gradient {
                task,
                iteration,
                len,
                loss_sum,
                timing,
                signals,
                first,
                grad,
                ..
            }) => Event::Gradient {
                id,
                msg: GradientMsg {
                    task,
                    iteration,
                    len,
                    loss_sum,
                    timing,
                    signals,
                    first,
                    grad,
                },
                decode_s: t0.elapsed().as_secs_f64(),
                arrived_unix_s,
            },
            Ok(Message::GradientPart {
                task,
                iteration,
                offset,
                values,
            }) => Event::GradientPart {
                id,
                task,
                iteration,
                offset,
                values,
            },
            Ok(Message::Error { message }) => Event::Lost {
                id,
                reason: format!("{peer} reported: {message}"),
            },
            Ok(other) => Event::Lost {
                id,
                reason: ProtocolError::Unexpected {
                    peer: peer.clone(),
                    expected: "Gradient",
                    got: other.kind(),
                }
                .to_string(),
            },
            Err(e) => Event::Lost {
                id,
                reason: e.to_string(),
            },
        };
        let lost = matches!(event, Event::Lost { .. });
        if shared.events.send(event).is_err() || lost {
            return;
        }
    }
}

/// `w.write_all(bytes)`, failing with `TimedOut` after `stall` without completing.
async fn write_timed<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
    stall: Option<Duration>,
) -> std::io::Result<()> {
    match stall {
        None => w.write_all(bytes).await,
        Some(d) => tokio::time::timeout(d, w.write_all(bytes))
            .await
            .unwrap_or_else(|_| {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the worker took nothing for {d:?} (--worker-timeout-s)"),
                ))
            }),
    }
}

/// Give a gradient buffer back for the next reads.
fn recycle(pool: &Mutex<Vec<Vec<f32>>>, values: Vec<f32>) {
    let mut pool = pool.lock().expect("gradient pool");
    if pool.len() < 64 {
        pool.push(values);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u32;
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                if shared.pending.fetch_add(1, Ordering::Relaxed) >= shared.max_pending {
                    shared.pending.fetch_sub(1, Ordering::Relaxed);
                    // Refused without a task or a buffer of its own: the reason goes
                    // out only if the socket takes it at once.
                    let reason = format!(
                        "too many connections in their handshake (at most {}); try again",
                        shared.max_pending
                    );
                    let mut f = Vec::new();
                    Message::Reject {
                        reason: reason.clone(),
                    }
                    .encode(&mut f);
                    let _ = stream.try_write(&f);
                    if shared.verbose {
                        eprintln!("pacer controller: refused {addr}: {reason}");
                    }
                    note_rejected(&shared, format!("{addr}: {reason}"));
                    continue;
                }
                let slot = PendingSlot(shared.clone());
                let id = next_id;
                next_id += 1;
                tokio::spawn(connection(stream, addr, id, shared.clone(), slot));
            }
            Err(e) => {
                if shared.verbose {
                    eprintln!("pacer controller: accept failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

// ------------------------------------------------------------------ members

struct Member {
    id: u32,
    name: String,
    addr: SocketAddr,
    tx: mpsc::UnboundedSender<Out>,
    /// UNIX time (f64 bits) the connection last wrote the first chunk of a Step.
    written: Arc<AtomicU64>,
    /// Last measured speed (samples/s), 0 before the first (its predictor lives in the
    /// job session).
    speed: f64,
    /// Model version this worker holds.
    version: u64,
}

struct Task {
    worker: u32,
    stream_start: u64,
    len: u64,
    main: bool,
    sent: Instant,
    /// Gradient values received so far as parts (from 0).
    received: usize,
    /// `Σ g²` of those values (the gradient noise scale's `|g_i|²` once complete).
    sqr: f64,
}

/// Eval-free clock: training time excludes evaluation and progress reporting.
struct Clock {
    start: Instant,
    excluded: Duration,
}

impl Clock {
    fn now(&self) -> f64 {
        (self.start.elapsed() - self.excluded).as_secs_f64()
    }
}

#[derive(Default)]
struct Sums {
    iters: u64,
    iter_s: f64,
    compute_s: f64,
    ideal_s: f64,
    balanced_s: f64,
    control_s: f64,
    encode_s: f64,
    wait_s: f64,
    gather_s: f64,
    downlink_s: f64,
    uplink_s: f64,
    last_step_s: f64,
    worker_pre_s: f64,
    worker_decode_s: f64,
    worker_post_s: f64,
    worker_encode_s: f64,
    ctrl_decode_s: f64,
    aggregate_last_s: f64,
    aggregate_total_s: f64,
    optimizer_s: f64,
    ape: f64,
    ape_n: u64,
    /// Every absolute percentage error, for the median.
    apes: Vec<f32>,
    steps: u64,
    overruns: u64,
    /// Per counted iteration: global batch, overhead (iteration − slowest step)
    /// and each worker's measured speed, for the oracle of `ideal_iter_s`.
    records: Vec<IterRecord>,
}

#[derive(Clone)]
struct IterRecord {
    batch: f64,
    overhead_s: f64,
    speeds: Vec<(u32, f64)>,
}

/// Iterations (the last undisturbed ones) the step rate behind the goodput-optimal
/// batch is measured over, and the fewest it needs.
const RATE_WINDOW: usize = 50;
const RATE_MIN: usize = 10;

/// `B / Σ v + overhead` from the medians of `Σ v` and of the overhead over the last
/// [`RATE_WINDOW`] undisturbed iterations (medians: one stalled iteration must not
/// move the answer); `None` with fewer than [`RATE_MIN`].
fn recent_rate(records: &[IterRecord]) -> Option<StepRate> {
    let last = &records[records.len().saturating_sub(RATE_WINDOW)..];
    if last.len() < RATE_MIN {
        return None;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let samples_per_s = median(
        last.iter()
            .map(|r| r.speeds.iter().map(|s| s.1).sum::<f64>())
            .collect(),
    );
    let overhead_s = median(last.iter().map(|r| r.overhead_s).collect());
    (samples_per_s.is_finite() && samples_per_s > 0.0).then_some(StepRate {
        samples_per_s,
        overhead_s,
    })
}

/// Half-width (iterations) of the window whose median speed the oracle of
/// [`TrainReport::ideal_iter_s`] takes as a worker's true speed.
const ORACLE_WINDOW: usize = 10;

/// Mean oracle iteration time (see [`TrainReport::ideal_iter_s`]); 0 without records.
fn oracle_mean_iter_s(records: &[IterRecord]) -> f64 {
    if records.is_empty() {
        return 0.0;
    }
    // Each worker's speed series and, per record, its index in that series.
    let mut series: HashMap<u32, Vec<f64>> = HashMap::new();
    let positions: Vec<Vec<usize>> = records
        .iter()
        .map(|r| {
            r.speeds
                .iter()
                .map(|&(id, v)| {
                    let s = series.entry(id).or_default();
                    s.push(v);
                    s.len() - 1
                })
                .collect()
        })
        .collect();
    let mut window = Vec::with_capacity(2 * ORACLE_WINDOW + 1);
    let mut total = 0.0;
    for (r, pos) in records.iter().zip(&positions) {
        let true_speed: Vec<f64> = r
            .speeds
            .iter()
            .zip(pos)
            .map(|(&(id, _), &p)| {
                let s = &series[&id];
                window.clear();
                window.extend_from_slice(
                    &s[p.saturating_sub(ORACLE_WINDOW)..(p + ORACLE_WINDOW + 1).min(s.len())],
                );
                window.sort_by(f64::total_cmp);
                let m = window.len();
                if m % 2 == 1 {
                    window[m / 2]
                } else {
                    0.5 * (window[m / 2 - 1] + window[m / 2])
                }
            })
            .collect();
        let sum: f64 = true_speed.iter().sum();
        let slowest = r
            .speeds
            .iter()
            .zip(&true_speed)
            .map(|(&(_, v), &tv)| r.batch * tv / sum / v)
            .fold(0.0, f64::max);
        total += slowest + r.overhead_s;
    }
    total / records.len() as f64
}

/// Bind `addr` and serve one training job (see [`serve`]).
pub async fn serve_addr(
    addr: SocketAddr,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| RuntimeError::io(format!("--listen {addr}"), e))?;
    serve(listener, data, cfg, progress).await
}

/// [`serve_addr`] on a runtime of its own (two threads: the training loop, and the
/// connections' reads and decodes), for callers without one.
pub fn serve_blocking(
    addr: SocketAddr,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| RuntimeError::io(format!("--listen {addr}"), e))?;
    serve_blocking_on(listener, data, cfg, progress)
}

/// [`serve_blocking`] on a listener the caller bound, e.g. to print the port the OS
/// chose for port 0 (`listener.local_addr()`) before serving.
pub fn serve_blocking_on(
    listener: std::net::TcpListener,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    listener
        .set_nonblocking(true)
        .map_err(|e| RuntimeError::io("setting up the listening socket", e))?;
    let realtime = cfg.realtime_io;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(move || {
            if realtime {
                crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_CONTROLLER);
            }
        })
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::io("starting the controller's runtime", e))?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener)
            .map_err(|e| RuntimeError::io("setting up the listening socket", e))?;
        serve_on_runtime(listener, data, cfg, progress).await
    })
}

/// [`serve`] as a task of the current multi-threaded runtime rather than on the
/// thread that blocks on it: the training loop then shares a thread with the
/// connections' tasks, so waking a connection's writer or being woken by a
/// gradient's reader is not a cross-thread wake-up (each cost ~0.2 ms on the
/// loaded 2-core machine, on the critical path of every iteration).
pub async fn serve_on_runtime(
    listener: TcpListener,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    tokio::spawn(serve(listener, data, cfg, progress))
        .await
        .map_err(|e| RuntimeError::Stopped(format!("the training loop failed: {e}")))?
}

/// `v` for an error message: `1e300`, not 301 digits.
pub(crate) fn short_num(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e9 {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Largest worker / join timeout accepted (s): about 30 years.
const MAX_TIMEOUT_S: f64 = 1e9;

/// Checks a configuration against the data before anything starts; [`serve`] does
/// too, callers use it to fail before printing or spawning anything.
pub fn validate(cfg: &ControllerConfig, data: &Data) -> Result<(), RuntimeError> {
    if cfg.global_batch == 0 {
        return Err(RuntimeError::config("--global-batch", "must be > 0"));
    }
    if cfg.max_global_batch.is_some_and(|m| m < cfg.global_batch) {
        return Err(RuntimeError::config(
            "--max-global-batch",
            "must be at least --global-batch",
        ));
    }
    // An iteration computes B samples: B beyond the training set once made every
    // iteration practically endless (B = 2^64 - 1 looped in the batch split).
    if cfg.global_batch > data.train.n as u64 {
        return Err(RuntimeError::config(
            "--global-batch",
            format!(
                "{} is more than the {} training samples of the dataset",
                cfg.global_batch, data.train.n
            ),
        ));
    }
    if make_controller(
        &cfg.controller,
        &BatchProblem::new(1, vec![BatchBounds { min: 0, max: 1 }], false)
            .expect("trivial problem"),
    )
    .is_none()
    {
        return Err(RuntimeError::config(
            "--controller",
            format!(
                "unknown controller `{}`; known: {}",
                cfg.controller,
                pacer_control::worker::CONTROLLERS.join(", ")
            ),
        ));
    }
    if make_predictor(&cfg.predictor, 0, 0).is_none() {
        return Err(RuntimeError::config(
            "--predictor",
            format!(
                "unknown predictor `{}`; known: {}",
                cfg.predictor,
                pacer_predict::speed::PREDICTORS.join(", ")
            ),
        ));
    }
    if cfg.model.dim as usize != data.train.dim {
        return Err(RuntimeError::config(
            "model",
            format!(
                "built for {} features, the dataset has {}",
                cfg.model.dim, data.train.dim
            ),
        ));
    }
    if cfg.eval_every == 0 {
        return Err(RuntimeError::config("--eval-every", "must be ≥ 1"));
    }
    if cfg.model.kind == 3 && cfg.model.width as usize > data.train.n {
        return Err(RuntimeError::config(
            "--clusters",
            format!(
                "{} clusters for {} training samples; at most one cluster per sample",
                cfg.model.width, data.train.n
            ),
        ));
    }
    if cfg.max_pending == 0 {
        return Err(RuntimeError::config(
            "--max-pending",
            "must be ≥ 1 (connections allowed in their handshake at once)",
        ));
    }
    if cfg.min_workers == 0 {
        return Err(RuntimeError::config("--min-workers", "must be ≥ 1"));
    }
    // Timeouts become `Duration`s added to `Instant`s: NaN, negative or astronomically
    // large values would panic there, and 0 would declare every worker dead at once.
    for (flag, v) in [
        ("--worker-timeout-s", cfg.worker_timeout_s),
        ("--join-timeout-s", cfg.join_timeout_s),
        ("--rejoin-timeout-s", cfg.rejoin_timeout_s),
        ("--hello-timeout-s", cfg.hello_timeout_s),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_S) {
            return Err(RuntimeError::config(
                flag,
                format!(
                    "must be a number of seconds in (0, {MAX_TIMEOUT_S:e}], got {}",
                    short_num(v)
                ),
            ));
        }
    }
    if cfg.max_time_s.is_nan() || cfg.max_time_s <= 0.0 {
        return Err(RuntimeError::config(
            "--max-time-s",
            format!("must be a number of seconds > 0, got {}", cfg.max_time_s),
        ));
    }
    if cfg.max_iterations == Some(0) {
        return Err(RuntimeError::config("--max-iterations", "must be ≥ 1"));
    }
    if let OptimSpec::Sgd { momentum, .. } = cfg.optimizer {
        if !(momentum.is_finite() && (0.0..1.0).contains(&momentum)) {
            return Err(RuntimeError::config(
                "--momentum",
                format!("must be in [0, 1), got {momentum}"),
            ));
        }
    }
    if let Some(t) = cfg.target_accuracy {
        if !(0.0..=1.0).contains(&t) {
            return Err(RuntimeError::config(
                "--target-accuracy",
                format!("must be a fraction in [0, 1], got {t}"),
            ));
        }
    }
    Ok(())
}

/// Serve one training job on `listener` until a stop condition holds, then shut the
/// workers down and return the report.
pub async fn serve(
    listener: TcpListener,
    data: Arc<Data>,
    cfg: ControllerConfig,
    mut progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    validate(&cfg, &data)?;
    let model: Box<dyn Model> = cfg
        .model
        .build()
        .ok_or_else(|| RuntimeError::config("model", "unknown model kind"))?;
    let n_params = model.n_params();
    let (ev_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let grad_pool = Arc::new(Mutex::new(Vec::new()));
    let shared = Arc::new(Shared {
        job: JobSpec {
            dataset: data.spec.clone(),
            fingerprint: data.fingerprint,
            n_train: data.train.n as u64,
            model: cfg.model,
            stream_seed: cfg.seed,
            n_params: n_params as u32,
        },
        events: ev_tx,
        rejected: Mutex::new(Vec::new()),
        admitted: Mutex::new(Vec::new()),
        verbose: cfg.verbose,
        write_chunk: if cfg.pipeline {
            WRITE_CHUNK
        } else {
            usize::MAX
        },
        grad_pool: grad_pool.clone(),
        pending: std::sync::atomic::AtomicUsize::new(0),
        max_pending: cfg.max_pending,
        hello_timeout: Duration::from_secs_f64(cfg.hello_timeout_s),
        job_limits: protocol::Limits::for_job(
            n_params,
            Duration::from_secs_f64(cfg.worker_timeout_s),
        ),
    });
    let acceptor = tokio::spawn(accept_loop(listener, shared.clone()));
    let result = train_loop(
        &cfg,
        &data,
        model.as_ref(),
        &mut events,
        &mut progress,
        &grad_pool,
    )
    .await;
    acceptor.abort();
    let (mut report, members) = result?;
    let mut acks = Vec::new();
    for m in members {
        let mut f = Vec::new();
        Message::Shutdown {
            reason: "training finished".into(),
        }
        .encode(&mut f);
        let (a, r) = tokio::sync::oneshot::channel();
        let _ = m.tx.send(Out::Frame(f));
        let _ = m.tx.send(Out::Close(Some(a)));
        acks.push(r);
    }
    for r in acks {
        let _ = tokio::time::timeout(Duration::from_secs(5), r).await;
    }
    report.rejected = shared.rejected.lock().expect("rejected list").clone();
    report.admitted = shared.admitted.lock().expect("admitted list").clone();
    Ok(report)
}

fn new_member(
    id: u32,
    name: String,
    addr: SocketAddr,
    tx: mpsc::UnboundedSender<Out>,
    written: Arc<AtomicU64>,
) -> Member {
    Member {
        id,
        name,
        addr,
        tx,
        written,
        speed: 0.0,
        version: u64::MAX,
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

fn interrupted(cfg: &ControllerConfig) -> bool {
    cfg.interrupt.is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Said at once, whatever `verbose` says: otherwise a run whose workers all died
/// is silent until the rejoin wait ends.
fn all_gone_notice(cfg: &ControllerConfig, k: u64) {
    eprintln!(
        "pacer controller: every worker is gone (iteration {k}); waiting up to {} s for one to join (--rejoin-timeout-s)",
        cfg.rejoin_timeout_s
    );
}

enum Wait {
    Event(Event),
    Closed,
    TimedOut,
    Interrupted,
}

/// The next event before `deadline`, looking at the interrupt flag every
/// [`INTERRUPT_POLL`].
async fn next_event(
    events: &mut mpsc::UnboundedReceiver<Event>,
    deadline: Instant,
    cfg: &ControllerConfig,
) -> Wait {
    loop {
        if interrupted(cfg) {
            return Wait::Interrupted;
        }
        // An event already there wins over a deadline already past.
        match events.try_recv() {
            Ok(e) => return Wait::Event(e),
            Err(mpsc::error::TryRecvError::Disconnected) => return Wait::Closed,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Wait::TimedOut;
        }
        let mut step = deadline - now;
        if cfg.interrupt.is_some() {
            step = step.min(INTERRUPT_POLL);
        }
        match tokio::time::timeout(step, events.recv()).await {
            Ok(Some(e)) => return Wait::Event(e),
            Ok(None) => return Wait::Closed,
            Err(_) => {}
        }
    }
}

/// Brings the session's membership to `active` (sorted by id, as the session keeps its
/// members): the workers gone leave, the new ones join.
fn sync_session(session: &mut JobSession, active: &[Member]) {
    let gone: Vec<WorkerKey> = session
        .workers()
        .filter(|w| !active.iter().any(|m| u64::from(m.id) == w.0))
        .collect();
    for w in gone {
        session.leave(w).expect("a member");
    }
    for m in active {
        // Already a member: nothing to do.
        let _ = session.join(WorkerKey(u64::from(m.id)), None);
    }
    debug_assert!(session
        .workers()
        .map(|w| w.0)
        .eq(active.iter().map(|m| u64::from(m.id))));
}

async fn train_loop(
    cfg: &ControllerConfig,
    data: &Data,
    model: &dyn Model,
    events: &mut mpsc::UnboundedReceiver<Event>,
    progress: &mut Option<ProgressFn>,
    grad_pool: &Mutex<Vec<Vec<f32>>>,
) -> Result<(TrainReport, Vec<Member>), RuntimeError> {
    let b_total = cfg.global_batch;
    let mut params = model.init(cfg.seed, &data.train);
    let mut optimizer = Optimizer::new(cfg.optimizer, params.len());
    let mut version: u64 = 0;
    let mut active: Vec<Member> = Vec::new();
    let mut joiners: Vec<Member> = Vec::new();
    let mut report = TrainReport {
        controller: cfg.controller.clone(),
        controller_variant: String::new(),
        predictor: cfg.predictor.clone(),
        model: model.name().to_string(),
        dataset: data.spec.clone(),
        workers: 0,
        global_batch: b_total,
        optimizer: cfg.optimizer,
        target_accuracy: cfg.target_accuracy,
        reached: false,
        time_to_target_s: None,
        iterations_to_target: None,
        iterations: 0,
        epochs: 0.0,
        final_accuracy: 0.0,
        final_loss: 0.0,
        best_accuracy: 0.0,
        train_time_s: 0.0,
        mean_iter_s: 0.0,
        ideal_iter_s: 0.0,
        efficiency: 0.0,
        compute_efficiency: 0.0,
        hindsight_efficiency: 0.0,
        overhead_frac: 0.0,
        overhead: Overhead::default(),
        speed_mape: 0.0,
        speed_ape_median: 0.0,
        overrun_frac: 0.0,
        realtime_io: crate::sysinfo::thread_is_realtime(),
        interrupted: false,
        disrupted_iterations: 0,
        joins: 0,
        leaves: 0,
        retried_tasks: 0,
        stale_results: 0,
        rejected: Vec::new(),
        admitted: Vec::new(),
        final_batches: Vec::new(),
        final_batches_named: Vec::new(),
        accuracy_curve: Vec::new(),
        gradient_noise_scale: None,
        grad_sqr: None,
        trace_cov: None,
        gns_iterations: 0,
        gns_skipped: 0,
        noise_scale_curve: Vec::new(),
        goodput_optimal_batch: None,
        goodput_gain: None,
        max_global_batch: 0,
        worker_stats: Vec::new(),
        ledger: Vec::new(),
        grads: Vec::new(),
        gns_inputs: Vec::new(),
        final_params: Vec::new(),
    };

    // Wait for the first workers.
    let join_deadline = Instant::now() + Duration::from_secs_f64(cfg.join_timeout_s);
    while joiners.len() < cfg.min_workers.max(1) {
        match next_event(events, join_deadline, cfg).await {
            Wait::TimedOut => {
                return Err(RuntimeError::Stopped(format!(
                    "only {} of the {} workers needed joined within {} s",
                    joiners.len(),
                    cfg.min_workers,
                    cfg.join_timeout_s
                )))
            }
            Wait::Interrupted => {
                report.interrupted = true;
                break;
            }
            Wait::Closed => return Err(RuntimeError::Stopped("event channel closed".into())),
            Wait::Event(Event::Joined {
                id,
                name,
                addr,
                tx,
                written,
            }) => joiners.push(new_member(id, name, addr, tx, written)),
            Wait::Event(Event::Lost { id, .. }) => joiners.retain(|m| m.id != id),
            Wait::Event(Event::Gradient { .. }) => report.stale_results += 1,
            Wait::Event(Event::GradientPart { .. }) => {}
        }
    }
    report.workers = joiners.len();

    let mut clock = Clock {
        start: Instant::now(),
        excluded: Duration::ZERO,
    };
    let mut sums = Sums::default();
    let mut acc = vec![0.0f32; params.len()];
    let mut batches: Vec<u64> = Vec::new();
    // Every worker-level decision — membership, speed predictions, batches — is the job
    // session's, the same code the scenario simulator drives.
    let mut session = JobSession::new(SessionConfig::new(
        b_total,
        &cfg.controller,
        &cfg.predictor,
        cfg.seed,
    ))
    .map_err(|e| RuntimeError::config("--controller/--predictor", e.to_string()))?;
    let mut pos: u64 = 0;
    let mut next_task: u64 = 0;
    let mut k: u64 = 0;
    let mut last_end = clock.now();
    let mut last_quality: Option<Quality> = None;
    let mut tail = Vec::new();
    let mut wstats: BTreeMap<u32, WorkerStats> = BTreeMap::new();
    // The last optimiser step waits for the next send (`cfg.pipeline`).
    let mut deferred = false;
    let mut gns = GnsTracker::new(cfg.gns_smoothing, b_total, cfg.record_grads, cfg.verbose);
    let max_batch = cfg
        .max_global_batch
        .unwrap_or_else(|| (16 * b_total).min(data.train.n as u64))
        .max(b_total) as f64;

    'train: loop {
        if report.interrupted {
            break;
        }
        // ---- boundary: membership
        while let Ok(ev) = events.try_recv() {
            match ev {
                Event::Joined {
                    id,
                    name,
                    addr,
                    tx,
                    written,
                } => joiners.push(new_member(id, name, addr, tx, written)),
                Event::Lost { id, reason } => {
                    if let Some(i) = active.iter().position(|m| m.id == id) {
                        let m = active.remove(i);
                        report.leaves += 1;
                        if cfg.verbose {
                            eprintln!(
                                "pacer controller: worker {} ({}) left: {reason}",
                                m.id, m.addr
                            );
                        }
                    }
                    joiners.retain(|m| m.id != id);
                }
                Event::Gradient { .. } => report.stale_results += 1,
                // Parts of a stale result: its Gradient is counted when it comes.
                Event::GradientPart { .. } => {}
            }
        }
        if !joiners.is_empty() {
            if k > 0 {
                report.joins += joiners.len() as u64;
            }
            for m in &joiners {
                if cfg.verbose && k > 0 {
                    eprintln!(
                        "pacer controller: worker {} ({}, {}) joined at iteration {k}",
                        m.id, m.name, m.addr
                    );
                }
            }
            active.append(&mut joiners);
            active.sort_by_key(|m| m.id);
        }
        if cfg.verbose && k > 0 && k.is_multiple_of(50) {
            // A heartbeat scripts can wait for (`scripts/multihost.sh` kills a worker
            // at iteration 200 by it).
            eprintln!(
                "pacer controller: iteration {k}, {} worker(s)",
                active.len()
            );
        }
        if active.is_empty() {
            all_gone_notice(cfg, k);
            let deadline = Instant::now() + Duration::from_secs_f64(cfg.rejoin_timeout_s);
            let t_wait = Instant::now();
            while active.is_empty() {
                match next_event(events, deadline, cfg).await {
                    Wait::Event(Event::Joined {
                        id,
                        name,
                        addr,
                        tx,
                        written,
                    }) => {
                        report.joins += 1;
                        active.push(new_member(id, name, addr, tx, written));
                    }
                    Wait::Event(_) => {}
                    Wait::Interrupted => {
                        report.interrupted = true;
                        break 'train;
                    }
                    Wait::TimedOut | Wait::Closed => {
                        return Err(RuntimeError::Stopped(format!(
                            "every worker is gone (at iteration {k}) and none joined within {} s (--rejoin-timeout-s)",
                            cfg.rejoin_timeout_s
                        )))
                    }
                }
            }
            // Waiting for capacity is not training time.
            clock.excluded += t_wait.elapsed();
            last_end = clock.now();
        }

        // ---- stop conditions
        let reached = report.reached && cfg.stop_at_target;
        if interrupted(cfg) {
            report.interrupted = true;
            break;
        }
        if reached || clock.now() >= cfg.max_time_s || cfg.max_iterations.is_some_and(|m| k >= m) {
            break;
        }

        // ---- batches
        let t_control = Instant::now();
        let n = active.len();
        sync_session(&mut session, &active);
        let decision = session
            .decide()
            .map_err(|e| RuntimeError::config("--global-batch", e.to_string()))?;
        batches.clear();
        batches.extend_from_slice(decision.batches);
        let predicted = decision.predicted_speed.to_vec();
        report.controller_variant = session.controller_variant().to_string();
        if let Some(f) = &cfg.fixed_batches {
            if f.len() == n && f.iter().sum::<u64>() == b_total {
                batches.clone_from(f);
                session.override_batches(f).expect("length and sum checked");
            } else if k == 0 {
                return Err(RuntimeError::config(
                    "fixed_batches",
                    format!(
                        "{} must have one entry per worker ({n}) summing to the global batch {b_total}",
                        f.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        // By worker id: a worker lost in the iteration shifts the positions in
        // `active`, and comparing by position then set one worker's prediction
        // against another's speed in the speed MAPE.
        let predicted_now: HashMap<u32, f64> = active.iter().map(|m| m.id).zip(predicted).collect();
        let control_s = t_control.elapsed().as_secs_f64();

        // ---- send
        let chunked = deferred;
        let mut encode_s = 0.0;
        let shared_tail = (!chunked).then(|| {
            let t_enc = Instant::now();
            protocol::encode_params_tail(&params, &mut tail);
            let t = Arc::new(std::mem::take(&mut tail));
            encode_s = t_enc.elapsed().as_secs_f64();
            t
        });
        // has_params, count, values
        let tail_len = 1 + 4 + params.len() * 4;
        let mut pending: BTreeMap<u64, Task> = BTreeMap::new();
        let t_sent = Instant::now();
        let t_sent_unix = protocol::unix_now_s();
        let mut start = pos;
        let mut lost_now: Vec<(u32, String)> = Vec::new();
        let mut named_batches: Vec<(String, u64)> = active
            .iter()
            .zip(&batches)
            .map(|(m, &b)| (m.name.clone(), b))
            .collect();
        for (m, &b) in active.iter_mut().zip(&batches) {
            let task = next_task;
            next_task += 1;
            let mut header =
                protocol::step_frame_header(task, k, version, start, b as u32, tail_len);
            let out = match &shared_tail {
                Some(t) => Out::Step {
                    header,
                    tail: t.clone(),
                },
                None => {
                    header.push(1);
                    header.extend_from_slice(&(params.len() as u32).to_le_bytes());
                    Out::Head(header)
                }
            };
            if m.tx.send(out).is_err() {
                lost_now.push((m.id, "connection closed".into()));
            }
            m.version = version;
            pending.insert(
                task,
                Task {
                    worker: m.id,
                    stream_start: start,
                    len: b,
                    main: true,
                    sent: Instant::now(),
                    received: 0,
                    sqr: 0.0,
                },
            );
            start += b;
        }
        // The previous iteration's optimiser step, deferred to here: applied range by
        // range, each range sent as soon as it is updated, so the workers start on the
        // first rows of the new model while the controller computes the rest.
        let mut send_work_s = 0.0;
        let mut overlapped_opt_s = 0.0;
        if chunked {
            // Let the writers send the Steps' headers first: a task woken from this
            // one waits in this runtime thread's LIFO slot, which no other thread
            // steals, until this task yields — otherwise the last worker reads its
            // header (and starts its step) only after the first range's optimiser
            // step and copy (downlink 0.097 → 0.071 ms, overhead −0.6 points at
            // time scale 3, experiments/runtime/RESULTS.md).
            tokio::task::yield_now().await;
            optimizer.begin_step();
            let n = params.len();
            let per = WRITE_CHUNK / 4;
            for a in (0..n).step_by(per) {
                let r = a..(a + per).min(n);
                let t0 = Instant::now();
                optimizer.step_range(&mut params, &acc, r.clone());
                let t1 = Instant::now();
                let mut bytes = Vec::new();
                protocol::f32s_le_bytes(&params[r], &mut bytes);
                let bytes = Arc::new(bytes);
                for m in &active {
                    if m.tx.send(Out::Chunk(bytes.clone())).is_err()
                        && !lost_now.iter().any(|(w, _)| *w == m.id)
                    {
                        lost_now.push((m.id, "connection closed".into()));
                    }
                }
                overlapped_opt_s += (t1 - t0).as_secs_f64();
                encode_s += t1.elapsed().as_secs_f64();
                send_work_s += t0.elapsed().as_secs_f64();
                // Let the writers run.
                tokio::task::yield_now().await;
            }
            deferred = false;
        }

        // ---- gather
        // The workers are computing: the last aggregate's norm costs nothing here.
        if gns.waiting() {
            gns.aggregate(clear_sqr(&mut acc));
        } else {
            acc.iter_mut().for_each(|v| *v = 0.0);
        }
        let mut local_norms: Vec<LocalNorm> = Vec::with_capacity(active.len());
        let mut disrupted = false;
        let mut main_results: HashMap<u32, (u64, StepTiming, f64, Signals)> = HashMap::new();
        let mut arrivals: HashMap<u32, f64> = HashMap::new();
        let mut t_last = t_sent;
        let mut last_links = (0.0, 0.0);
        // The last gradient's timing, its controller decode and accumulation.
        let mut last_piece = (StepTiming::default(), 0.0, 0.0);
        let mut aggregate_total_s = 0.0;
        let mut weight_sum = 0u64;
        let mut loss_sum = 0.0;
        // Every block of gradient accumulated in this iteration: (task, offset,
        // weight, values). Parts are summed into `acc` as they arrive (streaming
        // aggregation); if a worker is lost after some of its task's parts arrived,
        // `acc` is rebuilt from the blocks of the other tasks, so a partial gradient
        // is never counted (and a retried range only once).
        let mut blocks: Vec<(u64, usize, f32, Vec<f32>)> = Vec::new();
        while !pending.is_empty() {
            let mut ev = None;
            if lost_now.is_empty() {
                let oldest = pending
                    .values()
                    .map(|t| t.sent)
                    .min()
                    .unwrap_or_else(Instant::now);
                let deadline = oldest + Duration::from_secs_f64(cfg.worker_timeout_s);
                match next_event(events, deadline, cfg).await {
                    Wait::Event(e) => ev = Some(e),
                    Wait::Closed => {
                        return Err(RuntimeError::Stopped("event channel closed".into()))
                    }
                    // The iteration in flight is abandoned: its partial aggregate is
                    // never applied, the report covers the iterations completed.
                    Wait::Interrupted => {
                        report.interrupted = true;
                        break 'train;
                    }
                    Wait::TimedOut => {
                        // Every worker whose task is overdue is treated as lost.
                        let now = Instant::now();
                        for t in pending.values() {
                            if now.duration_since(t.sent).as_secs_f64() >= cfg.worker_timeout_s
                                && !lost_now.iter().any(|(w, _)| *w == t.worker)
                            {
                                lost_now.push((
                                    t.worker,
                                    format!(
                                        "no answer within {} s (--worker-timeout-s)",
                                        cfg.worker_timeout_s
                                    ),
                                ));
                            }
                        }
                    }
                }
            }
            if let Some(ev) = ev {
                match ev {
                    Event::Joined {
                        id,
                        name,
                        addr,
                        tx,
                        written,
                    } => joiners.push(new_member(id, name, addr, tx, written)),
                    Event::Lost { id, reason } => lost_now.push((id, reason)),
                    Event::GradientPart {
                        id,
                        task,
                        iteration,
                        offset,
                        values,
                    } => {
                        let Some(t) = pending
                            .get_mut(&task)
                            .filter(|t| t.worker == id && iteration == k)
                        else {
                            // Late parts of a task retried elsewhere: dropped.
                            recycle(grad_pool, values);
                            continue;
                        };
                        let (a, n) = (offset as usize, values.len());
                        if a != t.received || a + n > params.len() {
                            lost_now.push((
                                id,
                                format!(
                                    "GradientPart for task {task} holds values {a}..{}, expected the next from {} of {}",
                                    a + n,
                                    t.received,
                                    params.len()
                                ),
                            ));
                            recycle(grad_pool, values);
                            continue;
                        }
                        t.received += n;
                        let t_agg = Instant::now();
                        let w = t.len as f32 / b_total as f32;
                        t.sqr += accumulate_sqr(&mut acc[a..a + n], w, &values);
                        aggregate_total_s += t_agg.elapsed().as_secs_f64();
                        blocks.push((task, a, w, values));
                    }
                    Event::Gradient {
                        id,
                        msg,
                        decode_s,
                        arrived_unix_s,
                    } => {
                        let ok = pending
                            .get(&msg.task)
                            .is_some_and(|t| t.worker == id && msg.iteration == k);
                        if !ok {
                            report.stale_results += 1;
                            continue;
                        }
                        let t = &pending[&msg.task];
                        let first = msg.first as usize;
                        if msg.len as u64 != t.len
                            || first != t.received
                            || first + msg.grad.len() != params.len()
                        {
                            lost_now.push((
                                id,
                                format!(
                                    "Gradient for task {} has len {} and values {first}..{}, expected len {} and values {}..{}",
                                    msg.task, msg.len, first + msg.grad.len(), t.len, t.received, params.len()
                                ),
                            ));
                            continue;
                        }
                        let t = pending.remove(&msg.task).expect("checked");
                        let t_agg = Instant::now();
                        let w = t.len as f32 / b_total as f32;
                        let sqr = t.sqr + accumulate_sqr(&mut acc[first..], w, &msg.grad);
                        let agg_s = t_agg.elapsed().as_secs_f64();
                        aggregate_total_s += agg_s;
                        weight_sum += t.len;
                        loss_sum += msg.loss_sum;
                        last_piece = (msg.timing, decode_s, agg_s);
                        last_links = (
                            msg.timing.recv_unix_s - t_sent_unix,
                            arrived_unix_s - msg.timing.send_unix_s,
                        );
                        t_last = t_agg;
                        if cfg.record_ledger {
                            report.ledger.push(LedgerEntry {
                                iteration: k,
                                stream_start: t.stream_start,
                                len: t.len,
                                worker: id,
                                retry: !t.main,
                            });
                        }
                        if t.main {
                            main_results.insert(id, (t.len, msg.timing, decode_s, msg.signals));
                            arrivals.insert(id, arrived_unix_s);
                        }
                        local_norms.push(LocalNorm {
                            stream_start: t.stream_start,
                            len: t.len,
                            sqr,
                        });
                        blocks.push((msg.task, first, w, msg.grad));
                    }
                }
            }
            // ---- failures: drop the worker, retry its tasks on the survivors
            while let Some((id, reason)) = lost_now.pop() {
                let Some(i) = active.iter().position(|m| m.id == id) else {
                    joiners.retain(|m| m.id != id);
                    continue;
                };
                let dead = active.remove(i);
                let _ = dead.tx.send(Out::Close(None));
                report.leaves += 1;
                disrupted = true;
                if cfg.verbose {
                    eprintln!(
                        "pacer controller: worker {} ({}) lost in iteration {k}: {reason}",
                        dead.id, dead.addr
                    );
                }
                let orphans: Vec<u64> = pending
                    .iter()
                    .filter(|(_, t)| t.worker == id)
                    .map(|(&task, _)| task)
                    .collect();
                if orphans.is_empty() {
                    continue;
                }
                // Parts of the orphans already in `acc`: rebuild it without them.
                if orphans.iter().any(|t| pending[t].received > 0) {
                    let t_agg = Instant::now();
                    let mut kept = Vec::with_capacity(blocks.len());
                    for b in blocks.drain(..) {
                        if orphans.contains(&b.0) {
                            recycle(grad_pool, b.3);
                        } else {
                            kept.push(b);
                        }
                    }
                    blocks = kept;
                    acc.iter_mut().for_each(|v| *v = 0.0);
                    for (_, a, w, values) in &blocks {
                        for (s, g) in acc[*a..*a + values.len()].iter_mut().zip(values) {
                            *s += w * g;
                        }
                    }
                    aggregate_total_s += t_agg.elapsed().as_secs_f64();
                }
                // Capacity for the retries: survivors, else a worker that joined.
                if active.is_empty() && joiners.is_empty() {
                    all_gone_notice(cfg, k);
                }
                let rejoin_deadline =
                    Instant::now() + Duration::from_secs_f64(cfg.rejoin_timeout_s);
                while active.is_empty() {
                    if joiners.is_empty() {
                        let t_wait = Instant::now();
                        match next_event(events, rejoin_deadline, cfg).await {
                            Wait::Event(Event::Joined { id, name, addr, tx, written }) => {
                                joiners.push(new_member(id, name, addr, tx, written))
                            }
                            Wait::Event(_) => {}
                            Wait::Interrupted => {
                                report.interrupted = true;
                                break 'train;
                            }
                            Wait::TimedOut | Wait::Closed => {
                                return Err(RuntimeError::Stopped(format!(
                                    "every worker was lost in iteration {k} and none joined within {} s (--rejoin-timeout-s)",
                                    cfg.rejoin_timeout_s
                                )))
                            }
                        }
                        clock.excluded += t_wait.elapsed();
                    } else {
                        report.joins += joiners.len() as u64;
                        active.append(&mut joiners);
                        active.sort_by_key(|m| m.id);
                    }
                }
                sync_session(&mut session, &active);
                let speeds = session.predicted_speeds();
                for task in orphans {
                    let t = pending.remove(&task).expect("listed");
                    let bounds = vec![BatchBounds { min: 0, max: t.len }; active.len()];
                    let mut parts = vec![0u64; active.len()];
                    apportion(&speeds, t.len, &bounds, &mut parts);
                    let mut s = t.stream_start;
                    for (m, &len) in active.iter_mut().zip(&parts) {
                        if len == 0 {
                            continue;
                        }
                        let task = next_task;
                        next_task += 1;
                        report.retried_tasks += 1;
                        let include = m.version != version;
                        let mut frame = Vec::new();
                        Message::Step {
                            task,
                            iteration: k,
                            version,
                            stream_start: s,
                            len: len as u32,
                            params: include.then(|| params.clone()),
                        }
                        .encode(&mut frame);
                        if m.tx.send(Out::Frame(frame)).is_err() {
                            lost_now.push((m.id, "connection closed".into()));
                        }
                        m.version = version;
                        pending.insert(
                            task,
                            Task {
                                worker: m.id,
                                stream_start: s,
                                len,
                                main: false,
                                sent: Instant::now(),
                                received: 0,
                                sqr: 0.0,
                            },
                        );
                        s += len;
                    }
                }
            }
        }
        debug_assert_eq!(weight_sum, b_total);
        // An iteration that lost a worker is not observed (its retried ranges are not
        // one worker's batch; conservative when the lost worker had already answered).
        gns.gathered(k, (!disrupted).then_some(local_norms));
        for b in blocks.drain(..) {
            recycle(grad_pool, b.3);
        }
        if let Some(t) = shared_tail {
            tail = Arc::try_unwrap(t).unwrap_or_default();
        }

        // ---- update
        let t_opt = Instant::now();
        if report.grads.len() < cfg.record_grads {
            report.grads.push(acc.clone());
        }
        // With pipelining the step is deferred to the next send (above). An evaluation
        // in between steps a copy (evaluation time, not training time): applying the
        // step here instead put a whole Adam step on every tenth iteration's critical
        // path (+0.6 points of overhead at time scale 3, experiments/runtime/RESULTS.md).
        if cfg.pipeline {
            deferred = true;
        } else {
            optimizer.step(&mut params, &acc);
        }
        version += 1;
        let optimizer_s = t_opt.elapsed().as_secs_f64() + overlapped_opt_s;
        pos += b_total;
        k += 1;
        let now = clock.now();
        let iter_s = now - last_end;
        last_end = now;
        let _ = loss_sum;

        // ---- observe speeds, account time
        let mut max_step: f64 = 0.0;
        let mut sum_speed = 0.0;
        let mut iter_speeds = Vec::with_capacity(active.len());
        sync_session(&mut session, &active);
        let mut observed = Vec::with_capacity(active.len());
        let mut next_signals = Vec::with_capacity(active.len());
        for m in active.iter_mut() {
            let Some((len, timing, _, signals)) = main_results.get(&m.id) else {
                continue;
            };
            let speed = *len as f64 / timing.step_s.max(1e-9);
            if m.speed > 0.0 {
                if let Some(p) = predicted_now.get(&m.id) {
                    if *p > 0.0 && p.is_finite() {
                        let ape = (p - speed).abs() / speed;
                        sums.ape += ape;
                        sums.ape_n += 1;
                        sums.apes.push(ape as f32);
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
            session.set_next_signals(key, next).expect("synced");
            next_signals.push((m.id, next));
            m.speed = speed;
            let w = wstats.entry(m.id).or_insert_with(|| WorkerStats {
                id: m.id,
                name: m.name.clone(),
                addr: m.addr.to_string(),
                ..Default::default()
            });
            w.steps += 1;
            w.samples += *len;
            w.mean_sent_ms +=
                (f64::from_bits(m.written.load(Ordering::Relaxed)) - t_sent_unix).max(0.0) * 1e3;
            w.mean_downlink_ms += (timing.recv_unix_s - t_sent_unix) * 1e3;
            if let Some(a) = arrivals.get(&m.id) {
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
            sums.steps += 1;
            if overran {
                sums.overruns += 1;
            }
        }
        session
            .observe(&observed)
            .expect("members synced and compute times checked");
        if disrupted {
            report.disrupted_iterations += 1;
        } else if sum_speed > 0.0 {
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
            sums.control_s += control_s;
            sums.encode_s += encode_s;
            // Without the controller's own work between the Step chunks (counted in
            // encode and optimiser).
            sums.wait_s += ((t_last - t_sent).as_secs_f64() - send_work_s).max(0.0);
            sums.gather_s += (t_last - t_sent).as_secs_f64();
            sums.downlink_s += last_links.0;
            sums.uplink_s += last_links.1;
            sums.last_step_s += last_piece.0.step_s;
            sums.worker_pre_s += last_piece.0.pre_s;
            sums.worker_decode_s += last_piece.0.decode_s;
            sums.worker_post_s += last_piece.0.post_s;
            sums.worker_encode_s += last_piece.0.encode_s;
            sums.ctrl_decode_s += last_piece.1;
            sums.aggregate_last_s += last_piece.2;
            sums.aggregate_total_s += aggregate_total_s;
            sums.optimizer_s += optimizer_s;
        }
        report.final_batches.clone_from(&batches);
        // Paired when the Steps went out: a worker lost since shifted `active`.
        report.final_batches_named = std::mem::take(&mut named_batches);

        // ---- evaluate (not training time)
        let t_eval = Instant::now();
        let stopping = cfg.max_iterations.is_some_and(|m| k >= m) || now >= cfg.max_time_s;
        if k.is_multiple_of(cfg.eval_every) || stopping {
            let stepped;
            // The step the evaluated model needs is training work: a target reached
            // here is reached that much later.
            let mut step_s = 0.0;
            let eval_params = if deferred {
                let mut o = optimizer.clone();
                let mut p = params.clone();
                let t = Instant::now();
                o.step(&mut p, &acc);
                step_s = t.elapsed().as_secs_f64();
                stepped = p;
                &stepped
            } else {
                &params
            };
            // A long computation: not at real-time priority.
            let realtime = cfg.realtime_io && crate::sysinfo::thread_is_realtime();
            if realtime {
                crate::sysinfo::set_thread_realtime(0);
            }
            let q = model.evaluate(eval_params, &data.train, &data.test);
            if realtime {
                crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_CONTROLLER);
            }
            report.accuracy_curve.push(EvalPoint {
                iteration: k,
                train_time_s: now,
                accuracy: q.accuracy,
                loss: q.loss,
            });
            report.best_accuracy = report.best_accuracy.max(q.accuracy);
            if gns.waiting() {
                gns.aggregate(sqr_norm(&acc));
            }
            gns.record_point(k, recent_rate(&sums.records).as_ref(), max_batch);
            if let Some(target) = cfg.target_accuracy {
                if q.accuracy >= target && !report.reached {
                    report.reached = true;
                    report.time_to_target_s = Some(now + step_s);
                    report.iterations_to_target = Some(k);
                }
            }
            last_quality = Some(q);
        }
        if let Some(p) = progress.as_mut() {
            p(&Progress {
                iteration: k,
                epoch: pos as f64 / data.train.n as f64,
                train_time_s: now,
                accuracy: last_quality.map(|q| q.accuracy),
                batches: active
                    .iter()
                    .map(|m| m.id)
                    .zip(batches.iter().copied())
                    .collect(),
                noise_scale: gns.noise_scale(),
                observed: std::mem::take(&mut observed),
                next_signals: std::mem::take(&mut next_signals),
            });
        }
        clock.excluded += t_eval.elapsed();
    }

    // ---- final numbers
    if deferred {
        optimizer.step(&mut params, &acc);
    }
    let q = match (report.accuracy_curve.last(), last_quality) {
        (Some(p), Some(q)) if p.iteration == k => q,
        _ => {
            let t = Instant::now();
            let q = model.evaluate(&params, &data.train, &data.test);
            clock.excluded += t.elapsed();
            report.accuracy_curve.push(EvalPoint {
                iteration: k,
                train_time_s: clock.now(),
                accuracy: q.accuracy,
                loss: q.loss,
            });
            q
        }
    };
    if gns.waiting() {
        gns.aggregate(sqr_norm(&acc));
    }
    let rate = recent_rate(&sums.records);
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
    report.epochs = pos as f64 / data.train.n as f64;
    report.train_time_s = last_end;
    let it = sums.iters.max(1) as f64;
    report.mean_iter_s = sums.iter_s / it;
    report.ideal_iter_s = oracle_mean_iter_s(&sums.records);
    if sums.iter_s > 0.0 {
        report.efficiency = report.ideal_iter_s / report.mean_iter_s;
        report.hindsight_efficiency = sums.ideal_s / sums.iter_s;
        report.compute_efficiency = sums.balanced_s / sums.iter_s;
    }
    report.overhead_frac = if sums.iter_s > 0.0 {
        1.0 - sums.compute_s / sums.iter_s
    } else {
        0.0
    };
    let ms = |s: f64| s / it * 1e3;
    let mut o = Overhead {
        iter_ms: ms(sums.iter_s),
        compute_ms: ms(sums.compute_s),
        control_ms: ms(sums.control_s),
        encode_params_ms: ms(sums.encode_s),
        wait_ms: ms(sums.wait_s),
        gather_ms: ms(sums.gather_s),
        last_step_ms: ms(sums.last_step_s),
        worker_pre_ms: ms(sums.worker_pre_s),
        worker_decode_ms: ms(sums.worker_decode_s),
        worker_post_ms: ms(sums.worker_post_s),
        worker_encode_ms: ms(sums.worker_encode_s),
        ctrl_decode_ms: ms(sums.ctrl_decode_s),
        network_ms: 0.0,
        downlink_ms: ms(sums.downlink_s),
        uplink_ms: ms(sums.uplink_s),
        aggregate_ms: ms(sums.aggregate_last_s),
        aggregate_total_ms: ms(sums.aggregate_total_s),
        optimizer_ms: ms(sums.optimizer_s),
        other_ms: 0.0,
    };
    // From the whole interval Steps queued → last gradient in, not from `wait`: the
    // controller's sending work (left out of `wait`, counted in encode and
    // optimiser) runs while the workers already step, and the last worker's
    // `pre`/`step` covered it too, so subtracting both went negative.
    o.network_ms =
        o.gather_ms - o.last_step_ms - o.worker_pre_ms - o.worker_post_ms - o.ctrl_decode_ms;
    o.other_ms =
        o.iter_ms - o.control_ms - o.encode_params_ms - o.wait_ms - o.aggregate_ms - o.optimizer_ms;
    report.overhead = o;
    report.speed_mape = if sums.ape_n > 0 {
        sums.ape / sums.ape_n as f64
    } else {
        0.0
    };
    if !sums.apes.is_empty() {
        sums.apes.sort_by(f32::total_cmp);
        let n = sums.apes.len();
        report.speed_ape_median = f64::from(if n % 2 == 1 {
            sums.apes[n / 2]
        } else {
            0.5 * (sums.apes[n / 2 - 1] + sums.apes[n / 2])
        });
    }
    report.overrun_frac = sums.overruns as f64 / sums.steps.max(1) as f64;
    report.worker_stats = wstats
        .into_values()
        .map(|mut w| {
            let n = w.steps.max(1) as f64;
            w.mean_batch = w.samples as f64 / n;
            for v in [
                &mut w.mean_cpu_ms,
                &mut w.mean_step_ms,
                &mut w.mean_samples_per_s,
                &mut w.mean_cpu_load,
                &mut w.mean_proc_cpu_busy,
                &mut w.mean_proc_mem_used,
                &mut w.mean_loadavg1,
                &mut w.mean_sent_ms,
                &mut w.mean_downlink_ms,
                &mut w.mean_uplink_ms,
            ] {
                *v /= n;
            }
            w
        })
        .collect();
    report.final_params = params;
    active.append(&mut joiners);
    Ok((report, active))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_to_a_peer_that_reads_nothing_times_out() {
        // A 16-byte pipe nobody reads: the writer once waited forever, holding its
        // queue of Steps.
        let (mut w, _r) = tokio::io::duplex(16);
        let e = write_timed(&mut w, &[0u8; 1024], Some(Duration::from_millis(100)))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("took nothing for 100ms"), "{e}");
        // One that reads (a pipe with room) is written at once.
        let (mut w, _r) = tokio::io::duplex(4096);
        write_timed(&mut w, &[0u8; 1024], Some(Duration::from_millis(100)))
            .await
            .unwrap();
    }

    #[test]
    fn bad_timeouts_and_limits_are_config_errors_not_panics() {
        let data = crate::data::load("tiny").unwrap();
        let spec = ModelSpec::new("logreg", data.train.dim, data.train.classes, 0).unwrap();
        let base = ControllerConfig::new(spec).unwrap();
        assert!(validate(&base, &data).is_ok());
        type Edit = fn(&mut ControllerConfig);
        let cases: [(&str, Edit); 11] = [
            ("--worker-timeout-s", |c| c.worker_timeout_s = f64::NAN),
            ("--worker-timeout-s", |c| c.worker_timeout_s = -1.0),
            ("--worker-timeout-s", |c| c.worker_timeout_s = 0.0),
            ("--worker-timeout-s", |c| c.worker_timeout_s = 1e300),
            ("--join-timeout-s", |c| c.join_timeout_s = f64::NAN),
            ("--join-timeout-s", |c| c.join_timeout_s = -1.0),
            ("--max-time-s", |c| c.max_time_s = f64::NAN),
            ("--max-iterations", |c| c.max_iterations = Some(0)),
            ("--min-workers", |c| c.min_workers = 0),
            ("--global-batch", |c| c.global_batch = u64::MAX),
            ("--momentum", |c| {
                c.optimizer = OptimSpec::Sgd {
                    lr: 0.1,
                    momentum: f32::NAN,
                    weight_decay: 0.0,
                }
            }),
        ];
        for (flag, edit) in cases {
            let mut c = base.clone();
            edit(&mut c);
            let e = validate(&c, &data).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{flag}:")), "{flag}: {e}");
        }
    }

    fn rec(speeds: &[(u32, f64)], overhead_s: f64) -> IterRecord {
        IterRecord {
            batch: 300.0,
            overhead_s,
            speeds: speeds.to_vec(),
        }
    }

    #[test]
    fn oracle_balances_on_true_speeds_and_pays_the_jitter() {
        // Steady speeds 200 and 100: the oracle splits 200/100, 1 s each, + overhead.
        let steady: Vec<_> = (0..30)
            .map(|_| rec(&[(0, 200.0), (1, 100.0)], 0.1))
            .collect();
        assert!((oracle_mean_iter_s(&steady) - 1.1).abs() < 1e-12);

        // One jittered iteration in the middle: worker 1 ran at 80 there. Its true
        // speed (window median) stays 100, so the oracle gives it 100 samples that
        // take 1.25 s; the hindsight balance would have been 300 / 280 s.
        let mut jittered = steady.clone();
        jittered[15] = rec(&[(0, 200.0), (1, 80.0)], 0.1);
        let expect = (29.0 * 1.1 + 1.25 + 0.1) / 30.0;
        assert!((oracle_mean_iter_s(&jittered) - expect).abs() < 1e-12);
    }

    #[test]
    fn oracle_follows_membership_changes() {
        // Worker 2 joins halfway; the oracle uses each worker's own series.
        let mut r: Vec<_> = (0..20)
            .map(|_| rec(&[(0, 150.0), (1, 150.0)], 0.0))
            .collect();
        r.extend((0..20).map(|_| rec(&[(0, 150.0), (1, 150.0), (2, 300.0)], 0.0)));
        let expect = (20.0 * 1.0 + 20.0 * 0.5) / 40.0;
        assert!((oracle_mean_iter_s(&r) - expect).abs() < 1e-12);
        assert_eq!(oracle_mean_iter_s(&[]), 0.0);
    }
}
