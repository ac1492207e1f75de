//! The one entry point of a training run ([`run`]): a plain [`TrainConfig`] in, a
//! [`TrainOutcome`] or a [`TrainError`] that names the config field at fault out.
//!
//! A front end (the CLI's `pacer train`) only fills the config and prints the outcome;
//! the dataset, the model, the optimiser, the checkpoint to resume, the signals and the
//! local workers are all set up here, in the order that fails before anything starts.

use super::{train_local, LocalLaunch};
use crate::controller::{self, ControllerConfig, ProgressFn, TrainReport};
use crate::data::{self, Data};
use crate::emulation::InterferencePlan;
use crate::error::RuntimeError;
use crate::model::ModelSpec;
use crate::optim::OptimSpec;
use crate::service::ServiceEnv;
use crate::worker::{LoadSignal, WorkerSummary};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// Iterations trained when the config names no stopping point at all (neither
/// `max_iterations` nor `target_accuracy`).
pub const DEFAULT_MAX_ITERATIONS: u64 = 1000;

/// Everything one training run needs: what to train, how, and its local workers.
/// Field names are the names errors use ([`TrainError::Config`]).
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// `mnist:DIR`, `libsvm:TRAIN[,TEST]` or `tiny` ([`data::load`]).
    pub dataset: String,
    /// A model name of [`crate::model::MODELS`].
    pub model: String,
    /// MLP hidden units.
    pub hidden: usize,
    /// K-means clusters.
    pub clusters: usize,
    /// Global batch B (fixed; split among workers).
    pub global_batch: u64,
    /// Largest global batch the reported goodput-optimal batch may be (`None`: 16 × B,
    /// at most the training set).
    pub max_global_batch: Option<u64>,
    /// `pacer_control::worker` registry name.
    pub controller: String,
    /// `pacer_predict::speed` registry name.
    pub predictor: String,
    /// `auto` (the model's own), `sgd` or `adam`.
    pub optimizer: String,
    /// Learning rate (`None`: the optimiser's).
    pub lr: Option<f32>,
    /// SGD momentum (with `optimizer` `sgd`).
    pub momentum: f32,
    pub target_accuracy: Option<f64>,
    /// Stop at the first evaluation that reaches `target_accuracy`.
    pub stop_at_target: bool,
    /// Training-time limit (evaluation excluded).
    pub max_time_s: f64,
    /// Iteration limit; `None` with no `target_accuracy`: [`DEFAULT_MAX_ITERATIONS`].
    pub max_iterations: Option<u64>,
    pub eval_every: u64,
    pub seed: u64,
    pub worker_timeout_s: f64,
    pub rejoin_timeout_s: f64,
    pub verbose: bool,
    /// Resume from the checkpoint there, write one there when stopped by a signal.
    pub checkpoint_dir: Option<PathBuf>,
    /// The message-moving threads ask for real-time priority.
    pub realtime_io: bool,
    /// Workers compute on the first parameters while the rest arrive.
    pub pipeline: bool,
    /// Report to a scheduler service ([`ServiceEnv::from_env`]).
    pub service: Option<ServiceEnv>,
    /// Install the SIGINT and SIGTERM handlers ([`crate::interrupt`]): a signal stops
    /// the run with the report so far (and a checkpoint with `checkpoint_dir`).
    pub catch_signals: bool,
    /// Local workers (one compute thread and one socket thread each).
    pub workers: usize,
    /// Relative speed per initial worker (missing = 1).
    pub speeds: Vec<f64>,
    /// Common dilation of emulated time (≥ 1).
    pub time_scale: f64,
    /// Interference windows per worker (scenario file).
    pub interference: Option<PathBuf>,
    pub load_signal: LoadSignal,
    /// (worker slot, iteration): that worker dies on receiving that iteration's Step.
    pub kills: Vec<(usize, u64)>,
    /// (iteration, speed): a new worker starts after that iteration.
    pub joins: Vec<(u64, f64)>,
    /// Controller address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Source addresses for the workers, round-robin; empty: the OS chooses.
    pub worker_ips: Vec<IpAddr>,
    /// Workers computing at once; 0 = no limit.
    pub compute_slots: usize,
}

