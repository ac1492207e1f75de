//! Property tests of the Sia-style policy on random heterogeneous clusters and jobs
//! with per-type goodput models: per-node (hence per-type) capacity is never
//! exceeded, every job runs on one device type, the same input gives the same
//! output, and the fast solver's choice fits and stays close to the exact one.

use pacer_model::{Allocation, ClusterSpec, JobId, NodeId};
use pacer_policy::sia::{
    place, solve_exact, solve_fast, Sia, SiaPacer, SiaPacerMix, SiaSolver, Weights,
};
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
            // Jobs that have held devices have trained (Sia's model needs progress).
            j.work_done = if j.attained_gpu_s > 0.0 { 0.1 } else { 0.0 };
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

/// Rounds of 60 s on `c` under `p`: every job's attained service grows with the
/// devices it holds, and a job leaves once it has held `need` GPU-seconds (its
/// work, scaled by its goodput there). Returns the round each job finished in.
fn serve_all(p: &mut dyn Policy, c: &ClusterSpec, mut js: Vec<JobView>, need: &[f64]) -> Vec<u32> {
    let mut done = vec![0u32; js.len()];
    let mut left = need.to_vec();
    for round in 1..=2000u32 {
        if js.is_empty() {
            break;
        }
        let view = ClusterView {
            now_s: 600.0 + 60.0 * round as f64,
            cluster: c,
            jobs: &js,
        };
        let a = p.allocate(&view);
        assert!(check_capacity(c, &a).is_ok());
        let mut keep = Vec::new();
        for (mut j, al) in js.drain(..).zip(a) {
            let i = j.id.0 as usize;
            let g = al.replicas() as f64;
            if !al.is_empty() && al != j.current {
                j.num_restarts += 1;
            }
            j.attained_gpu_s += 60.0 * g;
            left[i] -= 60.0 * g;
            j.current = al;
            if left[i] <= 0.0 {
                done[i] = round;
            } else {
                keep.push(j);
            }
        }
        js = keep;
    }
    done
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn sia_pacer_capacity_one_type_and_determinism(
        shape in shapes(), n in 0usize..40, seed in 0u64..1000, tau in 60.0f64..20000.0,
        hold in any::<bool>(), young in any::<bool>()
    ) {
        let w = if young { Weights::Young { tau_gpu_s: tau } } else { Weights::Old { tau_gpu_s: tau } };
        let c = cluster(&shape);
        let js = jobs(n, shape.len(), seed, &c);
        let view = ClusterView { now_s: 600.0, cluster: &c, jobs: &js };
        let a = SiaPacer::new(w, -0.5, hold).allocate(&view);
        let b = SiaPacer::new(w, -0.5, hold).allocate(&view);
        let d = SiaPacer::default().allocate(&view);
        prop_assert!(check_capacity(&c, &d).is_ok());
        prop_assert_eq!(d, SiaPacer::default().allocate(&view));
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
    }

    #[test]
    fn sia_pacer_serves_every_job(shape in shapes(), n in 1usize..30, seed in 0u64..1000) {
        let c = cluster(&shape);
        let mut js = jobs(n, shape.len(), seed, &c);
        for j in &mut js {
            // Fresh jobs, none holding devices; every job can use some type.
            j.attained_gpu_s = 0.0;
            j.num_restarts = 0;
            j.current = Allocation::empty();
            if j.goodput_by_type.iter().all(|g| g.is_none()) {
                j.goodput_by_type[0] = Some(gfn(1.0, 10.0));
            }
        }
        let need: Vec<f64> = (0..n).map(|i| 600.0 + 300.0 * (i % 7) as f64).collect();
        let done = serve_all(&mut SiaPacer::default(), &c, js.clone(), &need);
        prop_assert!(done.iter().all(|&d| d > 0), "unserved: {:?}", done);
        // Same input, same rounds.
        prop_assert_eq!(done, serve_all(&mut SiaPacer::default(), &c, js, &need));
    }
}

