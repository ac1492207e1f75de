//! One data-parallel job on devices of several types (issue 26): the step time and
//! goodput of a *mixed* allocation.
//!
//! Each device type has its own step-time model ([`PerfParams`], fitted to that
//! type's measured table). The worker level gives every replica its own local batch so
//! that unequal devices finish a step together; which batches is the worker level's own
//! decision — this module runs the same [`BatchController`](crate::worker::BatchController)
//! that `pacer batching eval`, the runtime and `pacer_torch` use, fed with each
//! replica's compute time from its type's model, until the batches stop changing.
//! The step is then the slowest replica's compute, overlapped with one all-reduce over
//! the slowest link involved: an allocation that spans types spans nodes, so every
//! type's cross-node network time at the job's total replicas is a candidate and the
//! largest one counts (with that type's overlap `γ`). Goodput is the whole job's: its
//! global batch over that step, times the statistical efficiency of the global batch —
//! never the fastest type's.
//!
//! Gradient accumulation: when the global batch exceeds what the replicas hold at once
//! (Σ of their largest atomic batches), every replica runs the same number of
//! micro-batches `k` (they synchronise once per step), its local batch split evenly
//! over them.

use crate::worker::{make_controller, BatchBounds, BatchError, BatchProblem, Observation};
use pacer_predict::goodput::{GradParams, PerfParams};
use std::fmt;

/// The replicas of one device type in a job's allocation.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TypeGroup {
    /// The type's step-time model (from its measured table or the job's online fit).
    pub perf: PerfParams,
    /// Replicas (devices) of this type.
    pub replicas: u32,
    /// Largest local batch one device of this type holds in one micro-batch (memory).
    pub max_atomic: u64,
}

/// A job's allocation across types and the global batch to balance over it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixedJob {
    pub groups: Vec<TypeGroup>,
    /// Nodes the allocation spans. On a real cluster types never share a node, so a
    /// job across `t` types spans at least `t` nodes; emulated types may share one.
    pub nodes: u32,
    pub global_batch: u64,
    /// Smallest local batch of a replica (e.g. 2 for BatchNorm models).
    #[serde(default = "one")]
    pub min_local: u64,
}

fn one() -> u64 {
    1
}

/// The balanced step of a [`MixedJob`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MixedStep {
    /// Local batch (per step, all micro-batches together) of every replica, groups in
    /// order, replicas of a group consecutive.
    pub local: Vec<u64>,
    /// Micro-batches per step (1 = no accumulation).
    pub micro_batches: u32,
    /// Compute seconds of every replica's step at its local batch.
    pub compute_s: Vec<f64>,
    /// All-reduce seconds over the slowest link.
    pub network_s: f64,
    /// Seconds per step: the slowest replica's micro-batches, the last overlapped with
    /// the all-reduce.
    pub step_s: f64,
    /// Controller iterations the worker level took to settle.
    pub settle_iterations: u32,
}

impl MixedStep {
    /// Samples per second.
    pub fn throughput(&self) -> f64 {
        self.local.iter().sum::<u64>() as f64 / self.step_s
    }
    /// Goodput: throughput × the statistical efficiency of the global batch.
    pub fn goodput(&self, grad: &GradParams, base_batch: f64) -> f64 {
        let b = self.local.iter().sum::<u64>() as f64;
        self.throughput() * grad.efficiency(b, base_batch)
    }
    /// Σ compute / (replicas × slowest compute): 1 when every replica finishes its
    /// compute together.
    pub fn balance(&self) -> f64 {
        let max = self.compute_s.iter().copied().fold(0.0, f64::max);
        if max <= 0.0 {
            return 1.0;
        }
        self.compute_s.iter().sum::<f64>() / (self.compute_s.len() as f64 * max)
    }
}

/// Why a mixed step cannot be computed.
#[derive(Debug, Clone, PartialEq)]
pub enum MixedError {
    NoReplicas,
    /// A group's model or cap is unusable (non-finite or negative parameters, zero cap).
    BadGroup {
        group: usize,
        what: &'static str,
    },
    /// `nodes` is 0 or above the replicas.
    Nodes {
        nodes: u32,
        replicas: u32,
    },
    Batch(BatchError),
    UnknownController(String),
}

impl fmt::Display for MixedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MixedError::NoReplicas => write!(f, "groups: at least one replica is needed"),
            MixedError::BadGroup { group, what } => write!(f, "groups[{group}]: {what}"),
            MixedError::Nodes { nodes, replicas } => write!(
                f,
                "nodes: expected 1 to {replicas} (the replicas; a node holds at least one), got {nodes}"
            ),
            MixedError::Batch(e) => write!(f, "{e}"),
            MixedError::UnknownController(c) => write!(f, "controller: unknown `{c}`"),
        }
    }
}

