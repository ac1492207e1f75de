//! # pacer-runtime
//!
//! pacer's real driver (ARCHITECTURE.md): a controller service and worker processes that
//! run synchronous data-parallel training of real models on real data over TCP, with
//! per-worker batch sizes chosen by the same controllers (`pacer_control::worker`) and
//! speed predictors (`pacer_predict::speed`) that the scenario simulator
//! (`pacer-workersim`) drives — called the same way, once per iteration, so a real run
//! and a simulated one compare line by line.
//!
//! What goes in: a dataset (MNIST IDX, LIBSVM, or the shipped `tiny` set), a model,
//! a global batch `B`, a controller and a predictor; workers that connect. What comes
//! out: a trained model's accuracy curve and a [`TrainReport`] (time to target,
//! iteration time against the ideal balance, where the time went).
//!
//! Start reading at [`controller`] (one iteration, failure handling), then
//! [`worker`] and [`protocol`] (the framing, versioned handshake).
//!
//! - [`data`]: loaders, fingerprints, and the sample stream that shards epochs.
//! - [`model`]: logistic regression, linear SVM, 2-layer MLP, K-means with
//!   hand-written gradients over flat parameters.
//! - [`optim`]: SGD with momentum, Adam.
//! - [`protocol`]: length-prefixed little-endian frames, `Hello` with magic + version.
//! - [`controller`]: the service; [`worker`]: the worker loop.
//! - [`emulation`]: speeds and interference emulated by padding after real compute.
//! - [`sysinfo`]: thread CPU time and /proc signals.
//! - [`train`]: a whole training run in one call, [`train::run`] (`pacer train`):
//!   a [`train::TrainConfig`] in, a report or an error naming the config field out.
//! - [`checkpoint`]: the job's state on SIGTERM (`--checkpoint-dir`), resumed on start.
//! - [`service`]: reports to a scheduler service (`PACER_SERVER`).
//! - [`gns`]: the gradient noise scale of the running job, from the gradients the
//!   controller aggregates (`pacer_predict::gns`).
//!
//! Architecture invariant: this crate and the CLI are the only ones that know the
//! network and the wire format; the controllers and predictors it calls never learn
//! that they run on real processes. Time here is wall time, and training time
//! excludes evaluation.

pub mod checkpoint;
pub mod controller;
pub mod data;
pub mod emulation;
pub mod error;
pub mod gns;
pub mod interrupt;
pub mod model;
pub mod optim;
pub mod protocol;
pub mod service;
pub mod sysinfo;
pub mod train;
pub mod worker;

pub use controller::{ControllerConfig, Progress, ProgressFn, TrainReport, WorkerStats};
pub use data::{Data, Dataset};
pub use error::RuntimeError;
pub use train::{train_local, LocalLaunch};
