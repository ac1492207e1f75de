//! Gavel-style heterogeneity-aware policies (Narayanan et al., OSDI'20), as LPs.
//!
//! Gavel's unit is the *time fraction* `x[i][t]`: the share of rounds job `i`
//! runs on (its gang of `s_i` devices of) type `t`. Constraints: `x ≥ 0`,
//! `Σ_t x[i][t] ≤ 1` (one type at a time) and `Σ_i s_i·x[i][t] ≤ W_t` (capacity
//! of type t). The job's *effective throughput* is `T_i(x) = Σ_t tput[i][t]·x[i][t]`
//! with `tput` its measured speed on `s_i` consolidated devices of type t.
//!
//! - `gavel-maxmin` (max-min fairness over effective throughput): maximise
//!   `min_i T_i(x) / I_i`, where `I_i` is the job's throughput on its *isolated*
//!   share — an equal time share of the cluster (water-filled over the gang sizes,
//!   spread over the types in proportion to their capacity);
//! - `gavel-ftf` (finish-time fairness): minimise `max_i ρ_i(x)` with
//!   `ρ_i(x) = (t_i + rem_i / T_i(x)) / (t_i + rem_i / I_i)`, t_i the time since
//!   arrival and rem_i the work left. Gavel hands this to a convex solver; here it
//!   is bisection on the target ρ, each step a max-min LP (`T_i(x) ≥ λ·need_i(ρ)`,
//!   feasible iff λ ≥ 1), which keeps everything linear (good_lp + Clarabel).
//!
//! - `gavel-maxsum` (Gavel's `max_sum_throughput_perf`, the objective Sia's
//!   simulator runs Gavel with): maximise `Σ_i Σ_t tput[i][t]·x[i][t]` with the
//!   throughput in iterations per second (`JobView::iterations_per_work`), not
//!   normalised per job: jobs with fast steps are worth more.
//!
//! The two fairness objectives add a small efficiency term (ε·Σ normalised throughput) so the
//! solver does not leave capacity idle among the jobs that are not the bottleneck.
//!
//! Round-based realisation (Gavel's scheduler): each round, the priority of
//! (job, type) is `x[i][t]` over the fraction of its active rounds the job has
//! received on `t` (∞ if none yet); pairs are taken in priority order and a job is
//! placed on its pair's type if `s_i` devices of that type are free (a job that
//! keeps its type keeps its devices: Gavel's lease extension). Devices still free
//! then go to the waiting jobs on any type they fit, so the realisation is
//! work-conserving. The LP is re-solved when the set of jobs changes and every
//! `resolve_every` rounds.
//!
//! Preemption is kept to what the time fractions need:
//! - Gavel's round is `round_s` (360 s, the paper's 6 minutes). When the driver
//!   calls more often (shorter simulator rounds), the jobs placed at the last
//!   Gavel round keep their devices until the next one; in between, only devices
//!   freed by finished jobs are handed out (same priorities). A Gavel job is thus
//!   never restarted more often than once per Gavel round.
//! - At a Gavel round, pairs of equal priority go to the job already running
//!   on that type first (no restart for nothing). Keeping every job that is
//!   still within its share regardless of priority was tried and rejected: it
//!   delays new arrivals behind jobs catching up on their share (Gavel trace
//!   b436b2: gavel-ftf max ρ 11.6 → 63.6).
//!
//! Not reproduced: Gavel's space sharing (packing two jobs on one GPU).

use crate::place::TypedPools;
use crate::{ClusterView, JobView, Policy};
use good_lp::{
    clarabel, constraint, variable, variables, Expression, ProblemVariables, Solution, SolverModel,
    Variable,
};
use pacer_model::{Allocation, DeviceTypeId, JobId};
use std::collections::HashMap;

/// Which LP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Objective {
    MaxMin,
    FinishTimeFair,
    MaxSumThroughput,
}

#[derive(Debug, Clone, Default)]
struct JobState {
    /// Target time fraction per type.
    x: Vec<f64>,
    /// Rounds run on each type, and rounds active.
    received: Vec<f64>,
    active: f64,
}

/// A Gavel LP policy.
#[derive(Debug)]
pub struct Gavel {
    objective: Objective,
    /// Re-solve at least this often (rounds), even when no job arrived or left.
    pub resolve_every: u32,
    state: HashMap<JobId, JobState>,
    rounds_since_solve: u32,
    /// LPs solved in the last re-solve (bisection steps for FTF).
    pub last_lp_count: u32,
    /// Gavel's round (s): placements change at most this often (see module docs).
    pub round_s: f64,
    /// Start of the next Gavel round (s).
    next_round_s: f64,
    /// `gavel-maxsum`: time handed out per type so far (s), Sia's simulator's
    /// `cluster_time` (see [`realise_sia`]).
    cluster_time: Vec<f64>,
}