impl std::error::Error for MixedError {}

/// Most controller iterations spent settling (the shift rule moves `δ` samples per
/// window; 2,000 iterations settle every case in the tests, and a plan that has not
/// settled by then is returned as it stands).
const MAX_SETTLE: u32 = 2_000;
/// Batches unchanged for this many iterations in a row count as settled (longer than
/// the shift rule's widest window between moves).
const SETTLED_AFTER: u32 = 64;

/// The balanced step of `job` under the worker-level controller `controller`
/// (`lbbsp`, `pid`, `uniform`, … — [`crate::worker::CONTROLLERS`]).
pub fn balanced_step(job: &MixedJob, controller: &str) -> Result<MixedStep, MixedError> {
    check_models(job)?;
    let caps = caps_of(job);
    // Time is affine in the batch (α + β·b per micro-batch): GPU-like whenever a
    // constant part exists, which selects LB-BSP's shift rule as the runtime would.
    let gpu_like = job.groups.iter().any(|g| g.perf.alpha_c > 0.0);
    let b = balance_with(
        &caps,
        job.global_batch,
        job.min_local,
        gpu_like,
        controller,
        |g, local, micro| {
            let p = &job.groups[g].perf;
            micro as f64 * p.alpha_c + p.beta_c * local as f64
        },
    )?;
    let slowest = b.compute_s.iter().copied().fold(0.0, f64::max);
    let (network_s, step_s) = step_after_compute(job, slowest, u64::from(b.micro_batches));
    Ok(MixedStep {
        local: b.local,
        micro_batches: b.micro_batches,
        compute_s: b.compute_s,
        network_s,
        step_s,
        settle_iterations: b.settle_iterations,
    })
}

/// Local batches the worker level settles on ([`balance_with`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Balanced {
    /// Local batch (per step, all micro-batches together) of every replica, groups in
    /// order, replicas of a group consecutive.
    pub local: Vec<u64>,
    /// Micro-batches per step (1 = no accumulation).
    pub micro_batches: u32,
    /// Compute seconds of every replica's step at its local batch.
    pub compute_s: Vec<f64>,
    /// Controller iterations the worker level took to settle.
    pub settle_iterations: u32,
    /// Group of every replica.
    pub group: Vec<usize>,
}

/// The worker level's local batches for replicas in groups `caps` (replicas, largest
/// local batch of one micro-batch), whose compute time per step is
/// `compute(group, local batch, micro-batches)` seconds: the controller `controller`
/// fed each replica's compute time at its current batch, run until the batches have
/// not changed for 64 iterations (at most 2,000). Every replica runs the same number of
/// micro-batches, the fewest that hold `global_batch`. [`balanced_step`] composes it
/// with Pollux's model; the simulator with a type's measured tables.
pub fn balance_with(
    caps: &[(u32, u64)],
    global_batch: u64,
    min_local: u64,
    gpu_like: bool,
    controller: &str,
    compute: impl Fn(usize, u64, u64) -> f64,
) -> Result<Balanced, MixedError> {
    let (problem, micro) = problem_of(caps, global_batch, min_local, gpu_like)?;
    let group: Vec<usize> = caps
        .iter()
        .enumerate()
        .flat_map(|(g, &(n, _))| std::iter::repeat_n(g, n as usize))
        .collect();
    let mut ctrl = make_controller(controller, &problem)
        .ok_or_else(|| MixedError::UnknownController(controller.to_string()))?;
    let mut batches = problem.uniform();
    let mut compute_s = vec![0.0; batches.len()];
    let mut speed = vec![0.0; batches.len()];
    let mut next = batches.clone();
    let (mut still, mut settle) = (0u32, 0u32);
    while settle < MAX_SETTLE && still < SETTLED_AFTER {
        for i in 0..batches.len() {
            compute_s[i] = compute(group[i], batches[i], micro);
            // Samples/s at the current batch: what the runtime's predictors report
            // for a worker whose speed does not change.
            let b = batches[i].max(1);
            speed[i] = b as f64 / compute(group[i], b, micro);
        }
        next.copy_from_slice(&batches);
        ctrl.decide(
            &Observation {
                compute_s: &compute_s,
                predicted_speed: &speed,
            },
            &mut next,
        );
        settle += 1;
        if next == batches {
            still += 1;
        } else {
            still = 0;
            batches.copy_from_slice(&next);
        }
    }
    for i in 0..batches.len() {
        compute_s[i] = compute(group[i], batches[i], micro);
    }
    Ok(Balanced {
        local: batches,
        micro_batches: micro as u32,
        compute_s,
        settle_iterations: settle,
        group,
    })
}

