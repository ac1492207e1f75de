//! The gradient noise scale of a running job (`pacer_runtime::gns`), end to end on
//! the shipped `tiny` dataset over real TCP on loopback: what the controller feeds the
//! estimator, checked against single-process gradients, and the estimate against a
//! brute-force one from per-sample gradients.

use pacer_runtime::controller::ControllerConfig;
use pacer_runtime::data::{Data, SampleStream};
use pacer_runtime::optim::{OptimSpec, Optimizer};
use pacer_runtime::{train_local, LocalLaunch};

mod common;
use common::{config, tiny};

fn sgd(lr: f32) -> OptimSpec {
    OptimSpec::Sgd {
        lr,
        momentum: 0.0,
        weight_decay: 0.0,
    }
}

/// Mean gradient at `params` over the samples at stream positions `[start, start+len)`.
fn range_grad(d: &Data, cfg: &ControllerConfig, params: &[f32], start: u64, len: u64) -> Vec<f32> {
    let m = cfg.model.build();
    let mut idx = Vec::new();
    SampleStream::new(d.train.n, cfg.seed).indices(start, len as usize, &mut idx);
    let x: Vec<f32> = idx
        .iter()
        .flat_map(|&i| d.train.row(i as usize).to_vec())
        .collect();
    let y: Vec<u32> = idx.iter().map(|&i| d.train.y[i as usize]).collect();
    let mut g = vec![0.0; m.n_params()];
    m.loss_grad(params, &x, &y, &mut g);
    g
}

fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
    (num / sqr(b)).sqrt()
}

fn sqr(v: &[f32]) -> f64 {
    v.iter().map(|&x| f64::from(x) * f64::from(x)).sum()
}

/// `(|G|², tr Σ, B_noise)` at `params` over the whole training set, from every
/// sample's own gradient: `G` their mean, `tr Σ` the mean of `|g_x − G|²`.
fn brute_force(d: &Data, cfg: &ControllerConfig, params: &[f32]) -> (f64, f64, f64) {
    let m = cfg.model.build();
    let n = d.train.n;
    let mut per_sample = vec![0.0f32; m.n_params()];
    let mut sum = vec![0.0f64; m.n_params()];
    let mut sum_sqr = 0.0;
    for i in 0..n {
        m.loss_grad(
            params,
            d.train.row(i),
            &d.train.y[i..i + 1],
            &mut per_sample,
        );
        for (s, &g) in sum.iter_mut().zip(&per_sample) {
            *s += f64::from(g);
        }
        sum_sqr += sqr(&per_sample);
    }
    let g2: f64 = sum.iter().map(|s| (s / n as f64).powi(2)).sum();
    let trace = sum_sqr / n as f64 - g2;
    (g2, trace, trace / g2)
}

/// What the two-batch estimator measures on a finite training set whose epochs are
/// permutations (a batch of `b` is drawn without replacement from `N`):
/// `E|g_b|² = |G|² + tr Σ (N − b) / (b (N − 1))`, i.e. `|G|² − tr Σ/(N − 1)` and
/// `tr Σ · N/(N − 1)` in the estimator's `|G|² + tr Σ / b`. The noise scale it reports
/// is larger than the per-sample one by `1 / (1 − B_noise/N)` (at most a few % on
/// MNIST, where `N = 60 000`; 10–50 % on `tiny`, `N = 2000`).
fn as_sampled(d: &Data, (g2, trace, _): (f64, f64, f64)) -> (f64, f64) {
    let n = d.train.n as f64;
    (g2 - trace / (n - 1.0), trace * n / (n - 1.0))
}

#[test]
fn training_reports_a_finite_positive_noise_scale() {
    let d = tiny();
    for (model, width) in [("mlp", 32), ("logreg", 0)] {
        let mut cfg = config(&d, model, width, 64, 120);
        cfg.eval_every = 40;
        let mut launch = LocalLaunch::new(3);
        launch.speeds = vec![1.0, 0.5, 0.25];
        let (r, _) = train_local(d.clone(), cfg, launch, None).unwrap();
        let b = r.gradient_noise_scale.expect("an estimate");
        assert!(b.is_finite() && b > 0.0, "{model}: B_noise {b}");
        assert!(r.grad_sqr.is_some_and(|v| v.is_finite() && v > 0.0));
        assert!(r.trace_cov.is_some_and(|v| v.is_finite() && v > 0.0));
        // Every undisrupted iteration observed; one point per evaluation (40, 80, 120).
        assert_eq!(r.gns_iterations, 120, "{model}");
        assert_eq!(r.gns_skipped, 0, "{model}");
        let at: Vec<u64> = r.noise_scale_curve.iter().map(|p| p.iteration).collect();
        assert_eq!(at, vec![40, 80, 120], "{model}");
        assert_eq!(r.noise_scale_curve.last().unwrap().noise_scale, b);
        // The goodput-optimal batch: at every point and at the end, between the run's
        // batch and the default ceiling (16 × 64, at most the training set).
        assert_eq!(
            r.max_global_batch,
            (16 * 64).min(d.train.n as u64),
            "{model}"
        );
        let best = r.goodput_optimal_batch.expect("a goodput-optimal batch");
        assert!(
            (64.0..=r.max_global_batch as f64).contains(&best),
            "{model}: {best}"
        );
        assert!(r.goodput_gain.is_some_and(|g| g.is_finite() && g >= 1.0));
        for p in &r.noise_scale_curve {
            assert!(p.goodput_optimal_batch.is_some() && p.goodput_gain.is_some());
        }
    }
}

