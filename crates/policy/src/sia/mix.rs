//! `sia-pacer-mix`: [`SiaPacer`] whose jobs may also run across device types (issue 26;
//! docs/mixed-types.md, "The policy").
//!
//! Sia's knapsack has one capacity per device type and configurations of one type.
//! A configuration across types consumes capacity of two types at once; rather than
//! widen every job's option list (and the exact solver Sia is compared with), this
//! policy keeps `sia-pacer`'s round and adds steps around its fast solver:
//!
//! 1. **Keep a mix that still pays.** A job that holds devices of several types keeps
//!    them when their balanced goodput is at least the best one-type configuration's
//!    goodput times its re-allocation factor (the value Sia gives the configuration a
//!    job holds against one it would restart on); its devices then leave the
//!    knapsack's capacity.
//! 2. **Grow or start across types.** After the knapsack, devices it left free are
//!    offered as mixed configurations: a job extends its one-type configuration by
//!    devices of another type, or a job the knapsack left waiting starts on devices of
//!    two types. Each is valued as Sia values any configuration (`λ_n − S^p`, the
//!    speedup over the job's cheapest one-type configuration, the re-allocation factor
//!    unless it is what the job holds); the move with the largest value gained per
//!    device added is applied, then the next, until none gains. Only free devices are
//!    used, so capacity holds by construction.
//! 3. **Inside the optimisation** (the default; off in `sia-pacer-mix-post`): before
//!    step 2, a job may take a two-type configuration whose devices come from the free
//!    pool and from other jobs' one-type configurations, when that raises the objective
//!    net of what the shrunk or stopped jobs lose ([`SiaPacerMix::displace`]).
//!
//! The goodput of a mixed configuration is the job's own balanced one
//! ([`JobView::mixed`], which the driver computes with the worker level's controller
//! from each type's model): never the fastest type's. Only jobs that carry that
//! model (they accept mixing) and have run (they have a model) are mixed; the others
//! are exactly `sia-pacer`'s. A mix is offered only over types the job has its own
//! model on ([`JobView::measured_on`]): never onto a type whose model is projected.

use super::{place_in, SiaPacer};
use crate::place::TypedPools;
use crate::{ClusterView, JobView, Policy};
use pacer_model::{Allocation, DeviceTypeId, JobId};
use std::collections::HashMap;

/// Devices per type of a mixed configuration, types ascending.
type Mix = Vec<(u16, u32)>;

/// One job's mixed goodputs: the goodput version they hold for, when they were computed
/// (s), and the goodput per (mix, nodes).
type MixCache = (u64, f64, HashMap<(Mix, u32), f64>);

/// A job's mixed goodputs are recomputed when its goodput version changed *and* they
/// are at least this old (simulated seconds). The version changes whenever the job's
/// gradient statistics move (nearly every round) and each mixed goodput is a search over
/// global batches; without this, `sia-pacer-mix` took 55 ms per round (p95) at 64 GPUs.
pub const MIX_REFRESH_S: f64 = 600.0;

/// Mixed goodputs [`SiaPacerMix::displace`] computes at most per round (those cached
/// cost nothing): the bound on its round time. Jobs are visited in the view's order;
/// a job left without them this round is offered no mix inside the knapsack until a
/// later round computes them.
pub const MIX_EVALS_PER_ROUND: usize = 48;

/// `sia-pacer` that may give a job devices of several types.
#[derive(Debug, Clone)]
pub struct SiaPacerMix {
    pub base: SiaPacer,
    /// A running job moves onto a mix only when that raises its goodput at least this
    /// many times over the configuration the knapsack gave it (a move restarts it; a
    /// waiting job gains from any mix). `sia-pacer-mix-gG`; [`DEFAULT_MIN_GAIN`] by default.
    pub min_gain: f64,
    /// Per job: the goodput version its mixed goodputs were computed at, and the
    /// goodput per (mix, nodes).
    cache: HashMap<JobId, MixCache>,
    /// The round's time (for [`MIX_REFRESH_S`]).
    now_s: f64,
    /// Mixed goodputs [`SiaPacerMix::displace`] may still compute this round.
    evals_left: usize,
    /// Mixed configurations given, and rounds in which at least one job held one.
    mixes_given: u64,
    mixed_rounds: u64,
    /// Mixed configurations inside the optimisation ([`SiaPacerMix::displace`]); off:
    /// only on the devices the knapsack leaves free (`sia-pacer-mix-post`).
    pub inside: bool,
    /// Mixes chosen by [`SiaPacerMix::displace`].
    displaced: u64,
}