#[test]
fn sia_pacer_keeps_a_restarting_job_and_weights_young_jobs() {
    let c = ClusterSpec::parse("1x4:aws", "t").unwrap();
    let mut old = JobView::basic(JobId(0), 0.0, 1);
    old.max_replicas = 4;
    old.attained_gpu_s = 36_000.0;
    old.goodput_version = 1;
    old.goodput_by_type = vec![Some(gfn(1.0, 50.0))];
    old.current = Allocation::from_pairs([(NodeId(0), 4)]);
    let mut young = old.clone();
    young.id = JobId(1);
    young.attained_gpu_s = 60.0;
    young.current = Allocation::empty();
    young.arrival_s = 500.0;
    let js = vec![old.clone(), young.clone()];
    // This policy starts the old job at t = 570 s (alone, it gets devices); its
    // restart takes 250 s, so at t = 600 s it keeps exactly those devices, though a
    // young job now competes for them.
    let mut p = SiaPacer::default();
    let mut idle = old.clone();
    idle.current = Allocation::empty();
    idle.restart_s = Some(250.0);
    let first = p.allocate(&ClusterView {
        now_s: 570.0,
        cluster: &c,
        jobs: &[idle.clone()],
    });
    assert!(!first[0].is_empty());
    let mut busy = idle.clone();
    busy.current = first[0].clone();
    let pair = [busy.clone(), young.clone()];
    let a = p.allocate(&ClusterView {
        now_s: 600.0,
        cluster: &c,
        jobs: &pair,
    });
    assert_eq!(a[0], first[0], "a restarting job keeps its devices");
    // After its restart, the same round may shrink it for the young job.
    let later = p.allocate(&ClusterView {
        now_s: 900.0,
        cluster: &c,
        jobs: &pair,
    });
    assert!(later[1].replicas() > 0, "{later:?}");
    // Without restarts under way, the weights give the young job at least as many
    // devices as Sia's uniform weights do.
    let view = ClusterView {
        now_s: 4000.0,
        cluster: &c,
        jobs: &js,
    };
    let las = SiaPacer::new(Weights::Young { tau_gpu_s: 3600.0 }, -0.5, false).allocate(&view);
    let uni = SiaPacer::new(Weights::Uniform, -0.5, false).allocate(&view);
    assert!(las[1].replicas() >= uni[1].replicas(), "{las:?} vs {uni:?}");
    assert!(las[1].replicas() > 0);
}

#[test]
fn sia_pacer_skips_the_ladder_but_keeps_a_cap_of_one() {
    // 2 nodes of 8: a job that has run on one device (cap 2) may go straight to 8
    // (its model scales well); a job capped at 1 (rigid, or not run yet) never
    // gets more than 1.
    let c = ClusterSpec::parse("2x8:dgx", "t").unwrap();
    let mut ran = JobView::basic(JobId(0), 0.0, 1);
    ran.max_replicas = 2;
    ran.attained_gpu_s = 600.0;
    ran.goodput_version = 1;
    let mut g = gfn(1.0, 5000.0);
    g.perf.alpha_n = 0.0;
    g.perf.beta_n = 0.0;
    g.perf.alpha_r = 0.0;
    g.perf.beta_r = 0.0;
    ran.goodput_by_type = vec![Some(g)];
    let mut rigid = ran.clone();
    rigid.id = JobId(1);
    rigid.max_replicas = 1;
    let js = vec![ran, rigid];
    let view = ClusterView {
        now_s: 600.0,
        cluster: &c,
        jobs: &js,
    };
    let a = SiaPacer::default().allocate(&view);
    assert!(a[0].replicas() > 2, "{a:?}");
    assert!(a[1].replicas() <= 1, "{a:?}");
    let mut capped = SiaPacer::default();
    capped.sia.explore_cap = true;
    let b = capped.allocate(&view);
    assert!(b[0].replicas() <= 2, "{b:?}");
}

/// A stand-in for a driver's balanced model (`pacer_sim`'s): each type's one-type
/// goodput per device at the job's size, summed, less a cross-node penalty per node.
#[derive(Debug)]
struct FakeMix(Vec<Option<GoodputFn>>);

impl pacer_policy::MixedGoodput for FakeMix {
    fn goodput(&self, groups: &[(pacer_model::DeviceTypeId, u32)], nodes: u32) -> f64 {
        let total: u32 = groups.iter().map(|g| g.1).sum();
        let mut g = 0.0;
        for &(t, n) in groups {
            let Some(Some(m)) = self.0.get(t.0 as usize) else {
                return 0.0;
            };
            let one = m
                .optimize(nodes.min(total).max(1), total)
                .map_or(0.0, |c| c.goodput);
            g += one * n as f64 / total.max(1) as f64;
        }
        g * 0.9
    }
}

