//! The worker: connects to a controller, loads (or is handed) the dataset, and for
//! every `Step` computes the mean gradient of its range of the sample stream on one
//! compute thread, pads the step to its emulated speed, and replies with the
//! gradient, its timings and the resource signals. A second thread owns the socket
//! (read, decode, write), so a Step is timestamped when it arrives even if the
//! compute thread has to wait for a core (see `run`).
//!
//! This file holds the configuration and the handshake; `socket.rs` the socket
//! thread's reads and the compute thread's handle for writing Gradients;
//! `compute.rs` the compute thread (one step: the batch, the real compute as the
//! parameters arrive, the padding to the emulated speed, the reply).

mod compute;
mod socket;
#[cfg(test)]
mod tests;

use crate::data::Data;
use crate::emulation::Emulation;
use crate::error::RuntimeError;
use crate::model::Model;
use crate::protocol::{self, JobSpec, Message, ProtocolError};
use compute::compute_loop;
use socket::{read_loop, GradientSink, Incoming};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};

/// Which load signal the predictors see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoadSignal {
    /// The emulated interference load when the worker emulates interference,
    /// otherwise the machine's /proc CPU busy share.
    #[default]
    Auto,
    /// Only the emulated interference load (0 without windows).
    Emulated,
    /// Only /proc.
    Proc,
    /// `1 − (1 − emulated)(1 − proc)`: independent loads combined.
    Combined,
}

impl std::str::FromStr for LoadSignal {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => LoadSignal::Auto,
            "emulated" => LoadSignal::Emulated,
            "proc" => LoadSignal::Proc,
            "combined" => LoadSignal::Combined,
            _ => {
                return Err(RuntimeError::config(
                    "load_signal",
                    format!("unknown `{s}`; expected auto, emulated, proc or combined"),
                ))
            }
        })
    }
}

/// How a worker is scripted to fail (tests and the elasticity experiment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// On receiving the Step of this iteration, drop the connection without replying
    /// (a crash in the middle of an iteration).
    DieAt(u64),
    /// On receiving the Step of this iteration, reply with a garbage frame.
    GarbageAt(u64),
    /// In this iteration, send the gradient's first blocks (`GradientPart`s) and
    /// then drop the connection before the `Gradient` (the controller must not
    /// count the partial gradient).
    DieAfterPartsAt(u64),
    /// From this iteration on, send poisoned gradients (a bad peer: the controller
    /// must drop it and redo the step without it, `controller/screen.rs`).
    PoisonFrom(Poison, u64),
}

/// How a poisoned worker spoils its gradient (tests of the controller's screen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    /// Every value is NaN (a worker whose arithmetic blew up).
    Nan,
    /// The last value is +∞.
    Inf,
    /// Every value × 10⁶: finite, but an implausible norm.
    Huge,
}

impl Poison {
    /// Spoils `grad` in place.
    pub fn apply(self, grad: &mut [f32]) {
        let n = grad.len();
        if n == 0 {
            return;
        }
        match self {
            Poison::Nan => grad.iter_mut().for_each(|v| *v = f32::NAN),
            Poison::Inf => grad[n - 1] = f32::INFINITY,
            Poison::Huge => grad.iter_mut().for_each(|v| *v *= 1e6),
        }
    }
}

impl std::str::FromStr for Poison {
    type Err = RuntimeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "nan" => Poison::Nan,
            "inf" => Poison::Inf,
            "huge" => Poison::Huge,
            _ => {
                return Err(RuntimeError::config(
                    "poison",
                    format!("unknown `{s}`; expected nan, inf or huge"),
                ))
            }
        })
    }
}

