//! Tiresias, discretised two-dimensional least-attained-service (2D-LAS), as in
//! Pollux's simulator: two priority queues; a job starts in the high queue and is
//! demoted once its attained service (running time × requested devices) passes
//! 16 GPU-hours. Within a queue, jobs keep the order they entered it. Jobs are
//! gang-scheduled with exactly the devices they asked for; each round the queues
//! are walked in order and a job runs if its request still fits, so a
//! higher-priority arrival preempts lower-priority jobs. Starvation handling is
//! off, as in the Pollux artifact's configuration.

use crate::place::FreePool;
use crate::{ClusterView, Policy};
use pacer_model::{Allocation, JobId};
use std::collections::HashMap;

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
                // Budgeted devices are free, but maybe not of the job's device types.
                match pool.take_most_free_for(&view.jobs[i], want) {
                    Some(a) => out[i] = a,
                    None => run[i] = false,
                }
            }
        }
        for (i, j) in view.jobs.iter().enumerate() {
            self.state.get_mut(&j.id).expect("enrolled").running = run[i];
        }
        out
    }
}
