//! Placement helpers shared by the policies: a pool of free devices that hands
//! out devices from the node with the most free ones first (consolidating a job
//! on as few nodes as possible), in O(log nodes) per node touched.
//!
//! A job runs only on the device types it has measurements for
//! ([`JobView::can_use`]); the `*_for` methods of [`FreePool`] take devices of
//! those types only (drivers reject an allocation on any other type).

use crate::JobView;
use pacer_model::{Allocation, ClusterSpec, DeviceTypeId, NodeId};
use std::collections::BTreeSet;

/// Nodes bucketed by free count: `buckets[k]` = nodes with exactly k free devices.
#[derive(Debug, Clone, Default)]
struct Buckets {
    buckets: Vec<BTreeSet<u32>>,
    total: u64,
}

/// `buckets[k]` = the nodes (indices, ascending in `free`) with exactly k free devices,
/// and the free total. Each set is built in one pass from its sorted indices rather
/// than by one insert per node: inserts (O(log n) each, with node splits) were ~80 %
/// of a Pollux-style round on 100,000 nodes, which rebuilds the pool every round.
fn bucketed<'a>(
    max: usize,
    free: impl Iterator<Item = (usize, &'a u32)>,
) -> (Vec<BTreeSet<u32>>, u64) {
    let mut lists: Vec<Vec<u32>> = vec![Vec::new(); max + 1];
    let mut total = 0u64;
    for (i, &f) in free {
        lists[f as usize].push(i as u32);
        total += f as u64;
    }
    // Collecting sorted input bulk-builds the tree in linear time.
    let buckets = lists.into_iter().map(BTreeSet::from_iter).collect();
    (buckets, total)
}

impl Buckets {
    fn from_free<'a>(max: usize, free: impl Iterator<Item = (usize, &'a u32)>) -> Self {
        let (buckets, total) = bucketed(max, free);
        Buckets { buckets, total }
    }

    fn mv(&mut self, node: u32, old: u32, new: u32) {
        self.buckets[old as usize].remove(&node);
        if new as usize >= self.buckets.len() {
            self.buckets.resize(new as usize + 1, BTreeSet::new());
        }
        self.buckets[new as usize].insert(node);
        self.total = self.total + new as u64 - old as u64;
    }

    /// Lowest-index node with exactly `k` free devices.
    fn first(&self, k: usize) -> Option<u32> {
        self.buckets.get(k)?.first().copied()
    }
}

/// Free devices per node, bucketed by free count.
#[derive(Debug, Clone)]
pub struct FreePool {
    free: Vec<u32>,
    /// `buckets[k]` = nodes with exactly k free devices.
    buckets: Vec<BTreeSet<u32>>,
    total: u64,
    /// Device type of each node and the same buckets per type, kept only when the
    /// pool spans several types (a single-type pool needs neither).
    node_type: Vec<u16>,
    typed: Vec<Buckets>,
}

