//! Themis: finish-time fairness by auctions over leased devices (Mahajan et al.,
//! NSDI'20; docs/algorithms.md §3b).
//!
//! - ρ. For job j, `ρ_j(G) = (t_elapsed + t_remaining(G)) / T_independent`, with
//!   `t_remaining(G) = work_left / speed(G)` from the job's performance model
//!   ([`crate::JobView::rate`]: speed per device type, count and consolidation —
//!   so a consolidated bundle bids a lower ρ than a spread one), and
//!   `T_independent = total work / speed on a 1/N share` (N active jobs; the
//!   share spread over the device types in proportion to their capacity). A
//!   job that loses the auction is valued as if it waited one more lease and then
//!   ran on its 1/N share.
//! - Leases. Devices are granted for `lease_s`; a job keeps its devices until
//!   its lease expires, then they return to the pool and the job bids again.
//! - Auction. The `⌈(1 − f)·N⌉` jobs with the worst current ρ bid (only those
//!   without a live lease can); each bids `ρ_j(G)` for bundles G of one device
//!   type (1, 2, 4, … devices up to what speeds it up, consolidated when a node
//!   has room). Winner determination maximises `Σ_j log(1/ρ_j(G_j))` (the
//!   proportional-fair product), here greedily by value per device, with stale
//!   entries of a max-heap re-evaluated lazily.
//! - Device types. A job holds one type and its bundles only grow within it, so
//!   the type of its first bundle decides. Greedy by value alone hands every job
//!   its *fastest* type, which is the same (V100) for nearly every job: the
//!   jobs that gain least from a V100 take V100s while K80s go to the jobs they
//!   slow down most, or idle. Winner determination therefore runs at per-type
//!   prices (log(1/ρ) per device): a job's first bundle is of the type where its
//!   value net of the price is largest, moves must gain more than their price,
//!   and what is left goes at price 0. Prices are found by tâtonnement: start at
//!   0, set each type's price to its clearing price (the largest gain per device
//!   that did not fit), re-run, damp, keep the assignment with the largest
//!   Σ log(1/ρ). Devices then go by comparative advantage, as in Gavel's LP.
//! - Partial allocation. Winner j keeps the fraction
//!   `c_j = Π_{i≠j} 1/ρ_i(G^pf) / Π_{i≠j} 1/ρ_i(G^pf_{−j})` of its bundle
//!   (G^pf_{−j}: the others' allocation without j — the auction's outcome with
//!   j's devices returned and the greedy continued, so `c_j ≤ 1`), the price of
//!   the harm it does to the others; when no bidder was constrained by capacity
//!   every `c_j` is 1 and this is skipped.
//! - Leftovers (withheld devices, devices no bidder wanted) go to the jobs outside
//!   the auction by the same priced winner determination (no partial
//!   allocation), then to anyone who can still use them (worst ρ first, at the
//!   leftover prices), then
//!   back to the partially served winners up to their bundle, then to jobs
//!   starting this round that are faster on the free devices of another type
//!   than on what they got, and finally to any job served this round up to what
//!   speeds it up: the scheduler stays work-conserving.
//! - Knob f: f → 1 lets only the very worst jobs bid (fairness); f = 0 lets every
//!   job bid (efficiency, closer to a plain proportional-fair allocation).

use crate::place::TypedPools;
use crate::{ClusterView, JobView, Policy};
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, JobId};
use std::collections::{BinaryHeap, HashMap};

/// Default fairness knob (the Themis paper's setting).
pub const DEFAULT_F: f64 = 0.8;
/// Default lease (s).
pub const DEFAULT_LEASE_S: f64 = 600.0;

/// `themis-f0.5` → 0.5 (registry names with a knob).
pub fn parse_knob(name: &str) -> Option<f64> {
    let v: f64 = name.strip_prefix("themis-f")?.parse().ok()?;
    (0.0..=1.0).contains(&v).then_some(v)
}

#[derive(Debug)]
pub struct Themis {
    pub f: f64,
    pub lease_s: f64,
    /// Lease expiry per job holding devices.
    leases: HashMap<JobId, f64>,
    /// Auction statistics of the last round.
    pub last_bidders: usize,
    pub last_winners: usize,
}

impl Default for Themis {
    fn default() -> Self {
        Self::with_f(DEFAULT_F)
    }
}

impl Themis {
    pub fn with_f(f: f64) -> Self {
        Themis {
            f: f.clamp(0.0, 1.0),
            lease_s: DEFAULT_LEASE_S,
            leases: HashMap::new(),
            last_bidders: 0,
            last_winners: 0,
        }
    }
}

/// Speed of `job` on a 1/N share of `cluster` (Themis' T_independent denominator),
/// the share spread over device types in proportion to their capacity.
pub fn independent_rate(job: &JobView, cluster: &ClusterSpec, contenders: f64) -> f64 {
    let total = cluster.total_gpus() as f64;
    let share = total / contenders.max(1.0);
    let types = cluster.device_types.len().max(1);
    (0..types)
        .map(|t| {
            let ty = DeviceTypeId(t as u16);
            let w = cluster.gpus_of_type(ty) as f64 / total;
            let r = if share >= 1.0 {
                let d = (share.floor() as u32).min(job.max_useful(ty).max(1));
                job.rate(ty, d, true)
            } else {
                job.rate(ty, 1, true) * share
            };
            w * r
        })
        .sum::<f64>()
        .max(1e-300)
}

