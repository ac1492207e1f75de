//! A job pacer asks Slurm to run ([`JobRequest`] → `sbatch` arguments), what Slurm says about
//! a job ([`JobInfo`], [`JobState`]), and the changes between two looks ([`JobWatch`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::cluster::{count_gpus, Gres};
use crate::SlurmError;

/// Prefix of the job comment that carries an uneven plan ([`JobRequest::plan_comment`]).
pub const PLAN_COMMENT: &str = "pacer-gpus=";

/// A job pinned to nodes and GPU counts, as pacer decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// pacer's name for the job; Slurm sees the client's prefix before it.
    pub name: String,
    /// Partition.
    pub partition: String,
    /// The exact nodes (`--nodelist`, `--nodes` = their count).
    pub nodes: Vec<String>,
    /// Tasks (processes) per node.
    pub tasks_per_node: u32,
    /// CPUs per task, if not Slurm's default (1).
    pub cpus_per_task: Option<u32>,
    /// GPUs on each node (0: none).
    pub gpus_per_node: u32,
    /// GPUs pacer plans to use on each node, in `nodes` order, when fewer than
    /// `gpus_per_node` on some (an uneven placement; empty: `gpus_per_node` on
    /// each). `--gres` is per node, so Slurm holds `gpus_per_node` everywhere; the
    /// plan travels in the job's comment ([`JobInfo::planned_gpus`]) so that the
    /// surplus Slurm holds can be counted as taken.
    pub planned_gpus: Vec<u32>,
    /// GPU type (`--gres=gpu:TYPE:N`); `None` takes any type.
    pub gpu_type: Option<String>,
    /// Seconds before the time limit at which Slurm sends SIGTERM to the batch step
    /// (`--signal=B:TERM@grace`); only meaningful with `time_limit_min`.
    pub grace_s: Option<u32>,
    /// Time limit in minutes (`--time`); `None` is the partition's.
    pub time_limit_min: Option<u32>,
    /// Environment added to the job (rendezvous, checkpoint directory, …).
    pub env: BTreeMap<String, String>,
    /// The job's output file (`%j` is the job id); stderr goes to the same file.
    pub output: PathBuf,
    /// Append to the output file (`--open-mode=append`) instead of truncating it.
    pub append_output: bool,
    /// Working directory; `None` is the submitting process's.
    pub workdir: Option<PathBuf>,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Start `command` once per task with `srun` (multi-node jobs: each task gets
    /// `SLURM_PROCID`, `SLURM_NODEID`, …); `false` runs it once, in the batch step.
    pub per_task: bool,
    /// Let Slurm requeue the job when its node fails (`--requeue`).
    pub requeue: bool,
}

impl JobRequest {
    /// A request with Slurm's defaults for everything but what is named.
    pub fn new(
        name: &str,
        partition: &str,
        nodes: &[&str],
        gpus_per_node: u32,
        command: &[&str],
    ) -> Self {
        JobRequest {
            name: name.into(),
            partition: partition.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            tasks_per_node: 1,
            cpus_per_task: None,
            gpus_per_node,
            planned_gpus: Vec::new(),
            gpu_type: None,
            grace_s: None,
            time_limit_min: None,
            env: BTreeMap::new(),
            output: PathBuf::from("slurm-%j.out"),
            append_output: false,
            workdir: None,
            command: command.iter().map(|c| c.to_string()).collect(),
            per_task: false,
            requeue: true,
        }
    }

    /// `pacer-gpus=NODE:N,…` for an uneven placement (see `planned_gpus`); `None`
    /// when every node uses `gpus_per_node`.
    pub fn plan_comment(&self) -> Option<String> {
        if self.planned_gpus.iter().all(|&g| g >= self.gpus_per_node) {
            return None;
        }
        let per_node: Vec<String> = self
            .nodes
            .iter()
            .zip(&self.planned_gpus)
            .map(|(n, g)| format!("{n}:{g}"))
            .collect();
        Some(format!("{PLAN_COMMENT}{}", per_node.join(",")))
    }

    /// Where a signal must go to reach the job's training processes (see [`SignalTarget`]).
    pub fn signal_target(&self) -> SignalTarget {
        if self.per_task {
            SignalTarget::Steps
        } else {
            SignalTarget::All
        }
    }

