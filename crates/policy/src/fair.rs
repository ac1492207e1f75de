//! Work-conserving max-min fair share. Each round the devices are water-filled
//! over the active jobs up to what each asked for; a job never gets more than it
//! asked for, and devices left after every demand is met stay idle only if no
//! job wants them. When there are more jobs than devices, the single devices go
//! to the jobs with the least attained service (so everyone is served in turn).
//! A job whose share did not change keeps its exact devices (no restart).
//!
//! Time slice: with more jobs than devices, a job that holds devices counts
//! `quantum_s` seconds of them less attained service (`attained − quantum_s ×
//! devices held`), so it keeps its device until it is that far ahead of the next
//! job in line. Without it (`fair-q0`) every running job was preempted and
//! another one restarted every round (each restart costing 30 s of a 60 s round);
//! with it a job runs about `quantum_s` per turn. With no more jobs than devices
//! the water-filling is unchanged (attained service alone breaks ties).

use crate::place::FreePool;
use crate::{ClusterView, IncrementalPolicy, JobView, Policy};
use pacer_model::{Allocation, ClusterSpec, JobId};
use std::collections::{BTreeMap, BTreeSet};

/// Default time slice (s): ten 60 s rounds, so a 30 s restart costs 5 % of a turn.
pub const DEFAULT_QUANTUM_S: f64 = 600.0;

/// Max-min fair share with a time slice for the one-device-each regime.
#[derive(Debug, Clone)]
pub struct FairShare {
    /// Seconds of its devices a holder is credited with when there are more jobs
    /// than devices (0: pure least-attained-service every round).
    pub quantum_s: f64,
}

impl Default for FairShare {
    fn default() -> Self {
        FairShare {
            quantum_s: DEFAULT_QUANTUM_S,
        }
    }
}

impl FairShare {
    pub fn with_quantum(quantum_s: f64) -> Self {
        FairShare { quantum_s }
    }
}

/// `fair-qS`: fair share with a time slice of S seconds (`fair-q0`: none).
pub fn parse_knob(name: &str) -> Option<f64> {
    let v: f64 = name.strip_prefix("fair-q")?.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

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
        // More jobs than devices: holders are credited with their time slice.
        let q = if view.jobs.len() as u64 > cap as u64 {
            self.quantum_s
        } else {
            0.0
        };
        let priority: Vec<f64> = view
            .jobs
            .iter()
            .map(|j| slice_key(j.attained_gpu_s, q, j.current.replicas()))
            .collect();
        let shares = max_min_shares(cap as u64, &demands, &priority);
        place_shares(view, &shares)
    }

    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        Some(Box::new(FairQueue {
            quantum_s: self.quantum_s,
            ..FairQueue::default()
        }))
    }
}

/// A job's priority for the last units: attained service, less the time slice
/// `quantum_s` of the devices it holds (`quantum_s` = 0: attained service alone).
fn slice_key(attained: f64, quantum_s: f64, held: u32) -> f64 {
    attained - quantum_s * held as f64
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

/// The active jobs by id, in a dense table ([`JobId`]s are dense indices, 0..n):
/// one lookup per job the engine lists each round, without hashing.
#[derive(Debug, Default)]
struct Jobs {
    slots: Vec<Option<FairJob>>,
    len: usize,
}

impl Jobs {
    fn len(&self) -> usize {
        self.len
    }

    fn get_mut(&mut self, id: &JobId) -> Option<&mut FairJob> {
        self.slots.get_mut(id.0 as usize)?.as_mut()
    }

    fn insert(&mut self, id: JobId, j: FairJob) {
        let k = id.0 as usize;
        if k >= self.slots.len() {
            self.slots.resize_with(k + 1, || None);
        }
        if self.slots[k].replace(j).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, id: &JobId) -> Option<FairJob> {
        let j = self.slots.get_mut(id.0 as usize)?.take();
        self.len -= j.is_some() as usize;
        j
    }
}

impl std::ops::Index<&JobId> for Jobs {
    type Output = FairJob;
    fn index(&self, id: &JobId) -> &FairJob {
        self.slots[id.0 as usize].as_ref().expect("active job")
    }
}

/// (priority, arrival rank, id): the order in which jobs get the last units.
type Key = (Attained, u64, JobId);

/// A job as fair share tracks it: `repr(C)` and cache-line aligned, what each
/// round reads for every holder (attained service, devices held, rank) first.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct FairJob {
    attained: f64,
    rank: u64,
    /// `alloc.replicas()`.
    held: u32,
    /// In `waiting` (more jobs than devices, holding none).
    waits: bool,
    /// Index in `FairQueue::holders` while it holds devices.
    slot: usize,
    want: u32,
    alloc: Allocation,
    /// This round's share, valid when `stamp` is the decision's.
    share: u32,
    stamp: u64,
}

