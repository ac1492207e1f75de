//! Executors run jobs' processes. The [`Executor`] trait is what the scheduler
//! needs from any backend (this machine, Slurm, …): launch on an allocation, signal,
//! poll, and re-adopt after the service restarts. [`LocalExecutor`] runs jobs as
//! child processes of this machine, each in its own process group.

use crate::error::ServeError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Mutex;

/// A boxed executor future (the trait is used as `dyn Executor`).
pub type ExecFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ServeError>> + Send + 'a>>;

/// What identifies a launched run to its executor; stored in the state database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunHandle {
    /// Local: the process (and process-group) id; Slurm: the job id.
    pub id: String,
    /// Local: the process start time in clock ticks since boot (`/proc/PID/stat`
    /// field 22), so a recycled pid is never taken for the job; 0 where unused.
    pub start_ticks: u64,
}

/// Everything a launch needs.
#[derive(Debug, Clone)]
pub struct LaunchRequest {
    pub job_id: String,
    /// `<job>:<attempt>` (also `PACER_RUN_ID` in the environment).
    pub run_id: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory of the job's processes (the spec's `cwd`); `None`: the service's.
    pub cwd: Option<PathBuf>,
    /// The run's own directory (pid and exit files of the local executor).
    pub run_dir: PathBuf,
    /// stdout and stderr are appended here.
    pub log_path: PathBuf,
    /// The placement: `(node index in the cluster spec, devices on it)`. The local
    /// executor runs on this machine whatever it says; the Slurm executor pins to it.
    pub alloc: Vec<(u32, u32)>,
}

/// How a run stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunStatus {
    Running,
    /// Exited with this status.
    Exited(i32),
    /// Gone without an exit status (killed by a signal).
    Killed,
    /// Lost through no fault of the job (its node failed): the job is requeued and
    /// relaunched from its checkpoint, not failed.
    Lost,
}

/// A signal to a whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// Checkpoint and exit (the grace period starts).
    Term,
    /// Immediately.
    Kill,
}

/// A backend that runs jobs. Every method is idempotent with respect to a run that
/// has already ended.
pub trait Executor: Send + Sync {
    fn name(&self) -> &'static str;
    /// Starts `req` and returns its handle once it runs.
    fn launch<'a>(&'a self, req: &'a LaunchRequest) -> ExecFuture<'a, RunHandle>;
    fn signal<'a>(&'a self, run: &'a RunHandle, sig: StopSignal) -> ExecFuture<'a, ()>;
    fn poll<'a>(&'a self, run: &'a RunHandle, run_dir: &'a Path) -> ExecFuture<'a, RunStatus>;
    /// After a restart of the service: finds the run `run_id` (its handle when one was
    /// recorded; `None` when the service died between deciding to launch and
    /// recording the handle). `Some(handle)` when that very run is still alive.
    fn adopt<'a>(
        &'a self,
        run_id: &'a str,
        recorded: Option<&'a RunHandle>,
        run_dir: &'a Path,
    ) -> ExecFuture<'a, Option<RunHandle>>;
    /// Devices per node (indexed as the cluster spec's nodes) that others hold now
    /// (another user's Slurm jobs): the policy plans without them. Empty: none taken.
    fn taken(&self) -> ExecFuture<'_, Vec<u32>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// `c` less the devices others hold (`taken[node]`, see `Executor::taken`).
pub(crate) fn without_taken(
    c: &pacer_model::ClusterSpec,
    taken: &[u32],
) -> pacer_model::ClusterSpec {
    let mut c = c.clone();
    for (n, &t) in c.nodes.iter_mut().zip(taken) {
        n.gpus = n.gpus.saturating_sub(t);
    }
    c
}

/// Marks `taken[node]` more slots of each node as held (others' devices).
pub(crate) fn hold_taken(held: &mut [Vec<bool>], taken: &[u32]) {
    for (slots, &t) in held.iter_mut().zip(taken) {
        slots
            .iter_mut()
            .filter(|b| !**b)
            .take(t as usize)
            .for_each(|b| *b = true);
    }
}

/// The shell wrapper around a job's command: records its pid first, keeps itself
/// alive through SIGTERM (the job gets it too, as a member of the process group; a
/// trap that runs a command is reset to the default in the job on exec), and records
/// the job's exit status atomically at the end.
const WRAPPER: &str = r#"d="$0"; echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; trap : TERM; "$@"; s=$?; echo $s > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit""#;