    /// Checks what can be checked without the cluster.
    pub fn check(&self) -> Result<(), SlurmError> {
        let bad = |why: String| SlurmError::InvalidRequest {
            job: self.name.clone(),
            why,
        };
        let word = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        };
        if !word(&self.name) {
            return Err(bad(
                "the name must be non-empty letters, digits, `.`, `_`, `-`".into(),
            ));
        }
        if !word(&self.partition) {
            return Err(bad(format!(
                "partition `{}` is not a Slurm name",
                self.partition
            )));
        }
        if self.nodes.is_empty() {
            return Err(bad("no nodes: a request names the nodes it runs on".into()));
        }
        let mut seen = BTreeSet::new();
        for n in &self.nodes {
            if !word(n) {
                return Err(bad(format!("node `{n}` is not a Slurm node name")));
            }
            if !seen.insert(n) {
                return Err(bad(format!("node `{n}` is named twice")));
            }
        }
        if self.tasks_per_node == 0 || self.cpus_per_task == Some(0) {
            return Err(bad(
                "tasks per node and CPUs per task must be at least 1".into()
            ));
        }
        if let Some(t) = &self.gpu_type {
            if !word(t) {
                return Err(bad(format!("GPU type `{t}` is not a GRES type")));
            }
        }
        if self.command.is_empty() {
            return Err(bad("no command".into()));
        }
        for k in self.env.keys() {
            let ok = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                return Err(bad(format!("environment variable name `{k}` is not NAME")));
            }
        }
        Ok(())
    }

    /// The `sbatch` arguments for this request (`prefix` + name as the job name). The
    /// environment's values are not in the arguments: the client sets them on the `sbatch`
    /// process and `--export=ALL,NAME…` carries them into the job, so any value (commas,
    /// quotes) arrives unchanged.
    pub fn sbatch_args(&self, prefix: &str) -> Result<Vec<String>, SlurmError> {
        self.check()?;
        let mut a = vec![
            "--parsable".to_string(),
            format!("--job-name={prefix}{}", self.name),
            format!("--partition={}", self.partition),
            format!("--nodes={}", self.nodes.len()),
            format!("--nodelist={}", self.nodes.join(",")),
            format!("--ntasks-per-node={}", self.tasks_per_node),
        ];
        if let Some(c) = self.cpus_per_task {
            a.push(format!("--cpus-per-task={c}"));
        }
        if self.gpus_per_node > 0 {
            a.push(match &self.gpu_type {
                Some(t) => format!("--gres=gpu:{t}:{}", self.gpus_per_node),
                None => format!("--gres=gpu:{}", self.gpus_per_node),
            });
        }
        if let Some(c) = self.plan_comment() {
            a.push(format!("--comment={c}"));
        }
        if let Some(g) = self.grace_s {
            // To the processes that train: the steps under srun (srun itself would answer
            // SIGTERM by killing them), or the batch step's processes.
            let to = if self.per_task { "" } else { "B:" };
            a.push(format!("--signal={to}TERM@{g}"));
        }
        if let Some(t) = self.time_limit_min {
            a.push(format!("--time={t}"));
        }
        let mut export = String::from("--export=ALL");
        for k in self.env.keys() {
            export.push(',');
            export.push_str(k);
        }
        a.push(export);
        a.push(format!("--output={}", self.output.display()));
        if self.append_output {
            a.push("--open-mode=append".into());
        }
        if let Some(d) = &self.workdir {
            a.push(format!("--chdir={}", d.display()));
        }
        a.push(
            if self.requeue {
                "--requeue"
            } else {
                "--no-requeue"
            }
            .into(),
        );
        let argv: Vec<String> = self.command.iter().map(|c| shell_quote(c)).collect();
        a.push(format!(
            "--wrap=exec {}{}",
            if self.per_task {
                "srun --kill-on-bad-exit=1 "
            } else {
                ""
            },
            argv.join(" ")
        ));
        Ok(a)
    }
}

/// Which of a job's processes a signal goes to.
///
/// Measured on the dev cluster: SIGTERM to an `srun` (the batch step of a per-task job)
/// makes it kill its tasks at once (`srun: forcing job termination`), so a per-task job is
/// signalled in its steps only; a job that runs in the batch step is signalled there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalTarget {
    /// Every step but the batch step (`scancel --signal=SIG`): the tasks `srun` started.
    Steps,
    /// The batch shell only (`scancel --signal=SIG --batch`): its children (the command a
    /// wrapper runs) do not get it. Measured: a job run by a wrapper that traps SIGTERM
    /// never saw it (still running 4 s later); with `All` it had it within 0.03 s.
    Batch,
    /// Every step, the batch step with all its processes (`scancel --signal=SIG --full`):
    /// what reaches a command a batch script runs.
    All,
}

