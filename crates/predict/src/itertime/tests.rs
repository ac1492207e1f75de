use super::*;
use levenberg_marquardt::LeastSquaresProblem;

fn truth() -> PacerParams {
    PacerParams {
        knot_bsz: vec![8.0, 32.0, 128.0],
        knot_time_s: vec![0.028, 0.052, 0.148],
        rho_packed: 0.1,
        rho_dist: 0.02,
        alpha_r: 0.005,
        beta_r: 0.002,
        alpha_n: 0.03,
        beta_n: 0.001,
        kappa_n: 0.05,
        nu_n: 0.01,
        gamma: 2.0,
    }
}

/// A synthetic table in the Pollux layout: every placement up to 4 nodes × 4
/// replicas and a few scalability rows, with ±1% deterministic "noise".
fn table(p: &PacerParams) -> Vec<StepRow> {
    let mut rows = Vec::new();
    let mut rng = SplitMix64(7);
    let mut push = |c: StepConfig| {
        let noise = 1.0 + 0.02 * ((rng.next_u64() % 1000) as f64 / 1000.0 - 0.5);
        let step = p.step_time(&c) * noise;
        let tc = p.compute_time(&c);
        rows.push(StepRow {
            config: c,
            step_time_s: step,
            sync_time_s: (step - tc).max(0.0),
            source: format!("synthetic:{}", rows.len() + 2),
        });
    };
    for nodes in 1..=4u32 {
        for k in 1..=4u32 {
            for b in [8.0, 32.0, 128.0] {
                push(StepConfig {
                    nodes,
                    replicas: nodes * k,
                    max_per_node: k,
                    group: placement_group(&vec![k; nodes as usize]),
                    local_bsz: b,
                });
            }
        }
    }
    for (n, r) in [(6, 6), (8, 16), (12, 24), (16, 32), (16, 64)] {
        for b in [8.0, 64.0] {
            push(StepConfig::even(n, r, b));
        }
    }
    rows
}

#[test]
fn every_model_fits_a_synthetic_table_and_pacer_fits_it_best() {
    let rows = table(&truth());
    let split = split_random(rows.len(), 0.3, 1);
    let mut med = Vec::new();
    for kind in ModelKind::ALL {
        let (_, stats) = evaluate(kind, &rows, &split).unwrap();
        assert_eq!(stats.rows, split.test.len());
        med.push(stats.median_abs_pct_error);
    }
    assert!(med[2] < 3.0, "pacer median {med:?}");
    assert!(med[2] <= med[0] && med[2] <= med[1] + 0.5, "{med:?}");
}

#[test]
fn support_tells_measured_interpolated_and_extrapolated_apart() {
    let rows = table(&truth());
    let model = fit(ModelKind::PacerTable, &rows).unwrap();
    let c = rows
        .iter()
        .find(|r| r.config.local_bsz == 32.0)
        .unwrap()
        .config;
    let at = |b: f64| model.support(&StepConfig { local_bsz: b, ..c });
    assert_eq!(at(32.0), Support::Measured);
    assert_eq!(at(32.5), Support::Measured);
    assert_eq!(at(48.0), Support::Interpolated);
    assert_eq!(at(256.0), Support::Extrapolated);
    let unseen = StepConfig {
        group: u64::MAX,
        ..c
    };
    assert_eq!(model.support(&unseen), Support::Extrapolated);
    let plain = fit(ModelKind::Pacer, &rows).unwrap();
    assert_eq!(plain.support(&c), Support::Extrapolated);
}

#[test]
fn extrapolation_split_holds_out_largest_replica_counts() {
    let rows = table(&truth());
    let s = split_extrapolate(&rows, 0.2);
    let max_train = s
        .train
        .iter()
        .map(|&i| rows[i].config.replicas)
        .max()
        .unwrap();
    let min_test = s
        .test
        .iter()
        .map(|&i| rows[i].config.replicas)
        .min()
        .unwrap();
    assert!(max_train < min_test);
    assert!(s.test.len() as f64 >= 0.2 * rows.len() as f64);
    let (_, stats) = evaluate(ModelKind::Pacer, &rows, &s).unwrap();
    assert!(stats.median_abs_pct_error < 5.0, "{stats:?}");
}

