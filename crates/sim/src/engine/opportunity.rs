//! How much a policy that spans device types could gain over the run just
//! simulated (`SimConfig::mixing_opportunity`, `pacer simulate --mixing-opportunity`;
//! docs/mixed-types.md, "The opportunity"). Measured on the run's own rounds, after
//! each decision:
//!
//! - **Idle** device-seconds: devices no job holds while some job is active.
//! - **Stranded** device-seconds: devices idle on a type `t` while some job is
//!   *held to other types*: it waits, or it runs below its replica limit on types
//!   that have no device free (it could not grow where it is), and `t` is a type it
//!   is measured on but does not hold. Only there can a job across types use a
//!   device that a one-type policy cannot give it.
//! - **Bound** on the JCT mixing could save: each round the stranded devices are
//!   handed to those jobs (each at most up to its limit, devices of any of the idle
//!   types taken as its best one, restarts and synchronisation free), a job on `n`
//!   devices of its type gaining `x = r·m` device-equivalents from `m` added devices
//!   of relative one-device speed `r`. A job's rate is concave in its devices, so it
//!   rises at most by the factor `(n + x) / n` and the round's time saved is at most
//!   `dt · x / (n + x)`; a waiting job given a device saves at most the round. The
//!   devices go where they save most (greedily, one at a time: optimal for concave
//!   gains). A job's saving is capped by its JCT. This is a first-order bound on the
//!   run's trajectory: it leaves out knock-on effects (a job finished earlier frees
//!   its devices for others), which are small where devices sit idle.
//! - **Balanced estimate** (with `--mixed-types`, whose views carry each job's
//!   `JobView::mixed`): the same rounds and jobs, each job's gain taken from its own
//!   balanced goodput instead of a linear speed-up — its goodput on what it holds
//!   plus devices of one or two idle types (per type, powers of two and all that is
//!   free, on the fewest nodes that hold them; the all-reduce over the slowest link
//!   included) against its goodput on what it holds. Jobs are served in decreasing
//!   order of the fraction they would save, each from what the ones before left.
//!   Restarts stay free: this is what the policy's own model says mixing could give
//!   on this run, an estimate, not a bound. Beside it, the **same-type** estimate
//!   takes the same devices as devices of the job's own type (its goodput on that
//!   many, on as many nodes): the gap between the two is what spanning types costs
//!   (the slower type's replicas, the all-reduce over the slowest link), the gap
//!   to the bound what the job's own scaling costs.

use super::*;
use crate::metrics::MixingOpportunity;

/// One job held to other types this round.
struct Candidate {
    job: usize,
    /// Devices held, and most it could add.
    n: u32,
    room: u32,
    /// Best one-device speed of a free type it could add, over its own slowest.
    r: f64,
    /// Devices added so far this round.
    m: u32,
    /// Index of its view (`Tracker::round`'s `views`), when it has a mixed model.
    view: Option<usize>,
}

impl Candidate {
    /// Fraction of the round saved with `m` devices added.
    fn saved(&self, m: u32) -> f64 {
        if m == 0 {
            0.0
        } else if self.n == 0 {
            1.0
        } else {
            let x = self.r * m as f64;
            x / (self.n as f64 + x)
        }
    }
}

/// Running totals of a run's mixing opportunity.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    idle_s: f64,
    stranded_s: f64,
    rounds: u64,
    /// Per job: round-seconds saved under the bound.
    saved_s: Vec<f64>,
    /// Per job: round-seconds saved under the balanced estimate; whether any job
    /// had a mixed model.
    balanced_s: Vec<f64>,
    balanced: bool,
    /// Per job: the same with the devices taken as the job's own type.
    same_type_s: Vec<f64>,
}

impl Tracker {
    pub(super) fn new(jobs: usize) -> Self {
        Tracker {
            saved_s: vec![0.0; jobs],
            balanced_s: vec![0.0; jobs],
            same_type_s: vec![0.0; jobs],
            ..Tracker::default()
        }
    }