impl TrainConfig {
    /// The defaults of `pacer train` for `dataset`, without signal handlers, on a free
    /// port of 127.0.0.1.
    pub fn new(dataset: impl Into<String>) -> Self {
        TrainConfig {
            dataset: dataset.into(),
            model: "mlp".into(),
            hidden: 128,
            clusters: 10,
            global_batch: 512,
            max_global_batch: None,
            controller: "lbbsp".into(),
            predictor: "ewma".into(),
            optimizer: "auto".into(),
            lr: None,
            momentum: 0.9,
            target_accuracy: None,
            stop_at_target: true,
            max_time_s: 600.0,
            max_iterations: None,
            eval_every: 10,
            seed: 1,
            worker_timeout_s: 120.0,
            rejoin_timeout_s: controller::DEFAULT_REJOIN_TIMEOUT_S,
            verbose: false,
            checkpoint_dir: None,
            realtime_io: true,
            pipeline: true,
            service: None,
            catch_signals: false,
            workers: 4,
            speeds: Vec::new(),
            time_scale: 1.0,
            interference: None,
            load_signal: LoadSignal::Auto,
            kills: Vec::new(),
            joins: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            worker_ips: Vec::new(),
            compute_slots: 0,
        }
    }

    /// The iteration limit the run keeps: `max_iterations`, or
    /// [`DEFAULT_MAX_ITERATIONS`] when neither it nor a target accuracy is given.
    pub fn iteration_limit(&self) -> Option<u64> {
        self.max_iterations.or(if self.target_accuracy.is_none() {
            Some(DEFAULT_MAX_ITERATIONS)
        } else {
            None
        })
    }

    /// The local workers' launch, checked (the interference file read) before any data
    /// is loaded.
    pub fn launch(&self) -> Result<LocalLaunch, TrainError> {
        let mut launch = LocalLaunch::new(self.workers);
        launch.pipeline = self.pipeline;
        launch.realtime_io = self.realtime_io;
        launch.speeds = self.speeds.clone();
        launch.time_scale = self.time_scale;
        launch.interference = self
            .interference
            .as_deref()
            .map(InterferencePlan::load)
            .transpose()?;
        launch.load_signal = self.load_signal;
        launch.kills = self.kills.clone();
        launch.joins = self.joins.clone();
        launch.listen = self.listen;
        launch.worker_ips = self.worker_ips.clone();
        launch.compute_slots = self.compute_slots;
        launch
            .validate()
            .map_err(|e| match (e, &self.interference) {
                // Name the file too, not only the field.
                (RuntimeError::Config { field, message }, Some(f)) if field == "interference" => {
                    TrainError::Config {
                        field,
                        message: format!("{}: {message}", f.display()),
                    }
                }
                (e, _) => e.into(),
            })?;
        Ok(launch)
    }

