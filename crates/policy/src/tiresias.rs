//! Tiresias, discretised two-dimensional least-attained-service (2D-LAS), as in
//! Pollux's simulator: two priority queues; a job starts in the high queue and is
//! demoted once its attained service (running time × requested devices) passes
//! 16 GPU-hours. Within a queue, jobs keep the order they entered it. Jobs are
//! gang-scheduled with exactly the devices they asked for; each round the queues
//! are walked in order and a job runs if its request still fits, so a
//! higher-priority arrival preempts lower-priority jobs. Starvation handling is
//! off, as in the Pollux artifact's configuration.

use crate::place::FreePool;
use crate::{ClusterView, IdMap, IncrementalPolicy, JobView, Policy};
use pacer_model::{Allocation, ClusterSpec, JobId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

/// Demotion threshold from the high to the low queue, in GPU-seconds.
pub const QUEUE_THRESHOLD_GPU_S: f64 = 16.0 * 3600.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    High,
    Low,
}

#[derive(Debug, Clone)]
struct State {
    queue: Queue,
    /// Position in its queue (monotone counter: order of entry).
    seq: u64,
    running: bool,
    last_check_s: f64,
    executed_s: f64,
}

#[derive(Debug, Default)]
pub struct Tiresias {
    state: HashMap<JobId, State>,
    next_seq: u64,
}

impl Policy for Tiresias {
    fn name(&self) -> &'static str {
        "tiresias"
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let now = view.now_s;
        let cap = view.cluster.total_gpus();
        // Forget finished jobs; enrol new ones at the back of the high queue.
        let live: std::collections::HashSet<JobId> = view.jobs.iter().map(|j| j.id).collect();
        self.state.retain(|id, _| live.contains(id));
        let mut fresh: Vec<&crate::JobView> = view
            .jobs
            .iter()
            .filter(|j| !self.state.contains_key(&j.id))
            .collect();
        fresh.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.id.cmp(&b.id)));
        for j in fresh {
            self.state.insert(
                j.id,
                State {
                    queue: Queue::High,
                    seq: self.next_seq,
                    running: false,
                    last_check_s: now,
                    executed_s: 0.0,
                },
            );
            self.next_seq += 1;
        }
        // Account running time and demote.
        for j in view.jobs {
            let s = self.state.get_mut(&j.id).expect("enrolled");
            if s.running {
                s.executed_s += now - s.last_check_s;
                let gpu_s = s.executed_s * j.requested_replicas.clamp(1, cap) as f64;
                if s.queue == Queue::High && gpu_s >= QUEUE_THRESHOLD_GPU_S {
                    s.queue = Queue::Low;
                    s.seq = self.next_seq;
                    self.next_seq += 1;
                }
            }
            s.last_check_s = now;
        }
        // Walk queues in priority order; run whoever still fits.
        let mut order: Vec<usize> = (0..view.jobs.len()).collect();
        let key = |i: &usize| {
            let s = &self.state[&view.jobs[*i].id];
            (s.queue == Queue::Low, s.seq)
        };
        order.sort_by_key(key);
        let mut budget = cap;
        let mut run = vec![false; view.jobs.len()];
        for &i in &order {
            let want = view.jobs[i].requested_replicas.clamp(1, cap);
            if want <= budget {
                run[i] = true;
                budget -= want;
            }
        }
        let mut pool = FreePool::new(view.cluster);
        let mut out: Vec<Allocation> = view.jobs.iter().map(|_| Allocation::empty()).collect();
        for &i in &order {
            if run[i] && !view.jobs[i].current.is_empty() && pool.take_exact(&view.jobs[i].current)
            {
                out[i] = view.jobs[i].current.clone();
            }
        }
        for &i in &order {
            if run[i] && out[i].is_empty() {
                let want = view.jobs[i].requested_replicas.clamp(1, cap);
                out[i] = pool
                    .take_most_free(want)
                    .expect("budgeted devices are free");
            }
        }
        for (i, j) in view.jobs.iter().enumerate() {
            self.state.get_mut(&j.id).expect("enrolled").running = run[i];
        }
        out
    }

    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        Some(Box::new(TiresiasQueues::default()))
    }
}

/// Position in the queues: low queue after high, then order of entry.
type Key = (bool, u64, JobId);

#[derive(Debug, Clone)]
struct Entry {
    want: u32,
    key: Key,
    /// Order of admission (the order a full view lists jobs in).
    rank: u64,
    executed_s: f64,
    alloc: Option<Allocation>,
    /// The decision that last ran it.
    stamp: u64,
}

/// Tiresias driven by events, with the same decisions as [`Tiresias::allocate`].
/// The queues are ordered sets (one overall, one per requested size), so a round
/// in which no job arrived, left or was demoted keeps every decision at the cost
/// of accounting the running jobs' service; otherwise the walk takes jobs in
/// queue order while they fit and then jumps, per requested size, to the next
/// job that still fits the devices left (instead of scanning the whole queue).
#[derive(Debug, Default)]
pub struct TiresiasQueues {
    jobs: IdMap<Entry>,
    /// Admitted since the last decision, admission order: (id, requested).
    pending: Vec<(JobId, u32)>,
    all: BTreeSet<Key>,
    by_want: BTreeMap<u32, BTreeSet<Key>>,
    /// Jobs run by the last decision.
    running: Vec<JobId>,
    pool: Option<FreePool>,
    next_seq: u64,
    next_rank: u64,
    last_now: f64,
    dirty: bool,
    /// Decisions made (stamps the jobs each one runs).
    round: u64,
}