/// The default [`SiaPacerMix::min_gain`], chosen on Sia's saturn workloads 1–3
/// (docs/mixed-types.md, "On Sia's workloads": 1, 1.25, 1.5 and 2 measured; 2 and
/// above never mixed there, 1.5 was within 0.3 % of that and still mixes where a mix
/// pays 1.5 times).
pub const DEFAULT_MIN_GAIN: f64 = 1.5;

impl Default for SiaPacerMix {
    fn default() -> Self {
        SiaPacerMix::with_min_gain(DEFAULT_MIN_GAIN)
    }
}

impl SiaPacerMix {
    pub fn with_min_gain(min_gain: f64) -> Self {
        SiaPacerMix {
            base: SiaPacer::default(),
            min_gain,
            cache: HashMap::new(),
            now_s: 0.0,
            evals_left: 0,
            mixes_given: 0,
            mixed_rounds: 0,
            inside: true,
            displaced: 0,
        }
    }

    /// Mixes only on the devices the one-type knapsack leaves free (the policy
    /// before mixed configurations entered the optimisation): `sia-pacer-mix-post`.
    pub fn post() -> Self {
        SiaPacerMix {
            inside: false,
            ..SiaPacerMix::default()
        }
    }

    /// `sia-pacer-mix-gG` → `G` (finite, ≥ 1).
    pub fn parse_knob(name: &str) -> Option<f64> {
        let v: f64 = name.strip_prefix("sia-pacer-mix-g")?.parse().ok()?;
        (v.is_finite() && v >= 1.0).then_some(v)
    }
}

/// Device counts worth trying out of `free`: powers of two below it, and `free`.
fn sizes(free: u64, most: u32) -> Vec<u32> {
    let top = free.min(u64::from(most)) as u32;
    let mut out = Vec::new();
    let mut g = 1;
    while g < top {
        out.push(g);
        g *= 2;
    }
    if top > 0 {
        out.push(top);
    }
    out
}

impl SiaPacerMix {
    /// The balanced goodput of `job` on `mix` over `nodes` nodes (0: not usable).
    fn mixed_goodput(&mut self, job: &JobView, mix: &Mix, nodes: u32) -> f64 {
        self.mixed_goodput_within(job, mix, nodes, false)
            .unwrap_or(0.0)
    }

    /// [`SiaPacerMix::mixed_goodput`]; with `budgeted`, a goodput not cached is
    /// computed only while the round's [`MIX_EVALS_PER_ROUND`] last (`None` after), and
    /// stale ones are kept while the budget is spent.
    fn mixed_goodput_within(
        &mut self,
        job: &JobView,
        mix: &Mix,
        nodes: u32,
        budgeted: bool,
    ) -> Option<f64> {
        let Some(model) = job.mixed.as_ref() else {
            return Some(0.0);
        };
        // Only over types the job has measured: a projected model is valued faster
        // than it runs, and a job on a mix records no point to correct it
        // (docs/mixed-types.md, "Why mixing loses online since MatchedBatch").
        if !mix.iter().all(|&(t, _)| job.measured_on(DeviceTypeId(t))) {
            return Some(0.0);
        }
        let now = self.now_s;
        let spent = budgeted && self.evals_left == 0;
        let entry = self
            .cache
            .entry(job.id)
            .or_insert_with(|| (job.goodput_version, now, HashMap::new()));
        if !spent && entry.0 != job.goodput_version && now - entry.1 >= MIX_REFRESH_S {
            *entry = (job.goodput_version, now, HashMap::new());
        }
        if let Some(&g) = entry.2.get(&(mix.clone(), nodes)) {
            return Some(g);
        }
        if spent {
            return None;
        }
        let groups: Vec<(DeviceTypeId, u32)> =
            mix.iter().map(|&(t, n)| (DeviceTypeId(t), n)).collect();
        let g = model.goodput(&groups, nodes).max(0.0);
        entry.2.insert((mix.clone(), nodes), g);
        if budgeted {
            self.evals_left -= 1;
        }
        Some(g)
    }
}

