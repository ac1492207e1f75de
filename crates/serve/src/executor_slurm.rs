//! [`SlurmExecutor`]: runs the service's jobs as Slurm batch jobs pinned to the nodes and
//! GPU counts the policy chose, through the `pacer-slurm` client (`sbatch`, `squeue`,
//! `scancel`). The cluster the policy sees is read from Slurm at start
//! ([`SlurmExecutor::discover`]): the nodes of one partition, in Slurm's order, each with
//! its GPU count and device type (GRES type, else first node feature).
//!
//! A run is one Slurm job named `pacer-<job>.<attempt>`; its handle is the Slurm job id. The
//! job's command runs under the same wrapper contract as the local executor (`pid` and
//! `exit` files in the run directory, the wrapper survives SIGTERM), so a run that ended
//! while the service was down is settled from its exit file. A one-node job runs once, in
//! the batch step; a multi-node job runs one rank per node (`srun` in the batch script,
//! `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_NODEID` set, rank 0's exit status is the run's) and
//! SIGTERM goes to those ranks (Slurm's job steps; a run whose ranks' step Slurm has not
//! started yet is cancelled instead, as a SIGTERM would reach nobody). The run directory
//! must be on a file
//! system every node shares (on the dev cluster all nodes are this machine). `MASTER_ADDR`
//! is the first node's Slurm address, `MASTER_PORT` the service's; `pacer train --slurm` as
//! the job's command makes rank 0 the controller there and every rank a worker
//! (crates/cli/src/train_ranks.rs).
//!
//! A run whose node failed (Slurm has the node down or not responding, requeued the run or
//! ended it `NODE_FAIL`) is cancelled in
//! Slurm and reported [`RunStatus::Lost`]: the service relaunches it from its checkpoint on
//! the nodes left. Nodes that are down, and GPUs other users' Slurm jobs hold, are reported
//! as taken ([`Executor::taken`]), so the policy plans without them.
//!
//! Limits: Slurm's `--gres=gpu:N` is per node, so an uneven placement (3 GPUs on one node,
//! 1 on another) holds the larger count on every node of the job in Slurm.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pacer_model::{ClusterSpec, DeviceTypeId, NodeSpec};
use pacer_slurm::{JobInfo, JobRequest, JobState as SlurmState, SignalTarget, SlurmClient};

use crate::error::ServeError;
use crate::executor::{ExecFuture, Executor, LaunchRequest, RunHandle, RunStatus, StopSignal};

/// The wrapper around a job's command, as the local executor's: records that it started
/// (the Slurm job id as `pid`), keeps itself alive through SIGTERM, records the exit status.
/// In a multi-node job every rank runs it (under `srun`); rank 0's status is the run's.
const WRAPPER: &str = r#"d="$0"; r=${SLURM_PROCID:-0}; if [ "$r" = 0 ]; then echo "$SLURM_JOB_ID" > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; fi; trap : TERM; "$@"; s=$?; trap '' TERM; if [ "$r" = 0 ]; then echo $s > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"; fi; exit $s"#;

/// Runs jobs through Slurm.
#[derive(Debug)]
pub struct SlurmExecutor {
    client: Arc<SlurmClient>,
    partition: String,
    /// Slurm node name of each `NodeId` of the cluster spec.
    nodes: Vec<String>,
    /// Slurm address of each node (rendezvous).
    addresses: Vec<String>,
    /// GRES type of each node's GPUs, when Slurm gives one.
    gpu_types: Vec<Option<String>>,
    /// Nodes Slurm had down or not responding at the last look ([`Executor::taken`]).
    failed: std::sync::Mutex<Vec<String>>,
    /// The last `squeue` snapshot and when it was taken: every poll of a round and the
    /// round's [`Executor::taken`] share one (see [`SNAPSHOT_MAX_AGE`]); a launch or a
    /// signal drops it.
    snapshot: std::sync::Mutex<Option<(Instant, Arc<Vec<JobInfo>>)>>,
    /// What [`Executor::taken`] last answered, kept for a round whose Slurm query fails.
    last_taken: std::sync::Mutex<Option<Vec<u32>>>,
}

/// Time limit of every Slurm command the executor runs: a round waits at most this long
/// for one command (the commands take ~0.01-0.3 s here; `squeue` takes ~9 s to give up on
/// a dead controller). Signals and cancels do not hold up a round at all (they run in the
/// background).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// How old an `squeue` snapshot may be and still answer a poll: the polls of one round
/// run within milliseconds of each other, so a round runs `squeue` once, not once per job.
const SNAPSHOT_MAX_AGE: Duration = Duration::from_millis(300);