/// Runs jobs as local processes.
#[derive(Default)]
pub struct LocalExecutor {
    /// Children launched by this process, kept to reap them.
    children: Mutex<HashMap<u32, std::process::Child>>,
}

impl LocalExecutor {
    pub fn new() -> Self {
        Self::default()
    }

    fn launch_now(&self, req: &LaunchRequest) -> Result<RunHandle, ServeError> {
        use std::os::unix::process::CommandExt;
        std::fs::create_dir_all(&req.run_dir)
            .map_err(|e| ServeError::io(format!("creating {}", req.run_dir.display()), e))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&req.log_path)
            .map_err(|e| ServeError::io(format!("opening {}", req.log_path.display()), e))?;
        let log2 = log.try_clone().map_err(|e| ServeError::io("log file", e))?;
        let mut cmd = std::process::Command::new("/bin/sh");
        if let Some(d) = &req.cwd {
            check_cwd(d)?;
            cmd.current_dir(d);
        }
        cmd.arg("-c")
            .arg(WRAPPER)
            .arg(&req.run_dir)
            .args(&req.argv)
            .env("PACER_RUN_ID", &req.run_id)
            .envs(req.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| ServeError::io(format!("starting {:?}", req.argv.first()), e))?;
        let pid = child.id();
        let start_ticks = proc_stat(pid).map_or(0, |s| s.start_ticks);
        self.children
            .lock()
            .expect("children lock")
            .insert(pid, child);
        Ok(RunHandle {
            id: pid.to_string(),
            start_ticks,
        })
    }

    fn status_now(&self, run: &RunHandle, run_dir: &Path) -> RunStatus {
        let Ok(pid) = run.id.parse::<u32>() else {
            return RunStatus::Killed;
        };
        let alive = match proc_stat(pid) {
            Some(s) if s.start_ticks == run.start_ticks || run.start_ticks == 0 => {
                if s.state == 'Z' {
                    // Exited but not reaped: its pid (the group id) cannot be reused
                    // yet, so whatever it left in its group can still be killed.
                    kill_group(pid, libc::SIGKILL);
                    false
                } else {
                    true
                }
            }
            _ => false,
        };
        if alive {
            return RunStatus::Running;
        }
        if let Some(mut c) = self.children.lock().expect("children lock").remove(&pid) {
            let _ = c.wait();
        }
        exit_status(run_dir)
    }
}

/// A job's working directory must still be a directory at launch (it was at submission);
/// without this check a spawn into a removed one fails as "No such file or directory"
/// as if the program were missing.
pub(crate) fn check_cwd(d: &Path) -> Result<(), ServeError> {
    if d.is_dir() {
        Ok(())
    } else {
        Err(ServeError::Exec(format!(
            "the job's cwd `{}` is no longer a directory",
            d.display()
        )))
    }
}

/// The exit status a wrapper recorded in `run_dir`, or [`RunStatus::Killed`].
pub fn exit_status(run_dir: &Path) -> RunStatus {
    match std::fs::read_to_string(run_dir.join("exit")) {
        Ok(s) => s
            .trim()
            .parse()
            .map_or(RunStatus::Killed, RunStatus::Exited),
        Err(_) => RunStatus::Killed,
    }
}

impl Executor for LocalExecutor {
    fn name(&self) -> &'static str {
        "local"
    }

    fn launch<'a>(&'a self, req: &'a LaunchRequest) -> ExecFuture<'a, RunHandle> {
        Box::pin(async move { self.launch_now(req) })
    }

    fn signal<'a>(&'a self, run: &'a RunHandle, sig: StopSignal) -> ExecFuture<'a, ()> {
        Box::pin(async move {
            let Ok(pid) = run.id.parse::<u32>() else {
                return Err(ServeError::Exec(format!("bad local run id `{}`", run.id)));
            };
            // Only a process that is still this run (same start time) is signalled.
            if proc_stat(pid)
                .is_some_and(|s| s.start_ticks == run.start_ticks || run.start_ticks == 0)
            {
                let sig = match sig {
                    StopSignal::Term => libc::SIGTERM,
                    StopSignal::Kill => libc::SIGKILL,
                };
                kill_group(pid, sig);
            }
            Ok(())
        })
    }

    fn poll<'a>(&'a self, run: &'a RunHandle, run_dir: &'a Path) -> ExecFuture<'a, RunStatus> {
        Box::pin(async move { Ok(self.status_now(run, run_dir)) })
    }

    fn adopt<'a>(
        &'a self,
        run_id: &'a str,
        recorded: Option<&'a RunHandle>,
        run_dir: &'a Path,
    ) -> ExecFuture<'a, Option<RunHandle>> {
        Box::pin(async move {
            let pid = match recorded {
                Some(h) => h.id.parse::<u32>().ok(),
                None => {
                    // Launched (maybe) but not recorded: the wrapper writes its pid first
                    // thing; give a wrapper that was just forked a moment to do so.
                    let mut pid = None;
                    for _ in 0..20 {
                        if let Ok(s) = std::fs::read_to_string(run_dir.join("pid")) {
                            pid = s.trim().parse::<u32>().ok();
                            break;
                        }
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                    pid
                }
            };
            let Some(pid) = pid else { return Ok(None) };
            let Some(stat) = proc_stat(pid) else {
                return Ok(None);
            };
            if stat.state == 'Z' {
                return Ok(None);
            }
            if let Some(h) = recorded {
                if h.start_ticks != 0 && h.start_ticks != stat.start_ticks {
                    return Ok(None);
                }
            }
            // The process must carry this run's id in its environment.
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let want = format!("PACER_RUN_ID={run_id}");
            if !env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
                return Ok(None);
            }
            Ok(Some(RunHandle {
                id: pid.to_string(),
                start_ticks: stat.start_ticks,
            }))
        })
    }
}

