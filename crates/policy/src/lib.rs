//! # pacer-policy
//!
//! Cluster-level scheduling: which job holds which devices. Every policy
//! implements [`Policy`]: given a read-only [`ClusterView`] (the cluster, the
//! active jobs, what each holds now) it returns one [`Allocation`] per job.
//! The simulator and the real runtime both drive policies through this trait; a
//! policy never knows whether time is simulated.
//!
//! Policies (one file each; adding one is a new file plus a line in [`by_name`]):
//! - [`fifo`]: first come, first served, gang-scheduled, non-preemptive;
//! - [`fair`]: work-conserving max-min fair share, re-planned every round;
//! - [`tiresias`]: discretised two-queue least-attained-service (Tiresias 2D-LAS);
//! - [`pollux`]: goodput-driven, maximising the generalised mean (p = −1) of
//!   per-job speedups over fair share, with each job's batch chosen for goodput.
//!
//! Architecture invariant: no I/O, no clock, no randomness without a seed; the
//! only time a policy sees is [`ClusterView::now_s`].

pub mod fair;
pub mod fifo;
pub mod place;
pub mod pollux;
pub mod tiresias;

use pacer_model::{Allocation, ClusterSpec, JobId};
use pacer_predict::goodput::GoodputFn;

/// What a policy may know about one active (arrived, unfinished) job.
#[derive(Debug, Clone)]
pub struct JobView {
    pub id: JobId,
    /// Arrival time (s).
    pub arrival_s: f64,
    /// GPU-seconds the job has held so far.
    pub attained_gpu_s: f64,
    /// Devices the user asked for (fixed-size policies give exactly this).
    pub requested_replicas: u32,
    /// Most devices the job can use now (adaptive policies).
    pub max_replicas: u32,
    /// Times the job has been restarted on a new allocation.
    pub num_restarts: u32,
    /// Devices held now.
    pub current: Allocation,
    /// The job's current goodput model, when it has one (adaptive jobs).
    pub goodput: Option<GoodputFn>,
    /// Changes whenever `goodput` changes, so policies can cache per job.
    pub goodput_version: u64,
}

/// Read-only input of one scheduling round.
#[derive(Debug, Clone, Copy)]
pub struct ClusterView<'a> {
    pub now_s: f64,
    pub cluster: &'a ClusterSpec,
    pub jobs: &'a [JobView],
}

/// A cluster scheduling policy.
pub trait Policy: Send {
    /// Registry name (`fifo`, `fair`, `tiresias`, `pollux`).
    fn name(&self) -> &'static str;

    /// Whether jobs under this policy pick their own batch for goodput (Pollux-style)
    /// rather than keeping the batch the user asked for.
    fn adaptive_batch(&self) -> bool {
        false
    }

    /// One allocation per entry of `view.jobs`, in the same order. The result must
    /// fit the cluster's capacity; drivers check it.
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation>;
}

/// Names accepted by [`by_name`].
pub const POLICY_NAMES: &[&str] = &["fifo", "fair", "tiresias", "pollux"];

/// Builds a policy by registry name.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "fifo" => Some(Box::new(fifo::Fifo)),
        "fair" => Some(Box::new(fair::FairShare)),
        "tiresias" => Some(Box::new(tiresias::Tiresias::default())),
        "pollux" => Some(Box::new(pollux::Pollux::default())),
        _ => None,
    }
}

/// Free devices per node after taking `allocs` out of `cluster`.
pub fn free_per_node(cluster: &ClusterSpec, allocs: &[&Allocation]) -> Vec<u32> {
    let mut free: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
    for a in allocs {
        for &(node, count) in a.slots() {
            free[node.0 as usize] = free[node.0 as usize].saturating_sub(count);
        }
    }
    free
}

/// Checks that `allocs` fit the cluster; returns the first over-subscribed node.
pub fn check_capacity(cluster: &ClusterSpec, allocs: &[Allocation]) -> Result<(), String> {
    let mut used = vec![0u32; cluster.nodes.len()];
    for (j, a) in allocs.iter().enumerate() {
        for &(node, count) in a.slots() {
            let i = node.0 as usize;
            if i >= used.len() {
                return Err(format!(
                    "job #{j} allocated on node {i}, which does not exist"
                ));
            }
            used[i] += count;
            if used[i] > cluster.nodes[i].gpus {
                return Err(format!(
                    "node {i} over-subscribed: {} > {} devices",
                    used[i], cluster.nodes[i].gpus
                ));
            }
        }
    }
    Ok(())
}
