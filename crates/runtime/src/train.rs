//! `pacer train`: a controller and N local workers in one process, each worker on its
//! own OS threads (one computing, one for its socket), talking over
//! real TCP on loopback exactly as remote ones would. Scripted faults (a worker that
//! dies at iteration k) and joins (a new worker at iteration k) drive the elasticity
//! experiment.
//!
//! [`run`] is the one entry point of a training run for a front end: a plain
//! [`TrainConfig`] in, a [`TrainOutcome`] or a [`TrainError`] naming the config field
//! at fault out (`run.rs`); [`train_local`] is the lower-level call it makes.

mod run;

pub use run::{run, StopSignal, TrainConfig, TrainError, TrainOutcome, DEFAULT_MAX_ITERATIONS};

use crate::controller::{self, ControllerConfig, Progress, ProgressFn, TrainReport};
use crate::data::Data;
use crate::emulation::{ComputeSlots, Emulation, InterferencePlan};
use crate::error::RuntimeError;
use crate::worker::{self, DataSource, Fault, LoadSignal, WorkerConfig, WorkerSummary};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Most local workers (initial ones plus joiners) one process starts. Each is two OS
/// threads (compute and socket) with their stacks, a loopback connection (a
/// descriptor at each end) and its own copy of the model and gradient buffers:
/// `--workers 100000` ran out of memory for thread stacks thousands of threads in
/// and aborted. Emulating speeds honestly also needs the workers' CPU demand to fit
/// the machine's cores (`time_scale ≥ Σ speeds / cores`, see `emulation`): 1,024
/// workers already need a time scale in the hundreds on a many-core machine, so
/// more would only measure the scheduler. Larger runs belong on several machines
/// (`pacer controller` + `pacer worker`).
pub const MAX_LOCAL_WORKERS: usize = 1024;

/// How the local workers are set up.
#[derive(Debug, Clone)]
pub struct LocalLaunch {
    pub workers: usize,
    /// Relative speed of each initial worker (missing entries are 1).
    pub speeds: Vec<f64>,
    pub time_scale: f64,
    /// Interference windows by slot; must describe at least the initial workers
    /// (joiners past its end get none).
    pub interference: Option<InterferencePlan>,
    pub load_signal: LoadSignal,
    /// (worker slot, iteration): that worker dies on receiving that iteration's Step.
    pub kills: Vec<(usize, u64)>,
    /// (worker slot, iteration): that worker dies in that iteration after sending the
    /// first blocks of its gradient, before the rest (a partial gradient).
    pub partial_kills: Vec<(usize, u64)>,
    /// (worker slot, iteration): that worker answers that Step with garbage.
    pub garbage: Vec<(usize, u64)>,
    /// (worker slot, how, iteration): that worker sends poisoned gradients from that
    /// iteration on (a bad peer, [`crate::worker::Poison`]).
    pub poison: Vec<(usize, crate::worker::Poison, u64)>,
    /// (iteration, speed): a new worker is started once the controller has finished
    /// that iteration; it gets the next slot (and that slot's interference windows).
    pub joins: Vec<(u64, f64)>,
    /// Controller address; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Source addresses for the workers, used round-robin (multi-host on loopback
    /// aliases); empty = let the OS choose.
    pub worker_ips: Vec<IpAddr>,
    /// Workers computing at once (see `emulation::ComputeSlots`); 0 = no limit (the
    /// default: on the loaded 2-core machine two slots raised overruns from ~2 % to
    /// 15–36 % of steps while the network time barely moved).
    pub compute_slots: usize,
    /// Workers start computing on the first parameters while the rest arrive.
    pub pipeline: bool,
    /// Workers' socket threads ask for real-time priority (`sysinfo::set_thread_realtime`).
    pub realtime_io: bool,
}

impl LocalLaunch {
    pub fn new(workers: usize) -> Self {
        LocalLaunch {
            workers,
            speeds: Vec::new(),
            time_scale: 1.0,
            interference: None,
            load_signal: LoadSignal::Auto,
            kills: Vec::new(),
            partial_kills: Vec::new(),
            garbage: Vec::new(),
            poison: Vec::new(),
            joins: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            worker_ips: Vec::new(),
            compute_slots: 0,
            pipeline: true,
            realtime_io: true,
        }
    }

