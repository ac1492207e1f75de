//! `pacer train --slurm`: one `pacer train` command that runs as every rank of a
//! multi-node Slurm job (one task per node under `srun`, as `pacer serve --executor slurm`
//! launches a run that spans several nodes). Rank 0 (`SLURM_PROCID=0`) is the controller,
//! listening on `MASTER_ADDR:MASTER_PORT` (the first node's address and a port the service
//! chose), and also runs its node's workers; every other rank runs its node's workers,
//! which connect there. The controller waits for all `SLURM_NTASKS` × workers-per-rank
//! workers, checkpoints and exits 143 on SIGTERM exactly as `pacer train` does; the worker
//! ranks ignore SIGTERM (Slurm sends it to every rank) and end when the controller shuts
//! them down, so a preemption is one checkpoint, not a race between ranks. A worker rank
//! stopped before the controller answered exits 143 at once rather than wait for it.
//!
//! With no `SLURM_NTASKS` or a single task, `pacer train --slurm` is plain `pacer train`.

use crate::runtime_flags::{runtime_error, said};
use anyhow::{anyhow, bail, Context};
use pacer_runtime::controller;
use pacer_runtime::data;
use pacer_runtime::worker::{self, DataSource, WorkerConfig};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// This process's place in a multi-node Slurm run.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranks {
    pub rank: usize,
    pub ntasks: usize,
    /// Where rank 0's controller listens (`MASTER_ADDR:MASTER_PORT`).
    pub master: String,
    /// Slurm's name of this node (`SLURMD_NODENAME`), for worker names.
    pub node: String,
}

impl Ranks {
    /// The ranks from Slurm's variables; `None` for a one-task (or non-Slurm) run.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Ranks>> {
        let num = |k: &str| -> anyhow::Result<Option<usize>> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| anyhow!("--slurm: {k} `{v}`: expected a non-negative integer"))
                })
                .transpose()
        };
        let Some(ntasks) = num("SLURM_NTASKS")? else {
            return Ok(None);
        };
        if ntasks <= 1 {
            return Ok(None);
        }
        let rank = num("SLURM_PROCID")?.ok_or_else(|| {
            anyhow!("--slurm: SLURM_NTASKS={ntasks} but SLURM_PROCID is not set (run under srun)")
        })?;
        if rank >= ntasks {
            bail!("--slurm: SLURM_PROCID {rank} is not below SLURM_NTASKS {ntasks}");
        }
        let addr = get("MASTER_ADDR")
            .filter(|v| !v.is_empty())
            .ok_or_else(|| anyhow!("--slurm: MASTER_ADDR (rank 0's node address) is not set"))?;
        let port = num("MASTER_PORT")?
            .filter(|p| (1..=65535).contains(p))
            .ok_or_else(|| anyhow!("--slurm: MASTER_PORT is not set or not a port 1..65535"))?;
        Ok(Some(Ranks {
            rank,
            ntasks,
            master: format!("{addr}:{port}"),
            node: get("SLURMD_NODENAME").unwrap_or_else(|| "node".into()),
        }))
    }
}

/// How long a worker rank keeps trying to reach rank 0's controller (it may start later).
const CONNECT_WAIT: Duration = Duration::from_secs(60);

/// Runs this rank: the controller and its workers on rank 0, workers elsewhere.
pub fn run(a: crate::runtime_cmd::TrainArgs, r: Ranks) -> anyhow::Result<()> {
    let unsupported = [
        ("--speeds", !a.speeds.is_empty()),
        ("--kill", !a.kill.is_empty()),
        ("--join", !a.join.is_empty()),
        ("--interference", a.interference.is_some()),
        ("--worker-ips", !a.worker_ips.is_empty()),
        ("--compute-slots", a.compute_slots.is_some()),
    ];
    if let Some((flag, _)) = unsupported.iter().find(|(_, set)| *set) {
        bail!(
            "{flag}: not supported with --slurm across {} ranks (local workers only)",
            r.ntasks
        );
    }
    let per_rank = a.workers.unwrap_or(1);
    if per_rank == 0 {
        bail!("--workers: with --slurm, the workers of each rank; expected ≥ 1");
    }
    let addr: SocketAddr = r
        .master
        .to_socket_addrs()
        .with_context(|| format!("--slurm: MASTER_ADDR:MASTER_PORT `{}`", r.master))?
        .next()
        .ok_or_else(|| anyhow!("--slurm: `{}` resolves to no address", r.master))?;
    eprintln!(
        "pacer train: rank {} of {} on {}, {} worker(s), controller at {}",
        r.rank, r.ntasks, r.node, per_rank, r.master
    );
    if r.rank != 0 {
        // Slurm signals every rank; the controller (rank 0) checkpoints and shuts the
        // workers down, so a worker rank only notes the signal.
        pacer_runtime::interrupt::install_sigterm_handler()
            .context("installing the SIGTERM handler")?;
        if !wait_for_controller(addr, pacer_runtime::interrupt::sigterm_received)? {
            // Stopped before rank 0's controller answered (it got the SIGTERM too, or
            // died of it before its handler was in place): nothing to train or save here.
            // Waiting on (60 s) held the Slurm job until the service's SIGKILL.
            eprintln!(
                "pacer train: rank {} on {}: SIGTERM before the controller at {} answered; exiting",
                r.rank, r.node, r.master
            );
            std::process::exit(143);
        }
        return run_workers(&a, &r, addr, per_rank, None);
    }
    let data = Arc::new(data::load(&a.job.dataset).map_err(runtime_error)?);
    let mut cfg = crate::runtime_cmd::train_controller_config(&a, &data)?;
    cfg.min_workers = per_rank * r.ntasks;
    controller::validate(&cfg, &data).map_err(runtime_error)?;
    controller::resume_from(&cfg, &data).map_err(runtime_error)?;
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("--slurm: listening on {addr}"))?;
    let progress = crate::runtime_cmd::progress_for(&a.job);
    let ctrl =
        std::thread::spawn(move || controller::serve_blocking_on(listener, data, cfg, progress));
    run_workers(&a, &r, addr, per_rank, Some(ctrl))
}