impl SlurmExecutor {
    /// Reads partition `partition` from Slurm (nodes with GPUs; the errors name a missing
    /// Slurm, an unreachable controller, a missing partition or a node without GPUs) and
    /// returns the executor and the cluster the policy plans on.
    pub fn discover(
        client: SlurmClient,
        partition: &str,
    ) -> Result<(Self, ClusterSpec), ServeError> {
        init_logging();
        let cluster = client
            .discover_for(partition, true)
            .map_err(|e| ServeError::Exec(format!("--executor slurm: {e}")))?;
        let nodes = cluster
            .partition_nodes(partition)
            .map_err(|e| ServeError::Exec(format!("--executor slurm: {e}")))?;
        let mut spec = ClusterSpec {
            device_types: Vec::new(),
            nodes: Vec::new(),
        };
        let mut ex = SlurmExecutor {
            client: Arc::new(client.with_timeout(COMMAND_TIMEOUT)),
            partition: partition.to_string(),
            nodes: Vec::new(),
            addresses: Vec::new(),
            gpu_types: Vec::new(),
            failed: Default::default(),
            snapshot: Default::default(),
            last_taken: Default::default(),
        };
        for n in nodes {
            let ty = n
                .device_type()
                .unwrap_or_else(|| "gpu".into())
                .to_ascii_lowercase();
            let id = match spec.device_types.iter().position(|t| *t == ty) {
                Some(i) => i,
                None => {
                    spec.device_types.push(ty.clone());
                    spec.device_types.len() - 1
                }
            };
            let gres_type = n
                .gres
                .iter()
                .find(|g| g.name == "gpu")
                .and_then(|g| g.kind.clone());
            spec.nodes.push(NodeSpec {
                device_type: DeviceTypeId(id as u16),
                gpus: n.gpus(gres_type.as_deref()),
            });
            ex.nodes.push(n.name.clone());
            ex.addresses.push(n.address.clone());
            ex.gpu_types.push(gres_type);
        }
        Ok((ex, spec))
    }

