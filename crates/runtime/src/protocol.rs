//! The wire protocol between controller and workers (version [`VERSION`]).
//!
//! ## Framing
//! Every message is one frame: `len: u32 LE` (bytes that follow, at most
//! [`MAX_FRAME`]), `kind: u8`, then the payload. Payload fields are little-endian
//! fixed-width integers and floats; a string is `u32 LE byte length + UTF-8`; an
//! `f32` vector is `u32 LE count + count × f32 LE` (on little-endian hosts a plain
//! copy, which is why the gradient path uses this hand-written encoding rather than
//! a generic serialiser).
//!
//! ## Conversation
//! ```text
//! worker                                   controller
//!   Hello{magic "PACR", version, name} ──►
//!                                       ◄── Welcome{worker id, job}   | Reject{reason}
//!   (loads the dataset, checks fingerprint)
//!   Ready{fingerprint, n_train}        ──►  (or Error{message}; wrong data → Reject)
//!                                       ◄── Step{task, iteration, version, range, params?}
//!   GradientPart{task, offset, g[..]}  ──►  (zero or more, in order)
//!   Gradient{task, timings, signals, first, g[first..]} ──►
//!                                    ...
//!                                       ◄── Shutdown{reason}
//! ```
//! The first frame must be a `Hello` whose payload starts with the magic and the
//! version, so an old or foreign peer is refused with a reason it can print before
//! anything else is parsed. `Step.params` is omitted when the worker already holds
//! that model version (a retried task within the same iteration).
//!
//! A gradient may be sent in pieces (the chunked uplink, version 2): `GradientPart`
//! frames carrying consecutive ranges `[offset, offset + n)` from 0, each sent as soon
//! as the worker's emulated clock has reached the end of its computation, then the
//! `Gradient` with the step's timings and the values from `first` (the end of the
//! parts) to the end. A whole gradient is a `Gradient` with `first = 0`.
//!
//! Every decoding failure is a [`ProtocolError`] naming the frame kind and field.

use crate::model::ModelSpec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Seconds since the UNIX epoch (wall clock), for the same-host network split.
pub fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Magic at the start of every `Hello`.
pub const MAGIC: [u8; 4] = *b"PACR";
/// Protocol version spoken by this build.
/// Version 2 added `GradientPart` and `Gradient.first` (the chunked uplink).
pub const VERSION: u16 = 2;
/// Largest frame any reader accepts (a model of ~60 M parameters); a length above it
/// is a malformed or hostile peer, refused before allocating. Readers of a running
/// job use the tighter [`Limits`] the job implies.
pub const MAX_FRAME: u32 = 256 << 20;
/// Largest frame before a peer's `Hello` is accepted: a `Hello` is the magic, the
/// version and a name, so 4 KiB is a name of up to ~4,000 bytes. Nothing more is
/// ever allocated for a peer that has not said who it is.
pub const MAX_HELLO_FRAME: u32 = 4 << 10;
/// Largest frame of a message that carries no model-sized vector (`Welcome`,
/// `Reject`, `Ready`, `Shutdown`, `Error`: a few strings).
pub const MAX_CONTROL_FRAME: u32 = 64 << 10;
/// A frame body is read (and its buffer grown) this many bytes at a time, so a peer
/// that announces a large frame and stalls pins only what it has actually sent.
pub const READ_CHUNK: usize = 64 << 10;

/// What a reader accepts from a peer: the largest frame, and how long a frame that
/// has started may go without progress (each [`READ_CHUNK`] must arrive within
/// `stall`; `None`: wait forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_frame: u32,
    pub stall: Option<std::time::Duration>,
}

impl Limits {
    /// The blanket [`MAX_FRAME`] without a stall timeout (what the plain `read_*`
    /// functions use).
    pub const ANY: Limits = Limits {
        max_frame: MAX_FRAME,
        stall: None,
    };

    /// Before the peer's `Hello` is accepted: [`MAX_HELLO_FRAME`].
    pub fn hello(stall: std::time::Duration) -> Limits {
        Limits {
            max_frame: MAX_HELLO_FRAME,
            stall: Some(stall),
        }
    }

    /// Handshake and control messages: [`MAX_CONTROL_FRAME`].
    pub fn control(stall: std::time::Duration) -> Limits {
        Limits {
            max_frame: MAX_CONTROL_FRAME,
            stall: Some(stall),
        }
    }

    /// What a job of `n_params` parameters can need: a `Step` carrying all the
    /// parameters or a `Gradient` carrying the whole gradient (its header included),
    /// or a control message, whichever is largest; never above [`MAX_FRAME`].
    pub fn for_job(n_params: usize, stall: std::time::Duration) -> Limits {
        let vectors = n_params
            .saturating_mul(4)
            .saturating_add(GRADIENT_VALUES_AT.max(STEP_PARAMS_AT));
        let max = vectors
            .max(MAX_CONTROL_FRAME as usize)
            .min(MAX_FRAME as usize);
        Limits {
            max_frame: max as u32,
            stall: Some(stall),
        }
    }

    fn check(&self, len: u32, peer: &str) -> Result<usize, ProtocolError> {
        if len > self.max_frame {
            return Err(ProtocolError::TooLarge {
                peer: peer.to_string(),
                len,
                limit: self.max_frame,
            });
        }
        if len == 0 {
            return Err(ProtocolError::Empty {
                peer: peer.to_string(),
            });
        }
        Ok(len as usize)
    }
}

/// Frame kinds.
pub mod kind {
    pub const HELLO: u8 = 1;
    pub const WELCOME: u8 = 2;
    pub const REJECT: u8 = 3;
    pub const READY: u8 = 4;
    pub const STEP: u8 = 5;
    pub const GRADIENT: u8 = 6;
    pub const SHUTDOWN: u8 = 7;
    pub const ERROR: u8 = 8;
    pub const GRADIENT_PART: u8 = 9;
}