/// One bundle a bidder values: `g` devices of type `t`.
#[derive(Debug, Clone, Copy)]
struct Bundle {
    t: usize,
    g: u32,
    /// log(ρ(∅) / ρ(G)) ≥ 0.
    value: f64,
}

struct Bidder {
    /// Index into view.jobs.
    job: usize,
    bundles: Vec<Bundle>,
    /// log ρ(∅).
    log_rho_empty: f64,
    /// Priority of the bidder's first bundle over every upgrade (see `best_move`).
    first_bonus: f64,
}

#[derive(PartialEq)]
struct Entry {
    per_device: f64,
    bidder: usize,
    /// Bundle held when the entry was made (staleness check).
    from: Option<usize>,
    to: usize,
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.per_device
            .total_cmp(&o.per_device)
            .then(o.bidder.cmp(&self.bidder))
            .then(o.to.cmp(&self.to))
    }
}

/// Best feasible move of a bidder holding `from`: a first bundle, or a larger one
/// of the same type, by value gained per extra device net of the type's price
/// `mu` (log(1/ρ) per device). With prices the move must gain more than the
/// devices cost; with all prices 0, anything that gains at all.
fn best_move(b: &Bidder, from: Option<usize>, free: &[u64], mu: &[f64]) -> Option<(f64, usize)> {
    // A job with nothing cannot finish: in Themis its ρ(∅) is unbounded, so any
    // first bundle beats any upgrade of another job; among first bundles the
    // worse ρ goes first. Our ρ(∅) is finite (one more lease, then a 1/N share),
    // so the first move of a job that holds nothing and is already behind
    // (ρ(∅) > 1) carries that priority explicitly; the others compete on value
    // alone.
    let (t0, g0, v0) = match from {
        Some(k) => {
            let x = b.bundles[k];
            (Some(x.t), x.g, x.value)
        }
        None => (None, 0, -b.first_bonus),
    };
    // A first bundle fixes the job's device type (later moves only grow it), so
    // the type is the one of the bundle the job prefers at these prices — the
    // comparative advantage of device types: where a device costs `mu[t]`, a job
    // only 1.2x faster on V100 than on K80 is better off on K80 than one 10x
    // faster. The priority above does not enter this choice.
    let t_first = match from {
        Some(_) => None,
        None => b
            .bundles
            .iter()
            .filter(|x| x.g as u64 <= free[x.t])
            .map(|x| (x.value - mu[x.t] * x.g as f64, x.t))
            .max_by(|a, c| a.0.total_cmp(&c.0).then(c.1.cmp(&a.1)))
            .map(|(_, t)| t),
    };
    let mut best: Option<(f64, usize)> = None;
    for (k, x) in b.bundles.iter().enumerate() {
        let t = t0.or(t_first);
        if x.g <= g0 || t.is_some_and(|t| t != x.t) || (x.g - g0) as u64 > free[x.t] {
            continue;
        }
        let dg = (x.g - g0) as f64;
        let gain = (x.value - v0) / dg;
        let v = gain - mu[x.t];
        if gain > 0.0 && v > 0.0 && best.is_none_or(|(bv, _)| v > bv) {
            best = Some((v, k));
        }
    }
    best
}

/// The devices `cur` again when they are a bundle of `g` devices of type `ty` and
/// free, so the job goes on without a restart — unless they span more nodes than
/// needed and a consolidated bundle is free now (the bid valued one: Themis'
/// placement sensitivity), which is taken instead. `None`: take nothing.
fn retake(
    pools: &mut TypedPools,
    cur: &Allocation,
    ty: DeviceTypeId,
    g: u32,
) -> Option<Allocation> {
    if cur.replicas() != g || pools.type_of(cur) != Some(ty) || !pools.take_exact(cur) {
        return None;
    }
    let needed = g.div_ceil(pools.per_node(ty).max(1));
    if cur.nodes() > needed {
        pools.give_back(cur);
        if pools.can_consolidate(ty, g) {
            if let Some(a) = pools.take(ty, g) {
                if a.nodes() <= needed {
                    return Some(a);
                }
                pools.give_back(&a);
            }
        }
        let kept = pools.take_exact(cur);
        debug_assert!(kept, "devices just given back are free");
    }
    Some(cur.clone())
}

/// Bundle `x` for a job holding `cur`: its own devices again when [`retake`]
/// allows, otherwise any free ones of `x`'s type.
fn retake_or_take(pools: &mut TypedPools, cur: &Allocation, x: Bundle) -> Option<Allocation> {
    let ty = DeviceTypeId(x.t as u16);
    retake(pools, cur, ty, x.g).or_else(|| pools.take(ty, x.g))
}

/// Best bundle of a bidder alone, whatever the others do.
fn best_bundle(b: &Bidder, free: &[u64]) -> Option<usize> {
    b.bundles
        .iter()
        .enumerate()
        .filter(|(_, x)| x.g as u64 <= free[x.t] && x.value > 0.0)
        .max_by(|a, b| a.1.value.total_cmp(&b.1.value).then(b.0.cmp(&a.0)))
        .map(|(k, _)| k)
}

