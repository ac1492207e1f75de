//! # pacer-serve
//!
//! `pacer serve`: a long-running multi-job scheduler. Jobs are submitted over an
//! authenticated HTTP API ([`api`]), kept durably in redb ([`store`]), run by an
//! [`executor::Executor`] (here the local one: child processes in their own process
//! groups) and re-planned every round by the same `pacer_policy::Policy` the
//! simulator calls, on a `ClusterView` built from what the jobs report ([`job`]).
//! A restarted service re-adopts the runs still alive ([`core::Core::recover`]).
//! docs/serve.md is the user's guide; [`client`] is what the CLI talks through.

pub mod api;
pub mod args;
pub mod auth;
pub mod bench;
pub mod budget;
pub mod client;
pub mod core;
pub mod deadline;
pub mod error;
pub mod executor;
pub mod executor_slurm;
pub mod executors;
pub mod goal;
pub mod job;
pub mod launcher;
pub mod listen;
pub mod live;
pub mod metrics;
pub mod spec;
pub mod store;
pub mod trust;

/// A fresh folder `<prefix><random>` under the system's temporary folder for a unit
/// test, removed when the returned guard drops (also when the test panics).
#[cfg(test)]
pub(crate) fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("a scratch folder")
}

use std::path::PathBuf;
use std::sync::Arc;

/// How to start a service.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: String,
    pub state_dir: PathBuf,
    pub cluster: pacer_model::ClusterSpec,
    pub policy: String,
    pub round_s: f64,
    pub grace_s: f64,
    /// Shortest time a run keeps its devices before a policy may stop or resize it.
    pub min_run_s: f64,
    /// Defaults to `<state_dir>/token`.
    pub token_file: Option<PathBuf>,
    pub pacer_bin: String,
    /// A job's log is rotated past this many MiB (`--log-max-mib`).
    pub log_max_mib: u64,
    /// USD per device-hour of each device type of `cluster` (`--price`); `None`: no
    /// prices, so no dollar budgets.
    pub prices: Option<Vec<f64>>,
    /// `--executor slurm`: the executor that read `cluster` from Slurm; `None` runs jobs
    /// as local processes.
    pub slurm: Option<Arc<executor_slurm::SlurmExecutor>>,
    /// The profiles deadline jobs may name (`app`); `None`: none.
    pub profiles: Option<Arc<goal::ProfileSource>>,
}