impl FairJob {
    fn key(&self, id: JobId, quantum_s: f64) -> Key {
        (
            Attained(slice_key(self.attained, quantum_s, self.held)),
            self.rank,
            id,
        )
    }

    fn set_alloc(&mut self, a: Allocation) {
        self.held = a.replicas();
        self.alloc = a;
    }
}

/// Fair share driven by events, with the same decisions as [`FairShare::allocate`].
///
/// With more jobs than devices every share is 0 or 1 and the ones go to the jobs
/// with the lowest priority (attained service less the holders' time slice). The
/// jobs holding no device wait in an ordered set by (attained, arrival), which
/// changes only when one arrives, leaves, is preempted or starts; each round the
/// holders' priorities are compared with the first waiter's, and only when a
/// holder is behind it are holders and waiters exchanged (the holders behind it,
/// largest first, against the set, smallest first). A round costs O(holders) plus
/// O(log jobs) per exchange, not the length of the queue.
///
/// With no more jobs than devices the water-filling runs on all of them (at most
/// one per device), and is skipped when nothing arrived or left and attained
/// service decided no tie.
#[derive(Debug, Default)]
pub struct FairQueue {
    quantum_s: f64,
    jobs: Jobs,
    /// Decisions made (stamps this round's shares).
    round: u64,
    /// Admitted since the last decision, admission order: (id, requested, attained).
    pending: Vec<(JobId, u32, f64)>,
    by_rank: BTreeMap<u64, JobId>,
    /// More jobs than devices, and `waiting` indexed.
    over: bool,
    /// While `over`: every job holding no devices, by (attained, arrival).
    waiting: BTreeSet<Key>,
    /// Jobs holding devices (any order; each knows its slot).
    holders: Vec<JobId>,
    /// Priorities of the holders listed in the last `attained` (reused buffer).
    listed: Vec<Key>,
    /// Jobs starting and preempted in a rotation (reused buffers).
    inn: Vec<JobId>,
    out: Vec<JobId>,
    /// `inn` with each job's arrival rank, for sorting (reused buffer).
    ranked: Vec<(u64, JobId)>,
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
            if j.waits {
                self.waiting.remove(&j.key(id, 0.0));
            }
            if !j.alloc.is_empty() {
                if let Some(pool) = &mut self.pool {
                    pool.give_back(&j.alloc);
                }
                self.unhold(j.slot);
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
        self.pool.get_or_insert_with(|| FreePool::new(cluster));
        self.admit_pending(cap);
        let moved = self.observe(attained);
        if self.jobs.len() as u64 > cap as u64 {
            if self.over {
                // Holders not listed (none, when the driver lists every job that ran)
                // are looked up.
                if self.listed.len() != self.holders.len() {
                    let q = self.quantum_s;
                    self.listed = self
                        .holders
                        .iter()
                        .map(|id| self.jobs[id].key(*id, q))
                        .collect();
                }
                self.rotate(cap, changes);
            } else {
                // Entering the one-device-each regime: a full decision, then the
                // waiters are indexed.
                self.round += 1;
                let sharers = self.least_served(cap);
                self.apply_shares(&sharers, changes);
                self.index_waiters();
            }
            self.events = false;
            return;
        }
        if self.over {
            self.over = false;
            self.waiting.clear();
            for id in self.by_rank.values() {
                self.jobs.get_mut(id).expect("active").waits = false;
            }
        }
        if !(self.events || (moved && self.ties)) {
            return;
        }
        self.events = false;
        self.round += 1;
        let round = self.round;
        let ids: Vec<JobId> = self.by_rank.values().copied().collect();
        let demands: Vec<u32> = ids.iter().map(|id| self.jobs[id].want).collect();
        let priority: Vec<f64> = ids.iter().map(|id| self.jobs[id].attained).collect();
        let (shares, ties) = shares_and_ties(cap as u64, &demands, &priority);
        self.ties = ties;
        let mut sharers = Vec::new();
        for (id, s) in ids.into_iter().zip(shares) {
            if s > 0 {
                let j = self.jobs.get_mut(&id).expect("active");
                j.share = s;
                j.stamp = round;
                sharers.push(id);
            }
        }
        self.apply_shares(&sharers, changes);
    }
}

