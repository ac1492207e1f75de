//! The passes of one Themis round after the auction: partial grants and their
//! placement, leftovers, top-ups and type switches (steps 4–8 of [`super`]).

use super::auction::{pf_value, solve, winners_without, Bidder, Bundle, Outcome};
use super::independent_rate;
use crate::place::TypedPools;
use crate::{ClusterView, JobView};
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId};

/// One round's view of the jobs: what ρ each would have with or without devices,
/// and the devices free when the auction opened (the bundles every bidder may
/// bid for, in the auction and in the leftover passes alike).
pub(super) struct RoundCtx<'a> {
    pub(super) jobs: &'a [JobView],
    pub(super) t_ind: Vec<f64>,
    pub(super) elapsed: Vec<f64>,
    pub(super) rho_empty: Vec<f64>,
    pub(super) free: Vec<u64>,
}

impl<'a> RoundCtx<'a> {
    pub(super) fn new(view: &ClusterView<'a>, lease_s: f64) -> Self {
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
    pub(super) fn rho_with(&self, i: usize, rate: f64) -> f64 {
        (self.elapsed[i] + self.jobs[i].work_left / rate.max(1e-300)) / self.t_ind[i]
    }

    /// Job `i`'s bids: bundles of 1, 2, 4, … devices of each type up to what speeds
    /// it up (and what was free when the auction opened), valued log(ρ_empty / ρ).
    pub(super) fn bidder(&self, i: usize, pools: &TypedPools) -> Bidder {
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
pub(super) struct Round {
    pub(super) out: Vec<Allocation>,
    pub(super) holder: Vec<bool>,
    pub(super) fresh: Vec<bool>,
}

/// Step 4, partial allocation: winner `b` keeps the fraction `c_b` of its bundle
/// (1 when no bidder was constrained by capacity). Per bidder: (type, devices).
pub(super) fn partial_grants(
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
pub(super) fn place_grants(
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
pub(super) fn leftovers_outside(
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
pub(super) fn leftovers_anyone(
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
pub(super) fn top_up_winners(
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
pub(super) fn switch_types(
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
pub(super) fn grow_grants(
    pools: &mut TypedPools,
    jobs: &[JobView],
    by_rho: &[usize],
    r: &mut Round,
) {
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