/// A worker's configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub connect: SocketAddr,
    /// Local address to connect from (multi-host tests on 127.0.0.x aliases).
    pub bind: Option<SocketAddr>,
    pub name: String,
    pub emulation: Emulation,
    /// Interference windows by worker slot, resolved with the id the controller
    /// assigns (used when `emulation.windows` is empty and no slot was chosen).
    pub interference_by_id: Option<crate::emulation::InterferencePlan>,
    pub load_signal: LoadSignal,
    pub fault: Option<Fault>,
    /// Exit the process (as if killed) instead of returning when `fault` fires:
    /// used when the worker is its own process.
    pub exit_on_fault: bool,
    /// Told once the worker has sent `Ready` (local launches wait for a joining
    /// worker's handshake, so that a scripted join lands where it was scheduled).
    pub on_ready: Option<std::sync::mpsc::Sender<()>>,
    /// Start computing on the first parameters while the rest arrive (models that
    /// support it); off: wait for all of them.
    pub pipeline: bool,
    /// The socket thread asks for real-time priority, and so does the compute
    /// thread from the end of its real compute until its Gradient is sent (waking
    /// from the padding and sending are message moving, not compute); the compute
    /// itself stays at the normal policy. See `sysinfo::set_thread_realtime`.
    pub realtime_io: bool,
    /// Connecting and the controller's `Welcome` must come within this many seconds.
    pub welcome_timeout_s: f64,
    /// How long the worker waits for the controller's next frame (a Step, or
    /// Shutdown) before it gives up; the controller may be waiting for other workers
    /// to join (its `--join-timeout-s`, 600 s by default) or evaluating.
    pub idle_timeout_s: f64,
    /// A frame that has started (or a Gradient being written) may make no progress
    /// for at most this many seconds.
    pub stall_timeout_s: f64,
    /// Keep trying to join for this many seconds when the controller is not there
    /// or turns the worker away for now (see [`retryable`]); 0: one try.
    pub retry_for_s: f64,
    /// The longest delay between two tries to join (s).
    pub retry_max_delay_s: f64,
}

/// Default of [`WorkerConfig::welcome_timeout_s`].
pub const DEFAULT_WELCOME_TIMEOUT_S: f64 = 30.0;
/// Default of [`WorkerConfig::idle_timeout_s`]: longer than the controller's default
/// join timeout, so a worker outlives a controller waiting for the others.
pub const DEFAULT_IDLE_TIMEOUT_S: f64 = 900.0;
/// Default of [`WorkerConfig::stall_timeout_s`].
pub const DEFAULT_STALL_TIMEOUT_S: f64 = 60.0;
/// Default of [`WorkerConfig::retry_max_delay_s`].
pub const DEFAULT_RETRY_MAX_DELAY_S: f64 = 5.0;
/// How long `pacer worker` keeps trying to join by default (`--retry-for-s`).
pub const DEFAULT_RETRY_FOR_S: f64 = 120.0;

impl WorkerConfig {
    pub fn new(connect: SocketAddr, name: impl Into<String>) -> Self {
        WorkerConfig {
            connect,
            bind: None,
            name: name.into(),
            emulation: Emulation::default(),
            interference_by_id: None,
            load_signal: LoadSignal::Auto,
            fault: None,
            exit_on_fault: false,
            on_ready: None,
            pipeline: true,
            realtime_io: true,
            welcome_timeout_s: DEFAULT_WELCOME_TIMEOUT_S,
            idle_timeout_s: DEFAULT_IDLE_TIMEOUT_S,
            stall_timeout_s: DEFAULT_STALL_TIMEOUT_S,
            retry_for_s: 0.0,
            retry_max_delay_s: DEFAULT_RETRY_MAX_DELAY_S,
        }
    }