impl FairQueue {
    /// Registers the jobs admitted since the last decision.
    fn admit_pending(&mut self, cap: u32) {
        for (id, req, att) in std::mem::take(&mut self.pending) {
            let rank = self.next_rank;
            self.next_rank += 1;
            let j = FairJob {
                rank,
                want: req.clamp(1, cap),
                attained: att,
                alloc: Allocation::empty(),
                held: 0,
                share: 0,
                stamp: 0,
                waits: self.over,
                slot: 0,
            };
            if self.over {
                self.waiting.insert(j.key(id, 0.0));
            }
            self.jobs.insert(id, j);
            self.by_rank.insert(rank, id);
            self.events = true;
        }
    }

    /// Records attained service (whether any changed), and lists the priorities
    /// of the holders among them in `listed`.
    fn observe(&mut self, attained: &[(JobId, f64)]) -> bool {
        let q = self.quantum_s;
        let mut moved = false;
        self.listed.clear();
        for &(id, att) in attained {
            if let Some(j) = self.jobs.get_mut(&id) {
                if j.attained.to_bits() != att.to_bits() {
                    if j.waits {
                        self.waiting.remove(&j.key(id, 0.0));
                        j.attained = att;
                        self.waiting.insert(j.key(id, 0.0));
                    }
                    j.attained = att;
                    moved = true;
                }
                if j.held > 0 {
                    self.listed.push(j.key(id, q));
                }
            }
        }
        moved
    }

    /// Adds `id` to the holders.
    fn hold(&mut self, id: JobId) {
        self.jobs.get_mut(&id).expect("active").slot = self.holders.len();
        self.holders.push(id);
    }

    /// Removes the holder in `slot` (O(1): the last one takes its place).
    fn unhold(&mut self, slot: usize) {
        self.holders.swap_remove(slot);
        if let Some(&moved) = self.holders.get(slot) {
            self.jobs.get_mut(&moved).expect("holders are active").slot = slot;
        }
    }

    /// The `cap` jobs of lowest priority, each stamped with a share of one.
    fn least_served(&mut self, cap: u32) -> Vec<JobId> {
        let q = self.quantum_s;
        let mut all: Vec<Key> = self
            .by_rank
            .values()
            .map(|id| self.jobs[id].key(*id, q))
            .collect();
        let cap = cap as usize;
        if all.len() > cap {
            all.select_nth_unstable(cap);
            all.truncate(cap);
        }
        let round = self.round;
        all.into_iter()
            .map(|(_, _, id)| {
                let j = self.jobs.get_mut(&id).expect("active");
                j.share = 1;
                j.stamp = round;
                id
            })
            .collect()
    }

    /// Puts every job holding no devices into `waiting`.
    fn index_waiters(&mut self) {
        self.waiting.clear();
        for &id in self.by_rank.values() {
            let j = self.jobs.get_mut(&id).expect("active");
            j.waits = j.alloc.is_empty();
            if j.waits {
                self.waiting.insert(j.key(id, 0.0));
            }
        }
        self.over = true;
    }