#[test]
fn noise_floor_recovers_known_noise_and_ignores_shared_curvature() {
    // 40 placements, 9 batches each, on a curve with a shared wiggle; log noise
    // uniform in ±a has σ = a/√3.
    let mut rng = SplitMix64(3);
    let mut rows = Vec::new();
    let a = 0.05;
    for g in 1..=40u64 {
        for (j, b) in [4.0, 6.0, 8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0]
            .iter()
            .enumerate()
        {
            let wiggle = if j % 3 == 1 { 1.15 } else { 1.0 };
            let u = (rng.next_u64() % 100_000) as f64 / 100_000.0 * 2.0 - 1.0;
            rows.push(StepRow {
                config: StepConfig {
                    nodes: 1,
                    replicas: 1,
                    max_per_node: 1,
                    local_bsz: *b,
                    group: g,
                },
                step_time_s: (0.01 + 0.001 * b) * wiggle * (a * u).exp(),
                sync_time_s: 0.0,
                source: String::new(),
            });
        }
    }
    let f = noise_floor(&rows).unwrap();
    let sigma = 100.0 * a / 3f64.sqrt();
    assert!((f.sigma_pct / sigma - 1.0).abs() < 0.25, "{f:?} vs {sigma}");
    // The shared wiggle inflates the raw estimate, not the centred one.
    assert!(f.sigma_raw_pct > 1.5 * f.sigma_pct, "{f:?}");
    assert!(f.median_abs_pct < f.p90_abs_pct);
}

#[test]
fn repeat_floor_measures_noise_from_node_order_repeats() {
    // 4-node placements with 1..=4 replicas per node, each multiset in ascending
    // and descending node order (pairs, as in the traces), on one true curve with
    // Gaussian log noise σ = 4%.
    let sigma = 0.04;
    let mut rng = SplitMix64(11);
    let mut gauss = || {
        let u1 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let u2 = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    };
    let mut rows = Vec::new();
    let mut true_abs = Vec::new();
    for code in 0..256u32 {
        let p: Vec<u32> = (0..4).map(|i| (code >> (2 * i)) % 4 + 1).collect();
        let up = p.windows(2).all(|w| w[0] <= w[1]);
        let down = p.windows(2).all(|w| w[0] >= w[1]);
        if !(up || down) {
            continue;
        }
        for b in [8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0, 91.0] {
            let e = sigma * gauss();
            let c = StepConfig {
                nodes: 4,
                replicas: p.iter().sum(),
                max_per_node: *p.iter().max().unwrap(),
                local_bsz: b,
                group: placement_group(&p),
            };
            rows.push(StepRow {
                config: c,
                step_time_s: (0.1 + 0.01 * b) * e.exp(),
                sync_time_s: 0.0,
                source: String::new(),
            });
            true_abs.push((rows.len() - 1, e.abs()));
        }
    }
    // A row whose group does not decode to its configuration stays out.
    rows.push(StepRow {
        config: StepConfig {
            nodes: 3,
            ..rows[0].config
        },
        ..rows[0].clone()
    });
    let f = repeat_floor(&rows, 0).unwrap();
    // 1111, 2222, 3333, 4444 have no partner; the odd row is excluded.
    assert_eq!(f.members.len(), 8 * 2 * (35 - 4), "{}", f.members.len());
    assert_eq!(f.classes, 35 - 4);
    let expect_med = 100.0 * (0.6745 * sigma).exp_m1();
    let expect_p90 = 100.0 * (1.6449 * sigma).exp_m1();
    assert!((f.median_abs_pct / expect_med - 1.0).abs() < 0.12, "{f:?}");
    assert!((f.p90_abs_pct / expect_p90 - 1.0).abs() < 0.12, "{f:?}");
    assert!(
        (f.within_median_abs_pct / expect_med - 1.0).abs() < 0.15,
        "{f:?}"
    );
    // The hard bound is below the error of the true curve itself.
    let truth_mean = 100.0
        * f.members
            .iter()
            .map(|&i| true_abs.iter().find(|t| t.0 == i).unwrap().1)
            .sum::<f64>()
        / f.members.len() as f64;
    assert!(
        f.mean_abs_log_bound_pct <= truth_mean,
        "{f:?} vs {truth_mean}"
    );
    assert!(
        f.mean_abs_log_bound_pct > 0.5 * truth_mean,
        "{f:?} vs {truth_mean}"
    );
    // The replica filter, and no repeats at all.
    let big = repeat_floor(&rows, 15).unwrap();
    assert!(big.members.iter().all(|&i| rows[i].config.replicas >= 15));
    assert!(big.members.len() < f.members.len());
    let singles: Vec<StepRow> = rows
        .iter()
        .filter(|r| [1111, 2222].contains(&r.config.group))
        .cloned()
        .collect();
    assert_eq!(repeat_floor(&singles, 0), None);
}

