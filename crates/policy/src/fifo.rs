//! First in, first out: jobs run in arrival order with exactly the devices they
//! asked for (capped at the cluster size), never preempted. Strict: a job that
//! does not fit blocks the ones behind it (no backfilling), the textbook baseline.

use crate::place::FreePool;
use crate::{ClusterView, IdMap, IncrementalPolicy, JobView, Policy};
use pacer_model::{Allocation, ClusterSpec, JobId};
use std::collections::VecDeque;

#[derive(Debug, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let mut pool = FreePool::new(view.cluster);
        let mut out: Vec<Allocation> = view.jobs.iter().map(|_| Allocation::empty()).collect();
        for (i, j) in view.jobs.iter().enumerate() {
            if !j.current.is_empty() && pool.take_exact(&j.current) {
                out[i] = j.current.clone();
            }
        }
        let mut order: Vec<usize> = (0..view.jobs.len())
            .filter(|&i| out[i].is_empty())
            .collect();
        order.sort_by(|&a, &b| {
            view.jobs[a]
                .arrival_s
                .total_cmp(&view.jobs[b].arrival_s)
                .then(view.jobs[a].id.cmp(&view.jobs[b].id))
        });
        let cap = view.cluster.total_gpus();
        for i in order {
            let want = view.jobs[i].requested_replicas.clamp(1, cap);
            match pool.take_most_free_for(&view.jobs[i], want) {
                Some(a) => out[i] = a,
                None => break,
            }
        }
        out
    }

    fn incremental(&self) -> Option<Box<dyn IncrementalPolicy>> {
        Some(Box::new(FifoQueue::default()))
    }
}

/// FIFO driven by events: the waiting queue in arrival order and the free devices
/// persist between rounds, so a round walks only from the head of the queue to
/// the first job that does not fit (O(jobs started + 1), not O(queue)). Same
/// decisions as [`Fifo::allocate`]: running jobs are never preempted, so the
/// free pool is the cluster minus what they hold, and arrivals join the back.
#[derive(Debug, Default)]
pub struct FifoQueue {
    pool: Option<FreePool>,
    /// Waiting jobs, arrival order: (id, devices wanted, clamped at decision).
    waiting: VecDeque<(JobId, u32)>,
    /// What running jobs hold.
    holding: IdMap<Allocation>,
}

impl IncrementalPolicy for FifoQueue {
    fn uses_attained(&self) -> bool {
        false
    }

    fn admit(&mut self, job: &JobView) {
        self.waiting.push_back((job.id, job.requested_replicas));
    }

    fn finish(&mut self, id: JobId) {
        match self.holding.remove(&id) {
            Some(a) => {
                if let Some(pool) = &mut self.pool {
                    pool.give_back(&a);
                }
            }
            None => self.waiting.retain(|w| w.0 != id),
        }
    }

    fn decide(
        &mut self,
        _now_s: f64,
        cluster: &ClusterSpec,
        _attained: &[(JobId, f64)],
        changes: &mut Vec<(JobId, Allocation)>,
    ) {
        let pool = self.pool.get_or_insert_with(|| FreePool::new(cluster));
        let cap = cluster.total_gpus();
        while let Some(&(id, want)) = self.waiting.front() {
            match pool.take_most_free(want.clamp(1, cap)) {
                Some(a) => {
                    self.waiting.pop_front();
                    self.holding.insert(id, a.clone());
                    changes.push((id, a));
                }
                None => break,
            }
        }
    }
}