    fn worker_config(
        &self,
        slot: usize,
        speed: f64,
        connect: SocketAddr,
        slots: &Option<Arc<ComputeSlots>>,
    ) -> WorkerConfig {
        let mut w = WorkerConfig::new(connect, format!("local-{slot}"));
        w.emulation = Emulation {
            speed,
            time_scale: self.time_scale,
            windows: self
                .interference
                .as_ref()
                .map(|p| p.for_slot(slot))
                .unwrap_or_default(),
            slots: slots.clone(),
        };
        w.load_signal = self.load_signal;
        w.pipeline = self.pipeline;
        w.realtime_io = self.realtime_io;
        w.bind = (!self.worker_ips.is_empty())
            .then(|| SocketAddr::new(self.worker_ips[slot % self.worker_ips.len()], 0));
        w.fault = self
            .kills
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|&(_, k)| Fault::DieAt(k))
            .or_else(|| {
                self.partial_kills
                    .iter()
                    .find(|(s, _)| *s == slot)
                    .map(|&(_, k)| Fault::DieAfterPartsAt(k))
            })
            .or_else(|| {
                self.garbage
                    .iter()
                    .find(|(s, _)| *s == slot)
                    .map(|&(_, k)| Fault::GarbageAt(k))
            })
            .or_else(|| {
                self.poison
                    .iter()
                    .find(|(s, _, _)| *s == slot)
                    .map(|&(_, p, k)| Fault::PoisonFrom(p, k))
            });
        w
    }

    /// Checks the launch before anything starts ([`train_local`] does too; callers
    /// use it to fail before loading data).
    pub fn validate(&self) -> Result<(), RuntimeError> {
        if self.workers == 0 {
            return Err(RuntimeError::config("workers", "must be ≥ 1"));
        }
        if self.workers > MAX_LOCAL_WORKERS {
            return Err(RuntimeError::config(
                "workers",
                format!(
                    "{} local workers is more than the {MAX_LOCAL_WORKERS} one process runs \
                     (two threads and a connection each); run more with `pacer controller` \
                     and `pacer worker` on several machines",
                    self.workers
                ),
            ));
        }
        if self.workers + self.joins.len() > MAX_LOCAL_WORKERS {
            return Err(RuntimeError::config(
                "joins",
                format!(
                    "{} workers + {} joins is more than the {MAX_LOCAL_WORKERS} local workers \
                     one process runs",
                    self.workers,
                    self.joins.len()
                ),
            ));
        }
        if self.speeds.len() > self.workers {
            return Err(RuntimeError::config(
                "speeds",
                format!(
                    "{} speeds for {} workers; give at most one per worker",
                    self.speeds.len(),
                    self.workers
                ),
            ));
        }
        for (i, s) in self.speeds.iter().enumerate() {
            if !(s.is_finite() && *s > 0.0) {
                return Err(RuntimeError::config(
                    "speeds",
                    format!("entry {i} must be a positive number, got {s}"),
                ));
            }
        }
        for (at, s) in &self.joins {
            if !(s.is_finite() && *s > 0.0) {
                return Err(RuntimeError::config(
                    "joins",
                    format!("{at}:{s}: the speed must be a positive number"),
                ));
            }
        }
        let slowdown = self
            .interference
            .as_ref()
            .map_or(1.0, InterferencePlan::max_slowdown);
        let all_speeds = (0..self.workers)
            .map(|i| ("speeds", self.speeds.get(i).copied().unwrap_or(1.0)))
            .chain(self.joins.iter().map(|&(_, s)| ("joins", s)));
        for (flag, s) in all_speeds {
            crate::emulation::check_dilation(s, self.time_scale, slowdown)
                .map_err(|m| RuntimeError::config(flag, m))?;
        }
        // Slots past the file's end silently had no interference.
        if let Some(p) = &self.interference {
            if p.workers.len() < self.workers {
                return Err(RuntimeError::config(
                    "interference",
                    format!(
                        "describes {} worker(s), fewer than the {} of `workers`; give each \
                         worker an entry (`{{}}` for one without interference)",
                        p.workers.len(),
                        self.workers
                    ),
                ));
            }
        }
        // Slots are the initial workers, then the joiners in join order.
        let slots = self.workers + self.joins.len();
        for (flag, slot) in self
            .kills
            .iter()
            .map(|k| ("kills", k.0))
            .chain(self.partial_kills.iter().map(|k| ("partial kill", k.0)))
            .chain(self.garbage.iter().map(|k| ("garbage", k.0)))
            .chain(self.poison.iter().map(|k| ("poison", k.0)))
        {
            if slot >= slots {
                return Err(RuntimeError::config(
                    flag,
                    format!(
                        "slot {slot} does not exist: slots are 0 to {} ({} workers + {} joins)",
                        slots - 1,
                        self.workers,
                        self.joins.len()
                    ),
                ));
            }
        }
        // A source address this machine does not have would only show as a worker
        // that never joins (the controller waiting for the join timeout).
        for ip in &self.worker_ips {
            std::net::TcpListener::bind(SocketAddr::new(*ip, 0)).map_err(|e| {
                RuntimeError::Config {
                    field: "worker_ips".into(),
                    message: format!("cannot use {ip} as a source address here: {e}"),
                }
            })?;
        }
        if !(self.time_scale.is_finite() && self.time_scale >= 1.0) {
            return Err(RuntimeError::config(
                "time_scale",
                format!("must be ≥ 1, got {}", self.time_scale),
            ));
        }
        Ok(())
    }
}