/// Runs the service until SIGINT or SIGTERM. Jobs keep running when it stops; the
/// next start on the same state directory re-adopts them. `on_ready` gets the bound
/// address once the API accepts requests.
pub async fn serve(
    cfg: ServeConfig,
    on_ready: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<()> {
    use anyhow::Context;
    anyhow::ensure!(
        cfg.round_s.is_finite() && (0.05..=86_400.0).contains(&cfg.round_s),
        "--round-s: {} is out of range 0.05..=86400",
        cfg.round_s
    );
    anyhow::ensure!(
        cfg.grace_s.is_finite() && (0.0..=3600.0).contains(&cfg.grace_s),
        "--grace-s: {} is out of range 0..=3600",
        cfg.grace_s
    );
    if let Err(e) = pacer_policy::parse(&cfg.policy) {
        anyhow::bail!("--policy: {e}");
    }
    spec::check_cluster_size(&cfg.cluster, "--cluster")?;
    anyhow::ensure!(
        (1..=1 << 20).contains(&cfg.log_max_mib),
        "--log-max-mib: {} is out of range 1..=1048576",
        cfg.log_max_mib
    );
    anyhow::ensure!(
        cfg.min_run_s.is_finite() && (0.0..=86_400.0).contains(&cfg.min_run_s),
        "--min-run-s: {} is out of range 0..=86400",
        cfg.min_run_s
    );
    trust::state_dir(&cfg.state_dir).map_err(|e| anyhow::anyhow!(e))?;
    let _lock = lock_state_dir(&cfg.state_dir)?;
    let token_path = cfg
        .token_file
        .clone()
        .unwrap_or_else(|| cfg.state_dir.join("token"));
    let token = auth::load_or_create(&token_path)?;
    listen::raise_nofile_limit();
    let listener = tokio::net::TcpListener::bind(&cfg.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind", cfg.listen))?;
    let addr = listener.local_addr()?;
    let settings = core::Settings {
        state_dir: cfg.state_dir.clone(),
        cluster: cfg.cluster.clone(),
        policy: cfg.policy.clone(),
        round_s: cfg.round_s,
        grace_s: cfg.grace_s,
        min_run_s: cfg.min_run_s,
        pacer_bin: cfg.pacer_bin.clone(),
        server_url: format!("http://{addr}"),
        log_max_bytes: cfg.log_max_mib << 20,
        prices: cfg.prices.clone(),
    };
    let exec: Arc<dyn executor::Executor> = match &cfg.slurm {
        Some(s) => s.clone(),
        None => Arc::new(executor::LocalExecutor::new()),
    };
    let mut core = core::Core::open(settings)?;
    core.recover(exec.as_ref()).await?;
    core.goals = goal::GoalModels::new(cfg.profiles.clone());
    if core.deadline_cfg.is_some() {
        // The embedded profiles fitted in the background, so that a deadline job
        // naming one is answered without fitting (docs/serve.md).
        let goals = core.goals.clone();
        tokio::task::spawn_blocking(move || goals.prewarm());
    }
    let flush_needed = core.flush_needed.clone();
    let core = Arc::new(tokio::sync::Mutex::new(core));
    let flusher = tokio::spawn(flush_loop(core.clone(), flush_needed));
    let state = api::AppState {
        core: core.clone(),
        exec: exec.clone(),
        session: Arc::new(auth::session_value(&token)),
        csrf: Arc::new(auth::csrf_value(&token)),
        token: Arc::new(token),
    };
    let rounds = tokio::spawn(round_loop(core, exec, cfg.round_s));
    on_ready(addr);
    let app = api::router(state);
    listen::serve(listener, app, listen::Limits::default(), shutdown()).await;
    rounds.abort();
    flusher.abort();
    Ok(())
}

async fn round_loop(
    core: Arc<tokio::sync::Mutex<core::Core>>,
    exec: Arc<dyn executor::Executor>,
    round_s: f64,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs_f64(round_s));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = one_round(&core, exec.as_ref()).await {
            eprintln!("pacer serve: round failed: {e}");
        }
    }
}

/// A round with the service lock released while the policy decides.
async fn one_round(
    core: &tokio::sync::Mutex<core::Core>,
    exec: &dyn executor::Executor,
) -> Result<(), error::ServeError> {
    let input = core.lock().await.begin_round(exec).await?;
    let decided = tokio::task::spawn_blocking(move || input.decide())
        .await
        .map_err(|e| error::ServeError::Exec(format!("the policy failed: {e}")))?;
    core.lock().await.finish_round(exec, decided).await
}

/// Group commit: whatever was staged while the previous commit ran is committed at
/// once (one fsync), then its requests are answered.
async fn flush_loop(
    core: Arc<tokio::sync::Mutex<core::Core>>,
    flush_needed: Arc<tokio::sync::Notify>,
) {
    loop {
        flush_needed.notified().await;
        let flush = core.lock().await.take_flush().await;
        if let Some(f) = flush {
            // The fsync runs without the service lock: requests keep being staged.
            if tokio::task::spawn_blocking(move || f.run()).await.is_err() {
                eprintln!("pacer serve: the group commit failed; stopping");
                std::process::exit(70);
            }
        }
    }
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// An exclusive lock on `<dir>/lock` for this process's life, so two services never
/// share a state directory (and never run the same job twice).
fn lock_state_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let path = dir.join("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("--state: cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a file descriptor this function owns.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    anyhow::ensure!(
        rc == 0,
        "--state {}: another pacer serve is using this state directory",
        dir.display()
    );
    Ok(f)
}
