//! Which devices a job holds.

use crate::NodeId;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// The pairs of an allocation: one node's inline (most jobs hold one node), so that
/// an allocation is 24 bytes with no heap block to allocate, free or chase.
type Slots = SmallVec<[(NodeId, u32); 1]>;

/// Devices held by one job: `(node, count)` pairs sorted by node, no zero counts.
#[derive(Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Allocation {
    slots: Slots,
}

/// A copy of the pairs (they are `Copy`): `SmallVec`'s own `Clone` pushes them one
/// by one through an iterator, and views and placements clone an allocation per job
/// every round.
impl Clone for Allocation {
    #[inline]
    fn clone(&self) -> Self {
        Allocation {
            slots: Slots::from_slice(&self.slots),
        }
    }

    #[inline]
    fn clone_from(&mut self, source: &Self) {
        self.slots.clear();
        self.slots.extend_from_slice(&source.slots);
    }
}

impl Allocation {
    pub fn empty() -> Self {
        Allocation {
            slots: Slots::new(),
        }
    }

    /// Builds from arbitrary `(node, count)` pairs: merges duplicates, drops zeros, sorts.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (NodeId, u32)>) -> Self {
        let mut slots: Slots = pairs.into_iter().filter(|p| p.1 > 0).collect();
        slots.sort_unstable_by_key(|p| p.0);
        slots.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        Allocation { slots }
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline]
    pub fn slots(&self) -> &[(NodeId, u32)] {
        &self.slots
    }

    /// Number of devices.
    #[inline]
    pub fn replicas(&self) -> u32 {
        self.slots.iter().map(|s| s.1).sum()
    }

    /// Number of distinct nodes.
    pub fn nodes(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Replicas per node in node order, e.g. `[4, 2]`: the *placement*.
    pub fn placement(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.1).collect()
    }

    /// Adds `count` devices on `node`.
    pub fn add(&mut self, node: NodeId, count: u32) {
        if count == 0 {
            return;
        }
        match self.slots.binary_search_by_key(&node, |s| s.0) {
            Ok(i) => self.slots[i].1 += count,
            Err(i) => self.slots.insert(i, (node, count)),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_allocation_is_three_words_and_one_node_needs_no_heap() {
        assert_eq!(std::mem::size_of::<Allocation>(), 24);
        let a = Allocation::from_pairs([(NodeId(4), 2)]);
        assert!(!a.slots.spilled());
        let b = Allocation::from_pairs([(NodeId(4), 2), (NodeId(1), 1)]);
        assert_eq!(b.slots(), &[(NodeId(1), 1), (NodeId(4), 2)]);
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Allocation>(&json).unwrap(), b);
    }

    use super::*;

    #[test]
    fn merges_and_sorts() {
        let a = Allocation::from_pairs([
            (NodeId(3), 2),
            (NodeId(1), 1),
            (NodeId(3), 1),
            (NodeId(2), 0),
        ]);
        assert_eq!(a.slots(), &[(NodeId(1), 1), (NodeId(3), 3)]);
        assert_eq!(a.replicas(), 4);
        assert_eq!(a.nodes(), 2);
        assert_eq!(a.placement(), vec![1, 3]);
    }

    #[test]
    fn clones_copy_every_pair_inline_or_spilled() {
        let one = Allocation::from_pairs([(NodeId(4), 2)]);
        let three = Allocation::from_pairs([(NodeId(3), 2), (NodeId(1), 1), (NodeId(7), 4)]);
        for a in [Allocation::empty(), one.clone(), three.clone()] {
            let c = a.clone();
            assert_eq!(c, a);
            assert_eq!(c.slots.spilled(), a.slots.spilled());
            for from in [Allocation::empty(), one.clone(), three.clone()] {
                let mut d = from;
                d.clone_from(&a);
                assert_eq!(d, a);
            }
        }
    }
}
