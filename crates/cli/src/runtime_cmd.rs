//! `pacer controller`, `pacer worker`, `pacer train`: the real runtime (issue 4).
//!
//! - `controller --listen ADDR --dataset SPEC ...`: serve one training job; workers on
//!   any host connect to it.
//! - `worker --connect ADDR`: one worker (one compute thread); it loads the dataset the
//!   controller names, or `--dataset` when the same data lives at another path here.
//! - `train ...`: a controller and `--workers N` local workers in one process, over
//!   real TCP on loopback, with a progress bar; `--json` prints the report.

use crate::runtime_flags::{runtime_error, said, train_error, with_flags};
use crate::train_report::{print_report, REPORT_FIELDS};
use anyhow::{anyhow, bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pacer_runtime::controller::{self, ControllerConfig, Progress, ProgressFn, TrainReport};
use pacer_runtime::data;
use pacer_runtime::emulation::{Emulation, InterferencePlan};
use pacer_runtime::service::ServiceEnv;
use pacer_runtime::train::{TrainConfig, TrainError};
use pacer_runtime::worker::{self, DataSource, Fault, LoadSignal, WorkerConfig};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What to train and how: shared by `controller` and `train`.
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// `mnist:DIR` (IDX files, .gz or not), `libsvm:TRAIN[,TEST]`, or `tiny` (shipped).
    #[arg(long)]
    pub dataset: String,
    /// mlp | logreg | svm | kmeans
    #[arg(long, default_value = "mlp")]
    pub model: String,
    /// MLP hidden units.
    #[arg(long, default_value_t = 128)]
    pub hidden: usize,
    /// K-means clusters.
    #[arg(long, default_value_t = 10)]
    pub clusters: usize,
    /// Global batch B (fixed; split among workers).
    #[arg(long, default_value_t = 512)]
    pub global_batch: u64,
    /// Largest global batch the reported goodput-optimal batch may be (default: 16 × B,
    /// at most the training set). Reported only; training keeps B.
    #[arg(long)]
    pub max_global_batch: Option<u64>,
    /// uniform | lbbsp | lbbsp-cpu | lbbsp-gpu | pid
    #[arg(long, default_value = "lbbsp")]
    pub controller: String,
    /// last | ewma | ets | narx
    #[arg(long, default_value = "ewma")]
    pub predictor: String,
    /// auto (model default: Adam for mlp, SGD+momentum otherwise) | sgd | adam
    #[arg(long, default_value = "auto")]
    pub optimizer: String,
    /// Learning rate (default: the model's).
    #[arg(long)]
    pub lr: Option<f32>,
    /// SGD momentum (with --optimizer sgd).
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f32,
    /// Stop when test accuracy reaches this fraction (e.g. 0.97).
    #[arg(long)]
    pub target_accuracy: Option<f64>,
    /// Keep training after the target is reached (until --max-time-s / --max-iterations).
    #[arg(long)]
    pub no_stop_at_target: bool,
    /// Training-time limit (evaluation excluded).
    #[arg(long, default_value_t = 600.0)]
    pub max_time_s: f64,
    /// Iteration limit (default: 1000 when neither this nor --target-accuracy is given).
    #[arg(long)]
    pub max_iterations: Option<u64>,
    /// Evaluate on the test set every N iterations (not counted as training time).
    #[arg(long, default_value_t = 10)]
    pub eval_every: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A task unanswered this long marks its worker dead (and a Gradient frame may
    /// stall this long).
    #[arg(long, default_value_t = 120.0)]
    pub worker_timeout_s: f64,
    /// Once every worker is gone, wait this long for one to join before failing
    /// (the controller says so on stderr at once).
    #[arg(long, default_value_t = controller::DEFAULT_REJOIN_TIMEOUT_S)]
    pub rejoin_timeout_s: f64,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Log refusals, membership changes and every 50th iteration to stderr.
    #[arg(long)]
    pub verbose: bool,
    /// No progress bar, and no progress lines.
    #[arg(long)]
    pub no_progress: bool,
    /// Seconds between progress lines (step, accuracy, samples/s), printed instead of the
    /// bar when stdout is not a terminal or under `pacer serve` (PACER_JOB_ID set), so a
    /// log (`pacer logs --follow`) shows the run as it goes.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub progress_every_s: f64,
    /// Resume from the checkpoint in DIR if there is one, and write one there when
    /// stopped by SIGTERM or SIGINT (default: $PACER_CHECKPOINT_DIR when set).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Keep every thread at the normal scheduling policy. By default the threads
    /// that move messages ask for real-time priority (SCHED_FIFO 1, when permitted)
    /// so that their wake-ups do not queue behind other CPU-bound work; compute
    /// threads always stay normal.
    #[arg(long)]
    pub normal_priority: bool,
}

/// `pacer controller`.
#[derive(Debug, Args)]
#[command(after_long_help = REPORT_FIELDS)]
pub struct ControllerArgs {
    /// Address to listen on, e.g. 0.0.0.0:7070.
    #[arg(long)]
    pub listen: String,
    /// Workers to wait for before the first iteration.
    #[arg(long, default_value_t = 1)]
    pub min_workers: usize,
    /// How long to wait for the first --min-workers workers.
    #[arg(long, default_value_t = 600.0)]
    pub join_timeout_s: f64,
    /// A connection must send its Hello within this many seconds.
    #[arg(long, default_value_t = controller::DEFAULT_HELLO_TIMEOUT_S)]
    pub hello_timeout_s: f64,
    /// Connections in their handshake at once, at most: before their Hello (beyond
    /// it the oldest is shed, told to try again), and again after it (beyond it a
    /// Hello is refused, told to try again).
    #[arg(long, default_value_t = controller::DEFAULT_MAX_PENDING)]
    pub max_pending: usize,
    /// Connections before their Hello from one address, at most; beyond it the
    /// oldest of that address is shed.
    #[arg(long, default_value_t = controller::DEFAULT_MAX_PRE_HELLO_PER_ADDR)]
    pub max_pre_hello_per_addr: usize,
    #[command(flatten)]
    pub job: JobArgs,
}

/// `pacer worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Controller address, e.g. 10.0.0.1:7070.
    #[arg(long)]
    pub connect: String,
    /// Local address to connect from (e.g. a loopback alias 127.0.0.2).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// Dataset here, if not at the path the controller names (must be the same data).
    #[arg(long)]
    pub dataset: Option<String>,
    #[arg(long)]
    pub name: Option<String>,
    /// Emulated relative speed: a step takes time-scale · cpu time / speed.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Common dilation of emulated time (≥ 1) for machines with fewer cores than workers.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Interference windows (scenario format, scenarios/worker/*.json).
    #[arg(long)]
    pub interference: Option<PathBuf>,
    /// Which worker of the interference file this is (default: the id the controller assigns).
    #[arg(long)]
    pub interference_slot: Option<usize>,
    /// auto | emulated | proc | combined
    #[arg(long, default_value = "auto")]
    pub load_signal: String,
    /// Die (exit 137, as if killed) on receiving the Step of this iteration.
    #[arg(long)]
    pub die_at: Option<u64>,
    /// Keep the socket thread at the normal scheduling policy (see `pacer train
    /// --normal-priority`).
    #[arg(long)]
    pub normal_priority: bool,
    /// Connecting and the controller's Welcome must come within this many seconds.
    #[arg(long, default_value_t = worker::DEFAULT_WELCOME_TIMEOUT_S)]
    pub welcome_timeout_s: f64,
    /// Give up when the controller sends nothing (no Step, no Shutdown) for this long.
    #[arg(long, default_value_t = worker::DEFAULT_IDLE_TIMEOUT_S)]
    pub idle_timeout_s: f64,
    /// Give up when a frame from the controller, or a Gradient to it, makes no
    /// progress for this long.
    #[arg(long, default_value_t = worker::DEFAULT_STALL_TIMEOUT_S)]
    pub stall_timeout_s: f64,
    /// Keep trying to join for this many seconds when the controller is not up yet,
    /// hangs up, or turns the worker away for now (exponential backoff with jitter,
    /// each try said on stderr); 0: one try.
    #[arg(long, default_value_t = worker::DEFAULT_RETRY_FOR_S)]
    pub retry_for_s: f64,
    /// The longest wait between two tries to join.
    #[arg(long, default_value_t = worker::DEFAULT_RETRY_MAX_DELAY_S)]
    pub retry_max_delay_s: f64,
}