/// `s` quoted for a POSIX shell (`'…'`, with `'` as `'\''`).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A Slurm job state (`JOB_STATE` in squeue's JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobState {
    /// Waiting for resources (or requeued and waiting again).
    Pending,
    /// Nodes being readied.
    Configuring,
    /// Running.
    Running,
    /// Stopped by a signal and kept (scontrol suspend).
    Suspended,
    /// Finished, processes being cleaned up.
    Completing,
    /// Exited 0.
    Completed,
    /// Cancelled (scancel, or by an admin).
    Cancelled,
    /// Exited non-zero.
    Failed,
    /// Hit its time limit.
    Timeout,
    /// A node of the job failed.
    NodeFail,
    /// Preempted by Slurm.
    Preempted,
    /// Being requeued.
    Requeued,
    /// Requeued and held.
    RequeueHold,
    /// Out of memory.
    OutOfMemory,
    /// Anything else Slurm reports (`BOOT_FAIL`, `DEADLINE`, …), as printed.
    Other(String),
}

impl JobState {
    /// From Slurm's upper-case name.
    pub fn parse(s: &str) -> Self {
        match s {
            "PENDING" => JobState::Pending,
            "CONFIGURING" => JobState::Configuring,
            "RUNNING" => JobState::Running,
            "SUSPENDED" => JobState::Suspended,
            "COMPLETING" => JobState::Completing,
            "COMPLETED" => JobState::Completed,
            "CANCELLED" => JobState::Cancelled,
            "FAILED" => JobState::Failed,
            "TIMEOUT" => JobState::Timeout,
            "NODE_FAIL" => JobState::NodeFail,
            "PREEMPTED" => JobState::Preempted,
            "REQUEUED" => JobState::Requeued,
            "REQUEUE_HOLD" => JobState::RequeueHold,
            "OUT_OF_MEMORY" => JobState::OutOfMemory,
            other => JobState::Other(other.to_string()),
        }
    }

    /// The job will not run again without a resubmission.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            JobState::Completed
                | JobState::Cancelled
                | JobState::Failed
                | JobState::Timeout
                | JobState::NodeFail
                | JobState::Preempted
                | JobState::OutOfMemory
        ) || matches!(self, JobState::Other(s) if ["BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"].contains(&s.as_str()))
    }

    /// The job holds nodes and GPUs now.
    pub fn holds_resources(&self) -> bool {
        matches!(
            self,
            JobState::Running | JobState::Configuring | JobState::Completing | JobState::Suspended
        )
    }
}

/// What Slurm reports about one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// Slurm job id.
    pub id: u64,
    /// Job name (pacer's prefix + pacer's name for pacer's jobs).
    pub name: String,
    /// Owner.
    pub user: String,
    /// State.
    pub state: JobState,
    /// Why it is pending or how it ended (`Resources`, `BeginTime`, `NodeDown`, `None`, …).
    pub reason: String,
    /// Partition.
    pub partition: String,
    /// Allocated nodes (empty while pending).
    pub nodes: Vec<String>,
    /// GRES allocated on each node, in `nodes` order (empty while pending).
    pub gres_per_node: Vec<(String, Vec<Gres>)>,
    /// GRES requested per node (`--gres`).
    pub gres_requested_per_node: Vec<Gres>,
    /// How many times Slurm requeued it (`restart_cnt`).
    pub restart_count: u32,
    /// Unix seconds.
    pub submit_time: i64,
    /// Unix seconds from which it may start (a requeued job's is ~2 minutes after the
    /// requeue).
    pub eligible_time: i64,
    /// Unix seconds (expected start while pending).
    pub start_time: i64,
    /// Unix seconds (expected end while running).
    pub end_time: i64,
    /// Exit code as Slurm encodes it (status << 8 | signal, from `wait`).
    pub exit_code: i64,
    /// Slurm may requeue it.
    pub requeue: bool,
    /// Node running the batch step.
    pub batch_host: Option<String>,
    /// The job's comment (`--comment`; empty when none).
    pub comment: String,
}

impl JobInfo {
    /// GPUs pacer planned to use on each node of an uneven placement, from the
    /// comment [`JobRequest::plan_comment`] wrote; `None` without one (or when it
    /// does not parse: then what Slurm holds is the plan).
    pub fn planned_gpus(&self) -> Option<BTreeMap<String, u32>> {
        let list = self.comment.strip_prefix(PLAN_COMMENT)?;
        list.split(',')
            .map(|kv| {
                let (node, n) = kv.rsplit_once(':')?;
                Some((node.to_string(), n.parse().ok()?))
            })
            .collect()
    }

