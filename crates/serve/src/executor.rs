//! Executors run jobs' processes. The [`Executor`] trait is what the scheduler
//! needs from any backend (this machine, Slurm, …): launch on an allocation, signal,
//! poll, and re-adopt after the service restarts. [`LocalExecutor`] runs jobs as
//! child processes of this machine, each in its own process group, and tracks each
//! run as a process tree (see [`LocalExecutor`]).

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
/// the job's exit status atomically at the end. After the job, SIGTERM is ignored (`trap ''`,
/// which the `mv` it forks inherits): a stop signal swept over the run's tree while the
/// status is being recorded would otherwise kill that `mv`, and a run stopped with 143 was
/// recorded as killed (seen as a flaky `a_setsid_grandchild_is_part_of_its_run`).
const WRAPPER: &str = r#"d="$0"; echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; trap : TERM; "$@"; s=$?; trap '' TERM; echo $s > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit""#;

/// Runs jobs as local processes.
///
/// A run is its wrapper process **and everything that descends from it**, including
/// processes that left its process group or session (`setsid`) or whose parent exited:
/// the service makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so such
/// orphans are re-parented to it rather than to init, and each poll sweeps `/proc` for
/// the run's processes ([`run_tree`]: same process group or session as the wrapper, a
/// descendant of it, its `PACER_TREE_ID` in the environment, or seen as a member
/// before). Signals go to every member. A run stays `Running` — its devices held —
/// until the whole tree is gone: once the wrapper has exited, what is left of the tree is
/// SIGKILLed at each poll. (cgroup v2 would make the membership exact, but it is not
/// delegated everywhere: on the hybrid hierarchy of our CI, `/sys/fs/cgroup/unified`
/// has no controllers and `/sys/fs/cgroup` is a tmpfs; the sweep needs neither.)
pub struct LocalExecutor {
    /// Children launched by this process, kept to reap them.
    children: Mutex<HashMap<u32, std::process::Child>>,
    /// Per run (its wrapper's pid): its tree id and the members seen so far.
    trees: Mutex<HashMap<u32, Tree>>,
    /// The last sweep of `/proc`, reused for 250 ms by the polls of running runs (a
    /// round polls every running job).
    last_scan: Mutex<Option<(std::time::Instant, std::sync::Arc<Vec<Proc>>)>>,
}

impl Default for LocalExecutor {
    fn default() -> Self {
        Self::new()
    }
}

/// What the executor remembers of a run's process tree.
#[derive(Debug, Default)]
struct Tree {
    /// `PACER_TREE_ID` of the run: random per launch, so that runs of two services on
    /// one machine (both with a `job-1:1`) are never taken for each other.
    tree_id: Option<String>,
    /// `(pid, start_ticks)` of every process seen in the tree.
    members: std::collections::HashSet<(u32, u64)>,
}