/// Rows of the three node orders of {1, 3, 4, 4} at 8 batches, with log-residual
/// `res(placement index, batch index)` over the `truth()` model.
fn sibling_rows(res: impl Fn(usize, usize) -> f64) -> Vec<StepRow> {
    let p = truth();
    let mut rows = Vec::new();
    for (i, place) in [[1, 3, 4, 4], [4, 1, 3, 4], [4, 4, 1, 3]]
        .iter()
        .enumerate()
    {
        for (j, b) in [8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0, 91.0]
            .iter()
            .enumerate()
        {
            let c = StepConfig {
                nodes: 4,
                replicas: 12,
                max_per_node: 4,
                local_bsz: *b,
                group: placement_group(place),
            };
            rows.push(StepRow {
                config: c,
                step_time_s: p.step_time(&c) * res(i, j).exp(),
                sync_time_s: 0.0,
                source: format!("t:{i}:{j}"),
            });
        }
    }
    rows
}

#[test]
fn table_borrows_node_order_siblings_only_when_leave_one_out_says_so() {
    // A batch-to-batch wiggle shared by the node orders, on top of a per-placement
    // offset: a held-out row is found in its siblings, not its own neighbours.
    let offset = [0.03, -0.02, 0.05];
    let wiggle = |j: usize| if j.is_multiple_of(2) { 0.06 } else { -0.04 };
    let mut rows = sibling_rows(|i, j| offset[i] + wiggle(j));
    let held = rows.remove(3); // placement 0, batch 23
    let t = PacerTable::new(truth(), &rows);
    assert_eq!(t.sibling_weight, 1.0);
    let want = offset[0] + wiggle(3);
    assert!(
        (t.residual(&held.config) - want).abs() < 1e-9,
        "{}",
        t.residual(&held.config)
    );
    let own_only = PacerTable {
        sibling_weight: 0.0,
        ..t.clone()
    };
    assert!((own_only.residual(&held.config) - want).abs() > 0.05);
    // Residuals linear in ln(batch) with a slope of each placement's own: its
    // neighbours know, its siblings mislead, and the weight stays 0.
    let slope = [0.04, -0.03, 0.01];
    let mut rows = sibling_rows(|i, j| slope[i] * j as f64);
    let held = rows.remove(3);
    let t = PacerTable::new(truth(), &rows);
    assert_eq!(t.sibling_weight, 0.0);
    assert!((t.residual(&held.config) - slope[0] * 3.0).abs() < 0.01);
}