    /// GPUs allocated on `node`.
    pub fn gpus_on(&self, node: &str) -> u32 {
        self.gres_per_node
            .iter()
            .filter(|(n, _)| n == node)
            .map(|(_, g)| count_gpus(g, None))
            .sum()
    }

    /// Whether Slurm has requeued it at least once.
    pub fn was_requeued(&self) -> bool {
        self.restart_count > 0 || matches!(self.state, JobState::Requeued | JobState::RequeueHold)
    }
}

/// A change between two looks at the jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEvent {
    /// It began to run, on these nodes.
    Started {
        /// Job id.
        id: u64,
        /// Its nodes.
        nodes: Vec<String>,
    },
    /// Slurm requeued it (a node failed, or `scontrol requeue`): it is no longer running.
    Requeued {
        /// Job id.
        id: u64,
        /// Times requeued so far.
        restart_count: u32,
    },
    /// It ended.
    Ended {
        /// Job id.
        id: u64,
        /// How.
        state: JobState,
    },
    /// Slurm no longer lists it (it ended more than `MinJobAge` ago, or was purged).
    Vanished {
        /// Job id.
        id: u64,
    },
}

/// Follows a set of jobs across squeue snapshots and reports what changed.
#[derive(Debug, Default, Clone)]
pub struct JobWatch {
    last: BTreeMap<u64, (JobState, u32)>,
}

impl JobWatch {
    /// Follow job `id` from now on (after submitting or adopting it).
    pub fn follow(&mut self, id: u64) {
        self.last.entry(id).or_insert((JobState::Pending, 0));
    }

