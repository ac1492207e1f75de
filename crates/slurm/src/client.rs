//! [`SlurmClient`]: the Slurm commands, typed.

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, Node};
use crate::cmd::Runner;
use crate::job::{JobInfo, JobRequest, JobState, SignalTarget};
use crate::json::{parse_partitions, parse_sinfo, parse_squeue, parse_state_nodes, parse_steps};
use crate::SlurmError;

/// The programs the client runs.
pub const PROGRAMS: &[&str] = &["sbatch", "squeue", "sinfo", "scancel", "scontrol"];

/// Job names pacer gives its Slurm jobs start with this, unless set otherwise.
pub const DEFAULT_PREFIX: &str = "pacer-";

/// A client of one Slurm cluster, through its command-line tools.
///
/// Every call runs one command with a time limit (30 s unless set); nothing is cached.
#[derive(Debug, Clone)]
pub struct SlurmClient {
    runner: Runner,
    prefix: String,
    cancel_wait: Duration,
}

impl Default for SlurmClient {
    fn default() -> Self {
        Self::new()
    }
}

impl SlurmClient {
    /// Programs from `PATH`, `SLURM_CONF` from the environment, 30 s per command, job
    /// names prefixed `pacer-`.
    pub fn new() -> Self {
        SlurmClient {
            runner: Runner {
                bin_dir: None,
                slurm_conf: None,
                timeout: Duration::from_secs(30),
            },
            prefix: DEFAULT_PREFIX.into(),
            cancel_wait: Duration::from_secs(120),
        }
    }