/// Result of one winner determination.
struct Outcome {
    /// Each bidder's bundle (index), if it won one.
    assign: Vec<Option<usize>>,
    /// Whether capacity kept any bidder from its best bundle.
    constrained: bool,
    /// Per type: the largest gain per device of a move that did not fit (the
    /// unmet demand at these prices), 0 where none — the price that would clear it.
    clearing: Vec<f64>,
}

/// Greedy proportional-fair winner determination at per-type prices `mu`:
/// repeatedly the move (a first bundle, or an upgrade to a larger bundle of the
/// same type) with the largest net gain in log(1/ρ) per extra device; then, at
/// price 0, whatever still gains (no device a bidder wants stays idle).
fn winners(bidders: &[Bidder], free0: &[u64], skip: Option<usize>, mu: &[f64]) -> Outcome {
    let mut free = free0.to_vec();
    let mut out: Vec<Option<usize>> = vec![None; bidders.len()];
    let zero = vec![0.0; free0.len()];
    for prices in [mu, &zero[..]] {
        greedy(bidders, &mut free, &mut out, prices, |i| Some(i) != skip);
        if prices.iter().all(|&m| m == 0.0) {
            break;
        }
    }
    let unlimited = vec![u64::MAX; free0.len()];
    let constrained = bidders.iter().enumerate().any(|(i, b)| {
        Some(i) != skip
            && best_bundle(b, &unlimited)
                .is_some_and(|k| out[i].is_none_or(|o| b.bundles[o].value < b.bundles[k].value))
    });
    // Clearing prices: the most a bidder would still gain per device of a type
    // from a move that does not fit — a first bundle, a larger one, or a switch
    // from the type it got (unmet demand; the first-bundle priority left out).
    // 0 where every gaining move fit.
    let types = free0.len();
    let mut clearing = vec![0.0f64; types];
    for (i, b) in bidders.iter().enumerate() {
        if Some(i) == skip {
            continue;
        }
        let (t0, g0, v0) = out[i].map_or((None, 0, 0.0), |k| {
            let x = b.bundles[k];
            (Some(x.t), x.g, x.value)
        });
        for x in &b.bundles {
            let gain = match t0 {
                // A bundle of another type than the one held: a switch.
                Some(t) if t != x.t => {
                    if x.g as u64 <= free[x.t] {
                        continue;
                    }
                    // The price at which it would be indifferent: the switch
                    // also frees the devices it holds, at their price.
                    (x.value - v0 + mu[t] * g0 as f64) / x.g as f64
                }
                _ => {
                    if x.g <= g0 || (x.g - g0) as u64 <= free[x.t] {
                        continue;
                    }
                    (x.value - v0) / (x.g - g0) as f64
                }
            };
            clearing[x.t] = clearing[x.t].max(gain);
        }
    }
    Outcome {
        assign: out,
        constrained,
        clearing,
    }
}

/// The greedy of [`winners`] from the state `out` / `free`: repeatedly the move
/// with the largest net gain per extra device at `prices`, for the bidders
/// `seed` admits (the others neither move nor are re-planned).
fn greedy(
    bidders: &[Bidder],
    free: &mut [u64],
    out: &mut [Option<usize>],
    prices: &[f64],
    seed: impl Fn(usize) -> bool,
) {
    let mut heap = BinaryHeap::new();
    for (i, b) in bidders.iter().enumerate() {
        if !seed(i) {
            continue;
        }
        if let Some((v, k)) = best_move(b, out[i], free, prices) {
            heap.push(Entry {
                per_device: v,
                bidder: i,
                from: out[i],
                to: k,
            });
        }
    }
    while let Some(e) = heap.pop() {
        let b = &bidders[e.bidder];
        let cur = out[e.bidder];
        let x = b.bundles[e.to];
        let g0 = cur.map_or(0, |k| b.bundles[k].g);
        if e.from == cur && (x.g - g0) as u64 <= free[x.t] {
            free[x.t] -= (x.g - g0) as u64;
            out[e.bidder] = Some(e.to);
        }
        // Next move of this bidder (also re-plans a stale entry).
        if let Some((v, k)) = best_move(b, out[e.bidder], free, prices) {
            heap.push(Entry {
                per_device: v,
                bidder: e.bidder,
                from: out[e.bidder],
                to: k,
            });
        }
    }
}

/// The others' assignment without bidder `skip`, for its partial allocation:
/// `assign` (an outcome of [`winners`] at `mu`) with `skip`'s devices returned
/// and the same greedy continued from there, at `mu` and then at 0. Only
/// bidders that can use the returned devices are re-planned — those holding
/// their type or nothing; every other bidder had no gaining move left when
/// `assign` was made, and returning devices of another type gives it none.
/// Starting from `assign` rather than re-running the auction without `skip`
/// keeps what the others won (re-running a greedy can hand them less, which
/// would make `skip`'s fraction exceed 1), and costs one pass over the
/// bidders instead of a whole auction per winner.
fn winners_without(
    bidders: &[Bidder],
    free0: &[u64],
    assign: &[Option<usize>],
    skip: usize,
    mu: &[f64],
) -> Vec<Option<usize>> {
    let mut free = free0.to_vec();
    let mut out = assign.to_vec();
    out[skip] = None;
    for (b, a) in bidders.iter().zip(&out) {
        if let Some(k) = *a {
            let x = b.bundles[k];
            free[x.t] = free[x.t].saturating_sub(x.g as u64);
        }
    }
    let Some(t) = assign[skip].map(|k| bidders[skip].bundles[k].t) else {
        return out;
    };
    let zero = vec![0.0; free0.len()];
    for prices in [mu, &zero[..]] {
        let held: Vec<Option<usize>> = out
            .iter()
            .zip(bidders)
            .map(|(a, b)| a.map(|k| b.bundles[k].t))
            .collect();
        greedy(bidders, &mut free, &mut out, prices, |i| {
            i != skip && held[i].is_none_or(|u| u == t)
        });
        if prices.iter().all(|&m| m == 0.0) {
            break;
        }
    }
    out
}

