//! Jobs as submitted: when, which application, what the user asked for.

use serde::{Deserialize, Serialize};

/// Dense job index inside one simulation or controller (0..n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u32);

/// A submitted job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    /// Arrival time in seconds since the start of the trace.
    pub arrival_s: f64,
    /// Application (performance profile) name, e.g. `cifar10`.
    pub application: String,
    /// Devices the user asked for.
    pub requested_replicas: u32,
    /// Global batch size the user asked for.
    pub requested_batch: u32,
    /// Work to do when the application has no convergence profile, in
    /// GPU-seconds at the requested size (trace formats that give a duration).
    pub service_gpu_s: Option<f64>,
    /// Device type the job is pinned to, if any (`None` = any).
    pub device_type: Option<String>,
}