fn mixing(js: &mut [JobView], every: usize) {
    for (i, j) in js.iter_mut().enumerate() {
        if i % every == 0 {
            j.mixed = Some(std::sync::Arc::new(FakeMix(j.goodput_by_type.clone())));
        }
    }
}

fn types_of(c: &ClusterSpec, a: &Allocation) -> std::collections::BTreeSet<u16> {
    a.slots()
        .iter()
        .map(|s| c.nodes[s.0 .0 as usize].device_type.0)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn sia_pacer_mix_capacity_determinism_and_mixing_only_when_accepted(
        shape in shapes(), n in 0usize..40, seed in 0u64..1000, every in 1usize..4,
        rounds in 1usize..4, post in any::<bool>()
    ) {
        let c = cluster(&shape);
        let mut js = jobs(n, shape.len(), seed, &c);
        mixing(&mut js, every);
        // Without any job accepting a mix, exactly sia-pacer.
        let plain = jobs(n, shape.len(), seed, &c);
        let view = ClusterView { now_s: 600.0, cluster: &c, jobs: &plain };
        prop_assert_eq!(
            SiaPacerMix::default().allocate(&view),
            SiaPacer::default().allocate(&view)
        );
        prop_assert_eq!(
            SiaPacerMix::post().allocate(&view),
            SiaPacer::default().allocate(&view)
        );
        // Several rounds, each starting from the last one's allocations (kept mixes);
        // mixes inside the optimisation (the default) and only after it (`-post`).
        let (mut p, mut q) = if post {
            (SiaPacerMix::post(), SiaPacerMix::post())
        } else {
            (SiaPacerMix::default(), SiaPacerMix::default())
        };
        for r in 0..rounds {
            let view = ClusterView { now_s: 600.0 + 60.0 * r as f64, cluster: &c, jobs: &js };
            let a = p.allocate(&view);
            prop_assert_eq!(&a, &q.allocate(&view));
            prop_assert_eq!(a.len(), js.len());
            prop_assert!(check_capacity(&c, &a).is_ok(), "{:?}", check_capacity(&c, &a));
            for (j, al) in js.iter().zip(&a) {
                let t = types_of(&c, al);
                prop_assert!(t.len() <= 1 || j.mixed.is_some(), "job {:?} mixed without accepting: {:?}", j.id, al);
                prop_assert!(t.len() <= 2);
                for ty in t {
                    prop_assert!(j.goodput_by_type.get(ty as usize).is_some_and(|m| m.is_some()) || al.replicas() == 1,
                        "job {:?} on type {} it has no model for", j.id, ty);
                }
            }
            for (j, al) in js.iter_mut().zip(a) {
                if !al.is_empty() && al != j.current {
                    j.num_restarts += 1;
                }
                j.current = al;
                j.attained_gpu_s += 60.0 * j.current.replicas() as f64;
            }
        }
    }
}

/// A job of at most 8 replicas that has run, with these models, on 2 devices of `node`.
fn running(id: u32, node: u32, models: Vec<Option<GoodputFn>>) -> JobView {
    let mut j = JobView::basic(JobId(id), 0.0, 1);
    j.max_replicas = 8;
    j.attained_gpu_s = 600.0;
    j.goodput_version = 1;
    j.goodput_by_type = models;
    j.current = Allocation::from_pairs([(NodeId(node), 2)]);
    j
}