#[test]
fn a_ceiling_below_the_batch_is_refused() {
    let d = tiny();
    let mut cfg = config(&d, "logreg", 0, 64, 5);
    cfg.max_global_batch = Some(32);
    let e = train_local(d.clone(), cfg, LocalLaunch::new(2), None).unwrap_err();
    assert!(e.to_string().contains("max_global_batch"), "{e}");
}

#[test]
fn one_worker_gives_no_estimate() {
    let d = tiny();
    let cfg = config(&d, "logreg", 0, 32, 5);
    let (r, _) = train_local(d.clone(), cfg, LocalLaunch::new(1), None).unwrap();
    assert_eq!(r.gradient_noise_scale, None);
    assert_eq!((r.gns_iterations, r.gns_skipped), (0, 5));
    assert!(r.noise_scale_curve.is_empty());
    assert_eq!(r.goodput_optimal_batch, None);
}

/// The iteration that loses a worker is not observed; the others are, before and
/// after (two workers are left).
#[test]
fn an_iteration_that_lost_a_worker_is_skipped() {
    let d = tiny();
    let cfg = config(&d, "logreg", 0, 48, 8);
    let mut launch = LocalLaunch::new(3);
    launch.kills = vec![(1, 3)];
    let (r, _) = train_local(d.clone(), cfg, launch, None).unwrap();
    assert_eq!(r.leaves, 1);
    assert_eq!(r.disrupted_iterations, 1);
    assert_eq!((r.gns_iterations, r.gns_skipped), (7, 1));
    assert!(r.gradient_noise_scale.is_some());
}

/// With unequal local batches, the `|g_i|²` and the aggregate's `|g|²` the controller
/// gave the estimator are those of single-process gradients on the same samples.
#[test]
fn the_estimator_gets_the_norms_of_single_process_gradients() {
    let d = tiny();
    for (model, width) in [("mlp", 16), ("logreg", 0), ("svm", 0), ("kmeans", 10)] {
        let mut cfg = config(&d, model, width, 32, 2);
        cfg.fixed_batches = Some(vec![3, 7, 22]);
        cfg.record_grads = 2;
        cfg.optimizer = sgd(0.1);
        let (r, _) = train_local(d.clone(), cfg.clone(), LocalLaunch::new(3), None).unwrap();
        assert_eq!(r.gns_inputs.len(), 2, "{model}");
        let p0 = cfg.model.build().init(cfg.seed, &d.train);
        // The first iteration (the second has moved parameters we do not track here).
        let input = &r.gns_inputs[0];
        assert_eq!(input.iteration, 0);
        let lens: Vec<u64> = input.locals.iter().map(|l| l.len).collect();
        assert_eq!(lens, vec![3, 7, 22], "{model}: stream order");
        for l in &input.locals {
            let want = sqr(&range_grad(&d, &cfg, &p0, l.stream_start, l.len));
            let e = (l.sqr - want).abs() / want;
            assert!(e <= 1e-5, "{model}: |g_i|² {} vs {want}: {e}", l.sqr);
        }
        let want = sqr(&range_grad(&d, &cfg, &p0, 0, 32));
        let e = (input.aggregate_sqr - want).abs() / want;
        assert!(
            e <= 1e-5,
            "{model}: aggregate |g|² {} vs {want}: {e}",
            input.aggregate_sqr
        );
        assert_eq!(r.gns_inputs[1].iteration, 1);
        assert_eq!(r.gns_inputs[1].locals[0].stream_start, 32);
    }
}

