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
        for j in forget_and_enrol(view, &mut self.state) {
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
        let (run, out) = gang_in_order(view, &order);
        for (i, j) in view.jobs.iter().enumerate() {
            self.state.get_mut(&j.id).expect("enrolled").running = run[i];
        }
        out
    }

    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        Some(Box::new(TiresiasQueues::default()))
    }
}

/// Forgets the jobs of `state` that are no longer in `view`; returns the jobs of `view`
/// not in `state`, in arrival order (ties by id), for the caller to enrol.
pub(crate) fn forget_and_enrol<'a, S>(
    view: &ClusterView<'a>,
    state: &mut HashMap<JobId, S>,
) -> Vec<&'a JobView> {
    let live: std::collections::HashSet<JobId> = view.jobs.iter().map(|j| j.id).collect();
    state.retain(|id, _| live.contains(id));
    let mut fresh: Vec<&JobView> = view
        .jobs
        .iter()
        .filter(|j| !state.contains_key(&j.id))
        .collect();
    fresh.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then(a.id.cmp(&b.id)));
    fresh
}

/// Gang scheduling in priority order: walking `order` (indices into `view.jobs`), each
/// job runs when its request (clamped to the cluster) still fits the devices left,
/// keeping its current devices where it has them, otherwise on the most free devices of
/// a type it can use (a job that finds none after all does not run). Returns which
/// jobs run and their allocations. Shared by `tiresias` and `dlas-gpu`.
pub(crate) fn gang_in_order(view: &ClusterView, order: &[usize]) -> (Vec<bool>, Vec<Allocation>) {
    let cap = view.cluster.total_gpus();
    let mut budget = cap;
    let mut run = vec![false; view.jobs.len()];
    for &i in order {
        let want = view.jobs[i].requested_replicas.clamp(1, cap);
        if want <= budget {
            run[i] = true;
            budget -= want;
        }
    }
    let mut pool = FreePool::new(view.cluster);
    let mut out: Vec<Allocation> = view.jobs.iter().map(|_| Allocation::empty()).collect();
    for &i in order {
        if run[i] && !view.jobs[i].current.is_empty() && pool.take_exact(&view.jobs[i].current) {
            out[i] = view.jobs[i].current.clone();
        }
    }
    for &i in order {
        if run[i] && out[i].is_empty() {
            let want = view.jobs[i].requested_replicas.clamp(1, cap);
            // Budgeted devices are free, but maybe not of the job's device types.
            match pool.take_most_free_for(&view.jobs[i], want) {
                Some(a) => out[i] = a,
                None => run[i] = false,
            }
        }
    }
    (run, out)
}

/// Position in the queues: low queue after high, then order of entry (unique);
/// the size and id ride along.
type Key = (bool, u64, u32, JobId);

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    /// Order of admission (the order a full view lists jobs in).
    rank: u64,
    /// Service while not running (a running job's is in its [`Run`]).
    executed_s: f64,
    alloc: Option<Allocation>,
}

/// A job the last decision ran, with the service it has accumulated.
#[derive(Debug, Clone, Copy)]
struct Run {
    id: JobId,
    want: u32,
    rank: u64,
    low: bool,
    executed_s: f64,
}

/// Tiresias driven by events, with the same decisions as [`Tiresias::allocate`].
/// The queues are ordered sets (one overall, one per requested size). A round in
/// which no job left or was demoted, and every arrival finds fewer devices left at
/// its place in the queues than it asks for, keeps every decision, at the cost of
/// accounting the running jobs' service. Otherwise the walk takes jobs in queue
/// order while they fit and then jumps, per requested size, to the next job that
/// still fits the devices left, instead of scanning the whole queue.
#[derive(Debug, Default)]
pub struct TiresiasQueues {
    jobs: IdMap<Entry>,
    /// Admitted since the last decision, admission order: (id, requested).
    pending: Vec<(JobId, u32)>,
    all: BTreeSet<Key>,
    by_want: BTreeMap<u32, BTreeSet<Key>>,
    /// Jobs run by the last decision, in queue order at that decision.
    running: Vec<Run>,
    /// Their keys at that decision and the devices left before each was taken.
    run_keys: Vec<Key>,
    budget_before: Vec<u32>,
    budget_after: u32,
    pool: Option<FreePool>,
    next_seq: u64,
    next_rank: u64,
    last_now: f64,
    dirty: bool,
}