/// Gavel's round length (the paper's 6 minutes).
pub const DEFAULT_ROUND_S: f64 = 360.0;

/// Small weight of the efficiency term relative to the max-min objective.
const EFFICIENCY_EPS: f64 = 1e-3;

impl Gavel {
    pub fn new(objective: Objective) -> Self {
        Gavel {
            objective,
            resolve_every: 10,
            state: HashMap::new(),
            rounds_since_solve: 0,
            last_lp_count: 0,
            round_s: DEFAULT_ROUND_S,
            next_round_s: f64::NEG_INFINITY,
            cluster_time: Vec::new(),
        }
    }

    pub fn max_min() -> Self {
        Self::new(Objective::MaxMin)
    }

    pub fn finish_time_fair() -> Self {
        Self::new(Objective::FinishTimeFair)
    }

    pub fn max_sum_throughput() -> Self {
        Self::new(Objective::MaxSumThroughput)
    }
}

/// Inputs of the LPs for the active jobs.
pub struct LpInput {
    /// Gang size per job.
    pub scale: Vec<f64>,
    /// Throughput per job per type on the gang size (work units/s).
    pub tput: Vec<Vec<f64>>,
    /// Devices per type.
    pub capacity: Vec<f64>,
    /// Isolated throughput per job.
    pub isolated: Vec<f64>,
}

impl LpInput {
    pub fn new(view: &ClusterView) -> Self {
        let cluster = view.cluster;
        let types = cluster.device_types.len().max(1);
        let capacity: Vec<f64> = (0..types)
            .map(|t| cluster.gpus_of_type(DeviceTypeId(t as u16)) as f64)
            .collect();
        let largest = capacity.iter().copied().fold(0.0, f64::max).max(1.0);
        let scale: Vec<f64> = view
            .jobs
            .iter()
            .map(|j| (j.requested_replicas.max(1) as f64).min(largest))
            .collect();
        let tput: Vec<Vec<f64>> = view
            .jobs
            .iter()
            .zip(&scale)
            .map(|(j, &s)| {
                (0..types)
                    .map(|t| {
                        if capacity[t] < s {
                            0.0
                        } else {
                            j.rate(DeviceTypeId(t as u16), s as u32, true)
                        }
                    })
                    .collect()
            })
            .collect();
        let isolated = isolated_throughputs(&scale, &tput, &capacity);
        LpInput {
            scale,
            tput,
            capacity,
            isolated,
        }
    }
}

/// Throughput of each job on an equal time share of the cluster: the devices are
/// water-filled over the jobs up to their gang size, and the share is spread over
/// the types in proportion to their capacity.
pub fn isolated_throughputs(scale: &[f64], tput: &[Vec<f64>], capacity: &[f64]) -> Vec<f64> {
    let total: f64 = capacity.iter().sum();
    let demands: Vec<u32> = scale.iter().map(|&s| s as u32).collect();
    // Fractional water-filling level z with Σ min(z, s_i) = total.
    let mut sorted: Vec<f64> = scale.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut left = total;
    let mut level = f64::INFINITY;
    let n = sorted.len();
    for (k, &s) in sorted.iter().enumerate() {
        let rest = (n - k) as f64;
        if s * rest > left {
            level = left / rest;
            break;
        }
        left -= s;
    }
    let _ = demands;
    scale
        .iter()
        .zip(tput)
        .map(|(&s, row)| {
            let frac = (level.min(s) / s).min(1.0);
            let avg: f64 = row
                .iter()
                .zip(capacity)
                .map(|(r, c)| r * c / total.max(1e-12))
                .sum();
            (frac * avg).max(1e-12)
        })
        .collect()
}

/// The time-fraction variables `x[i][t] ∈ [0, 1]` of an LP over jobs × device
/// types: one where `coef[i][t] > 0` (job `i` can run on type `t`), none elsewhere.
fn fraction_vars(vars: &mut ProblemVariables, coef: &[Vec<f64>]) -> Vec<Vec<Option<Variable>>> {
    coef.iter()
        .map(|row| {
            row.iter()
                .map(|&c| (c > 0.0).then(|| vars.add(variable().min(0.0).max(1.0))))
                .collect()
        })
        .collect()
}

