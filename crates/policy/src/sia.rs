//! Sia-style heterogeneity-aware goodput scheduling (`docs/algorithms.md §3d`).
//!
//! Every round, for each job and each configuration (device type, nodes, devices)
//! the job's goodput at its goodput-optimal batch, from its per-type goodput model
//! ([`JobView::goodput_by_type`]). Goodputs are normalised per job by its smallest
//! non-zero one, so `S ≥ 1` is a speedup over the job's cheapest useful
//! configuration. A job that moved would lose its restart time: every configuration
//! other than the one it holds is scaled by the re-allocation factor
//! `max(age − restarts·penalty, 0) / (age + penalty)` (1 while the job is younger
//! than the penalty). The cost of a configuration is `S^p` (p = −0.5) and leaving a
//! job without devices costs `λ_n` (1.1); the policy minimises the total cost with at
//! most one configuration per job and no more devices of a type than the cluster has.
//! With `v = λ_n − S^p` that is a multiple-choice knapsack with one capacity per
//! device type: maximise `Σ v` over the chosen configurations.
//!
//! Configurations, as in Sia: 1, 2, 4, … devices up to a node of the type, then
//! whole nodes, within the job's `max_replicas`. A job that has not run yet has no
//! fitted model (Sia profiles it first): it is offered one device of any type it can
//! use, at `S = 1`.
//!
//! Two solvers: [`SiaSolver::Exact`] solves the integer program with the pure-Rust
//! `microlp` branch and bound, warm-started with the fast solution and bounded in
//! nodes (`exact.rs`: at the bound, its best solution so far, never worse than the
//! fast one); [`SiaSolver::Fast`] is a greedy on value per
//! device followed by single-job improvement moves (`solve_fast`), in
//! O(jobs · configurations) per move. `pacer bench round --policy sia,sia-exact`
//! reports both; `solve_exact` / `solve_fast` are public so the gap can be measured.
//!
//! Placement: a job whose (type, devices) is unchanged keeps its nodes; the others,
//! largest first, go to the fullest node of their type that holds them (best fit),
//! else whole free nodes first ([`TypedPools::take`]).

use crate::place::TypedPools;
use crate::{ClusterView, JobView, Policy};
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, JobId};
use pacer_predict::goodput::{Candidate, GoodputFn};
use std::collections::HashMap;

mod exact;
pub use exact::{solve_exact, solve_exact_bounded, ExactOutcome, DEFAULT_NODE_LIMIT};

/// Which solver picks the configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiaSolver {
    /// The integer program, exactly (microlp branch and bound).
    Exact,
    /// Greedy on value per device plus single-job improvements.
    Fast,
}

/// One configuration a job may get: device type, nodes, devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub ty: u16,
    pub nodes: u32,
    pub gpus: u32,
}

/// The knapsack one round solves: per job, (configuration index, value) pairs with
/// value > 0; per type, the capacity.
#[derive(Debug, Clone, Default)]
pub struct Problem {
    pub configs: Vec<Config>,
    pub capacity: Vec<u64>,
    pub options: Vec<Vec<(usize, f64)>>,
}

impl Problem {
    /// Total value of a choice (one `Option<config>` per job) and whether it fits.
    pub fn evaluate(&self, choice: &[Option<usize>]) -> (f64, bool) {
        let mut used = vec![0u64; self.capacity.len()];
        let mut value = 0.0;
        for (j, c) in choice.iter().enumerate() {
            if let Some(c) = *c {
                let cfg = self.configs[c];
                used[cfg.ty as usize] += cfg.gpus as u64;
                value += self.options[j]
                    .iter()
                    .find(|o| o.0 == c)
                    .map_or(f64::NEG_INFINITY, |o| o.1);
            }
        }
        (value, used.iter().zip(&self.capacity).all(|(u, c)| u <= c))
    }
}

