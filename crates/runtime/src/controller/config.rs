//! What the controller runs ([`ControllerConfig`]) and the checks made before
//! anything starts ([`validate`]).

use crate::data::Data;
use crate::error::RuntimeError;
use crate::model::{ModelKind, ModelSpec};
use crate::optim::OptimSpec;
use crate::service::ServiceEnv;
use pacer_control::worker::{make_controller, BatchBounds, BatchProblem};
use pacer_predict::speed::make_predictor;
use std::path::PathBuf;

/// What the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub model: ModelSpec,
    pub optimizer: OptimSpec,
    pub global_batch: u64,
    /// `pacer_control::worker` registry name.
    pub controller: String,
    /// `pacer_predict::speed` registry name.
    pub predictor: String,
    /// Fixed batches in admission order, bypassing the controller (tests, ablations).
    pub fixed_batches: Option<Vec<u64>>,
    pub target_accuracy: Option<f64>,
    /// Stop at the first evaluation that reaches the target.
    pub stop_at_target: bool,
    pub max_time_s: f64,
    pub max_iterations: Option<u64>,
    /// Evaluate every this many iterations (evaluation time is not training time).
    pub eval_every: u64,
    pub seed: u64,
    /// Wait for this many workers before the first iteration.
    pub min_workers: usize,
    /// A task unanswered for this long marks its worker dead.
    pub worker_timeout_s: f64,
    /// How long to wait for the first `min_workers` workers.
    pub join_timeout_s: f64,
    /// How long to wait for a worker to join once every worker is gone (the
    /// controller says so on stderr at once, then fails if none came).
    pub rejoin_timeout_s: f64,
    /// A connection must send its `Hello` within this many seconds; it is also how
    /// long any frame of a handshake may stall.
    pub hello_timeout_s: f64,
    /// Connections still in their handshake (accepted, not yet admitted) at most;
    /// more are refused at once. Each holds at most [`crate::protocol::MAX_HELLO_FRAME`]
    /// bytes before its `Hello` and [`crate::protocol::MAX_CONTROL_FRAME`] after it.
    pub max_pending: usize,
    /// Connections before their `Hello` from one peer address at most. Beyond this
    /// (or `max_pending` in total) a new connection is not refused: the oldest one
    /// before its `Hello` (of that address, or of all) is shed, so idle sockets —
    /// even from the workers' own address — never lock real workers out.
    pub max_pre_hello_per_addr: usize,
    /// Set (e.g. by a SIGINT handler, [`crate::interrupt`]) to stop: the run ends at
    /// once, abandoning the iteration in flight, and the report says `interrupted`.
    pub interrupt: Option<&'static std::sync::atomic::AtomicBool>,
    /// Keep the ledger of accumulated ranges (elasticity test).
    pub record_ledger: bool,
    /// Keep the aggregated gradients (and the gradient-noise estimator's inputs) of
    /// the first this many iterations.
    pub record_grads: usize,
    /// EMA decay per iteration of the gradient-noise-scale estimate
    /// ([`crate::gns::SMOOTHING`] by default: a window of ~100 iterations).
    pub gns_smoothing: f64,
    /// Print refusals and membership changes to stderr.
    pub verbose: bool,
    /// Write Steps in chunks, the connections taking turns (off: each whole, one
    /// connection after the other).
    pub pipeline: bool,
    /// The runtime's threads ask for real-time priority (`serve_blocking`,
    /// `train_local`; see `sysinfo::set_thread_realtime`); evaluation drops it.
    pub realtime_io: bool,
    /// Largest global batch the reported goodput-optimal batch may take; `None`:
    /// 16 × `global_batch`, at most the training set.
    pub max_global_batch: Option<u64>,
    /// Where the job's checkpoint lives ([`crate::checkpoint`]): resumed from when one
    /// is there at the start; written when the run stops on a signal (`interrupt`).
    pub checkpoint_dir: Option<PathBuf>,
    /// Report to a scheduler service about once per second ([`crate::service`]).
    pub service: Option<ServiceEnv>,
}

impl ControllerConfig {
    /// Defaults for `model` (its own optimiser).
    pub fn new(model: ModelSpec) -> Result<Self, RuntimeError> {
        let m = model.build();
        Ok(ControllerConfig {
            model,
            optimizer: m.default_optimizer(),
            global_batch: 512,
            controller: "lbbsp".into(),
            predictor: "ewma".into(),
            fixed_batches: None,
            target_accuracy: None,
            stop_at_target: true,
            max_time_s: 600.0,
            max_iterations: None,
            eval_every: 10,
            seed: 1,
            min_workers: 1,
            worker_timeout_s: 120.0,
            join_timeout_s: 120.0,
            rejoin_timeout_s: DEFAULT_REJOIN_TIMEOUT_S,
            hello_timeout_s: DEFAULT_HELLO_TIMEOUT_S,
            max_pending: DEFAULT_MAX_PENDING,
            max_pre_hello_per_addr: DEFAULT_MAX_PRE_HELLO_PER_ADDR,
            interrupt: None,
            record_ledger: false,
            record_grads: 0,
            gns_smoothing: crate::gns::SMOOTHING,
            verbose: false,
            pipeline: true,
            realtime_io: true,
            max_global_batch: None,
            checkpoint_dir: None,
            service: None,
        })
    }
}