/// `Σ_i Σ_t w(i, t)·x[i][t]` over the variables that exist.
fn weighted_sum(x: &[Vec<Option<Variable>>], w: impl Fn(usize, usize) -> f64) -> Expression {
    let mut sum = Expression::from(0.0);
    for (i, row) in x.iter().enumerate() {
        for (t, v) in row.iter().enumerate() {
            if let Some(v) = v {
                sum += w(i, t) * *v;
            }
        }
    }
    sum
}

/// Adds the capacity constraints `Σ_i scale_i·x[i][t] ≤ capacity_t`, one per type.
fn with_capacity<M: SolverModel>(
    mut model: M,
    x: &[Vec<Option<Variable>>],
    scale: &[f64],
    capacity: &[f64],
) -> M {
    for (t, &cap) in capacity.iter().enumerate() {
        let mut used = Expression::from(0.0);
        for (row, &s) in x.iter().zip(scale) {
            if let Some(v) = row[t] {
                used += s * v;
            }
        }
        model = model.with(constraint!(used <= cap));
    }
    model
}

/// The solved time fractions, clamped to [0, 1]; 0 where a job has no variable.
fn fractions(sol: &impl Solution, x: &[Vec<Option<Variable>>]) -> Vec<Vec<f64>> {
    x.iter()
        .map(|row| {
            row.iter()
                .map(|v| v.map_or(0.0, |v| sol.value(v).clamp(0.0, 1.0)))
                .collect()
        })
        .collect()
}

/// Solves `max λ + ε·Σ_i Σ_t coef[i][t]·x[i][t]/n` s.t. `Σ_t coef[i][t]·x[i][t] ≥ λ`
/// for the jobs in `bind`, `Σ_t x[i][t] ≤ 1`, `Σ_i s_i·x[i][t] ≤ W_t`, `x ≥ 0`.
/// Returns (λ, x).
pub fn max_min_lp(
    coef: &[Vec<f64>],
    bind: &[bool],
    scale: &[f64],
    capacity: &[f64],
) -> Option<(f64, Vec<Vec<f64>>)> {
    let n = coef.len();
    let types = capacity.len();
    let mut vars = variables!();
    let lambda = vars.add(variable().min(0.0));
    let x = fraction_vars(&mut vars, coef);
    let eff = weighted_sum(&x, |i, t| coef[i][t]);
    let objective = Expression::from(lambda) + (EFFICIENCY_EPS / n.max(1) as f64) * eff;
    let mut model = vars.maximise(objective).using(clarabel);
    for i in 0..n {
        let mut served = Expression::from(0.0);
        let mut time = Expression::from(0.0);
        let mut any = false;
        for t in 0..types {
            if let Some(v) = x[i][t] {
                served += coef[i][t] * v;
                time += v;
                any = true;
            }
        }
        if !any {
            continue;
        }
        if bind[i] {
            model = model.with(constraint!(served - lambda >= 0.0));
        }
        model = model.with(constraint!(time <= 1.0));
    }
    model = with_capacity(model, &x, scale, capacity);
    // A job that can run nowhere makes λ = 0 the only feasible value; keep it out.
    let sol = model.solve().ok()?;
    Some((sol.value(lambda), fractions(&sol, &x)))
}

/// Gavel's max-min fairness allocation over normalised effective throughput.
pub fn solve_max_min(inp: &LpInput) -> Vec<Vec<f64>> {
    let coef: Vec<Vec<f64>> = inp
        .tput
        .iter()
        .zip(&inp.isolated)
        .map(|(row, &iso)| row.iter().map(|&r| r / iso).collect())
        .collect();
    let bind: Vec<bool> = inp
        .tput
        .iter()
        .map(|r| r.iter().any(|&v| v > 0.0))
        .collect();
    max_min_lp(&coef, &bind, &inp.scale, &inp.capacity)
        .map(|s| s.1)
        .unwrap_or_else(|| vec![vec![0.0; inp.capacity.len()]; coef.len()])
}

/// Gavel's `max_sum_throughput_perf`: maximise `Σ_i weight_i·Σ_t tput[i][t]·x[i][t]`
/// (`weight_i`: iterations per work unit, so the sum is in iterations per second)
/// under the time-fraction constraints.
pub fn solve_max_sum(inp: &LpInput, weight: &[f64]) -> Vec<Vec<f64>> {
    let n = inp.tput.len();
    let types = inp.capacity.len();
    let empty = || vec![vec![0.0; types]; n];
    let mut vars = variables!();
    let x = fraction_vars(&mut vars, &inp.tput);
    let objective = weighted_sum(&x, |i, t| weight[i] * inp.tput[i][t]);
    let mut model = vars.maximise(objective).using(clarabel);
    for row in &x {
        let mut time = Expression::from(0.0);
        let mut any = false;
        for v in row.iter().flatten() {
            time += *v;
            any = true;
        }
        if any {
            model = model.with(constraint!(time <= 1.0));
        }
    }
    model = with_capacity(model, &x, &inp.scale, &inp.capacity);
    match model.solve() {
        Ok(sol) => fractions(&sol, &x),
        Err(_) => empty(),
    }
}