impl FreePool {
    /// All devices of `cluster` free.
    pub fn new(cluster: &ClusterSpec) -> Self {
        let free: Vec<u32> = cluster.nodes.iter().map(|n| n.gpus).collect();
        let mut pool = Self::from_free(free);
        if cluster.device_types.len() > 1 {
            let max = pool.buckets.len() - 1;
            pool.node_type = cluster.nodes.iter().map(|n| n.device_type.0).collect();
            pool.typed = (0..cluster.device_types.len())
                .map(|t| {
                    Buckets::from_free(
                        max,
                        pool.free
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| pool.node_type[*i] as usize == t),
                    )
                })
                .collect();
        }
        pool
    }

    /// A pool of one device type with `free` devices per node.
    pub fn from_free(free: Vec<u32>) -> Self {
        let max = free.iter().copied().max().unwrap_or(0) as usize;
        let (buckets, total) = bucketed(max, free.iter().enumerate());
        FreePool {
            free,
            buckets,
            total,
            node_type: Vec::new(),
            typed: Vec::new(),
        }
    }

    /// The device types `job` can run on, when that excludes some type of the pool
    /// (`None`: every device of the pool will do).
    fn restriction(&self, job: &JobView) -> Option<Vec<bool>> {
        let usable: Vec<bool> = (0..self.typed.len())
            .map(|t| job.can_use(DeviceTypeId(t as u16)))
            .collect();
        usable.contains(&false).then_some(usable)
    }

    /// Free devices of the types `job` can run on.
    pub fn total_free_for(&self, job: &JobView) -> u64 {
        match self.restriction(job) {
            None => self.total,
            Some(u) => self
                .typed
                .iter()
                .zip(&u)
                .filter(|(_, &ok)| ok)
                .map(|(b, _)| b.total)
                .sum(),
        }
    }

    /// Lowest-index node, among the types marked in `usable`, with exactly `k` free.
    fn first_of(&self, usable: &[bool], k: usize) -> Option<u32> {
        self.typed
            .iter()
            .zip(usable)
            .filter(|(_, &ok)| ok)
            .filter_map(|(b, _)| b.first(k))
            .min()
    }

    /// [`FreePool::take_most_free`] on the device types `job` can run on only, and on
    /// one type unless the job runs equally fast on all of them
    /// ([`mixes_types_freely`]): a job spread over two types runs at the slower
    /// one's speed. The type is the fastest for the job among those with `count`
    /// free devices (lowest index on ties).
    pub fn take_most_free_for(&mut self, job: &JobView, count: u32) -> Option<Allocation> {
        if self.typed.len() > 1 && !mixes_types_freely(job) {
            let types = self.typed.len();
            let best = (0..types)
                .map(|t| DeviceTypeId(t as u16))
                .filter(|&t| job.can_use(t) && self.typed[t.0 as usize].total >= count as u64)
                .map(|t| (t, job.rate(t, count, true)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
            let mut one = vec![false; types];
            one[best.0 .0 as usize] = true;
            return self.take_most_free_among(&one, count);
        }
        let Some(usable) = self.restriction(job) else {
            return self.take_most_free(count);
        };
        self.take_most_free_among(&usable, count)
    }

    /// Most devices [`FreePool::take_most_free_for`] could give `job` now: the free
    /// devices of its types, or of its best-provided type when it is placed on one.
    pub fn most_for(&self, job: &JobView) -> u64 {
        if self.typed.len() > 1 && !mixes_types_freely(job) {
            return (0..self.typed.len())
                .filter(|&t| job.can_use(DeviceTypeId(t as u16)))
                .map(|t| self.typed[t].total)
                .max()
                .unwrap_or(0);
        }
        self.total_free_for(job)
    }

    /// [`FreePool::take_most_free`] on the device types marked in `usable`.
    pub(crate) fn take_most_free_among(
        &mut self,
        usable: &[bool],
        count: u32,
    ) -> Option<Allocation> {
        let free: u64 = self
            .typed
            .iter()
            .zip(usable)
            .filter(|(_, &ok)| ok)
            .map(|(b, _)| b.total)
            .sum();
        if (count as u64) > free {
            return None;
        }
        let mut left = count;
        let mut pairs = Vec::new();
        while left > 0 {
            let (k, node) = (1..self.buckets.len())
                .rev()
                .find_map(|k| Some((k, self.first_of(usable, k)?)))?;
            let take = left.min(k as u32);
            self.set(node, k as u32 - take);
            pairs.push((NodeId(node), take));
            left -= take;
        }
        Some(Allocation::from_pairs(pairs))
    }

    /// [`FreePool::take_best_fit_one_node`] on the device types `job` can run on only.
    pub fn take_best_fit_one_node_for(&mut self, job: &JobView, count: u32) -> Option<Allocation> {
        let Some(usable) = self.restriction(job) else {
            return self.take_best_fit_one_node(count);
        };
        let (k, node) = (count as usize..self.buckets.len())
            .find_map(|k| Some((k, self.first_of(&usable, k)?)))?;
        self.set(node, k as u32 - count);
        Some(Allocation::from_pairs([(NodeId(node), count)]))
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
        if let Some(&t) = self.node_type.get(node as usize) {
            self.typed[t as usize].mv(node, old, new);
        }
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

/// Whether `job` runs at the same speed on every device type it can use (no speed
/// table, or the same curve on each): spreading it over several types costs nothing,
/// so placement may mix them — unless the job must stay on one type
/// ([`JobView::one_type`]).
pub fn mixes_types_freely(job: &JobView) -> bool {
    !job.one_type
        && job.speed.as_ref().is_none_or(|s| {
            let mut used = s.per_type.iter().filter(|c| !c.points.is_empty());
            let first = used.next();
            used.all(|c| Some(c) == first)
        })
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

    /// A job placed by a type-blind pool landed on device types it has no
    /// measurements for (and ran there at another type's speed).
    #[test]
    fn jobs_get_devices_of_their_types_only() {
        use crate::{SpeedCurve, SpeedTable};
        use pacer_model::JobId;
        use std::sync::Arc;
        // Nodes 0-1: v100 (4 each), nodes 2-4: k80 (2 each).
        let c = ClusterSpec::parse("2x4:v100,3x2:k80", "t").unwrap();
        let mut k80_only = crate::JobView::basic(JobId(0), 0.0, 4);
        k80_only.speed = Some(Arc::new(SpeedTable {
            per_type: vec![SpeedCurve::default(), SpeedCurve::single(4, 1.0, 1.0)],
        }));
        let any = crate::JobView::basic(JobId(1), 0.0, 4);
        let types = |a: &Allocation| -> Vec<u16> {
            a.slots()
                .iter()
                .map(|s| c.nodes[s.0 .0 as usize].device_type.0)
                .collect()
        };
        let mut p = FreePool::new(&c);
        assert_eq!(p.total_free_for(&k80_only), 6);
        assert_eq!(p.total_free_for(&any), 14);
        let a = p.take_most_free_for(&k80_only, 3).unwrap();
        assert_eq!((a.replicas(), types(&a)), (3, vec![1, 1]));
        assert!(p.take_most_free_for(&k80_only, 4).is_none());
        assert_eq!(p.total_free(), 11, "a refused take takes nothing");
        let b = p.take_best_fit_one_node_for(&k80_only, 1).unwrap();
        assert_eq!(types(&b), vec![1]);
        assert!(p.take_best_fit_one_node_for(&k80_only, 3).is_none());
        // A job that can use every type still gets the node with the most free.
        let d = p.take_most_free_for(&any, 4).unwrap();
        assert_eq!(d.placement(), vec![4]);
        assert_eq!(types(&d), vec![0]);
        p.give_back(&a);
        assert_eq!(p.total_free_for(&k80_only), 5);
        let e = p.take_most_free_for(&k80_only, 4).unwrap();
        assert_eq!((e.placement(), types(&e)), (vec![2, 2], vec![1, 1]));
    }

    /// FIFO and the others placed a typed job over two device types, where it ran at
    /// the slower one's speed.
    #[test]
    fn typed_jobs_get_one_device_type() {
        use crate::{SpeedCurve, SpeedTable};
        use pacer_model::JobId;
        use std::sync::Arc;
        // Nodes 0-1: v100 (4 each), nodes 2-4: k80 (2 each).
        let c = ClusterSpec::parse("2x4:v100,3x2:k80", "t").unwrap();
        let typed = |v100: f64, k80: f64| {
            let mut j = crate::JobView::basic(JobId(0), 0.0, 6);
            j.speed = Some(Arc::new(SpeedTable {
                per_type: vec![
                    SpeedCurve::single(6, v100, 1.0),
                    SpeedCurve::single(6, k80, 1.0),
                ],
            }));
            j
        };
        let fast_v100 = typed(4.0, 1.0);
        assert!(!mixes_types_freely(&fast_v100));
        assert!(mixes_types_freely(&typed(2.0, 2.0)));
        assert!(mixes_types_freely(&crate::JobView::basic(JobId(1), 0.0, 6)));
        let ty = |a: &Allocation| -> Vec<u16> {
            a.slots()
                .iter()
                .map(|s| c.nodes[s.0 .0 as usize].device_type.0)
                .collect()
        };
        let mut p = FreePool::new(&c);
        // The fastest type with room: V100.
        let a = p.take_most_free_for(&fast_v100, 6).unwrap();
        assert_eq!((a.replicas(), ty(&a)), (6, vec![0, 0]));
        // 2 V100s and 6 K80s left: 6 devices only of the K80s, never 2 + 4.
        let b = p.take_most_free_for(&fast_v100, 6).unwrap();
        assert_eq!((b.replicas(), ty(&b)), (6, vec![1, 1, 1]));
        assert_eq!(p.most_for(&fast_v100), 2);
        assert!(p.take_most_free_for(&fast_v100, 2).is_some());
        assert_eq!(p.most_for(&fast_v100), 0);
        assert!(p.take_most_free_for(&fast_v100, 1).is_none());
        // A job as fast on both may still be spread over them.
        let mut q = FreePool::new(&c);
        q.take_most_free(6).unwrap();
        let any = crate::JobView::basic(JobId(2), 0.0, 8);
        let m = q.take_most_free_for(&any, 8).unwrap();
        assert_eq!(m.replicas(), 8);
        assert!(ty(&m).contains(&0) && ty(&m).contains(&1));
    }
}
