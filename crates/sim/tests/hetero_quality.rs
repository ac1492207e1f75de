//! End-to-end properties of heterogeneous ([`Work::Throughput`]) and quality
//! ([`Work::LossCurve`]) jobs under every policy: every job finishes, allocations
//! fit (the engine rejects any that do not), and ρ is computed the same way for
//! every policy — `ρ = JCT / T_independent` with `T_independent` a function of
//! the job and its observed contention only.

use pacer_model::{ClusterSpec, JobSpec};
use pacer_sim::quality::QualityProfile;
use pacer_sim::{SimConfig, SimJob, Simulation, TypeRate, Work};
use proptest::prelude::*;
use std::sync::Arc;

fn profile() -> Arc<QualityProfile> {
    let curve: Vec<(f64, f64)> = (0..=200)
        .map(|k| (k as f64, 1.0 / (0.02 * k as f64 + 1.0) + 0.1))
        .collect();
    Arc::new(QualityProfile {
        name: "toy".into(),
        meta: vec![("algorithm".into(), "toy".into())],
        curve,
        iter_time: vec![(1, 2.0), (2, 1.1), (4, 0.7)],
    })
}

fn workload(n: usize, seed: u64) -> Vec<SimJob> {
    let mut x = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let p = profile();
    (0..n)
        .map(|i| {
            let req = [1u32, 2, 4][(next() * 3.0) as usize % 3];
            let work = if i % 3 == 2 {
                Work::LossCurve { profile: p.clone() }
            } else {
                let v = 1.0 + 3.0 * next();
                Work::Throughput {
                    steps: 2000.0 + 20_000.0 * next(),
                    rates: vec![
                        TypeRate {
                            device_type: "v100".into(),
                            consolidated: v,
                            unconsolidated: 0.8 * v,
                        },
                        TypeRate {
                            device_type: "k80".into(),
                            consolidated: 1.0,
                            unconsolidated: 0.9,
                        },
                    ],
                }
            };
            SimJob {
                spec: JobSpec {
                    name: format!("j{i}"),
                    arrival_s: (next() * 4000.0).round(),
                    application: "t".into(),
                    requested_replicas: req,
                    requested_batch: 0,
                    service_gpu_s: None,
                    device_type: None,
                },
                work,
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_finishes_and_rho_is_one_definition(seed in 0u64..1000, n in 2usize..16, nodes in 1u32..3) {
        let c = ClusterSpec::parse(&format!("{nodes}x4:v100,{nodes}x4:k80"), "t").unwrap();
        let jobs = workload(n, seed);
        let sim = Simulation { cluster: &c, apps: &[], jobs: &jobs, config: SimConfig::default() };
        for name in pacer_policy::POLICY_NAMES.iter().chain(["themis-f0", "themis-f0.5"].iter()) {
            let mut p = pacer_policy::by_name(name).unwrap();
            let res = sim.run(p.as_mut(), |_| {}).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(res.summary.finished, n, "unfinished under {}", name);
            for (job, r) in jobs.iter().zip(&res.jobs) {
                // T_independent depends on the job and its contention only.
                let t = sim.independent_time(job, r.avg_contention);
                prop_assert!((t - r.independent_s).abs() <= 1e-9 * t.max(1.0), "{}: {} vs {}", name, t, r.independent_s);
                let rho = r.ftf_rho().unwrap();
                prop_assert!((rho - r.jct_s().unwrap() / t).abs() <= 1e-9 * rho.max(1.0));
                prop_assert!(rho > 0.0);
            }
        }
    }
}

#[test]
fn independent_time_ignores_the_policy_and_uses_type_mix() {
    let c = ClusterSpec::parse("1x4:v100,1x4:k80", "t").unwrap();
    let jobs = workload(3, 7);
    let sim = Simulation {
        cluster: &c,
        apps: &[],
        jobs: &jobs,
        config: SimConfig::default(),
    };
    // Throughput job alone (N = 1): its request on a capacity-weighted mix of types.
    let Work::Throughput { steps, rates } = &jobs[0].work else {
        panic!()
    };
    let mix = 0.5 * rates[0].consolidated + 0.5 * rates[1].consolidated;
    assert!((sim.independent_time(&jobs[0], 1.0) - steps / mix).abs() < 1e-6);
    // Loss-curve job alone: its curve at the speed of its requested workers.
    let Work::LossCurve { profile } = &jobs[2].work else {
        panic!()
    };
    let req = jobs[2].spec.requested_replicas;
    let t = profile.total_iterations() / profile.iterations_per_s(req);
    assert!((sim.independent_time(&jobs[2], 1.0) - t).abs() < 1e-6);
}
