//! The `binary` variant: pacer's own framing (`pacer_runtime::protocol`) over tokio
//! TCP with TCP_NODELAY, one connection per worker.
//!
//! The controller encodes the parameter tail once per round
//! (`encode_params_tail`) and writes a per-worker `step_frame_header` followed by
//! that shared tail to each connection; a worker reads the Step header with
//! `read_message_streaming_step` and the parameters with `read_f32s` straight into a
//! preallocated `Vec<f32>`, then writes an `encode_gradient_head` frame head followed
//! by its gradient's bytes (no copy into a frame). The controller reads each gradient
//! the same way into a per-worker preallocated `Vec<f32>`.
//!
//! Unlike the runtime, the controller writes the whole tail at once (no 64 KB
//! chunks interleaved with the optimiser), and one task drives all four
//! connections (the runtime has a reader and a writer task per connection).

use crate::payload::{self, probe, LOCAL_BATCH, SIGNALS, TIMING};
use crate::traffic::{Counted, Traffic};
use crate::{BoxError, Reply};
use pacer_runtime::protocol::{
    encode_gradient_head, encode_params_tail, read_f32s, read_message_streaming_step,
    step_frame_header, Message, ProtocolError, Signals, StepTiming,
};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

#[cfg(target_endian = "big")]
compile_error!("the binary worker writes its f32s as they are in memory: little-endian hosts only");

/// The controller's end: one connection per worker.
pub struct Binary {
    conns: Vec<TcpStream>,
    tail: Vec<u8>,
    bufs: Vec<Vec<u8>>,
    pub grads: Vec<Vec<f32>>,
    pub traffic: Arc<Traffic>,
}

impl Binary {
    /// Starts `workers` worker tasks, each with its gradient, and connects to them.
    pub async fn start(workers: usize, n: usize, seed: u64) -> Result<Self, BoxError> {
        let traffic = Arc::new(Traffic::default());
        let mut conns = Vec::with_capacity(workers);
        for w in 0..workers {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let grad = payload::gradient(seed, w, n);
            let traffic = traffic.clone();
            tokio::spawn(async move {
                let (s, _) = listener.accept().await.expect("accept");
                s.set_nodelay(true).expect("TCP_NODELAY");
                if let Err(e) = worker(Counted::new(s, traffic), grad).await {
                    eprintln!("binary worker {w}: {e}");
                }
            });
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            conns.push(s);
        }
        Ok(Self {
            conns,
            tail: Vec::new(),
            bufs: vec![Vec::new(); workers],
            grads: vec![vec![0.0; n]; workers],
            traffic,
        })
    }

    /// One round: a Step to every worker, then every Gradient back.
    pub async fn round(&mut self, params: &[f32], iteration: u64) -> Result<Vec<Reply>, BoxError> {
        let workers = self.conns.len();
        encode_params_tail(params, &mut self.tail);
        let tail = &self.tail;
        let calls = self
            .conns
            .iter_mut()
            .zip(self.bufs.iter_mut())
            .zip(self.grads.iter_mut())
            .enumerate()
            .map(|(w, ((conn, buf), grad))| async move {
                let task = payload::task(iteration, workers, w);
                let start = task * u64::from(LOCAL_BATCH);
                let head =
                    step_frame_header(task, iteration, iteration, start, LOCAL_BATCH, tail.len());
                conn.write_all(&head).await?;
                conn.write_all(tail).await?;
                let peer = "worker";
                let (m, count) =
                    read_message_streaming_step(conn, buf, peer, "waiting for a Gradient").await?;
                let n = count.ok_or("a Gradient without values")?;
                grad.resize(n, 0.0);
                read_f32s(conn, grad, peer, "reading a Gradient").await?;
                match m {
                    Message::Gradient { task, loss_sum, .. } => {
                        Ok::<_, BoxError>(Reply { task, loss_sum })
                    }
                    other => Err(format!("expected a Gradient, got kind {}", other.kind()).into()),
                }
            });
        futures::future::join_all(calls).await.into_iter().collect()
    }
}

/// A worker: answers every Step with its gradient until the controller hangs up.
async fn worker(mut s: Counted<TcpStream>, grad: Vec<f32>) -> Result<(), BoxError> {
    let peer = "controller";
    let (mut head, mut wbuf) = (Vec::new(), Vec::new());
    let mut params: Vec<f32> = Vec::new();
    let timing = StepTiming {
        cpu_s: TIMING[0],
        wall_s: TIMING[1],
        step_s: TIMING[2],
        decode_s: TIMING[3],
        encode_s: TIMING[4],
        target_s: TIMING[5],
        pre_s: TIMING[6],
        post_s: TIMING[7],
        queue_s: TIMING[8],
        recv_unix_s: TIMING[9],
        send_unix_s: TIMING[10],
    };
    let signals = Signals {
        cpu_load: SIGNALS[0],
        mem_load: SIGNALS[1],
        next_cpu_load: SIGNALS[2],
        next_mem_load: SIGNALS[3],
        proc_cpu_busy: SIGNALS[4],
        proc_mem_used: SIGNALS[5],
        loadavg1: SIGNALS[6],
        slowdown: SIGNALS[7],
    };
    loop {
        let (m, count) = match read_message_streaming_step(
            &mut s,
            &mut head,
            peer,
            "waiting for a Step",
        )
        .await
        {
            Err(ProtocolError::Closed { .. }) => return Ok(()),
            r => r?,
        };
        let Message::Step {
            task,
            iteration,
            len,
            ..
        } = m
        else {
            return Err(format!("expected a Step, got kind {}", m.kind()).into());
        };
        let n = count.ok_or("a Step without parameters")?;
        params.resize(n, 0.0);
        read_f32s(&mut s, &mut params, peer, "reading parameters").await?;
        let reply = Message::Gradient {
            task,
            iteration,
            len,
            loss_sum: probe(&params),
            correct: 0,
            timing,
            signals,
            first: 0,
            grad: Vec::new(),
        };
        encode_gradient_head(&reply, grad.len(), &mut wbuf);
        s.write_all(&wbuf).await?;
        s.write_all(bytemuck::cast_slice(&grad)).await?;
    }
}