/// Rounds of price adjustment in [`solve`].
const PRICE_ROUNDS: usize = 6;

/// Proportional-fair winner determination with per-type prices found by
/// tâtonnement: start at 0 (plain greedy), set each type's price to its clearing
/// price, re-run, damp; keep the assignment with the largest Σ log(1/ρ) (the
/// first-bundle priority counted). Returns it and the prices that produced it.
fn solve(bidders: &[Bidder], free0: &[u64]) -> (Outcome, Vec<f64>) {
    let objective = |o: &Outcome| -> f64 {
        bidders
            .iter()
            .zip(&o.assign)
            .map(|(b, a)| a.map_or(0.0, |k| b.bundles[k].value + b.first_bonus))
            .sum()
    };
    let mut mu = vec![0.0; free0.len()];
    let mut best = winners(bidders, free0, None, &mu);
    let mut best_obj = objective(&best);
    let mut best_mu = mu.clone();
    let mut last = best.assign.clone();
    let mut clearing = best.clearing.clone();
    for round in 0..PRICE_ROUNDS {
        if clearing.iter().all(|&c| c == 0.0) && round == 0 {
            break;
        }
        for (m, c) in mu.iter_mut().zip(&clearing) {
            *m = if round == 0 { *c } else { 0.5 * (*m + c) };
        }
        let o = winners(bidders, free0, None, &mu);
        let obj = objective(&o);
        let same = o.assign == last;
        last = o.assign.clone();
        clearing = o.clearing.clone();
        if obj > best_obj {
            best_obj = obj;
            best = o;
            best_mu = mu.clone();
        }
        if same {
            break;
        }
    }
    (best, best_mu)
}

/// Σ over bidders (except `skip`) of log(1/ρ) under an assignment.
fn pf_value(bidders: &[Bidder], assign: &[Option<usize>], skip: usize) -> f64 {
    bidders
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .map(|(i, b)| -b.log_rho_empty + assign[i].map_or(0.0, |k| b.bundles[k].value))
        .sum()
}

/// One round's view of the jobs: what ρ each would have with or without devices,
/// and the devices free when the auction opened (the bundles every bidder may
/// bid for, in the auction and in the leftover passes alike).
struct RoundCtx<'a> {
    jobs: &'a [JobView],
    t_ind: Vec<f64>,
    elapsed: Vec<f64>,
    rho_empty: Vec<f64>,
    free: Vec<u64>,
}

impl<'a> RoundCtx<'a> {
    fn new(view: &ClusterView<'a>, lease_s: f64) -> Self {
        let jobs = view.jobs;
        let n = jobs.len();
        let t_ind_rate: Vec<f64> = jobs
            .iter()
            .map(|j| independent_rate(j, view.cluster, n as f64))
            .collect();
        let t_ind: Vec<f64> = jobs
            .iter()
            .zip(&t_ind_rate)
            .map(|(j, r)| ((j.work_done + j.work_left) / r).max(1e-9))
            .collect();
        let elapsed: Vec<f64> = jobs
            .iter()
            .map(|j| (view.now_s - j.arrival_s).max(0.0))
            .collect();
        let rho_empty: Vec<f64> = (0..n)
            .map(|i| (elapsed[i] + lease_s + jobs[i].work_left / t_ind_rate[i]) / t_ind[i])
            .collect();
        RoundCtx {
            jobs,
            t_ind,
            elapsed,
            rho_empty,
            free: Vec::new(),
        }
    }

    /// ρ of job `i` if it ran at `rate` from now on.
    fn rho_with(&self, i: usize, rate: f64) -> f64 {
        (self.elapsed[i] + self.jobs[i].work_left / rate.max(1e-300)) / self.t_ind[i]
    }

    /// Job `i`'s bids: bundles of 1, 2, 4, … devices of each type up to what speeds
    /// it up (and what was free when the auction opened), valued log(ρ_empty / ρ).
    fn bidder(&self, i: usize, pools: &TypedPools) -> Bidder {
        let j = &self.jobs[i];
        let mut bundles = Vec::new();
        for (t, &ft) in self.free.iter().enumerate() {
            let ty = DeviceTypeId(t as u16);
            let top = (j.max_useful(ty) as u64).min(ft) as u32;
            let mut g = 1u32;
            let mut sizes = Vec::new();
            while g <= top {
                sizes.push(g);
                g *= 2;
            }
            if top > 0 && sizes.last() != Some(&top) {
                sizes.push(top);
            }
            for g in sizes {
                let consolidated = pools.can_consolidate(ty, g);
                let r = j.rate(ty, g, consolidated);
                if r <= 0.0 {
                    continue;
                }
                // Kept even when not worth a bid (value ≤ 0): leftovers may
                // still go to it rather than idle.
                let value = (self.rho_empty[i] / self.rho_with(i, r)).ln();
                bundles.push(Bundle { t, g, value });
            }
        }
        let rho_empty = self.rho_empty[i];
        Bidder {
            job: i,
            bundles,
            log_rho_empty: rho_empty.ln(),
            first_bonus: if j.current.is_empty() && rho_empty > 1.0 {
                1e3 * (1.0 + rho_empty)
            } else {
                0.0
            },
        }
    }
}