fn kind_name(k: u8) -> &'static str {
    match k {
        kind::HELLO => "Hello",
        kind::WELCOME => "Welcome",
        kind::REJECT => "Reject",
        kind::READY => "Ready",
        kind::STEP => "Step",
        kind::GRADIENT => "Gradient",
        kind::SHUTDOWN => "Shutdown",
        kind::ERROR => "Error",
        kind::GRADIENT_PART => "GradientPart",
        _ => "unknown",
    }
}

/// A peer broke the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("{peer}: frame of {len} bytes exceeds the limit of {limit} bytes (malformed length prefix, or more than this job can need)")]
    TooLarge { peer: String, len: u32, limit: u32 },
    #[error("{peer}: empty frame (a frame holds at least its kind byte)")]
    Empty { peer: String },
    #[error("{peer}: {frame} frame: field `{field}` is truncated (frame ends at byte {at})")]
    Truncated {
        peer: String,
        frame: &'static str,
        field: &'static str,
        at: usize,
    },
    #[error("{peer}: {frame} frame: field `{field}`: {message}")]
    Invalid {
        peer: String,
        frame: &'static str,
        field: &'static str,
        message: String,
    },
    #[error("{peer}: expected a {expected} frame, got kind {got} ({got_name})", got_name = kind_name(*got))]
    Unexpected {
        peer: String,
        expected: &'static str,
        got: u8,
    },
    #[error("{peer}: bad magic \"{}\", expected \"{}\": not a pacer peer", got.escape_ascii(), MAGIC.escape_ascii())]
    BadMagic { peer: String, got: [u8; 4] },
    #[error("{peer}: speaks protocol version {got}, this build speaks version {VERSION}; upgrade the older side")]
    Version { peer: String, got: u16 },
    #[error("{peer}: connection closed {when}")]
    Closed { peer: String, when: &'static str },
    #[error("{peer}: nothing received for {after:?} {when}")]
    Timeout {
        peer: String,
        when: &'static str,
        after: std::time::Duration,
    },
    #[error("{peer}: {context}: {message}")]
    Io {
        peer: String,
        context: &'static str,
        message: String,
    },
}

/// The job a worker joins, sent in `Welcome`.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub dataset: String,
    pub fingerprint: u64,
    pub n_train: u64,
    pub model: ModelSpec,
    /// Seed of the sample stream (epoch permutations).
    pub stream_seed: u64,
    pub n_params: u32,
}

/// Per-step measurements a worker reports (seconds unless named otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTiming {
    /// Thread CPU time of the real compute (batch gather + forward + backward).
    pub cpu_s: f64,
    /// Wall time of the real compute.
    pub wall_s: f64,
    /// Wall time of the whole emulated step: real compute plus padding
    /// (`max(wall_s, time_scale · cpu_s · slowdown / speed)`).
    pub step_s: f64,
    /// Decoding the Step's parameters.
    pub decode_s: f64,
    /// Encoding this gradient (measured before it is sent).
    pub encode_s: f64,
    /// The emulated target (`time_scale · cpu_s · slowdown / speed`); `wall_s >
    /// target_s` is an overrun: contention the padding could not hide.
    pub target_s: f64,
    /// From the Step frame fully read to the start of compute (decoding).
    pub pre_s: f64,
    /// From the end of the step to the gradient ready to send (encoding).
    pub post_s: f64,
    /// Part of the step spent waiting for a compute slot (emulation of more workers
    /// than cores; absorbed by the padding unless it causes an overrun).
    pub queue_s: f64,
    /// Wall-clock (UNIX) time when the Step frame had fully arrived, and just before
    /// the Gradient is written: with the controller's own clock they split the
    /// network time into downlink and uplink (meaningful when clocks agree, e.g. on
    /// one host).
    pub recv_unix_s: f64,
    pub send_unix_s: f64,
}

impl StepTiming {
    /// Byte offsets of `encode_s` and `post_s` in an encoded Gradient frame (length
    /// prefix included), so the worker can fill them in after encoding.
    pub const ENCODE_S_OFFSET: usize = 5 + 8 + 8 + 4 + 8 + 4 + 4 * 8;
    pub const POST_S_OFFSET: usize = Self::ENCODE_S_OFFSET + 3 * 8;
    pub const SEND_UNIX_S_OFFSET: usize = Self::ENCODE_S_OFFSET + 6 * 8;
}

/// Resource signals a worker observed (fractions in [0, 1] unless named).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    /// Load the predictor sees at the start of this iteration (emulated and/or /proc).
    pub cpu_load: f32,
    pub mem_load: f32,
    /// Same, read at the end of the step: the start of the worker's next iteration.
    pub next_cpu_load: f32,
    pub next_mem_load: f32,
    /// Raw /proc readings at the end of the step: machine CPU busy share since the
    /// previous reading, memory in use, 1-minute load average.
    pub proc_cpu_busy: f32,
    pub proc_mem_used: f32,
    pub loadavg1: f32,
    /// Emulated slowdown factor applied to this step (1 = none).
    pub slowdown: f32,
}

/// Every message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Hello {
        version: u16,
        name: String,
    },
    Welcome {
        worker_id: u32,
        job: JobSpec,
    },
    Reject {
        reason: String,
    },
    Ready {
        fingerprint: u64,
        n_train: u64,
    },
    Step {
        task: u64,
        iteration: u64,
        version: u64,
        stream_start: u64,
        len: u32,
        params: Option<Vec<f32>>,
    },
    Gradient {
        task: u64,
        iteration: u64,
        len: u32,
        loss_sum: f64,
        correct: u32,
        timing: StepTiming,
        signals: Signals,
        /// Index of `grad[0]` in the gradient: values before it came as `GradientPart`s.
        first: u32,
        grad: Vec<f32>,
    },
    /// Values `[offset, offset + values.len())` of task `task`'s gradient.
    GradientPart {
        task: u64,
        iteration: u64,
        offset: u32,
        values: Vec<f32>,
    },
    Shutdown {
        reason: String,
    },
    Error {
        message: String,
    },
}

