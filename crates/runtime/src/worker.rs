//! The worker: connects to a controller, loads (or is handed) the dataset, and for
//! every `Step` computes the mean gradient of its range of the sample stream on one
//! compute thread, pads the step to its emulated speed, and replies with the
//! gradient, its timings and the resource signals. A second thread owns the socket
//! (read, decode, write), so a Step is timestamped when it arrives even if the
//! compute thread has to wait for a core (see `run`).

use crate::data::{Data, SampleStream};
use crate::emulation::Emulation;
use crate::error::RuntimeError;
use crate::protocol::{self, Message, ProtocolError, Signals, StepTiming};
use crate::sysinfo::{thread_cpu_time, ProcMonitor};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
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
                    "--load-signal",
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
}

/// Default of [`WorkerConfig::welcome_timeout_s`].
pub const DEFAULT_WELCOME_TIMEOUT_S: f64 = 30.0;
/// Default of [`WorkerConfig::idle_timeout_s`]: longer than the controller's default
/// join timeout, so a worker outlives a controller waiting for the others.
pub const DEFAULT_IDLE_TIMEOUT_S: f64 = 900.0;
/// Default of [`WorkerConfig::stall_timeout_s`].
pub const DEFAULT_STALL_TIMEOUT_S: f64 = 60.0;

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
        }
    }

    /// Checks the timeouts (they become `Duration`s: NaN, negative or huge values
    /// would panic there).
    pub fn validate(&self) -> Result<(), RuntimeError> {
        for (flag, v) in [
            ("--welcome-timeout-s", self.welcome_timeout_s),
            ("--idle-timeout-s", self.idle_timeout_s),
            ("--stall-timeout-s", self.stall_timeout_s),
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
            .map_err(|e| RuntimeError::io(format!("--bind {b}"), e))?;
    }
    let t = Duration::from_secs_f64(cfg.welcome_timeout_s);
    let s = tokio::time::timeout(t, sock.connect(cfg.connect))
        .await
        .map_err(|_| {
            RuntimeError::io(
                format!("connecting to controller {}", cfg.connect),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {t:?} (--welcome-timeout-s)"),
                ),
            )
        })?
        .map_err(|e| RuntimeError::io(format!("connecting to controller {}", cfg.connect), e))?;
    s.set_nodelay(true)
        .map_err(|e| RuntimeError::io("setting TCP_NODELAY", e))?;
    Ok(s)
}