/// Waits until rank 0's controller accepts connections (bounded by [`CONNECT_WAIT`]):
/// `true` once it does, `false` as soon as `stopped()` says the rank was told to stop.
fn wait_for_controller(addr: SocketAddr, stopped: impl Fn() -> bool) -> anyhow::Result<bool> {
    let t = Instant::now();
    loop {
        if stopped() {
            return Ok(false);
        }
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(_) => return Ok(true),
            Err(e) if t.elapsed() > CONNECT_WAIT => {
                bail!(
                    "--slurm: rank 0's controller at {addr} did not answer within {} s: {e}",
                    CONNECT_WAIT.as_secs()
                )
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

type CtrlThread =
    std::thread::JoinHandle<Result<controller::TrainReport, pacer_runtime::RuntimeError>>;

/// Runs `n` workers of this rank to the end; on rank 0 then reports the controller's
/// result as `pacer train` does.
fn run_workers(
    a: &crate::runtime_cmd::TrainArgs,
    r: &Ranks,
    addr: SocketAddr,
    n: usize,
    ctrl: Option<CtrlThread>,
) -> anyhow::Result<()> {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let mut cfg = WorkerConfig::new(addr, format!("rank{}-{}-{i}", r.rank, r.node));
            // Turned away for now (too many handshakes at once): try again.
            cfg.retry_for_s = worker::DEFAULT_RETRY_FOR_S;
            cfg.realtime_io = !a.job.normal_priority;
            std::thread::spawn(move || worker::run_blocking(cfg, DataSource::FromJob))
        })
        .collect();
    let mut steps = 0;
    let mut errors = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(s)) => steps += s.steps,
            Ok(Err(e)) => errors.push(format!("worker {i}: {}", said(&e))),
            Err(_) => errors.push(format!("worker {i}: panicked")),
        }
    }
    eprintln!(
        "pacer train: rank {} on {}: {} worker(s) trained {} steps{}",
        r.rank,
        r.node,
        n,
        steps,
        if errors.is_empty() {
            String::new()
        } else {
            format!("; {}", errors.join("; "))
        }
    );
    let Some(ctrl) = ctrl else {
        if errors.is_empty() {
            return Ok(());
        }
        bail!("rank {}: {}", r.rank, errors.join("; "));
    };
    let report = ctrl
        .join()
        .map_err(|_| anyhow!("the controller thread panicked"))?
        .map_err(runtime_error)?;
    crate::runtime_cmd::finish_train(&report, a, n * r.ntasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_worker_rank_stops_waiting_for_its_controller() {
        // Nothing listens on this port: without a stop the wait would last CONNECT_WAIT.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let t = Instant::now();
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let stop_after_3 = || asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 3;
        assert!(!wait_for_controller(addr, stop_after_3).unwrap());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        // A controller that answers: connected.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(wait_for_controller(l.local_addr().unwrap(), || false).unwrap());
    }

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn ranks_come_from_slurm_and_the_service() {
        let all = [
            ("SLURM_NTASKS", "2"),
            ("SLURM_PROCID", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "7070"),
            ("SLURMD_NODENAME", "n2"),
        ];
        assert_eq!(
            Ranks::from_vars(vars(&all)).unwrap(),
            Some(Ranks {
                rank: 1,
                ntasks: 2,
                master: "127.0.0.1:7070".into(),
                node: "n2".into()
            })
        );
        // One task, or no Slurm: plain `pacer train`.
        assert_eq!(Ranks::from_vars(vars(&[])).unwrap(), None);
        assert_eq!(
            Ranks::from_vars(vars(&[("SLURM_NTASKS", "1")])).unwrap(),
            None
        );
        let err = |pairs: &[(&str, &str)]| Ranks::from_vars(vars(pairs)).unwrap_err().to_string();
        assert!(
            err(&all[..1]).contains("SLURM_PROCID is not set"),
            "{}",
            err(&all[..1])
        );
        assert!(err(&all[..2]).contains("MASTER_ADDR"), "{}", err(&all[..2]));
        assert!(err(&all[..3]).contains("MASTER_PORT"), "{}", err(&all[..3]));
        let bad_rank = [("SLURM_NTASKS", "2"), ("SLURM_PROCID", "2")];
        assert!(err(&bad_rank).contains("not below SLURM_NTASKS 2"));
        let bad_port = [all[0], all[1], all[2], ("MASTER_PORT", "70000")];
        assert!(err(&bad_port).contains("not a port"));
        assert!(err(&[("SLURM_NTASKS", "two")]).contains("SLURM_NTASKS `two`"));
    }
}