#[test]
fn table_extends_a_placement_by_the_shape_the_others_share_when_it_pays() {
    // Ten placements whose residuals share a knee at the largest batches the model
    // does not have, each with its own offset; one placement lacks its last batch.
    let batches = [8.0, 11.0, 16.0, 23.0, 32.0, 45.0, 64.0, 91.0];
    let knee = |j: usize| if j >= 6 { 0.08 * (j - 5) as f64 } else { 0.0 };
    let rows_for = |res: &dyn Fn(usize, usize) -> f64| {
        let p = truth();
        let mut rows = Vec::new();
        for g in 1..=10u64 {
            for (j, b) in batches.iter().enumerate() {
                let c = StepConfig {
                    nodes: 1,
                    replicas: 1,
                    max_per_node: 1,
                    local_bsz: *b,
                    group: g,
                };
                rows.push(StepRow {
                    config: c,
                    step_time_s: p.step_time(&c) * res(g as usize, j).exp(),
                    sync_time_s: 0.0,
                    source: String::new(),
                });
            }
        }
        rows
    };
    let mut rows = rows_for(&|g, j| 0.01 * g as f64 + knee(j));
    let held = rows.remove(7); // group 1 at batch 91
    let t = PacerTable::new(truth(), &rows);
    assert_eq!(t.edge_weight, 1.0);
    let want = 0.01 + knee(7);
    assert!((t.residual(&held.config) - want).abs() < 1e-9);
    let flat = PacerTable {
        edge_weight: 0.0,
        ..t.clone()
    };
    assert!((flat.residual(&held.config) - want).abs() > 0.07);
    // Fewer than three other placements measured both batches: no shape, the
    // nearest measured residual as before.
    let mut rows: Vec<StepRow> = rows_for(&|g, j| 0.01 * g as f64 + knee(j))
        .into_iter()
        .filter(|r| r.config.group <= 3)
        .collect();
    let held = rows.remove(7);
    let t = PacerTable::new(truth(), &rows);
    assert_eq!(t.edge_weight, 0.0);
    assert!((t.residual(&held.config) - (0.01 + knee(6))).abs() < 1e-9);
}

#[test]
fn random_split_is_deterministic_and_disjoint() {
    let a = split_random(100, 0.3, 42);
    assert_eq!(a, split_random(100, 0.3, 42));
    assert_ne!(a, split_random(100, 0.3, 43));
    assert_eq!(a.test.len(), 30);
    assert!(a.test.iter().all(|i| !a.train.contains(i)));
}

#[test]
fn too_few_rows_and_bad_rows_are_named() {
    let rows = table(&truth());
    let e = fit(ModelKind::Ernest, &rows[..2]).unwrap_err();
    assert!(e.to_string().contains("too few rows"), "{e}");
    let mut bad = rows.clone();
    bad[3].step_time_s = 0.0;
    let e = fit(ModelKind::Pacer, &bad).unwrap_err();
    assert!(e.to_string().starts_with("synthetic:5:"), "{e}");
}

#[test]
fn rows_that_follow_no_model_are_reported_not_fitted() {
    // Step time that jumps by 10× between neighbouring batches.
    let mut rows = table(&truth());
    for (i, r) in rows.iter_mut().enumerate() {
        r.step_time_s *= if i % 2 == 0 { 10.0 } else { 0.1 };
        r.sync_time_s = 0.0;
    }
    let e = fit(ModelKind::Ernest, &rows).unwrap_err();
    assert!(e.to_string().contains("did not converge"), "{e}");
}

#[test]
fn pacer_jacobian_matches_finite_differences() {
    let rows = table(&truth());
    let t = truth();
    let mut values = t.knot_time_s.clone();
    values.extend(t.tail());
    let np = values.len();
    let free: Vec<usize> = (0..np).collect();
    let x = PacerModel::encode(&values, &free, 3 + GAM);
    let model = PacerModel {
        rows: &rows,
        knots: t.knot_bsz.clone(),
    };
    let bounds = model.bounds(np);
    let mut prob = Bounded::new(&model, &bounds, values, free, x.clone());
    prob.set_params(&x);
    let j = prob.jacobian().unwrap();
    let r0 = prob.residuals().unwrap();
    for c in 0..np {
        let mut x2 = x.clone();
        x2[c] += 1e-6;
        prob.set_params(&x2);
        let r1 = prob.residuals().unwrap();
        for row in 0..r0.len() {
            let fd = (r1[row] - r0[row]) / 1e-6;
            assert!(
                (fd - j[(row, c)]).abs() < 1e-4 * (1.0 + fd.abs()),
                "row {row} col {c}: fd {fd} vs {}",
                j[(row, c)]
            );
        }
        prob.set_params(&x);
    }
}