impl TiresiasQueues {
    fn insert_key(&mut self, key: Key, want: u32) {
        self.all.insert(key);
        self.by_want.entry(want).or_default().insert(key);
    }

    fn remove_key(&mut self, key: &Key, want: u32) {
        self.all.remove(key);
        if let Some(set) = self.by_want.get_mut(&want) {
            set.remove(key);
            if set.is_empty() {
                self.by_want.remove(&want);
            }
        }
    }

    /// The first job after `after` in queue order whose size fits `budget`.
    fn next_fitting(&self, after: &Key, budget: u32) -> Option<Key> {
        self.by_want
            .range(..=budget)
            .filter_map(|(_, set)| {
                set.range((Bound::Excluded(*after), Bound::Unbounded))
                    .next()
                    .copied()
            })
            .min()
    }

    fn want_of(&self, key: &Key) -> u32 {
        self.jobs.get(&key.2).map_or(u32::MAX, |e| e.want)
    }
}

impl IncrementalPolicy for TiresiasQueues {
    fn uses_attained(&self) -> bool {
        false
    }

    fn admit(&mut self, job: &JobView) {
        self.pending.push((job.id, job.requested_replicas));
    }

    fn finish(&mut self, id: JobId) {
        self.pending.retain(|p| p.0 != id);
        if let Some(e) = self.jobs.remove(&id) {
            self.remove_key(&e.key, e.want);
            if let (Some(a), Some(pool)) = (&e.alloc, &mut self.pool) {
                pool.give_back(a);
            }
            self.running.retain(|&r| r != id);
            self.dirty = true;
        }
    }

    fn decide(
        &mut self,
        now: f64,
        cluster: &ClusterSpec,
        _attained: &[(JobId, f64)],
        changes: &mut Vec<(JobId, Allocation)>,
    ) {
        let cap = cluster.total_gpus();
        // Enrol new jobs at the back of the high queue, in arrival order.
        for (id, req) in std::mem::take(&mut self.pending) {
            let want = req.clamp(1, cap);
            let key = (false, self.next_seq, id);
            self.next_seq += 1;
            self.jobs.insert(
                id,
                Entry {
                    want,
                    key,
                    rank: self.next_rank,
                    executed_s: 0.0,
                    alloc: None,
                    stamp: 0,
                },
            );
            self.next_rank += 1;
            self.insert_key(key, want);
            self.dirty = true;
        }
        // Account running time; demote, in arrival order.
        let mut demoted: Vec<(u64, JobId)> = Vec::new();
        for id in &self.running {
            let e = self.jobs.get_mut(id).expect("running jobs are enrolled");
            e.executed_s += now - self.last_now;
            let gpu_s = e.executed_s * e.want as f64;
            if !e.key.0 && gpu_s >= QUEUE_THRESHOLD_GPU_S {
                demoted.push((e.rank, *id));
            }
        }
        self.last_now = now;
        demoted.sort_unstable();
        for (_, id) in demoted {
            let (old, want) = {
                let e = &self.jobs[&id];
                (e.key, e.want)
            };
            self.remove_key(&old, want);
            let key = (true, self.next_seq, id);
            self.next_seq += 1;
            self.jobs.get_mut(&id).expect("enrolled").key = key;
            self.insert_key(key, want);
            self.dirty = true;
        }
        if !self.dirty {
            return;
        }
        self.dirty = false;
        // Walk the queues: in order while jobs fit, then jump to the next that fits.
        let mut budget = cap;
        let mut run: Vec<Key> = Vec::new();
        let mut blocked: Option<Key> = None;
        for key in &self.all {
            if budget == 0 {
                break;
            }
            let want = self.want_of(key);
            if want <= budget {
                run.push(*key);
                budget -= want;
            } else {
                blocked = Some(*key);
                break;
            }
        }
        if let Some(mut after) = blocked {
            while budget > 0 {
                let Some(key) = self.next_fitting(&after, budget) else {
                    break;
                };
                budget -= self.want_of(&key);
                run.push(key);
                after = key;
            }
        }
        // Jobs that keep running keep their devices; the others are preempted first.
        let pool = self.pool.get_or_insert_with(|| FreePool::new(cluster));
        self.round += 1;
        for key in &run {
            self.jobs.get_mut(&key.2).expect("enrolled").stamp = self.round;
        }
        for id in &self.running {
            if self.jobs[id].stamp != self.round {
                let e = self.jobs.get_mut(id).expect("enrolled");
                if let Some(a) = e.alloc.take() {
                    pool.give_back(&a);
                }
                changes.push((*id, Allocation::empty()));
            }
        }
        for key in &run {
            let e = self.jobs.get_mut(&key.2).expect("enrolled");
            if e.alloc.is_none() {
                if let Some(a) = pool.take_most_free(e.want) {
                    e.alloc = Some(a.clone());
                    changes.push((key.2, a));
                }
            }
        }
        self.running = run.iter().map(|k| k.2).collect();
    }
}