impl Message {
    pub fn kind(&self) -> u8 {
        match self {
            Message::Hello { .. } => kind::HELLO,
            Message::Welcome { .. } => kind::WELCOME,
            Message::Reject { .. } => kind::REJECT,
            Message::Ready { .. } => kind::READY,
            Message::Step { .. } => kind::STEP,
            Message::Gradient { .. } => kind::GRADIENT,
            Message::Shutdown { .. } => kind::SHUTDOWN,
            Message::Error { .. } => kind::ERROR,
            Message::GradientPart { .. } => kind::GRADIENT_PART,
        }
    }

    /// The whole frame (length prefix included) into `out` (cleared first).
    ///
    /// ```
    /// use pacer_runtime::protocol::{Message, VERSION};
    /// let mut buf = Vec::new();
    /// let m = Message::Hello { version: VERSION, name: "w0".into() };
    /// m.encode(&mut buf);
    /// assert_eq!(&buf[5..9], b"PACR"); // after length (4) and kind (1)
    /// assert_eq!(Message::decode(&buf[4..], "peer").unwrap(), m);
    /// ```
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&[0, 0, 0, 0, self.kind()]);
        let w = out;
        match self {
            Message::Hello { version, name } => {
                w.extend_from_slice(&MAGIC);
                put_u16(w, *version);
                put_str(w, name);
            }
            Message::Welcome { worker_id, job } => {
                put_u32(w, *worker_id);
                put_str(w, &job.dataset);
                put_u64(w, job.fingerprint);
                put_u64(w, job.n_train);
                w.push(job.model.kind);
                put_u32(w, job.model.dim);
                put_u32(w, job.model.classes);
                put_u32(w, job.model.width);
                put_u64(w, job.stream_seed);
                put_u32(w, job.n_params);
            }
            Message::Reject { reason } => put_str(w, reason),
            Message::Ready {
                fingerprint,
                n_train,
            } => {
                put_u64(w, *fingerprint);
                put_u64(w, *n_train);
            }
            Message::Step {
                task,
                iteration,
                version,
                stream_start,
                len,
                params,
            } => {
                put_step_header(w, *task, *iteration, *version, *stream_start, *len);
                match params {
                    Some(p) => {
                        w.push(1);
                        put_f32s(w, p);
                    }
                    None => w.push(0),
                }
            }
            Message::Gradient {
                task,
                iteration,
                len,
                loss_sum,
                correct,
                timing,
                signals,
                first,
                grad,
            } => {
                put_u64(w, *task);
                put_u64(w, *iteration);
                put_u32(w, *len);
                put_f64(w, *loss_sum);
                put_u32(w, *correct);
                for v in [
                    timing.cpu_s,
                    timing.wall_s,
                    timing.step_s,
                    timing.decode_s,
                    timing.encode_s,
                    timing.target_s,
                    timing.pre_s,
                    timing.post_s,
                    timing.queue_s,
                    timing.recv_unix_s,
                    timing.send_unix_s,
                ] {
                    put_f64(w, v);
                }
                for v in [
                    signals.cpu_load,
                    signals.mem_load,
                    signals.next_cpu_load,
                    signals.next_mem_load,
                    signals.proc_cpu_busy,
                    signals.proc_mem_used,
                    signals.loadavg1,
                    signals.slowdown,
                ] {
                    w.extend_from_slice(&v.to_le_bytes());
                }
                put_u32(w, *first);
                put_f32s(w, grad);
            }
            Message::GradientPart {
                task,
                iteration,
                offset,
                values,
            } => {
                put_u64(w, *task);
                put_u64(w, *iteration);
                put_u32(w, *offset);
                put_f32s(w, values);
            }
            Message::Shutdown { reason } => put_str(w, reason),
            Message::Error { message } => put_str(w, message),
        }
        let len = (w.len() - 4) as u32;
        w[..4].copy_from_slice(&len.to_le_bytes());
    }

    /// Decode a frame body (`kind` + payload, without the length prefix).
    pub fn decode(body: &[u8], peer: &str) -> Result<Message, ProtocolError> {
        let Some((&k, payload)) = body.split_first() else {
            return Err(ProtocolError::Empty {
                peer: peer.to_string(),
            });
        };
        let mut r = Reader {
            buf: payload,
            pos: 0,
            peer,
            frame: kind_name(k),
        };
        let m = match k {
            kind::HELLO => {
                let mut magic = [0u8; 4];
                magic.copy_from_slice(r.bytes(4, "magic")?);
                if magic != MAGIC {
                    return Err(ProtocolError::BadMagic {
                        peer: peer.to_string(),
                        got: magic,
                    });
                }
                let version = r.u16("version")?;
                if version != VERSION {
                    // Checked before the rest: a future version may lay it out otherwise.
                    return Err(ProtocolError::Version {
                        peer: peer.to_string(),
                        got: version,
                    });
                }
                Message::Hello {
                    version,
                    name: r.string("name")?,
                }
            }
            kind::WELCOME => Message::Welcome {
                worker_id: r.u32("worker_id")?,
                job: JobSpec {
                    dataset: r.string("dataset")?,
                    fingerprint: r.u64("fingerprint")?,
                    n_train: r.u64("n_train")?,
                    model: ModelSpec {
                        kind: r.u8("model.kind")?,
                        dim: r.u32("model.dim")?,
                        classes: r.u32("model.classes")?,
                        width: r.u32("model.width")?,
                    },
                    stream_seed: r.u64("stream_seed")?,
                    n_params: r.u32("n_params")?,
                },
            },
            kind::REJECT => Message::Reject {
                reason: r.string("reason")?,
            },
            kind::READY => Message::Ready {
                fingerprint: r.u64("fingerprint")?,
                n_train: r.u64("n_train")?,
            },
            kind::STEP => {
                let task = r.u64("task")?;
                let iteration = r.u64("iteration")?;
                let version = r.u64("version")?;
                let stream_start = r.u64("stream_start")?;
                let len = r.u32("len")?;
                let params = match r.u8("has_params")? {
                    0 => None,
                    1 => Some(r.f32s("params")?),
                    x => return Err(r.invalid("has_params", format!("must be 0 or 1, got {x}"))),
                };
                Message::Step {
                    task,
                    iteration,
                    version,
                    stream_start,
                    len,
                    params,
                }
            }
            kind::GRADIENT => {
                let task = r.u64("task")?;
                let iteration = r.u64("iteration")?;
                let len = r.u32("len")?;
                let loss_sum = r.f64("loss_sum")?;
                let correct = r.u32("correct")?;
                let timing = StepTiming {
                    cpu_s: r.f64("timing.cpu_s")?,
                    wall_s: r.f64("timing.wall_s")?,
                    step_s: r.f64("timing.step_s")?,
                    decode_s: r.f64("timing.decode_s")?,
                    encode_s: r.f64("timing.encode_s")?,
                    target_s: r.f64("timing.target_s")?,
                    pre_s: r.f64("timing.pre_s")?,
                    post_s: r.f64("timing.post_s")?,
                    queue_s: r.f64("timing.queue_s")?,
                    recv_unix_s: r.f64("timing.recv_unix_s")?,
                    send_unix_s: r.f64("timing.send_unix_s")?,
                };
                let signals = Signals {
                    cpu_load: r.f32("signals.cpu_load")?,
                    mem_load: r.f32("signals.mem_load")?,
                    next_cpu_load: r.f32("signals.next_cpu_load")?,
                    next_mem_load: r.f32("signals.next_mem_load")?,
                    proc_cpu_busy: r.f32("signals.proc_cpu_busy")?,
                    proc_mem_used: r.f32("signals.proc_mem_used")?,
                    loadavg1: r.f32("signals.loadavg1")?,
                    slowdown: r.f32("signals.slowdown")?,
                };
                Message::Gradient {
                    task,
                    iteration,
                    len,
                    loss_sum,
                    correct,
                    timing,
                    signals,
                    first: r.u32("first")?,
                    grad: r.f32s("grad")?,
                }
            }
            kind::GRADIENT_PART => Message::GradientPart {
                task: r.u64("task")?,
                iteration: r.u64("iteration")?,
                offset: r.u32("offset")?,
                values: r.f32s("values")?,
            },
            kind::SHUTDOWN => Message::Shutdown {
                reason: r.string("reason")?,
            },
            kind::ERROR => Message::Error {
                message: r.string("message")?,
            },
            other => {
                return Err(ProtocolError::Invalid {
                    peer: peer.to_string(),
                    frame: "unknown",
                    field: "kind",
                    message: format!("unknown frame kind {other}; known kinds are 1..=9"),
                })
            }
        };
        if r.pos != r.buf.len() {
            return Err(r.invalid(
                "(end)",
                format!(
                    "{} trailing bytes after the last field",
                    r.buf.len() - r.pos
                ),
            ));
        }
        Ok(m)
    }
}