    /// One decision with more jobs than devices, `waiting` indexed and `listed`
    /// holding every holder's priority: free devices go to the first waiters, then
    /// holders behind the first waiter are exchanged for waiters, largest priority
    /// against smallest, while the holder is behind.
    fn rotate(&mut self, cap: u32, changes: &mut Vec<(JobId, Allocation)>) {
        let mut inn = std::mem::take(&mut self.inn);
        let mut out = std::mem::take(&mut self.out);
        inn.clear();
        out.clear();
        for _ in self.holders.len()..cap as usize {
            match self.waiting.pop_first() {
                Some((_, _, id)) => inn.push(id),
                None => break,
            }
        }
        if let Some(&first) = self.waiting.first() {
            // Only holders behind the first waiter can be exchanged.
            self.listed.retain(|k| *k > first);
            self.listed.sort_unstable_by(|a, b| b.cmp(a));
            for &k in &self.listed {
                match self.waiting.first() {
                    Some(&w) if k > w => {}
                    _ => break,
                }
                let (_, _, w) = self.waiting.pop_first().expect("first");
                out.push(k.2);
                inn.push(w);
            }
        }
        if !(inn.is_empty() && out.is_empty()) {
            self.exchange(&mut inn, &out, changes);
        }
        self.inn = inn;
        self.out = out;
    }

    /// Preempts `out` (back to `waiting`) and places `inn`, one device each, in
    /// arrival order (place_shares' order); one that finds no device waits.
    fn exchange(
        &mut self,
        inn: &mut [JobId],
        out: &[JobId],
        changes: &mut Vec<(JobId, Allocation)>,
    ) {
        for id in out {
            let j = self.jobs.get_mut(id).expect("holders are active");
            self.pool
                .as_mut()
                .expect("created in decide")
                .give_back(&j.alloc);
            j.set_alloc(Allocation::empty());
            j.waits = true;
            let slot = j.slot;
            self.waiting.insert(j.key(*id, 0.0));
            changes.push((*id, Allocation::empty()));
            self.unhold(slot);
        }
        // Arrival order, each rank looked up once (not once per comparison).
        let mut ranked = std::mem::take(&mut self.ranked);
        ranked.clear();
        ranked.extend(inn.iter().map(|id| (self.jobs[id].rank, *id)));
        ranked.sort_unstable();
        for (k, &(_, id)) in ranked.iter().enumerate() {
            inn[k] = id;
        }
        self.ranked = ranked;
        for &id in inn.iter() {
            let pool = self.pool.as_mut().expect("created in decide");
            let j = self.jobs.get_mut(&id).expect("waiters are active");
            match pool.take_most_free(1) {
                Some(a) => {
                    j.waits = false;
                    j.set_alloc(a.clone());
                    changes.push((id, a));
                    self.hold(id);
                }
                None => {
                    j.waits = true;
                    self.waiting.insert(j.key(id, 0.0));
                }
            }
        }
    }

    /// Places the shares stamped this round on `sharers`: holders whose share
    /// differs give their devices back, the rest keep them; the others are placed
    /// largest share first, then in arrival order.
    fn apply_shares(&mut self, sharers: &[JobId], changes: &mut Vec<(JobId, Allocation)>) {
        let round = self.round;
        let share_of = |j: &FairJob| if j.stamp == round { j.share } else { 0 };
        let pool = self.pool.as_mut().expect("created in decide");
        let mut keep: Vec<JobId> = Vec::new();
        for &id in &self.holders {
            let j = self.jobs.get_mut(&id).expect("holders are active");
            let s = share_of(j);
            if s == j.held {
                keep.push(id);
            } else {
                pool.give_back(&j.alloc);
                j.set_alloc(Allocation::empty());
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
        todo.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (s, _, id) in todo {
            let a = pool.take_most_free(s).unwrap_or_else(Allocation::empty);
            if !a.is_empty() {
                keep.push(id);
            }
            self.jobs.get_mut(&id).expect("active").set_alloc(a.clone());
            changes.push((id, a));
        }
        for (k, id) in keep.iter().enumerate() {
            self.jobs.get_mut(id).expect("active").slot = k;
        }
        self.holders = keep;
    }
}

/// Places integer shares: jobs whose share equals what they hold keep it; the
/// others are placed largest first on the nodes with the most free devices (of one
/// device type for a job whose speed depends on it: up to what that type has free).
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
        let job = &view.jobs[i];
        // A job placed on one device type gets what its best-provided type has left
        // when that is less than its share (work-conserving).
        let n = if crate::place::mixes_types_freely(job) {
            shares[i]
        } else {
            (shares[i] as u64).min(pool.most_for(job)) as u32
        };
        if let Some(a) = pool.take_most_free_for(job, n) {
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