/// The Sia-style policy.
#[derive(Debug, Clone)]
pub struct Sia {
    /// Exponent of the generalised mean (Sia: −0.5).
    pub p: f64,
    /// Cost of leaving a job without devices (Sia: 1.1).
    pub lambda_n: f64,
    /// Restart penalty in the re-allocation factor (s) for jobs whose
    /// `JobView::restart_s` is unknown.
    pub restart_s: f64,
    pub solver: SiaSolver,
    /// `sia-exact`: branch-and-bound nodes per round before it settles for its best
    /// solution so far (deterministic, unlike a wall-clock limit).
    pub node_limit: u64,
    /// `sia-exact` rounds solved, stopped at the node limit, and failed.
    exact_rounds: u64,
    exact_at_limit: u64,
    exact_failed: u64,
    /// Per job: goodput version and goodput per configuration index.
    cache: HashMap<JobId, (u64, Vec<f64>)>,
    /// Batch candidates with their throughput per (performance model, batch
    /// limits, nodes, devices): they depend on the step-time model only, which all
    /// jobs of one application share on a type, so a job's goodput on a
    /// configuration is a re-ranking by its own gradient statistics
    /// (`GoodputFn::best_candidate`), not a new pass over the step-time model.
    candidates: HashMap<CandidateKey, Vec<Candidate>>,
    /// Configurations of the cluster last seen (rebuilt when it changes).
    configs: Vec<Config>,
    cluster_key: Vec<(u16, u32)>,
}

impl Sia {
    pub fn new(solver: SiaSolver) -> Self {
        Sia {
            p: -0.5,
            lambda_n: 1.1,
            restart_s: 30.0,
            solver,
            node_limit: DEFAULT_NODE_LIMIT,
            exact_rounds: 0,
            exact_at_limit: 0,
            exact_failed: 0,
            cache: HashMap::new(),
            candidates: HashMap::new(),
            configs: Vec::new(),
            cluster_key: Vec::new(),
        }
    }
}

impl Default for Sia {
    fn default() -> Self {
        Sia::new(SiaSolver::Fast)
    }
}

/// Sia's configurations of a cluster: per type, 1, 2, 4, … up to a node, then whole
/// nodes.
pub fn cluster_configs(cluster: &ClusterSpec) -> Vec<Config> {
    let mut out = Vec::new();
    for t in 0..cluster.device_types.len().max(1) {
        let nodes: Vec<u32> = cluster
            .nodes
            .iter()
            .filter(|n| n.device_type.0 as usize == t)
            .map(|n| n.gpus)
            .collect();
        let per = nodes.iter().copied().max().unwrap_or(0);
        if per == 0 {
            continue;
        }
        let mut g = 1;
        while g < per {
            out.push(Config {
                ty: t as u16,
                nodes: 1,
                gpus: g,
            });
            g *= 2;
        }
        for k in 1..=nodes.len() as u32 {
            out.push(Config {
                ty: t as u16,
                nodes: k,
                gpus: k * per,
            });
        }
    }
    out
}

/// Key of [`Sia::candidates`]: the bits of the performance model's and the batch
/// limits' numbers, nodes, devices.
type CandidateKey = ([u64; 12], u32, u32);

fn candidate_key(m: &GoodputFn, nodes: u32, gpus: u32) -> CandidateKey {
    let p = &m.perf;
    let l = &m.limits;
    (
        [
            p.alpha_c.to_bits(),
            p.beta_c.to_bits(),
            p.alpha_n.to_bits(),
            p.beta_n.to_bits(),
            p.alpha_r.to_bits(),
            p.beta_r.to_bits(),
            p.gamma.to_bits(),
            l.base_batch.to_bits(),
            l.max_batch.to_bits(),
            l.min_atomic.to_bits(),
            l.max_atomic.to_bits(),
            u64::from(l.accumulation),
        ],
        nodes,
        gpus,
    )
}

/// Most entries of [`Sia::candidates`] before it is cleared (models refitted
/// online are each new; the fitted per-type models of an application repeat).
const MAX_CANDIDATE_SETS: usize = 100_000;

impl Sia {
    /// Goodput of `m` on `nodes` nodes and `gpus` devices at its goodput-optimal
    /// batch, from the shared candidate cache.
    fn optimize(&mut self, m: &GoodputFn, nodes: u32, gpus: u32) -> f64 {
        let key = candidate_key(m, nodes, gpus);
        if self.candidates.len() >= MAX_CANDIDATE_SETS && !self.candidates.contains_key(&key) {
            self.candidates.clear();
        }
        let cands = self
            .candidates
            .entry(key)
            .or_insert_with(|| m.candidates(nodes, gpus));
        m.best_candidate(cands).map_or(0.0, |b| b.goodput.max(0.0))
    }

