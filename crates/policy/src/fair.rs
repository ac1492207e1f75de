//! Work-conserving max-min fair share. Each round the devices are water-filled
//! over the active jobs up to what each asked for; a job never gets more than it
//! asked for, and devices left after every demand is met stay idle only if no
//! job wants them. When there are more jobs than devices, the single devices go
//! to the jobs with the least attained service (so everyone is served in turn).
//! A job whose share did not change keeps its exact devices (no restart).

use crate::place::FreePool;
use crate::{ClusterView, IdMap, IncrementalPolicy, JobView, Policy};
use pacer_model::{Allocation, ClusterSpec, JobId};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct FairShare;

/// Integer max-min fair shares of `capacity` for `demands`, ties for the last
/// units broken by `priority` (lower first).
pub fn max_min_shares(capacity: u64, demands: &[u32], priority: &[f64]) -> Vec<u32> {
    shares_and_ties(capacity, demands, priority).0
}

/// [`max_min_shares`], and whether `priority` decided any unit (when it did not,
/// the shares depend on the demands alone).
fn shares_and_ties(capacity: u64, demands: &[u32], priority: &[f64]) -> (Vec<u32>, bool) {
    let n = demands.len();
    let mut share = vec![0u32; n];
    let mut left = capacity;
    let mut open: Vec<usize> = (0..n).filter(|&i| demands[i] > 0).collect();
    // Equal integer rounds while every open job can take a whole level.
    while !open.is_empty() && left >= open.len() as u64 {
        let level = left / open.len() as u64;
        let min_gap = open
            .iter()
            .map(|&i| (demands[i] - share[i]) as u64)
            .min()
            .unwrap_or(0);
        let step = level.min(min_gap).max(1);
        for &i in &open {
            share[i] += step as u32;
            left -= step;
        }
        open.retain(|&i| share[i] < demands[i]);
    }
    // Fewer units than open jobs: one each by priority.
    let ties = left > 0 && !open.is_empty();
    open.sort_by(|&a, &b| priority[a].total_cmp(&priority[b]).then(a.cmp(&b)));
    for &i in open.iter().take(left as usize) {
        share[i] += 1;
    }
    (share, ties)
}

impl Policy for FairShare {
    fn name(&self) -> &'static str {
        "fair"
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let cap = view.cluster.total_gpus();
        let demands: Vec<u32> = view
            .jobs
            .iter()
            .map(|j| j.requested_replicas.clamp(1, cap))
            .collect();
        let priority: Vec<f64> = view.jobs.iter().map(|j| j.attained_gpu_s).collect();
        let shares = max_min_shares(cap as u64, &demands, &priority);
        place_shares(view, &shares)
    }

    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        Some(Box::new(FairQueue::default()))
    }
}

/// Attained service ordered as [`max_min_shares`] orders priorities (`total_cmp`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Attained(f64);
impl Eq for Attained {}
impl PartialOrd for Attained {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Attained {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Debug, Clone)]
struct FairJob {
    rank: u64,
    want: u32,
    attained: f64,
    alloc: Allocation,
    /// This round's share, valid when `stamp` is the decision's.
    share: u32,
    stamp: u64,
}

/// Fair share driven by events, with the same decisions as [`FairShare::allocate`].
/// With more jobs than devices every share is 0 or 1 and the ones go to the
/// least-attained jobs: an ordered set by (attained, arrival) gives them in
/// O(devices · log jobs) instead of sorting the queue. With no more jobs than
/// devices the water-filling runs on all of them (at most one per device), and is
/// skipped when nothing arrived or left and attained service decided no tie.
#[derive(Debug, Default)]
pub struct FairQueue {
    jobs: IdMap<FairJob>,
    /// Decisions made (stamps this round's shares).
    round: u64,
    /// Admitted since the last decision, admission order: (id, requested, attained).
    pending: Vec<(JobId, u32, f64)>,
    by_rank: BTreeMap<u64, JobId>,
    /// Every job by (attained, arrival), kept only while there are more jobs than
    /// devices (the only time it is read); rebuilt when that starts.
    by_attained: BTreeSet<(Attained, u64, JobId)>,
    ordered: bool,
    /// Jobs holding devices.
    holders: Vec<JobId>,
    pool: Option<FreePool>,
    next_rank: u64,
    /// Something arrived or left since the last decision.
    events: bool,
    /// The last decision used attained service to break ties.
    ties: bool,
}

impl IncrementalPolicy for FairQueue {
    fn admit(&mut self, job: &JobView) {
        self.pending
            .push((job.id, job.requested_replicas, job.attained_gpu_s));
    }

    fn finish(&mut self, id: JobId) {
        self.pending.retain(|p| p.0 != id);
        if let Some(j) = self.jobs.remove(&id) {
            self.by_rank.remove(&j.rank);
            if self.ordered {
                self.by_attained.remove(&(Attained(j.attained), j.rank, id));
            }
            if !j.alloc.is_empty() {
                if let Some(pool) = &mut self.pool {
                    pool.give_back(&j.alloc);
                }
                self.holders.retain(|&h| h != id);
            }
            self.events = true;
        }
    }

