//! The controller service: admits workers, runs synchronous data-parallel iterations
//! with per-worker batches, aggregates gradients weighted by batch, applies the
//! optimiser, evaluates, and handles workers that join, leave or die.
//!
//! ## One iteration (the same order as the scenario simulator, `pacer-workersim`)
//! Steps 1, 2 and the observation of step 5 are the job session's
//! ([`pacer_control::session::JobSession`]), the code the scenario simulator drives:
//! 1. Boundary: admit workers whose handshake finished, drop the dead; the session's
//!    membership follows. A change of membership rebuilds the batching problem and the
//!    controller and re-balances `B` over the members: in proportion to the predicted
//!    speeds (newcomers at the mean prediction), or equal shares for `uniform`.
//! 2. Otherwise each member's predictor predicts its speed from the signals it
//!    reported for the start of this iteration, and the controller rewrites the
//!    batches from the last compute times and those predictions.
//! 3. Worker `i` gets the next `b_i` positions of the sample stream and the model.
//! 4. Gradients are accumulated as they arrive: `g += (b_i / B) · g_i`, block by
//!    block when a worker sends its gradient in parts (the chunked uplink), so that
//!    after the last worker's step only its last, small block is left to read and sum.
//! 5. The optimiser steps; the session observes each worker's speed
//!    `b_i / step_s_i` with the signals of the iteration's start.
//! 6. The gradient noise scale ([`crate::gns`]): each task's `|g_i|²` is summed in
//!    the accumulation of step 4, the aggregate's `|g|²` when the next iteration's
//!    gather clears it; an iteration that lost a worker is not observed.
//!
//! ## A worker lost in the middle of an iteration: retried
//! Its tasks are split among the survivors (by predicted speed) with the same model
//! version, and the iteration completes on exactly the samples it was given. Why retry
//! rather than re-weight over the survivors: the step is then the very step BSP would
//! have taken (same samples, same weights `len/B` summing to 1), the epoch still
//! covers every sample once, and a failure costs one extra round of a fraction of a
//! batch instead of silently changing the effective batch of one step. Results are
//! accepted only for a task that is still pending and assigned to the sender, so a
//! late answer from a worker declared dead can never be counted twice. Parts of a
//! gradient are summed into the aggregate as they arrive, and every block summed in
//! the iteration is kept until its end: if a worker is lost after some parts of its
//! task arrived, the aggregate is rebuilt from the blocks of the other tasks (rare,
//! and exact: the partial gradient is never in the sum, the retried range counts
//! once). Buffering each task's parts and adding them only when its last block
//! arrived would have been as exact but would leave the whole sum of the last
//! worker's gradient on the critical path.

mod config;
mod connections;
mod iteration;
mod membership;
pub(crate) mod report;
mod retry;
mod run;
mod screen;
#[cfg(test)]
mod tests;

pub(crate) use config::short_num;
pub use config::{
    validate, ControllerConfig, DEFAULT_HELLO_TIMEOUT_S, DEFAULT_MAX_PENDING,
    DEFAULT_MAX_PRE_HELLO_PER_ADDR, DEFAULT_REJOIN_TIMEOUT_S,
};
pub use report::{
    EvalPoint, LedgerEntry, Overhead, Progress, ProgressFn, TrainReport, WorkerStats,
};
pub use screen::{check_params, norm_ratio_sqr, MIN_REFERENCE, NORM_FACTOR, WINDOW};

use crate::checkpoint::Checkpoint;
use crate::data::Data;
use crate::error::RuntimeError;
use crate::model::Model;
use crate::protocol::{self, JobSpec, Message};
use connections::{accept_loop, Event, Out, Shared, WRITE_CHUNK};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Bind `addr` and serve one training job (see [`serve`]).
pub async fn serve_addr(
    addr: SocketAddr,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| RuntimeError::io(format!("`listen` {addr}"), e))?;
    serve(listener, data, cfg, progress).await
}

/// [`serve_addr`] on a runtime of its own (two threads: the training loop, and the
/// connections' reads and decodes), for callers without one.
pub fn serve_blocking(
    addr: SocketAddr,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| RuntimeError::io(format!("`listen` {addr}"), e))?;
    serve_blocking_on(listener, data, cfg, progress)
}