/// One round's choice: the knapsack's, the mixes added, and the objective (`Σ λ_n − S^p`
/// over the jobs it serves).
struct Plan {
    problem: super::Problem,
    choice: Vec<Option<usize>>,
    extra: Vec<Option<(Mix, f64, f64)>>,
    value: f64,
}

impl SiaPacerMix {
    /// Sia-pacer's knapsack with the `reserved` devices out of it, then mixed
    /// configurations on the devices it leaves free (see the module docs).
    fn plan(
        &mut self,
        view: &ClusterView,
        reserved: &[Option<Vec<u64>>],
        capacity: &[u64],
        pools0: &TypedPools,
        types: usize,
    ) -> Plan {
        let n = view.jobs.len();
        let (problem, mut choice) = self.base.choose(view, reserved);
        // 2. Free devices after the knapsack, offered as mixed configurations.
        let mut free: Vec<i64> = capacity.iter().map(|&c| c as i64).collect();
        for r in reserved.iter().flatten() {
            for (f, &c) in free.iter_mut().zip(r) {
                *f -= c as i64;
            }
        }
        for c in choice.iter().flatten() {
            let cfg = problem.configs[*c];
            free[cfg.ty as usize] -= i64::from(cfg.gpus);
        }
        let value_of = |j: usize, c: Option<usize>| -> f64 {
            c.and_then(|c| problem.options[j].iter().find(|o| o.0 == c))
                .map_or(0.0, |o| o.1)
        };
        // Per eligible job: its cheapest one-type goodput (Sia's normaliser), cap and
        // re-allocation factor.
        let mut eligible: Vec<(usize, f64, u32, f64, Vec<f64>)> = Vec::new();
        for (j, job) in view.jobs.iter().enumerate() {
            let restarting = choice[j].is_some() && problem.options[j].is_empty();
            if job.mixed.is_none()
                || reserved[j].is_some()
                || restarting
                || job.attained_gpu_s <= 0.0
                || job.goodput_by_type.iter().flatten().count() < 2
            {
                continue;
            }
            let one_type = self.base.sia.goodputs(job);
            let min = one_type
                .iter()
                .copied()
                .filter(|&g| g > 0.0)
                .fold(f64::INFINITY, f64::min);
            if !min.is_finite() {
                continue;
            }
            let cap = self.base.sia.replica_cap(job);
            let rf = self.base.sia.reallocation_factor(job, view.now_s);
            eligible.push((j, min, cap, rf, one_type));
        }
        let mut extra: Vec<Option<(Mix, f64, f64)>> = vec![None; n];
        if self.inside {
            self.displace(
                view,
                &problem,
                &mut choice,
                &mut extra,
                &mut free,
                &eligible,
                capacity,
                pools0,
            );
        }
        loop {
            // (gain per added device, job, the mix, the devices it adds, its value and
            // goodput).
            let mut best: Option<(f64, usize, Mix, Mix, f64, f64)> = None;
            for (j, min, cap, rf, one_type) in &eligible {
                let (j, min, cap, rf) = (*j, *min, *cap, *rf);
                let job = &view.jobs[j];
                let base: Option<(u16, u32)> = choice[j].map(|c| {
                    let cfg = problem.configs[c];
                    (cfg.ty, cfg.gpus)
                });
                let (cur_v, cur_added, cur_g) = match &extra[j] {
                    Some((m, v, g)) => (*v, m.clone(), *g),
                    None => (
                        value_of(j, choice[j]),
                        Vec::new(),
                        choice[j].map_or(0.0, |c| one_type[c]),
                    ),
                };
                // Devices free to this job: the pool's plus what it added already.
                let mut room = free.clone();
                for &(t, c) in &cur_added {
                    room[t as usize] += i64::from(c);
                }
                let usable = |t: usize| {
                    job.goodput_by_type.get(t).is_some_and(|m| m.is_some())
                        && job.can_use(DeviceTypeId(t as u16))
                };
                let mut candidates: Vec<Mix> = Vec::new();
                match base {
                    Some((t0, g0)) => {
                        for u in (0..types).filter(|&u| u != t0 as usize && usable(u)) {
                            for k in sizes(room[u].max(0) as u64, cap.saturating_sub(g0)) {
                                let mut m = vec![(t0, g0), (u as u16, k)];
                                m.sort_unstable();
                                candidates.push(m);
                            }
                        }
                    }
                    None => {
                        for t in (0..types).filter(|&t| usable(t)) {
                            for u in (t + 1..types).filter(|&u| usable(u)) {
                                for a in sizes(room[t].max(0) as u64, cap) {
                                    for b in sizes(room[u].max(0) as u64, cap.saturating_sub(a)) {
                                        candidates.push(vec![(t as u16, a), (u as u16, b)]);
                                    }
                                }
                            }
                        }
                    }
                }
                let current = mix_of(view, &job.current);
                for m in candidates {
                    let nodes = nodes_of(pools0, &m);
                    let budgeted = self.inside;
                    let Some(g) = self.mixed_goodput_within(job, &m, nodes, budgeted) else {
                        continue;
                    };
                    if g <= 0.0 {
                        continue;
                    }
                    let mut s = g / min;
                    if !job.current.is_empty() && m != current {
                        s *= rf;
                    }
                    let v = self.base.sia.value(s) * self.base.weights.of(job.attained_gpu_s);
                    let added: Mix = m
                        .iter()
                        .copied()
                        .filter(|&(t, _)| base.is_none_or(|b| b.0 != t))
                        .collect();
                    let devices = added
                        .iter()
                        .map(|a| a.1)
                        .sum::<u32>()
                        .saturating_sub(cur_added.iter().map(|a| a.1).sum());
                    let gain = v - cur_v;
                    if v <= 0.0 || gain <= 1e-9 || g < self.min_gain * cur_g {
                        continue;
                    }
                    let ratio = gain / f64::from(devices.max(1));
                    if best.as_ref().is_none_or(|b| ratio > b.0 + 1e-15) {
                        best = Some((ratio, j, m, added, v, g));
                    }
                }
            }
            let Some((_, j, _, added, v, g)) = best else {
                break;
            };
            if let Some((old, _, _)) = extra[j].take() {
                for (t, c) in old {
                    free[t as usize] += i64::from(c);
                }
            }
            for &(t, c) in &added {
                free[t as usize] -= i64::from(c);
            }
            debug_assert!(free.iter().all(|&f| f >= 0));
            extra[j] = Some((added, v, g));
        }
        let value = (0..n)
            .map(|j| match &extra[j] {
                Some((_, v, _)) => *v,
                None => value_of(j, choice[j]),
            })
            .sum();
        Plan {
            problem,
            choice,
            extra,
            value,
        }
    }
}