/// Finish-time-fair allocation: bisection on the largest ρ. `elapsed[i]` is the
/// time since arrival, `remaining[i]` the work left. Returns (x, ρ bound, LPs solved).
pub fn solve_ftf(
    inp: &LpInput,
    elapsed: &[f64],
    remaining: &[f64],
    rel_tol: f64,
    max_steps: u32,
) -> (Vec<Vec<f64>>, f64, u32) {
    let n = inp.tput.len();
    let runnable: Vec<bool> = inp
        .tput
        .iter()
        .map(|r| r.iter().any(|&v| v > 0.0))
        .collect();
    let c: Vec<f64> = (0..n)
        .map(|i| elapsed[i] + remaining[i] / inp.isolated[i])
        .collect();
    let rho_of = |x: &[Vec<f64>]| -> f64 {
        (0..n)
            .filter(|&i| runnable[i] && remaining[i] > 0.0)
            .map(|i| {
                let t: f64 = x[i].iter().zip(&inp.tput[i]).map(|(a, b)| a * b).sum();
                (elapsed[i] + remaining[i] / t.max(1e-300)) / c[i]
            })
            .fold(0.0, f64::max)
    };
    let mut best = solve_max_min(inp);
    let mut lps = 1;
    let mut hi = rho_of(&best);
    // Lower bound: each job alone with as much of its best type as it can use.
    let mut lo = (0..n)
        .filter(|&i| runnable[i] && remaining[i] > 0.0)
        .map(|i| {
            let tmax = inp.tput[i]
                .iter()
                .zip(&inp.capacity)
                .map(|(r, w)| r * (w / inp.scale[i]).min(1.0))
                .fold(0.0, f64::max);
            (elapsed[i] + remaining[i] / tmax) / c[i]
        })
        .fold(0.0, f64::max);
    if !hi.is_finite() {
        return (best, hi, lps);
    }
    while hi - lo > rel_tol * hi && lps < max_steps {
        let mid = 0.5 * (lo + hi);
        let coef: Vec<Vec<f64>> = (0..n)
            .map(|i| {
                let slack = mid * c[i] - elapsed[i];
                let need = if remaining[i] <= 0.0 {
                    0.0
                } else if slack <= 0.0 {
                    f64::INFINITY
                } else {
                    remaining[i] / slack
                };
                inp.tput[i]
                    .iter()
                    .map(|&r| if need > 0.0 { r / need } else { r })
                    .collect()
            })
            .collect();
        let bind: Vec<bool> = (0..n).map(|i| runnable[i] && remaining[i] > 0.0).collect();
        lps += 1;
        match max_min_lp(&coef, &bind, &inp.scale, &inp.capacity) {
            Some((lambda, x)) if lambda >= 1.0 - 1e-6 => {
                hi = mid.min(rho_of(&x).max(lo));
                best = x;
            }
            _ => lo = mid,
        }
    }
    (best, hi, lps)
}

