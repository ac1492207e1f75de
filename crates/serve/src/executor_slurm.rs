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
//! SIGTERM goes to those ranks (Slurm's job steps). The run directory must be on a file
//! system every node shares (on the dev cluster all nodes are this machine). `MASTER_ADDR`
//! is the first node's Slurm address.
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
use std::time::Duration;

use pacer_model::{ClusterSpec, DeviceTypeId, NodeSpec};
use pacer_slurm::{JobRequest, JobState as SlurmState, SignalTarget, SlurmClient};

use crate::error::ServeError;
use crate::executor::{ExecFuture, Executor, LaunchRequest, RunHandle, RunStatus, StopSignal};

/// The wrapper around a job's command, as the local executor's: records that it started
/// (the Slurm job id as `pid`), keeps itself alive through SIGTERM, records the exit status.
/// In a multi-node job every rank runs it (under `srun`); rank 0's status is the run's.
const WRAPPER: &str = r#"d="$0"; r=${SLURM_PROCID:-0}; if [ "$r" = 0 ]; then echo "$SLURM_JOB_ID" > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; fi; trap : TERM; "$@"; s=$?; if [ "$r" = 0 ]; then echo $s > "$d/exit.tmp"; mv "$d/exit.tmp" "$d/exit"; fi; exit $s"#;

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
}

impl SlurmExecutor {
    /// Reads partition `partition` from Slurm (nodes with GPUs; the errors name a missing
    /// Slurm, an unreachable controller, a missing partition or a node without GPUs) and
    /// returns the executor and the cluster the policy plans on.
    pub fn discover(
        client: SlurmClient,
        partition: &str,
    ) -> Result<(Self, ClusterSpec), ServeError> {
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
            client: Arc::new(client),
            partition: partition.to_string(),
            nodes: Vec::new(),
            addresses: Vec::new(),
            gpu_types: Vec::new(),
            failed: Default::default(),
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
        r.gpu_type = self.gpu_types[first.0 as usize].clone();
        r.output = req.log_path.clone();
        r.append_output = true;
        r.requeue = false;
        r.per_task = nodes.len() > 1;
        r.workdir = std::env::current_dir().ok();
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
        Ok(r)
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
            let id = self.blocking(move |c| c.submit(&job)).await?;
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
                    self.blocking(move |c| {
                        // A multi-node job's ranks are job steps; `srun` (the batch step)
                        // would answer SIGTERM by killing them at once.
                        let multi = c.job(id)?.is_some_and(|j| j.nodes.len() > 1);
                        let to = if multi {
                            SignalTarget::Steps
                        } else {
                            SignalTarget::Batch
                        };
                        c.signal(id, "TERM", to)
                    })
                    .await
                }
                StopSignal::Kill => self.blocking(move |c| c.cancel(id)).await,
            }
        })
    }

    fn poll<'a>(&'a self, run: &'a RunHandle, run_dir: &'a Path) -> ExecFuture<'a, RunStatus> {
        Box::pin(async move {
            let id = slurm_id(run)?;
            let job = self.blocking(move |c| c.job(id)).await?;
            let Some(job) = job else {
                return Ok(crate::executor::exit_status(run_dir));
            };
            if job.was_requeued() && !job.state.is_terminal() {
                // Its node failed: Slurm would rerun it ~2 minutes later behind the
                // service's back. End it; the service relaunches from the checkpoint.
                self.blocking(move |c| c.cancel(id)).await?;
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
                self.blocking(move |c| c.cancel(id)).await?;
                return Ok(RunStatus::Lost);
            }
            Ok(match job.state {
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
            let cluster = self.blocking(|c| c.discover()).await?;
            let foreign = cluster.foreign_gpus(self.client.prefix());
            *self.failed.lock().expect("failed nodes lock") = cluster
                .nodes
                .iter()
                .filter(|n| {
                    n.state.base == "down" || n.state.flags.iter().any(|f| f == "NOT_RESPONDING")
                })
                .map(|n| n.name.clone())
                .collect();
            Ok(self.taken_of(&cluster, &foreign))
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
            ],
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
        let args = r.sbatch_args("pacer-").unwrap();
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