    /// One round of `dt` seconds over the allocations just applied (`speeds`,
    /// `caps`: every job's speed table and devices of its usable types; `views`: the
    /// active jobs' views, in `active`'s order, or none).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn round(
        &mut self,
        sim: &Simulation<'_>,
        speeds: &[Arc<SpeedTable>],
        caps: &[u32],
        dt: f64,
        active: &[usize],
        views: &[JobView],
        states: &[JobState],
        node_used: &[u32],
    ) {
        let cluster = sim.cluster;
        let types = cluster.device_types.len();
        let mut free = vec![0u32; types];
        for (node, &used) in cluster.nodes.iter().zip(node_used) {
            free[node.device_type.0 as usize] += node.gpus.saturating_sub(used);
        }
        let idle: u32 = free.iter().sum();
        self.idle_s += dt * idle as f64;
        if idle == 0 {
            return;
        }
        let mut usable_free = vec![false; types];
        let mut cands = Vec::new();
        let with_views = views.len() == active.len();
        for (k, &i) in active.iter().enumerate() {
            let st = &states[i];
            if st.completion_s.is_some() || st.dropped {
                continue;
            }
            let speed = &speeds[i];
            let limit = match sim.jobs[i].work {
                Work::Profiled { app } => {
                    let a = &sim.apps[app];
                    let by_batch = (a.max_batch / a.min_local_bsz) as u32;
                    64u32.min(by_batch).min(caps[i]).max(1)
                }
                _ => sim.jobs[i].spec.requested_replicas.max(1),
            };
            let n = st.alloc.replicas();
            if n >= limit {
                continue;
            }
            let mut own = vec![false; types];
            for &(node, _) in st.alloc.slots() {
                own[cluster.nodes[node.0 as usize].device_type.0 as usize] = true;
            }
            // It could grow on a type it holds: not held to it.
            if (0..types).any(|t| own[t] && free[t] > 0) {
                continue;
            }
            let one = |t: usize| speed.rate(DeviceTypeId(t as u16), 1, true);
            let own_rate = (0..types)
                .filter(|&t| own[t])
                .map(one)
                .fold(f64::INFINITY, f64::min);
            let mut pool = 0u32;
            let mut best = 0.0f64;
            for t in 0..types {
                if !own[t] && free[t] > 0 && one(t) > 0.0 {
                    pool += free[t];
                    best = best.max(one(t));
                    usable_free[t] = true;
                }
            }
            if pool == 0 {
                continue;
            }
            let r = if n == 0 { 1.0 } else { best / own_rate };
            cands.push(Candidate {
                job: i,
                n,
                room: (limit - n).min(pool),
                r,
                m: 0,
                view: (with_views && views[k].mixed.is_some()).then_some(k),
            });
        }
        if cands.is_empty() {
            return;
        }
        self.rounds += 1;
        let stranded: u32 = (0..types)
            .filter(|&t| usable_free[t])
            .map(|t| free[t])
            .sum();
        self.stranded_s += dt * stranded as f64;
        for _ in 0..stranded {
            let best = cands
                .iter_mut()
                .filter(|c| c.m < c.room)
                .map(|c| (c.saved(c.m + 1) - c.saved(c.m), c))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((gain, c)) if gain > 0.0 => c.m += 1,
                _ => break,
            }
        }
        for c in &cands {
            self.saved_s[c.job] += dt * c.saved(c.m);
        }
        if cands.iter().any(|c| c.view.is_some()) {
            self.balanced = true;
            self.balanced_round(sim, dt, &cands, views, states, node_used, &free);
        }
    }

    /// The balanced estimate's round (see the module's doc).
    #[allow(clippy::too_many_arguments)]
    fn balanced_round(
        &mut self,
        sim: &Simulation<'_>,
        dt: f64,
        cands: &[Candidate],
        views: &[JobView],
        states: &[JobState],
        node_used: &[u32],
        free: &[u32],
    ) {
        let cluster = sim.cluster;
        let types = free.len();
        // Free devices per node, by type, largest first.
        let mut left: Vec<Vec<u32>> = vec![Vec::new(); types];
        for (node, &used) in cluster.nodes.iter().zip(node_used) {
            let f = node.gpus.saturating_sub(used);
            if f > 0 {
                left[node.device_type.0 as usize].push(f);
            }
        }
        for l in &mut left {
            l.sort_unstable_by(|a, b| b.cmp(a));
        }
        let mut rem = free.to_vec();
        // Each candidate's best fraction on everything free, then served in that order.
        let mut order: Vec<(f64, usize)> = cands
            .iter()
            .enumerate()
            .filter(|(_, c)| c.view.is_some())
            .map(|(x, c)| (best_mix(cluster, c, views, states, &rem, &left).saved, x))
            .collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, x) in order {
            let c = &cands[x];
            let mix = best_mix(cluster, c, views, states, &rem, &left);
            self.balanced_s[c.job] += dt * mix.saved;
            self.same_type_s[c.job] += dt * mix.same_type;
            for (t, k) in mix.take {
                rem[t] -= k;
                let mut need = k;
                for slot in left[t].iter_mut() {
                    let d = need.min(*slot);
                    *slot -= d;
                    need -= d;
                }
                left[t].sort_unstable_by(|a, b| b.cmp(a));
            }
        }
    }

    /// The totals, with each job's saving capped by its JCT.
    pub(super) fn finish(&self, jobs: &[crate::metrics::JobResult]) -> MixingOpportunity {
        let (mut saved, mut jct) = (0.0, 0.0);
        for (j, &s) in jobs.iter().zip(&self.saved_s) {
            if let Some(t) = j.jct_s() {
                saved += s.min(t);
                jct += t;
            }
        }
        let capped = |per_job: &[f64]| -> f64 {
            jobs.iter()
                .zip(per_job)
                .filter_map(|(j, &s)| j.jct_s().map(|t| s.min(t)))
                .sum()
        };
        let share = |x: f64| {
            self.balanced
                .then_some(if jct > 0.0 { x / jct } else { f64::NAN })
        };
        let balanced = capped(&self.balanced_s);
        MixingOpportunity {
            balanced_saved_jct_h: self.balanced.then_some(balanced / 3600.0),
            balanced_avg_jct_gain: share(balanced),
            same_type_avg_jct_gain: share(capped(&self.same_type_s)),
            idle_gpu_h: self.idle_s / 3600.0,
            stranded_gpu_h: self.stranded_s / 3600.0,
            rounds_stranded: self.rounds,
            bound_saved_jct_h: saved / 3600.0,
            bound_avg_jct_gain: if jct > 0.0 { saved / jct } else { f64::NAN },
        }
    }
}