impl Policy for Gavel {
    fn name(&self) -> &'static str {
        match self.objective {
            Objective::MaxMin => "gavel-maxmin",
            Objective::FinishTimeFair => "gavel-ftf",
            Objective::MaxSumThroughput => "gavel-maxsum",
        }
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let jobs = view.jobs;
        let n = jobs.len();
        if n == 0 {
            self.state.clear();
            return Vec::new();
        }
        let changed =
            jobs.len() != self.state.len() || jobs.iter().any(|j| !self.state.contains_key(&j.id));
        let live: std::collections::HashSet<JobId> = jobs.iter().map(|j| j.id).collect();
        self.state.retain(|id, _| live.contains(id));
        self.rounds_since_solve += 1;
        if changed || self.rounds_since_solve >= self.resolve_every {
            self.rounds_since_solve = 0;
            let inp = LpInput::new(view);
            let x = match self.objective {
                Objective::MaxMin => {
                    self.last_lp_count = 1;
                    solve_max_min(&inp)
                }
                Objective::FinishTimeFair => {
                    let elapsed: Vec<f64> = jobs
                        .iter()
                        .map(|j| (view.now_s - j.arrival_s).max(0.0))
                        .collect();
                    let remaining: Vec<f64> = jobs.iter().map(|j| j.work_left.max(0.0)).collect();
                    let (x, _, lps) = solve_ftf(&inp, &elapsed, &remaining, 0.02, 12);
                    self.last_lp_count = lps;
                    x
                }
                Objective::MaxSumThroughput => {
                    self.last_lp_count = 1;
                    let weight: Vec<f64> = jobs
                        .iter()
                        .map(|j| j.iterations_per_work.unwrap_or(1.0))
                        .collect();
                    solve_max_sum(&inp, &weight)
                }
            };
            for (j, xi) in jobs.iter().zip(x) {
                // `received` is sized by the realisation (it starts at 0 rounds, or
                // at half a round of time for gavel-maxsum).
                let st = self.state.entry(j.id).or_insert_with(|| JobState {
                    x: Vec::new(),
                    received: Vec::new(),
                    active: 0.0,
                });
                st.x = xi;
            }
        }
        let boundary = view.now_s >= self.next_round_s - 1e-6;
        if boundary {
            self.next_round_s = view.now_s + self.round_s;
        }
        if self.objective == Objective::MaxSumThroughput {
            realise_sia(
                view,
                &mut self.state,
                &mut self.cluster_time,
                boundary,
                self.round_s,
            )
        } else {
            realise(view, &mut self.state, boundary)
        }
    }
}

/// Gavel's round-based realisation of time fractions (see the module docs).
/// `boundary`: a Gavel round starts now; otherwise the jobs holding devices keep them.
fn realise(
    view: &ClusterView,
    state: &mut HashMap<JobId, JobState>,
    boundary: bool,
) -> Vec<Allocation> {
    let jobs = view.jobs;
    let n = jobs.len();
    let types = view.cluster.device_types.len().max(1);
    let pools = TypedPools::new(view.cluster);
    // A gang larger than every type's capacity runs on the largest type.
    let largest = (0..types)
        .map(|t| pools.free(DeviceTypeId(t as u16)))
        .max()
        .unwrap_or(0)
        .max(1) as u32;
    let scale: Vec<u32> = jobs
        .iter()
        .map(|j| j.requested_replicas.clamp(1, largest))
        .collect();
    let mut pairs: Vec<(f64, f64, usize, usize)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let st = state.entry(j.id).or_insert_with(|| JobState {
            x: vec![0.0; types],
            received: vec![0.0; types],
            active: 0.0,
        });
        st.x.resize(types, 0.0);
        st.received.resize(types, 0.0);
        for t in 0..types {
            let x = st.x[t];
            if x <= 1e-6 {
                continue;
            }
            let got = if st.active > 0.0 {
                st.received[t] / st.active
            } else {
                0.0
            };
            let prio = if got > 0.0 { x / got } else { f64::INFINITY };
            pairs.push((prio, x, i, t));
        }
    }
    let runs_on = |i: usize, t: usize| {
        jobs[i].current.replicas() == scale[i]
            && pools.type_of(&jobs[i].current) == Some(DeviceTypeId(t as u16))
    };
    pairs.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(b.1.total_cmp(&a.1))
            .then(runs_on(b.2, b.3).cmp(&runs_on(a.2, a.3)))
            .then(jobs[a.2].arrival_s.total_cmp(&jobs[b.2].arrival_s))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    // Decide (job → type) first, then keep or place devices.
    let mut chosen: Vec<Option<usize>> = vec![None; n];
    let mut budget: Vec<u64> = (0..types)
        .map(|t| pools.free(DeviceTypeId(t as u16)))
        .collect();
    let take_budget =
        |chosen: &mut Vec<Option<usize>>, budget: &mut Vec<u64>, i: usize, t: usize| {
            if chosen[i].is_none() && budget[t] >= scale[i] as u64 {
                budget[t] -= scale[i] as u64;
                chosen[i] = Some(t);
            }
        };
    // Between Gavel rounds the jobs running on the right gang of one type keep it.
    if !boundary {
        for (i, j) in jobs.iter().enumerate() {
            if j.current.replicas() == scale[i] {
                if let Some(ty) = pools.type_of(&j.current) {
                    take_budget(&mut chosen, &mut budget, i, ty.0 as usize);
                }
            }
        }
    }
    for &(_, _, i, t) in &pairs {
        take_budget(&mut chosen, &mut budget, i, t);
    }
    // Work conservation: leftovers to waiting jobs, fastest type first.
    let mut waiting: Vec<usize> = (0..n).filter(|&i| chosen[i].is_none()).collect();
    waiting.sort_by(|&a, &b| {
        jobs[a]
            .attained_gpu_s
            .total_cmp(&jobs[b].attained_gpu_s)
            .then(a.cmp(&b))
    });
    for i in waiting {
        let mut order: Vec<usize> = (0..types).collect();
        order.sort_by(|&a, &b| {
            jobs[i]
                .rate(DeviceTypeId(b as u16), scale[i], true)
                .total_cmp(&jobs[i].rate(DeviceTypeId(a as u16), scale[i], true))
        });
        for t in order {
            if jobs[i].rate(DeviceTypeId(t as u16), scale[i], true) > 0.0 {
                take_budget(&mut chosen, &mut budget, i, t);
            }
        }
    }
    let out = place_chosen(view, &chosen, &scale);
    for (i, j) in jobs.iter().enumerate() {
        let st = state.get_mut(&j.id).expect("enrolled");
        st.active += 1.0;
        if !out[i].is_empty() {
            if let Some(t) = chosen[i] {
                st.received[t] += 1.0;
            }
        }
    }
    out
}