/// `pacer train`.
#[derive(Debug, Args)]
#[command(after_long_help = REPORT_FIELDS)]
pub struct TrainArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Local workers (one compute thread each, plus one for its socket); default:
    /// $PACER_REPLICAS when set (a scheduler service's allocation), else 4.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Relative speeds, e.g. 1,1,0.5,0.25 (missing = 1).
    #[arg(long, value_delimiter = ',')]
    pub speeds: Vec<f64>,
    /// Common dilation of emulated time (≥ 1): use ≥ Σ speeds / free cores so the
    /// workers' real compute fits the machine (see pacer_runtime::emulation).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Interference windows per worker (scenario format).
    #[arg(long)]
    pub interference: Option<PathBuf>,
    /// auto | emulated | proc | combined
    #[arg(long, default_value = "auto")]
    pub load_signal: String,
    /// Kill worker SLOT when it receives iteration ITER's step: SLOT@ITER (repeatable).
    #[arg(long)]
    pub kill: Vec<String>,
    /// Start a new worker after iteration ITER: ITER or ITER:SPEED (repeatable).
    #[arg(long)]
    pub join: Vec<String>,
    /// Controller address (port 0 = any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Source addresses for the workers, round-robin (e.g. 127.0.0.2,127.0.0.3).
    #[arg(long, value_delimiter = ',')]
    pub worker_ips: Vec<IpAddr>,
    /// Workers computing at once (0 = no limit, the default). Waiting for a slot is
    /// absorbed by the speed padding (see pacer_runtime::emulation).
    #[arg(long)]
    pub compute_slots: Option<usize>,
    /// Send each Step whole, worker after worker, and compute only once all the
    /// parameters are there (the behaviour before pipelining; for comparisons).
    #[arg(long)]
    pub no_pipeline: bool,
    /// Run as one rank of a multi-node Slurm job (`srun`, one task per node): with
    /// SLURM_NTASKS > 1, rank 0 (SLURM_PROCID) is the controller on
    /// MASTER_ADDR:MASTER_PORT and every rank runs --workers workers (default 1) that
    /// join it; without Slurm tasks, plain `pacer train`.
    #[arg(long)]
    pub slurm: bool,
}

