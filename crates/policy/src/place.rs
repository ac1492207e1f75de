//! Placement helpers shared by the policies: a pool of free devices that hands
//! out devices from the node with the most free ones first (consolidating a job
//! on as few nodes as possible), in O(log nodes) per node touched.

use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, NodeId};
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

    /// Free devices on the node with the most free devices.
    pub fn max_free_on_a_node(&self) -> u32 {
        (0..self.buckets.len())
            .rev()
            .find(|&k| !self.buckets[k].is_empty())
            .unwrap_or(0) as u32
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

/// One [`FreePool`] per device type, so a job can be given devices of a single
/// type (node indices stay global).
#[derive(Debug, Clone)]
pub struct TypedPools {
    pools: Vec<FreePool>,
    node_type: Vec<u16>,
    per_node: Vec<u32>,
}

impl TypedPools {
    /// All devices of `cluster` free.
    pub fn new(cluster: &ClusterSpec) -> Self {
        let types = cluster.device_types.len().max(1);
        let node_type: Vec<u16> = cluster.nodes.iter().map(|n| n.device_type.0).collect();
        let pools = (0..types)
            .map(|t| {
                FreePool::from_free(
                    cluster
                        .nodes
                        .iter()
                        .map(|n| {
                            if n.device_type.0 as usize == t {
                                n.gpus
                            } else {
                                0
                            }
                        })
                        .collect(),
                )
            })
            .collect();
        let per_node = (0..types)
            .map(|t| {
                cluster
                    .nodes
                    .iter()
                    .filter(|n| n.device_type.0 as usize == t)
                    .map(|n| n.gpus)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        TypedPools {
            pools,
            node_type,
            per_node,
        }
    }

    pub fn types(&self) -> usize {
        self.pools.len()
    }

    pub fn free(&self, ty: DeviceTypeId) -> u64 {
        self.pools[ty.0 as usize].total_free()
    }

    /// Free devices of each of the first `types` device types.
    pub fn free_by_type(&self, types: usize) -> Vec<u64> {
        (0..types)
            .map(|t| self.free(DeviceTypeId(t as u16)))
            .collect()
    }

    /// Most free devices on one node of type `ty`.
    pub fn max_free_on_a_node(&self, ty: DeviceTypeId) -> u32 {
        self.pools[ty.0 as usize].max_free_on_a_node()
    }

    /// Largest node of type `ty`.
    pub fn per_node(&self, ty: DeviceTypeId) -> u32 {
        self.per_node[ty.0 as usize]
    }

    /// The single device type of an allocation, if it has one.
    pub fn type_of(&self, alloc: &Allocation) -> Option<DeviceTypeId> {
        let first = self.node_type[alloc.slots().first()?.0 .0 as usize];
        alloc
            .slots()
            .iter()
            .all(|s| self.node_type[s.0 .0 as usize] == first)
            .then_some(DeviceTypeId(first))
    }

    /// Takes exactly `alloc`'s devices if they are free and of one type.
    pub fn take_exact(&mut self, alloc: &Allocation) -> bool {
        match self.type_of(alloc) {
            Some(t) => self.pools[t.0 as usize].take_exact(alloc),
            None => false,
        }
    }

    pub fn give_back(&mut self, alloc: &Allocation) {
        if let Some(t) = self.type_of(alloc) {
            self.pools[t.0 as usize].give_back(alloc);
        }
    }

    /// `count` devices of type `ty`: on one node (best fit) when a node can hold
    /// them, else from the nodes with the most free devices.
    pub fn take(&mut self, ty: DeviceTypeId, count: u32) -> Option<Allocation> {
        let pool = &mut self.pools[ty.0 as usize];
        if count == 0 || count as u64 > pool.total_free() {
            return None;
        }
        let one = if count <= self.per_node[ty.0 as usize] {
            pool.take_best_fit_one_node(count)
        } else {
            None
        };
        one.or_else(|| pool.take_most_free(count))
    }

    /// Whether `count` devices of type `ty` can be taken now on as few nodes as
    /// the type's node size allows (a consolidated bundle).
    pub fn can_consolidate(&self, ty: DeviceTypeId, count: u32) -> bool {
        let pool = &self.pools[ty.0 as usize];
        let per = self.per_node[ty.0 as usize].max(1);
        let nodes = count.div_ceil(per) as usize;
        let mut free: Vec<u32> = pool.free.clone();
        free.sort_unstable_by(|a, b| b.cmp(a));
        free.iter().take(nodes).map(|&f| f as u64).sum::<u64>() >= count as u64
    }

    /// `count` devices of type `ty` spread one per node (a deliberately
    /// unconsolidated bundle), if enough nodes have a free device.
    pub fn take_spread(&mut self, ty: DeviceTypeId, count: u32) -> Option<Allocation> {
        let pool = &mut self.pools[ty.0 as usize];
        let nodes: Vec<u32> = (0..pool.free.len() as u32)
            .filter(|&n| pool.free[n as usize] > 0)
            .take(count as usize)
            .collect();
        if (nodes.len() as u32) < count {
            return None;
        }
        let a = Allocation::from_pairs(nodes.into_iter().map(|n| (NodeId(n), 1)));
        pool.take_exact(&a).then_some(a)
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
