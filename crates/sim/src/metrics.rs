//! What a simulation measured: per-job results, the per-round timeline, and the
//! summary every policy is compared on (JCT statistics, makespan, queueing delay,
//! utilisation, finish-time fairness ρ = T_shared / T_independent).

use serde::{Deserialize, Serialize};

/// One job's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct JobResult {
    pub name: String,
    pub application: String,
    pub arrival_s: f64,
    /// First time the job held devices.
    pub start_s: Option<f64>,
    pub completion_s: Option<f64>,
    pub restarts: u32,
    /// Device-seconds held (including restart delays).
    pub gpu_s: f64,
    /// Average number of active jobs while this job was active (N in ρ).
    pub avg_contention: f64,
    /// T_independent: time alone on a 1/N share.
    pub independent_s: f64,
    /// The job's deadline (s since the trace's start); `None`: best effort.
    pub deadline_s: Option<f64>,
    /// Restart delay paid (s); the planned finish is the completion less this.
    pub restart_paid_s: f64,
    /// The work done, in seconds of one device of its fastest type (cluster
    /// efficiency's numerator).
    pub one_device_s: f64,
    /// Device-seconds held on allocations across device types
    /// (`SimConfig::mixed_types`; 0 without it).
    pub mixed_gpu_s: f64,
}

impl JobResult {
    pub fn jct_s(&self) -> Option<f64> {
        self.completion_s.map(|c| c - self.arrival_s)
    }

    pub fn queueing_s(&self) -> Option<f64> {
        self.start_s.map(|s| s - self.arrival_s)
    }

    /// Whether a deadline job finished by its deadline, counted strictly (its
    /// completion, restart delays included) and as planned (restart delays left
    /// out, as ElasticFlow counts); `None` for best-effort jobs.
    pub fn met_deadline(&self) -> Option<(bool, bool)> {
        let d = self.deadline_s?;
        Some(match self.completion_s {
            Some(c) => (c <= d + 1e-9, c - self.restart_paid_s <= d + 1e-9),
            None => (false, false),
        })
    }

    /// Finish-time fairness ρ = JCT / T_independent.
    pub fn ftf_rho(&self) -> Option<f64> {
        self.jct_s().map(|j| j / self.independent_s.max(1e-9))
    }
}

/// State of the cluster after one round's decision.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoundStat {
    pub time_s: f64,
    pub active_jobs: u32,
    pub running_jobs: u32,
    pub used_gpus: u32,
}

/// Summary of one simulation (the keys of `pacer simulate --json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub policy: String,
    pub jobs: usize,
    pub finished: usize,
    pub avg_jct_s: f64,
    pub median_jct_s: f64,
    pub p99_jct_s: f64,
    pub makespan_s: f64,
    pub avg_queueing_s: f64,
    pub utilization: f64,
    pub max_ftf_rho: f64,
    pub avg_ftf_rho: f64,
    pub avg_restarts: f64,
    pub wall_ms: f64,
    /// Deadline counts, when the workload has deadline jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlines: Option<DeadlineSummary>,
    /// The run's opportunity for jobs across device types, when measured
    /// (`SimConfig::mixing_opportunity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixing: Option<MixingOpportunity>,
}

/// Devices a one-type policy left idle where a job across types could have used
/// them, and a bound on the JCT that would save (`engine/opportunity.rs`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MixingOpportunity {
    /// Device-hours idle while some job was active.
    pub idle_gpu_h: f64,
    /// Device-hours idle on a type while a job that could use more devices waited
    /// or had none free on the types it held.
    pub stranded_gpu_h: f64,
    /// Rounds with stranded devices.
    pub rounds_stranded: u64,
    /// First-order upper bound on the JCT (summed over finished jobs, h) that those
    /// devices could save: linear speed-up at the best idle type's one-device speed,
    /// no restarts, no synchronisation cost.
    pub bound_saved_jct_h: f64,
    /// `bound_saved_jct_h` over the finished jobs' summed JCT: a bound on the
    /// fraction of the avg JCT mixing could remove from this run.
    pub bound_avg_jct_gain: f64,
    /// The same over each job's own balanced goodput model (restarts free; with
    /// `--mixed-types` only, whose views carry it): what mixing could give by the
    /// policy's own model, an estimate rather than a bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balanced_saved_jct_h: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub balanced_avg_jct_gain: Option<f64>,
    /// The balanced estimate's rounds with the devices taken as the job's own type:
    /// what the job's own scaling allows without the cost of spanning types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_type_avg_jct_gain: Option<f64>,
}

