//! The socket thread: reads Steps (their parameters chunk by chunk, straight into
//! the buffers the compute thread consumes) and hands them over; and the compute
//! thread's own handle on the socket, which it writes its Gradients with.

use crate::error::RuntimeError;
use crate::protocol::{self, Message, ProtocolError};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// What the socket thread hands the compute thread.
pub(super) enum Incoming {
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
pub(super) const PARAMS_CHUNK: usize = 16 * 1024;

/// `values` as little-endian bytes: themselves on little-endian hosts, else a copy
/// into `scratch`.
pub(super) fn f32_wire_bytes<'a>(values: &'a [f32], scratch: &'a mut Vec<u8>) -> &'a [u8] {
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
pub(super) struct GradientSink {
    stream: std::net::TcpStream,
    peer: String,
    /// Longest time a write may make no progress (the controller stopped reading).
    stall: Duration,
}

impl GradientSink {
    pub(super) fn new(
        stream: &TcpStream,
        peer: &str,
        stall: Duration,
    ) -> Result<Self, RuntimeError> {
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

    pub(super) fn write_all(&mut self, mut buf: &[u8]) -> Result<(), RuntimeError> {
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
                            "the controller took nothing for {:?} (`stall_timeout_s`)",
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
    pub(super) fn abort(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

pub(super) async fn read_loop(
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
            "waiting for a Step or Shutdown (`idle_timeout_s`)",
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