/// The step of `job` at LB-BSP's fixed point, in closed form: every replica's compute
/// (`k·α_c + β_c·b` for `k` micro-batches) ends at the same time `T`, its local batch
/// `b` real-valued and within its bounds (water-filling: the `T` at which the bounded
/// batches sum to the global batch, by bisection). [`balanced_step`] under `lbbsp` or
/// `pid` settles there up to whole samples and its dead band (the tests bound the
/// difference); this costs a few hundred arithmetic operations instead of hundreds of
/// controller iterations, for callers that evaluate many configurations (a policy's
/// candidates). Seconds per step.
pub fn equal_finish_step_s(job: &MixedJob) -> Result<f64, MixedError> {
    check_models(job)?;
    let caps = caps_of(job);
    let (problem, micro) = problem_of(&caps, job.global_batch, job.min_local, true)?;
    let k = micro as f64;
    let lo = job.min_local.max(1) as f64;
    let groups: Vec<(f64, f64, f64, f64)> = job
        .groups
        .iter()
        .filter(|g| g.replicas > 0)
        .map(|g| {
            let hi = (g.max_atomic.saturating_mul(micro)) as f64;
            (g.replicas as f64, k * g.perf.alpha_c, g.perf.beta_c, hi)
        })
        .collect();
    let batch_at = |t: f64| -> f64 {
        groups
            .iter()
            .map(|&(n, a, b, hi)| n * ((t - a) / b).clamp(lo, hi))
            .sum()
    };
    let (mut t_lo, mut t_hi) = groups
        .iter()
        .fold((f64::INFINITY, 0.0f64), |acc, &(_, a, b, hi)| {
            (acc.0.min(a + b * lo), acc.1.max(a + b * hi))
        });
    let target = problem.global_batch() as f64;
    for _ in 0..100 {
        let mid = 0.5 * (t_lo + t_hi);
        if batch_at(mid) < target {
            t_lo = mid;
        } else {
            t_hi = mid;
        }
    }
    let slowest = groups
        .iter()
        .map(|&(_, a, b, hi)| a + b * ((t_hi - a) / b).clamp(lo, hi))
        .fold(0.0, f64::max);
    Ok(step_after_compute(job, slowest, micro).1)
}

/// (replicas, largest local batch of one micro-batch) of every group of `job`.
fn caps_of(job: &MixedJob) -> Vec<(u32, u64)> {
    job.groups
        .iter()
        .map(|g| (g.replicas, g.max_atomic))
        .collect()
}

/// Checks `job`'s models and node count.
fn check_models(job: &MixedJob) -> Result<(), MixedError> {
    let replicas: u32 = job.groups.iter().map(|g| g.replicas).sum();
    if replicas == 0 {
        return Err(MixedError::NoReplicas);
    }
    for (i, g) in job.groups.iter().enumerate() {
        let p = &g.perf;
        let params = [
            p.alpha_c, p.beta_c, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r,
        ];
        if params.iter().any(|v| !v.is_finite() || *v < 0.0) || p.beta_c <= 0.0 {
            return Err(MixedError::BadGroup {
                group: i,
                what: "step-time model parameters must be finite and ≥ 0, with a per-sample compute time > 0",
            });
        }
        if !(p.gamma.is_finite() && p.gamma >= 1.0) {
            return Err(MixedError::BadGroup {
                group: i,
                what: "gamma must be finite and ≥ 1",
            });
        }
    }
    if job.nodes == 0 || job.nodes > replicas {
        return Err(MixedError::Nodes {
            nodes: job.nodes,
            replicas,
        });
    }
    Ok(())
}