    /// Take Slurm's programs from `dir` instead of `PATH`.
    pub fn with_bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.runner.bin_dir = Some(dir.into());
        self
    }

    /// Run every command with `SLURM_CONF=path`.
    pub fn with_slurm_conf(mut self, path: impl Into<PathBuf>) -> Self {
        self.runner.slurm_conf = Some(path.into());
        self
    }

    /// Time limit of one command.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.runner.timeout = timeout;
        self
    }

    /// How long [`SlurmClient::preempt`] waits, after cancelling, for the job to end (Slurm
    /// kills what is left after its `KillWait`, 30 s by default, 10 s on the dev cluster);
    /// 120 s unless set.
    pub fn with_cancel_wait(mut self, wait: Duration) -> Self {
        self.cancel_wait = wait;
        self
    }

    /// Prefix of the names of the jobs this client submits (and counts as its own).
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The job-name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Checks that every Slurm program the client uses is installed.
    pub fn check_installed(&self) -> Result<(), SlurmError> {
        for p in PROGRAMS {
            self.runner.locate(p)?;
        }
        Ok(())
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, SlurmError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        self.runner.run(program, &args, &[])
    }

    /// All nodes (`sinfo --json`).
    pub fn nodes(&self) -> Result<Vec<Node>, SlurmError> {
        parse_sinfo(&self.run("sinfo", &["--json"])?)
    }

    /// All partition names (`scontrol show partition --oneliner`).
    pub fn partitions(&self) -> Result<Vec<String>, SlurmError> {
        Ok(parse_partitions(
            &self.run("scontrol", &["show", "partition", "--oneliner"])?,
        ))
    }

    /// All jobs the controller remembers, any user (`squeue --json`).
    pub fn jobs(&self) -> Result<Vec<JobInfo>, SlurmError> {
        parse_squeue(&self.run("squeue", &["--json"])?)
    }

    /// The steps Slurm lists for job `id` now (`squeue --steps`): the part after `ID.`
    /// (`batch`, `extern`, `0`, `1`, …); empty when it has none yet, or has ended.
    ///
    /// Measured on the dev cluster: a 2-node `srun` job is `RUNNING` with only `batch`
    /// for ~0.2-1.4 s before step `0` (its ranks) appears, and `scancel --signal=TERM`
    /// ([`SignalTarget::Steps`]) in that window exits 0 and reaches nobody: the ranks start
    /// afterwards and run on (still training 80 s later).
    pub fn steps(&self, id: u64) -> Result<Vec<String>, SlurmError> {
        let jobs = format!("--jobs={id}");
        let out = self.run("squeue", &["--steps", &jobs, "--noheader", "--format=%i"])?;
        parse_steps(&out, id)
    }

    /// Job `id`'s state and node count now, from a query of this job alone (`squeue
    /// --jobs=ID --states=all --format="%T %D"`: cheap where `squeue --json` prints every
    /// job the controller remembers); `None` once Slurm no longer knows it.
    pub fn job_state_nodes(&self, id: u64) -> Result<Option<(JobState, u32)>, SlurmError> {
        let jobs = format!("--jobs={id}");
        let args = [&jobs, "--states=all", "--noheader", "--format=%T %D"];
        match self.run("squeue", &args) {
            Ok(out) => parse_state_nodes(&out),
            // An id Slurm has forgotten: `slurm_load_jobs error: Invalid job id specified`.
            Err(SlurmError::Command { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether job `id` has a step of tasks (`srun`'s, numbered) that a signal to
    /// [`SignalTarget::Steps`] would reach.
    pub fn has_task_step(&self, id: u64) -> Result<bool, SlurmError> {
        Ok(self
            .steps(id)?
            .iter()
            .any(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())))
    }

    /// One job, or `None` when Slurm no longer lists it.
    pub fn job(&self, id: u64) -> Result<Option<JobInfo>, SlurmError> {
        Ok(self.jobs()?.into_iter().find(|j| j.id == id))
    }

    /// Nodes, partitions and jobs in one snapshot.
    ///
    /// Slurm has no single call for both, so the jobs are read first: a job squeue shows
    /// running was allocated before sinfo is asked, and its GPUs are in the nodes' used GRES
    /// (read the other way round, a job starting between the two calls showed as running on a
    /// node whose GPUs all looked free).
    pub fn discover(&self) -> Result<Cluster, SlurmError> {
        let jobs = self.jobs()?;
        Ok(Cluster {
            nodes: self.nodes()?,
            partitions: self.partitions()?,
            jobs,
        })
    }

    /// The cluster pacer will run on: `partition` must exist and, when `need_gpus`, every
    /// node in it must have GPUs. The errors name the partition or the node.
    pub fn discover_for(&self, partition: &str, need_gpus: bool) -> Result<Cluster, SlurmError> {
        self.check_installed()?;
        let cluster = self.discover()?;
        let nodes = cluster.partition_nodes(partition)?;
        if need_gpus {
            if let Some(n) = nodes.iter().find(|n| n.gpus(None) == 0) {
                return Err(SlurmError::NotEnoughGpus {
                    node: n.name.clone(),
                    have: "no GPUs".into(),
                    gres: n.gres_text.clone(),
                    need: format!("GPUs (every node of partition `{partition}`)"),
                });
            }
        }
        Ok(cluster)
    }

    /// Submits `req` (`sbatch --parsable`) and returns the Slurm job id. Checks the request
    /// first; sbatch's own refusals are mapped to the error naming what is missing.
    pub fn submit(&self, req: &JobRequest) -> Result<u64, SlurmError> {
        let args = req.sbatch_args(&self.prefix)?;
        let env: Vec<(String, String)> = req
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let out = match self.runner.run("sbatch", &args, &env) {
            Ok(out) => out,
            Err(SlurmError::Command {
                stderr,
                command,
                status,
            }) => return Err(sbatch_refusal(req, &command, &status, stderr)),
            Err(e) => return Err(e),
        };
        // `--parsable` prints `id` or `id;cluster`.
        let first = out.trim().split(';').next().unwrap_or("");
        first.parse().map_err(|_| SlurmError::Parse {
            what: "`sbatch --parsable` output".into(),
            why: format!("expected a job id, got `{}`", out.trim()),
        })
    }

    /// Checks `req` against a snapshot of the cluster, then submits it.
    pub fn submit_checked(&self, req: &JobRequest, cluster: &Cluster) -> Result<u64, SlurmError> {
        cluster.validate(req)?;
        self.submit(req)
    }

    /// Sends `signal` (`TERM`, `INT`, `USR1`, …) to the job's processes in `target` (for a
    /// submitted request: [`JobRequest::signal_target`]), without ending the job.
    pub fn signal(&self, id: u64, signal: &str, target: SignalTarget) -> Result<(), SlurmError> {
        if signal.is_empty() || !signal.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(SlurmError::InvalidRequest {
                job: id.to_string(),
                why: format!("`{signal}` is not a signal name"),
            });
        }
        let sig = format!("--signal={signal}");
        let id = id.to_string();
        match target {
            SignalTarget::Steps => self.scancel(&[&sig, &id]),
            SignalTarget::Batch => self.scancel(&[&sig, "--batch", &id]),
            SignalTarget::All => self.scancel(&[&sig, "--full", &id]),
        }
    }

    /// Cancels the job (Slurm sends SIGTERM, then SIGKILL after `KillWait`). A job already
    /// ended is not an error.
    pub fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        self.scancel(&[&id.to_string()])
    }

    fn scancel(&self, args: &[&str]) -> Result<(), SlurmError> {
        match self.run("scancel", args) {
            Ok(_) => Ok(()),
            Err(SlurmError::Command { stderr, .. })
                if stderr.contains("already completing or completed") =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Asks Slurm to requeue a running job (`scontrol requeue`).
    pub fn requeue(&self, id: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &["requeue", &id.to_string()])
            .map(|_| ())
    }

    /// Preempts a job: SIGTERM to its processes in `target`, up to `grace` for it to end by itself
    /// (checkpoint and exit), then cancel and wait for the end (see
    /// [`SlurmClient::with_cancel_wait`]). Returns the state it ended in (or `None` when
    /// Slurm no longer lists it). Polls every `poll`.
    pub fn preempt(
        &self,
        id: u64,
        target: SignalTarget,
        grace: Duration,
        poll: Duration,
    ) -> Result<Option<JobState>, SlurmError> {
        self.signal(id, "TERM", target)?;
        let start = Instant::now();
        loop {
            match self.job(id)? {
                None => return Ok(None),
                Some(j) if j.state.is_terminal() => return Ok(Some(j.state)),
                Some(_) if start.elapsed() >= grace => break,
                Some(_) => thread::sleep(poll),
            }
        }
        self.cancel(id)?;
        let deadline = Instant::now() + self.cancel_wait;
        while Instant::now() < deadline {
            match self.job(id)? {
                None => return Ok(None),
                Some(j) if j.state.is_terminal() => return Ok(Some(j.state)),
                Some(_) => thread::sleep(poll),
            }
        }
        Err(SlurmError::Timeout {
            command: format!("scancel {id} (waiting for the job to end)"),
            after: self.cancel_wait,
        })
    }
}

/// sbatch's refusals, named.
fn sbatch_refusal(req: &JobRequest, command: &str, status: &str, stderr: String) -> SlurmError {
    let lower = stderr.to_ascii_lowercase();
    if lower.contains("invalid partition") {
        return SlurmError::NoSuchPartition {
            partition: req.partition.clone(),
            known: "see `sinfo`".into(),
        };
    }
    if lower.contains("invalid node name") {
        return SlurmError::NoSuchNode {
            node: req.nodes.join(","),
            scope: "the cluster".into(),
            known: "see `sinfo`".into(),
        };
    }
    if lower.contains("invalid generic resource")
        || lower.contains("requested node configuration is not available")
    {
        return SlurmError::NotEnoughGpus {
            node: req.nodes.join(","),
            have: "not what was asked".into(),
            gres: stderr.trim().into(),
            need: format!(
                "{} GPUs{} per node",
                req.gpus_per_node,
                req.gpu_type
                    .as_ref()
                    .map(|t| format!(" of type {t}"))
                    .unwrap_or_default()
            ),
        };
    }
    SlurmError::Command {
        command: command.into(),
        status: status.into(),
        stderr,
    }
}