/// What the round has decided so far: each job's allocation, whether it kept a
/// live lease (`holder`) and whether it got devices this round (`fresh`).
struct Round {
    out: Vec<Allocation>,
    holder: Vec<bool>,
    fresh: Vec<bool>,
}

/// Step 4, partial allocation: winner `b` keeps the fraction `c_b` of its bundle
/// (1 when no bidder was constrained by capacity). Per bidder: (type, devices).
fn partial_grants(
    bidders: &[Bidder],
    free: &[u64],
    outcome: &Outcome,
    mu: &[f64],
) -> Vec<Option<(usize, u32)>> {
    let assign = &outcome.assign;
    let mut grant: Vec<Option<(usize, u32)>> = vec![None; bidders.len()];
    for (b, a) in assign.iter().enumerate() {
        let Some(k) = *a else { continue };
        let x = bidders[b].bundles[k];
        let c = if outcome.constrained {
            let without = winners_without(bidders, free, assign, b, mu);
            (pf_value(bidders, assign, b) - pf_value(bidders, &without, b))
                .exp()
                .clamp(0.0, 1.0)
        } else {
            1.0
        };
        let g = ((c * x.g as f64).round() as u32).clamp(1, x.g);
        grant[b] = Some((x.t, g));
    }
    grant
}

/// Step 4, placement: winners retake their own devices when the grant matches
/// them; the others take devices of the granted type, largest grants first,
/// shrinking a grant that no longer fits.
fn place_grants(
    pools: &mut TypedPools,
    jobs: &[JobView],
    bidders: &[Bidder],
    grant: &[Option<(usize, u32)>],
    r: &mut Round,
) {
    for (b, g) in grant.iter().enumerate() {
        let Some((t, g)) = *g else { continue };
        let i = bidders[b].job;
        if let Some(a) = retake(pools, &jobs[i].current, DeviceTypeId(t as u16), g) {
            r.out[i] = a;
            r.fresh[i] = true;
        }
    }
    let mut order: Vec<usize> = (0..grant.len()).filter(|&b| grant[b].is_some()).collect();
    order.sort_by_key(|&b| std::cmp::Reverse(grant[b].map_or(0, |g| g.1)));
    for b in order {
        let (t, g) = grant[b].expect("granted");
        let i = bidders[b].job;
        if r.fresh[i] {
            continue;
        }
        let ty = DeviceTypeId(t as u16);
        let mut g = g.min(pools.free(ty) as u32);
        while g > 0 {
            if let Some(a) = pools.take(ty, g) {
                r.out[i] = a;
                r.fresh[i] = true;
                break;
            }
            g -= 1;
        }
    }
}

/// Step 5a: the jobs outside the auction, by the same proportional-fair winner
/// determination over what is left (no partial allocation). Returns the leftover
/// auction's prices per device type.
fn leftovers_outside(
    ctx: &RoundCtx,
    pools: &mut TypedPools,
    outside: &[usize],
    types: usize,
    r: &mut Round,
) -> Vec<f64> {
    let left_free: Vec<u64> = (0..types)
        .map(|t| pools.free(DeviceTypeId(t as u16)))
        .collect();
    if outside.is_empty() || left_free.iter().all(|&f| f == 0) {
        return vec![0.0; types];
    }
    let left_bidders: Vec<Bidder> = outside.iter().map(|&i| ctx.bidder(i, pools)).collect();
    let (o, m) = solve(&left_bidders, &left_free);
    let mut order: Vec<usize> = (0..left_bidders.len())
        .filter(|&b| o.assign[b].is_some())
        .collect();
    // Large gangs first, while nodes still have room to consolidate them.
    order.sort_by_key(|&b| {
        std::cmp::Reverse(o.assign[b].map_or(0, |k| left_bidders[b].bundles[k].g))
    });
    for b in order {
        let x = left_bidders[b].bundles[o.assign[b].expect("assigned")];
        let i = left_bidders[b].job;
        if let Some(a) = retake_or_take(pools, &ctx.jobs[i].current, x) {
            r.out[i] = a;
            r.fresh[i] = true;
        }
    }
    m
}

/// Step 5b: anyone still without devices, worst ρ first, takes the bundle that
/// fits best at the leftover auction's prices `left_mu`, even one it would not
/// have bid for: devices do not idle while a job waits.
fn leftovers_anyone(
    ctx: &RoundCtx,
    pools: &mut TypedPools,
    by_rho: &[usize],
    left_mu: &[f64],
    types: usize,
    r: &mut Round,
) {
    for &i in by_rho {
        if r.holder[i] || r.fresh[i] {
            continue;
        }
        let free = pools.free_by_type(types);
        if free.iter().all(|&f| f == 0) {
            break;
        }
        let b = ctx.bidder(i, pools);
        let best_any = b
            .bundles
            .iter()
            .enumerate()
            .filter(|(_, x)| x.g as u64 <= free[x.t])
            .map(|(k, x)| (k, x.value - left_mu[x.t] * x.g as f64))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(k, _)| k);
        if let Some(k) = best_any {
            // Same devices as before if they are free again: no restart.
            if let Some(a) = retake_or_take(pools, &ctx.jobs[i].current, b.bundles[k]) {
                r.out[i] = a;
                r.fresh[i] = true;
            }
        }
    }
}

