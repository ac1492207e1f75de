//! Placement helpers shared by the policies: a pool of free devices that hands
//! out devices from the node with the most free ones first (consolidating a job
//! on as few nodes as possible), in O(log nodes) per node touched.

use pacer_model::{Allocation, ClusterSpec, NodeId};
use std::collections::BTreeSet;

/// Free devices per node, bucketed by free count.
#[derive(Debug, Clone)]
pub struct FreePool {
    free: Vec<u32>,
    /// `buckets[k]` = nodes with exactly k free devices.
    buckets: Vec<BTreeSet<u32>>,
    total: u64,
}

impl FreePool {
    /// All devices of `cluster` free.
    pub fn new(cluster: &ClusterSpec) -> Self {
        let free: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
        Self::from_free(free)
    }

    pub fn from_free(free: Vec<u32>) -> Self {
        let max = free.iter().copied().max().unwrap_or(0) as usize;
        let mut buckets = vec![BTreeSet::new(); max + 1];
        for (i, &f) in free.iter().enumerate() {
            buckets[f as usize].insert(i as u32);
        }
        let total = free.iter().map(|&f| f as u64).sum();
        FreePool {
            free,
            buckets,
            total,
        }
    }

    pub fn total_free(&self) -> u64 {
        self.total
    }

    pub fn free_on(&self, node: NodeId) -> u32 {
        self.free[node.0 as usize]
    }

    fn set(&mut self, node: u32, new: u32) {
        let old = self.free[node as usize];
        self.buckets[old as usize].remove(&node);
        if new as usize >= self.buckets.len() {
            self.buckets.resize(new as usize + 1, BTreeSet::new());
        }
        self.buckets[new as usize].insert(node);
        self.free[node as usize] = new;
        self.total = self.total + new as u64 - old as u64;
    }

    /// Takes exactly `alloc`'s devices; false (and nothing taken) if they are not free.
    pub fn take_exact(&mut self, alloc: &Allocation) -> bool {
        if alloc
            .slots()
            .iter()
            .any(|&(n, c)| self.free.get(n.0 as usize).is_none_or(|&f| f < c))
        {
            return false;
        }
        for &(n, c) in alloc.slots() {
            let f = self.free[n.0 as usize];
            self.set(n.0, f - c);
        }
        true
    }

    /// Returns devices to the pool.
    pub fn give_back(&mut self, alloc: &Allocation) {
        for &(n, c) in alloc.slots() {
            let f = self.free[n.0 as usize];
            self.set(n.0, f + c);
        }
    }

    /// `count` devices, repeatedly from the node with the most free devices (lowest
    /// index on ties) — Tiresias' and Pollux's simulator's greedy placement.
    /// `None` (nothing taken) if fewer than `count` are free.
    pub fn take_most_free(&mut self, count: u32) -> Option<Allocation> {
        if (count as u64) > self.total {
            return None;
        }
        let mut left = count;
        let mut pairs = Vec::new();
        while left > 0 {
            let k = (1..self.buckets.len())
                .rev()
                .find(|&k| !self.buckets[k].is_empty())?;
            let node = *self.buckets[k].first().expect("non-empty bucket");
            let take = left.min(k as u32);
            self.set(node, k as u32 - take);
            pairs.push((NodeId(node), take));
            left -= take;
        }
        Some(Allocation::from_pairs(pairs))
    }

    /// `count` devices on a single node with the fewest free devices that still fit
    /// (best fit), if any.
    pub fn take_best_fit_one_node(&mut self, count: u32) -> Option<Allocation> {
        let k = (count as usize..self.buckets.len()).find(|&k| !self.buckets[k].is_empty())?;
        let node = *self.buckets[k].first().expect("non-empty bucket");
        self.set(node, k as u32 - count);
        Some(Allocation::from_pairs([(NodeId(node), count)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_free_consolidates_and_respects_capacity() {
        let c = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let mut p = FreePool::new(&c);
        let a = p.take_most_free(6).unwrap();
        assert_eq!(a.placement(), vec![4, 2]);
        let b = p.take_most_free(3).unwrap();
        assert_eq!(b.placement(), vec![3]);
        assert_eq!(p.total_free(), 7);
        assert!(p.take_most_free(8).is_none());
        assert_eq!(p.total_free(), 7);
        p.give_back(&a);
        assert_eq!(p.total_free(), 13);
        assert!(p.take_exact(&a));
        assert!(!p.take_exact(&a));
        let one = p.take_best_fit_one_node(2).unwrap();
        assert_eq!(one.replicas(), 2);
    }
}