    /// Jobs followed.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.last.keys().copied()
    }

    /// Compares a new snapshot (all jobs squeue reported) with the last one, for the
    /// followed jobs. Ended and vanished jobs stop being followed.
    pub fn update(&mut self, snapshot: &[JobInfo]) -> Vec<JobEvent> {
        let mut events = Vec::new();
        let ids: Vec<u64> = self.last.keys().copied().collect();
        for id in ids {
            let Some(job) = snapshot.iter().find(|j| j.id == id) else {
                self.last.remove(&id);
                events.push(JobEvent::Vanished { id });
                continue;
            };
            let (old_state, old_restarts) = self.last[&id].clone();
            if job.restart_count > old_restarts {
                events.push(JobEvent::Requeued {
                    id,
                    restart_count: job.restart_count,
                });
            }
            if job.state.holds_resources()
                && (!old_state.holds_resources() || job.restart_count > old_restarts)
            {
                events.push(JobEvent::Started {
                    id,
                    nodes: job.nodes.clone(),
                });
            }
            if job.state.is_terminal() {
                self.last.remove(&id);
                events.push(JobEvent::Ended {
                    id,
                    state: job.state.clone(),
                });
            } else {
                self.last.insert(id, (job.state.clone(), job.restart_count));
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_arguments_pin_nodes_and_gpus() {
        let mut r = JobRequest::new(
            "j1",
            "gpu",
            &["n1", "n2"],
            2,
            &["python3", "train.py", "--lr=0.1"],
        );
        r.gpu_type = Some("t4".into());
        r.grace_s = Some(30);
        r.per_task = true;
        r.env.insert("PACER_CKPT".into(), "/ck/a,b".into());
        let a = r.sbatch_args("pacer-").unwrap();
        for want in [
            "--parsable",
            "--job-name=pacer-j1",
            "--partition=gpu",
            "--nodes=2",
            "--nodelist=n1,n2",
            "--ntasks-per-node=1",
            "--gres=gpu:t4:2",
            "--signal=TERM@30",
            "--export=ALL,PACER_CKPT",
            "--requeue",
            "--wrap=exec srun --kill-on-bad-exit=1 'python3' 'train.py' '--lr=0.1'",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} not in {a:?}");
        }
        // The value travels in sbatch's environment, not on its command line.
        assert!(!a.iter().any(|x| x.contains("/ck/a,b")));
    }

    #[test]
    fn bad_requests_are_refused_with_the_reason() {
        let ok = JobRequest::new("j", "gpu", &["n1"], 0, &["true"]);
        assert!(ok.check().is_ok());
        let cases: Vec<(JobRequest, &str)> = vec![
            (
                JobRequest {
                    nodes: vec![],
                    ..ok.clone()
                },
                "no nodes",
            ),
            (
                JobRequest {
                    nodes: vec!["n1".into(), "n1".into()],
                    ..ok.clone()
                },
                "twice",
            ),
            (
                JobRequest {
                    name: "a b".into(),
                    ..ok.clone()
                },
                "name",
            ),
            (
                JobRequest {
                    nodes: vec!["n[1-2]".into()],
                    ..ok.clone()
                },
                "n[1-2]",
            ),
            (
                JobRequest {
                    command: vec![],
                    ..ok.clone()
                },
                "no command",
            ),
            (
                JobRequest {
                    tasks_per_node: 0,
                    ..ok.clone()
                },
                "at least 1",
            ),
        ];
        for (req, want) in cases {
            let err = req.sbatch_args("p-").unwrap_err().to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
        let mut r = ok.clone();
        r.env.insert("A=B".into(), "x".into());
        assert!(r.check().unwrap_err().to_string().contains("A=B"));
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    fn info(id: u64, state: JobState, restarts: u32) -> JobInfo {
        JobInfo {
            id,
            name: "pacer-x".into(),
            user: "root".into(),
            state,
            reason: String::new(),
            partition: "gpu".into(),
            nodes: vec!["n1".into()],
            gres_per_node: vec![],
            gres_requested_per_node: vec![],
            restart_count: restarts,
            submit_time: 0,
            eligible_time: 0,
            start_time: 0,
            end_time: 0,
            exit_code: 0,
            requeue: true,
            batch_host: None,
            comment: String::new(),
        }
    }

    #[test]
    fn an_uneven_plan_travels_in_the_comment_and_comes_back() {
        let mut r = JobRequest::new("j", "gpu", &["n2", "n1"], 3, &["true"]);
        assert_eq!(r.plan_comment(), None, "no plan: every node uses 3");
        r.planned_gpus = vec![3, 3];
        assert_eq!(r.plan_comment(), None, "an even plan needs no comment");
        r.planned_gpus = vec![3, 1];
        assert_eq!(r.plan_comment().as_deref(), Some("pacer-gpus=n2:3,n1:1"));
        let args = r.sbatch_args("pacer-").unwrap();
        assert!(args.contains(&"--gres=gpu:3".to_string()), "{args:?}");
        assert!(
            args.contains(&"--comment=pacer-gpus=n2:3,n1:1".to_string()),
            "{args:?}"
        );
        let mut j = info(1, JobState::Running, 0);
        j.comment = r.plan_comment().unwrap();
        let plan = j.planned_gpus().unwrap();
        assert_eq!(
            plan.into_iter().collect::<Vec<_>>(),
            [("n1".to_string(), 1), ("n2".to_string(), 3)]
        );
        for bad in [
            "",
            "pacer-gpus=",
            "pacer-gpus=n1",
            "pacer-gpus=n1:x",
            "other",
        ] {
            j.comment = bad.into();
            assert_eq!(j.planned_gpus(), None, "{bad:?}");
        }
    }

    #[test]
    fn watch_reports_start_requeue_restart_end_and_vanish() {
        let mut w = JobWatch::default();
        w.follow(7);
        w.follow(8);
        assert_eq!(
            w.update(&[info(7, JobState::Pending, 0), info(8, JobState::Pending, 0)]),
            vec![]
        );
        let e = w.update(&[info(7, JobState::Running, 0), info(8, JobState::Pending, 0)]);
        assert_eq!(
            e,
            vec![JobEvent::Started {
                id: 7,
                nodes: vec!["n1".into()]
            }]
        );
        let e = w.update(&[info(7, JobState::Pending, 1), info(8, JobState::Pending, 0)]);
        assert_eq!(
            e,
            vec![JobEvent::Requeued {
                id: 7,
                restart_count: 1
            }]
        );
        let e = w.update(&[info(7, JobState::Running, 1)]);
        assert_eq!(
            e,
            vec![
                JobEvent::Started {
                    id: 7,
                    nodes: vec!["n1".into()]
                },
                JobEvent::Vanished { id: 8 }
            ]
        );
        let e = w.update(&[info(7, JobState::Completed, 1)]);
        assert_eq!(
            e,
            vec![JobEvent::Ended {
                id: 7,
                state: JobState::Completed
            }]
        );
        assert_eq!(w.ids().count(), 0);
    }
}