/// The fixed part of a Step frame, so the controller can send one shared parameter
/// buffer to every worker behind a per-worker header.
pub fn put_step_header(
    w: &mut Vec<u8>,
    task: u64,
    iteration: u64,
    version: u64,
    stream_start: u64,
    len: u32,
) {
    put_u64(w, task);
    put_u64(w, iteration);
    put_u64(w, version);
    put_u64(w, stream_start);
    put_u32(w, len);
}

/// Encoded `has_params = 1` + parameter vector: the shared tail of a Step frame.
pub fn encode_params_tail(params: &[f32], out: &mut Vec<u8>) {
    out.clear();
    out.push(1);
    put_f32s(out, params);
}

/// `values` as little-endian bytes into `out` (cleared first): a chunk of a Step's
/// parameters, written after a header that announced them.
pub fn f32s_le_bytes(values: &[f32], out: &mut Vec<u8>) {
    out.clear();
    if cfg!(target_endian = "little") {
        out.extend_from_slice(bytemuck::cast_slice(values));
    } else {
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// A Step frame as (header, shared tail): `header` carries the length prefix of the
/// whole frame.
pub fn step_frame_header(
    task: u64,
    iteration: u64,
    version: u64,
    stream_start: u64,
    len: u32,
    tail_len: usize,
) -> Vec<u8> {
    let mut h = Vec::with_capacity(41);
    h.extend_from_slice(&[0, 0, 0, 0, kind::STEP]);
    put_step_header(&mut h, task, iteration, version, stream_start, len);
    let total = (h.len() - 4 + tail_len) as u32;
    h[..4].copy_from_slice(&total.to_le_bytes());
    h
}

fn put_u16(w: &mut Vec<u8>, v: u16) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(w: &mut Vec<u8>, v: u32) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(w: &mut Vec<u8>, v: u64) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_f64(w: &mut Vec<u8>, v: f64) {
    w.extend_from_slice(&v.to_le_bytes());
}
fn put_str(w: &mut Vec<u8>, s: &str) {
    put_u32(w, s.len() as u32);
    w.extend_from_slice(s.as_bytes());
}
fn put_f32s(w: &mut Vec<u8>, v: &[f32]) {
    put_u32(w, v.len() as u32);
    if cfg!(target_endian = "little") {
        // The wire format is the in-memory format here: one memcpy.
        w.extend_from_slice(bytemuck::cast_slice(v));
    } else {
        w.reserve(v.len() * 4);
        for x in v {
            w.extend_from_slice(&x.to_le_bytes());
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    peer: &'a str,
    frame: &'static str,
}

impl<'a> Reader<'a> {
    fn invalid(&self, field: &'static str, message: String) -> ProtocolError {
        ProtocolError::Invalid {
            peer: self.peer.to_string(),
            frame: self.frame,
            field,
            message,
        }
    }
    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ProtocolError> {
        if self.buf.len() - self.pos < n {
            return Err(ProtocolError::Truncated {
                peer: self.peer.to_string(),
                frame: self.frame,
                field,
                at: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self, f: &'static str) -> Result<u8, ProtocolError> {
        Ok(self.bytes(1, f)?[0])
    }
    fn u16(&mut self, f: &'static str) -> Result<u16, ProtocolError> {
        Ok(u16::from_le_bytes(self.bytes(2, f)?.try_into().expect("2")))
    }
    fn u32(&mut self, f: &'static str) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.bytes(4, f)?.try_into().expect("4")))
    }
    fn u64(&mut self, f: &'static str) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.bytes(8, f)?.try_into().expect("8")))
    }
    fn f32(&mut self, f: &'static str) -> Result<f32, ProtocolError> {
        Ok(f32::from_le_bytes(self.bytes(4, f)?.try_into().expect("4")))
    }
    fn f64(&mut self, f: &'static str) -> Result<f64, ProtocolError> {
        Ok(f64::from_le_bytes(self.bytes(8, f)?.try_into().expect("8")))
    }
    fn string(&mut self, f: &'static str) -> Result<String, ProtocolError> {
        let n = self.u32(f)? as usize;
        let b = self.bytes(n, f)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.invalid(f, "not valid UTF-8".into()))
    }
    fn f32s(&mut self, f: &'static str) -> Result<Vec<f32>, ProtocolError> {
        let n = self.u32(f)? as usize;
        let b = self.bytes(n.saturating_mul(4), f)?;
        if cfg!(target_endian = "little") {
            let mut v = vec![0f32; n];
            bytemuck::cast_slice_mut::<f32, u8>(&mut v).copy_from_slice(b);
            Ok(v)
        } else {
            Ok(b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        }
    }
}

/// Read one frame body (kind + payload). `when` says what we were waiting for, for
/// the error if the peer hangs up. [`Limits::ANY`]; see [`read_frame_with`].
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    peer: &str,
    when: &'static str,
) -> Result<(), ProtocolError> {
    read_frame_with(r, buf, Limits::ANY, peer, when).await
}

/// Await `f`, or fail with [`ProtocolError::Timeout`] after `limit` (`None`: no limit),
/// naming the peer and what was awaited.
pub async fn timed<T, F>(
    limit: Option<std::time::Duration>,
    peer: &str,
    when: &'static str,
    f: F,
) -> Result<T, ProtocolError>
where
    F: std::future::Future<Output = Result<T, ProtocolError>>,
{
    match limit {
        None => f.await,
        Some(d) => tokio::time::timeout(d, f).await.unwrap_or_else(|_| {
            Err(ProtocolError::Timeout {
                peer: peer.to_string(),
                when,
                after: d,
            })
        }),
    }
}

/// The 4-byte length prefix of the next frame (no timeout: how long a peer may be
/// silent between frames is the caller's business, see [`timed`]).
async fn read_len<R: AsyncRead + Unpin>(
    r: &mut R,
    peer: &str,
    when: &'static str,
) -> Result<u32, ProtocolError> {
    let mut len = [0u8; 4];
    if let Err(e) = r.read_exact(&mut len).await {
        return Err(if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ProtocolError::Closed {
                peer: peer.to_string(),
                when,
            }
        } else {
            ProtocolError::Io {
                peer: peer.to_string(),
                context: when,
                message: e.to_string(),
            }
        });
    }
    Ok(u32::from_le_bytes(len))
}

/// Fill `dst` from `r`, [`READ_CHUNK`] bytes at a time, each within `stall`.
async fn read_exact_stalled<R: AsyncRead + Unpin>(
    r: &mut R,
    dst: &mut [u8],
    stall: Option<std::time::Duration>,
    peer: &str,
    when: &'static str,
) -> Result<(), ProtocolError> {
    for c in dst.chunks_mut(READ_CHUNK) {
        timed(stall, peer, when, async {
            r.read_exact(c)
                .await
                .map(|_| ())
                .map_err(|e| io_error(e, peer, when))
        })
        .await?;
    }
    Ok(())
}

/// Grow `buf` from `from` to `len` bytes as they arrive, [`READ_CHUNK`] at a time:
/// the buffer never holds much more than what the peer has actually sent.
async fn read_growing<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    len: usize,
    stall: Option<std::time::Duration>,
    peer: &str,
    when: &'static str,
) -> Result<(), ProtocolError> {
    while buf.len() < len {
        let at = buf.len();
        let n = (len - at).min(READ_CHUNK);
        buf.resize(at + n, 0);
        read_exact_stalled(r, &mut buf[at..], stall, peer, when).await?;
    }
    Ok(())
}

/// [`read_frame`] under `limits`: a length above `limits.max_frame` is refused
/// before anything is allocated, and the body is read incrementally, each
/// [`READ_CHUNK`] within `limits.stall`.
pub async fn read_frame_with<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: Limits,
    peer: &str,
    when: &'static str,
) -> Result<(), ProtocolError> {
    let len = read_len(r, peer, when).await?;
    let len = limits.check(len, peer)?;
    buf.clear();
    read_growing(r, buf, len, limits.stall, peer, when).await
}

fn io_error(e: std::io::Error, peer: &str, when: &'static str) -> ProtocolError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        ProtocolError::Closed {
            peer: peer.to_string(),
            when: "in the middle of a frame",
        }
    } else {
        ProtocolError::Io {
            peer: peer.to_string(),
            context: when,
            message: e.to_string(),
        }
    }
}

/// Bytes of a Step frame body before its parameter values: kind, task, iteration,
/// version, stream_start, len, has_params, count.
const STEP_PARAMS_AT: usize = 1 + 8 * 4 + 4 + 1 + 4;
/// Bytes of a Gradient frame body before its values: kind, task, iteration, len,
/// loss_sum, correct, 11 timings, 8 signals, first, count.
const GRADIENT_VALUES_AT: usize = 1 + 8 + 8 + 4 + 8 + 4 + 11 * 8 + 8 * 4 + 4 + 4;
/// Bytes of a GradientPart frame body before its values: kind, task, iteration,
/// offset, count (the shortest header of a streamed frame).
const PART_VALUES_AT: usize = 1 + 8 + 8 + 4 + 4;

/// The frame of `m`, a Gradient or GradientPart whose values are empty, announcing
/// `n` values that the caller writes right after it (no copy into a frame).
pub fn encode_gradient_head(m: &Message, n: usize, out: &mut Vec<u8>) {
    debug_assert!(matches!(
        m,
        Message::Gradient { grad: v, .. } | Message::GradientPart { values: v, .. } if v.is_empty()
    ));
    m.encode(out);
    let at = out.len() - 4;
    out[at..].copy_from_slice(&(n as u32).to_le_bytes());
    let len = (out.len() - 4 + n * 4) as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

/// Like [`read_message`], but a Step that carries parameters, a Gradient or a
/// GradientPart is returned as soon as its header has arrived, with
/// `params: Some(empty)` or empty values and the number of values that follow, to
/// be read with [`read_f32s`] straight into their destination (a worker computes on
/// the first parameters while the rest arrive). Every other frame is read whole.
pub async fn read_message_streaming_step<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    peer: &str,
    when: &'static str,
) -> Result<(Message, Option<usize>), ProtocolError> {
    read_message_streaming_step_with(r, buf, Limits::ANY, peer, when).await
}

/// [`read_message_streaming_step`] under `limits` (see [`read_frame_with`]); the
/// values that follow are bounded by `limits.max_frame` too.
pub async fn read_message_streaming_step_with<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: Limits,
    peer: &str,
    when: &'static str,
) -> Result<(Message, Option<usize>), ProtocolError> {
    let len = read_len(r, peer, when).await?;
    let len = limits.check(len, peer)?;
    let head = len.min(PART_VALUES_AT);
    buf.clear();
    buf.resize(head, 0);
    read_exact_stalled(r, buf, limits.stall, peer, when).await?;
    let (values_at, frame, field) = match buf[0] {
        kind::STEP => (STEP_PARAMS_AT, "Step", "params"),
        kind::GRADIENT => (GRADIENT_VALUES_AT, "Gradient", "grad"),
        kind::GRADIENT_PART => (PART_VALUES_AT, "GradientPart", "values"),
        _ => (usize::MAX, "", ""),
    };
    if len >= values_at {
        buf.resize(values_at, 0);
        read_exact_stalled(r, &mut buf[head..], limits.stall, peer, when).await?;
        // A Step without parameters is read whole (below).
        if buf[0] != kind::STEP || buf[STEP_PARAMS_AT - 5] == 1 {
            let count = u32::from_le_bytes(buf[values_at - 4..].try_into().expect("4"));
            if (count as usize).checked_mul(4) != Some(len - values_at) {
                return Err(ProtocolError::Invalid {
                    peer: peer.to_string(),
                    frame,
                    field,
                    message: format!(
                        "{count} values announced, the frame holds {} bytes for them",
                        len - values_at
                    ),
                });
            }
            // Decode the header as a message with no values yet.
            buf[values_at - 4..].copy_from_slice(&0u32.to_le_bytes());
            let m = Message::decode(buf, peer)?;
            return Ok((m, Some(count as usize)));
        }
    }
    read_growing(r, buf, len, limits.stall, peer, when).await?;
    Ok((Message::decode(buf, peer)?, None))
}

