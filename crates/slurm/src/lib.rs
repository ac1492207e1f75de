//! # pacer-slurm
//!
//! A typed client over Slurm's command-line tools, for running pacer's decisions as Slurm
//! jobs. pacer decides which job gets which nodes and how many GPUs on each; this crate
//! turns that into `sbatch --nodelist … --gres=gpu:TYPE:N` and follows the jobs.
//!
//! - [`SlurmClient::discover_for`]: nodes, state, CPUs, GRES types and counts, partitions
//!   and every job (`sinfo --json`, `squeue --json`, `scontrol show partition`); GPUs held by
//!   jobs pacer did not submit are [`Cluster::foreign_gpus`], capacity taken.
//! - [`SlurmClient::submit`]: a [`JobRequest`] (nodes, tasks per node, GPUs per node and
//!   type, environment, output file, `--signal=B:TERM@grace`, requeue) → a job id.
//! - [`SlurmClient::jobs`], [`JobWatch`]: states, and the changes between two looks —
//!   started, requeued (a node failed), ended, vanished.
//! - [`SlurmClient::signal`], [`SlurmClient::cancel`], [`SlurmClient::preempt`] (SIGTERM,
//!   grace, cancel); [`SlurmClient::steps`]: whether the ranks of an `srun` job have started
//!   (a signal to its steps before then reaches nobody).
//!
//! Errors name what is missing: Slurm not installed, controller unreachable, a partition
//! or node that does not exist, a node without the GPUs asked for ([`SlurmError`]).
//!
//! Every command runs with a time limit and bounded output; the client is synchronous
//! (call it from a blocking thread in an async service).
//!
//! Architecture invariant: this crate knows Slurm and nothing of pacer's policies or
//! models; it depends on no other pacer crate. The dev cluster it is tested against is
//! `deploy/slurm/dev-cluster.sh`.

mod client;
mod cluster;
mod cmd;
mod error;
mod hostlist;
mod job;
mod json;

pub use client::{SlurmClient, DEFAULT_PREFIX, PROGRAMS};
pub use cluster::{count_gpus, parse_gres_list, Cluster, Gres, Node, NodeState};
pub use cmd::MAX_OUTPUT_BYTES;
pub use error::SlurmError;
pub use hostlist::{expand_hostlist, MAX_HOSTS};
pub use job::{shell_quote, JobEvent, JobInfo, JobRequest, JobState, JobWatch, SignalTarget};
pub use json::{parse_partitions, parse_sinfo, parse_squeue, parse_state_nodes, parse_steps};