/// At fixed parameters (learning rate 0) the online estimate from unequal local
/// batches converges to the noise scale of the per-sample gradients.
#[test]
fn the_estimate_matches_brute_force_at_fixed_parameters() {
    let d = tiny();
    for (model, width) in [("mlp", 16), ("logreg", 0)] {
        let mut cfg = config(&d, model, width, 64, 400);
        cfg.fixed_batches = Some(vec![4, 12, 16, 32]);
        cfg.optimizer = sgd(0.0);
        let (r, _) = train_local(d.clone(), cfg.clone(), LocalLaunch::new(4), None).unwrap();
        let per_sample = brute_force(&d, &cfg, &r.final_params);
        let (g2, trace) = as_sampled(&d, per_sample);
        let truth = trace / g2;
        let est = r.gradient_noise_scale.unwrap();
        eprintln!(
            "{model}: online B_noise {est:.2} (|G|² {:.4e}, tr Σ {:.4e}), brute force as sampled {truth:.2} (|G|² {g2:.4e}, tr Σ {trace:.4e}), per sample {:.2}",
            r.grad_sqr.unwrap(),
            r.trace_cov.unwrap(),
            per_sample.2
        );
        assert!(
            (est / truth - 1.0).abs() < 0.15,
            "{model}: online {est} vs brute force {truth}"
        );
    }
}

/// On a real run (the model's own optimiser, parameters moving) the online estimate
/// is in the ballpark of the same smoothing applied to exact values: the run is
/// replayed in one process (its steps depend only on the samples, not on how they
/// were split), and every 10 iterations `|G|²` and `tr Σ` are computed by brute force
/// over the whole training set at the current parameters. Comparing with brute force
/// at the final parameters alone would not do: the noise scale of the MLP on `tiny`
/// nearly triples over the ~100 iterations the default EMA averages (measured: 354
/// online against 943 at the final parameters after 300 iterations).
#[test]
fn the_estimate_of_a_real_run_is_near_brute_force() {
    let d = tiny();
    for (model, width) in [("mlp", 32), ("logreg", 0)] {
        let iters = 300;
        let mut cfg = config(&d, model, width, 64, iters);
        cfg.eval_every = 100;
        // Unequal but fixed local batches: with batches chosen from measured speeds the
        // split, hence the estimate, depended on timing (the MLP's read 315-482 against
        // a brute force of 327 over six runs, so a 1.5x bound failed now and then).
        cfg.fixed_batches = Some(vec![36, 18, 10]);
        let launch = LocalLaunch::new(3);
        let (r, _) = train_local(d.clone(), cfg.clone(), launch, None).unwrap();

        let m = cfg.model.build();
        let mut params = m.init(cfg.seed, &d.train);
        let mut opt = Optimizer::new(cfg.optimizer, params.len());
        let decay = pacer_runtime::gns::SMOOTHING;
        let (mut ema_g2, mut ema_tr, mut weight) = (0.0, 0.0, 0.0);
        let (mut g2, mut tr) = (0.0, 0.0);
        let mut reference = Vec::new();
        for k in 0..iters {
            if k % 5 == 0 {
                (g2, tr) = as_sampled(&d, brute_force(&d, &cfg, &params));
            }
            ema_g2 = decay * ema_g2 + (1.0 - decay) * g2;
            ema_tr = decay * ema_tr + (1.0 - decay) * tr;
            weight = decay * weight + (1.0 - decay);
            if (k + 1) % 100 == 0 {
                reference.push(format!("{}:{:.1}", k + 1, ema_tr / ema_g2));
            }
            let g = range_grad(&d, &cfg, &params, k * cfg.global_batch, cfg.global_batch);
            opt.step(&mut params, &g);
        }
        let e = rel_err(&params, &r.final_params);
        assert!(e < 1e-3, "{model}: the replay drifted from the run: {e}");
        let truth = ema_tr / ema_g2;
        let (g2_end, tr_end, at_end) = brute_force(&d, &cfg, &params);
        let (g2_end, tr_end) = as_sampled(&d, (g2_end, tr_end, at_end));
        let est = r.gradient_noise_scale.unwrap();
        let curve: Vec<String> = r
            .noise_scale_curve
            .iter()
            .map(|p| format!("{}:{:.1}", p.iteration, p.noise_scale))
            .collect();
        eprintln!(
            "{model}: online {curve:?}, smoothed brute force {reference:?} (|G|² {:.4e} vs {:.4e}, tr Σ {:.4e} vs {:.4e}); brute force at the end {at_end:.1} (as sampled {:.1})",
            r.grad_sqr.unwrap(),
            ema_g2 / weight,
            r.trace_cov.unwrap(),
            ema_tr / weight,
            tr_end / g2_end,
        );
        assert!(
            est / truth < 1.5 && truth / est < 1.5,
            "{model}: online {est} vs smoothed brute force {truth}"
        );
    }
}