/// One job's mixed options for [`SiaPacerMix::displace`]: (mix, value, goodput).
type MixOptions = Vec<(Mix, f64, f64)>;

/// Most displacement moves per round ([`SiaPacerMix::displace`]).
const MOVES: usize = 32;

impl SiaPacerMix {
    /// Mixed configurations inside the optimisation: after the one-type knapsack,
    /// a job that accepts mixing may take a two-type configuration whose devices come
    /// from the free pool *and* from other jobs' one-type configurations (each type's
    /// shortfall from the one job whose shrinking or stopping loses least objective),
    /// when the objective `Σ λ_n − S^p` rises. The mix is valued as every option
    /// (speedup over the job's cheapest one-type configuration, the re-allocation
    /// factor unless it is what the job holds); a mix no better than one of its
    /// one-type parts is not offered; a running job moves onto a mix only for
    /// [`SiaPacerMix::min_gain`] times the goodput the knapsack gave it. The best move
    /// (largest net gain) is applied, then the next, at most [`MOVES`] per round.
    #[allow(clippy::too_many_arguments)]
    fn displace(
        &mut self,
        view: &ClusterView,
        problem: &super::Problem,
        choice: &mut [Option<usize>],
        extra: &mut [Option<(Mix, f64, f64)>],
        free: &mut [i64],
        eligible: &[(usize, f64, u32, f64, Vec<f64>)],
        capacity: &[u64],
        pools0: &TypedPools,
    ) {
        let types = capacity.len();
        let value_of = |j: usize, c: Option<usize>| -> f64 {
            c.and_then(|c| problem.options[j].iter().find(|o| o.0 == c))
                .map_or(0.0, |o| o.1)
        };
        // Per eligible job below its cap: its mixed options.
        let mut offers: Vec<(usize, MixOptions)> = Vec::new();
        for (j, min, cap, rf, one_type) in eligible {
            let (j, min, cap, rf) = (*j, *min, *cap, *rf);
            let job = &view.jobs[j];
            let held = choice[j].map_or(0, |c| problem.configs[c].gpus);
            if held >= cap {
                continue;
            }
            let cur_g = choice[j].map_or(0.0, |c| one_type[c]);
            // Best one-type value on type t with at most k devices.
            let dom = |t: u16, k: u32| -> f64 {
                problem.options[j]
                    .iter()
                    .filter(|o| {
                        let c = problem.configs[o.0];
                        c.ty == t && c.gpus <= k
                    })
                    .map(|o| o.1)
                    .fold(f64::NEG_INFINITY, f64::max)
            };
            let usable = |t: usize| {
                job.goodput_by_type.get(t).is_some_and(|m| m.is_some())
                    && job.can_use(DeviceTypeId(t as u16))
            };
            let current = mix_of(view, &job.current);
            let w = self.base.weights.of(job.attained_gpu_s);
            let mut opts: MixOptions = Vec::new();
            for t in (0..types).filter(|&t| usable(t)) {
                for u in (t + 1..types).filter(|&u| usable(u)) {
                    for a in sizes(capacity[t], cap) {
                        for b in sizes(capacity[u], cap.saturating_sub(a)) {
                            let m: Mix = vec![(t as u16, a), (u as u16, b)];
                            let nodes = nodes_of(pools0, &m);
                            let Some(g) = self.mixed_goodput_within(job, &m, nodes, true) else {
                                continue;
                            };
                            if g <= 0.0 {
                                continue;
                            }
                            let moved = !job.current.is_empty() && m != current;
                            if moved && g < self.min_gain * cur_g {
                                continue;
                            }
                            let s = if moved { g / min * rf } else { g / min };
                            let v = self.base.sia.value(s) * w;
                            if v > dom(t as u16, a) && v > dom(u as u16, b) {
                                opts.push((m, v, g));
                            }
                        }
                    }
                }
            }
            if !opts.is_empty() {
                offers.push((j, opts));
            }
        }
        if offers.is_empty() {
            return;
        }
        let maxd = problem.configs.iter().map(|c| c.gpus).max().unwrap_or(0) as usize;
        for _ in 0..MOVES {
            // Per type: the least loss of freeing at least d devices by shrinking or
            // stopping one job on a one-type configuration (jobs pinned in a restart
            // have no options and are never shrunk; a need above the largest
            // configuration is more than one job can free).
            let held: Vec<Option<(usize, f64)>> = (0..choice.len())
                .map(|i| {
                    let c = choice[i]?;
                    (extra[i].is_none() && !problem.options[i].is_empty())
                        .then(|| (c, value_of(i, Some(c))))
                })
                .collect();
            let cheapest = super::fast::shrink_table(problem, &held, maxd);
            // (net gain, job, option, victims (job, option index or usize::MAX)).
            type Move = (f64, usize, usize, Vec<(usize, usize)>);
            let mut best: Option<Move> = None;
            for (j, opts) in &offers {
                let j = *j;
                let mut held = vec![0i64; types];
                let cur_v = match &extra[j] {
                    Some((m, v, _)) => {
                        for &(t, c) in m {
                            held[t as usize] += i64::from(c);
                        }
                        *v
                    }
                    None => {
                        if let Some(c) = choice[j] {
                            let cfg = problem.configs[c];
                            held[cfg.ty as usize] += i64::from(cfg.gpus);
                        }
                        value_of(j, choice[j])
                    }
                };
                'opt: for (k, (m, v, _)) in opts.iter().enumerate() {
                    if *v <= cur_v + 1e-9 || extra[j].as_ref().is_some_and(|e| &e.0 == m) {
                        continue;
                    }
                    let mut loss = 0.0;
                    let mut victims = Vec::new();
                    for &(t, c) in m {
                        let need = i64::from(c) - held[t as usize] - free[t as usize];
                        if need <= 0 {
                            continue;
                        }
                        if need as usize > maxd {
                            continue 'opt;
                        }
                        let slot = cheapest[t as usize][need as usize];
                        let Some(&e) = slot.iter().find(|e| e.1 != j && e.1 != usize::MAX) else {
                            continue 'opt;
                        };
                        loss += e.0;
                        victims.push((e.1, e.2));
                    }
                    let net = v - cur_v - loss;
                    if net > 1e-9 && best.as_ref().is_none_or(|b| net > b.0 + 1e-12) {
                        best = Some((net, j, k, victims));
                    }
                }
            }
            let Some((_, j, k, victims)) = best else {
                break;
            };
            for (i, ki) in victims {
                if let Some(c0) = choice[i].take() {
                    let o = problem.configs[c0];
                    free[o.ty as usize] += i64::from(o.gpus);
                }
                if ki != usize::MAX {
                    let c = problem.options[i][ki].0;
                    free[problem.configs[c].ty as usize] -= i64::from(problem.configs[c].gpus);
                    choice[i] = Some(c);
                }
            }
            match extra[j].take() {
                Some((m, _, _)) => {
                    for (t, c) in m {
                        free[t as usize] += i64::from(c);
                    }
                }
                None => {
                    if let Some(c) = choice[j].take() {
                        let o = problem.configs[c];
                        free[o.ty as usize] += i64::from(o.gpus);
                    }
                }
            }
            let (m, v, g) = offers
                .iter()
                .find(|o| o.0 == j)
                .map(|o| o.1[k].clone())
                .expect("the move's job has offers");
            for &(t, c) in &m {
                free[t as usize] -= i64::from(c);
            }
            debug_assert!(free.iter().all(|&f| f >= 0), "{free:?}");
            extra[j] = Some((m, v, g));
            self.displaced += 1;
        }
    }
}