    /// Checks the timeouts (they become `Duration`s: NaN, negative or huge values
    /// would panic there).
    pub fn validate(&self) -> Result<(), RuntimeError> {
        for (flag, v) in [
            ("welcome_timeout_s", self.welcome_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
            ("stall_timeout_s", self.stall_timeout_s),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 1e9) {
                return Err(RuntimeError::config(
                    flag,
                    format!(
                        "must be a number of seconds in (0, 1e9], got {}",
                        crate::controller::short_num(v)
                    ),
                ));
            }
        }
        for (flag, v) in [
            ("retry_for_s", self.retry_for_s),
            ("retry_max_delay_s", self.retry_max_delay_s),
        ] {
            if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                return Err(RuntimeError::config(
                    flag,
                    format!(
                        "must be a number of seconds in [0, 1e9], got {}",
                        crate::controller::short_num(v)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Where the worker's data comes from.
#[derive(Debug, Clone)]
pub enum DataSource {
    /// Load the dataset the controller names in `Welcome`.
    FromJob,
    /// Load this spec (the same data at another path on this host).
    Spec(String),
    /// Already loaded (local workers of `pacer train` share one copy).
    Loaded(Arc<Data>),
}

/// What a worker did, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerSummary {
    pub worker_id: u32,
    pub steps: u64,
    pub shutdown_reason: String,
}

/// Run a worker until the controller shuts it down: the calling thread runs the
/// socket on a current-thread runtime, and one more thread computes (single-threaded
/// matrix products: one worker = one core's worth of compute).
pub fn run_blocking(cfg: WorkerConfig, data: DataSource) -> Result<WorkerSummary, RuntimeError> {
    if cfg.realtime_io {
        crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_WORKER);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::io("starting the worker's runtime", e))?;
    rt.block_on(run(cfg, data))
}

async fn connect(cfg: &WorkerConfig) -> Result<TcpStream, RuntimeError> {
    let sock = if cfg.connect.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| RuntimeError::io("creating a socket", e))?;
    crate::sysinfo::set_socket_buffers(&sock, 4 << 20);
    if let Some(b) = cfg.bind {
        sock.bind(b)
            .map_err(|e| RuntimeError::io(format!("`bind` {b}"), e))?;
    }
    let t = Duration::from_secs_f64(cfg.welcome_timeout_s);
    let s = tokio::time::timeout(t, sock.connect(cfg.connect))
        .await
        .map_err(|_| {
            RuntimeError::io(
                format!("connecting to controller {}", cfg.connect),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {t:?} (`welcome_timeout_s`)"),
                ),
            )
        })?
        .map_err(|e| RuntimeError::io(format!("connecting to controller {}", cfg.connect), e))?;
    s.set_nodelay(true)
        .map_err(|e| RuntimeError::io("setting TCP_NODELAY", e))?;
    Ok(s)
}

/// Whether a failure to join is worth another try: the controller was not there
/// (yet), hung up or timed out before its `Welcome`, or turned us away for now (a
/// `Reject` whose reason ends in "try again": too many handshakes, or shed for a
/// newer connection). A refusal of who we are (version, a bad frame) is not.
pub fn retryable(e: &RuntimeError) -> bool {
    match e {
        RuntimeError::Io { .. } => true,
        RuntimeError::Protocol(
            ProtocolError::Closed { .. } | ProtocolError::Timeout { .. } | ProtocolError::Io { .. },
        ) => true,
        RuntimeError::Rejected { reason, .. } => reason.ends_with("try again"),
        _ => false,
    }
}

/// The first delay between tries to join (s); it doubles up to
/// [`WorkerConfig::retry_max_delay_s`].
pub const RETRY_FIRST_DELAY_S: f64 = 0.1;

/// [`join`], tried again while [`retryable`] with exponential backoff and jitter
/// (each delay drawn in [½, 1] × min(max delay, 0.1 s · 2ⁿ) from a generator seeded
/// with the worker's name, so workers turned away together do not come back
/// together), until [`WorkerConfig::retry_for_s`] after the first try. Each retry is
/// said on stderr.
async fn join_with_retry(
    cfg: &WorkerConfig,
    peer: &str,
    stall: Duration,
) -> Result<(TcpStream, u32, JobSpec, Vec<u8>), RuntimeError> {
    let start = std::time::Instant::now();
    let mut rng = cfg.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut attempt: u32 = 0;
    loop {
        let e = match join(cfg, peer, stall).await {
            Ok(j) => return Ok(j),
            Err(e) if retryable(&e) => e,
            Err(e) => return Err(e),
        };
        attempt += 1;
        // The OS error too (a refused connection says only its context otherwise).
        let said = match &e {
            RuntimeError::Io { context, source } => format!("{context}: {source}"),
            e => e.to_string(),
        };
        // SplitMix64: a uniform draw in [0, 1).
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
        let cap = (RETRY_FIRST_DELAY_S * 2f64.powi(attempt.min(30) as i32 - 1))
            .min(cfg.retry_max_delay_s);
        let delay = cap * (0.5 + 0.5 * u);
        let spent = start.elapsed().as_secs_f64();
        if spent + delay > cfg.retry_for_s {
            if attempt == 1 {
                return Err(e);
            }
            return Err(RuntimeError::Stopped(format!(
                "could not join {peer} in {attempt} tries over {spent:.1} s (`retry_for_s` {}): {said}",
                crate::controller::short_num(cfg.retry_for_s)
            )));
        }
        eprintln!(
            "pacer worker {}: {said}; trying again in {delay:.2} s (try {}, until {} s after the first, --retry-for-s)",
            cfg.name,
            attempt + 1,
            crate::controller::short_num(cfg.retry_for_s)
        );
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
    }
}

/// One try to join: connect, `Hello`, the controller's `Welcome` (its worker id and
/// the job), with the stream and the read buffer to go on with.
async fn join(
    cfg: &WorkerConfig,
    peer: &str,
    stall: Duration,
) -> Result<(TcpStream, u32, JobSpec, Vec<u8>), RuntimeError> {
    let peer = peer.to_string();
    let mut stream = connect(cfg).await?;
    let mut rbuf = Vec::new();
    let mut wbuf = Vec::new();
    protocol::write_message(
        &mut stream,
        &Message::Hello {
            version: protocol::VERSION,
            name: cfg.name.clone(),
        },
        &mut wbuf,
        &peer,
    )
    .await?;
    // Nothing model-sized before the job is known: a Welcome, a Reject.
    let welcome = protocol::timed(
        Some(Duration::from_secs_f64(cfg.welcome_timeout_s)),
        &peer,
        "waiting for Welcome (`welcome_timeout_s`)",
        protocol::read_message_with(
            &mut stream,
            &mut rbuf,
            protocol::Limits::control(stall),
            &peer,
            "waiting for Welcome",
        ),
    )
    .await?;
    let (worker_id, job) = match welcome {
        Message::Welcome { worker_id, job } => (worker_id, job),
        Message::Reject { reason } => {
            return Err(RuntimeError::Rejected { peer, reason });
        }
        other => {
            return Err(ProtocolError::Unexpected {
                peer,
                expected: "Welcome",
                got: other.kind(),
            }
            .into())
        }
    };
    Ok((stream, worker_id, job, rbuf))
}

/// The worker's protocol loop.
pub async fn run(mut cfg: WorkerConfig, source: DataSource) -> Result<WorkerSummary, RuntimeError> {
    cfg.validate()?;
    let peer = format!("controller {}", cfg.connect);
    let stall = Duration::from_secs_f64(cfg.stall_timeout_s);
    let (mut stream, worker_id, job, rbuf) = join_with_retry(&cfg, &peer, stall).await?;
    let mut wbuf = Vec::new();
    if let Some(plan) = cfg.interference_by_id.take() {
        if cfg.emulation.windows.is_empty() {
            cfg.emulation.windows = plan.for_slot(worker_id as usize);
        }
    }
    let data = match source {
        DataSource::Loaded(d) => d,
        DataSource::FromJob => Arc::new(crate::data::load(&job.dataset)?),
        DataSource::Spec(s) => Arc::new(crate::data::load(&s)?),
    };
    // Tell the controller what we hold; it refuses a mismatch (and says why).
    protocol::write_message(
        &mut stream,
        &Message::Ready {
            fingerprint: data.fingerprint,
            n_train: data.train.n as u64,
        },
        &mut wbuf,
        &peer,
    )
    .await?;
    if let Some(tx) = cfg.on_ready.take() {
        let _ = tx.send(());
    }
    let model = build_model(&job, &peer)?;
    let limits = protocol::Limits::for_job(model.n_params(), stall);
    let idle = Duration::from_secs_f64(cfg.idle_timeout_s);
    // Two threads from here on: this one does the socket (read, decode, write), a
    // compute thread does the step. A Step is timestamped the moment it is decoded,
    // and the emulated step runs from then: if the compute thread waits for a core
    // (more workers than cores), the padding absorbs it, as on a cluster where every
    // worker has its own core; if it cannot, the step overruns and says so. Without
    // the split, a worker whose single thread queued behind the others' compute read
    // its parameters late, and that artefact of a 2-core machine was charged to the
    // network.
    //
    // The compute thread writes its Gradient itself (the worker sends nothing
    // else once training runs): handing it to this thread cost a thread wake-up on
    // the critical path of every iteration, ~0.2 ms on the loaded 2-core machine.
    let sink = GradientSink::new(&stream, &peer, stall)?;
    let (rd, _wr) = stream.into_split();
    let (step_tx, step_rx) = std::sync::mpsc::channel::<Incoming>();
    // Resolves when the compute thread is done (its sender is dropped).
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let compute = {
        let peer = peer.clone();
        let data = data.clone();
        let cfg = cfg.clone();
        std::thread::Builder::new()
            .name(format!("{}-compute", cfg.name))
            .spawn(move || {
                let _done = done_tx;
                // Threads inherit the policy of their creator: compute is normal.
                crate::sysinfo::set_thread_realtime(0);
                compute_loop(
                    &cfg,
                    &peer,
                    model.as_ref(),
                    &data,
                    job.stream_seed,
                    worker_id,
                    step_rx,
                    sink,
                )
            })
            .map_err(|e| RuntimeError::io("starting the compute thread", e))?
    };
    let reader = read_loop(rd, rbuf, peer.clone(), step_tx, limits, idle);
    // The reader ends on Shutdown (or a broken connection), and tells the compute
    // thread, which then ends too. Either way the connection is finished.
    let io: Result<(), RuntimeError> = tokio::select! {
        r = reader => r,
        _ = done_rx => Ok(()),
    };
    let summary = compute
        .join()
        .map_err(|_| RuntimeError::Stopped("the compute thread panicked".into()))?;
    match (summary, io) {
        (Ok(s), _) if !s.shutdown_reason.is_empty() => Ok(s),
        (Ok(s), Ok(())) => Ok(s),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

/// The model a `Welcome` describes, checked: not beyond [`crate::model::MAX_PARAMS`],
/// and with the parameter count the controller announces.
fn build_model(job: &JobSpec, peer: &str) -> Result<Box<dyn Model>, RuntimeError> {
    if job
        .model
        .n_params()
        .is_some_and(|n| n > crate::model::MAX_PARAMS)
    {
        return Err(RuntimeError::Protocol(ProtocolError::Invalid {
            peer: peer.to_string(),
            frame: "Welcome",
            field: "model",
            message: format!(
                "a model of more than {} parameters (dim {}, classes {}, width {})",
                crate::model::MAX_PARAMS,
                job.model.dim,
                job.model.classes,
                job.model.width
            ),
        }));
    }
    let model = job.model.build();
    // The frames this job can need are sized by the model we built, not by what the
    // controller announces.
    if model.n_params() != job.n_params as usize {
        return Err(RuntimeError::Protocol(ProtocolError::Invalid {
            peer: peer.to_string(),
            frame: "Welcome",
            field: "n_params",
            message: format!(
                "announces {} parameters, the model it describes has {}",
                job.n_params,
                model.n_params()
            ),
        }));
    }
    Ok(model)
}
