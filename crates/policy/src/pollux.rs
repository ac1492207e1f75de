//! Pollux-style goodput scheduling (Qiao et al., OSDI'21), with a faster search.
//!
//! Each job brings a goodput model ([`pacer_predict::goodput::GoodputFn`]) fitted
//! from what it has observed; its *speedup* on `r` devices over `n` nodes is its
//! best goodput there over its goodput on a fair share (`⌈devices / jobs⌉` replicas
//! on one node), as in Pollux. A job with no model yet is assumed to scale
//! linearly. The cluster objective is Pollux's: maximise the generalised mean with
//! p = −1 of the jobs' speedups, where a job whose allocation changes has its
//! speedup discounted by `max(age − 30·restarts, 0) / (age + 30)` (the cost of a
//! 30 s restart amortised over its life).
//!
//! Search. Pollux runs NSGA-II (100 generations × 100 individuals) every round. We
//! exploit the objective's shape instead: with p = −1 it is
//! `min Σ_j 1 / (s_j + ε)`, separable over jobs once placement is fixed. So:
//! 1. choose replica counts greedily by the best *per-device* decrease of the sum,
//!    allowing multi-device jumps (speedup curves are not concave: crossing a node
//!    boundary costs network time), using the speedup of the consolidated
//!    placement (`⌈r / devices-per-node⌉` nodes) — or of the job's current
//!    placement when the count does not change, which also avoids the restart;
//! 2. place: jobs that keep their count keep their exact devices; the others are
//!    placed largest first on the nodes with the most free devices.
//!
//! This is `O(jobs · max_replicas)` speedup evaluations per round, all memoised
//! per job until its model changes. Choices the papers leave open (docs/algorithms.md
//! §3c): the fair-share normaliser and restart discount follow the
//! Pollux artifact; the greedy search is ours.

use crate::place::FreePool;
use crate::{ClusterView, JobView, Policy};
use pacer_model::{Allocation, JobId};
use pacer_predict::goodput::{BatchLimits, Candidate, PerfParams};
use std::collections::{BinaryHeap, HashMap};

/// Restart cost assumed by the objective (s), as in Pollux.
pub const RESTART_PENALTY_S: f64 = 30.0;
/// Exponent of the generalised mean (−1: harmonic, favouring fairness).
const EPS: f64 = 1e-3;

#[derive(Debug, Default, Clone)]
struct JobCache {
    /// `JobView::goodput_version` the `best` values belong to.
    version: u64,
    /// Performance model and limits the candidate tables were built for.
    model: Option<(PerfParams, BatchLimits)>,
    /// Candidate batch configurations with their throughput, per (nodes, replicas).
    /// Kept while only the gradient statistics change (every epoch), which re-ranks
    /// candidates without re-evaluating step times.
    tables: HashMap<(u32, u32), Vec<Candidate>>,
    /// Best goodput per (nodes, replicas) at `version`.
    best: HashMap<(u32, u32), f64>,
}

#[derive(Debug, Default)]
pub struct Pollux {
    cache: HashMap<JobId, JobCache>,
}

impl JobCache {
    /// Brings the cache in line with the job's current model.
    fn refresh(&mut self, job: &JobView) {
        if self.version != job.goodput_version {
            self.version = job.goodput_version;
            self.best.clear();
            let model = job.goodput.map(|g| (g.perf, g.limits));
            if model != self.model {
                self.model = model;
                self.tables.clear();
            }
        }
    }

    fn goodput(&mut self, job: &JobView, nodes: u32, replicas: u32) -> f64 {
        let Some(g) = &job.goodput else {
            return replicas as f64;
        };
        if replicas == 0 {
            return 0.0;
        }
        if let Some(&b) = self.best.get(&(nodes, replicas)) {
            return b;
        }
        let table = self
            .tables
            .entry((nodes, replicas))
            .or_insert_with(|| g.candidates(nodes, replicas));
        let b = g.best_candidate(table).map_or(0.0, |c| c.goodput);
        self.best.insert((nodes, replicas), b);
        b
    }
}

/// One candidate move in the greedy: give job `job` `to` replicas.
#[derive(Debug, PartialEq)]
struct Move {
    gain_per_device: f64,
    job: usize,
    from: u32,
    to: u32,
}