/// Read `out.len()` little-endian `f32`s straight into `out` (no intermediate
/// buffer on little-endian hosts).
pub async fn read_f32s<R: AsyncRead + Unpin>(
    r: &mut R,
    out: &mut [f32],
    peer: &str,
    when: &'static str,
) -> Result<(), ProtocolError> {
    read_f32s_with(r, out, None, peer, when).await
}

/// [`read_f32s`], each [`READ_CHUNK`] bytes within `stall`.
pub async fn read_f32s_with<R: AsyncRead + Unpin>(
    r: &mut R,
    out: &mut [f32],
    stall: Option<std::time::Duration>,
    peer: &str,
    when: &'static str,
) -> Result<(), ProtocolError> {
    read_exact_stalled(
        r,
        bytemuck::cast_slice_mut::<f32, u8>(out),
        stall,
        peer,
        when,
    )
    .await?;
    if cfg!(target_endian = "big") {
        for v in out.iter_mut() {
            *v = f32::from_bits(u32::from_le(v.to_bits()));
        }
    }
    Ok(())
}

/// Read and decode one message.
pub async fn read_message<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    peer: &str,
    when: &'static str,
) -> Result<Message, ProtocolError> {
    read_frame(r, buf, peer, when).await?;
    Message::decode(buf, peer)
}