/// Devices for the chosen (job → type) pairs: a job that keeps its type and gang
/// keeps its devices (Gavel's lease extension); the others, largest gang first, are
/// placed on free nodes of their type.
fn place_chosen(view: &ClusterView, chosen: &[Option<usize>], scale: &[u32]) -> Vec<Allocation> {
    let jobs = view.jobs;
    let n = jobs.len();
    let mut pools = TypedPools::new(view.cluster);
    let mut out = vec![Allocation::empty(); n];
    for (i, j) in jobs.iter().enumerate() {
        if let Some(t) = chosen[i] {
            if j.current.replicas() == scale[i]
                && pools.type_of(&j.current) == Some(DeviceTypeId(t as u16))
                && pools.take_exact(&j.current)
            {
                out[i] = j.current.clone();
            }
        }
    }
    let mut todo: Vec<usize> = (0..n)
        .filter(|&i| chosen[i].is_some() && out[i].is_empty())
        .collect();
    todo.sort_by(|&a, &b| scale[b].cmp(&scale[a]).then(a.cmp(&b)));
    for i in todo {
        let t = DeviceTypeId(chosen[i].expect("chosen") as u16);
        if let Some(a) = pools.take(t, scale[i]) {
            out[i] = a;
        }
    }
    out
}

/// The realisation of Sia's simulator's Gavel (`gavel-maxsum`): at each Gavel round
/// the priority of (job, type) is `x[i][t]` over the job's share of the type's time
/// so far (`job_time / cluster_time`; a job enters with half a round on every type,
/// and each round a job runs adds a round to both), every (job, type) pair with
/// `x = 0` included at priority 0, so the scheduler is work-conserving in the order
/// types then jobs. A job is placed on its first pair whose type has room for its
/// gang. Between Gavel rounds the jobs holding devices keep them and freed devices
/// go to waiting jobs in the same order.
fn realise_sia(
    view: &ClusterView,
    state: &mut HashMap<JobId, JobState>,
    cluster_time: &mut Vec<f64>,
    boundary: bool,
    round_s: f64,
) -> Vec<Allocation> {
    let jobs = view.jobs;
    let n = jobs.len();
    let types = view.cluster.device_types.len().max(1);
    cluster_time.resize(types, 0.0);
    let pools = TypedPools::new(view.cluster);
    let largest = (0..types)
        .map(|t| pools.free(DeviceTypeId(t as u16)))
        .max()
        .unwrap_or(0)
        .max(1) as u32;
    let scale: Vec<u32> = jobs
        .iter()
        .map(|j| j.requested_replicas.clamp(1, largest))
        .collect();
    for j in jobs {
        let st = state.entry(j.id).or_insert_with(|| JobState {
            x: vec![0.0; types],
            received: Vec::new(),
            active: 0.0,
        });
        st.x.resize(types, 0.0);
        if st.received.is_empty() {
            // Job time per type, starting at half a round (Sia's simulator).
            st.received = vec![round_s / 2.0; types];
            for c in cluster_time.iter_mut() {
                *c += round_s / 2.0;
            }
        }
    }
    let mut pairs: Vec<(f64, f64, usize, usize)> = Vec::with_capacity(n * types);
    for (t, &total) in cluster_time.iter().enumerate() {
        for (i, j) in jobs.iter().enumerate() {
            if !j.can_use(DeviceTypeId(t as u16)) {
                continue;
            }
            let st = &state[&j.id];
            let x = st.x[t];
            let frac = st.received[t] / total.max(1e-12);
            let prio = if x <= 0.0 {
                0.0
            } else if frac > 0.0 {
                x / frac
            } else {
                x * 1e9
            };
            pairs.push((prio, x, i, t));
        }
    }
    // Stable: ties keep the order types, then jobs (arrival order).
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    let mut chosen: Vec<Option<usize>> = vec![None; n];
    let mut budget: Vec<u64> = (0..types)
        .map(|t| pools.free(DeviceTypeId(t as u16)))
        .collect();
    let mut take = |chosen: &mut Vec<Option<usize>>, i: usize, t: usize| {
        if chosen[i].is_none() && budget[t] >= scale[i] as u64 {
            budget[t] -= scale[i] as u64;
            chosen[i] = Some(t);
        }
    };
    if !boundary {
        for (i, j) in jobs.iter().enumerate() {
            if j.current.replicas() == scale[i] {
                if let Some(ty) = pools.type_of(&j.current) {
                    take(&mut chosen, i, ty.0 as usize);
                }
            }
        }
    }
    for &(_, _, i, t) in &pairs {
        take(&mut chosen, i, t);
    }
    let out = place_chosen(view, &chosen, &scale);
    if boundary {
        for (i, j) in jobs.iter().enumerate() {
            if let (Some(t), false) = (chosen[i], out[i].is_empty()) {
                state.get_mut(&j.id).expect("enrolled").received[t] += round_s;
                cluster_time[t] += round_s;
            }
        }
    }
    out
}