impl LocalExecutor {
    pub fn new() -> Self {
        // SAFETY: prctl with constant arguments; it only changes this process's attributes.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        LocalExecutor {
            children: Mutex::new(HashMap::new()),
            trees: Mutex::new(HashMap::new()),
            last_scan: Mutex::new(None),
        }
    }

    /// All processes: a fresh sweep, or (`fresh` false) one at most 250 ms old.
    fn procs(&self, fresh: bool) -> std::sync::Arc<Vec<Proc>> {
        let mut last = self.last_scan.lock().expect("scan lock");
        if let Some((t, p)) = last.as_ref() {
            if !fresh && t.elapsed() < std::time::Duration::from_millis(250) {
                return p.clone();
            }
        }
        let p = std::sync::Arc::new(scan());
        *last = Some((std::time::Instant::now(), p.clone()));
        p
    }

    /// The live processes of the run whose wrapper is `root` (the wrapper included when
    /// alive), remembering them; zombies among them that are this process's children
    /// (orphans it adopted as subreaper) are reaped.
    fn tree_now(&self, root: u32, fresh: bool) -> Vec<Proc> {
        let procs = self.procs(fresh);
        let mut trees = self.trees.lock().expect("trees lock");
        let t = trees.entry(root).or_default();
        if t.tree_id.is_none() {
            t.tree_id = tree_id_of(root);
        }
        let members = run_tree(&procs, root, t.tree_id.as_deref(), &t.members);
        let me = std::process::id();
        let mut live = Vec::new();
        for p in members {
            t.members.insert((p.pid, p.start_ticks));
            if p.state == 'Z' {
                if p.ppid == me && p.pid != root {
                    // SAFETY: waitpid on a zombie child that no one else waits for (a
                    // job's process adopted as subreaper; never a wrapper, whose
                    // `Child` is reaped in `status_now`).
                    unsafe {
                        libc::waitpid(p.pid as i32, std::ptr::null_mut(), libc::WNOHANG);
                    }
                }
            } else {
                live.push(p);
            }
        }
        live
    }

    /// Sends `sig` to every live process of the run (each checked by start time).
    fn signal_tree(&self, root: u32, sig: i32) -> usize {
        let mut n = 0;
        for p in self.tree_now(root, true) {
            if proc_stat(p.pid).is_some_and(|s| s.start_ticks == p.start_ticks) {
                // SAFETY: kill(2) on a process just seen to be this run's.
                unsafe {
                    libc::kill(p.pid as i32, sig);
                }
                n += 1;
            }
        }
        n
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
        let tree_id = format!("{:016x}", rand::random::<u64>());
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
            .env("PACER_TREE_ID", &tree_id)
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
        self.trees.lock().expect("trees lock").insert(
            pid,
            Tree {
                tree_id: Some(tree_id),
                members: [(pid, start_ticks)].into(),
            },
        );
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
        let ours =
            proc_stat(pid).filter(|s| s.start_ticks == run.start_ticks || run.start_ticks == 0);
        if ours.is_some_and(|s| s.state != 'Z') {
            // Alive: the sweep keeps the tree's membership up to date.
            self.tree_now(pid, false);
            return RunStatus::Running;
        }
        if ours.is_some() {
            // Exited but not reaped: its pid (the group and session id) cannot be
            // reused yet, so whatever it left in its group can still be killed.
            kill_group(pid, libc::SIGKILL);
        }
        // The wrapper has exited; what is left of its tree is killed, and the run holds
        // its devices until nothing is left (the wrapper stays unreaped meanwhile).
        if self.signal_tree(pid, libc::SIGKILL) > 0 {
            return RunStatus::Running;
        }
        self.trees.lock().expect("trees lock").remove(&pid);
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
                // The processes that left the group (setsid, a new group) get it too.
                self.signal_tree(pid, sig);
            } else if sig == StopSignal::Kill {
                // The wrapper is gone: whatever is left of its tree goes too.
                self.signal_tree(pid, libc::SIGKILL);
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
            self.trees
                .lock()
                .expect("trees lock")
                .entry(pid)
                .or_default()
                .tree_id = tree_id_of(pid);
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

/// A process as `/proc` shows it: what [`run_tree`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    pub state: char,
    pub start_ticks: u64,
    /// `PACER_TREE_ID` in its environment (none for a zombie).
    pub tree_id: Option<String>,
}

/// `PACER_TREE_ID` of process `pid`'s environment.
fn tree_id_of(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"PACER_TREE_ID="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Every process of this machine (those that vanish while read are left out).
pub fn scan() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let f: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
            Some(Proc {
                pid,
                state: f.first()?.chars().next()?,
                ppid: f.get(1)?.parse().ok()?,
                pgid: f.get(2)?.parse().ok()?,
                sid: f.get(3)?.parse().ok()?,
                start_ticks: f.get(19)?.parse().ok()?,
                tree_id: tree_id_of(pid),
            })
        })
        .collect()
}

