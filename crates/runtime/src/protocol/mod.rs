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

//!
//! The code: this file holds the frames' types and limits, `codec.rs` their byte
//! layout (encode, decode), `io.rs` reading and writing frames on a socket with
//! limits and stall timeouts.

mod codec;
mod io;
#[cfg(test)]
mod tests;

pub use codec::{encode_params_tail, f32s_le_bytes, put_step_header, step_frame_header};
pub use io::{
    encode_gradient_head, read_f32s, read_f32s_with, read_frame, read_frame_with, read_message,
    read_message_streaming_step, read_message_streaming_step_with, read_message_with, timed,
    write_message,
};

use crate::model::ModelSpec;
use io::{GRADIENT_VALUES_AT, STEP_PARAMS_AT};

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
}
