//! Sia-style heterogeneity-aware goodput scheduling (`docs/algorithms.md §3d`).
//!
//! Every round, for each job and each configuration (device type, nodes, devices)
//! the job's goodput at its goodput-optimal batch, from its per-type goodput model
//! ([`JobView::goodput_by_type`]). Goodputs are normalised per job by its smallest
//! non-zero one, so `S ≥ 1` is a speedup over the job's cheapest useful
//! configuration. A job that moved would lose its restart time: every configuration
//! other than the one it holds is scaled by the re-allocation factor
//! `max(age − restarts·penalty, 0) / (age + penalty)` (1 while the job is younger
//! than the penalty). The cost of a configuration is `S^p` (p = −0.5), rounded to
//! two decimals as Sia's simulator rounds it, and leaving a job without devices
//! costs `λ_n` (1.1); the policy minimises the total cost with at most one
//! configuration per job and no more devices of a type than the cluster has. With
//! `v = λ_n − S^p` that is a multiple-choice knapsack with one capacity per device
//! type: maximise `Σ v` over the chosen configurations.
//!
//! Configurations, as in Sia: 1, 2, 4, … devices up to a node of the type, then
//! whole nodes, within the job's `max_replicas`. A job that has not trained yet has
//! no model (Sia's simulator fits one from the steps a job has run; a job still in
//! its first restart has none): it is offered one device of any type it can use, at
//! `S = 1`, so it ties with every job waiting to start. A job keeps its devices while
//! a restart the policy caused is under way (Sia's `scaling_underway`). Ties between
//! equal values are broken in a pseudo-random order drawn each round, not by
//! arrival: Sia's program leaves them open and its solver (CBC) settles them in an
//! order unrelated to arrival ([`Sia::shuffle_ties`]). Together these make Sia's
//! loop on jobs whose restart outlasts a round (bert, 120 s): started, held through
//! the restart, still without a model, and dropped for a waiting job
//! (experiments/sia/MIXES.md).
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
mod fast;
mod mix;
mod pacer;
pub use exact::{solve_exact, solve_exact_bounded, ExactOutcome, DEFAULT_NODE_LIMIT};
pub use fast::{solve_fast, solve_fast_with};
pub use mix::SiaPacerMix;
pub use pacer::{SiaPacer, Weights};

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
    /// A job that has not run yet is offered one device of each usable type at its
    /// one-device goodput there, normalised by the slowest type's (`sia-pacer`),
    /// instead of `S = 1` on every type (Sia's).
    pub fresh_by_speed: bool,
    /// Keep a job within its exploration cap (`JobView::max_replicas`, Sia's);
    /// `false` (`sia-pacer`): a job with a cap of at least 2 (it has run) may use up
    /// to its batch limit (`max_batch / min_atomic`, at most 64) on a type it has a
    /// goodput model for; a cap of 1 stays.
    pub explore_cap: bool,
    /// Without the exploration cap: the smallest cap (`JobView::max_replicas`, twice
    /// the most replicas the job has run) from which the job may use its batch limit
    /// (2: once it has run at all; 4: once it has run on at least two devices).
    pub explore_from: u32,
    /// A job counts as not run (one device of any usable type at `S = 1`) until it
    /// has made progress (`JobView::work_done > 0`), as in Sia's simulator, whose
    /// job has no throughput model until it has trained a step: a job still in its
    /// first restart has none (`sia`). `false` (`sia-pacer`): until it has held a
    /// device (`JobView::attained_gpu_s > 0`).
    pub fresh_until_trained: bool,
    /// Costs `S^p` rounded to two decimals, as Sia's simulator rounds its matrix
    /// (`sia.py`, `np.round(pup_mat, 2)`): configurations whose costs round alike
    /// tie (`sia`).
    pub round_costs: bool,
    /// Ties between equal-valued choices broken by a pseudo-random order drawn anew
    /// each round (a value offset below 10⁻⁶, from the job and the round's time),
    /// not by arrival: Sia's integer program does not order equal-valued jobs, and
    /// its solver (CBC) starts waiting jobs in an order unrelated to arrival
    /// (`sia`; experiments/sia/MIXES.md, "Why bert waits in Sia's simulator").
    pub shuffle_ties: bool,
    /// Keep a job's allocation while a restart this policy caused is under way
    /// (Sia's `scaling_underway`, `preserve_ckpt_allocs`).
    pub hold_restarts: bool,
    /// Value a job's configurations at global batches up to the batch it asked for
    /// (`JobView::requested_batch`; at least the smallest batch a configuration can
    /// run), as Sia's policy does: its speedup functions take the job's
    /// `target_batch_size` as their largest batch (`job.py`, `get_speedup_fn`), while
    /// the job itself then trains at its goodput-optimal batch up to the
    /// application's largest (`sia`). `false` (`sia-pacer`): up to the application's
    /// largest, the batch the job will use.
    pub batch_up_to_request: bool,
    /// The fast solver also swaps two running jobs' types (`sia`; Sia's exact
    /// program does); `false` (`sia-pacer`, chosen on its tuning set): the moves
    /// before issue 25 only.
    pub swaps: bool,
    /// Salt of [`Sia::shuffle_ties`]'s order (0: the default order; `sia-tN` on the
    /// command line): another pseudo-random order among the same ties, to measure how
    /// much a result moves with the tie order alone, as Sia's own runs move with the
    /// order of its integer program's rows (experiments/sia/MIXES.md).
    pub tie_salt: u64,
    /// Per job: until when (simulation seconds) the restart this policy caused lasts.
    restarting: HashMap<JobId, f64>,
    /// `sia-exact`: branch-and-bound nodes per round before it settles for its best
    /// solution so far (deterministic, unlike a wall-clock limit).
    pub node_limit: u64,
    /// `sia-exact` rounds solved, stopped at the node limit, and failed.
    exact_rounds: u64,
    exact_at_limit: u64,
    exact_failed: u64,
    /// Per job: goodput version and goodput per configuration index.
    cache: HashMap<JobId, (u64, u32, Vec<f64>)>,
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
            fresh_by_speed: false,
            explore_cap: true,
            explore_from: 2,
            fresh_until_trained: true,
            round_costs: true,
            shuffle_ties: true,
            hold_restarts: true,
            batch_up_to_request: true,
            swaps: true,
            tie_salt: 0,
            restarting: HashMap::new(),
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

    /// Most devices `job` may get: its `max_replicas`, or without the exploration
    /// cap its batch limit (see [`Sia::explore_cap`]).
    fn replica_cap(&self, job: &JobView) -> u32 {
        let cap = job.max_replicas.max(1);
        if self.explore_cap || cap < self.explore_from.max(2) {
            return cap;
        }
        match job.goodput_by_type.iter().flatten().next() {
            Some(m) => {
                let by_batch = (m.limits.max_batch / m.limits.min_atomic.max(1.0)) as u32;
                cap.max(by_batch.min(64))
            }
            None => cap,
        }
    }

    /// Goodput per configuration (0: not usable), cached per goodput version and cap.
    fn goodputs(&mut self, job: &JobView) -> Vec<f64> {
        let cap = self.replica_cap(job);
        if let Some((v, c, g)) = self.cache.get(&job.id) {
            if *v == job.goodput_version && *c == cap {
                return g.clone();
            }
        }
        let configs = std::mem::take(&mut self.configs);
        let g: Vec<f64> = configs
            .iter()
            .map(|c| {
                if !job.can_use(DeviceTypeId(c.ty)) || c.gpus > cap {
                    return 0.0;
                }
                let model = match job.goodput_by_type.get(c.ty as usize) {
                    Some(m) => m.as_ref(),
                    None if job.goodput_by_type.is_empty() => job.goodput.as_ref(),
                    None => None,
                };
                match model {
                    Some(m) => {
                        let m = self.valued_limits(m, job, c.gpus);
                        self.optimize(&m, c.nodes, c.gpus)
                    }
                    // No goodput model (duration or throughput jobs): its speed.
                    None if job.goodput.is_none() && job.goodput_by_type.is_empty() => {
                        job.rate(DeviceTypeId(c.ty), c.gpus, true).max(0.0)
                    }
                    None => 0.0,
                }
            })
            .collect();
        self.configs = configs;
        self.cache
            .insert(job.id, (job.goodput_version, cap, g.clone()));
        g
    }

    /// `m` with the largest batch the policy values `job` at on `gpus` devices:
    /// with [`Sia::batch_up_to_request`], the requested batch (at least the
    /// smallest batch `gpus` devices run, Sia's one candidate there), at most `m`'s.
    fn valued_limits(&self, m: &GoodputFn, job: &JobView, gpus: u32) -> GoodputFn {
        let mut m = *m;
        if let (true, Some(b)) = (self.batch_up_to_request, job.requested_batch) {
            let l = &mut m.limits;
            let lo = l.base_batch.max(l.min_atomic * f64::from(gpus));
            l.max_batch = l.max_batch.min(b.max(lo));
        }
        m
    }

    /// Rebuilds the configurations when the cluster is not the one last seen.
    fn ensure_configs(&mut self, cluster: &ClusterSpec) {
        let key: Vec<(u16, u32)> = cluster
            .nodes
            .iter()
            .map(|n| (n.device_type.0, n.gpus))
            .collect();
        if key != self.cluster_key {
            self.configs = cluster_configs(cluster);
            self.cluster_key = key;
            self.cache.clear();
        }
    }

    /// Sia's re-allocation factor of `job` at `now_s`: what a configuration other
    /// than the one it holds is worth, `max(age − restarts·penalty, 0) / (age +
    /// penalty)` (1 while the job is younger than the penalty).
    fn reallocation_factor(&self, job: &JobView, now_s: f64) -> f64 {
        let age = (now_s - job.arrival_s).max(0.0);
        let pen = job.restart_s.unwrap_or(self.restart_s);
        if age < pen {
            1.0
        } else {
            (age - job.num_restarts as f64 * pen).max(0.0) / (age + pen)
        }
    }

    /// A configuration's value `λ_n − S^p` at speedup `sc` (cost capped at 3000,
    /// rounded to two decimals with [`Sia::round_costs`]).
    fn value(&self, sc: f64) -> f64 {
        let cost = if sc > 0.0 {
            sc.powf(self.p).min(3000.0)
        } else {
            3000.0
        };
        let cost = if self.round_costs {
            (cost * 100.0).round() / 100.0
        } else {
            cost
        };
        self.lambda_n - cost
    }

    /// Drops the cached goodputs of jobs no longer in `view`.
    pub fn forget_finished(&mut self, view: &ClusterView) {
        let live: std::collections::HashSet<JobId> = view.jobs.iter().map(|j| j.id).collect();
        self.cache.retain(|id, _| live.contains(id));
        self.restarting.retain(|id, _| live.contains(id));
    }

    /// With [`Sia::hold_restarts`]: takes the jobs in a restart this policy caused out
    /// of `problem` (options cleared, their devices out of the capacity) and returns,
    /// per job, the configuration it keeps.
    pub fn pin_restarting(
        &self,
        view: &ClusterView,
        problem: &mut Problem,
        held: &[Option<usize>],
    ) -> Vec<Option<usize>> {
        let mut pinned = vec![None; view.jobs.len()];
        if !self.hold_restarts {
            return pinned;
        }
        for (j, job) in view.jobs.iter().enumerate() {
            let busy = self
                .restarting
                .get(&job.id)
                .is_some_and(|&until| view.now_s < until);
            if let (true, false, Some(c)) = (busy, job.current.is_empty(), held[j]) {
                pinned[j] = Some(c);
                problem.options[j].clear();
                let cfg = problem.configs[c];
                let cap = &mut problem.capacity[cfg.ty as usize];
                *cap = cap.saturating_sub(cfg.gpus as u64);
            }
        }
        pinned
    }

    /// Remembers the jobs this round moves: they restart until their penalty ends.
    pub fn note_restarts(&mut self, view: &ClusterView, out: &[Allocation]) {
        for (job, a) in view.jobs.iter().zip(out) {
            if !a.is_empty() && *a != job.current {
                let pen = job.restart_s.unwrap_or(self.restart_s);
                self.restarting.insert(job.id, view.now_s + pen);
            }
        }
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
        self.ensure_configs(view.cluster);
        let types = view.cluster.device_types.len().max(1);
        let mut capacity = vec![0u64; types];
        for n in &view.cluster.nodes {
            capacity[n.device_type.0 as usize] += n.gpus as u64;
        }
        let pools = TypedPools::new(view.cluster);
        let mut options = Vec::with_capacity(view.jobs.len());
        for job in view.jobs {
            let fresh = if self.fresh_until_trained {
                job.work_done <= 0.0
            } else {
                job.attained_gpu_s <= 0.0
            };
            let tie = if self.shuffle_ties {
                let key = (job.id.0 as u64).wrapping_add(self.tie_salt.wrapping_mul(SALT_STEP));
                TIE_SPAN * unit_hash(key, view.now_s.to_bits())
            } else {
                0.0
            };
            let by_speed = if fresh && self.fresh_by_speed {
                let mut g = self.goodputs(job);
                for (gi, c) in g.iter_mut().zip(&self.configs) {
                    if c.gpus != 1 {
                        *gi = 0.0;
                    }
                }
                g.iter().any(|&x| x > 0.0).then_some(g)
            } else {
                None
            };
            let mut s: Vec<f64> = if let Some(g) = by_speed {
                g
            } else if fresh {
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
            let rf = self.reallocation_factor(job, view.now_s);
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
                let v = self.value(sc);
                if v > 0.0 {
                    opts.push((c, v + tie));
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

/// Width of [`Sia::shuffle_ties`]'s offsets: far below the 0.01 steps of rounded
/// costs and the differences between distinct goodputs that matter.
const TIE_SPAN: f64 = 1e-6;

/// What one step of [`Sia::tie_salt`] shifts a job's key of the tie hash by (odd, far
/// above any job index, so two salts never share a key).
const SALT_STEP: u64 = 0xD1B5_4A32_D192_ED03;

impl Sia {
    /// `sia-tN`: `sia` with its ties in the order of salt N ([`Sia::tie_salt`]).
    pub fn parse_tie_knob(name: &str) -> Option<u64> {
        let n = name.strip_prefix("sia-t")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    }
}

/// A uniform number in [0, 1) from two keys (SplitMix64 finaliser).
fn unit_hash(a: u64, b: u64) -> f64 {
    let mut z = a
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(b)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Node-level allocations for the chosen configurations: unchanged (type, devices)
/// keep their nodes, the others are placed largest first.
pub fn place(
    cluster: &ClusterSpec,
    jobs: &[JobView],
    configs: &[Config],
    choice: &[Option<usize>],
) -> Vec<Allocation> {
    place_in(&mut TypedPools::new(cluster), jobs, configs, choice)
}

/// [`place`] from the free devices of `pools` (taken from them).
pub fn place_in(
    pools: &mut TypedPools,
    jobs: &[JobView],
    configs: &[Config],
    choice: &[Option<usize>],
) -> Vec<Allocation> {
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
        self.forget_finished(view);
        let mut problem = self.problem(view);
        let mut held = self.held(view);
        let pinned = self.pin_restarting(view, &mut problem, &held);
        for (h, p) in held.iter_mut().zip(&pinned) {
            if p.is_some() {
                *h = None;
            }
        }
        let mut choice = match self.solver {
            SiaSolver::Fast => solve_fast_with(&problem, &held, self.swaps),
            SiaSolver::Exact => {
                // Bounded branch and bound, warm-started with the fast solution; at
                // the bound, the better of its incumbent and the fast solution.
                let fast = solve_fast_with(&problem, &held, self.swaps);
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
        for (c, p) in choice.iter_mut().zip(&pinned) {
            if p.is_some() {
                *c = *p;
            }
        }
        let out = place(view.cluster, view.jobs, &problem.configs, &choice);
        self.note_restarts(view, &out);
        out
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

    fn model(speed: f64) -> GoodputFn {
        crate::test_goodput(speed, 100.0)
    }

    /// Devices per option of job 0 in `sia`'s knapsack of `view`.
    fn offered(sia: &mut Sia, view: &ClusterView) -> Vec<u32> {
        let p = sia.problem(view);
        p.options[0].iter().map(|o| p.configs[o.0].gpus).collect()
    }

    #[test]
    fn a_job_counts_as_not_run_until_it_has_trained() {
        let c = ClusterSpec::parse("1x4:a,1x4:b", "t").unwrap();
        let mut j = JobView::basic(JobId(0), 0.0, 1);
        j.max_replicas = 4;
        j.goodput_by_type = vec![Some(model(1.0)), Some(model(2.0))];
        // It held devices for its whole first restart but has not trained.
        j.attained_gpu_s = 120.0;
        let jobs = [j.clone()];
        let view = ClusterView {
            now_s: 600.0,
            cluster: &c,
            jobs: &jobs,
        };
        let mut sia = Sia::new(SiaSolver::Fast);
        assert_eq!(offered(&mut sia, &view), [1, 1]);
        let p = sia.problem(&view);
        // One device of either type at S = 1: cost 1, value λ_n − 1 (and a tie offset).
        for o in &p.options[0] {
            assert!((o.1 - 0.1).abs() < 1e-5, "{o:?}");
        }
        // `sia-pacer`'s rule: a job that has held devices has its models.
        sia.fresh_until_trained = false;
        assert!(offered(&mut sia, &view).contains(&4));
        // Once it has trained, Sia's too.
        let mut trained = j;
        trained.work_done = 0.01;
        let jobs = [trained];
        let view = ClusterView {
            now_s: 600.0,
            cluster: &c,
            jobs: &jobs,
        };
        assert!(offered(&mut Sia::new(SiaSolver::Fast), &view).contains(&4));
    }

    #[test]
    fn configurations_are_valued_up_to_the_requested_batch() {
        let mut sia = Sia::new(SiaSolver::Fast);
        sia.ensure_configs(&ClusterSpec::parse("1x8:a", "t").unwrap());
        // A job that has trained, may use 8 devices, one type.
        let mut j = JobView::basic(JobId(0), 0.0, 1);
        (j.max_replicas, j.work_done) = (8, 1.0);
        j.goodput_by_type = vec![Some(model(1.0))];
        let free = sia.goodputs(&j);
        // (Goodputs are cached per goodput version: each change below is a new one.)
        j.requested_batch = Some(128.0);
        j.goodput_version = 1;
        let capped = sia.goodputs(&j);
        // Never more, and less on 8 devices, whose best batch is above 128.
        assert!(capped.iter().zip(&free).all(|(c, f)| c <= f));
        assert!(capped[3] < free[3], "{capped:?} {free:?}");
        // 8 devices run at least 8 × 8 = 64 ≤ 128; a request below the smallest
        // batch a configuration runs leaves that one batch (Sia's one candidate).
        j.requested_batch = Some(16.0);
        j.goodput_version = 2;
        let tiny = sia.goodputs(&j);
        assert!(tiny.iter().all(|&g| g > 0.0), "{tiny:?}");
        // `sia-pacer` values the batch the job will use.
        sia.batch_up_to_request = false;
        j.goodput_version = 3;
        assert_eq!(sia.goodputs(&j), free);
    }

    #[test]
    fn costs_round_to_two_decimals() {
        let mut sia = Sia::new(SiaSolver::Fast);
        // 1.004^-0.5 = 0.998…: rounds to 1.00, a tie with S = 1.
        assert_eq!(sia.value(1.004), sia.value(1.0));
        assert!((sia.value(4.0) - 0.6).abs() < 1e-12);
        sia.round_costs = false;
        assert!(sia.value(1.004) > sia.value(1.0));
    }

    /// Ten jobs that have not run wait for one device; round `r` at `60·r` s.
    fn one_device_ten_waiting(sia: &Sia, rounds: u32) -> Vec<usize> {
        let c = ClusterSpec::parse("1x1:a", "t").unwrap();
        let jobs: Vec<JobView> = (0..10)
            .map(|i| JobView::basic(JobId(i), i as f64, 1))
            .collect();
        (0..rounds)
            .map(|r| {
                let view = ClusterView {
                    now_s: 60.0 * r as f64 + 600.0,
                    cluster: &c,
                    jobs: &jobs,
                };
                let out = sia.clone().allocate(&view);
                out.iter().position(|a| !a.is_empty()).expect("one runs")
            })
            .collect()
    }

    #[test]
    fn ties_are_not_broken_by_arrival() {
        let sia = Sia::new(SiaSolver::Fast);
        let picks = one_device_ten_waiting(&sia, 20);
        let distinct: std::collections::BTreeSet<usize> = picks.iter().copied().collect();
        assert!(distinct.len() >= 4, "{picks:?}");
        // The same round gives the same pick.
        assert_eq!(picks, one_device_ten_waiting(&sia, 20));
        let mut by_arrival = sia;
        by_arrival.shuffle_ties = false;
        assert!(one_device_ten_waiting(&by_arrival, 20)
            .iter()
            .all(|&j| j == 0));
    }

    #[test]
    fn a_tie_salt_picks_another_order_among_the_same_ties() {
        let sia = Sia::new(SiaSolver::Fast);
        let picks = one_device_ten_waiting(&sia, 20);
        let mut salted = sia.clone();
        salted.tie_salt = 1;
        let other = one_device_ten_waiting(&salted, 20);
        assert_ne!(picks, other);
        assert_eq!(other, one_device_ten_waiting(&salted, 20), "deterministic");
        // The values stay those of the tie: λ_n − 1 = 0.1, up to the tie offset.
        let c = ClusterSpec::parse("1x1:a", "t").unwrap();
        let jobs = [JobView::basic(JobId(3), 0.0, 1)];
        let view = ClusterView {
            now_s: 600.0,
            cluster: &c,
            jobs: &jobs,
        };
        for salt in [0, 1, 7] {
            salted.tie_salt = salt;
            let v = salted.problem(&view).options[0][0].1;
            assert!((0.1..0.1 + TIE_SPAN).contains(&v), "{v}");
        }
        assert_eq!(Sia::parse_tie_knob("sia-t12"), Some(12));
        for bad in ["sia", "sia-t", "sia-t-1", "sia-t1.5", "sia-tx"] {
            assert_eq!(Sia::parse_tie_knob(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_restarting_job_keeps_its_devices_then_ties_again() {
        let c = ClusterSpec::parse("1x1:a", "t").unwrap();
        let mut jobs: Vec<JobView> = (0..6)
            .map(|i| {
                let mut j = JobView::basic(JobId(i), i as f64, 1);
                j.restart_s = Some(120.0);
                j
            })
            .collect();
        let mut sia = Sia::new(SiaSolver::Fast);
        let view = ClusterView {
            now_s: 600.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = sia.allocate(&view);
        let x = out.iter().position(|a| !a.is_empty()).expect("one starts");
        jobs[x].current = out[x].clone();
        jobs[x].attained_gpu_s = 60.0;
        // During its 120 s restart it keeps the device, whatever the ties say.
        for now_s in [660.0, 700.0, 719.0] {
            let view = ClusterView {
                now_s,
                cluster: &c,
                jobs: &jobs,
            };
            assert_eq!(sia.clone().allocate(&view)[x], jobs[x].current, "{now_s}");
        }
        // After it, still without progress, it ties with the waiting jobs: over
        // rounds, sometimes one of them takes the device.
        let kept: Vec<bool> = (0..20)
            .map(|r| {
                let view = ClusterView {
                    now_s: 720.0 + 60.0 * r as f64,
                    cluster: &c,
                    jobs: &jobs,
                };
                sia.clone().allocate(&view)[x] == jobs[x].current
            })
            .collect();
        assert!(kept.iter().any(|&k| !k), "{kept:?}");
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
