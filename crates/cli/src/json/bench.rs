//! `pacer bench round|simulate|scale --json`.

use serde::{Deserialize, Serialize};

/// `pacer bench round --json` (synthetic jobs): one report per policy, and the
/// Gavel LPs timed alone when a Gavel policy ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRound {
    pub rounds: Vec<RoundReport>,
    pub gavel_lp: Option<LpReport>,
}

/// One policy's rounds over the synthetic jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundReport {
    pub policy: String,
    pub jobs: usize,
    pub gpus: u32,
    /// First round: every cache empty.
    pub round_ms: f64,
    /// Median of later rounds (10% of jobs changed model, allocations carried over).
    pub warm_round_ms: f64,
    pub allocated_gpus: u32,
    /// The policy's own account (`pacer_policy::Policy::notes`).
    pub notes: String,
}

/// Gavel's LPs from empty allocations: max-min (one LP) and finish-time fairness
/// (its whole bisection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LpReport {
    pub jobs: usize,
    pub device_types: usize,
    pub max_min_ms: f64,
    pub ftf_ms: f64,
    pub ftf_lps: u32,
    pub ftf_max_rho: f64,
}

/// `pacer bench round --workload FILE --json`: every round of one policy's
/// simulation of a real workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimRoundReport {
    pub policy: String,
    pub workload: String,
    pub gpus: u32,
    pub rounds: usize,
    /// Policy time of the first round (ms) and its active jobs.
    pub first_ms: f64,
    pub first_jobs: usize,
    pub median_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    /// Active jobs in the slowest round and the most in any round.
    pub max_ms_jobs: usize,
    pub max_jobs: usize,
    /// The whole simulation (policy and job progress).
    pub sim_wall_s: f64,
    pub avg_jct_h: f64,
    /// The policy's own account of its last round, when it gives one (sia-exact:
    /// solver fallbacks).
    pub notes: String,
}

/// `pacer bench simulate --json`: one (policy, embedded workload) simulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub policy: String,
    pub workload: String,
    pub jobs: usize,
    /// Median wall time of one whole simulation.
    pub wall_ms: f64,
    pub avg_jct_s: f64,
}

/// `pacer bench scale --json`: one (policy, job count) simulation of a synthetic
/// Philly-like trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleReport {
    pub policy: String,
    pub jobs: usize,
    pub finished: usize,
    /// Wall time of the whole simulation (s), trace generation excluded.
    pub wall_s: f64,
    /// CPU time of this process during it (user + system, s); below `wall_s`
    /// when other processes share the cores.
    pub cpu_s: f64,
    pub rounds: usize,
    /// Wall time per round (µs).
    pub round_us: f64,
    /// Most jobs active (arrived, unfinished) in any round.
    pub max_active: u32,
    pub makespan_days: f64,
    pub avg_restarts: f64,
}