/// Step 6: devices nobody outside the auction could use top the partially served
/// winners back up towards their winning bundle (work conservation).
fn top_up_winners(
    pools: &mut TypedPools,
    bidders: &[Bidder],
    assign: &[Option<usize>],
    r: &mut Round,
) {
    for (b, a) in assign.iter().enumerate() {
        let Some(k) = *a else { continue };
        let x = bidders[b].bundles[k];
        let i = bidders[b].job;
        if !r.fresh[i] || r.out[i].replicas() >= x.g {
            continue;
        }
        let ty = DeviceTypeId(x.t as u16);
        if pools.type_of(&r.out[i]) != Some(ty)
            || pools.free(ty) < (x.g - r.out[i].replicas()) as u64
        {
            continue;
        }
        pools.give_back(&r.out[i]);
        match pools.take(ty, x.g) {
            Some(a) => r.out[i] = a,
            None => {
                let kept = pools.take_exact(&r.out[i]);
                debug_assert!(kept, "devices just given back are free");
            }
        }
    }
}

/// Step 7: still-free devices of a type nobody holds: a job starting on new
/// devices this round (so the move costs no extra restart) switches to them,
/// worst ρ first, when they make it faster than what it got.
fn switch_types(
    ctx: &RoundCtx,
    pools: &mut TypedPools,
    cluster: &ClusterSpec,
    by_rho: &[usize],
    types: usize,
    r: &mut Round,
) {
    let jobs = ctx.jobs;
    for &i in by_rho {
        if !r.fresh[i] || r.out[i] == jobs[i].current || pools.type_of(&r.out[i]).is_none() {
            continue;
        }
        let free = pools.free_by_type(types);
        if free.iter().all(|&f| f == 0) {
            break;
        }
        let ty = pools.type_of(&r.out[i]);
        let rate_now = jobs[i].alloc_rate(cluster, &r.out[i]);
        let b = ctx.bidder(i, pools);
        let better = b
            .bundles
            .iter()
            .filter(|x| Some(DeviceTypeId(x.t as u16)) != ty && x.g as u64 <= free[x.t])
            .filter(|x| {
                let consolidated = pools.can_consolidate(DeviceTypeId(x.t as u16), x.g);
                jobs[i].rate(DeviceTypeId(x.t as u16), x.g, consolidated) > rate_now
            })
            .max_by(|a, c| a.value.total_cmp(&c.value).then(c.g.cmp(&a.g)));
        if let Some(x) = better {
            let t = DeviceTypeId(x.t as u16);
            if let Some(a) = pools.take(t, x.g) {
                pools.give_back(&r.out[i]);
                r.out[i] = a;
            }
        }
    }
}

/// Step 8: still-free devices grow this round's grants (worst ρ first) up to what
/// speeds each job up: no device idles while a job could use it.
fn grow_grants(pools: &mut TypedPools, jobs: &[JobView], by_rho: &[usize], r: &mut Round) {
    for &i in by_rho {
        if !r.fresh[i] {
            continue;
        }
        let Some(ty) = pools.type_of(&r.out[i]) else {
            continue;
        };
        let have = r.out[i].replicas();
        let want = jobs[i].max_useful(ty).min(have + pools.free(ty) as u32);
        if want <= have {
            continue;
        }
        pools.give_back(&r.out[i]);
        match pools.take(ty, want) {
            Some(a) => r.out[i] = a,
            None => {
                let kept = pools.take_exact(&r.out[i]);
                debug_assert!(kept, "devices just given back are free");
            }
        }
    }
}

impl Themis {
    /// Step 1: live leases keep their devices.
    fn keep_leases(&self, jobs: &[JobView], now: f64, pools: &mut TypedPools) -> Round {
        let n = jobs.len();
        let mut r = Round {
            out: vec![Allocation::empty(); n],
            holder: vec![false; n],
            fresh: vec![false; n],
        };
        for (i, j) in jobs.iter().enumerate() {
            let live_lease = self.leases.get(&j.id).is_some_and(|&e| e > now + 1e-6);
            if live_lease && !j.current.is_empty() && pools.take_exact(&j.current) {
                r.out[i] = j.current.clone();
                r.holder[i] = true;
            }
        }
        r
    }

    /// Step 3: the (1 − f) worst jobs by current ρ bid, if they can (at least one
    /// job without a lease bids). Returns the jobs worst ρ first and the bidders.
    fn bidders(&self, rho_now: &[f64], holder: &[bool]) -> (Vec<usize>, Vec<usize>) {
        let n = rho_now.len();
        let mut by_rho: Vec<usize> = (0..n).collect();
        by_rho.sort_by(|&a, &b| rho_now[b].total_cmp(&rho_now[a]).then(a.cmp(&b)));
        let k = (((1.0 - self.f) * n as f64).ceil() as usize).clamp(1, n);
        let mut bidding: Vec<usize> = by_rho[..k]
            .iter()
            .copied()
            .filter(|&i| !holder[i])
            .collect();
        if bidding.is_empty() {
            if let Some(&i) = by_rho.iter().find(|&&i| !holder[i]) {
                bidding.push(i);
            }
        }
        (by_rho, bidding)
    }
}

