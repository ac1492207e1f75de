//! Work-conserving max-min fair share. Each round the devices are water-filled
//! over the active jobs up to what each asked for; a job never gets more than it
//! asked for, and devices left after every demand is met stay idle only if no
//! job wants them. When there are more jobs than devices, the single devices go
//! to the jobs with the least attained service (so everyone is served in turn).
//! A job whose share did not change keeps its exact devices (no restart).

use crate::place::FreePool;
use crate::{ClusterView, Policy};
use pacer_model::Allocation;

#[derive(Debug, Default)]
pub struct FairShare;

/// Integer max-min fair shares of `capacity` for `demands`, ties for the last
/// units broken by `priority` (lower first).
pub fn max_min_shares(capacity: u64, demands: &[u32], priority: &[f64]) -> Vec<u32> {
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
    open.sort_by(|&a, &b| priority[a].total_cmp(&priority[b]).then(a.cmp(&b)));
    for &i in open.iter().take(left as usize) {
        share[i] += 1;
    }
    share
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