fn resolve(addr: &str, flag: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("{flag} `{addr}`: expected HOST:PORT"))?
        .next()
        .ok_or_else(|| anyhow!("{flag} `{addr}`: resolves to no address"))
}

/// The run `job` describes, as the runtime's config (no local-worker settings yet);
/// `PACER_CHECKPOINT_DIR` and the scheduler service's variables fill what the flags
/// leave open.
fn train_config(job: &JobArgs) -> anyhow::Result<TrainConfig> {
    if !(job.progress_every_s.is_finite() && (0.0..=86_400.0).contains(&job.progress_every_s)) {
        bail!(
            "--progress-every-s: must be 0 to 86400 seconds, got {}",
            job.progress_every_s
        );
    }
    let mut c = TrainConfig::new(job.dataset.clone());
    c.model = job.model.clone();
    c.hidden = job.hidden;
    c.clusters = job.clusters;
    c.global_batch = job.global_batch;
    c.max_global_batch = job.max_global_batch;
    c.controller = job.controller.clone();
    c.predictor = job.predictor.clone();
    c.optimizer = job.optimizer.clone();
    c.lr = job.lr;
    c.momentum = job.momentum;
    c.target_accuracy = job.target_accuracy;
    c.stop_at_target = !job.no_stop_at_target;
    c.max_time_s = job.max_time_s;
    c.max_iterations = job.max_iterations;
    c.eval_every = job.eval_every;
    c.seed = job.seed;
    c.worker_timeout_s = job.worker_timeout_s;
    c.rejoin_timeout_s = job.rejoin_timeout_s;
    c.verbose = job.verbose;
    c.realtime_io = !job.normal_priority;
    c.checkpoint_dir = job.checkpoint_dir.clone().or_else(|| {
        std::env::var_os("PACER_CHECKPOINT_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    c.service = ServiceEnv::from_env().map_err(runtime_error)?;
    // SIGINT and SIGTERM stop the run with the report so far, and a checkpoint with
    // `--checkpoint-dir` (see `pacer_runtime::interrupt`).
    c.catch_signals = true;
    Ok(c)
}

/// The iteration limit of `job` (the runtime's default when it names none).
fn iteration_limit(job: &JobArgs) -> Option<u64> {
    TrainConfig {
        max_iterations: job.max_iterations,
        target_accuracy: job.target_accuracy,
        ..TrainConfig::new("")
    }
    .iteration_limit()
}

fn progress_bar(job: &JobArgs) -> Option<ProgressFn> {
    if job.no_progress {
        return None;
    }
    if let Some(to) = progress_lines_to(job) {
        return Some(progress_lines(job, to));
    }
    let limit = iteration_limit(job);
    let bar = match limit {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos} it {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let target = job.target_accuracy;
    Some(Box::new(move |p: &Progress| {
        bar.set_position(p.iteration);
        let acc = p
            .accuracy
            .map_or("-".to_string(), |a| format!("{:.2}%", a * 100.0));
        let goal = target.map_or(String::new(), |t| format!("/{:.2}%", t * 100.0));
        let b: Vec<String> = p.batches.iter().map(|(_, b)| b.to_string()).collect();
        let gns = p.noise_scale.map_or("-".to_string(), |v| format!("{v:.0}"));
        bar.set_message(format!(
            "epoch {:.2}  acc {acc}{goal}  train {:.1}s  B_noise {gns}  batches [{}]",
            p.epoch,
            p.train_time_s,
            b.join(",")
        ));
    }))
}

/// Where progress lines go instead of the bar, if anywhere: under the service (its log
/// has stdout and stderr) on stdout, or on stderr when stdout carries `--json`; elsewhere
/// on stdout when it is not a terminal (and not `--json`, which must stay one document).
fn progress_lines_to(job: &JobArgs) -> Option<LineTo> {
    use std::io::IsTerminal;
    let under_service = std::env::var_os("PACER_JOB_ID").is_some();
    match (under_service, job.json) {
        (true, false) => Some(LineTo::Stdout),
        (true, true) => Some(LineTo::Stderr),
        (false, false) if !std::io::stdout().is_terminal() => Some(LineTo::Stdout),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineTo {
    Stdout,
    Stderr,
}

/// A progress line after the first iteration and then at most every
/// `--progress-every-s` seconds: step (of the limit), epoch, test accuracy, samples/s
/// over the training time since the previous line, training time.
fn progress_lines(job: &JobArgs, to: LineTo) -> ProgressFn {
    // Checked in `train_config`; clamped again so that no value can panic here.
    let secs = if job.progress_every_s.is_finite() {
        job.progress_every_s.clamp(0.0, 86_400.0)
    } else {
        5.0
    };
    let every = std::time::Duration::from_secs_f64(secs);
    let limit = iteration_limit(job);
    let mut last: Option<std::time::Instant> = None;
    let (mut samples, mut since_s) = (0u64, 0.0f64);
    Box::new(move |p: &Progress| {
        samples += p.batches.iter().map(|b| b.1).sum::<u64>();
        if last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        last = Some(std::time::Instant::now());
        let dt = p.train_time_s - since_s;
        let rate = if dt > 0.0 { samples as f64 / dt } else { 0.0 };
        samples = 0;
        since_s = p.train_time_s;
        let line = format!(
            "progress: step {}{}  epoch {:.2}  accuracy {}  {:.0} samples/s  train {:.1} s",
            p.iteration,
            limit.map_or(String::new(), |n| format!("/{n}")),
            p.epoch,
            p.accuracy
                .map_or("-".to_string(), |a| format!("{:.2}%", a * 100.0)),
            rate,
            p.train_time_s
        );
        use std::io::Write;
        // A closed stdout must not stop training: the line is dropped.
        let _ = match to {
            LineTo::Stdout => writeln!(std::io::stdout().lock(), "{line}"),
            LineTo::Stderr => writeln!(std::io::stderr().lock(), "{line}"),
        };
    })
}

/// Exit status of a run stopped by SIGINT (128 + 2, as a shell reports it).
const EXIT_INTERRUPTED: i32 = 130;
/// Exit status of a run stopped by SIGTERM (128 + 15): preempted, checkpointed.
const EXIT_TERMINATED: i32 = 143;

pub(crate) fn signal_name() -> &'static str {
    if pacer_runtime::interrupt::sigterm_received() {
        "SIGTERM"
    } else {
        "SIGINT"
    }
}

/// After the report of an interrupted run: exit 130 (SIGINT) or 143 (SIGTERM), as if
/// killed by the signal.
pub(crate) fn exit_if_interrupted(r: &TrainReport) {
    if r.interrupted {
        eprintln!(
            "pacer: interrupted ({}) after {} iterations",
            signal_name(),
            r.iterations
        );
        std::process::exit(if pacer_runtime::interrupt::sigterm_received() {
            EXIT_TERMINATED
        } else {
            EXIT_INTERRUPTED
        });
    }
}

fn load_signal(s: &str) -> anyhow::Result<LoadSignal> {
    s.parse::<LoadSignal>().map_err(runtime_error)
}

/// `pacer controller`.
pub fn run_controller(a: ControllerArgs) -> anyhow::Result<()> {
    let addr = resolve(&a.listen, "--listen")?;
    let job = train_config(&a.job)?;
    let data = Arc::new(data::load(&a.job.dataset).map_err(runtime_error)?);
    // Signals are caught only once the run is known to be startable.
    let mut cfg = TrainConfig {
        catch_signals: false,
        ..job
    }
    .controller_config(&data)
    .map_err(train_error)?;
    cfg.min_workers = a.min_workers;
    cfg.join_timeout_s = a.join_timeout_s;
    cfg.hello_timeout_s = a.hello_timeout_s;
    cfg.max_pending = a.max_pending;
    cfg.max_pre_hello_per_addr = a.max_pre_hello_per_addr;
    controller::validate(&cfg, &data).map_err(runtime_error)?;
    // A checkpoint of another run is an error before anything listens.
    controller::resume_from(&cfg, &data).map_err(runtime_error)?;
    pacer_runtime::interrupt::install_sigint_handler().context("installing the SIGINT handler")?;
    pacer_runtime::interrupt::install_sigterm_handler()
        .context("installing the SIGTERM handler")?;
    cfg.interrupt = Some(&pacer_runtime::interrupt::SIGINT);
    // Bound here so that the address printed is the one workers must connect to:
    // with port 0 the OS picks the port.
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("--listen {addr}"))?;
    let bound = listener
        .local_addr()
        .with_context(|| format!("--listen {addr}: reading the bound address"))?;
    if a.job.json {
        // The first line of --json output, as soon as workers can connect (with
        // port 0 nothing else says which port the OS chose).
        let event = pacer_cli::json::Listening {
            listening: bound.to_string(),
        };
        putline!("{}", serde_json::to_string(&event)?);
    } else {
        eprintln!(
            "pacer controller: listening on {bound}, waiting for {} worker(s)",
            a.min_workers
        );
    }
    let report = controller::serve_blocking_on(listener, data, cfg, progress_bar(&a.job))
        .map_err(runtime_error)?;
    print_report(&report, a.job.json, Vec::new(), 1.0, None)?;
    exit_if_interrupted(&report);
    Ok(())
}

/// `pacer worker`.
pub fn run_worker(a: WorkerArgs) -> anyhow::Result<()> {
    let connect = resolve(&a.connect, "--connect")?;
    let mut cfg = WorkerConfig::new(
        connect,
        a.name.clone().unwrap_or_else(|| {
            format!(
                "{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into()),
                std::process::id()
            )
        }),
    );
    cfg.bind = a.bind.map(|ip| SocketAddr::new(ip, 0));
    cfg.realtime_io = !a.normal_priority;
    cfg.welcome_timeout_s = a.welcome_timeout_s;
    cfg.idle_timeout_s = a.idle_timeout_s;
    cfg.stall_timeout_s = a.stall_timeout_s;
    cfg.retry_for_s = a.retry_for_s;
    cfg.retry_max_delay_s = a.retry_max_delay_s;
    cfg.validate().map_err(runtime_error)?;
    let plan = a
        .interference
        .as_deref()
        .map(InterferencePlan::load)
        .transpose()
        .map_err(runtime_error)?;
    if let Some(slot) = a.interference_slot {
        // Without a file, or past its workers, the slot silently meant "no
        // interference".
        let Some(p) = &plan else {
            bail!("--interference-slot: needs --interference FILE");
        };
        if slot >= p.workers.len() {
            bail!(
                "--interference-slot {slot}: {} has {} worker(s), slots 0 to {}",
                a.interference.as_deref().unwrap_or(Path::new("")).display(),
                p.workers.len(),
                p.workers.len().saturating_sub(1)
            );
        }
    }
    if let Some(spec) = &a.dataset {
        // The data is loaded once the controller has named its dataset; a spec that
        // cannot parse is known now.
        data::DatasetSpec::parse(spec).map_err(runtime_error)?;
    }
    if !(a.speed.is_finite() && a.speed > 0.0) {
        bail!("--speed: must be a positive number, got {}", a.speed);
    }
    if !(a.time_scale.is_finite() && a.time_scale >= 1.0) {
        bail!("--time-scale: must be ≥ 1, got {}", a.time_scale);
    }
    pacer_runtime::emulation::check_dilation(
        a.speed,
        a.time_scale,
        plan.as_ref().map_or(1.0, InterferencePlan::max_slowdown),
    )
    .map_err(|m| anyhow!("--speed: {m}"))?;
    cfg.emulation = Emulation {
        speed: a.speed,
        time_scale: a.time_scale,
        windows: match (&plan, a.interference_slot) {
            (Some(p), Some(s)) => p.for_slot(s),
            _ => Vec::new(),
        },
        slots: None,
    };
    if a.interference_slot.is_none() {
        cfg.interference_by_id = plan;
    }
    cfg.load_signal = load_signal(&a.load_signal)?;
    cfg.fault = a.die_at.map(Fault::DieAt);
    cfg.exit_on_fault = true;
    let source = match a.dataset {
        Some(s) => DataSource::Spec(s),
        None => DataSource::FromJob,
    };
    let s = worker::run_blocking(cfg, source).map_err(runtime_error)?;
    eprintln!(
        "pacer worker {}: {} steps; controller said: {}",
        s.worker_id, s.steps, s.shutdown_reason
    );
    Ok(())
}

fn parse_kill(s: &str) -> anyhow::Result<(usize, u64)> {
    let (w, k) = s
        .split_once('@')
        .ok_or_else(|| anyhow!("--kill `{s}`: expected SLOT@ITERATION, e.g. 3@200"))?;
    Ok((
        w.parse()
            .with_context(|| format!("--kill `{s}`: slot `{w}` is not a number"))?,
        k.parse()
            .with_context(|| format!("--kill `{s}`: iteration `{k}` is not a number"))?,
    ))
}

fn parse_join(s: &str) -> anyhow::Result<(u64, f64)> {
    let (k, v) = s.split_once(':').unwrap_or((s, "1"));
    Ok((
        k.parse()
            .with_context(|| format!("--join `{s}`: iteration `{k}` is not a number"))?,
        v.parse()
            .with_context(|| format!("--join `{s}`: speed `{v}` is not a number"))?,
    ))
}

/// `pacer train`.
pub fn run_train(a: TrainArgs) -> anyhow::Result<()> {
    if a.slurm {
        if let Some(r) = crate::train_ranks::Ranks::from_vars(|k| std::env::var(k).ok())? {
            return crate::train_ranks::run(a, r);
        }
    }
    let workers = match a.workers {
        Some(n) => n,
        None => replicas_from_env(std::env::var("PACER_REPLICAS").ok().as_deref())?,
    };
    let mut cfg = train_config(&a.job)?;
    cfg.workers = workers;
    cfg.pipeline = !a.no_pipeline;
    cfg.speeds = a.speeds.clone();
    cfg.time_scale = a.time_scale;
    cfg.interference = a.interference.clone();
    cfg.load_signal = load_signal(&a.load_signal)?;
    cfg.kills = a
        .kill
        .iter()
        .map(|s| parse_kill(s))
        .collect::<anyhow::Result<_>>()?;
    cfg.joins = a
        .join
        .iter()
        .map(|s| parse_join(s))
        .collect::<anyhow::Result<_>>()?;
    cfg.listen = resolve(&a.listen, "--listen")?;
    cfg.worker_ips = a.worker_ips.clone();
    cfg.compute_slots = a.compute_slots.unwrap_or(0);
    let outcome = pacer_runtime::train::run(cfg, progress_bar(&a.job)).map_err(|e| match e {
        // Name the file the flag gave, not only the flag.
        TrainError::Config { field, message } if field == "interference" => {
            anyhow!("--interference {}", with_flags(&message))
        }
        e => train_error(e),
    })?;
    for (i, o) in outcome.workers.iter().enumerate() {
        if let Err(e) = o {
            eprintln!("worker {i}: {}", said(e));
        }
    }
    finish_train(&outcome.report, &a, workers)
}

/// The controller of `pacer train --slurm`'s rank 0, SIGINT/SIGTERM caught.
pub(crate) fn train_controller_config(
    a: &TrainArgs,
    data: &data::Data,
) -> anyhow::Result<ControllerConfig> {
    let mut cfg = train_config(&a.job)?;
    cfg.pipeline = !a.no_pipeline;
    cfg.controller_config(data).map_err(train_error)
}

pub(crate) fn progress_for(job: &JobArgs) -> Option<ProgressFn> {
    progress_bar(job)
}

/// Prints `pacer train`'s report and exits 130/143 when it was interrupted.
/// `workers`: how many the speeds list covers (missing = 1).
pub(crate) fn finish_train(
    report: &TrainReport,
    a: &TrainArgs,
    workers: usize,
) -> anyhow::Result<()> {
    let mut speeds = a.speeds.clone();
    speeds.resize(workers, 1.0);
    print_report(
        report,
        a.job.json,
        speeds,
        a.time_scale,
        a.interference.as_ref().map(|p| p.display().to_string()),
    )?;
    exit_if_interrupted(report);
    Ok(())
}

/// Local workers when `--workers` is not given: `PACER_REPLICAS` (the replicas a
/// scheduler service allocated), else [`DEFAULT_WORKERS`].
fn replicas_from_env(v: Option<&str>) -> anyhow::Result<usize> {
    match v {
        None => Ok(DEFAULT_WORKERS),
        Some(s) => match s.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => bail!("PACER_REPLICAS `{s}`: expected a number of workers ≥ 1"),
        },
    }
}

/// Local workers without `--workers` or `PACER_REPLICAS`.
const DEFAULT_WORKERS: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_replicas_sets_the_local_workers() {
        assert_eq!(replicas_from_env(None).unwrap(), DEFAULT_WORKERS);
        assert_eq!(replicas_from_env(Some("2")).unwrap(), 2);
        for bad in ["0", "-1", "two", ""] {
            let e = replicas_from_env(Some(bad)).unwrap_err().to_string();
            assert!(e.starts_with("PACER_REPLICAS"), "{bad}: {e}");
        }
    }
}