fn kill_group(pgid: u32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
        unsafe {
            libc::kill(-(pgid as i32), sig);
        }
    }
}

/// The fields of `/proc/PID/stat` the executor needs.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    pub state: char,
    pub start_ticks: u64,
}

/// Reads `/proc/PID/stat`; `None` when there is no such process.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: parse after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); field 22 (starttime) is f[19].
    Some(ProcStat {
        state: f.first()?.chars().next()?,
        start_ticks: f.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_devices_are_left_out_of_the_plan_and_the_slots() {
        use pacer_model::{ClusterSpec, DeviceTypeId, NodeSpec};
        let node = |gpus| NodeSpec {
            device_type: DeviceTypeId(0),
            gpus,
        };
        let c = ClusterSpec {
            device_types: vec!["t4".into()],
            nodes: vec![node(4), node(4), node(4)],
        };
        // 1 GPU of node 0 taken by another user; node 1 down (all taken); node 2 free.
        let taken = [1, 4, 0];
        let gpus: Vec<u32> = without_taken(&c, &taken)
            .nodes
            .iter()
            .map(|n| n.gpus)
            .collect();
        assert_eq!(gpus, [3, 0, 4]);
        assert_eq!(without_taken(&c, &[9]).nodes[0].gpus, 0);
        assert_eq!(without_taken(&c, &[]).nodes[0].gpus, 4);
        // pacer's own run holds slot 0 of node 0: the taken one is another slot.
        let mut held = vec![
            vec![true, false, false, false],
            vec![false; 4],
            vec![false; 4],
        ];
        hold_taken(&mut held, &taken);
        assert_eq!(held[0], [true, true, false, false]);
        assert_eq!(held[1], [true; 4]);
        assert_eq!(held[2], [false; 4]);
    }

    #[tokio::test]
    async fn runs_signals_and_readopts_a_process() {
        let dir = std::env::temp_dir().join(format!("pacer-serve-exec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ex = LocalExecutor::new();
        let req = LaunchRequest {
            job_id: "j".into(),
            run_id: "j:1".into(),
            argv: vec!["sleep".into(), "30".into()],
            env: vec![],
            cwd: None,
            run_dir: dir.join("run"),
            log_path: dir.join("log"),
            alloc: vec![(0, 1)],
        };
        std::fs::create_dir_all(&dir).unwrap();
        let h = ex.launch(&req).await.unwrap();
        assert_eq!(ex.poll(&h, &req.run_dir).await.unwrap(), RunStatus::Running);
        // Re-adoption finds it by the pid file and its environment, and not under another run id.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(
            ex.adopt("j:1", None, &req.run_dir).await.unwrap(),
            Some(h.clone())
        );
        assert_eq!(ex.adopt("j:2", Some(&h), &req.run_dir).await.unwrap(), None);
        ex.signal(&h, StopSignal::Term).await.unwrap();
        let mut st = RunStatus::Running;
        for _ in 0..100 {
            st = ex.poll(&h, &req.run_dir).await.unwrap();
            if st != RunStatus::Running {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // sleep dies of SIGTERM; the wrapper survives it and records 143.
        assert_eq!(st, RunStatus::Exited(143));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