/// The processes of the run whose wrapper is `root`: the wrapper, every process in its
/// process group or session, every descendant of it, every process with
/// `PACER_TREE_ID=tree_id` in its environment (a random id per launch), and every
/// process in `known` (a member
/// seen before, by pid and start time: a `setsid` orphan re-parented to the service
/// and with its environment cleared is still found). Never this process or init.
pub fn run_tree(
    procs: &[Proc],
    root: u32,
    tree_id: Option<&str>,
    known: &std::collections::HashSet<(u32, u64)>,
) -> Vec<Proc> {
    let me = std::process::id();
    let parent: HashMap<u32, u32> = procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let descends = |mut pid: u32| {
        // Bounded: a parent chain is short, and a cycle (pids read at different
        // moments) must not loop.
        for _ in 0..128 {
            match parent.get(&pid) {
                Some(&pp) if pp == root => return true,
                Some(&pp) if pp > 1 => pid = pp,
                _ => return false,
            }
        }
        false
    };
    procs
        .iter()
        .filter(|p| p.pid != me && p.pid > 1)
        .filter(|p| {
            p.pid == root
                || p.pgid == root
                || p.sid == root
                || (tree_id.is_some() && p.tree_id.as_deref() == tree_id)
                || known.contains(&(p.pid, p.start_ticks))
                || descends(p.pid)
        })
        .cloned()
        .collect()
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
        let tmp = crate::scratch_dir("pacer-serve-exec-");
        let dir = tmp.path().join("d");
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
    }

    fn alive(pid: u32) -> bool {
        proc_stat(pid).is_some_and(|s| s.state != 'Z')
    }

    async fn poll_until_ended(ex: &LocalExecutor, h: &RunHandle, run_dir: &Path) -> RunStatus {
        for _ in 0..500 {
            let st = ex.poll(h, run_dir).await.unwrap();
            if st != RunStatus::Running {
                return st;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the run did not end in 10 s");
    }

    /// A job's grandchild in its own session (`setsid`) belongs to the run: the run is
    /// running (its devices held) until the grandchild is gone, which the executor
    /// sees to once the job itself has exited, and a stop signal reaches it too.
    #[tokio::test]
    async fn a_setsid_grandchild_is_part_of_its_run() {
        let tmp = crate::scratch_dir("pacer-serve-tree-");
        let dir = tmp.path().to_path_buf();
        let ex = LocalExecutor::new();
        let req = |n: u32, tail: &str| {
            LaunchRequest {
            job_id: format!("t{n}"),
            run_id: format!("t{n}:1"),
            argv: vec![
                "sh".into(),
                "-c".into(),
                format!(
                    "setsid sh -c 'echo $$ > {}/gc{n}.tmp; mv {}/gc{n}.tmp {}/gc{n}; exec sleep 60' & {tail}",
                    dir.display(),
                    dir.display(),
                    dir.display()
                ),
            ],
            env: vec![],
            cwd: None,
            run_dir: dir.join(format!("run{n}")),
            log_path: dir.join(format!("log{n}")),
            alloc: vec![(0, 1)],
        }
        };
        let grandchild = |n: u32| {
            for _ in 0..500 {
                if let Ok(s) = std::fs::read_to_string(dir.join(format!("gc{n}"))) {
                    return s.trim().parse::<u32>().unwrap();
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            panic!("no grandchild pid");
        };

        // The job waits for its grandchild to start, then exits 0, leaving it behind.
        let r1 = req(
            1,
            &format!(
                "while [ ! -e {}/gc1 ]; do sleep 0.05; done; exit 0",
                dir.display()
            ),
        );
        let h1 = ex.launch(&r1).await.unwrap();
        let gc1 = grandchild(1);
        for _ in 0..500 {
            if r1.run_dir.join("exit").exists() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(r1.run_dir.join("exit").exists(), "the job did not exit");
        assert!(alive(gc1), "the grandchild should outlive the job");
        assert_eq!(
            ex.poll(&h1, &r1.run_dir).await.unwrap(),
            RunStatus::Running,
            "the job exited but its grandchild {gc1} runs: the run is not over"
        );
        assert_eq!(
            poll_until_ended(&ex, &h1, &r1.run_dir).await,
            RunStatus::Exited(0)
        );
        assert!(!alive(gc1), "the grandchild {gc1} outlived its run");

        // Stopped: SIGTERM reaches the grandchild in its own session as well.
        let r2 = req(2, "exec sleep 60");
        let h2 = ex.launch(&r2).await.unwrap();
        let gc2 = grandchild(2);
        assert!(alive(gc2));
        ex.signal(&h2, StopSignal::Term).await.unwrap();
        assert_eq!(
            poll_until_ended(&ex, &h2, &r2.run_dir).await,
            RunStatus::Exited(143)
        );
        assert!(
            !alive(gc2),
            "the grandchild {gc2} outlived the stop of its run"
        );
    }
}
