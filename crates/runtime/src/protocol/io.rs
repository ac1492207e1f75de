//! Frames on a socket: reading with a size limit and a stall timeout (the buffer
//! grows only as bytes arrive), the streaming reads of a Step's or Gradient's
//! values straight into their destination, and writing.

use super::{kind, Limits, Message, ProtocolError, READ_CHUNK};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
pub(super) const STEP_PARAMS_AT: usize = 1 + 8 * 4 + 4 + 1 + 4;
/// Bytes of a Gradient frame body before its values: kind, task, iteration, len,
/// loss_sum, correct, 11 timings, 8 signals, first, count.
pub(super) const GRADIENT_VALUES_AT: usize = 1 + 8 + 8 + 4 + 8 + 4 + 11 * 8 + 8 * 4 + 4 + 4;
/// Bytes of a GradientPart frame body before its values: kind, task, iteration,
/// offset, count (the shortest header of a streamed frame).
pub(super) const PART_VALUES_AT: usize = 1 + 8 + 8 + 4 + 4;

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
