//! Property tests of the heterogeneity- and quality-aware policies on random
//! clusters and job views: allocations always fit capacity (per node, one device
//! type per job for Gavel and Themis), and SLAQ's minimum share serves every job.

use pacer_model::{Allocation, ClusterSpec, JobId};
use pacer_policy::{
    check_capacity, ClusterView, JobView, Policy, QualityView, SpeedCurve, SpeedTable,
};
use pacer_predict::loss_curve::{CurveForm, LossCurve};
use proptest::prelude::*;
use std::sync::Arc;

fn cluster(types: usize, nodes: u32, per_node: u32) -> ClusterSpec {
    let names = ["v100", "p100", "k80"];
    let spec: Vec<String> = (0..types)
        .map(|t| format!("{nodes}x{per_node}:{}", names[t]))
        .collect();
    ClusterSpec::parse(&spec.join(","), "test").unwrap()
}

/// Random job views from a seed: sizes 1–8, speeds per type (some types
/// missing), work left, and a fitted loss curve part-way through.
fn jobs(n: usize, types: usize, seed: u64) -> Vec<JobView> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let req = [1u32, 1, 2, 4, 8][(next() * 5.0) as usize % 5];
            let mut j = JobView::basic(JobId(i as u32), -next() * 3600.0, req);
            j.max_replicas = req * 2;
            j.attained_gpu_s = next() * 1000.0;
            j.work_done = next() * 100.0;
            j.work_left = 1.0 + next() * 1000.0;
            j.speed = Some(Arc::new(SpeedTable {
                per_type: (0..types)
                    .map(|t| {
                        if t > 0 && next() < 0.2 {
                            SpeedCurve::default()
                        } else {
                            SpeedCurve {
                                points: vec![
                                    (1, 0.5 + next()),
                                    (req.max(2), (1.0 + next()) * req as f64),
                                ],
                                spread_factor: 0.5 + 0.5 * next(),
                            }
                        }
                    })
                    .collect(),
            }));
            let curve = LossCurve {
                form: if next() < 0.5 {
                    CurveForm::Exponential
                } else {
                    CurveForm::InverseQuadratic
                },
                params: [0.5 + next(), 0.5 + 3.0 * next(), 0.5 + next(), 0.1 * next()],
                k_scale: 500.0,
                loss_scale: 1.0 + 5.0 * next(),
            };
            let k = 1.0 + next() * 1000.0;
            j.quality = Some(QualityView {
                iteration: k,
                loss: curve.value(k),
                first_loss: curve.value(0.0),
                max_delta_per_iter: (curve.value(0.0) - curve.value(1.0)).max(1e-9),
                curve: (next() < 0.8).then_some(curve),
            });
            j
        })
        .collect()
}

fn one_type_each(c: &ClusterSpec, out: &[Allocation]) -> bool {
    out.iter().all(|a| {
        let mut t = a
            .slots()
            .iter()
            .map(|s| c.nodes[s.0 .0 as usize].device_type);
        match t.next() {
            Some(first) => t.all(|x| x == first),
            None => true,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn allocations_fit_capacity_over_rounds(
        seed in 0u64..10_000, n in 1usize..40, types in 1usize..4, nodes in 1u32..5, per_node in 1u32..9
    ) {
        let c = cluster(types, nodes, per_node);
        for name in ["gavel-maxmin", "gavel-ftf", "themis", "themis-f0", "themis-f0.5", "slaq", "fair"] {
            let mut p = pacer_policy::by_name(name).unwrap();
            let mut js = jobs(n, types, seed);
            for round in 0..4 {
                let view = ClusterView { now_s: 400.0 * round as f64, cluster: &c, jobs: &js };
                let out = p.allocate(&view);
                prop_assert_eq!(out.len(), js.len());
                prop_assert!(check_capacity(&c, &out).is_ok(), "{}: {:?}", name, check_capacity(&c, &out));
                if name != "slaq" && name != "fair" {
                    prop_assert!(one_type_each(&c, &out), "{} mixed device types", name);
                }
                for (j, a) in js.iter_mut().zip(&out) {
                    j.current = a.clone();
                    j.attained_gpu_s += 400.0 * a.replicas() as f64;
                }
            }
        }
    }

    #[test]
    fn slaq_minimum_share_serves_every_job(seed in 0u64..10_000, n in 1usize..60, workers in 1u32..24) {
        let c = ClusterSpec::parse(&format!("1x{workers}:cpu"), "t").unwrap();
        let mut js = jobs(n, 1, seed);
        for j in &mut js {
            j.attained_gpu_s = 0.0;
        }
        let mut p = pacer_policy::slaq::Slaq::default();
        let mut served = vec![false; n];
        // Enough rounds for everyone to come up by least attained service.
        let rounds = n.div_ceil(workers as usize) + 1;
        for r in 0..rounds {
            let view = ClusterView { now_s: 60.0 * r as f64, cluster: &c, jobs: &js };
            let out = p.allocate(&view);
            prop_assert!(check_capacity(&c, &out).is_ok());
            if workers as usize >= n {
                prop_assert!(out.iter().all(|a| a.replicas() >= 1), "minimum share: {:?}", out);
            }
            for (k, (j, a)) in js.iter_mut().zip(&out).enumerate() {
                served[k] |= !a.is_empty();
                j.current = a.clone();
                j.attained_gpu_s += 60.0 * a.replicas() as f64;
            }
        }
        prop_assert!(served.iter().all(|&s| s), "starved: {:?}", served);
    }
}

#[test]
fn policies_accept_views_without_models() {
    let c = cluster(2, 2, 4);
    let js: Vec<JobView> = (0..5).map(|i| JobView::basic(JobId(i), 0.0, 2)).collect();
    for name in pacer_policy::POLICY_NAMES {
        let mut p: Box<dyn Policy> = pacer_policy::by_name(name).unwrap();
        if p.adaptive_batch() {
            continue; // Pollux-style policies need goodput models.
        }
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &js,
        };
        let out = p.allocate(&view);
        assert!(check_capacity(&c, &out).is_ok(), "{name}");
        assert!(
            out.iter().any(|a| !a.is_empty()),
            "{name} allocated nothing"
        );
    }
}