    fn decide(
        &mut self,
        _now_s: f64,
        cluster: &ClusterSpec,
        attained: &[(JobId, f64)],
        changes: &mut Vec<(JobId, Allocation)>,
    ) {
        let cap = cluster.total_gpus();
        for (id, req, att) in std::mem::take(&mut self.pending) {
            let rank = self.next_rank;
            self.next_rank += 1;
            self.jobs.insert(
                id,
                FairJob {
                    rank,
                    want: req.clamp(1, cap),
                    attained: att,
                    alloc: Allocation::empty(),
                    share: 0,
                    stamp: 0,
                },
            );
            self.by_rank.insert(rank, id);
            if self.ordered {
                self.by_attained.insert((Attained(att), rank, id));
            }
            self.events = true;
        }
        let mut moved = false;
        for &(id, att) in attained {
            if let Some(j) = self.jobs.get_mut(&id) {
                if j.attained.to_bits() != att.to_bits() {
                    if self.ordered {
                        self.by_attained.remove(&(Attained(j.attained), j.rank, id));
                        self.by_attained.insert((Attained(att), j.rank, id));
                    }
                    j.attained = att;
                    moved = true;
                }
            }
        }
        if !(self.events || (moved && self.ties)) {
            return;
        }
        self.events = false;
        // Shares of the jobs that get any, stamped with this decision.
        self.round += 1;
        let round = self.round;
        let mut sharers: Vec<JobId> = Vec::new();
        if self.jobs.len() as u64 > cap as u64 {
            // More jobs than devices: no level round; one device each by priority.
            self.ties = true;
            if !self.ordered {
                self.by_attained = self
                    .jobs
                    .iter()
                    .map(|(&id, j)| (Attained(j.attained), j.rank, id))
                    .collect();
                self.ordered = true;
            }
            sharers.extend(
                self.by_attained
                    .iter()
                    .take(cap as usize)
                    .map(|&(_, _, id)| id),
            );
            for id in &sharers {
                let j = self.jobs.get_mut(id).expect("active");
                j.share = 1;
                j.stamp = round;
            }
        } else {
            if self.ordered {
                self.by_attained.clear();
                self.ordered = false;
            }
            let ids: Vec<JobId> = self.by_rank.values().copied().collect();
            let demands: Vec<u32> = ids.iter().map(|id| self.jobs[id].want).collect();
            let priority: Vec<f64> = ids.iter().map(|id| self.jobs[id].attained).collect();
            let (shares, ties) = shares_and_ties(cap as u64, &demands, &priority);
            self.ties = ties;
            for (id, s) in ids.into_iter().zip(shares) {
                if s > 0 {
                    let j = self.jobs.get_mut(&id).expect("active");
                    j.share = s;
                    j.stamp = round;
                    sharers.push(id);
                }
            }
        }
        let share_of = |j: &FairJob| if j.stamp == round { j.share } else { 0 };
        // Holders whose share differs give their devices back; the rest keep them.
        let pool = self.pool.get_or_insert_with(|| FreePool::new(cluster));
        let mut keep: Vec<JobId> = Vec::new();
        for &id in &self.holders {
            let j = self.jobs.get_mut(&id).expect("holders are active");
            let s = share_of(j);
            if s == j.alloc.replicas() {
                keep.push(id);
            } else {
                pool.give_back(&j.alloc);
                j.alloc = Allocation::empty();
                if s == 0 {
                    changes.push((id, Allocation::empty()));
                }
            }
        }
        let mut todo: Vec<(u32, u64, JobId)> = sharers
            .iter()
            .filter_map(|id| {
                let j = &self.jobs[id];
                j.alloc.is_empty().then_some((j.share, j.rank, *id))
            })
            .collect();
        // Largest share first, then arrival order (place_shares' order).
        todo.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (s, _, id) in todo {
            let a = pool.take_most_free(s).unwrap_or_else(Allocation::empty);
            if !a.is_empty() {
                keep.push(id);
            }
            self.jobs.get_mut(&id).expect("active").alloc = a.clone();
            changes.push((id, a));
        }
        self.holders = keep;
    }
}

/// Places integer shares: jobs whose share equals what they hold keep it; the
/// others are placed largest first on the nodes with the most free devices.
pub fn place_shares(view: &ClusterView, shares: &[u32]) -> Vec<Allocation> {
    let mut pool = FreePool::new(view.cluster);
    let mut out: Vec<Allocation> = view.jobs.iter().map(|_| Allocation::empty()).collect();
    let mut todo = Vec::new();
    for (i, j) in view.jobs.iter().enumerate() {
        if shares[i] == 0 {
            continue;
        }
        if j.current.replicas() == shares[i] && pool.take_exact(&j.current) {
            out[i] = j.current.clone();
        } else {
            todo.push(i);
        }
    }
    todo.sort_by(|&a, &b| shares[b].cmp(&shares[a]).then(a.cmp(&b)));
    for i in todo {
        if let Some(a) = pool.take_most_free_for(&view.jobs[i], shares[i]) {
            out[i] = a;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_filling() {
        assert_eq!(max_min_shares(10, &[2, 8, 8], &[0.0; 3]), vec![2, 4, 4]);
        assert_eq!(max_min_shares(10, &[1, 1, 1], &[0.0; 3]), vec![1, 1, 1]);
        assert_eq!(
            max_min_shares(2, &[4, 4, 4], &[3.0, 1.0, 2.0]),
            vec![0, 1, 1]
        );
        assert_eq!(max_min_shares(7, &[4, 4], &[0.0, 1.0]), vec![4, 3]);
    }
}