impl Eq for Move {}
impl PartialOrd for Move {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Move {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.gain_per_device
            .total_cmp(&other.gain_per_device)
            .then(other.job.cmp(&self.job))
    }
}

/// Placement of the chosen replica counts: keepers on their devices first, then
/// the rest largest first (on one node when it fits, else on the nodes with most free).
fn place(view: &ClusterView, replicas: &[u32], per_node: u32) -> Vec<Allocation> {
    let jobs = view.jobs;
    let n = jobs.len();
    let mut pool = FreePool::new(view.cluster);
    let mut out: Vec<Allocation> = vec![Allocation::empty(); n];
    let mut todo = Vec::new();
    for i in 0..n {
        if replicas[i] == 0 {
            continue;
        }
        if replicas[i] == jobs[i].current.replicas() && pool.take_exact(&jobs[i].current) {
            out[i] = jobs[i].current.clone();
        } else {
            todo.push(i);
        }
    }
    todo.sort_by(|&a, &b| replicas[b].cmp(&replicas[a]).then(a.cmp(&b)));
    for i in todo {
        let r = replicas[i];
        let a = if r <= per_node {
            pool.take_best_fit_one_node_for(&jobs[i], r)
        } else {
            None
        };
        if let Some(a) = a.or_else(|| pool.take_most_free_for(&jobs[i], r)) {
            out[i] = a;
        }
    }
    out
}