impl Policy for Themis {
    fn name(&self) -> &'static str {
        "themis"
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let jobs = view.jobs;
        let n = jobs.len();
        let now = view.now_s;
        let cluster = view.cluster;
        let types = cluster.device_types.len().max(1);
        let live: std::collections::HashSet<JobId> = jobs.iter().map(|j| j.id).collect();
        self.leases.retain(|id, _| live.contains(id));
        let mut pools = TypedPools::new(cluster);
        // 1. Live leases keep their devices.
        let mut r = self.keep_leases(jobs, now, &mut pools);
        // 2. ρ now (holders: with their devices; others: as losers of this auction).
        let mut ctx = RoundCtx::new(view, self.lease_s);
        let rho_now: Vec<f64> = (0..n)
            .map(|i| {
                if r.holder[i] {
                    // At the speed of the devices it holds (spread or not).
                    ctx.rho_with(i, jobs[i].alloc_rate(cluster, &r.out[i]))
                } else {
                    ctx.rho_empty[i]
                }
            })
            .collect();
        // 3. The (1 − f) worst jobs bid, if they can.
        let (by_rho, bidding) = self.bidders(&rho_now, &r.holder);
        ctx.free = pools.free_by_type(types);
        let mut is_bidder = vec![false; n];
        for &i in &bidding {
            is_bidder[i] = true;
        }
        let bidders: Vec<Bidder> = bidding.iter().map(|&i| ctx.bidder(i, &pools)).collect();
        let (outcome, mu) = solve(&bidders, &ctx.free);
        // 4. Partial allocation.
        let grant = partial_grants(&bidders, &ctx.free, &outcome, &mu);
        self.last_bidders = bidders.len();
        self.last_winners = outcome.assign.iter().filter(|a| a.is_some()).count();
        place_grants(&mut pools, jobs, &bidders, &grant, &mut r);
        // 5. Leftovers: first the jobs outside the auction (so leftover devices too
        // go by comparative advantage and consolidation), then anyone still
        // without devices.
        let outside: Vec<usize> = by_rho
            .iter()
            .copied()
            .filter(|&i| !r.holder[i] && !r.fresh[i] && !is_bidder[i])
            .collect();
        let left_mu = leftovers_outside(&ctx, &mut pools, &outside, types, &mut r);
        leftovers_anyone(&ctx, &mut pools, &by_rho, &left_mu, types, &mut r);
        // 6.-8. Work conservation.
        top_up_winners(&mut pools, &bidders, &outcome.assign, &mut r);
        switch_types(&ctx, &mut pools, cluster, &by_rho, types, &mut r);
        grow_grants(&mut pools, jobs, &by_rho, &mut r);
        for (i, j) in jobs.iter().enumerate() {
            if r.fresh[i] {
                self.leases.insert(j.id, now + self.lease_s);
            } else if !r.holder[i] {
                self.leases.remove(&j.id);
            }
        }
        r.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SpeedCurve, SpeedTable};
    use std::sync::Arc;

    fn job(id: u32, arrival: f64, req: u32, left: f64) -> JobView {
        let mut j = JobView::basic(JobId(id), arrival, req);
        j.work_left = left;
        j
    }

    #[test]
    fn leases_hold_and_capacity_is_respected() {
        let c = ClusterSpec::parse("2x4:v100", "t").unwrap();
        // More jobs than devices: some must wait for the next lease round.
        let mut jobs: Vec<JobView> = (0..10).map(|i| job(i, 0.0, 4, 1000.0)).collect();
        let mut p = Themis::with_f(0.5);
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = p.allocate(&view);
        crate::check_capacity(&c, &out).unwrap();
        assert_eq!(out.iter().map(|a| a.replicas()).sum::<u32>(), 8);
        for (j, a) in jobs.iter_mut().zip(&out) {
            j.current = a.clone();
            // 660 s at the speed of the devices it got.
            j.work_done = 660.0 * a.replicas() as f64 / 4.0;
            j.work_left -= j.work_done;
        }
        // Before the lease expires nothing moves.
        let view = ClusterView {
            now_s: 60.0,
            cluster: &c,
            jobs: &jobs,
        };
        assert_eq!(p.allocate(&view), out);
        // After it, the jobs that waited are served first.
        let view = ClusterView {
            now_s: DEFAULT_LEASE_S + 60.0,
            cluster: &c,
            jobs: &jobs,
        };
        let next = p.allocate(&view);
        crate::check_capacity(&c, &next).unwrap();
        assert!(out.iter().any(|a| a.is_empty()));
        for i in 0..jobs.len() {
            if out[i].is_empty() {
                assert!(
                    !next[i].is_empty(),
                    "job {i} waited and still waits: {next:?}"
                );
            }
        }
        assert_eq!(next.iter().map(|a| a.replicas()).sum::<u32>(), 8);
    }

    #[test]
    fn consolidated_bundle_preferred_and_fast_type_chosen() {
        let c = ClusterSpec::parse("2x4:v100,2x4:k80", "t").unwrap();
        let mut j = job(0, 0.0, 4, 1000.0);
        j.speed = Some(Arc::new(SpeedTable {
            per_type: vec![
                SpeedCurve::single(4, 4.0, 0.5),
                SpeedCurve::single(4, 1.0, 0.5),
            ],
        }));
        let jobs = vec![j];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = Themis::default().allocate(&view);
        assert_eq!(out[0].replicas(), 4, "{out:?}");
        assert_eq!(out[0].nodes(), 1);
        assert!(out[0].slots()[0].0 .0 < 2, "on a v100 node: {out:?}");
        assert_eq!(parse_knob("themis-f0.5"), Some(0.5));
        assert_eq!(parse_knob("themis-fx"), None);
    }

    #[test]
    fn device_types_go_by_comparative_advantage() {
        // One V100 and one K80. Job 0 is far behind (it wins first) and barely
        // faster on the V100; job 1 is 10x faster there. Greedy by value alone
        // gives job 0 the V100 and job 1 the K80; at clearing prices job 1 gets
        // the V100, which is also the larger Σ log(1/ρ).
        let c = ClusterSpec::parse("1x1:v100,1x1:k80", "t").unwrap();
        let speeds = |v100: f64, k80: f64| {
            Some(Arc::new(SpeedTable {
                per_type: vec![
                    SpeedCurve::single(1, v100, 1.0),
                    SpeedCurve::single(1, k80, 1.0),
                ],
            }))
        };
        let mut a = job(0, 0.0, 1, 100.0);
        a.speed = speeds(1.2, 1.0);
        let mut b = job(1, 1000.0, 1, 10_000.0);
        b.speed = speeds(10.0, 1.0);
        let jobs = vec![a, b];
        let view = ClusterView {
            now_s: 1000.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = Themis::with_f(0.0).allocate(&view);
        crate::check_capacity(&c, &out).unwrap();
        let on = |a: &Allocation| a.slots().first().map(|s| s.0 .0);
        assert_eq!(on(&out[1]), Some(0), "job 1 on the V100 node: {out:?}");
        assert_eq!(on(&out[0]), Some(1), "job 0 on the K80 node: {out:?}");
    }

    #[test]
    fn spread_devices_are_consolidated_when_the_lease_is_renewed() {
        // Alone with 4 devices spread 2+2 over two nodes, 2x slower spread: the
        // renewed lease moves it onto one node instead of keeping the spread gang.
        let c = ClusterSpec::parse("2x4:v100", "t").unwrap();
        let mut j = job(0, 0.0, 4, 1e6);
        j.speed = Some(Arc::new(SpeedTable {
            per_type: vec![SpeedCurve::single(4, 4.0, 0.5)],
        }));
        j.current =
            Allocation::from_pairs([(pacer_model::NodeId(0), 2), (pacer_model::NodeId(1), 2)]);
        let jobs = vec![j];
        let view = ClusterView {
            now_s: 1e4,
            cluster: &c,
            jobs: &jobs,
        };
        let out = Themis::default().allocate(&view);
        assert_eq!(out[0].replicas(), 4, "{out:?}");
        assert_eq!(out[0].nodes(), 1, "{out:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
        /// Without a winner, every other bidder keeps at least the bundle it won
        /// (so its partial-allocation fraction is at most 1) and capacity holds.
        #[test]
        fn the_others_never_lose_without_a_winner(
            spec in proptest::collection::vec(
                (0usize..2, proptest::collection::vec(0.01f64..1.0, 1..5), 0.0f64..2.0),
                2..24,
            ),
            free in proptest::collection::vec(1u64..12, 2),
            mu in proptest::collection::vec(0.0f64..0.3, 2),
        ) {
            // Bidder: a type, concave values for 1, 2, 4, … devices, a bonus.
            let bidders: Vec<Bidder> = spec
                .iter()
                .enumerate()
                .map(|(i, (t, steps, bonus))| {
                    let mut v = 0.0;
                    let bundles = steps
                        .iter()
                        .enumerate()
                        .map(|(k, d)| {
                            v += d / (k + 1) as f64;
                            Bundle { t: *t, g: 1 << k, value: v }
                        })
                        .collect();
                    Bidder { job: i, bundles, log_rho_empty: 0.0, first_bonus: *bonus }
                })
                .collect();
            let o = winners(&bidders, &free, None, &mu);
            for skip in 0..bidders.len() {
                let Some(_) = o.assign[skip] else { continue };
                let w = winners_without(&bidders, &free, &o.assign, skip, &mu);
                proptest::prop_assert!(w[skip].is_none());
                let mut used = vec![0u64; free.len()];
                for (i, b) in bidders.iter().enumerate() {
                    if i == skip {
                        continue;
                    }
                    let had = o.assign[i].map_or(0.0, |k| b.bundles[k].value);
                    let has = w[i].map_or(0.0, |k| b.bundles[k].value);
                    proptest::prop_assert!(has >= had, "bidder {i}: {has} < {had}");
                    if let Some(k) = w[i] {
                        used[b.bundles[k].t] += b.bundles[k].g as u64;
                    }
                }
                for t in 0..free.len() {
                    proptest::prop_assert!(used[t] <= free[t]);
                }
                proptest::prop_assert!(
                    pf_value(&bidders, &w, skip) >= pf_value(&bidders, &o.assign, skip) - 1e-12
                );
            }
        }
    }
}
