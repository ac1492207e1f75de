//! The tonic variants: gRPC over HTTP/2, one server (worker) per port and one
//! `Channel` (one HTTP/2 connection) per worker, messages generated from
//! `proto/bench.proto` by tonic-prost-build on a protox descriptor set.
//!
//! - `tonic-unary`: `rpc Step(StepRequest) returns (GradientReply)`, the four calls
//!   of a round issued concurrently (`join_all`).
//! - `tonic-stream`: `rpc Steps(stream StepRequest) returns (stream GradientReply)`,
//!   one long-lived stream per worker.
//! - `tonic-bytes`: the same stream with `bytes` vectors: the controller encodes the
//!   parameters once per round into one `Bytes` shared by the four requests; the
//!   receivers copy the bytes into a preallocated `Vec<f32>`.
//!
//! With packed `repeated float`, every request owns its copy of the parameters
//! (`params.to_vec()` per worker per round) and every reply its copy of the gradient
//! (a worker clones its gradient into the message): the protobuf message owns its
//! vectors. Prost decodes them into freshly allocated vectors.

use crate::payload::{self, probe, LOCAL_BATCH, SIGNALS, TIMING};
use crate::traffic::{Counted, Traffic};
use crate::{BoxError, Reply};
use bytes::Bytes;
use pacer_runtime::protocol::f32s_le_bytes;
use pb::trainer_client::TrainerClient;
use pb::trainer_server::{Trainer, TrainerServer};
use pb::{GradientBytes, GradientReply, StepBytes, StepRequest};
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status, Streaming};

#[allow(clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("pacer.bench");
}

#[cfg(target_endian = "big")]
compile_error!("the `bytes` variant copies f32s as they are in memory: little-endian hosts only");

/// Which RPC shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Unary,
    Stream,
    Bytes,
}

/// HTTP/2 settings of both ends.
#[derive(Debug, Clone, Copy, Default)]
pub struct H2 {
    /// Initial stream and connection flow-control window (`None`: hyper's defaults,
    /// 2 MiB / 5 MiB on the client, 1 MiB / 1 MiB on the server).
    pub window: Option<u32>,
}

type Client = TrainerClient<Channel>;

enum Conns {
    Unary(Vec<Client>),
    Stream(Vec<(mpsc::Sender<StepRequest>, Streaming<GradientReply>)>),
    Bytes(Vec<(mpsc::Sender<StepBytes>, Streaming<GradientBytes>)>),
}

/// The controller's end of one tonic variant.
pub struct Tonic {
    conns: Conns,
    pub grads: Vec<Vec<f32>>,
    pub traffic: Arc<Traffic>,
}

impl Tonic {
    /// Starts `workers` servers, each with its gradient, and connects to them.
    pub async fn start(
        kind: Kind,
        workers: usize,
        n: usize,
        seed: u64,
        h2: H2,
    ) -> Result<Self, BoxError> {
        let traffic = Arc::new(Traffic::default());
        let mut clients = Vec::with_capacity(workers);
        for w in 0..workers {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let t = traffic.clone();
            let incoming = TcpListenerStream::new(listener).map(move |r| {
                r.and_then(|s| {
                    s.set_nodelay(true)?;
                    Ok(Counted::new(s, t.clone()))
                })
            });
            let svc = TrainerServer::new(Worker {
                grad: Arc::new(payload::gradient(seed, w, n)),
            })
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
            let mut server = Server::builder()
                .initial_stream_window_size(h2.window)
                .initial_connection_window_size(h2.window);
            tokio::spawn(async move {
                if let Err(e) = server.add_service(svc).serve_with_incoming(incoming).await {
                    eprintln!("tonic worker {w}: {e}");
                }
            });
            let channel = Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .initial_stream_window_size(h2.window)
                .initial_connection_window_size(h2.window)
                .connect()
                .await?;
            clients.push(
                TrainerClient::new(channel)
                    .max_decoding_message_size(usize::MAX)
                    .max_encoding_message_size(usize::MAX),
            );
        }
        let conns = match kind {
            Kind::Unary => Conns::Unary(clients),
            Kind::Stream => {
                let mut v = Vec::with_capacity(workers);
                for mut c in clients {
                    let (tx, rx) = mpsc::channel(1);
                    let inbound = c.steps(ReceiverStream::new(rx)).await?.into_inner();
                    v.push((tx, inbound));
                }
                Conns::Stream(v)
            }
            Kind::Bytes => {
                let mut v = Vec::with_capacity(workers);
                for mut c in clients {
                    let (tx, rx) = mpsc::channel(1);
                    let inbound = c.steps_bytes(ReceiverStream::new(rx)).await?.into_inner();
                    v.push((tx, inbound));
                }
                Conns::Bytes(v)
            }
        };
        Ok(Self {
            conns,
            grads: vec![vec![0.0; n]; workers],
            traffic,
        })
    }