    /// The controller of this run for `data` (the model sized to it), with the signal
    /// handlers installed when `catch_signals` is set. Also rank 0's of a multi-node run.
    pub fn controller_config(&self, data: &Data) -> Result<ControllerConfig, TrainError> {
        let width = if self.model == "kmeans" {
            self.clusters
        } else {
            self.hidden
        };
        let spec = ModelSpec::new(&self.model, data.train.dim, data.train.classes, width)?;
        let mut c = ControllerConfig::new(spec)?;
        c.realtime_io = self.realtime_io;
        c.optimizer = match self.optimizer.as_str() {
            "auto" => c.optimizer,
            "sgd" => OptimSpec::Sgd {
                lr: 0.1,
                momentum: self.momentum,
                weight_decay: 0.0,
            },
            "adam" => OptimSpec::Adam {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            o => {
                return Err(TrainError::config(
                    "optimizer",
                    format!("unknown `{o}`; expected auto, sgd or adam"),
                ))
            }
        };
        if let Some(lr) = self.lr {
            if !(lr.is_finite() && lr > 0.0) {
                return Err(TrainError::config(
                    "lr",
                    format!("must be a positive number, got {lr}"),
                ));
            }
            c.optimizer = c.optimizer.with_lr(lr);
        }
        c.global_batch = self.global_batch;
        c.max_global_batch = self.max_global_batch;
        c.controller = self.controller.clone();
        c.predictor = self.predictor.clone();
        c.target_accuracy = self.target_accuracy;
        c.stop_at_target = self.stop_at_target;
        c.max_time_s = self.max_time_s;
        c.max_iterations = self.iteration_limit();
        c.eval_every = self.eval_every;
        c.seed = self.seed;
        c.worker_timeout_s = self.worker_timeout_s;
        c.rejoin_timeout_s = self.rejoin_timeout_s;
        c.verbose = self.verbose;
        c.checkpoint_dir = self.checkpoint_dir.clone();
        c.service = self.service.clone();
        c.pipeline = self.pipeline;
        if self.catch_signals {
            catch_signals(&mut c)?;
        }
        Ok(c)
    }
}

/// SIGINT and SIGTERM stop the run with the report so far (see [`crate::interrupt`]).
fn catch_signals(cfg: &mut ControllerConfig) -> Result<(), TrainError> {
    crate::interrupt::install_sigint_handler()
        .map_err(|e| RuntimeError::io("installing the SIGINT handler", e))?;
    crate::interrupt::install_sigterm_handler()
        .map_err(|e| RuntimeError::io("installing the SIGTERM handler", e))?;
    cfg.interrupt = Some(&crate::interrupt::SIGINT);
    Ok(())
}

/// Which signal stopped a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT: stopped by the user.
    Interrupt,
    /// SIGTERM: preempted (checkpointed with `checkpoint_dir`).
    Terminate,
}

/// What a run gives back.
#[derive(Debug)]
pub struct TrainOutcome {
    pub report: TrainReport,
    /// What each local worker said when it stopped (a killed worker's entry says so).
    pub workers: Vec<Result<WorkerSummary, RuntimeError>>,
    /// The signal that stopped the run early, if one did (`report.interrupted`).
    pub stopped_by: Option<StopSignal>,
}

/// Why a run could not start or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// A config value that cannot be used: `field` is the [`TrainConfig`] field (or,
    /// for `model`-sized values, [`crate::ControllerConfig`]'s); the message names other
    /// fields in backticks.
    #[error("{field}: {message}")]
    Config { field: String, message: String },
    /// Anything else: the data, the network, the checkpoint, the workers.
    #[error(transparent)]
    Runtime(RuntimeError),
}

impl TrainError {
    fn config(field: &str, message: impl Into<String>) -> Self {
        TrainError::Config {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<RuntimeError> for TrainError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Config { field, message } => TrainError::Config { field, message },
            e => TrainError::Runtime(e),
        }
    }
}

/// One training run: checks the launch, loads the data, builds the controller, checks a
/// checkpoint to resume against it, then trains with the local workers; `progress` is
/// called at every iteration boundary.
pub fn run(config: TrainConfig, progress: Option<ProgressFn>) -> Result<TrainOutcome, TrainError> {
    // The launch is checked before the data is loaded or anything is started.
    let launch = config.launch()?;
    let data = Arc::new(data::load(&config.dataset)?);
    let cfg = config.controller_config(&data)?;
    // A checkpoint of another run is an error before any worker starts.
    controller::resume_from(&cfg, &data)?;
    let (report, workers) = train_local(data, cfg, launch, progress)?;
    let stopped_by = report.interrupted.then(|| {
        if crate::interrupt::sigterm_received() {
            StopSignal::Terminate
        } else {
            StopSignal::Interrupt
        }
    });
    Ok(TrainOutcome {
        report,
        workers,
        stopped_by,
    })
}