    /// The Slurm job name of a run (`<job>:<attempt>` → `<job>.<attempt>`, prefixed).
    fn run_name(run_id: &str) -> String {
        run_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '.'
                }
            })
            .collect()
    }

    fn job_request(&self, req: &LaunchRequest) -> Result<JobRequest, ServeError> {
        let bad = |why: String| ServeError::Exec(format!("slurm launch of {}: {why}", req.run_id));
        let mut nodes = Vec::new();
        let mut gpus = 0;
        for &(n, k) in &req.alloc {
            let name = self
                .nodes
                .get(n as usize)
                .ok_or_else(|| bad(format!("no node {n}")))?;
            nodes.push(name.as_str());
            gpus = gpus.max(k);
        }
        let first = *req
            .alloc
            .first()
            .ok_or_else(|| bad("empty allocation".into()))?;
        let mut command = vec!["/bin/sh".to_string(), "-c".into(), WRAPPER.into()];
        command.push(req.run_dir.display().to_string());
        command.extend(req.argv.iter().cloned());
        let mut r = JobRequest::new(
            &Self::run_name(&req.run_id),
            &self.partition,
            &nodes,
            gpus,
            &[],
        );
        r.command = command;
        r.planned_gpus = req.alloc.iter().map(|&(_, k)| k).collect();
        // One GRES type when every node has it; a run across types (`mixed_types`)
        // asks for untyped GPUs, which every node's type satisfies.
        let ty = &self.gpu_types[first.0 as usize];
        r.gpu_type = if req
            .alloc
            .iter()
            .all(|&(n, _)| self.gpu_types.get(n as usize) == Some(ty))
        {
            ty.clone()
        } else {
            None
        };
        r.output = req.log_path.clone();
        r.append_output = true;
        r.requeue = false;
        r.per_task = nodes.len() > 1;
        // The spec's cwd (`--chdir`, on the nodes), else the service's directory.
        r.workdir = match &req.cwd {
            Some(d) => Some(d.clone()),
            None => std::env::current_dir().ok(),
        };
        for (k, v) in &req.env {
            // Slurm sets CUDA_VISIBLE_DEVICES itself from the GRES it allocates.
            if k != "CUDA_VISIBLE_DEVICES" && k != "MASTER_ADDR" {
                r.env.insert(k.clone(), v.clone());
            }
        }
        r.env.insert(
            "MASTER_ADDR".into(),
            self.addresses[first.0 as usize].clone(),
        );
        r.env.insert("PACER_RUN_ID".into(), req.run_id.clone());
        // Each node's rank and device count for `launcher = "torchrun"` (crate::launcher),
        // in allocation order: node rank 0 is the one at MASTER_ADDR.
        r.env.insert("PACER_NODE_NAMES".into(), nodes.join(","));
        r.env.insert(
            "PACER_NODE_DEVICES".into(),
            req.alloc
                .iter()
                .map(|&(_, k)| k.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
        Ok(r)
    }

    /// Every job Slurm lists, from a snapshot at most [`SNAPSHOT_MAX_AGE`] old.
    async fn snapshot(&self) -> Result<Arc<Vec<JobInfo>>, ServeError> {
        if let Some((t, jobs)) = &*self.snapshot.lock().expect("snapshot lock") {
            if t.elapsed() < SNAPSHOT_MAX_AGE {
                return Ok(jobs.clone());
            }
        }
        let t = Instant::now();
        let jobs = Arc::new(self.blocking(|c| c.jobs()).await?);
        *self.snapshot.lock().expect("snapshot lock") = Some((t, jobs.clone()));
        Ok(jobs)
    }

    /// Drops the snapshot (a launch or a signal changes what Slurm would show).
    fn forget_snapshot(&self) {
        *self.snapshot.lock().expect("snapshot lock") = None;
    }

    /// Runs `scancel` in the background: a round never waits for it (it is bounded by
    /// [`COMMAND_TIMEOUT`]; a failure is logged, and the service's grace-period kill or
    /// the next poll deals with a run it did not reach).
    fn in_background(
        &self,
        what: String,
        f: impl FnOnce(&SlurmClient) -> Result<(), pacer_slurm::SlurmError> + Send + 'static,
    ) {
        self.forget_snapshot();
        let client = self.client.clone();
        let t = Instant::now();
        tokio::task::spawn_blocking(move || match f(&client) {
            Ok(()) => tracing::debug!(ms = t.elapsed().as_secs_f64() * 1e3, "{what}: done"),
            Err(e) => tracing::warn!("{what}: {e}"),
        });
    }

    /// Runs a blocking client call off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SlurmClient) -> Result<T, pacer_slurm::SlurmError> + Send + 'static,
    ) -> Result<T, ServeError> {
        let client = self.client.clone();
        tokio::task::spawn_blocking(move || f(&client))
            .await
            .map_err(|e| ServeError::Exec(format!("slurm call: {e}")))?
            .map_err(|e| ServeError::Exec(e.to_string()))
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`: slow or timed-out Slurm
/// commands, rounds longer than `--round-s`); `RUST_LOG=pacer_serve=debug,pacer_slurm=debug`
/// shows every round and every Slurm command with its duration. Installs nothing when the
/// program already has a subscriber.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// How many times [`sigterm`] asks Slurm before it gives up (then the service's
/// grace-period kill ends the run), and the pause between two tries.
const SIGTERM_TRIES: u32 = 3;
const SIGTERM_RETRY: Duration = Duration::from_millis(500);

/// Sends SIGTERM to Slurm job `id` where it reaches the job's processes, decided from
/// Slurm's answer now (one `squeue` of this job, and of its steps when it spans nodes):
/// - pending: cancelled (nothing to save; measured: `scancel --signal=TERM` of a pending
///   job blocked 5 s, then reached the job as it started, with `--full`, so srun killed
///   its ranks);
/// - several nodes: to its job steps, the ranks (`srun`, the batch step, would answer
///   SIGTERM by killing them at once); while srun has not started the ranks' step yet the
///   signal would reach nobody (`scancel` exits 0; the run trained on until the SIGKILL),
///   so it is cancelled, nothing started;
/// - one node: to every process of the batch step (`--full`; `--batch` alone does not
///   reach the command the batch shell runs).
///
/// Nothing is sent on a guess: when Slurm does not answer, it asks again
/// ([`SIGTERM_TRIES`]), then leaves the run to the grace-period kill.
fn sigterm(c: &SlurmClient, id: u64) {
    let t = Instant::now();
    for attempt in 1..=SIGTERM_TRIES {
        match sigterm_once(c, id) {
            Ok(how) => {
                tracing::info!(
                    slurm_job = id,
                    ms = t.elapsed().as_secs_f64() * 1e3,
                    "SIGTERM: {how}"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(slurm_job = id, attempt, "SIGTERM: {e}");
                if attempt < SIGTERM_TRIES {
                    std::thread::sleep(SIGTERM_RETRY);
                }
            }
        }
    }
    tracing::warn!(
        slurm_job = id,
        "SIGTERM not sent: Slurm did not answer; the grace period's kill will end it"
    );
}

fn sigterm_once(c: &SlurmClient, id: u64) -> Result<&'static str, pacer_slurm::SlurmError> {
    let Some((state, nodes)) = c.job_state_nodes(id)? else {
        return Ok("Slurm no longer lists the job");
    };
    if state.is_terminal() {
        return Ok("the job has ended");
    }
    if state == SlurmState::Pending {
        c.cancel(id)?;
        return Ok("pending: cancelled");
    }
    if nodes <= 1 {
        c.signal(id, "TERM", SignalTarget::All)?;
        return Ok("sent to every process of its batch step");
    }
    if c.has_task_step(id)? {
        c.signal(id, "TERM", SignalTarget::Steps)?;
        Ok("sent to its ranks' job steps")
    } else {
        c.cancel(id)?;
        Ok("its ranks have not started (no job step yet): cancelled")
    }
}

fn slurm_id(run: &RunHandle) -> Result<u64, ServeError> {
    run.id
        .parse()
        .map_err(|_| ServeError::Exec(format!("bad Slurm job id `{}`", run.id)))
}

impl Executor for SlurmExecutor {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn launch<'a>(&'a self, req: &'a LaunchRequest) -> ExecFuture<'a, RunHandle> {
        Box::pin(async move {
            std::fs::create_dir_all(&req.run_dir)
                .map_err(|e| ServeError::io(format!("creating {}", req.run_dir.display()), e))?;
            let job = self.job_request(req)?;
            self.forget_snapshot();
            let id = self.blocking(move |c| c.submit(&job)).await;
            self.forget_snapshot();
            let id = id?;
            Ok(RunHandle {
                id: id.to_string(),
                start_ticks: 0,
            })
        })
    }

    fn signal<'a>(&'a self, run: &'a RunHandle, sig: StopSignal) -> ExecFuture<'a, ()> {
        Box::pin(async move {
            let id = slurm_id(run)?;
            match sig {
                StopSignal::Term => {
                    // Decided and sent in the background from a query of this job alone
                    // ([`sigterm`]): a round never waits for Slurm here. (It used to look
                    // the job up in the round's `squeue --json`; when that timed out on a
                    // loaded machine it guessed "one node" and sent `--full`, and srun
                    // killed the ranks of a 3-node run: 11,621 iterations lost.)
                    self.forget_snapshot();
                    let client = self.client.clone();
                    tokio::task::spawn_blocking(move || sigterm(&client, id));
                }
                StopSignal::Kill => {
                    self.in_background(format!("cancel Slurm job {id}"), move |c| c.cancel(id))
                }
            }
            Ok(())
        })
    }

    fn poll<'a>(&'a self, run: &'a RunHandle, run_dir: &'a Path) -> ExecFuture<'a, RunStatus> {
        Box::pin(async move {
            let id = slurm_id(run)?;
            let jobs = match self.snapshot().await {
                Ok(jobs) => jobs,
                Err(e) => {
                    // Slurm does not answer: settle what the exit file settles, keep the
                    // rest running until it does.
                    let st = if run_dir.join("exit").exists() {
                        crate::executor::exit_status(run_dir)
                    } else {
                        RunStatus::Running
                    };
                    tracing::warn!(slurm_job = id, status = ?st, "poll from the exit file: {e}");
                    return Ok(st);
                }
            };
            let job = jobs.iter().find(|j| j.id == id);
            tracing::debug!(slurm_job = id, state = ?job.map(|j| j.state.clone()), "poll");
            let Some(job) = job else {
                return Ok(crate::executor::exit_status(run_dir));
            };
            if job.was_requeued() && !job.state.is_terminal() {
                // Its node failed: Slurm would rerun it ~2 minutes later behind the
                // service's back. End it; the service relaunches from the checkpoint.
                self.in_background(format!("cancel lost Slurm job {id}"), move |c| c.cancel(id));
                return Ok(RunStatus::Lost);
            }
            if job.state == SlurmState::NodeFail {
                return Ok(RunStatus::Lost);
            }
            let on_failed = {
                let failed = self.failed.lock().expect("failed nodes lock");
                job.nodes.iter().any(|n| failed.contains(n))
            };
            if on_failed && !job.state.is_terminal() {
                // Its node stopped answering: its processes are gone or cut off. Slurm
                // ends the job only ~30 s later; end it now and relaunch elsewhere.
                self.in_background(format!("cancel lost Slurm job {id}"), move |c| c.cancel(id));
                return Ok(RunStatus::Lost);
            }
            Ok(match &job.state {
                s if !s.is_terminal() => RunStatus::Running,
                SlurmState::Completed | SlurmState::Failed => {
                    // The wrapper's exit file has the job's own status; give a file system
                    // shared over the network a moment to show it.
                    let mut st = crate::executor::exit_status(run_dir);
                    for _ in 0..20 {
                        if st != RunStatus::Killed {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        st = crate::executor::exit_status(run_dir);
                    }
                    st
                }
                _ => RunStatus::Killed,
            })
        })
    }

    fn adopt<'a>(
        &'a self,
        run_id: &'a str,
        recorded: Option<&'a RunHandle>,
        _run_dir: &'a Path,
    ) -> ExecFuture<'a, Option<RunHandle>> {
        Box::pin(async move {
            let name = format!("{}{}", self.client.prefix(), Self::run_name(run_id));
            let jobs = self.blocking(|c| c.jobs()).await?;
            let found = jobs
                .iter()
                .filter(|j| j.name == name && !j.state.is_terminal())
                .filter(|j| recorded.is_none_or(|h| h.id == j.id.to_string()))
                .max_by_key(|j| j.id);
            Ok(found.map(|j| RunHandle {
                id: j.id.to_string(),
                start_ticks: 0,
            }))
        })
    }

    fn taken(&self) -> ExecFuture<'_, Vec<u32>> {
        Box::pin(async move {
            let read = async {
                let jobs = self.snapshot().await?;
                let nodes = self.blocking(|c| c.nodes()).await?;
                Ok::<_, ServeError>(pacer_slurm::Cluster {
                    nodes,
                    partitions: vec![self.partition.clone()],
                    jobs: jobs.to_vec(),
                })
            };
            let cluster = match read.await {
                Ok(c) => c,
                Err(e) => {
                    // Plan with what Slurm showed last rather than stop every round.
                    let last = self.last_taken.lock().expect("taken lock").clone();
                    tracing::warn!("taken devices: {e}; using the last answer {last:?}");
                    return last.ok_or(e);
                }
            };
            let foreign = cluster.foreign_gpus(self.client.prefix());
            *self.failed.lock().expect("failed nodes lock") = cluster
                .nodes
                .iter()
                .filter(|n| {
                    n.state.base == "down" || n.state.flags.iter().any(|f| f == "NOT_RESPONDING")
                })
                .map(|n| n.name.clone())
                .collect();
            let taken = self.taken_of(&cluster, &foreign);
            *self.last_taken.lock().expect("taken lock") = Some(taken.clone());
            Ok(taken)
        })
    }
}

impl SlurmExecutor {
    /// Per node of the spec: all its GPUs when Slurm has it down (or lists it no more),
    /// else the GPUs other users' jobs hold on it.
    fn taken_of(
        &self,
        cluster: &pacer_slurm::Cluster,
        foreign: &std::collections::BTreeMap<String, u32>,
    ) -> Vec<u32> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, name)| match cluster.node(name) {
                Some(n) if n.state.is_up() => foreign.get(name).copied().unwrap_or(0),
                Some(n) => n.gpus(self.gpu_types[i].as_deref()),
                None => u32::MAX,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor() -> SlurmExecutor {
        SlurmExecutor {
            client: Arc::new(SlurmClient::new()),
            partition: "gpu".into(),
            nodes: vec!["n1".into(), "n2".into()],
            addresses: vec!["10.0.0.1".into(), "10.0.0.2".into()],
            gpu_types: vec![Some("t4".into()), Some("t4".into())],
            failed: Default::default(),
            snapshot: Default::default(),
            last_taken: Default::default(),
        }
    }

    #[test]
    fn a_launch_is_pinned_to_the_allocated_nodes_and_gpus() {
        let req = LaunchRequest {
            job_id: "j".into(),
            run_id: "j:3".into(),
            argv: vec!["python3".into(), "train.py".into()],
            env: vec![
                ("MASTER_ADDR".into(), "127.0.0.1".into()),
                ("CUDA_VISIBLE_DEVICES".into(), "0,1".into()),
                ("WORLD_SIZE".into(), "4".into()),
                ("HF_HOME".into(), "/data/hf cache, \"quoted\"".into()),
            ],
            cwd: Some("/home/ana/project".into()),
            run_dir: "/state/runs/j/3".into(),
            log_path: "/state/logs/j.log".into(),
            alloc: vec![(1, 2), (0, 2)],
        };
        let r = executor().job_request(&req).unwrap();
        assert_eq!(
            (r.nodes.clone(), r.gpus_per_node),
            (vec!["n2".to_string(), "n1".to_string()], 2)
        );
        assert_eq!(r.gpu_type.as_deref(), Some("t4"));
        assert_eq!(r.env["MASTER_ADDR"], "10.0.0.2");
        assert!(!r.env.contains_key("CUDA_VISIBLE_DEVICES"));
        assert_eq!(r.env["PACER_RUN_ID"], "j:3");
        assert_eq!(r.env["PACER_NODE_NAMES"], "n2,n1");
        assert_eq!(r.env["PACER_NODE_DEVICES"], "2,2");
        // The spec's env travels as is (sbatch's environment, `--export=ALL,NAME…`) and
        // its cwd becomes `--chdir`.
        assert_eq!(r.env["HF_HOME"], "/data/hf cache, \"quoted\"");
        let args = r.sbatch_args("pacer-").unwrap();
        assert!(
            args.contains(&"--chdir=/home/ana/project".to_string()),
            "{args:?}"
        );
        assert!(
            args.iter()
                .any(|a| a.starts_with("--export=ALL,") && a.contains(",HF_HOME")),
            "{args:?}"
        );
        assert!(
            args.contains(&"--job-name=pacer-j.3".to_string()),
            "{args:?}"
        );
        assert!(args.contains(&"--nodelist=n2,n1".to_string()), "{args:?}");
        assert!(args.contains(&"--gres=gpu:t4:2".to_string()), "{args:?}");
        assert!(args.contains(&"--open-mode=append".to_string()), "{args:?}");
        let bad = LaunchRequest {
            alloc: vec![(5, 1)],
            ..req.clone()
        };
        assert!(r.per_task, "two nodes: one rank per node under srun");
        let one = LaunchRequest {
            alloc: vec![(0, 4)],
            ..req.clone()
        };
        let r1 = executor().job_request(&one).unwrap();
        assert!(!r1.per_task, "one node: the batch step runs it");
        assert!(!r1
            .sbatch_args("pacer-")
            .unwrap()
            .iter()
            .any(|a| a.contains("srun")));
        assert!(args.contains(&"--nodes=2".to_string()), "{args:?}");
        assert!(
            args.iter().any(|a| a.starts_with("--wrap=exec srun ")),
            "{args:?}"
        );
        assert!(executor()
            .job_request(&bad)
            .unwrap_err()
            .to_string()
            .contains("no node 5"));
        assert!(!args.iter().any(|a| a.starts_with("--comment")), "{args:?}");
        // Uneven: Slurm holds 3 on both nodes; the plan (3 and 1) rides in the comment.
        let uneven = LaunchRequest {
            alloc: vec![(0, 3), (1, 1)],
            ..req.clone()
        };
        let ru = executor().job_request(&uneven).unwrap();
        assert_eq!((ru.gpus_per_node, ru.planned_gpus.clone()), (3, vec![3, 1]));
        let args = ru.sbatch_args("pacer-").unwrap();
        assert!(
            args.contains(&"--comment=pacer-gpus=n1:3,n2:1".to_string()),
            "{args:?}"
        );
        // Across GRES types (`mixed_types`): untyped GPUs, which both nodes satisfy.
        let mut mixed = executor();
        mixed.gpu_types[1] = Some("a100".into());
        let rm = mixed.job_request(&req).unwrap();
        assert_eq!(rm.gpu_type, None);
        let args = rm.sbatch_args("pacer-").unwrap();
        assert!(args.contains(&"--gres=gpu:2".to_string()), "{args:?}");
        let r1 = mixed.job_request(&one).unwrap();
        assert_eq!(
            r1.gpu_type.as_deref(),
            Some("t4"),
            "one node keeps its type"
        );
    }

    /// A fake Slurm in a scratch directory: `squeue` prints `squeue.json` (or hangs while
    /// `hang` exists) and counts its calls in `squeue.calls`; `scancel` appends its
    /// arguments to `scancel.log`. The directory is removed when the returned guard drops.
    fn fake_slurm(name: &str) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let tmp = crate::scratch_dir(&format!("pacer-fake-slurm-{name}-"));
        let dir = tmp.path();
        let d = dir.display();
        let scripts = [
            (
                "squeue",
                format!(
                    concat!(
                "#!/bin/sh\n[ -e {d}/hang ] && sleep 5\n",
                "id=$(echo \"$*\" | sed -n 's/.*--jobs=\\([0-9]*\\).*/\\1/p')\n",
                "case \"$*\" in\n",
                "  *--steps*) echo \"$*\" >> {d}/steps.calls; cat {d}/steps.txt; exit 0;;\n",
                "  *--format=*) grep \"^$id \" {d}/shape.txt | cut -d' ' -f2-; exit 0;;\n",
                "esac\n",
                "echo x >> {d}/squeue.calls\ncat {d}/squeue.json\n"),
                    d = d
                ),
            ),
            (
                "scancel",
                format!("#!/bin/sh\necho \"$*\" >> {d}/scancel.log\n"),
            ),
        ];
        for (prog, text) in scripts {
            let p = dir.join(prog);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let job = |id: u32, state: &str, nodes: &[&str]| {
            let alloc: Vec<String> = nodes
                .iter()
                .map(|n| format!(r#"{{"nodename":"{n}"}}"#))
                .collect();
            format!(
                r#"{{"job_id":{id},"name":"pacer-j.{id}","user_name":"root","job_state":"{state}",
               "nodes":"{}","job_resources":{{"allocated_nodes":[{}]}}}}"#,
                nodes.join(","),
                alloc.join(",")
            )
        };
        let jobs = [
            job(11, "RUNNING", &["n1"]),
            job(12, "RUNNING", &["n1", "n2"]),
            job(13, "PENDING", &[]),
        ];
        std::fs::write(
            dir.join("squeue.json"),
            format!(r#"{{"jobs":[{}]}}"#, jobs.join(",")),
        )
        .unwrap();
        // Job 12 (two nodes) has its ranks' step running.
        std::fs::write(dir.join("steps.txt"), "12.0\n12.batch\n").unwrap();
        std::fs::write(
            dir.join("shape.txt"),
            "11 RUNNING 1\n12 RUNNING 2\n13 PENDING 2\n",
        )
        .unwrap();
        tmp
    }

    fn fake_executor(dir: &Path) -> SlurmExecutor {
        SlurmExecutor {
            client: Arc::new(
                SlurmClient::new()
                    .with_bin_dir(dir)
                    .with_timeout(Duration::from_millis(300)),
            ),
            ..executor()
        }
    }

    fn handle(id: u32) -> RunHandle {
        RunHandle {
            id: id.to_string(),
            start_ticks: 0,
        }
    }

    /// Lines `scancel` was called with, once `n` have arrived (it runs in the background).
    fn scancel_calls(dir: &Path, n: usize) -> Vec<String> {
        for _ in 0..250 {
            let text = std::fs::read_to_string(dir.join("scancel.log")).unwrap_or_default();
            let mut lines: Vec<String> = text.lines().map(String::from).collect();
            if lines.len() >= n {
                lines.sort();
                return lines;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("scancel was not called {n} times");
    }

    #[tokio::test]
    async fn sigterm_reaches_each_kind_of_run_and_a_pending_run_is_cancelled() {
        let tmp = fake_slurm("signal");
        let dir = tmp.path().to_path_buf();
        let ex = fake_executor(&dir);
        for (id, sig) in [
            (11, StopSignal::Term),
            (12, StopSignal::Term),
            (13, StopSignal::Term),
        ] {
            ex.signal(&handle(id), sig).await.unwrap();
        }
        ex.signal(&handle(12), StopSignal::Kill).await.unwrap();
        // One node: every step, the batch shell's children included; two nodes: the
        // steps only (srun would kill its ranks); pending: cancelled; kill: cancelled.
        assert_eq!(
            scancel_calls(&dir, 4),
            ["--signal=TERM --full 11", "--signal=TERM 12", "12", "13"]
        );
    }

    #[tokio::test]
    async fn sigterm_before_the_ranks_step_exists_cancels_the_run() {
        // Job 12 is RUNNING on two nodes but srun has not started its ranks: only the
        // batch step. A SIGTERM to its steps would reach nobody (measured on the dev
        // cluster: the ranks started afterwards and trained on), so it is cancelled.
        let tmp = fake_slurm("early");
        let dir = tmp.path().to_path_buf();
        std::fs::write(dir.join("steps.txt"), "12.batch\n").unwrap();
        let ex = fake_executor(&dir);
        ex.signal(&handle(12), StopSignal::Term).await.unwrap();
        assert_eq!(scancel_calls(&dir, 1), ["12"]);
        let asked = std::fs::read_to_string(dir.join("steps.calls")).unwrap();
        assert!(asked.contains("--jobs=12"), "{asked}");
        // Once step 0 is there, the same SIGTERM goes to the steps.
        std::fs::write(dir.join("steps.txt"), "12.0\n12.batch\n").unwrap();
        std::fs::remove_file(dir.join("scancel.log")).unwrap();
        ex.signal(&handle(12), StopSignal::Term).await.unwrap();
        assert_eq!(scancel_calls(&dir, 1), ["--signal=TERM 12"]);
    }

    #[tokio::test]
    async fn sigterm_waits_for_no_slurm_and_never_guesses_the_target() {
        // Slurm hangs: signal() returns at once (the round goes on), and nothing is sent
        // on a guess (`--full` to a multi-node run made srun kill its ranks). Once Slurm
        // answers again, a later try sends it where it belongs.
        let tmp = fake_slurm("hang");
        let dir = tmp.path().to_path_buf();
        std::fs::write(dir.join("hang"), "").unwrap();
        let ex = fake_executor(&dir);
        let t = Instant::now();
        ex.signal(&handle(12), StopSignal::Term).await.unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        std::thread::sleep(Duration::from_millis(450));
        assert!(!dir.join("scancel.log").exists(), "sent while Slurm hung");
        std::fs::remove_file(dir.join("hang")).unwrap();
        assert_eq!(scancel_calls(&dir, 1), ["--signal=TERM 12"]);
    }

    #[tokio::test]
    async fn a_round_reads_squeue_once_and_settles_from_exit_files_when_it_hangs() {
        let tmp = fake_slurm("poll");
        let dir = tmp.path().to_path_buf();
        let ex = fake_executor(&dir);
        let run_dir = dir.join("run");
        std::fs::create_dir_all(&run_dir).unwrap();
        for id in [11, 12, 13] {
            assert_eq!(
                ex.poll(&handle(id), &run_dir).await.unwrap(),
                RunStatus::Running
            );
        }
        let calls = std::fs::read_to_string(dir.join("squeue.calls")).unwrap();
        assert_eq!(
            calls.lines().count(),
            1,
            "one squeue for the polls of a round"
        );
        // squeue hangs: each poll gives up after the command's time limit; a run whose exit
        // file is there is settled from it, the others stay running.
        ex.forget_snapshot();
        std::fs::write(dir.join("hang"), "").unwrap();
        let t = Instant::now();
        assert_eq!(
            ex.poll(&handle(11), &run_dir).await.unwrap(),
            RunStatus::Running
        );
        std::fs::write(run_dir.join("exit"), "0\n").unwrap();
        assert_eq!(
            ex.poll(&handle(11), &run_dir).await.unwrap(),
            RunStatus::Exited(0)
        );
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }

    #[test]
    fn down_nodes_and_other_users_gpus_are_taken() {
        let sinfo = r#"{"nodes":[
          {"name":"n1","address":"10.0.0.1","state":"mixed","state_flags":[],"cpus":8,
           "alloc_cpus":1,"gres":"gpu:t4:4","gres_used":"gpu:t4:1(IDX:0)","partitions":["gpu"],
           "active_features":"","reason":""},
          {"name":"n2","address":"10.0.0.2","state":"down","state_flags":["NOT_RESPONDING"],
           "cpus":8,"alloc_cpus":0,"gres":"gpu:t4:4","gres_used":"gpu:t4:0","partitions":["gpu"],
           "active_features":"","reason":"Not responding"}]}"#;
        let nodes = pacer_slurm::parse_sinfo(sinfo).unwrap();
        let cluster = pacer_slurm::Cluster {
            nodes,
            partitions: vec!["gpu".into()],
            jobs: Vec::new(),
        };
        let foreign = [("n1".to_string(), 1)].into_iter().collect();
        assert_eq!(executor().taken_of(&cluster, &foreign), [1, 4]);
        let gone = pacer_slurm::Cluster {
            nodes: Vec::new(),
            ..cluster
        };
        assert_eq!(
            executor().taken_of(&gone, &Default::default()),
            [u32::MAX, u32::MAX]
        );
    }
}