/// Fewest nodes whose free devices (`left`, largest first) hold `k`.
fn nodes_for(left: &[u32], k: u32) -> u32 {
    let (mut need, mut nodes) = (k, 0);
    for &f in left {
        if need == 0 {
            break;
        }
        if f > 0 {
            need = need.saturating_sub(f);
            nodes += 1;
        }
    }
    nodes
}

/// A candidate's best mix on the free devices `rem` (per type; per node `left`):
/// the fraction of the round its balanced goodput would save, and the devices
/// (type, count) it takes.
fn best_mix(
    cluster: &ClusterSpec,
    c: &Candidate,
    views: &[JobView],
    states: &[JobState],
    rem: &[u32],
    left: &[Vec<u32>],
) -> Mix {
    let none = Mix {
        saved: 0.0,
        take: Vec::new(),
        same_type: 0.0,
    };
    let Some(model) = c.view.and_then(|k| views[k].mixed.as_ref()) else {
        return none;
    };
    let types = rem.len();
    let alloc = &states[c.job].alloc;
    let mut own: Vec<(DeviceTypeId, u32)> = Vec::new();
    for &(node, n) in alloc.slots() {
        let t = cluster.nodes[node.0 as usize].device_type;
        match own.iter_mut().find(|g| g.0 == t) {
            Some(g) => g.1 += n,
            None => own.push((t, n)),
        }
    }
    let own_nodes = alloc.nodes();
    let now = if own.is_empty() {
        0.0
    } else {
        model.goodput(&own, own_nodes)
    };
    let idle: Vec<usize> = (0..types)
        .filter(|&t| rem[t] > 0 && !own.iter().any(|g| g.0 .0 as usize == t))
        .collect();
    let counts = |t: usize, room: u32| {
        let most = rem[t].min(room);
        let mut ks: Vec<u32> = (0..32)
            .map(|p| 1u32 << p)
            .take_while(|&k| k < most)
            .collect();
        if most > 0 {
            ks.push(most);
        }
        ks
    };
    let mut best = (now, Vec::new());
    let mut same = now;
    let mut try_mix = |take: Vec<(usize, u32)>| {
        let mut groups = own.clone();
        let mut nodes = own_nodes;
        for &(t, k) in &take {
            groups.push((DeviceTypeId(t as u16), k));
            nodes += nodes_for(&left[t], k);
        }
        let g = model.goodput(&groups, nodes);
        if g > best.0 {
            best = (g, take);
        }
        // The same devices as many more of the job's own type (the first type
        // taken, for a job that holds none).
        let ty = groups[0].0;
        let all: u32 = groups.iter().map(|g| g.1).sum();
        same = same.max(model.goodput(&[(ty, all)], nodes));
    };
    for (x, &t) in idle.iter().enumerate() {
        for k in counts(t, c.room) {
            try_mix(vec![(t, k)]);
            for &u in &idle[x + 1..] {
                for k2 in counts(u, c.room - k) {
                    try_mix(vec![(t, k), (u, k2)]);
                }
            }
        }
    }
    let frac = |g: f64| {
        if g > now && g > 0.0 {
            1.0 - now / g
        } else {
            0.0
        }
    };
    Mix {
        saved: frac(best.0),
        take: if best.0 > now { best.1 } else { Vec::new() },
        same_type: frac(same),
    }
}

/// A candidate's best mix: the fraction of the round it saves, the devices (type,
/// count) it takes, and the fraction saved were those devices of its own type.
struct Mix {
    saved: f64,
    take: Vec<(usize, u32)>,
    same_type: f64,
}