type Handles = Arc<Mutex<Vec<JoinHandle<Result<WorkerSummary, RuntimeError>>>>>;

fn spawn_worker(cfg: WorkerConfig, data: Arc<Data>, handles: &Handles) -> Result<(), RuntimeError> {
    let h = std::thread::Builder::new()
        .name(cfg.name.clone())
        .spawn(move || worker::run_blocking(cfg, DataSource::Loaded(data)))
        .map_err(|e| RuntimeError::io("starting a worker thread", e))?;
    handles.lock().expect("handles").push(h);
    Ok(())
}

/// Train with a controller and local workers; returns the report and what each
/// worker said when it stopped (a killed worker's entry says so).
pub fn train_local(
    data: Arc<Data>,
    mut cfg: ControllerConfig,
    launch: LocalLaunch,
    mut progress: Option<ProgressFn>,
) -> Result<(TrainReport, Vec<Result<WorkerSummary, RuntimeError>>), RuntimeError> {
    launch.validate()?;
    cfg.min_workers = launch.workers;
    crate::controller::validate(&cfg, &data)?;
    // Two runtime threads: one for the training loop, one for the connections'
    // reads and decodes, which then overlap the wait for the slowest worker.
    let realtime = cfg.realtime_io;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(move || {
            if realtime {
                crate::sysinfo::set_thread_realtime(crate::sysinfo::RT_CONTROLLER);
            }
        })
        .worker_threads(
            std::env::var("PACER_RT_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(2),
        )
        .enable_all()
        .build()
        .map_err(|e| RuntimeError::io("starting the controller's runtime", e))?;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(launch.listen))
        .map_err(|e| RuntimeError::io(format!("`listen` {}", launch.listen), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| RuntimeError::io("reading the listen address", e))?;
    let handles: Handles = Arc::new(Mutex::new(Vec::new()));
    let slots =
        (launch.compute_slots > 0).then(|| Arc::new(ComputeSlots::new(launch.compute_slots)));
    // Joins are driven from the progress callback: it runs at iteration boundaries.
    let mut joins = launch.joins.clone();
    joins.sort_by_key(|j| j.0);
    let mut next_slot = launch.workers;
    let hs = handles.clone();
    let d2 = data.clone();
    let launch2 = launch.clone();
    let slots2 = slots.clone();
    let cb: ProgressFn = Box::new(move |p: &Progress| {
        while let Some(&(at, speed)) = joins.first() {
            if p.iteration < at {
                break;
            }
            joins.remove(0);
            let mut cfg = launch2.worker_config(next_slot, speed, addr, &slots2);
            next_slot += 1;
            // Wait for its handshake (the controller's connection tasks run on the
            // runtime's other thread; this time is excluded from training time), so
            // the join happens at the scheduled boundary or the next one.
            let (tx, rx) = std::sync::mpsc::channel();
            cfg.on_ready = Some(tx);
            // A failure to start a thread is reported by the missing join.
            if spawn_worker(cfg, d2.clone(), &hs).is_ok() {
                // This runs on a runtime thread (inside the training loop): without
                // `block_in_place` the connection task that must answer the newcomer's
                // Hello can sit in this thread's local queue, and the wait ran out its
                // full 30 s before the join.
                let _ = tokio::task::block_in_place(|| {
                    rx.recv_timeout(std::time::Duration::from_secs(30))
                });
            }
        }
        if let Some(f) = progress.as_mut() {
            f(p);
        }
    });
    // The controller serves from here on (a task of the runtime), so the workers'
    // handshakes can complete while they are started.
    let served = rt.spawn(controller::serve(listener, data.clone(), cfg, Some(cb)));
    // One after the other, each once its handshake is done: the controller numbers
    // workers in connection order, so worker id i is slot i (`local-i`, speed i of
    // `--speeds`) instead of whichever thread happened to connect first.
    for slot in 0..launch.workers {
        let speed = launch.speeds.get(slot).copied().unwrap_or(1.0);
        let mut w = launch.worker_config(slot, speed, addr, &slots);
        let (tx, rx) = std::sync::mpsc::channel();
        w.on_ready = Some(tx);
        spawn_worker(w, data.clone(), &handles)?;
        // A worker that fails its handshake drops the sender: no wait then.
        let _ = rx.recv_timeout(std::time::Duration::from_secs(30));
    }
    let report = rt.block_on(served).unwrap_or_else(|e| {
        Err(RuntimeError::Stopped(format!(
            "the training loop failed: {e}"
        )))
    });
    // Workers exit on Shutdown; if the controller failed they see the socket close.
    drop(rt);
    let mut outcomes = Vec::new();
    let hs: Vec<_> = std::mem::take(&mut *handles.lock().expect("handles"));
    for h in hs {
        outcomes.push(
            h.join()
                .unwrap_or_else(|_| Err(RuntimeError::Stopped("a worker thread panicked".into()))),
        );
    }
    Ok((report?, outcomes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(edit: impl FnOnce(&mut LocalLaunch)) -> String {
        let mut l = LocalLaunch::new(2);
        edit(&mut l);
        l.validate().unwrap_err().to_string()
    }

    #[test]
    fn launch_errors_name_the_flag_at_fault() {
        assert!(LocalLaunch::new(2).validate().is_ok());
        // A joiner's speed is a --join problem, not a --speeds one.
        let e = err(|l| l.joins = vec![(5, 0.0)]);
        assert!(e.starts_with("joins:") && e.contains("5:0"), "{e}");
        // A kill of a slot that never exists was silently ignored.
        let e = err(|l| l.kills = vec![(5, 1)]);
        assert!(e.starts_with("kills:") && e.contains("slot 5"), "{e}");
        let mut l = LocalLaunch::new(2);
        l.joins = vec![(3, 1.0)];
        l.kills = vec![(2, 4)];
        assert!(l.validate().is_ok(), "slot 2 is the joiner");
        // The compute thread panicked converting the padding to a Duration.
        let e = err(|l| l.speeds = vec![1.0, 1e-300]);
        assert!(e.starts_with("speeds:") && e.contains("1e-300"), "{e}");
        let e = err(|l| l.time_scale = 1e300);
        assert!(
            e.starts_with("speeds:") && e.contains("time scale 1e300"),
            "{e}"
        );
        let e = err(|l| {
            l.interference = Some(InterferencePlan {
                workers: vec![vec![crate::emulation::Window {
                    start: 1,
                    end: 5,
                    slowdown: 1e7,
                    cpu_load: None,
                    mem_load: None,
                }]],
            })
        });
        assert!(e.contains("slowdown up to 10000000.0"), "{e}");
        // 192.0.2.1 (TEST-NET-1) is never an address of this machine: the worker
        // bound to it never joined and the controller waited for the join timeout.
        let e = err(|l| l.worker_ips = vec!["192.0.2.1".parse().unwrap()]);
        assert!(
            e.starts_with("worker_ips:") && e.contains("192.0.2.1"),
            "{e}"
        );
    }
}