    /// One round: a Step to every worker, then every Gradient back.
    pub async fn round(&mut self, params: &[f32], iteration: u64) -> Result<Vec<Reply>, BoxError> {
        let workers = self.grads.len();
        let results = match &mut self.conns {
            Conns::Unary(clients) => {
                let calls = clients
                    .iter_mut()
                    .zip(self.grads.iter_mut())
                    .enumerate()
                    .map(|(w, (client, grad))| {
                        let req = step_request(params, iteration, workers, w);
                        async move {
                            let r = client.step(req).await?.into_inner();
                            *grad = r.grad;
                            Ok::<_, BoxError>(Reply {
                                task: r.task,
                                loss_sum: r.loss_sum,
                            })
                        }
                    });
                futures::future::join_all(calls).await
            }
            Conns::Stream(streams) => {
                let calls = streams
                    .iter_mut()
                    .zip(self.grads.iter_mut())
                    .enumerate()
                    .map(|(w, ((tx, inbound), grad))| {
                        let req = step_request(params, iteration, workers, w);
                        async move {
                            tx.send(req).await.map_err(|_| "request stream closed")?;
                            let r = inbound.message().await?.ok_or("reply stream ended")?;
                            *grad = r.grad;
                            Ok::<_, BoxError>(Reply {
                                task: r.task,
                                loss_sum: r.loss_sum,
                            })
                        }
                    });
                futures::future::join_all(calls).await
            }
            Conns::Bytes(streams) => {
                let mut wire = Vec::new();
                f32s_le_bytes(params, &mut wire);
                let shared = Bytes::from(wire);
                let calls = streams
                    .iter_mut()
                    .zip(self.grads.iter_mut())
                    .enumerate()
                    .map(|(w, ((tx, inbound), grad))| {
                        let task = payload::task(iteration, workers, w);
                        let req = StepBytes {
                            task,
                            iteration,
                            version: iteration,
                            stream_start: task * u64::from(LOCAL_BATCH),
                            len: LOCAL_BATCH,
                            params: shared.clone(),
                        };
                        async move {
                            tx.send(req).await.map_err(|_| "request stream closed")?;
                            let r = inbound.message().await?.ok_or("reply stream ended")?;
                            read_le_f32s(&r.grad, grad).map_err(|e| e.message().to_string())?;
                            Ok::<_, BoxError>(Reply {
                                task: r.task,
                                loss_sum: r.loss_sum,
                            })
                        }
                    });
                futures::future::join_all(calls).await
            }
        };
        results.into_iter().collect()
    }
}

fn step_request(params: &[f32], iteration: u64, workers: usize, w: usize) -> StepRequest {
    let task = payload::task(iteration, workers, w);
    StepRequest {
        task,
        iteration,
        version: iteration,
        stream_start: task * u64::from(LOCAL_BATCH),
        len: LOCAL_BATCH,
        params: params.to_vec(),
    }
}

/// Little-endian f32 bytes into `out` (resized to fit).
fn read_le_f32s(bytes: &[u8], out: &mut Vec<f32>) -> Result<(), Status> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Status::invalid_argument(format!(
            "{} bytes is not a whole number of f32s",
            bytes.len()
        )));
    }
    out.resize(bytes.len() / 4, 0.0);
    bytemuck::cast_slice_mut::<f32, u8>(out).copy_from_slice(bytes);
    Ok(())
}

/// A worker: answers every Step with its (fixed) gradient.
struct Worker {
    grad: Arc<Vec<f32>>,
}

fn gradient_reply(step: &StepRequest, grad: &[f32]) -> GradientReply {
    GradientReply {
        task: step.task,
        iteration: step.iteration,
        len: step.len,
        loss_sum: probe(&step.params),
        correct: 0,
        timing: TIMING.to_vec(),
        signals: SIGNALS.to_vec(),
        first: 0,
        grad: grad.to_vec(),
    }
}

type ReplyStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Trainer for Worker {
    async fn step(&self, req: Request<StepRequest>) -> Result<Response<GradientReply>, Status> {
        Ok(Response::new(gradient_reply(req.get_ref(), &self.grad)))
    }

    type StepsStream = ReplyStream<GradientReply>;

    async fn steps(
        &self,
        req: Request<Streaming<StepRequest>>,
    ) -> Result<Response<Self::StepsStream>, Status> {
        let grad = self.grad.clone();
        // Each reply is produced when the response stream is polled: no extra task.
        let replies = futures::stream::unfold(req.into_inner(), move |mut inbound| {
            let grad = grad.clone();
            async move {
                match inbound.message().await {
                    Ok(Some(step)) => Some((Ok(gradient_reply(&step, &grad)), inbound)),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), inbound)),
                }
            }
        });
        Ok(Response::new(Box::pin(replies)))
    }

    type StepsBytesStream = ReplyStream<GradientBytes>;

    async fn steps_bytes(
        &self,
        req: Request<Streaming<StepBytes>>,
    ) -> Result<Response<Self::StepsBytesStream>, Status> {
        let grad = self.grad.clone();
        let state = (req.into_inner(), Vec::<f32>::new());
        let replies = futures::stream::unfold(state, move |(mut inbound, mut params)| {
            let grad = grad.clone();
            async move {
                let step = match inbound.message().await {
                    Ok(Some(step)) => step,
                    Ok(None) => return None,
                    Err(e) => return Some((Err(e), (inbound, params))),
                };
                if let Err(e) = read_le_f32s(&step.params, &mut params) {
                    return Some((Err(e), (inbound, params)));
                }
                let mut wire = Vec::new();
                f32s_le_bytes(&grad, &mut wire);
                let reply = GradientBytes {
                    task: step.task,
                    iteration: step.iteration,
                    len: step.len,
                    loss_sum: probe(&params),
                    correct: 0,
                    timing: TIMING.to_vec(),
                    signals: SIGNALS.to_vec(),
                    first: 0,
                    grad: Bytes::from(wire),
                };
                Some((Ok(reply), (inbound, params)))
            }
        });
        Ok(Response::new(Box::pin(replies)))
    }
}
