//! Property tests of the Sia-style policy on random heterogeneous clusters and jobs
//! with per-type goodput models: per-node (hence per-type) capacity is never
//! exceeded, every job runs on one device type, the same input gives the same
//! output, and the fast solver's choice fits and stays close to the exact one.

use pacer_model::{Allocation, ClusterSpec, JobId, NodeId};
use pacer_policy::sia::{place, solve_exact, solve_fast, Sia, SiaSolver};
use pacer_policy::{check_capacity, ClusterView, JobView, Policy};
use pacer_predict::goodput::{BatchLimits, GoodputFn, GradParams, PerfParams};
use proptest::prelude::*;

fn gfn(speed: f64, var: f64) -> GoodputFn {
    GoodputFn {
        perf: PerfParams {
            alpha_c: 0.02 / speed,
            beta_c: 0.002 / speed,
            alpha_n: 0.2,
            beta_n: 0.01,
            alpha_r: 0.05,
            beta_r: 0.005,
            gamma: 2.0,
        },
        grad: GradParams { sqr: 1.0, var },
        limits: BatchLimits {
            base_batch: 64.0,
            max_batch: 8192.0,
            min_atomic: 8.0,
            max_atomic: 256.0,
            accumulation: true,
        },
    }
}

fn cluster(shape: &[(u32, u32)]) -> ClusterSpec {
    let names = ["aws", "dgx", "rtx"];
    let spec: Vec<String> = shape
        .iter()
        .enumerate()
        .map(|(t, (n, g))| format!("{n}x{g}:{}", names[t]))
        .collect();
    ClusterSpec::parse(&spec.join(","), "test").unwrap()
}

fn jobs(n: usize, types: usize, seed: u64, cluster: &ClusterSpec) -> Vec<JobView> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            let mut j = JobView::basic(JobId(i as u32), -next() * 3600.0, 1);
            j.max_replicas = [1u32, 2, 4, 8, 16, 64][(next() * 6.0) as usize % 6];
            j.attained_gpu_s = if next() < 0.2 { 0.0 } else { next() * 1e4 };
            j.num_restarts = (next() * 4.0) as u32;
            j.goodput_version = 1;
            let var = 1.0 + next() * 500.0;
            j.goodput_by_type = (0..types)
                .map(|_| (next() < 0.85).then(|| gfn(0.5 + next() * 3.0, var)))
                .collect();
            // Sometimes the job holds a device of its first type already.
            if next() < 0.3 {
                if let Some(node) = cluster.nodes.iter().position(|n| n.device_type.0 == 0) {
                    j.current = Allocation::from_pairs([(NodeId(node as u32), 1)]);
                }
            }
            j
        })
        .collect()
}

fn shapes() -> impl Strategy<Value = Vec<(u32, u32)>> {
    prop::collection::vec((1u32..6, prop::sample::select(vec![4u32, 8])), 1..=3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn capacity_one_type_and_determinism(
        shape in shapes(), n in 0usize..40, seed in 0u64..1000, exact in any::<bool>()
    ) {
        let c = cluster(&shape);
        let js = jobs(n, shape.len(), seed, &c);
        let view = ClusterView { now_s: 600.0, cluster: &c, jobs: &js };
        let solver = if exact && n <= 12 { SiaSolver::Exact } else { SiaSolver::Fast };
        let a = Sia::new(solver).allocate(&view);
        let b = Sia::new(solver).allocate(&view);
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a.len(), js.len());
        prop_assert!(check_capacity(&c, &a).is_ok());
        for al in &a {
            let types: std::collections::BTreeSet<u16> = al
                .slots()
                .iter()
                .map(|s| c.nodes[s.0 .0 as usize].device_type.0)
                .collect();
            prop_assert!(types.len() <= 1, "job on several types: {:?}", al);
        }
        // Per-type device counts never exceed the type's capacity.
        for t in 0..c.device_types.len() {
            let cap: u32 = c.nodes.iter().filter(|x| x.device_type.0 as usize == t).map(|x| x.gpus).sum();
            let used: u32 = a.iter().flat_map(|al| al.slots()).filter(|s| c.nodes[s.0 .0 as usize].device_type.0 as usize == t).map(|s| s.1).sum();
            prop_assert!(used <= cap);
        }
    }

    #[test]
    fn fast_fits_and_is_near_exact(shape in shapes(), n in 1usize..10, seed in 0u64..1000) {
        let c = cluster(&shape);
        let js = jobs(n, shape.len(), seed, &c);
        let view = ClusterView { now_s: 600.0, cluster: &c, jobs: &js };
        let mut sia = Sia::new(SiaSolver::Fast);
        let p = sia.problem(&view);
        let held = sia.held(&view);
        let fast = solve_fast(&p, &held);
        let (vf, ff) = p.evaluate(&fast);
        prop_assert!(ff);
        let exact = solve_exact(&p).expect("solves");
        let (ve, fe) = p.evaluate(&exact);
        prop_assert!(fe);
        prop_assert!(vf <= ve + 1e-6, "fast {} > exact {}", vf, ve);
        // Every chosen configuration is placed with its type and size.
        let allocs = place(&c, &js, &p.configs, &fast);
        for (al, ch) in allocs.iter().zip(&fast) {
            match ch {
                Some(k) => prop_assert_eq!(al.replicas(), p.configs[*k].gpus),
                None => prop_assert!(al.is_empty()),
            }
        }
    }
}