    /// Goodput per configuration (0: not usable), cached per goodput version.
    fn goodputs(&mut self, job: &JobView) -> Vec<f64> {
        if let Some((v, g)) = self.cache.get(&job.id) {
            if *v == job.goodput_version {
                return g.clone();
            }
        }
        let configs = std::mem::take(&mut self.configs);
        let g: Vec<f64> = configs
            .iter()
            .map(|c| {
                if !job.can_use(DeviceTypeId(c.ty)) || c.gpus > job.max_replicas.max(1) {
                    return 0.0;
                }
                let model = match job.goodput_by_type.get(c.ty as usize) {
                    Some(m) => m.as_ref(),
                    None if job.goodput_by_type.is_empty() => job.goodput.as_ref(),
                    None => None,
                };
                match model {
                    Some(m) => self.optimize(m, c.nodes, c.gpus),
                    // No goodput model (duration or throughput jobs): its speed.
                    None if job.goodput.is_none() && job.goodput_by_type.is_empty() => {
                        job.rate(DeviceTypeId(c.ty), c.gpus, true).max(0.0)
                    }
                    None => 0.0,
                }
            })
            .collect();
        self.configs = configs;
        self.cache.insert(job.id, (job.goodput_version, g.clone()));
        g
    }

    /// The configuration each job holds now, if it is one of the cluster's.
    pub fn held(&self, view: &ClusterView) -> Vec<Option<usize>> {
        let pools = TypedPools::new(view.cluster);
        view.jobs
            .iter()
            .map(|job| {
                let t = pools.type_of(&job.current)?;
                let r = job.current.replicas();
                self.configs.iter().position(|c| c.ty == t.0 && c.gpus == r)
            })
            .collect()
    }