/// The worker's protocol loop.
pub async fn run(mut cfg: WorkerConfig, source: DataSource) -> Result<WorkerSummary, RuntimeError> {
    cfg.validate()?;
    let peer = format!("controller {}", cfg.connect);
    let stall = Duration::from_secs_f64(cfg.stall_timeout_s);
    let mut stream = connect(&cfg).await?;
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
        "waiting for Welcome (--welcome-timeout-s)",
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
    if job
        .model
        .n_params()
        .is_some_and(|n| n > crate::model::MAX_PARAMS)
    {
        return Err(RuntimeError::Protocol(ProtocolError::Invalid {
            peer: peer.clone(),
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
    let model = job.model.build().ok_or_else(|| {
        RuntimeError::Protocol(ProtocolError::Invalid {
            peer: peer.clone(),
            frame: "Welcome",
            field: "model.kind",
            message: format!("unknown model kind {}", job.model.kind),
        })
    })?;
    // The frames this job can need are sized by the model we built, not by what the
    // controller announces.
    if model.n_params() != job.n_params as usize {
        return Err(RuntimeError::Protocol(ProtocolError::Invalid {
            peer: peer.clone(),
            frame: "Welcome",
            field: "n_params",
            message: format!(
                "announces {} parameters, the model it describes has {}",
                job.n_params,
                model.n_params()
            ),
        }));
    }
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

/// What the socket thread hands the compute thread.
enum Incoming {
    Step {
        task: u64,
        iteration: u64,
        version: u64,
        stream_start: u64,
        len: u32,
        /// The number of parameter values that follow as `Params` chunks (none
        /// for a retried task: the worker holds this version).
        params: Option<usize>,
        /// When the Step's header was decoded: the start of the emulated step.
        decoded: Instant,
        decode_s: f64,
        recv_unix_s: f64,
    },
    /// The next parameter values of the current Step, and when they had arrived.
    Params(Vec<f32>, Instant),
    Shutdown(String),
    Failed(RuntimeError),
}

/// Parameter values per chunk handed from the socket thread to the compute thread
/// (64 KB: the compute thread can start on the first rows of the first layer while
/// the rest is still on the wire).
const PARAMS_CHUNK: usize = 16 * 1024;

/// `values` as little-endian bytes: themselves on little-endian hosts, else a copy
/// into `scratch`.
fn f32_wire_bytes<'a>(values: &'a [f32], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if cfg!(target_endian = "little") {
        bytemuck::cast_slice(values)
    } else {
        scratch.clear();
        for v in values {
            scratch.extend_from_slice(&v.to_le_bytes());
        }
        scratch
    }
}

/// The compute thread's handle on the socket: a second descriptor of the same
/// (non-blocking) connection, written with `poll` when the send buffer is full.
struct GradientSink {
    stream: std::net::TcpStream,
    peer: String,
    /// Longest time a write may make no progress (the controller stopped reading).
    stall: Duration,
}

impl GradientSink {
    fn new(stream: &TcpStream, peer: &str, stall: Duration) -> Result<Self, RuntimeError> {
        use std::os::fd::{AsFd, BorrowedFd};
        let fd: BorrowedFd<'_> = stream.as_fd();
        let owned = fd
            .try_clone_to_owned()
            .map_err(|e| RuntimeError::io("duplicating the socket for the compute thread", e))?;
        Ok(GradientSink {
            stream: std::net::TcpStream::from(owned),
            peer: peer.to_string(),
            stall,
        })
    }

    fn write_all(&mut self, mut buf: &[u8]) -> Result<(), RuntimeError> {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let mut progress = Instant::now();
        while !buf.is_empty() {
            match self.stream.write(buf) {
                Ok(0) => return Err(self.error("connection closed")),
                Ok(n) => {
                    buf = &buf[n..];
                    progress = Instant::now();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if progress.elapsed() >= self.stall {
                        return Err(self.error(&format!(
                            "the controller took nothing for {:?} (--stall-timeout-s)",
                            self.stall
                        )));
                    }
                    let mut p = libc::pollfd {
                        fd: self.stream.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for a descriptor this struct owns.
                    unsafe { libc::poll(&mut p, 1, 1000) };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error(&e.to_string())),
            }
        }
        Ok(())
    }

    fn error(&self, message: &str) -> RuntimeError {
        ProtocolError::Io {
            peer: self.peer.clone(),
            context: "sending a Gradient",
            message: message.to_string(),
        }
        .into()
    }

    /// Reset the connection now (a scripted crash).
    fn abort(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

async fn read_loop(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut rbuf: Vec<u8>,
    peer: String,
    to_compute: std::sync::mpsc::Sender<Incoming>,
    limits: protocol::Limits,
    idle: Duration,
) -> Result<(), RuntimeError> {
    loop {
        let r = protocol::timed(
            Some(idle),
            &peer,
            "waiting for a Step or Shutdown (--idle-timeout-s)",
            protocol::read_message_streaming_step_with(
                &mut rd,
                &mut rbuf,
                limits,
                &peer,
                "waiting for a Step",
            ),
        )
        .await;
        let recv_unix_s = protocol::unix_now_s();
        let t0 = Instant::now();
        let decoded = Instant::now();
        let mut values = 0;
        let mut whole = None;
        let (incoming, last) = match r {
            Ok((
                Message::Step {
                    task,
                    iteration,
                    version,
                    stream_start,
                    len,
                    params,
                },
                streamed,
            )) => {
                values = streamed.unwrap_or(0);
                let params = match (streamed, params) {
                    (Some(n), _) => Some(n),
                    (None, Some(p)) => {
                        let n = p.len();
                        whole = Some(p);
                        Some(n)
                    }
                    (None, None) => None,
                };
                (
                    Incoming::Step {
                        task,
                        iteration,
                        version,
                        stream_start,
                        len,
                        params,
                        decoded,
                        decode_s: (decoded - t0).as_secs_f64(),
                        recv_unix_s,
                    },
                    false,
                )
            }
            Ok((Message::Shutdown { reason }, _)) => (Incoming::Shutdown(reason), true),
            Ok((Message::Reject { reason }, _)) | Ok((Message::Error { message: reason }, _)) => (
                Incoming::Failed(RuntimeError::Rejected {
                    peer: peer.clone(),
                    reason,
                }),
                true,
            ),
            Ok((other, _)) => (
                Incoming::Failed(
                    ProtocolError::Unexpected {
                        peer: peer.clone(),
                        expected: "Step or Shutdown",
                        got: other.kind(),
                    }
                    .into(),
                ),
                true,
            ),
            Err(e) => (Incoming::Failed(e.into()), true),
        };
        let mut gone = to_compute.send(incoming).is_err();
        if let Some(p) = whole {
            gone = gone || to_compute.send(Incoming::Params(p, decoded)).is_err();
        }
        // The parameters, chunk by chunk, read straight into the buffers the
        // compute thread consumes (no frame buffer, no separate decode copy).
        let mut left = values;
        while left > 0 && !gone {
            let mut chunk = vec![0.0f32; left.min(PARAMS_CHUNK)];
            left -= chunk.len();
            let msg = match protocol::read_f32s_with(
                &mut rd,
                &mut chunk,
                limits.stall,
                &peer,
                "reading a Step's parameters",
            )
            .await
            {
                Ok(()) => Incoming::Params(chunk, Instant::now()),
                Err(e) => {
                    let _ = to_compute.send(Incoming::Failed(e.into()));
                    gone = true;
                    break;
                }
            };
            gone = to_compute.send(msg).is_err();
        }
        if gone || last {
            // The compute thread is gone (it aborted) or this was the last message;
            // keep the write half alive until the writer is done.
            return std::future::pending().await;
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn compute_loop(
    cfg: &WorkerConfig,
    peer: &str,
    model: &dyn crate::model::Model,
    data: &Data,
    stream_seed: u64,
    worker_id: u32,
    steps: std::sync::mpsc::Receiver<Incoming>,
    mut out: GradientSink,
) -> Result<WorkerSummary, RuntimeError> {
    let n_params = model.n_params();
    let mut stream_idx = SampleStream::new(data.train.n, stream_seed);
    let mut params: Vec<f32> = Vec::new();
    let mut version = u64::MAX;
    let mut grad = vec![0.0f32; n_params];
    let mut idx = Vec::new();
    let mut xb: Vec<f32> = Vec::new();
    let mut yb: Vec<u32> = Vec::new();
    let mut wbuf = Vec::new();
    let mut state = Vec::new();
    let mut wire = Vec::new();
    let mut filled;
    let mut arrivals: Vec<(usize, Instant)> = Vec::new();
    // Gradient blocks sent ahead of the Gradient frame (the chunked uplink), with
    // the emulated time (since the Step's header) their compute ended.
    let mut parts: Vec<(std::ops::Range<usize>, f64)> = Vec::new();
    let mut monitor = ProcMonitor::default();
    let mut last_proc = monitor.read();
    let mut summary = WorkerSummary {
        worker_id,
        ..Default::default()
    };
    let peer = peer.to_string();
    let dim = data.train.dim;
    loop {
        let Ok(incoming) = steps.recv() else {
            // The socket side ended without a Shutdown.
            return Err(ProtocolError::Closed {
                peer,
                when: "waiting for a Step",
            }
            .into());
        };
        let (task, iteration, v, stream_start, len, p, step0, decode_s, recv_unix_s) =
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
                } => (
                    task,
                    iteration,
                    version,
                    stream_start,
                    len,
                    params,
                    decoded,
                    decode_s,
                    recv_unix_s,
                ),
                Incoming::Shutdown(reason) => {
                    summary.shutdown_reason = reason;
                    return Ok(summary);
                }
                Incoming::Failed(e) => return Err(e),
                Incoming::Params(..) => {
                    return Err(ProtocolError::Invalid {
                        peer,
                        frame: "Step",
                        field: "params",
                        message: "values without a Step".into(),
                    }
                    .into())
                }
            };
        // Values of this Step's parameters that are still to come (as `Params`).
        arrivals.clear();
        if let Some(n) = p {
            if n != n_params {
                return Err(ProtocolError::Invalid {
                    peer,
                    frame: "Step",
                    field: "params",
                    message: format!("{n} values, the model has {n_params}"),
                }
                .into());
            }
            params.resize(n_params, 0.0);
            filled = 0;
            version = v;
        } else if v != version {
            return Err(ProtocolError::Invalid {
                peer,
                frame: "Step",
                field: "params",
                message: format!("omitted, but this worker holds version {version}, not {v}"),
            }
            .into());
        } else {
            filled = n_params;
        }
        match cfg.fault {
            Some(Fault::DieAt(k)) if k == iteration => {
                if cfg.exit_on_fault {
                    std::process::exit(137);
                }
                out.abort();
                summary.shutdown_reason = format!("scripted death at iteration {k}");
                return Ok(summary);
            }
            Some(Fault::GarbageAt(k)) if k == iteration => {
                let junk = vec![9u8, 0, 0, 0, 99, 1, 2, 3, 4, 5, 6, 7, 8];
                let _ = out.write_all(&junk);
                // The controller hangs up on us; the socket side then reports the
                // closed connection.
                let _ = steps.recv();
                summary.shutdown_reason = format!("scripted garbage at iteration {k}");
                return Ok(summary);
            }
            _ => {}
        }
        let (slowdown, emu_cpu, emu_mem) = cfg.emulation.conditions(iteration);
        parts.clear();
        // --- the emulated step started when the Step's header was decoded: wait for
        // a compute slot (if local workers share the cores), then real compute, piece
        // by piece as the parameters arrive. Emulated clock (seconds since the
        // header): a piece that used `cpu` seconds of this thread's CPU takes
        // `factor · cpu`, and starts no earlier than the parameters it needs had
        // arrived. Time the compute could not cover is a stall, reported with the
        // time before the step (it is communication, not compute).
        let slot = cfg.emulation.slots.as_ref().map(|s| s.acquire());
        let queue_s = step0.elapsed().as_secs_f64();
        let factor = cfg.emulation.target_s(1.0, slowdown);
        let mut clock = EmulatedClock::new(step0, factor);
        let t = clock.begin();
        stream_idx.indices(stream_start, len as usize, &mut idx);
        xb.clear();
        yb.clear();
        for &i in &idx {
            xb.extend_from_slice(data.train.row(i as usize));
            yb.push(data.train.y[i as usize]);
        }
        debug_assert_eq!(xb.len(), idx.len() * dim);
        clock.end(t, None);
        let stats = match model.pipelined().filter(|_| cfg.pipeline) {
            Some(pl) => {
                pl.begin(len as usize, &mut state);
                for j in 0..pl.blocks() {
                    let ready = receive_params(
                        &steps,
                        &mut params,
                        &mut filled,
                        &mut arrivals,
                        pl.block_end(j),
                        &peer,
                    )?;
                    let t = clock.begin();
                    pl.forward_block(&params, &xb, len as usize, j, &mut state);
                    clock.end(t, ready);
                }
                let ready = receive_params(
                    &steps,
                    &mut params,
                    &mut filled,
                    &mut arrivals,
                    n_params,
                    &peer,
                )?;
                let t = clock.begin();
                let stats = pl.finish_head(&params, &xb, &yb, &mut state, &mut grad);
                clock.end(t, ready);
                // The first layer's weight gradient, block by block: each block may
                // leave once the emulated clock has reached the end of its compute.
                let mut t = clock.begin();
                for j in 0..pl.grad_blocks() {
                    pl.backward_block(&xb, len as usize, j, &state, &mut grad);
                    // One clock reading ends this block and begins the next.
                    t = clock.lap(t);
                    parts.push((pl.grad_block(j), clock.end_s));
                }
                // The last block goes with the Gradient frame itself.
                parts.pop();
                stats
            }
            None => {
                let ready = receive_params(
                    &steps,
                    &mut params,
                    &mut filled,
                    &mut arrivals,
                    n_params,
                    &peer,
                )?;
                let t = clock.begin();
                let stats = model.loss_grad(&params, &xb, &yb, &mut grad);
                clock.end(t, ready);
                stats
            }
        };
        let (cpu_s, wall_s) = (clock.cpu_s, clock.wall_s);
        drop(slot);
        // The monitor's reading belongs to a node agent, not to the step's critical
        // path: take it inside the padding.
        let proc_now = monitor.read();
        // --- emulated speed: pad after the real compute
        let target = clock.compute_s;
        let stall_s = clock.stall_s();
        let realtime =
            cfg.realtime_io && crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_WORKER);
        // Each block leaves at the emulated time its compute ended, never earlier.
        for (range, end_s) in &parts {
            let elapsed = step0.elapsed().as_secs_f64();
            if *end_s > elapsed {
                std::thread::sleep(Duration::from_secs_f64(end_s - elapsed));
            }
            let part = Message::GradientPart {
                task,
                iteration,
                offset: range.start as u32,
                values: Vec::new(),
            };
            protocol::encode_gradient_head(&part, range.len(), &mut wbuf);
            out.write_all(&wbuf)?;
            out.write_all(f32_wire_bytes(&grad[range.clone()], &mut wire))?;
        }
        if let Some(Fault::DieAfterPartsAt(k)) = cfg.fault.filter(|_| !parts.is_empty()) {
            if k == iteration {
                if cfg.exit_on_fault {
                    std::process::exit(137);
                }
                out.abort();
                summary.shutdown_reason = format!("scripted death after parts at iteration {k}");
                return Ok(summary);
            }
        }
        let first = parts.last().map_or(0, |(r, _)| r.end);
        let elapsed = step0.elapsed().as_secs_f64();
        if clock.end_s > elapsed {
            std::thread::sleep(Duration::from_secs_f64(clock.end_s - elapsed));
        }
        let step_s = step0.elapsed().as_secs_f64() - stall_s;
        let t_post = Instant::now();
        // --- signals: at the start of this step (emulated windows of `iteration` and
        // the /proc reading taken after the previous step), and at its end, which is
        // the start of the next one.
        let (_, next_cpu, next_mem) = cfg.emulation.conditions(iteration + 1);
        let emulating = !cfg.emulation.windows.is_empty();
        let mix = |emu: f32, proc: f32| match cfg.load_signal {
            LoadSignal::Auto if emulating => emu,
            LoadSignal::Auto | LoadSignal::Proc => proc,
            LoadSignal::Emulated => emu,
            LoadSignal::Combined => 1.0 - (1.0 - emu) * (1.0 - proc),
        };
        let signals = Signals {
            cpu_load: mix(emu_cpu, last_proc.cpu_busy),
            mem_load: mix(emu_mem, last_proc.mem_used),
            next_cpu_load: mix(next_cpu, proc_now.cpu_busy),
            next_mem_load: mix(next_mem, proc_now.mem_used),
            proc_cpu_busy: proc_now.cpu_busy,
            proc_mem_used: proc_now.mem_used,
            loadavg1: proc_now.loadavg1_per_core,
            slowdown: slowdown as f32,
        };
        last_proc = proc_now;
        let t_enc = Instant::now();
        let reply = Message::Gradient {
            task,
            iteration,
            len,
            loss_sum: stats.loss_sum,
            correct: stats.correct,
            timing: StepTiming {
                cpu_s,
                wall_s,
                step_s,
                decode_s,
                encode_s: 0.0,
                target_s: target,
                pre_s: decode_s + stall_s,
                post_s: 0.0,
                queue_s,
                recv_unix_s,
                send_unix_s: 0.0,
            },
            signals,
            first: first as u32,
            grad: Vec::new(),
        };
        // The frame's head; the values are written from `grad` itself.
        protocol::encode_gradient_head(&reply, grad.len() - first, &mut wbuf);
        let encode_s = t_enc.elapsed().as_secs_f64();
        // Fill in the times that encoding itself took.
        let off = StepTiming::ENCODE_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&encode_s.to_le_bytes());
        let off = StepTiming::POST_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&t_post.elapsed().as_secs_f64().to_le_bytes());
        let off = StepTiming::SEND_UNIX_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&protocol::unix_now_s().to_le_bytes());
        out.write_all(&wbuf)?;
        out.write_all(f32_wire_bytes(&grad[first..], &mut wire))?;
        if realtime {
            crate::sysinfo::set_thread_realtime(0);
        }
        summary.steps += 1;
    }
}

/// Take parameter chunks until the first `need` values are there; returns when the
/// chunk completing them had arrived (`None`: they were there before this Step).
fn receive_params(
    steps: &std::sync::mpsc::Receiver<Incoming>,
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
struct EmulatedClock {
    start: Instant,
    factor: f64,
    /// Emulated time of the step so far, from `start`, stalls included.
    end_s: f64,
    /// Emulated compute: `factor ×` the CPU time of the pieces.
    compute_s: f64,
    cpu_s: f64,
    wall_s: f64,
}

impl EmulatedClock {
    fn new(start: Instant, factor: f64) -> Self {
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
    fn piece(&mut self, ready_s: f64, cpu: f64) {
        self.cpu_s += cpu;
        self.end_s = self.end_s.max(ready_s) + self.factor * cpu;
        self.compute_s += self.factor * cpu;
    }
    /// Emulated time spent waiting for parameters.
    fn stall_s(&self) -> f64 {
        (self.end_s - self.compute_s).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_clock_covers_late_parameters_with_compute() {
        let mut c = EmulatedClock::new(Instant::now(), 4.0);
        // 1 ms of CPU from the start: 4 ms emulated.
        c.piece(0.0, 0.001);
        assert!((c.end_s - 0.004).abs() < 1e-12 && c.stall_s() < 1e-12);
        // Its next input arrived at 3 ms, while the emulated compute still ran: free.
        c.piece(0.003, 0.001);
        assert!((c.end_s - 0.008).abs() < 1e-12 && c.stall_s() < 1e-12);
        // The last one arrived at 10 ms: 2 ms of stall, then its compute.
        c.piece(0.010, 0.0005);
        assert!((c.end_s - 0.012).abs() < 1e-12);
        assert!((c.compute_s - 0.010).abs() < 1e-12);
        assert!((c.stall_s() - 0.002).abs() < 1e-12);
        assert!((c.cpu_s - 0.0025).abs() < 1e-12);
    }

    #[test]
    fn encode_time_offset_points_at_encode_s() {
        let m = Message::Gradient {
            task: 1,
            iteration: 2,
            len: 3,
            loss_sum: 0.0,
            correct: 0,
            timing: StepTiming {
                encode_s: 0.0,
                ..Default::default()
            },
            signals: Signals::default(),
            first: 0,
            grad: vec![1.0],
        };
        let mut buf = Vec::new();
        m.encode(&mut buf);
        let off = StepTiming::ENCODE_S_OFFSET;
        buf[off..off + 8].copy_from_slice(&1.25f64.to_le_bytes());
        let off = StepTiming::POST_S_OFFSET;
        buf[off..off + 8].copy_from_slice(&2.5f64.to_le_bytes());
        match Message::decode(&buf[4..], "t").unwrap() {
            Message::Gradient { timing, .. } => {
                assert_eq!(timing.encode_s, 1.25);
                assert_eq!(timing.post_s, 2.5);
            }
            _ => unreachable!(),
        }
    }
}
