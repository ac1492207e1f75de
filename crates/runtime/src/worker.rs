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
}

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
        }
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
    let s = sock
        .connect(cfg.connect)
        .await
        .map_err(|e| RuntimeError::io(format!("connecting to controller {}", cfg.connect), e))?;
    s.set_nodelay(true)
        .map_err(|e| RuntimeError::io("setting TCP_NODELAY", e))?;
    Ok(s)
}

/// The worker's protocol loop.
pub async fn run(mut cfg: WorkerConfig, source: DataSource) -> Result<WorkerSummary, RuntimeError> {
    let peer = format!("controller {}", cfg.connect);
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
    let (worker_id, job) =
        match protocol::read_message(&mut stream, &mut rbuf, &peer, "waiting for Welcome").await? {
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
    let model = job.model.build().ok_or_else(|| {
        RuntimeError::Protocol(ProtocolError::Invalid {
            peer: peer.clone(),
            frame: "Welcome",
            field: "model.kind",
            message: format!("unknown model kind {}", job.model.kind),
        })
    })?;
    // Two threads from here on: this one does the socket (read, decode, write), a
    // compute thread does the step. A Step is timestamped the moment it is decoded,
    // and the emulated step runs from then: if the compute thread waits for a core
    // (more workers than cores), the padding absorbs it, as on a cluster where every
    // worker has its own core; if it cannot, the step overruns and says so. Without
    // the split, a worker whose single thread queued behind the others' compute read
    // its parameters late, and that artefact of a 2-core machine was charged to the
    // network.
    let (rd, mut wr) = stream.into_split();
    let (step_tx, step_rx) = std::sync::mpsc::channel::<Incoming>();
    let (out_tx, mut out_rx) = tokio::sync::mpsc::unbounded_channel::<Outgoing>();
    let compute = {
        let peer = peer.clone();
        let data = data.clone();
        let cfg = cfg.clone();
        std::thread::Builder::new()
            .name(format!("{}-compute", cfg.name))
            .spawn(move || {
                compute_loop(
                    &cfg,
                    &peer,
                    model.as_ref(),
                    &data,
                    job.stream_seed,
                    worker_id,
                    step_rx,
                    out_tx,
                )
            })
            .map_err(|e| RuntimeError::io("starting the compute thread", e))?
    };
    let reader = read_loop(rd, rbuf, peer.clone(), step_tx);
    let writer = async {
        while let Some(out) = out_rx.recv().await {
            match out {
                Outgoing::Frame(f) => {
                    use tokio::io::AsyncWriteExt;
                    if let Err(e) = wr.write_all(&f).await {
                        return Err(RuntimeError::from(ProtocolError::Io {
                            peer: peer.clone(),
                            context: "sending a Gradient",
                            message: e.to_string(),
                        }));
                    }
                }
                // Dropping both halves resets the connection mid-iteration.
                Outgoing::Abort => return Ok(()),
            }
        }
        Ok(())
    };
    // The reader ends on Shutdown (or a broken connection); the writer when the
    // compute thread is done or aborts. Either way the connection is finished.
    let io: Result<(), RuntimeError> = tokio::select! {
        r = reader => r,
        w = writer => w,
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
        params: Option<Vec<f32>>,
        /// When decoding finished: the start of the emulated step.
        decoded: Instant,
        decode_s: f64,
        recv_unix_s: f64,
    },
    Shutdown(String),
    Failed(RuntimeError),
}

/// What the compute thread hands the socket thread.
enum Outgoing {
    Frame(Vec<u8>),
    Abort,
}

async fn read_loop(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut rbuf: Vec<u8>,
    peer: String,
    to_compute: std::sync::mpsc::Sender<Incoming>,
) -> Result<(), RuntimeError> {
    loop {
        let r = protocol::read_frame(&mut rd, &mut rbuf, &peer, "waiting for a Step").await;
        let recv_unix_s = protocol::unix_now_s();
        let t0 = Instant::now();
        let msg = r.and_then(|()| Message::decode(&rbuf, &peer));
        let decoded = Instant::now();
        let (incoming, last) = match msg {
            Ok(Message::Step {
                task,
                iteration,
                version,
                stream_start,
                len,
                params,
            }) => (
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
            ),
            Ok(Message::Shutdown { reason }) => (Incoming::Shutdown(reason), true),
            Ok(Message::Reject { reason }) | Ok(Message::Error { message: reason }) => (
                Incoming::Failed(RuntimeError::Rejected {
                    peer: peer.clone(),
                    reason,
                }),
                true,
            ),
            Ok(other) => (
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
        if to_compute.send(incoming).is_err() || last {
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
    out: tokio::sync::mpsc::UnboundedSender<Outgoing>,
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
            };
        if let Some(p) = p {
            if p.len() != n_params {
                return Err(ProtocolError::Invalid {
                    peer,
                    frame: "Step",
                    field: "params",
                    message: format!("{} values, the model has {n_params}", p.len()),
                }
                .into());
            }
            params = p;
            version = v;
        } else if v != version {
            return Err(ProtocolError::Invalid {
                peer,
                frame: "Step",
                field: "params",
                message: format!("omitted, but this worker holds version {version}, not {v}"),
            }
            .into());
        }
        match cfg.fault {
            Some(Fault::DieAt(k)) if k == iteration => {
                if cfg.exit_on_fault {
                    std::process::exit(137);
                }
                let _ = out.send(Outgoing::Abort);
                summary.shutdown_reason = format!("scripted death at iteration {k}");
                return Ok(summary);
            }
            Some(Fault::GarbageAt(k)) if k == iteration => {
                let junk = vec![9u8, 0, 0, 0, 99, 1, 2, 3, 4, 5, 6, 7, 8];
                let _ = out.send(Outgoing::Frame(junk));
                // The controller hangs up on us; the socket side then reports the
                // closed connection.
                let _ = steps.recv();
                summary.shutdown_reason = format!("scripted garbage at iteration {k}");
                return Ok(summary);
            }
            _ => {}
        }
        let (slowdown, emu_cpu, emu_mem) = cfg.emulation.conditions(iteration);
        // --- the emulated step started when the Step was decoded: wait for a compute
        // slot (if local workers share the cores), then real compute
        let slot = cfg.emulation.slots.as_ref().map(|s| s.acquire());
        let queue_s = step0.elapsed().as_secs_f64();
        let wall0 = Instant::now();
        let cpu0 = thread_cpu_time();
        stream_idx.indices(stream_start, len as usize, &mut idx);
        xb.clear();
        yb.clear();
        for &i in &idx {
            xb.extend_from_slice(data.train.row(i as usize));
            yb.push(data.train.y[i as usize]);
        }
        debug_assert_eq!(xb.len(), idx.len() * dim);
        let stats = model.loss_grad(&params, &xb, &yb, &mut grad);
        let cpu_s = (thread_cpu_time() - cpu0).as_secs_f64();
        let wall_s = wall0.elapsed().as_secs_f64();
        drop(slot);
        // The monitor's reading belongs to a node agent, not to the step's critical
        // path: take it inside the padding.
        let proc_now = monitor.read();
        // --- emulated speed: pad after the real compute
        let target = cfg.emulation.target_s(cpu_s, slowdown);
        let elapsed = step0.elapsed().as_secs_f64();
        if target > elapsed {
            std::thread::sleep(Duration::from_secs_f64(target - elapsed));
        }
        let step_s = step0.elapsed().as_secs_f64();
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
        let mut reply = Message::Gradient {
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
                pre_s: decode_s,
                post_s: 0.0,
                queue_s,
                recv_unix_s,
                send_unix_s: 0.0,
            },
            signals,
            grad: std::mem::take(&mut grad),
        };
        reply.encode(&mut wbuf);
        let encode_s = t_enc.elapsed().as_secs_f64();
        // Fill in the times that encoding itself took.
        let off = StepTiming::ENCODE_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&encode_s.to_le_bytes());
        let off = StepTiming::POST_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&t_post.elapsed().as_secs_f64().to_le_bytes());
        let off = StepTiming::SEND_UNIX_S_OFFSET;
        wbuf[off..off + 8].copy_from_slice(&protocol::unix_now_s().to_le_bytes());
        if let Message::Gradient { grad: g, .. } = &mut reply {
            grad = std::mem::take(g);
        }
        let frame = std::mem::take(&mut wbuf);
        if out.send(Outgoing::Frame(frame)).is_err() {
            return Err(ProtocolError::Closed {
                peer,
                when: "sending a Gradient",
            }
            .into());
        }
        summary.steps += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