/// Default of [`ControllerConfig::rejoin_timeout_s`].
pub const DEFAULT_REJOIN_TIMEOUT_S: f64 = 30.0;
/// Default of [`ControllerConfig::hello_timeout_s`].
pub const DEFAULT_HELLO_TIMEOUT_S: f64 = 10.0;
/// Default of [`ControllerConfig::max_pending`].
pub const DEFAULT_MAX_PENDING: usize = 256;
/// Default of [`ControllerConfig::max_pre_hello_per_addr`].
pub const DEFAULT_MAX_PRE_HELLO_PER_ADDR: usize = 64;

pub(crate) fn short_num(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e9 {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// Largest worker / join timeout accepted (s): about 30 years.
const MAX_TIMEOUT_S: f64 = 1e9;

/// Checks a configuration against the data before anything starts; [`serve`] does
/// too, callers use it to fail before printing or spawning anything.
pub fn validate(cfg: &ControllerConfig, data: &Data) -> Result<(), RuntimeError> {
    if cfg.global_batch == 0 {
        return Err(RuntimeError::config("global_batch", "must be > 0"));
    }
    if cfg.max_global_batch.is_some_and(|m| m < cfg.global_batch) {
        return Err(RuntimeError::config(
            "max_global_batch",
            "must be at least `global_batch`",
        ));
    }
    // An iteration computes B samples: B beyond the training set once made every
    // iteration practically endless (B = 2^64 - 1 looped in the batch split).
    if cfg.global_batch > data.train.n as u64 {
        return Err(RuntimeError::config(
            "global_batch",
            format!(
                "{} is more than the {} training samples of the dataset",
                cfg.global_batch, data.train.n
            ),
        ));
    }
    if make_controller(
        &cfg.controller,
        &BatchProblem::new(1, vec![BatchBounds { min: 0, max: 1 }], false)
            .expect("trivial problem"),
    )
    .is_none()
    {
        return Err(RuntimeError::config(
            "controller",
            format!(
                "unknown controller `{}`; known: {}",
                cfg.controller,
                pacer_control::worker::CONTROLLERS.join(", ")
            ),
        ));
    }
    if make_predictor(&cfg.predictor, 0, 0).is_none() {
        return Err(RuntimeError::config(
            "predictor",
            format!(
                "unknown predictor `{}`; known: {}",
                cfg.predictor,
                pacer_predict::speed::PREDICTORS.join(", ")
            ),
        ));
    }
    if cfg.model.dim as usize != data.train.dim {
        return Err(RuntimeError::config(
            "model",
            format!(
                "built for {} features, the dataset has {}",
                cfg.model.dim, data.train.dim
            ),
        ));
    }
    if cfg.eval_every == 0 {
        return Err(RuntimeError::config("eval_every", "must be ≥ 1"));
    }
    if cfg.model.kind == ModelKind::Kmeans && cfg.model.width as usize > data.train.n {
        return Err(RuntimeError::config(
            "clusters",
            format!(
                "{} clusters for {} training samples; at most one cluster per sample",
                cfg.model.width, data.train.n
            ),
        ));
    }
    if cfg.max_pending == 0 {
        return Err(RuntimeError::config(
            "max_pending",
            "must be ≥ 1 (connections allowed in their handshake at once)",
        ));
    }
    if cfg.max_pre_hello_per_addr == 0 {
        return Err(RuntimeError::config(
            "max_pre_hello_per_addr",
            "must be ≥ 1 (connections from one address before their Hello)",
        ));
    }
    if cfg.min_workers == 0 {
        return Err(RuntimeError::config("min_workers", "must be ≥ 1"));
    }
    // Timeouts become `Duration`s added to `Instant`s: NaN, negative or astronomically
    // large values would panic there, and 0 would declare every worker dead at once.
    for (flag, v) in [
        ("worker_timeout_s", cfg.worker_timeout_s),
        ("join_timeout_s", cfg.join_timeout_s),
        ("rejoin_timeout_s", cfg.rejoin_timeout_s),
        ("hello_timeout_s", cfg.hello_timeout_s),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_S) {
            return Err(RuntimeError::config(
                flag,
                format!(
                    "must be a number of seconds in (0, {MAX_TIMEOUT_S:e}], got {}",
                    short_num(v)
                ),
            ));
        }
    }
    if cfg.max_time_s.is_nan() || cfg.max_time_s <= 0.0 {
        return Err(RuntimeError::config(
            "max_time_s",
            format!("must be a number of seconds > 0, got {}", cfg.max_time_s),
        ));
    }
    if cfg.max_iterations == Some(0) {
        return Err(RuntimeError::config("max_iterations", "must be ≥ 1"));
    }
    if let OptimSpec::Sgd { momentum, .. } = cfg.optimizer {
        if !(momentum.is_finite() && (0.0..1.0).contains(&momentum)) {
            return Err(RuntimeError::config(
                "momentum",
                format!("must be in [0, 1), got {momentum}"),
            ));
        }
    }
    if let Some(t) = cfg.target_accuracy {
        if !(0.0..=1.0).contains(&t) {
            return Err(RuntimeError::config(
                "target_accuracy",
                format!("must be a fraction in [0, 1], got {t}"),
            ));
        }
    }
    Ok(())
}
