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

mod auction;
mod round;

use crate::place::TypedPools;
use crate::{ClusterView, JobView, Policy};
use auction::{solve, Bidder};
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, JobId};
use round::{
    grow_grants, leftovers_anyone, leftovers_outside, partial_grants, place_grants, switch_types,
    top_up_winners, Round, RoundCtx,
};
use std::collections::HashMap;

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
    use auction::{pf_value, winners, winners_without, Bundle};
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