    /// The knapsack of this round.
    pub fn problem(&mut self, view: &ClusterView) -> Problem {
        let key: Vec<(u16, u32)> = view
            .cluster
            .nodes
            .iter()
            .map(|n| (n.device_type.0, n.gpus))
            .collect();
        if key != self.cluster_key {
            self.configs = cluster_configs(view.cluster);
            self.cluster_key = key;
            self.cache.clear();
        }
        let types = view.cluster.device_types.len().max(1);
        let mut capacity = vec![0u64; types];
        for n in &view.cluster.nodes {
            capacity[n.device_type.0 as usize] += n.gpus as u64;
        }
        let pools = TypedPools::new(view.cluster);
        let mut options = Vec::with_capacity(view.jobs.len());
        for job in view.jobs {
            let fresh = job.attained_gpu_s <= 0.0;
            let mut s: Vec<f64> = if fresh {
                // Not run yet: one device of any usable type (Sia profiles it first).
                self.configs
                    .iter()
                    .map(|c| {
                        let ok = c.gpus == 1 && job.can_use(DeviceTypeId(c.ty));
                        if ok {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect()
            } else {
                self.goodputs(job)
            };
            let min = s
                .iter()
                .copied()
                .filter(|&g| g > 0.0)
                .fold(f64::INFINITY, f64::min);
            if !min.is_finite() {
                options.push(Vec::new());
                continue;
            }
            for g in &mut s {
                *g /= min;
            }
            // Re-allocation factor on every configuration but the one held.
            let held = pools.type_of(&job.current).and_then(|t| {
                let r = job.current.replicas();
                self.configs.iter().position(|c| c.ty == t.0 && c.gpus == r)
            });
            let age = (view.now_s - job.arrival_s).max(0.0);
            let pen = job.restart_s.unwrap_or(self.restart_s);
            let rf = if age < pen {
                1.0
            } else {
                (age - job.num_restarts as f64 * pen).max(0.0) / (age + pen)
            };
            let mut opts = Vec::new();
            for (c, &sc) in s.iter().enumerate() {
                if sc <= 0.0 {
                    continue;
                }
                let sc = if !job.current.is_empty() && held != Some(c) {
                    sc * rf
                } else {
                    sc
                };
                let cost = if sc > 0.0 {
                    sc.powf(self.p).min(3000.0)
                } else {
                    3000.0
                };
                let v = self.lambda_n - cost;
                if v > 0.0 {
                    opts.push((c, v));
                }
            }
            options.push(opts);
        }
        Problem {
            configs: self.configs.clone(),
            capacity,
            options,
        }
    }
}

/// Fast near-exact solution: the best of three starts, each completed by
/// [`improve_from`]: nothing allocated; the Lagrangian relaxation's choice (per-type
/// device prices by subgradient steps, each job then picks independently), repaired
/// to fit by dropping the choices that lose least value per device; and `held`
/// (the configurations the jobs hold now, which the re-allocation factor favours).
pub fn solve_fast(p: &Problem, held: &[Option<usize>]) -> Vec<Option<usize>> {
    let mut best: Option<(f64, Vec<Option<usize>>)> = None;
    let mut consider = |c: Vec<Option<usize>>| {
        let (v, fits) = p.evaluate(&c);
        if fits && best.as_ref().is_none_or(|b| v > b.0 + 1e-12) {
            best = Some((v, c));
        }
    };
    consider(improve_from(p, &vec![None; p.options.len()]));
    consider(improve_from(p, &repair(p, lagrangian(p))));
    if held.len() == p.options.len() && p.evaluate(held).1 {
        consider(improve_from(p, held));
    }
    best.map(|b| b.1)
        .unwrap_or_else(|| vec![None; p.options.len()])
}

/// Each job's best configuration under per-type device prices found by projected
/// subgradient steps on the capacity constraints.
fn lagrangian(p: &Problem) -> Vec<Option<usize>> {
    let types = p.capacity.len();
    let mut mu = vec![0.0f64; types];
    let mut pick = vec![None; p.options.len()];
    let mut used = vec![0u64; types];
    let vmax = p
        .options
        .iter()
        .flatten()
        .map(|o| o.1)
        .fold(0.0f64, f64::max);
    for it in 0..40 {
        used.iter_mut().for_each(|u| *u = 0);
        for (j, o) in p.options.iter().enumerate() {
            let mut b: Option<(f64, usize)> = None;
            for &(c, v) in o {
                let cfg = p.configs[c];
                let r = v - mu[cfg.ty as usize] * cfg.gpus as f64;
                if r > 0.0 && b.is_none_or(|x| r > x.0) {
                    b = Some((r, c));
                }
            }
            pick[j] = b.map(|x| x.1);
            if let Some(c) = pick[j] {
                used[p.configs[c].ty as usize] += p.configs[c].gpus as u64;
            }
        }
        let step = vmax / (1.0 + it as f64);
        let mut all_fit = true;
        for t in 0..types {
            let cap = p.capacity[t].max(1) as f64;
            let g = (used[t] as f64 - cap) / cap;
            if g > 0.0 {
                all_fit = false;
            }
            mu[t] = (mu[t] + step * g / cap.sqrt()).max(0.0);
        }
        if all_fit && it > 0 {
            break;
        }
    }
    pick
}

/// Makes a choice fit: on each over-used type, drops the choices with the least
/// value per device until the type fits.
fn repair(p: &Problem, mut choice: Vec<Option<usize>>) -> Vec<Option<usize>> {
    let val = |j: usize, c: usize| p.options[j].iter().find(|o| o.0 == c).map_or(0.0, |o| o.1);
    for t in 0..p.capacity.len() {
        let mut on: Vec<(f64, usize)> = choice
            .iter()
            .enumerate()
            .filter_map(|(j, c)| {
                let c = (*c)?;
                (p.configs[c].ty as usize == t).then(|| (val(j, c) / p.configs[c].gpus as f64, j))
            })
            .collect();
        let mut used: u64 = on
            .iter()
            .map(|&(_, j)| p.configs[choice[j].unwrap_or(0)].gpus as u64)
            .sum();
        on.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, j) in on {
            if used <= p.capacity[t] {
                break;
            }
            if let Some(c) = choice[j].take() {
                used -= p.configs[c].gpus as u64;
            }
        }
    }
    choice
}

/// From a feasible `start`: greedy on value gained per extra device, then
/// single-job improvement passes.
fn improve_from(p: &Problem, start: &[Option<usize>]) -> Vec<Option<usize>> {
    let n = p.options.len();
    let mut free: Vec<i64> = p.capacity.iter().map(|&c| c as i64).collect();
    let mut choice: Vec<Option<(usize, f64)>> = vec![None; n];
    for (j, c) in start.iter().enumerate() {
        if let Some(&(c, v)) = c.and_then(|c| p.options[j].iter().find(|o| o.0 == c)) {
            free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
            choice[j] = Some((c, v));
        }
    }
    // Best move of a job: (gain per device, job, option index) among those that fit.
    let best_move = |j: usize, cur: Option<(usize, f64)>, free: &[i64]| -> Option<(f64, usize)> {
        let (cur_v, cur_cfg) = cur.map_or((0.0, None), |(c, v)| (v, Some(p.configs[c])));
        let mut best: Option<(f64, usize)> = None;
        for (k, &(c, v)) in p.options[j].iter().enumerate() {
            if v <= cur_v + 1e-12 {
                continue;
            }
            let cfg = p.configs[c];
            let back = cur_cfg
                .filter(|o| o.ty == cfg.ty)
                .map_or(0, |o| o.gpus as i64);
            if (cfg.gpus as i64) > free[cfg.ty as usize] + back {
                continue;
            }
            let extra = (cfg.gpus as i64 - cur_cfg.map_or(0, |o| o.gpus as i64)).max(1) as f64;
            let ratio = (v - cur_v) / extra;
            if best.is_none_or(|b| ratio > b.0 + 1e-15) {
                best = Some((ratio, k));
            }
        }
        best
    };
    let apply = |j: usize, k: usize, choice: &mut [Option<(usize, f64)>], free: &mut [i64]| {
        if let Some((c, _)) = choice[j] {
            let o = p.configs[c];
            free[o.ty as usize] += o.gpus as i64;
        }
        let (c, v) = p.options[j][k];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[j] = Some((c, v));
    };
    // Max-heap on ratio; stale entries are re-evaluated when popped.
    let mut heap: std::collections::BinaryHeap<(OrdF64, std::cmp::Reverse<usize>)> =
        std::collections::BinaryHeap::new();
    for (j, &ch) in choice.iter().enumerate() {
        if let Some((r, _)) = best_move(j, ch, &free) {
            heap.push((OrdF64(r), std::cmp::Reverse(j)));
        }
    }
    while let Some((OrdF64(r), std::cmp::Reverse(j))) = heap.pop() {
        match best_move(j, choice[j], &free) {
            Some((r2, k)) if (r2 - r).abs() <= 1e-12 * r.abs().max(1.0) => {
                apply(j, k, &mut choice, &mut free);
                if let Some((r3, _)) = best_move(j, choice[j], &free) {
                    heap.push((OrdF64(r3), std::cmp::Reverse(j)));
                }
            }
            Some((r2, _)) => heap.push((OrdF64(r2), std::cmp::Reverse(j))),
            None => {}
        }
    }
    // Improvement: each job to its best configuration given what the others hold,
    // including giving its devices to an unallocated job of higher value.
    for _pass in 0..3 {
        let mut improved = false;
        for j in 0..n {
            let cur_v = choice[j].map_or(0.0, |x| x.1);
            let mut best: Option<(f64, usize)> = None;
            for (k, &(c, v)) in p.options[j].iter().enumerate() {
                if v <= cur_v + 1e-12 {
                    continue;
                }
                let cfg = p.configs[c];
                let back = choice[j]
                    .map(|(c0, _)| p.configs[c0])
                    .filter(|o| o.ty == cfg.ty)
                    .map_or(0, |o| o.gpus as i64);
                if (cfg.gpus as i64) <= free[cfg.ty as usize] + back && best.is_none_or(|b| v > b.0)
                {
                    best = Some((v, k));
                }
            }
            if let Some((_, k)) = best {
                apply(j, k, &mut choice, &mut free);
                improved = true;
            }
        }
        // Exchange: a job takes a better configuration with devices another job on
        // the same type gives up by shrinking (or stopping), when the sum gains.
        for _ in 0..200 {
            if !exchange(p, &mut choice, &mut free) && !relocate(p, &mut choice, &mut free) {
                break;
            }
            improved = true;
        }
        if !improved {
            break;
        }
    }
    choice.into_iter().map(|c| c.map(|x| x.0)).collect()
}

/// The best single exchange (see [`improve_from`]); applies it and returns whether
/// there was one that gains. Per type, `cheapest[d]` holds the two least losses
/// (of different jobs) of freeing at least `d` devices by shrinking one job.
fn exchange(p: &Problem, choice: &mut [Option<(usize, f64)>], free: &mut [i64]) -> bool {
    let types = p.capacity.len();
    let maxg = p.configs.iter().map(|c| c.gpus).max().unwrap_or(0) as usize;
    // (loss, job, option index or usize::MAX for none), two best per freed count.
    type Slot = [(f64, usize, usize); 2];
    let empty: Slot = [(f64::INFINITY, usize::MAX, 0); 2];
    let mut cheapest: Vec<Vec<Slot>> = vec![vec![empty; maxg + 1]; types];
    let put = |slot: &mut Slot, e: (f64, usize, usize)| {
        if e.1 == slot[0].1 {
            if e.0 < slot[0].0 {
                slot[0] = e;
            }
        } else if e.0 < slot[0].0 {
            slot[1] = slot[0];
            slot[0] = e;
        } else if e.0 < slot[1].0 {
            slot[1] = e;
        }
    };
    for (i, ch) in choice.iter().enumerate() {
        let Some((c0, v0)) = *ch else { continue };
        let o = p.configs[c0];
        let t = o.ty as usize;
        put(&mut cheapest[t][o.gpus as usize], (v0, i, usize::MAX));
        for (k, &(c, v)) in p.options[i].iter().enumerate() {
            let cfg = p.configs[c];
            if cfg.ty == o.ty && cfg.gpus < o.gpus {
                put(
                    &mut cheapest[t][(o.gpus - cfg.gpus) as usize],
                    (v0 - v, i, k),
                );
            }
        }
    }
    // Suffix minimum: freeing at least d.
    for per in cheapest.iter_mut() {
        for d in (0..maxg).rev() {
            let next = per[d + 1];
            for e in next {
                if e.1 != usize::MAX {
                    put(&mut per[d], e);
                }
            }
        }
    }
    // (net gain, job, its option, the shrink that makes room).
    type Move = (f64, usize, usize, (f64, usize, usize));
    let mut best: Option<Move> = None;
    for (j, ch) in choice.iter().enumerate() {
        let (cur_v, cur) = ch.map_or((0.0, None), |(c, v)| (v, Some(p.configs[c])));
        for (k, &(c, v)) in p.options[j].iter().enumerate() {
            if v <= cur_v + 1e-12 {
                continue;
            }
            let cfg = p.configs[c];
            let t = cfg.ty as usize;
            let back = cur.filter(|o| o.ty == cfg.ty).map_or(0, |o| o.gpus as i64);
            let need = cfg.gpus as i64 - back - free[t];
            if need <= 0 || need as usize > maxg {
                continue;
            }
            let slot = cheapest[t][need as usize];
            let Some(&e) = slot.iter().find(|e| e.1 != j && e.1 != usize::MAX) else {
                continue;
            };
            let net = v - cur_v - e.0;
            if net > 1e-9 && best.is_none_or(|b| net > b.0) {
                best = Some((net, j, k, e));
            }
        }
    }
    let Some((_, j, k, (_, i, ki))) = best else {
        return false;
    };
    // Shrink i, then move j.
    if let Some((c0, _)) = choice[i] {
        let o = p.configs[c0];
        free[o.ty as usize] += o.gpus as i64;
        choice[i] = None;
    }
    if ki != usize::MAX {
        let (c, v) = p.options[i][ki];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[i] = Some((c, v));
    }
    if let Some((c0, _)) = choice[j] {
        let o = p.configs[c0];
        free[o.ty as usize] += o.gpus as i64;
    }
    let (c, v) = p.options[j][k];
    free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
    choice[j] = Some((c, v));
    true
}

/// The best relocation (see [`improve_from`]): a running job moves to a
/// configuration of another type that fits in its free devices, and the devices it
/// leaves (with those already free there) go to the one job that gains most from
/// them on the type it left (a job of that type growing, or a waiting one starting).
/// Applies it and returns whether there was one that gains: the exact optimum often
/// differs from the greedy by such type swaps (`pacer-lab sia-gap`).
fn relocate(p: &Problem, choice: &mut [Option<(usize, f64)>], free: &mut [i64]) -> bool {
    let types = p.capacity.len();
    let maxg = p.configs.iter().map(|c| c.gpus).max().unwrap_or(0) as usize;
    // Per type and device count d: the two best (gain, job, option) of one job taking
    // a configuration of that type with at most d more devices than it holds there.
    type Slot = [(f64, usize, usize); 2];
    let empty: Slot = [(0.0, usize::MAX, 0); 2];
    let mut grow: Vec<Vec<Slot>> = vec![vec![empty; maxg + 1]; types];
    let put = |slot: &mut Slot, e: (f64, usize, usize)| {
        if e.1 == slot[0].1 {
            if e.0 > slot[0].0 {
                slot[0] = e;
            }
        } else if e.0 > slot[0].0 {
            slot[1] = slot[0];
            slot[0] = e;
        } else if e.0 > slot[1].0 {
            slot[1] = e;
        }
    };
    for (b, ch) in choice.iter().enumerate() {
        let (cur_v, cur) = ch.map_or((0.0, None), |(c, v)| (v, Some(p.configs[c])));
        for (k, &(c, v)) in p.options[b].iter().enumerate() {
            let cfg = p.configs[c];
            // Growing on its own type, or starting; a job running elsewhere is not
            // moved here (that would be a chain of relocations).
            let held = match cur {
                Some(o) if o.ty == cfg.ty => o.gpus,
                Some(_) => continue,
                None => 0,
            };
            if v <= cur_v + 1e-12 || cfg.gpus <= held {
                continue;
            }
            put(
                &mut grow[cfg.ty as usize][(cfg.gpus - held) as usize],
                (v - cur_v, b, k),
            );
        }
    }
    // Prefix maximum: at most d more devices.
    for per in grow.iter_mut() {
        for d in 1..=maxg {
            let prev = per[d - 1];
            for e in prev {
                if e.1 != usize::MAX {
                    put(&mut per[d], e);
                }
            }
        }
    }
    // (net gain, moving job, its option, the grower on the type it leaves).
    let mut best: Option<(f64, usize, usize, (f64, usize, usize))> = None;
    for (a, ch) in choice.iter().enumerate() {
        let Some((c0, v0)) = *ch else { continue };
        let from = p.configs[c0];
        let x = from.ty as usize;
        let room = (from.gpus as i64 + free[x]).clamp(0, maxg as i64) as usize;
        let Some(&g) = grow[x][room].iter().find(|e| e.1 != a && e.1 != usize::MAX) else {
            continue;
        };
        for (k, &(c, v)) in p.options[a].iter().enumerate() {
            let cfg = p.configs[c];
            if cfg.ty == from.ty || cfg.gpus as i64 > free[cfg.ty as usize] {
                continue;
            }
            let net = v - v0 + g.0;
            if net > 1e-9 && best.is_none_or(|b| net > b.0) {
                best = Some((net, a, k, g));
            }
        }
    }
    let Some((_, a, k, (_, b, kb))) = best else {
        return false;
    };
    for (j, k) in [(a, k), (b, kb)] {
        if let Some((c0, _)) = choice[j] {
            let o = p.configs[c0];
            free[o.ty as usize] += o.gpus as i64;
        }
        let (c, v) = p.options[j][k];
        free[p.configs[c].ty as usize] -= p.configs[c].gpus as i64;
        choice[j] = Some((c, v));
    }
    debug_assert!(free.iter().all(|&f| f >= 0));
    true
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Node-level allocations for the chosen configurations: unchanged (type, devices)
/// keep their nodes, the others are placed largest first.
pub fn place(
    cluster: &ClusterSpec,
    jobs: &[JobView],
    configs: &[Config],
    choice: &[Option<usize>],
) -> Vec<Allocation> {
    let mut pools = TypedPools::new(cluster);
    let mut out = vec![Allocation::empty(); jobs.len()];
    let mut rest = Vec::new();
    for (j, c) in choice.iter().enumerate() {
        let Some(c) = *c else { continue };
        let cfg = configs[c];
        let cur = &jobs[j].current;
        if pools.type_of(cur) == Some(DeviceTypeId(cfg.ty))
            && cur.replicas() == cfg.gpus
            && pools.take_exact(cur)
        {
            out[j] = cur.clone();
        } else {
            rest.push((j, cfg));
        }
    }
    rest.sort_by_key(|&(j, cfg)| (std::cmp::Reverse(cfg.gpus), jobs[j].id));
    for (j, cfg) in rest {
        if let Some(a) = pools.take(DeviceTypeId(cfg.ty), cfg.gpus) {
            out[j] = a;
        }
    }
    out
}

impl Policy for Sia {
    fn name(&self) -> &'static str {
        match self.solver {
            SiaSolver::Fast => "sia",
            SiaSolver::Exact => "sia-exact",
        }
    }

    fn adaptive_batch(&self) -> bool {
        true
    }

    fn notes(&self) -> String {
        match self.solver {
            SiaSolver::Fast => String::new(),
            SiaSolver::Exact => format!(
                "exact: {} rounds, {} stopped at the node limit ({}), {} solver failures \
                 (fast solution used)",
                self.exact_rounds, self.exact_at_limit, self.node_limit, self.exact_failed
            ),
        }
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let live: std::collections::HashSet<JobId> = view.jobs.iter().map(|j| j.id).collect();
        self.cache.retain(|id, _| live.contains(id));
        let problem = self.problem(view);
        let held = self.held(view);
        let choice = match self.solver {
            SiaSolver::Fast => solve_fast(&problem, &held),
            SiaSolver::Exact => {
                // Bounded branch and bound, warm-started with the fast solution; at
                // the bound, the better of its incumbent and the fast solution.
                let fast = solve_fast(&problem, &held);
                let (choice, outcome) = solve_exact_bounded(&problem, &fast, self.node_limit);
                self.exact_rounds += 1;
                match outcome {
                    ExactOutcome::Optimal => {}
                    ExactOutcome::NodeLimit => self.exact_at_limit += 1,
                    ExactOutcome::Failed => self.exact_failed += 1,
                }
                choice
            }
        };
        place(view.cluster, view.jobs, &problem.configs, &choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_follow_sia() {
        let c = ClusterSpec::parse("2x4:a,1x8:b", "t").unwrap();
        let g: Vec<(u16, u32, u32)> = cluster_configs(&c)
            .iter()
            .map(|c| (c.ty, c.nodes, c.gpus))
            .collect();
        assert_eq!(
            g,
            [
                (0, 1, 1),
                (0, 1, 2),
                (0, 1, 4),
                (0, 2, 8),
                (1, 1, 1),
                (1, 1, 2),
                (1, 1, 4),
                (1, 1, 8)
            ]
        );
    }

    #[test]
    fn fast_matches_exact_on_a_small_knapsack() {
        let configs = vec![
            Config {
                ty: 0,
                nodes: 1,
                gpus: 1,
            },
            Config {
                ty: 0,
                nodes: 1,
                gpus: 2,
            },
            Config {
                ty: 1,
                nodes: 1,
                gpus: 1,
            },
            Config {
                ty: 1,
                nodes: 1,
                gpus: 2,
            },
        ];
        let p = Problem {
            configs,
            capacity: vec![2, 2],
            options: vec![
                vec![(0, 0.1), (1, 0.4), (2, 0.2), (3, 0.6)],
                vec![(0, 0.1), (1, 0.3), (2, 0.1), (3, 0.2)],
                vec![(0, 0.1), (2, 0.1)],
            ],
        };
        let exact = solve_exact(&p).unwrap();
        let (ve, fe) = p.evaluate(&exact);
        assert!(fe);
        assert!((ve - 0.9).abs() < 1e-9, "{ve} {exact:?}");
        let (vf, ff) = p.evaluate(&solve_fast(&p, &[]));
        assert!(ff && vf <= ve + 1e-9 && vf >= 0.8 * ve, "{vf} vs {ve}");
    }
}