/// [`read_message`] under `limits` (see [`read_frame_with`]).
pub async fn read_message_with<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: Limits,
    peer: &str,
    when: &'static str,
) -> Result<Message, ProtocolError> {
    read_frame_with(r, buf, limits, peer, when).await?;
    Message::decode(buf, peer)
}

/// Encode and write one message.
pub async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    m: &Message,
    buf: &mut Vec<u8>,
    peer: &str,
) -> Result<(), ProtocolError> {
    m.encode(buf);
    w.write_all(buf).await.map_err(|e| ProtocolError::Io {
        peer: peer.to_string(),
        context: "sending",
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn streamed_step_reads_header_then_values() {
        let params: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 3.0).collect();
        let step = Message::Step {
            task: 4,
            iteration: 9,
            version: 2,
            stream_start: 77,
            len: 13,
            params: Some(params.clone()),
        };
        let (mut wire, mut next) = (Vec::new(), Vec::new());
        step.encode(&mut wire);
        Message::Shutdown { reason: "x".into() }.encode(&mut next);
        wire.extend_from_slice(&next);
        let mut r = &wire[..];
        let mut buf = Vec::new();
        let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
            .await
            .unwrap();
        assert_eq!(count, Some(1000));
        let mut got = vec![0.0f32; 1000];
        read_f32s(&mut r, &mut got[..300], "p", "t").await.unwrap();
        read_f32s(&mut r, &mut got[300..], "p", "t").await.unwrap();
        assert_eq!(got, params);
        match m {
            Message::Step {
                task,
                iteration,
                version,
                stream_start,
                len,
                params,
            } => {
                assert_eq!(
                    (task, iteration, version, stream_start, len),
                    (4, 9, 2, 77, 13)
                );
                assert_eq!(params, Some(vec![]));
            }
            other => panic!("{other:?}"),
        }
        let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
            .await
            .unwrap();
        assert_eq!((m, count), (Message::Shutdown { reason: "x".into() }, None));
        // A Gradient written as head + values reads back as the whole message.
        let g = Message::Gradient {
            task: 3,
            iteration: 5,
            len: 7,
            loss_sum: 1.5,
            correct: 2,
            timing: StepTiming {
                cpu_s: 0.25,
                ..Default::default()
            },
            signals: Signals::default(),
            first: 0,
            grad: vec![],
        };
        let mut head = Vec::new();
        encode_gradient_head(&g, 3, &mut head);
        head.extend_from_slice(bytemuck::cast_slice(&[1.0f32, -2.0, 0.5]));
        let mut r = &head[..];
        let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
            .await
            .unwrap();
        assert_eq!((m, count), (g.clone(), Some(3)));
        let mut v = vec![0.0f32; 3];
        read_f32s(&mut r, &mut v, "p", "t").await.unwrap();
        assert_eq!(v, [1.0, -2.0, 0.5]);
        let mut whole = Vec::new();
        let Message::Gradient {
            task,
            iteration,
            len,
            loss_sum,
            correct,
            timing,
            signals,
            first,
            ..
        } = g
        else {
            unreachable!()
        };
        Message::Gradient {
            task,
            iteration,
            len,
            loss_sum,
            correct,
            timing,
            signals,
            first,
            grad: v,
        }
        .encode(&mut whole);
        assert_eq!(whole, head);
        // So does a GradientPart.
        let part = Message::GradientPart {
            task: 3,
            iteration: 5,
            offset: 12,
            values: vec![],
        };
        let mut head = Vec::new();
        encode_gradient_head(&part, 2, &mut head);
        head.extend_from_slice(bytemuck::cast_slice(&[4.0f32, 8.0]));
        let mut r = &head[..];
        let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
            .await
            .unwrap();
        assert_eq!((m, count), (part, Some(2)));
        let mut v = vec![0.0f32; 2];
        read_f32s(&mut r, &mut v, "p", "t").await.unwrap();
        assert_eq!(v, [4.0, 8.0]);
        // A Step whose count disagrees with its length is refused, naming the field.
        let mut bad = Vec::new();
        Message::Step {
            task: 1,
            iteration: 1,
            version: 1,
            stream_start: 0,
            len: 1,
            params: Some(vec![1.0; 4]),
        }
        .encode(&mut bad);
        bad[4 + STEP_PARAMS_AT - 4] = 9;
        let mut r = &bad[..];
        let e = read_message_streaming_step(&mut r, &mut buf, "p", "t")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("Step") && e.contains("params"), "{e}");
    }

    fn roundtrip(m: Message) {
        let mut buf = Vec::new();
        m.encode(&mut buf);
        let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(len, buf.len() - 4);
        assert_eq!(Message::decode(&buf[4..], "t").unwrap(), m);
    }

    #[test]
    fn every_message_roundtrips() {
        roundtrip(Message::Hello {
            version: VERSION,
            name: "w0".into(),
        });
        roundtrip(Message::Welcome {
            worker_id: 3,
            job: JobSpec {
                dataset: "tiny".into(),
                fingerprint: 99,
                n_train: 2000,
                model: ModelSpec {
                    kind: 2,
                    dim: 64,
                    classes: 10,
                    width: 32,
                },
                stream_seed: 7,
                n_params: 1234,
            },
        });
        roundtrip(Message::Reject {
            reason: "no".into(),
        });
        roundtrip(Message::Ready {
            fingerprint: 1,
            n_train: 2,
        });
        roundtrip(Message::Step {
            task: 1,
            iteration: 2,
            version: 3,
            stream_start: 4,
            len: 5,
            params: Some(vec![1.0, -2.5]),
        });
        roundtrip(Message::Step {
            task: 1,
            iteration: 2,
            version: 3,
            stream_start: 4,
            len: 5,
            params: None,
        });
        roundtrip(Message::Gradient {
            task: 1,
            iteration: 2,
            len: 3,
            loss_sum: 4.5,
            correct: 2,
            timing: StepTiming {
                cpu_s: 0.1,
                ..Default::default()
            },
            signals: Signals {
                slowdown: 2.0,
                ..Default::default()
            },
            first: 5,
            grad: vec![0.25; 7],
        });
        roundtrip(Message::GradientPart {
            task: 1,
            iteration: 2,
            offset: 0,
            values: vec![0.5; 5],
        });
        roundtrip(Message::Shutdown {
            reason: "done".into(),
        });
        roundtrip(Message::Error {
            message: "x".into(),
        });
    }

    #[test]
    fn split_step_frame_equals_whole_frame() {
        let params = vec![1.0f32, 2.0, 3.0];
        let mut whole = Vec::new();
        Message::Step {
            task: 9,
            iteration: 8,
            version: 7,
            stream_start: 6,
            len: 5,
            params: Some(params.clone()),
        }
        .encode(&mut whole);
        let mut tail = Vec::new();
        encode_params_tail(&params, &mut tail);
        let mut split = step_frame_header(9, 8, 7, 6, 5, tail.len());
        split.extend_from_slice(&tail);
        assert_eq!(whole, split);
    }

    #[test]
    fn malformed_frames_are_named_errors() {
        // every strict prefix of a valid Gradient fails with Truncated, never panics
        let mut buf = Vec::new();
        Message::Gradient {
            task: 1,
            iteration: 2,
            len: 3,
            loss_sum: 4.5,
            correct: 2,
            timing: StepTiming::default(),
            signals: Signals::default(),
            first: 0,
            grad: vec![0.25; 3],
        }
        .encode(&mut buf);
        for cut in 5..buf.len() {
            let e = Message::decode(&buf[4..cut], "peer").unwrap_err();
            assert!(
                matches!(e, ProtocolError::Truncated { .. }),
                "cut {cut}: {e}"
            );
        }
        let e = Message::decode(&[42, 0, 0], "peer")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown frame kind 42"), "{e}");
        // a vector whose count claims more than the frame holds
        let mut b = vec![kind::ERROR];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        let e = Message::decode(&b, "peer").unwrap_err().to_string();
        assert!(
            e.contains("Error frame: field `message` is truncated"),
            "{e}"
        );
        let e = Message::decode(&[], "peer").unwrap_err();
        assert!(matches!(e, ProtocolError::Empty { .. }));
    }

    #[test]
    fn old_version_and_foreign_magic_are_refused() {
        let mut b = vec![kind::HELLO];
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&0u16.to_le_bytes());
        let e = Message::decode(&b, "10.0.0.1:5").unwrap_err().to_string();
        assert!(
            e.contains("protocol version 0") && e.contains("version 2"),
            "{e}"
        );
        let mut b = vec![kind::HELLO];
        b.extend_from_slice(b"GET ");
        let e = Message::decode(&b, "x").unwrap_err().to_string();
        // The bytes as text, not a Debug array of numbers.
        assert!(e.contains(r#"bad magic "GET ", expected "PACR""#), "{e}");
    }

    #[tokio::test]
    async fn a_stalled_large_frame_pins_only_what_arrived() {
        use tokio::io::AsyncWriteExt;
        // Announces the largest frame any reader accepts, sends 1000 bytes, stalls.
        let (mut peer, mut me) = tokio::io::duplex(1 << 16);
        let mut f = MAX_FRAME.to_le_bytes().to_vec();
        f.push(kind::STEP);
        f.extend(vec![0u8; 1000]);
        peer.write_all(&f).await.unwrap();
        let limits = Limits {
            max_frame: MAX_FRAME,
            stall: Some(std::time::Duration::from_millis(100)),
        };
        let mut buf = Vec::new();
        let e = read_frame_with(&mut me, &mut buf, limits, "worker x", "reading a Gradient")
            .await
            .unwrap_err();
        assert!(matches!(e, ProtocolError::Timeout { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("worker x") && e.contains("100ms") && e.contains("reading a Gradient"),
            "{e}"
        );
        // Once the buffer held 256 MiB here, zero-filled, for as long as the peer
        // stalled.
        assert!(buf.capacity() <= 2 * READ_CHUNK, "{}", buf.capacity());
        // The streaming reader too, on a frame that is not streamed.
        let mut f = MAX_FRAME.to_le_bytes().to_vec();
        f.push(kind::ERROR);
        f.extend(vec![0u8; 1000]);
        peer.write_all(&f).await.unwrap();
        let mut buf = Vec::new();
        let e = read_message_streaming_step_with(&mut me, &mut buf, limits, "p", "t")
            .await
            .unwrap_err();
        assert!(matches!(e, ProtocolError::Timeout { .. }), "{e}");
        assert!(buf.capacity() <= 2 * READ_CHUNK, "{}", buf.capacity());
    }

    #[tokio::test]
    async fn frames_are_limited_by_what_the_job_needs() {
        let stall = std::time::Duration::from_secs(5);
        let n = 100_000;
        let limits = Limits::for_job(n, stall);
        assert!(limits.max_frame < MAX_FRAME);
        let gradient = |values: usize| {
            let mut f = Vec::new();
            Message::Gradient {
                task: 1,
                iteration: 1,
                len: 3,
                loss_sum: 0.0,
                correct: 0,
                timing: StepTiming::default(),
                signals: Signals::default(),
                first: 0,
                grad: vec![0.5; values],
            }
            .encode(&mut f);
            f
        };
        // The whole gradient of the job fits; so does a Step with all the parameters.
        let f = gradient(n);
        let mut buf = Vec::new();
        let (_, count) = read_message_streaming_step_with(&mut &f[..], &mut buf, limits, "p", "t")
            .await
            .unwrap();
        assert_eq!(count, Some(n));
        let mut f = Vec::new();
        Message::Step {
            task: 1,
            iteration: 1,
            version: 1,
            stream_start: 0,
            len: 1,
            params: Some(vec![1.0; n]),
        }
        .encode(&mut f);
        read_message_streaming_step_with(&mut &f[..], &mut buf, limits, "p", "t")
            .await
            .unwrap();
        // More than the job can need is refused from the length prefix alone.
        let f = gradient(n + 1000);
        let e = read_message_streaming_step_with(&mut &f[..4], &mut buf, limits, "worker y", "t")
            .await
            .unwrap_err();
        assert!(matches!(e, ProtocolError::TooLarge { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("worker y") && e.contains(&format!("limit of {} bytes", limits.max_frame)),
            "{e}"
        );
        // Before Hello: a few KiB at most.
        let big_hello = (MAX_HELLO_FRAME + 1).to_le_bytes();
        let e = read_frame_with(
            &mut &big_hello[..],
            &mut buf,
            Limits::hello(stall),
            "p",
            "t",
        )
        .await
        .unwrap_err();
        assert!(matches!(e, ProtocolError::TooLarge { limit, .. } if limit == MAX_HELLO_FRAME));
        // A tiny model still gets room for control messages.
        assert_eq!(Limits::for_job(10, stall).max_frame, MAX_CONTROL_FRAME);
    }

    #[tokio::test]
    async fn oversized_length_is_refused_before_allocating() {
        let bytes = (MAX_FRAME + 1).to_le_bytes();
        let mut r = &bytes[..];
        let mut buf = Vec::new();
        let e = read_frame(&mut r, &mut buf, "p", "waiting")
            .await
            .unwrap_err();
        assert!(matches!(e, ProtocolError::TooLarge { .. }));
        assert!(buf.capacity() < 1024);
    }
}