/// Devices per type of `alloc`, types ascending.
fn mix_of(view: &ClusterView, alloc: &Allocation) -> Mix {
    let mut out: Mix = Vec::new();
    for &(node, c) in alloc.slots() {
        let t = view.cluster.nodes[node.0 as usize].device_type.0;
        match out.iter_mut().find(|g| g.0 == t) {
            Some(g) => g.1 += c,
            None => out.push((t, c)),
        }
    }
    out.sort_unstable();
    out
}

/// Nodes a mix spans at the least: each type's devices over its largest node.
fn nodes_of(pools: &TypedPools, mix: &Mix) -> u32 {
    mix.iter()
        .map(|&(t, n)| n.div_ceil(pools.per_node(DeviceTypeId(t)).max(1)))
        .sum()
}

impl Policy for SiaPacerMix {
    fn name(&self) -> &'static str {
        if self.inside {
            "sia-pacer-mix"
        } else {
            "sia-pacer-mix-post"
        }
    }

    fn adaptive_batch(&self) -> bool {
        true
    }

    fn type_projection(&self) -> crate::TypeProjection {
        self.base.projection
    }

    fn notes(&self) -> String {
        format!(
            "mixed configurations given: {}; rounds with a mixed job: {}; mixes chosen \
             inside the knapsack: {}",
            self.mixes_given, self.mixed_rounds, self.displaced
        )
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let live: std::collections::HashSet<JobId> = view.jobs.iter().map(|j| j.id).collect();
        self.cache.retain(|id, _| live.contains(id));
        self.now_s = view.now_s;
        self.evals_left = MIX_EVALS_PER_ROUND;
        let n = view.jobs.len();
        let types = view.cluster.device_types.len().max(1);
        let pools0 = TypedPools::new(view.cluster);
        let mut capacity = vec![0u64; types];
        for node in &view.cluster.nodes {
            capacity[node.device_type.0 as usize] += u64::from(node.gpus);
        }
        // 1. Jobs on a mixed allocation keep it while it pays.
        let mut reserved: Vec<Option<Vec<u64>>> = vec![None; n];
        let mut kept_value = 0.0;
        // Configurations must be known before a job's one-type goodputs are.
        self.base.sia.ensure_configs(view.cluster);
        for (j, job) in view.jobs.iter().enumerate() {
            if job.mixed.is_none() || pools0.type_of(&job.current).is_some() {
                continue;
            }
            let mix = mix_of(view, &job.current);
            if mix.len() < 2 {
                continue;
            }
            let kept = self.mixed_goodput(job, &mix, job.current.slots().len() as u32);
            // Against the job's best one-type configuration, whatever its size: held
            // against those of no more devices than the mix, mixes were kept where the
            // knapsack had better uses for their devices (saturn 1–3: +7 % avg JCT).
            let one_type = self.base.sia.goodputs(job).into_iter().fold(0.0, f64::max);
            let rf = self.base.sia.reallocation_factor(job, view.now_s);
            if kept > 0.0 && kept >= rf * one_type {
                let min = self
                    .base
                    .sia
                    .goodputs(job)
                    .into_iter()
                    .filter(|&g| g > 0.0)
                    .fold(f64::INFINITY, f64::min);
                if min.is_finite() {
                    kept_value +=
                        self.base.sia.value(kept / min) * self.base.weights.of(job.attained_gpu_s);
                }
                let mut r = vec![0u64; types];
                for &(t, c) in &mix {
                    r[t as usize] += u64::from(c);
                }
                reserved[j] = Some(r);
            }
        }
        let plan = self.plan(view, &reserved, &capacity, &pools0, types);
        // Kept mixes compete too: the round without them (their jobs back in the
        // knapsack) wins when its objective is higher.
        let (
            Plan {
                problem,
                choice,
                extra,
                ..
            },
            reserved,
        ) = if reserved.iter().any(Option::is_some) {
            let none = vec![None; n];
            let without = self.plan(view, &none, &capacity, &pools0, types);
            if without.value > plan.value + kept_value + 1e-9 {
                (without, none)
            } else {
                (plan, reserved)
            }
        } else {
            (plan, reserved)
        };
        // 3. Placement: kept mixes first, then the knapsack's configurations, then
        // the devices the mixes add.
        let mut pools = TypedPools::new(view.cluster);
        let mut out = vec![Allocation::empty(); n];
        for (j, job) in view.jobs.iter().enumerate() {
            if reserved[j].is_some() {
                for t in 0..types {
                    let part = Allocation::from_pairs(job.current.slots().iter().copied().filter(
                        |&(node, _)| {
                            view.cluster.nodes[node.0 as usize].device_type.0 as usize == t
                        },
                    ));
                    if !part.is_empty() {
                        let taken = pools.take_exact(&part);
                        debug_assert!(taken, "a kept mix's devices are free");
                    }
                }
                out[j] = job.current.clone();
            }
        }
        let placed = place_in(&mut pools, view.jobs, &problem.configs, &choice);
        for (j, a) in placed.into_iter().enumerate() {
            if reserved[j].is_none() {
                out[j] = a;
            }
        }
        let mut given = 0;
        for (j, e) in extra.iter().enumerate() {
            let Some((added, _, _)) = e else { continue };
            let mut slots: Vec<_> = out[j].slots().to_vec();
            let mut ok = true;
            let mut taken = Vec::new();
            for &(t, c) in added {
                match pools.take(DeviceTypeId(t), c) {
                    Some(a) => {
                        slots.extend_from_slice(a.slots());
                        taken.push(a);
                    }
                    None => ok = false,
                }
            }
            if ok {
                out[j] = Allocation::from_pairs(slots);
                if out[j] != view.jobs[j].current {
                    given += 1;
                }
            } else {
                for a in &taken {
                    pools.give_back(a);
                }
            }
        }
        self.mixes_given += given;
        if out
            .iter()
            .any(|a| pools0.type_of(a).is_none() && !a.is_empty())
        {
            self.mixed_rounds += 1;
        }
        self.base.note_restarts(view, &out);
        out
    }
}