/// The worker level's problem of groups `caps` (replicas, largest local batch of one
/// micro-batch): one worker per replica, bounds `min_local … cap × micro-batches`,
/// with the micro-batches per step.
fn problem_of(
    caps: &[(u32, u64)],
    global_batch: u64,
    min_local: u64,
    gpu_like: bool,
) -> Result<(BatchProblem, u64), MixedError> {
    if caps.iter().all(|c| c.0 == 0) {
        return Err(MixedError::NoReplicas);
    }
    if let Some(group) = caps.iter().position(|&(n, c)| n > 0 && c == 0) {
        return Err(MixedError::BadGroup {
            group,
            what: "max_atomic must be ≥ 1",
        });
    }
    let per_micro: u64 = caps.iter().fold(0u64, |a, &(n, c)| {
        a.saturating_add(c.saturating_mul(u64::from(n)))
    });
    let micro = global_batch.div_ceil(per_micro.max(1)).max(1);
    u32::try_from(micro).map_err(|_| {
        MixedError::Batch(BatchError::CapsTooSmall {
            sum_max: per_micro,
            global_batch,
        })
    })?;
    let bounds: Vec<BatchBounds> = caps
        .iter()
        .flat_map(|&(n, c)| std::iter::repeat_n(c, n as usize))
        .map(|c| BatchBounds {
            min: min_local.max(1),
            max: c.saturating_mul(micro),
        })
        .collect();
    let problem = BatchProblem::new(global_batch, bounds, gpu_like).map_err(MixedError::Batch)?;
    Ok((problem, micro))
}

/// `(network seconds, step seconds)` of `job` whose slowest replica computes for
/// `slowest` seconds over `micro` micro-batches: the all-reduce over the slowest link
/// involved, overlapped with the last micro-batch.
fn step_after_compute(job: &MixedJob, slowest: f64, micro: u64) -> (f64, f64) {
    let replicas: u32 = job.groups.iter().map(|g| g.replicas).sum();
    // The all-reduce runs over the slowest link involved.
    let (network_s, gamma) = job
        .groups
        .iter()
        .filter(|g| g.replicas > 0)
        .map(|g| (g.perf.network_time(job.nodes, replicas), g.perf.gamma))
        .fold((0.0, 1.0), |a, b| if b.0 > a.0 { b } else { a });
    // The slowest replica: k micro-batches of equal size, the last one overlapped
    // with the all-reduce.
    let per_micro_s = slowest / micro as f64;
    let step_s = (micro - 1) as f64 * per_micro_s + overlap(per_micro_s, network_s, gamma);
    (network_s, step_s)
}

