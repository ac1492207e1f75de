//! Placing a round's device counts on nodes: the deadline policy's last step. Running jobs
//! keep their devices where their counts are unchanged; a one-type cluster of at most
//! [`SMALL_POOL`] nodes takes devices from a plain list of free devices per node;
//! anything else goes through a [`FreePool`].

use crate::place::FreePool;
use crate::ClusterView;
use pacer_model::Allocation;

pub(crate) fn place_counts(view: &ClusterView, counts: &[u32], types: &[usize]) -> Vec<Allocation> {
    if let Some(kept) = keep_all(view, counts) {
        return kept;
    }
    if view.cluster.device_types.len() <= 1 && view.cluster.nodes.len() <= SMALL_POOL {
        return place_small(view, counts);
    }
    let mut pool = FreePool::new(view.cluster);
    let mut out = vec![Allocation::empty(); view.jobs.len()];
    let mut rest = Vec::new();
    for (i, j) in view.jobs.iter().enumerate() {
        if counts[i] == 0 {
            continue;
        }
        if j.current.replicas() == counts[i] && pool.take_exact(&j.current) {
            out[i] = j.current.clone();
        } else {
            rest.push(i);
        }
    }
    largest_first(view, counts, &mut rest);
    let ntypes = view.cluster.device_types.len().max(1);
    for i in rest {
        let got = if ntypes == 1 {
            pool.take_most_free(counts[i])
        } else {
            let mut one = vec![false; ntypes];
            one[types[i].min(ntypes - 1)] = true;
            pool.take_most_free_among(&one, counts[i])
        };
        if let Some(a) = got {
            out[i] = a;
        }
    }
    out
}

/// ElasticFlow's placement ([`super::DeadlineConfig::ef_placement`]; its simulator
/// releases every job's devices at each event and places them all again, largest
/// first, each on the lowest-numbered free devices, `CLUSTER.elastic_placement`): no
/// job keeps its devices; the jobs, largest count first (ties by deadline, then id),
/// each take the next `count` devices of their type in node order, so that a layout
/// recurs whenever the sizes do. A job whose devices are not there gets none.
pub(crate) fn place_packed(view: &ClusterView, counts: &[u32], types: &[usize]) -> Vec<Allocation> {
    let nodes = &view.cluster.nodes;
    let mut order: Vec<usize> = (0..view.jobs.len()).filter(|&i| counts[i] > 0).collect();
    order.sort_by(|&a, &b| {
        let (ja, jb) = (&view.jobs[a], &view.jobs[b]);
        counts[b]
            .cmp(&counts[a])
            .then(
                ja.deadline_s
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&jb.deadline_s.unwrap_or(f64::INFINITY)),
            )
            .then(ja.id.cmp(&jb.id))
    });
    let one_type = view.cluster.device_types.len() <= 1;
    // Per device type: the node the next take starts on and the devices used there.
    let mut cursor: Vec<(usize, u32)> = vec![(0, 0); view.cluster.device_types.len().max(1)];
    let mut out = vec![Allocation::empty(); view.jobs.len()];
    for i in order {
        let ty = if one_type {
            0
        } else {
            types[i].min(cursor.len() - 1)
        };
        let of_type = |n: usize| one_type || usize::from(nodes[n].device_type.0) == ty;
        let (mut node, mut used) = cursor[ty];
        let mut left = counts[i];
        let mut pairs = Vec::new();
        while left > 0 && node < nodes.len() {
            if !of_type(node) || used >= nodes[node].gpus {
                node += 1;
                used = 0;
                continue;
            }
            let take = left.min(nodes[node].gpus - used);
            pairs.push((pacer_model::NodeId(node as u32), take));
            used += take;
            left -= take;
        }
        if left == 0 {
            cursor[ty] = (node, used);
            out[i] = Allocation::from_pairs(pairs);
        }
    }
    out
}

/// The jobs to place, largest count first (ties by id).
fn largest_first(view: &ClusterView, counts: &[u32], rest: &mut [usize]) {
    rest.sort_by(|&a, &b| {
        counts[b]
            .cmp(&counts[a])
            .then(view.jobs[a].id.cmp(&view.jobs[b].id))
    });
}

/// Nodes up to which [`place_small`] places a one-type cluster.
const SMALL_POOL: usize = 256;

/// [`place_counts`] on a cluster of one device type and at most [`SMALL_POOL`]
/// nodes, with the free devices as a plain list scanned for each take instead of a
/// [`FreePool`]'s buckets (built anew every round): the same takes — a job keeping
/// its size keeps its devices when they are all free, the others largest first
/// (ties by id) from the node with the most free devices, lowest index on ties — and
/// so the same allocations.
fn place_small(view: &ClusterView, counts: &[u32]) -> Vec<Allocation> {
    let mut free: Vec<u32> = view.cluster.nodes.iter().map(|n| n.gpus).collect();
    let mut out = vec![Allocation::empty(); view.jobs.len()];
    let mut rest = Vec::new();
    for (i, j) in view.jobs.iter().enumerate() {
        if counts[i] == 0 {
            continue;
        }
        let fits = j.current.replicas() == counts[i]
            && !j
                .current
                .slots()
                .iter()
                .any(|&(n, c)| free.get(n.0 as usize).is_none_or(|&f| f < c));
        if fits {
            for &(n, c) in j.current.slots() {
                free[n.0 as usize] -= c;
            }
            out[i] = j.current.clone();
        } else {
            rest.push(i);
        }
    }
    largest_first(view, counts, &mut rest);
    for i in rest {
        if let Some(a) = take_most_free(&mut free, counts[i]) {
            out[i] = a;
        }
    }
    out
}

/// [`FreePool::take_most_free`] on a plain list of free devices per node: `count`
/// devices, repeatedly from the node with the most free (lowest index on ties);
/// `None` when fewer are free.
fn take_most_free(free: &mut [u32], count: u32) -> Option<Allocation> {
    if u64::from(count) > free.iter().map(|&f| u64::from(f)).sum::<u64>() {
        return None;
    }
    let mut left = count;
    let mut pairs = Vec::new();
    while left > 0 {
        let mut best: Option<(usize, u32)> = None;
        for (n, &f) in free.iter().enumerate() {
            if f > 0 && best.is_none_or(|b| f > b.1) {
                best = Some((n, f));
            }
        }
        let (node, k) = best?;
        let take = left.min(k);
        free[node] = k - take;
        pairs.push((pacer_model::NodeId(node as u32), take));
        left -= take;
    }
    Some(Allocation::from_pairs(pairs))
}

/// [`place_counts`]'s answer when every job keeps its size: each keeps its devices
/// (they are free: the current allocations fit the nodes together), the others get
/// none. `None` when a size changes or the current allocations overlap.
fn keep_all(view: &ClusterView, counts: &[u32]) -> Option<Vec<Allocation>> {
    if view
        .jobs
        .iter()
        .zip(counts)
        .any(|(j, &c)| j.current.replicas() != c)
    {
        return None;
    }
    let mut used = vec![0u32; view.cluster.nodes.len()];
    for j in view.jobs {
        for &(node, c) in j.current.slots() {
            let u = used.get_mut(node.0 as usize)?;
            *u += c;
            if *u > view.cluster.nodes[node.0 as usize].gpus {
                return None;
            }
        }
    }
    Some(
        view.jobs
            .iter()
            .map(|j| {
                if j.current.replicas() == 0 {
                    Allocation::empty()
                } else {
                    j.current.clone()
                }
            })
            .collect(),
    )
}
