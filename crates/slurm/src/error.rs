//! Everything that can go wrong talking to Slurm, each naming what is missing.

use std::time::Duration;

/// An error from the Slurm client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SlurmError {
    /// A Slurm command is not installed where we look.
    #[error("Slurm is not installed: `{program}` was not found {place} (install slurm-wlm, or point the client at Slurm's bin directory)")]
    NotInstalled {
        /// The program, e.g. `sbatch`.
        program: String,
        /// Where it was looked for, e.g. `on PATH`.
        place: String,
    },
    /// The controller (slurmctld) did not answer.
    #[error("the Slurm controller is unreachable (`{command}`): {stderr}")]
    Unreachable {
        /// The command line that failed.
        command: String,
        /// What the command said.
        stderr: String,
    },
    /// A command ran past its time limit and was killed.
    #[error("`{command}` did not finish within {after:?} (is the Slurm controller up? is SLURM_CONF right?)")]
    Timeout {
        /// The command line.
        command: String,
        /// The limit.
        after: Duration,
    },
    /// A command exited with an error not classified above.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status, e.g. `exit status: 1`.
        status: String,
        /// What it said on stderr.
        stderr: String,
    },
    /// The partition does not exist.
    #[error("Slurm partition `{partition}` does not exist (partitions: {known})")]
    NoSuchPartition {
        /// The partition asked for.
        partition: String,
        /// The partitions there are, comma-separated.
        known: String,
    },
    /// A node named in a request is not in the cluster (or not in the partition).
    #[error("Slurm node `{node}` is not in {scope} (nodes: {known})")]
    NoSuchNode {
        /// The node asked for.
        node: String,
        /// The cluster or partition looked in.
        scope: String,
        /// The nodes there are.
        known: String,
    },
    /// A node has fewer GPUs (of the type asked for) than a request needs.
    #[error("Slurm node `{node}` has {have} (GRES `{gres}`) but the request needs {need} per node; configure them in gres.conf/slurm.conf or choose other nodes")]
    NotEnoughGpus {
        /// The node.
        node: String,
        /// What it has, e.g. `no GPUs` or `2 GPUs of type t4`.
        have: String,
        /// Its GRES string as Slurm reports it.
        gres: String,
        /// What the request needs, e.g. `4 GPUs of type v100`.
        need: String,
    },
    /// A request that cannot be turned into a Slurm job.
    #[error("invalid Slurm job request `{job}`: {why}")]
    InvalidRequest {
        /// The job's name.
        job: String,
        /// What is wrong.
        why: String,
    },
    /// Output of a Slurm command that does not parse.
    #[error("cannot parse {what}: {why}")]
    Parse {
        /// What was being parsed, e.g. `squeue --json output`.
        what: String,
        /// Why.
        why: String,
    },
    /// The operating system refused to run a command.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
}