/// [`serve_blocking`] on a listener the caller bound, e.g. to print the port the OS
/// chose for port 0 (`listener.local_addr()`) before serving.
pub fn serve_blocking_on(
    listener: std::net::TcpListener,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    listener
        .set_nonblocking(true)
        .map_err(|e| RuntimeError::io("setting up the listening socket", e))?;
    let realtime = cfg.realtime_io;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(move || {
            if realtime {
                crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_CONTROLLER);
            }
        })
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::io("starting the controller's runtime", e))?;
    rt.block_on(async move {
        let listener = TcpListener::from_std(listener)
            .map_err(|e| RuntimeError::io("setting up the listening socket", e))?;
        serve_on_runtime(listener, data, cfg, progress).await
    })
}

/// [`serve`] as a task of the current multi-threaded runtime rather than on the
/// thread that blocks on it: the training loop then shares a thread with the
/// connections' tasks, so waking a connection's writer or being woken by a
/// gradient's reader is not a cross-thread wake-up (each cost ~0.2 ms on the
/// loaded 2-core machine, on the critical path of every iteration).
pub async fn serve_on_runtime(
    listener: TcpListener,
    data: Arc<Data>,
    cfg: ControllerConfig,
    progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    tokio::spawn(serve(listener, data, cfg, progress))
        .await
        .map_err(|e| RuntimeError::Stopped(format!("the training loop failed: {e}")))?
}

/// Serve one training job on `listener` until a stop condition holds, then shut the
/// workers down and return the report.
pub async fn serve(
    listener: TcpListener,
    data: Arc<Data>,
    cfg: ControllerConfig,
    mut progress: Option<ProgressFn>,
) -> Result<TrainReport, RuntimeError> {
    validate(&cfg, &data)?;
    // A checkpoint of another run is an error before anything starts.
    let resume = resume_from(&cfg, &data)?;
    let model: Box<dyn Model> = cfg.model.build();
    let n_params = model.n_params();
    let (ev_tx, mut events) = mpsc::unbounded_channel::<Event>();
    let grad_pool = Arc::new(Mutex::new(Vec::new()));
    let shared = Arc::new(Shared {
        job: JobSpec {
            dataset: data.spec.clone(),
            fingerprint: data.fingerprint,
            n_train: data.train.n as u64,
            model: cfg.model,
            stream_seed: cfg.seed,
            n_params: n_params as u32,
        },
        events: ev_tx,
        rejected: Mutex::new(Vec::new()),
        admitted: Mutex::new(Vec::new()),
        verbose: cfg.verbose,
        write_chunk: if cfg.pipeline {
            WRITE_CHUNK
        } else {
            usize::MAX
        },
        grad_pool: grad_pool.clone(),
        pending: std::sync::atomic::AtomicUsize::new(0),
        max_pending: cfg.max_pending,
        pre_hello: Mutex::new(connections::PreHello::default()),
        max_pre_hello_per_addr: cfg.max_pre_hello_per_addr,
        hello_timeout: Duration::from_secs_f64(cfg.hello_timeout_s),
        job_limits: protocol::Limits::for_job(
            n_params,
            Duration::from_secs_f64(cfg.worker_timeout_s),
        ),
    });
    let acceptor = tokio::spawn(accept_loop(listener, shared.clone()));
    let result = run::train_loop(
        &cfg,
        &data,
        model.as_ref(),
        &mut events,
        &mut progress,
        &grad_pool,
        resume,
    )
    .await;
    acceptor.abort();
    let (mut report, members) = result?;
    let mut acks = Vec::new();
    for m in members {
        let mut f = Vec::new();
        Message::Shutdown {
            reason: "training finished".into(),
        }
        .encode(&mut f);
        let (a, r) = tokio::sync::oneshot::channel();
        let _ = m.tx.send(Out::Frame(f));
        let _ = m.tx.send(Out::Close(Some(a)));
        acks.push(r);
    }
    for r in acks {
        let _ = tokio::time::timeout(Duration::from_secs(5), r).await;
    }
    report.rejected = shared.rejected.lock().expect("rejected list").clone();
    report.admitted = shared.admitted.lock().expect("admitted list").clone();
    Ok(report)
}

/// The checkpoint in `cfg.checkpoint_dir` to resume from, checked against this run;
/// `None` without a directory or a checkpoint in it.
pub fn resume_from(
    cfg: &ControllerConfig,
    data: &Data,
) -> Result<Option<Checkpoint>, RuntimeError> {
    let Some(dir) = &cfg.checkpoint_dir else {
        return Ok(None);
    };
    let Some(c) = Checkpoint::load(dir, &cfg.model)? else {
        return Ok(None);
    };
    c.check_matches(dir, data, &cfg.model, &cfg.optimizer, cfg.seed)?;
    Ok(Some(c))
}