impl Policy for Pollux {
    fn name(&self) -> &'static str {
        "pollux"
    }

    fn adaptive_batch(&self) -> bool {
        true
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let jobs = view.jobs;
        let n = jobs.len();
        if n == 0 {
            return Vec::new();
        }
        let cap = view.cluster.total_gpus();
        let per_node = view.cluster.max_gpus_per_node().max(1);
        let live: std::collections::HashSet<JobId> = jobs.iter().map(|j| j.id).collect();
        self.cache.retain(|id, _| live.contains(id));
        let fair_replicas = cap.div_ceil(n as u32).max(1);
        // Scale so that a one-node share has speedup ~1, as Pollux does (affects ε only).
        let scale = view.cluster.nodes.len() as f64 / cap as f64;

        let mut caches: Vec<JobCache> = jobs
            .iter()
            .map(|j| {
                let mut c = self.cache.remove(&j.id).unwrap_or_default();
                c.refresh(j);
                c
            })
            .collect();
        let base: Vec<f64> = jobs
            .iter()
            .zip(caches.iter_mut())
            .map(|(j, c)| {
                let b = c.goodput(j, 1, fair_replicas);
                if b > 0.0 {
                    b
                } else {
                    c.goodput(j, 1, 1).max(1e-12)
                }
            })
            .collect();
        let restart_factor: Vec<f64> = jobs
            .iter()
            .map(|j| {
                let age = (view.now_s - j.arrival_s).max(0.0);
                (age - j.num_restarts as f64 * RESTART_PENALTY_S).max(0.0)
                    / (age + RESTART_PENALTY_S)
            })
            .collect();
        let max_r: Vec<u32> = jobs.iter().map(|j| j.max_replicas.min(cap)).collect();

        // Cost of giving job i r replicas: 1 / (scaled speedup + ε).
        let mut cost = |i: usize, r: u32, caches: &mut [JobCache]| -> f64 {
            let j = &jobs[i];
            let keep = r > 0 && r == j.current.replicas();
            let s = if r == 0 {
                0.0
            } else if keep {
                caches[i].goodput(j, j.current.nodes(), r) / base[i]
            } else {
                caches[i].goodput(j, r.div_ceil(per_node), r) / base[i] * restart_factor[i]
            };
            1.0 / (s * scale + EPS)
        };

        let mut replicas = vec![0u32; n];
        let mut free = cap;
        let mut current_cost: Vec<f64> = (0..n).map(|i| cost(i, 0, &mut caches)).collect();
        let best_move = |i: usize,
                         from: u32,
                         free: u32,
                         cur: f64,
                         caches: &mut [JobCache],
                         cost: &mut dyn FnMut(usize, u32, &mut [JobCache]) -> f64|
         -> Option<Move> {
            let top = max_r[i].min(from + free);
            let mut best: Option<Move> = None;
            for to in from + 1..=top {
                let gain = (cur - cost(i, to, caches)) / (to - from) as f64;
                if gain > 0.0 && best.as_ref().is_none_or(|b| gain > b.gain_per_device) {
                    best = Some(Move {
                        gain_per_device: gain,
                        job: i,
                        from,
                        to,
                    });
                }
            }
            best
        };
        let mut heap = BinaryHeap::new();
        for (i, &c) in current_cost.iter().enumerate() {
            if let Some(m) = best_move(i, 0, free, c, &mut caches, &mut cost) {
                heap.push(m);
            }
        }
        while let Some(m) = heap.pop() {
            if free == 0 {
                break;
            }
            let i = m.job;
            if m.from != replicas[i] || m.to - m.from > free {
                // Stale (the job moved, or the jump no longer fits): re-plan this job.
                if let Some(m2) = best_move(
                    i,
                    replicas[i],
                    free,
                    current_cost[i],
                    &mut caches,
                    &mut cost,
                ) {
                    heap.push(m2);
                }
                continue;
            }
            free -= m.to - m.from;
            replicas[i] = m.to;
            current_cost[i] = cost(i, m.to, &mut caches);
            if let Some(m2) = best_move(
                i,
                replicas[i],
                free,
                current_cost[i],
                &mut caches,
                &mut cost,
            ) {
                heap.push(m2);
            }
        }

        let out = place(view, &replicas, per_node);
        for (j, c) in jobs.iter().zip(caches) {
            self.cache.insert(j.id, c);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_model::ClusterSpec;
    use pacer_predict::goodput::GoodputFn;

    fn job(id: u32, goodput: Option<GoodputFn>, max_replicas: u32) -> JobView {
        JobView {
            id: JobId(id),
            arrival_s: 0.0,
            attained_gpu_s: 0.0,
            requested_replicas: 1,
            requested_batch: None,
            max_replicas,
            num_restarts: 0,
            current: Allocation::empty(),
            goodput,
            goodput_by_type: Vec::new(),
            goodput_version: 1,
            ..JobView::basic(JobId(id), 0.0, 1)
        }
    }

    fn gfn(var: f64) -> GoodputFn {
        crate::test_goodput(1.0, var)
    }

    #[test]
    fn scalable_job_gets_more_devices_and_capacity_holds() {
        let c = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let jobs = vec![
            job(0, Some(gfn(500.0)), 16),
            job(1, Some(gfn(0.5)), 16),
            job(2, None, 1),
        ];
        let view = ClusterView {
            now_s: 600.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = Pollux::default().allocate(&view);
        crate::check_capacity(&c, &out).unwrap();
        assert!(out.iter().all(|a| a.replicas() >= 1), "{out:?}");
        assert!(out[0].replicas() > out[1].replicas(), "{out:?}");
        assert_eq!(out[2].replicas(), 1);
    }

    #[test]
    fn more_jobs_than_devices_stays_within_capacity() {
        let c = ClusterSpec::parse("2x2:t4", "t").unwrap();
        let jobs: Vec<JobView> = (0..9).map(|i| job(i, Some(gfn(10.0)), 4)).collect();
        let view = ClusterView {
            now_s: 60.0,
            cluster: &c,
            jobs: &jobs,
        };
        let out = Pollux::default().allocate(&view);
        crate::check_capacity(&c, &out).unwrap();
        assert_eq!(out.iter().map(|a| a.replicas()).sum::<u32>(), 4);
    }

    #[test]
    fn cached_tables_give_the_same_decisions_as_a_fresh_policy() {
        let c = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let mut jobs = vec![
            job(0, Some(gfn(500.0)), 16),
            job(1, Some(gfn(0.5)), 16),
            job(2, Some(gfn(50.0)), 8),
        ];
        let mut warm = Pollux::default();
        let first = warm.allocate(&ClusterView {
            now_s: 600.0,
            cluster: &c,
            jobs: &jobs,
        });
        // Gradient noise changes (new epoch) for one job, the model for another.
        for (j, a) in jobs.iter_mut().zip(&first) {
            j.current = a.clone();
        }
        jobs[0].goodput.as_mut().unwrap().grad.var = 5.0;
        jobs[0].goodput_version += 1;
        jobs[1].goodput.as_mut().unwrap().perf.alpha_n *= 3.0;
        jobs[1].goodput_version += 1;
        let view = ClusterView {
            now_s: 660.0,
            cluster: &c,
            jobs: &jobs,
        };
        assert_eq!(warm.allocate(&view), Pollux::default().allocate(&view));
    }
}