/// How a workload with deadlines went (docs/elasticflow.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeadlineSummary {
    /// Jobs with a deadline, and of them the ones that met it.
    pub deadline_jobs: usize,
    /// Deadline satisfactory ratio counted strictly: completion ≤ deadline.
    pub met_strict: f64,
    /// Counted as ElasticFlow does: the planned finish (completion less the restart
    /// delays paid) ≤ deadline.
    pub met_planned: f64,
    /// Best-effort jobs and their mean JCT (s; null when none finished).
    pub best_effort_jobs: usize,
    pub best_effort_avg_jct_s: f64,
    /// Work done in seconds of one device of each job's fastest type, over the
    /// device-seconds of the makespan (1: every device as useful as a job alone on one).
    pub cluster_efficiency: f64,
}

/// Everything a simulation produced.
#[derive(Debug, Clone, Serialize)]
pub struct SimResult {
    pub summary: Summary,
    pub jobs: Vec<JobResult>,
    pub timeline: Vec<RoundStat>,
    pub total_gpus: f64,
}

/// Quantile by linear interpolation between order statistics (q in [0, 1]).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (pos - lo as f64) * (sorted[hi] - sorted[lo])
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

impl SimResult {
    pub fn new(
        policy: &str,
        total_gpus: f64,
        busy_gpu_s: f64,
        jobs: Vec<JobResult>,
        timeline: Vec<RoundStat>,
        wall_ms: f64,
    ) -> Self {
        let mut jcts: Vec<f64> = jobs.iter().filter_map(JobResult::jct_s).collect();
        jcts.sort_by(f64::total_cmp);
        let rhos: Vec<f64> = jobs.iter().filter_map(JobResult::ftf_rho).collect();
        let queueing: Vec<f64> = jobs.iter().filter_map(JobResult::queueing_s).collect();
        let first = jobs
            .iter()
            .map(|j| j.arrival_s)
            .fold(f64::INFINITY, f64::min);
        let last = jobs
            .iter()
            .filter_map(|j| j.completion_s)
            .fold(f64::NEG_INFINITY, f64::max);
        let makespan = if last.is_finite() && first.is_finite() {
            last - first
        } else {
            f64::NAN
        };
        let deadline_jobs = jobs.iter().filter(|j| j.deadline_s.is_some()).count();
        let deadlines = (deadline_jobs > 0).then(|| {
            let met: Vec<(bool, bool)> = jobs.iter().filter_map(JobResult::met_deadline).collect();
            let n = deadline_jobs as f64;
            let be: Vec<&JobResult> = jobs.iter().filter(|j| j.deadline_s.is_none()).collect();
            let be_jct: Vec<f64> = be.iter().filter_map(|j| j.jct_s()).collect();
            let work: f64 = jobs.iter().map(|j| j.one_device_s).sum();
            DeadlineSummary {
                deadline_jobs,
                met_strict: met.iter().filter(|m| m.0).count() as f64 / n,
                met_planned: met.iter().filter(|m| m.1).count() as f64 / n,
                best_effort_jobs: be.len(),
                best_effort_avg_jct_s: mean(&be_jct),
                cluster_efficiency: if makespan > 0.0 {
                    work / (total_gpus * makespan)
                } else {
                    f64::NAN
                },
            }
        });
        let summary = Summary {
            policy: policy.to_string(),
            jobs: jobs.len(),
            finished: jcts.len(),
            avg_jct_s: mean(&jcts),
            median_jct_s: quantile(&jcts, 0.5),
            p99_jct_s: quantile(&jcts, 0.99),
            makespan_s: makespan,
            avg_queueing_s: mean(&queueing),
            utilization: if makespan > 0.0 {
                busy_gpu_s / (total_gpus * makespan)
            } else {
                f64::NAN
            },
            max_ftf_rho: rhos.iter().copied().fold(f64::NAN, f64::max),
            avg_ftf_rho: mean(&rhos),
            avg_restarts: mean(&jobs.iter().map(|j| j.restarts as f64).collect::<Vec<_>>()),
            wall_ms,
            deadlines,
            mixing: None,
        };
        SimResult {
            summary,
            jobs,
            timeline,
            total_gpus,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert!((quantile(&v, 0.99) - 4.96).abs() < 1e-12);
    }
}
