//! The byte layout of the frames: [`Message::encode`], [`Message::decode`], and the
//! pieces of a Step frame the controller sends without a frame buffer.

use super::{
    kind, kind_name, JobSpec, Message, ProtocolError, Signals, StepTiming, MAGIC, VERSION,
};
use crate::model::{ModelKind, ModelSpec};

impl Message {
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
                w.push(job.model.kind.wire_id());
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
                    model: r.model_spec()?,
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
            kind::GRADIENT => r.gradient()?,
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

impl Reader<'_> {
    /// A `ModelSpec`: the kind's wire id (one this build knows) and the shape.
    fn model_spec(&mut self) -> Result<ModelSpec, ProtocolError> {
        let id = self.u8("model.kind")?;
        let kind = ModelKind::from_wire(id).ok_or_else(|| {
            self.invalid(
                "model.kind",
                format!(
                    "unknown model kind {id}; this build knows {}",
                    ModelKind::ALL
                        .map(|k| format!("{} ({})", k.wire_id(), k.name()))
                        .join(", ")
                ),
            )
        })?;
        Ok(ModelSpec {
            kind,
            dim: self.u32("model.dim")?,
            classes: self.u32("model.classes")?,
            width: self.u32("model.width")?,
        })
    }

    /// The payload of a `Gradient` frame.
    fn gradient(&mut self) -> Result<Message, ProtocolError> {
        let task = self.u64("task")?;
        let iteration = self.u64("iteration")?;
        let len = self.u32("len")?;
        let loss_sum = self.f64("loss_sum")?;
        let correct = self.u32("correct")?;
        let timing = StepTiming {
            cpu_s: self.f64("timing.cpu_s")?,
            wall_s: self.f64("timing.wall_s")?,
            step_s: self.f64("timing.step_s")?,
            decode_s: self.f64("timing.decode_s")?,
            encode_s: self.f64("timing.encode_s")?,
            target_s: self.f64("timing.target_s")?,
            pre_s: self.f64("timing.pre_s")?,
            post_s: self.f64("timing.post_s")?,
            queue_s: self.f64("timing.queue_s")?,
            recv_unix_s: self.f64("timing.recv_unix_s")?,
            send_unix_s: self.f64("timing.send_unix_s")?,
        };
        let signals = Signals {
            cpu_load: self.f32("signals.cpu_load")?,
            mem_load: self.f32("signals.mem_load")?,
            next_cpu_load: self.f32("signals.next_cpu_load")?,
            next_mem_load: self.f32("signals.next_mem_load")?,
            proc_cpu_busy: self.f32("signals.proc_cpu_busy")?,
            proc_mem_used: self.f32("signals.proc_mem_used")?,
            loadavg1: self.f32("signals.loadavg1")?,
            slowdown: self.f32("signals.slowdown")?,
        };
        Ok(Message::Gradient {
            task,
            iteration,
            len,
            loss_sum,
            correct,
            timing,
            signals,
            first: self.u32("first")?,
            grad: self.f32s("grad")?,
        })
    }
}