/// `(tc^γ + tn^γ)^(1/γ)` (Pollux's overlap of compute and network).
fn overlap(tc: f64, tn: f64, gamma: f64) -> f64 {
    let hi = tc.max(tn);
    if hi <= 0.0 {
        return 0.0;
    }
    let lo = tc.min(tn);
    hi * (1.0 + (lo / hi).powf(gamma)).powf(1.0 / gamma)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(alpha_c: f64, beta_c: f64) -> PerfParams {
        PerfParams {
            alpha_c,
            beta_c,
            alpha_n: 0.05,
            beta_n: 0.002,
            alpha_r: 0.01,
            beta_r: 0.001,
            gamma: 1.5,
        }
    }

    fn group(perf: PerfParams, replicas: u32, max_atomic: u64) -> TypeGroup {
        TypeGroup {
            perf,
            replicas,
            max_atomic,
        }
    }

    fn job(groups: Vec<TypeGroup>, nodes: u32, global_batch: u64) -> MixedJob {
        MixedJob {
            groups,
            nodes,
            global_batch,
            min_local: 1,
        }
    }

    #[test]
    fn one_type_is_the_type_s_own_step_time() {
        let p = perf(0.02, 0.001);
        for controller in ["lbbsp", "pid", "uniform"] {
            let j = job(vec![group(p, 8, 256)], 2, 1024);
            let s = balanced_step(&j, controller).unwrap();
            assert_eq!(s.local, vec![128; 8], "{controller}");
            let want = p.step_time(2, 8, 128.0, 0);
            assert!(
                (s.step_s - want).abs() < 1e-12,
                "{controller}: {} vs {want}",
                s.step_s
            );
        }
    }

    #[test]
    fn a_slower_type_gets_smaller_batches_and_the_step_is_balanced() {
        // Type b computes at half the speed of type a (no constant part: time ∝ batch).
        let a = perf(0.0, 0.001);
        let b = perf(0.0, 0.002);
        let j = job(vec![group(a, 2, 1024), group(b, 2, 1024)], 2, 1200);
        let s = balanced_step(&j, "lbbsp").unwrap();
        assert_eq!(s.local.iter().sum::<u64>(), 1200);
        assert_eq!(s.local, vec![400, 400, 200, 200]);
        assert!(s.balance() > 0.999, "{}", s.balance());
        // Balanced beats equal shares, which wait for the slow type.
        let u = balanced_step(&j, "uniform").unwrap();
        assert!(s.step_s < 0.7 * u.step_s, "{} vs {}", s.step_s, u.step_s);
        // ... and is slower than four fast devices.
        let fast = job(vec![group(a, 4, 1024)], 2, 1200);
        assert!(s.step_s > balanced_step(&fast, "lbbsp").unwrap().step_s);
    }

    #[test]
    fn gpu_like_types_settle_near_equal_compute_under_every_adaptive_controller() {
        let a = perf(0.03, 0.0005);
        let b = perf(0.05, 0.0016);
        for controller in ["lbbsp", "pid"] {
            let j = job(vec![group(a, 4, 512), group(b, 4, 512)], 3, 2048);
            let s = balanced_step(&j, controller).unwrap();
            assert!(
                s.settle_iterations < MAX_SETTLE,
                "{controller} did not settle"
            );
            assert!(s.balance() > 0.95, "{controller}: balance {}", s.balance());
        }
    }

    #[test]
    fn the_slowest_link_and_the_whole_job_s_goodput_count() {
        let a = perf(0.0, 0.001);
        let mut b = perf(0.0, 0.001);
        b.alpha_n = 0.5; // a much slower network on type b's nodes
        let j = job(vec![group(a, 2, 1024), group(b, 2, 1024)], 2, 512);
        let s = balanced_step(&j, "lbbsp").unwrap();
        assert!((s.network_s - b.network_time(2, 4)).abs() < 1e-12);
        let grad = GradParams {
            sqr: 1.0,
            var: 50.0,
        };
        let g = s.goodput(&grad, 64.0);
        assert!(g > 0.0 && g <= s.throughput());
    }

    #[test]
    fn accumulation_when_the_batch_exceeds_what_the_devices_hold() {
        let a = perf(0.01, 0.001);
        let j = job(
            vec![
                group(a, 2, 64),
                TypeGroup {
                    perf: perf(0.01, 0.002),
                    replicas: 2,
                    max_atomic: 32,
                },
            ],
            2,
            500,
        );
        let s = balanced_step(&j, "lbbsp").unwrap();
        assert_eq!(s.micro_batches, 3); // 192 samples per micro-batch round
        assert_eq!(s.local.iter().sum::<u64>(), 500);
        assert!(s.local[2] <= 96 && s.local[0] <= 192);
    }

    #[test]
    fn the_closed_form_is_the_controller_s_fixed_point() {
        // Seeded cases: two or three types, speeds 1-6x apart, with and without a
        // constant part, accumulation or not.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut worst = 0.0f64;
        for case in 0..60 {
            let types = 2 + (next() * 2.0) as usize;
            let groups: Vec<TypeGroup> = (0..types)
                .map(|_| {
                    let speed = 1.0 + 5.0 * next();
                    group(
                        perf(0.02 * next(), 0.001 * speed),
                        1 + (next() * 8.0) as u32,
                        32 + (next() * 480.0) as u64,
                    )
                })
                .collect();
            let replicas: u32 = groups.iter().map(|g| g.replicas).sum();
            let cap: u64 = groups
                .iter()
                .map(|g| g.replicas as u64 * g.max_atomic)
                .sum();
            let b = (replicas as u64 * 8).max((cap as f64 * (0.3 + 2.0 * next())) as u64);
            let j = job(groups, types as u32, b);
            let exact = balanced_step(&j, "lbbsp").unwrap().step_s;
            let closed = equal_finish_step_s(&j).unwrap();
            let err = (closed / exact - 1.0).abs();
            worst = worst.max(err);
            assert!(err < 0.03, "case {case}: {closed} vs {exact} ({j:?})");
        }
        assert!(
            worst > 0.0,
            "every case identical: the test compares nothing"
        );
        // Errors are the same as balanced_step's.
        let g = group(perf(0.0, 0.001), 2, 64);
        assert!(equal_finish_step_s(&job(vec![g], 5, 8))
            .unwrap_err()
            .to_string()
            .contains("nodes"));
    }

    #[test]
    fn bad_jobs_are_refused_with_the_reason() {
        let a = perf(0.0, 0.001);
        let g = group(a, 2, 64);
        let err = |j: MixedJob, c: &str| balanced_step(&j, c).unwrap_err().to_string();
        assert!(err(job(vec![], 1, 8), "lbbsp").contains("at least one replica"));
        assert!(err(job(vec![g, g], 5, 8), "lbbsp").contains("nodes: expected 1 to 4"));
        assert!(err(job(vec![g], 1, 8), "nope").contains("unknown `nope`"));
        let mut bad = g;
        bad.perf.beta_c = f64::NAN;
        assert!(err(job(vec![bad], 1, 8), "lbbsp").starts_with("groups[0]:"));
        assert!(err(job(vec![g], 1, 0), "lbbsp").contains("global_batch"));
    }
}