impl TiresiasQueues {
    fn insert_key(&mut self, key: Key) {
        self.all.insert(key);
        self.by_want.entry(key.2).or_default().insert(key);
    }

    fn remove_key(&mut self, key: &Key) {
        self.all.remove(key);
        if let Some(set) = self.by_want.get_mut(&key.2) {
            set.remove(key);
            if set.is_empty() {
                self.by_want.remove(&key.2);
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

    /// Devices the last walk had left when it reached `key`'s place.
    fn budget_at(&self, key: &Key) -> u32 {
        let p = self.run_keys.partition_point(|k| k < key);
        self.budget_before
            .get(p)
            .copied()
            .unwrap_or(self.budget_after)
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
            self.remove_key(&e.key);
            if let (Some(a), Some(pool)) = (&e.alloc, &mut self.pool) {
                pool.give_back(a);
            }
            self.running.retain(|r| r.id != id);
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
        // Enrol new jobs at the back of the high queue, in arrival order. One that
        // finds fewer devices left at its place than it wants changes nothing.
        for (id, req) in std::mem::take(&mut self.pending) {
            let want = req.clamp(1, cap);
            let key = (false, self.next_seq, want, id);
            self.next_seq += 1;
            self.jobs.insert(
                id,
                Entry {
                    key,
                    rank: self.next_rank,
                    executed_s: 0.0,
                    alloc: None,
                },
            );
            self.next_rank += 1;
            self.insert_key(key);
            if self.pool.is_none() || want <= self.budget_at(&key) {
                self.dirty = true;
            }
        }
        // Account running time; demote, in arrival order.
        let mut demoted: Vec<(u64, JobId)> = Vec::new();
        let elapsed = now - self.last_now;
        for r in &mut self.running {
            r.executed_s += elapsed;
            let gpu_s = r.executed_s * r.want as f64;
            if !r.low && gpu_s >= QUEUE_THRESHOLD_GPU_S {
                r.low = true;
                demoted.push((r.rank, r.id));
            }
        }
        self.last_now = now;
        demoted.sort_unstable();
        for (_, id) in demoted {
            let old = self.jobs[&id].key;
            self.remove_key(&old);
            let key = (true, self.next_seq, old.2, id);
            self.next_seq += 1;
            self.jobs.get_mut(&id).expect("enrolled").key = key;
            self.insert_key(key);
            self.dirty = true;
        }
        if !self.dirty {
            return;
        }
        self.dirty = false;
        // Walk the queues: in order while jobs fit, then jump to the next that fits.
        let mut budget = cap;
        self.run_keys.clear();
        self.budget_before.clear();
        let mut blocked: Option<Key> = None;
        for key in &self.all {
            if budget == 0 {
                break;
            }
            if key.2 <= budget {
                self.run_keys.push(*key);
                self.budget_before.push(budget);
                budget -= key.2;
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
                self.run_keys.push(key);
                self.budget_before.push(budget);
                budget -= key.2;
                after = key;
            }
        }
        self.budget_after = budget;
        // Jobs that keep running keep their devices; the others are preempted first.
        let pool = self.pool.get_or_insert_with(|| FreePool::new(cluster));
        let mut ids: Vec<JobId> = self.run_keys.iter().map(|k| k.3).collect();
        ids.sort_unstable();
        let mut executed: Vec<(JobId, f64)> = Vec::with_capacity(self.running.len());
        for r in &self.running {
            if ids.binary_search(&r.id).is_ok() {
                executed.push((r.id, r.executed_s));
            } else {
                let e = self.jobs.get_mut(&r.id).expect("enrolled");
                e.executed_s = r.executed_s;
                if let Some(a) = e.alloc.take() {
                    pool.give_back(&a);
                }
                changes.push((r.id, Allocation::empty()));
            }
        }
        executed.sort_unstable_by_key(|e| e.0);
        self.running.clear();
        for key in &self.run_keys {
            let id = key.3;
            let e = self.jobs.get_mut(&id).expect("enrolled");
            if e.alloc.is_none() {
                if let Some(a) = pool.take_most_free(key.2) {
                    e.alloc = Some(a.clone());
                    changes.push((id, a));
                }
            }
            self.running.push(Run {
                id,
                want: key.2,
                rank: e.rank,
                low: key.0,
                executed_s: executed
                    .binary_search_by_key(&id, |e| e.0)
                    .map_or(e.executed_s, |k| executed[k].1),
            });
        }
    }
}
