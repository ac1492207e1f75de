//! A what-if on the measured tables (`pacer simulate --shared-fabric TYPE`, issue 26;
//! docs/mixed-types.md, "What decides: the slowest type's sync"): the node types share
//! one fabric, so every type's cross-node synchronisation costs what `TYPE`'s measured
//! tables say it costs.
//!
//! Sia's tables were measured on each type's own network. A table row is a step time
//! and the synchronisation time within it (`compute = step − sync`, as the simulator
//! reads them). For every type other than `TYPE`, each row on more than one node gets
//! `TYPE`'s sync of the same application at the same placement and local batch (from
//! `TYPE`'s tables: the exact placement where measured, else their interpolation over
//! nodes and replicas, clamped at `TYPE`'s largest measured node count), and its step
//! becomes `compute + that sync`. Rows on one node keep their own (intra-node) sync.
//! Everything downstream follows from the changed tables: one-type jobs and mixed
//! allocations run on them, each type's fitted model (what policies see) is fitted to
//! them, online fits learn from them. So the what-if changes a one-type job
//! across nodes exactly as it changes a mix, and a comparison of policies under it is
//! like for like.

use super::tables::{build_tables, table_step_time};
use super::TypeProfile;

/// Rewrites `types` (one application's tables, every type) so that every cross-node
/// row syncs as `fabric`'s tables do. Errors when `fabric` is not among the types.
pub fn share_fabric(types: &mut [TypeProfile], fabric: &str) -> Result<(), String> {
    let Some(f) = types.iter().position(|t| t.device_type == fabric) else {
        let have: Vec<&str> = types.iter().map(|t| t.device_type.as_str()).collect();
        return Err(format!(
            "no tables for device type `{fabric}` (it has {})",
            have.join(", ")
        ));
    };
    let (exact, max_exact_nodes, levels) =
        build_tables(&types[f].placements, &types[f].scalability);
    let sync = |placement: &[u32], bsz: f64| {
        table_step_time(&exact, max_exact_nodes, &levels, placement, bsz).1
    };
    for (i, t) in types.iter_mut().enumerate() {
        if i == f {
            continue;
        }
        for r in t.placements.iter_mut().filter(|r| r.num_nodes() > 1) {
            let s = sync(&r.placement, r.local_bsz);
            r.step_time_s = (r.step_time_s - r.sync_time_s).max(0.0) + s;
            r.sync_time_s = s;
        }
        for r in t.scalability.iter_mut().filter(|r| r.num_nodes > 1) {
            let s = sync(&spread(r.num_nodes, r.num_replicas), r.local_bsz);
            r.step_time_s = (r.step_time_s - r.sync_time_s).max(0.0) + s;
            r.sync_time_s = s;
        }
    }
    Ok(())
}

/// `replicas` spread as evenly as possible over `nodes` nodes (a scalability row's
/// shape), the larger counts first.
fn spread(nodes: u32, replicas: u32) -> Vec<u32> {
    let n = nodes.max(1);
    (0..n)
        .map(|i| replicas / n + u32::from(i < replicas % n))
        .filter(|&x| x > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_model::profile::{PlacementRow, ScalabilityRow};

    fn row(placement: Vec<u32>, bsz: f64, step: f64, sync: f64) -> PlacementRow {
        PlacementRow {
            placement,
            local_bsz: bsz,
            step_time_s: step,
            sync_time_s: sync,
        }
    }

    fn ty(name: &str, cross_sync: f64) -> TypeProfile {
        TypeProfile {
            device_type: name.into(),
            placements: vec![
                row(vec![1], 8.0, 0.10, 0.0),
                row(vec![2], 8.0, 0.12, 0.02),
                row(vec![1, 1], 8.0, 0.10 + cross_sync, cross_sync),
                row(vec![2, 2], 8.0, 0.11 + cross_sync, cross_sync),
            ],
            scalability: vec![ScalabilityRow {
                num_nodes: 2,
                num_replicas: 4,
                local_bsz: 16.0,
                step_time_s: 0.2 + cross_sync,
                sync_time_s: cross_sync,
            }],
        }
    }

    #[test]
    fn cross_node_rows_take_the_fabric_s_sync_and_keep_their_compute() {
        let mut types = vec![ty("fast", 0.01), ty("slow", 0.5)];
        let before = types.clone();
        share_fabric(&mut types, "fast").unwrap();
        assert_eq!(
            types[0].placements, before[0].placements,
            "the fabric's own"
        );
        let slow = &types[1];
        // One node: its own sync.
        assert_eq!(slow.placements[..2], before[1].placements[..2]);
        for (r, b) in slow.placements[2..].iter().zip(&before[1].placements[2..]) {
            assert!((r.sync_time_s - 0.01).abs() < 1e-12, "{r:?}");
            let compute = b.step_time_s - b.sync_time_s;
            assert!((r.step_time_s - (compute + 0.01)).abs() < 1e-12, "{r:?}");
        }
        let s = &slow.scalability[0];
        assert!((s.sync_time_s - 0.01).abs() < 1e-12 && (s.step_time_s - 0.21).abs() < 1e-12);
    }

    #[test]
    fn an_unknown_fabric_is_refused_with_the_types_there_are() {
        let mut types = vec![ty("fast", 0.01), ty("slow", 0.5)];
        let e = share_fabric(&mut types, "nvlink").unwrap_err();
        assert_eq!(e, "no tables for device type `nvlink` (it has fast, slow)");
    }

    #[test]
    fn a_scalability_row_is_spread_evenly() {
        assert_eq!(spread(3, 8), vec![3, 3, 2]);
        assert_eq!(spread(4, 2), vec![1, 1]);
    }
}
