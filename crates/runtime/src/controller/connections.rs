//! The connections: accepting, the handshake (`Hello` → `Welcome` → `Ready`), then one
//! writer task per admitted worker (Steps, in chunks the connections take turns on)
//! and one reader forwarding its frames to the training loop as [`Event`]s. Every
//! failure ends only its connection.

use crate::protocol::{self, JobSpec, Message, ProtocolError, Signals, StepTiming};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long a connection may take to send `Ready` after `Welcome` (loading a dataset
/// from a slow disk).
const READY_TIMEOUT_S: f64 = 600.0;
/// Refusals kept in the report; more are counted in its last line.
const MAX_REJECTED_LISTED: usize = 1000;

pub(super) const WRITE_CHUNK: usize = 64 << 10;

pub(super) enum Out {
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

pub(super) struct GradientMsg {
    pub(super) task: u64,
    pub(super) iteration: u64,
    pub(super) len: u32,
    pub(super) loss_sum: f64,
    pub(super) timing: StepTiming,
    pub(super) signals: Signals,
    /// Index of `grad[0]` in the gradient (the values before came as parts).
    pub(super) first: u32,
    pub(super) grad: Vec<f32>,
}

pub(super) enum Event {
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

pub(super) struct Shared {
    pub(super) job: JobSpec,
    pub(super) events: mpsc::UnboundedSender<Event>,
    pub(super) rejected: Mutex<Vec<String>>,
    pub(super) admitted: Mutex<Vec<String>>,
    pub(super) verbose: bool,
    /// Bytes of a Step written before a connection's writer yields to the others.
    pub(super) write_chunk: usize,
    /// Gradient buffers the training loop has accumulated, for the next reads.
    pub(super) grad_pool: Arc<Mutex<Vec<Vec<f32>>>>,
    /// Connections past their Hello and still in their handshake (Welcome sent,
    /// waiting for Ready) now, and the most allowed.
    pub(super) pending: std::sync::atomic::AtomicUsize,
    /// Also the most connections before their Hello, in total.
    pub(super) max_pending: usize,
    /// Connections before their Hello, oldest first (see [`PreHello`]).
    pub(super) pre_hello: Mutex<PreHello>,
    /// The most connections before their Hello from one peer address.
    pub(super) max_pre_hello_per_addr: usize,
    pub(super) hello_timeout: Duration,
    /// What an admitted worker's frames may be (the job's size), and how long one
    /// may stall.
    pub(super) job_limits: protocol::Limits,
}

/// One connection past its Hello in its handshake, counted in `Shared::pending`
/// while it lives.
struct PendingSlot(Arc<Shared>);

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connections that have not said Hello yet (nobody knows who they are): at
/// most `max_pending` in total and `max_pre_hello_per_addr` per peer address. A new
/// connection beyond either cap is not refused: the **oldest** one is shed (of its
/// address, or of all) and told so. A real worker says Hello the moment it is
/// connected, so it is always among the newest; idle or slow sockets — a flood from
/// the very address real workers use, as on loopback — are the oldest and go first,
/// and a worker is never locked out by them (refusing the newcomer instead let 256
/// idle sockets lock every worker out for the hello timeout, issue 23).
#[derive(Default)]
pub(super) struct PreHello {
    next: u64,
    /// By admission order: the peer's address and the way to tell it it is shed.
    conns: BTreeMap<u64, (IpAddr, tokio::sync::oneshot::Sender<String>)>,
    per_addr: HashMap<IpAddr, usize>,
}

impl PreHello {
    fn remove(&mut self, seq: u64) -> Option<(IpAddr, tokio::sync::oneshot::Sender<String>)> {
        let (ip, tx) = self.conns.remove(&seq)?;
        if let Some(n) = self.per_addr.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_addr.remove(&ip);
            }
        }
        Some((ip, tx))
    }

    /// Admits a connection from `ip`, shedding the oldest as the caps require; its
    /// number and the receiver of its shedding.
    fn admit(
        &mut self,
        ip: IpAddr,
        max_total: usize,
        max_per_addr: usize,
    ) -> (u64, tokio::sync::oneshot::Receiver<String>) {
        if self.per_addr.get(&ip).copied().unwrap_or(0) >= max_per_addr {
            let oldest = self
                .conns
                .iter()
                .find(|(_, (a, _))| *a == ip)
                .map(|(&s, _)| s);
            if let Some((_, tx)) = oldest.and_then(|s| self.remove(s)) {
                let _ = tx.send(format!(
                    "no Hello yet while newer connections came from {ip} (at most \
                     {max_per_addr} before their Hello per address); try again"
                ));
            }
        }
        if self.conns.len() >= max_total {
            let oldest = self.conns.keys().next().copied();
            if let Some((_, tx)) = oldest.and_then(|s| self.remove(s)) {
                let _ = tx.send(format!(
                    "no Hello yet while newer connections came (at most {max_total} before \
                     their Hello); try again"
                ));
            }
        }
        let seq = self.next;
        self.next += 1;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.conns.insert(seq, (ip, tx));
        *self.per_addr.entry(ip).or_insert(0) += 1;
        (seq, rx)
    }
}

/// A connection's place in [`PreHello`] until it says Hello (or ends).
struct PreHelloSlot {
    shared: Arc<Shared>,
    seq: u64,
}

impl Drop for PreHelloSlot {
    fn drop(&mut self) {
        self.shared
            .pre_hello
            .lock()
            .expect("pre-hello connections")
            .remove(self.seq);
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
/// Until its `Hello` the peer holds a `PreHelloSlot` (and may be shed for a newer
/// connection), then until it is admitted a `PendingSlot`; before its `Hello`
/// nothing larger than [`protocol::MAX_HELLO_FRAME`] is allocated for it, and every
/// wait has a timeout (`hello_timeout`, then [`READY_TIMEOUT_S`] for `Ready`).
async fn connection(
    mut stream: TcpStream,
    addr: SocketAddr,
    id: u32,
    shared: Arc<Shared>,
    slot: PreHelloSlot,
    shed: tokio::sync::oneshot::Receiver<String>,
) {
    let peer = format!("worker {addr}");
    let mut buf = Vec::new();
    let Some((name, slot)) =
        handshake(&mut stream, addr, id, &shared, &peer, &mut buf, slot, shed).await
    else {
        return;
    };
    drop(slot);
    shared
        .admitted
        .lock()
        .expect("admitted list")
        .push(format!("{id} {name} {addr}"));
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel::<Out>();
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
    tokio::spawn(write_frames(
        wr,
        rx,
        ev,
        id,
        written_w,
        write_chunk,
        stall,
        writer_done,
    ));
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
    forward_frames(&mut rd, &mut buf, id, &shared, &peer, &mut writer_gone).await;
}

/// The writer of one admitted worker: frames in the order queued, each write
/// within `stall`; a failed write reports the worker lost.
#[allow(clippy::too_many_arguments)]
async fn write_frames(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Out>,
    ev: mpsc::UnboundedSender<Event>,
    id: u32,
    written_w: Arc<AtomicU64>,
    write_chunk: usize,
    stall: Option<Duration>,
    writer_done: tokio::sync::oneshot::Sender<()>,
) {
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
}

/// The reader of one admitted worker: its frames as events, until it is lost or
/// its writer is gone (the member was dropped).
async fn forward_frames(
    rd: &mut tokio::net::tcp::OwnedReadHalf,
    buf: &mut Vec<u8>,
    id: u32,
    shared: &Shared,
    peer: &str,
    writer_gone: &mut tokio::sync::oneshot::Receiver<()>,
) {
    let limits = shared.job_limits;
    loop {
        let r = tokio::select! {
            biased;
            r = protocol::read_message_streaming_step_with(
                rd,
                buf,
                limits,
                peer,
                "waiting for a Gradient",
            ) => r,
            _ = &mut *writer_gone => return,
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
                    rd,
                    &mut values,
                    limits.stall,
                    peer,
                    "reading a Gradient",
                );
                let read = tokio::select! {
                    biased;
                    r = read => r,
                    _ = &mut *writer_gone => return,
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
                    peer: peer.to_string(),
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

/// `Hello` → `Welcome` → `Ready` with their timeouts; the worker's name (and its
/// place among the handshakes past Hello) once it is admissible, `None` once refused
/// or shed (the peer was told why).
#[allow(clippy::too_many_arguments)]
async fn handshake(
    stream: &mut TcpStream,
    addr: SocketAddr,
    id: u32,
    shared: &Arc<Shared>,
    peer: &str,
    buf: &mut Vec<u8>,
    pre_hello: PreHelloSlot,
    shed: tokio::sync::oneshot::Receiver<String>,
) -> Option<(String, PendingSlot)> {
    let _ = stream.set_nodelay(true);
    crate::sysinfo::set_socket_buffers(stream, 4 << 20);
    let read_hello = protocol::timed(
        Some(shared.hello_timeout),
        peer,
        "waiting for Hello",
        protocol::read_message_with(
            stream,
            buf,
            protocol::Limits::hello(shared.hello_timeout),
            peer,
            "waiting for Hello",
        ),
    );
    let hello = tokio::select! {
        h = read_hello => h,
        Ok(reason) = shed => {
            // Shed for a newer connection: told without waiting on the peer.
            let mut f = Vec::new();
            Message::Reject { reason: reason.clone() }.encode(&mut f);
            let _ = stream.try_write(&f);
            if shared.verbose {
                eprintln!("pacer controller: shed {addr}: {reason}");
            }
            note_rejected(shared, format!("{addr}: {reason}"));
            return None;
        }
    };
    drop(pre_hello);
    let name = match hello {
        Err(e) => {
            reject(stream, shared, addr, e.to_string()).await;
            return None;
        }
        Ok(Message::Hello { name, .. }) => name,
        Ok(other) => {
            let e = ProtocolError::Unexpected {
                peer: peer.to_string(),
                expected: "Hello",
                got: other.kind(),
            };
            reject(stream, shared, addr, e.to_string()).await;
            return None;
        }
    };
    if shared.pending.fetch_add(1, Ordering::Relaxed) >= shared.max_pending {
        shared.pending.fetch_sub(1, Ordering::Relaxed);
        let reason = format!(
            "too many connections in their handshake (at most {}); try again",
            shared.max_pending
        );
        reject(stream, shared, addr, reason).await;
        return None;
    }
    let slot = PendingSlot(shared.clone());
    let mut wbuf = Vec::new();
    Message::Welcome {
        worker_id: id,
        job: shared.job.clone(),
    }
    .encode(&mut wbuf);
    if stream.write_all(&wbuf).await.is_err() {
        return None;
    }
    // Loading a dataset can take a while on a slow disk.
    let ready = protocol::timed(
        Some(Duration::from_secs_f64(READY_TIMEOUT_S)),
        peer,
        "waiting for Ready",
        protocol::read_message_with(
            stream,
            buf,
            protocol::Limits::control(shared.hello_timeout),
            peer,
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
                reject(stream, shared, addr, reason).await;
                return None;
            }
        }
        Ok(Message::Error { message }) => {
            reject(
                stream,
                shared,
                addr,
                format!("worker could not join: {message}"),
            )
            .await;
            return None;
        }
        Ok(other) => {
            let e = ProtocolError::Unexpected {
                peer: peer.to_string(),
                expected: "Ready",
                got: other.kind(),
            };
            reject(stream, shared, addr, e.to_string()).await;
            return None;
        }
        Err(e) => {
            reject(stream, shared, addr, e.to_string()).await;
            return None;
        }
    }
    Some((name, slot))
}

/// `w.write_all(bytes)`, failing with `TimedOut` after `stall` without completing.
pub(super) async fn write_timed<W: tokio::io::AsyncWrite + Unpin>(
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
pub(super) fn recycle(pool: &Mutex<Vec<Vec<f32>>>, values: Vec<f32>) {
    let mut pool = pool.lock().expect("gradient pool");
    if pool.len() < 64 {
        pool.push(values);
    }
}

pub(super) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u32;
    loop {
        match listener.accept().await {
            Ok((stream, addr)) => {
                let (seq, shed) = shared
                    .pre_hello
                    .lock()
                    .expect("pre-hello connections")
                    .admit(addr.ip(), shared.max_pending, shared.max_pre_hello_per_addr);
                let slot = PreHelloSlot {
                    shared: shared.clone(),
                    seq,
                };
                let id = next_id;
                next_id = next_id.wrapping_add(1);
                tokio::spawn(connection(stream, addr, id, shared.clone(), slot, shed));
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