#[test]
fn sia_pacer_mix_grows_a_job_across_types_and_only_one_that_accepts() {
    // Two nodes of two devices, one per type: one type holds at most 2 devices.
    let c = ClusterSpec::parse("1x2:aws,1x2:dgx", "t").unwrap();
    // Little gradient noise relative to its batch: it scales well.
    let mut j = running(0, 0, vec![Some(gfn(1.0, 5000.0)), Some(gfn(1.0, 5000.0))]);
    let one = vec![j.clone()];
    let view = ClusterView {
        now_s: 3600.0,
        cluster: &c,
        jobs: &one,
    };
    let a = SiaPacerMix::default().allocate(&view);
    assert_eq!(a[0].replicas(), 2, "{:?}", a[0]);
    j.mixed = Some(std::sync::Arc::new(FakeMix(j.goodput_by_type.clone())));
    let mix = vec![j];
    let view = ClusterView {
        now_s: 3600.0,
        cluster: &c,
        jobs: &mix,
    };
    let mut p = SiaPacerMix::default();
    let a = p.allocate(&view);
    assert_eq!(a[0].replicas(), 4, "{:?}", a[0]);
    assert_eq!(types_of(&c, &a[0]).len(), 2);
    assert!(p.notes().contains("given: 1"), "{}", p.notes());
    // Next round, holding the mix: kept (no restart).
    let mut held = mix.clone();
    held[0].current = a[0].clone();
    held[0].num_restarts = 1;
    let view = ClusterView {
        now_s: 3660.0,
        cluster: &c,
        jobs: &held,
    };
    assert_eq!(p.allocate(&view)[0], a[0]);
}

#[test]
fn sia_pacer_mix_mixes_only_over_types_the_job_has_measured() {
    // The job of the test above, which mixes when both models are its own.
    let c = ClusterSpec::parse("1x2:aws,1x2:dgx", "t").unwrap();
    let mut j = running(0, 0, vec![Some(gfn(1.0, 5000.0)), Some(gfn(1.0, 5000.0))]);
    j.mixed = Some(std::sync::Arc::new(FakeMix(j.goodput_by_type.clone())));
    for (measured, mixes) in [
        (vec![true, true], true),
        (vec![true, false], false),
        (vec![false, true], false),
    ] {
        j.measured_by_type = measured.clone();
        let jobs = vec![j.clone()];
        let view = ClusterView {
            now_s: 3600.0,
            cluster: &c,
            jobs: &jobs,
        };
        for mut p in [SiaPacerMix::default(), SiaPacerMix::post()] {
            let a = p.allocate(&view);
            assert_eq!(types_of(&c, &a[0]).len() == 2, mixes, "{measured:?}: {a:?}");
            // One-type configurations are unchanged by the rule: 2 devices of a type.
            assert_eq!(a[0].replicas(), if mixes { 4 } else { 2 }, "{measured:?}");
        }
    }
}

#[test]
fn sia_pacer_mix_takes_devices_from_a_job_inside_the_knapsack() {
    // Two types of 2 devices. Job 0 accepts mixing and scales well (little gradient
    // noise); job 1 does not accept it and scales poorly: the knapsack gives each one
    // type's two devices, so nothing is left free for a mix after it. Inside the
    // optimisation, job 1 gives up a device when job 0's mix is worth more.
    let c = ClusterSpec::parse("1x2:aws,1x2:dgx", "t").unwrap();
    let mut a = running(0, 0, vec![Some(gfn(1.0, 5000.0)), Some(gfn(1.0, 5000.0))]);
    a.mixed = Some(std::sync::Arc::new(FakeMix(a.goodput_by_type.clone())));
    // A fixed cost per step and a fixed batch: its second device adds little.
    let mut slow = gfn(1.0, 1.0);
    slow.perf.alpha_c = 1.0;
    slow.limits.max_batch = 64.0;
    let b = running(1, 1, vec![None, Some(slow)]);
    let js = vec![a, b];
    let view = ClusterView {
        now_s: 3600.0,
        cluster: &c,
        jobs: &js,
    };
    let plain = SiaPacer::default().allocate(&view);
    assert_eq!(plain[0].replicas() + plain[1].replicas(), 4, "{plain:?}");
    assert_eq!(types_of(&c, &plain[0]).len(), 1, "{plain:?}");
    // After the knapsack nothing is free: `-post` is sia-pacer.
    let mut post = SiaPacerMix::post();
    post.min_gain = 1.0;
    assert_eq!(post.allocate(&view), plain);
    let mut inside = SiaPacerMix::with_min_gain(1.0);
    let out = inside.allocate(&view);
    assert!(check_capacity(&c, &out).is_ok());
    assert_eq!(types_of(&c, &out[0]).len(), 2, "{out:?}");
    assert!(out[1].replicas() < plain[1].replicas(), "{out:?}");
    assert_eq!(types_of(&c, &out[1]).len(), 1, "{out:?}");
    assert!(
        inside.notes().contains("inside the knapsack: 1"),
        "{}",
        inside.notes()
    );
}
