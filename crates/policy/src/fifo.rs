//! First in, first out: jobs run in arrival order with exactly the devices they
//! asked for (capped at the cluster size), never preempted. Strict: a job that
//! does not fit blocks the ones behind it (no backfilling), the textbook baseline.

use crate::place::FreePool;
use crate::{ClusterView, Policy};
use pacer_model::Allocation;

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
}