/// Effective throughput of job `j` under time fractions `x` (for tests and reports).
pub fn effective_throughput(j: &JobView, x: &[f64]) -> f64 {
    x.iter()
        .enumerate()
        .map(|(t, &f)| f * j.rate(DeviceTypeId(t as u16), j.requested_replicas.max(1), true))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SpeedCurve, SpeedTable};
    use pacer_model::ClusterSpec;
    use std::sync::Arc;

    fn job(id: u32, rates: [f64; 2], scale: u32, left: f64) -> JobView {
        let mut j = JobView::basic(JobId(id), 0.0, scale);
        j.speed = Some(Arc::new(SpeedTable {
            per_type: rates
                .iter()
                .map(|&r| SpeedCurve::single(scale, r, 1.0))
                .collect(),
        }));
        j.work_left = left;
        j
    }

    #[test]
    fn max_min_gives_fast_type_to_who_gains_most() {
        // Two types of 2 devices; job 0 is 4x faster on type 0, job 1 not at all.
        let c = ClusterSpec::parse("1x2:v100,1x2:k80", "t").unwrap();
        let jobs = vec![job(0, [4.0, 1.0], 2, 100.0), job(1, [1.0, 1.0], 2, 100.0)];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let inp = LpInput::new(&view);
        let x = solve_max_min(&inp);
        assert!(x[0][0] > 0.6, "{x:?}");
        assert!(x[1][1] > 0.6, "{x:?}");
        let mut p = Gavel::max_min();
        let out = p.allocate(&view);
        crate::check_capacity(&c, &out).unwrap();
        assert_eq!(out.iter().map(|a| a.replicas()).sum::<u32>(), 4);
    }

    #[test]
    fn ftf_bound_not_worse_than_max_min() {
        let c = ClusterSpec::parse("2x4:v100,2x4:p100,2x4:k80", "t").unwrap();
        let jobs: Vec<JobView> = (0..12)
            .map(|i| {
                let mut j = job(i, [3.0 + i as f64 * 0.1, 1.5], 1 + i % 4, 50.0 + i as f64);
                j.arrival_s = -(i as f64) * 10.0;
                let mut t = (*j.speed.clone().unwrap()).clone();
                t.per_type.push(SpeedCurve::single(1 + i % 4, 1.0, 1.0));
                j.speed = Some(Arc::new(t));
                j
            })
            .collect();
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let inp = LpInput::new(&view);
        let elapsed: Vec<f64> = jobs.iter().map(|j| -j.arrival_s).collect();
        let rem: Vec<f64> = jobs.iter().map(|j| j.work_left).collect();
        let (x, rho, lps) = solve_ftf(&inp, &elapsed, &rem, 0.01, 30);
        assert!(lps > 1);
        for (t, w) in inp.capacity.iter().enumerate() {
            let used: f64 = x.iter().zip(&inp.scale).map(|(r, s)| r[t] * s).sum();
            assert!(used <= w + 1e-6);
        }
        let mm = solve_max_min(&inp);
        let rho_of = |x: &[Vec<f64>]| {
            (0..jobs.len())
                .map(|i| {
                    let t: f64 = x[i].iter().zip(&inp.tput[i]).map(|(a, b)| a * b).sum();
                    let ci = elapsed[i] + rem[i] / inp.isolated[i];
                    (elapsed[i] + rem[i] / t) / ci
                })
                .fold(0.0, f64::max)
        };
        assert!(rho_of(&x) <= rho_of(&mm) + 1e-6);
        assert!(rho_of(&x) <= rho * 1.0 + 1e-6);
    }

    #[test]
    fn max_sum_counts_iterations_per_second() {
        // One device. Job 0 finishes its work twice as fast, but job 1 does ten
        // times as many iterations per unit of work: 100 vs 20 iterations/s.
        let c = ClusterSpec::parse("1x1:v100", "t").unwrap();
        let mut jobs = vec![job(0, [2.0, 0.0], 1, 100.0), job(1, [1.0, 0.0], 1, 100.0)];
        for j in &mut jobs {
            j.speed = Some(Arc::new(SpeedTable {
                per_type: vec![j.speed.as_ref().unwrap().per_type[0].clone()],
            }));
        }
        jobs[0].iterations_per_work = Some(10.0);
        jobs[1].iterations_per_work = Some(100.0);
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let inp = LpInput::new(&view);
        let x = solve_max_sum(&inp, &[10.0, 100.0]);
        assert!(x[1][0] > 0.99 && x[0][0] < 0.01, "{x:?}");
        // Unweighted, the faster job wins.
        let x = solve_max_sum(&inp, &[1.0, 1.0]);
        assert!(x[0][0] > 0.99, "{x:?}");
        let mut p = Gavel::max_sum_throughput();
        let out = p.allocate(&view);
        assert!(out[0].is_empty() && out[1].replicas() == 1, "{out:?}");
    }

    #[test]
    fn max_sum_realisation_is_work_conserving_and_shares_ties() {
        // Two devices of one type, three equal single-device jobs: every round
        // both devices are busy, and over 30 Gavel rounds every job runs.
        let c = ClusterSpec::parse("1x2:v100", "t").unwrap();
        let mut jobs: Vec<JobView> = (0..3)
            .map(|i| {
                let mut j = job(i, [1.0, 0.0], 1, 1e9);
                j.speed = Some(Arc::new(SpeedTable {
                    per_type: vec![SpeedCurve::single(1, 1.0, 1.0)],
                }));
                j
            })
            .collect();
        let mut p = Gavel::max_sum_throughput();
        let mut held = [0u32; 3];
        for round in 0..30 {
            let view = ClusterView {
                now_s: round as f64 * DEFAULT_ROUND_S,
                cluster: &c,
                jobs: &jobs,
            };
            let out = p.allocate(&view);
            crate::check_capacity(&c, &out).unwrap();
            assert_eq!(out.iter().map(|a| a.replicas()).sum::<u32>(), 2);
            for (i, (j, a)) in jobs.iter_mut().zip(&out).enumerate() {
                held[i] += u32::from(!a.is_empty());
                j.current = a.clone();
            }
        }
        assert!(held.iter().all(|&h| h >= 10), "{held:?}");
    }

    #[test]
    fn no_preemption_between_gavel_rounds_and_shares_follow_the_lp() {
        // One device, two equal jobs: x = 0.5 each. Driver rounds of 60 s.
        let c = ClusterSpec::parse("1x1:v100,1x1:k80", "t").unwrap();
        let mut jobs = vec![job(0, [1.0, 0.0], 1, 1e9), job(1, [1.0, 0.0], 1, 1e9)];
        let mut p = Gavel::max_min();
        let mut switches = 0;
        let mut held = [0u32; 2];
        for round in 0..120 {
            let now = round as f64 * 60.0;
            let view = ClusterView {
                now_s: now,
                cluster: &c,
                jobs: &jobs,
            };
            let out = p.allocate(&view);
            crate::check_capacity(&c, &out).unwrap();
            for (i, (j, a)) in jobs.iter_mut().zip(&out).enumerate() {
                if !a.is_empty() {
                    held[i] += 1;
                }
                if !a.is_empty() && j.current != *a {
                    switches += 1;
                    // A placement only changes at a Gavel round.
                    assert!(
                        (now / DEFAULT_ROUND_S).fract() < 1e-9,
                        "job {i} placed at {now} s, mid Gavel round"
                    );
                }
                j.current = a.clone();
            }
        }
        // 7200 s = 20 Gavel rounds: at most one start per Gavel round.
        assert!(switches <= 20, "{switches} placements");
        assert!(held[0].abs_diff(held[1]) <= 12, "{held:?}");
    }
}
