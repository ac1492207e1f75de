//! The evaluation loop: run a scenario under a controller and a predictor, and
//! compare against plain BSP (`uniform`) and the oracle balancer.

use crate::model::{conditions, Workers};
use crate::scenario::Scenario;
use pacer_control::session::{IterationObservation, JobSession, SessionConfig, WorkerKey};
use pacer_control::worker::{make_controller_with, BatchProblem, GateConfig, CONTROLLERS};
use pacer_predict::speed::{make_predictors, Exogenous, SpeedPredictor, PREDICTORS};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What one run measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunStats {
    /// Mean iteration seconds (max over workers + sync).
    pub mean_iter_s: f64,
    /// Mean iteration seconds of the oracle balancer under the same jitter.
    pub ideal_iter_s: f64,
    /// Mean absolute percentage error of one-step speed predictions (0.05 = 5 %).
    pub speed_mape: f64,
    /// Iterations whose batch vector differed from the previous one.
    pub batch_changes: u64,
    /// (worker, iteration) pairs whose batch changed.
    pub worker_batch_changes: u64,
    /// Reversals of a worker's direction of change (oscillation).
    pub direction_flips: u64,
    pub final_batches: Vec<u64>,
}

/// The `pacer batching eval` report.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalReport {
    pub scenario: String,
    pub controller: String,
    /// The rule `controller` resolved to (e.g. `lbbsp` → `lbbsp-gpu`).
    pub controller_variant: String,
    pub predictor: String,
    /// Whether the adaptive controller ran with its noise gate (`--gate`).
    pub gate: bool,
    pub workers: usize,
    pub iterations: u64,
    pub mean_iter_s: f64,
    pub ideal_iter_s: f64,
    pub efficiency: f64,
    pub uniform_iter_s: f64,
    pub uniform_efficiency: f64,
    pub speedup_vs_uniform: f64,
    pub speed_mape: f64,
    pub batch_changes: u64,
    pub worker_batch_changes: u64,
    pub direction_flips: u64,
    pub final_batches: Vec<u64>,
    pub wall_ms: f64,
}

/// A controller or predictor name that is not in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("unknown controller `{0}`; known: {known}", known = CONTROLLERS.join(", "))]
    UnknownController(String),
    #[error("unknown predictor `{0}`; known: {known}", known = PREDICTORS.join(", "))]
    UnknownPredictor(String),
    #[error("{0}")]
    Infeasible(String),
}

/// Seeds the jitter and monitor streams apart from each other and from NARX.
const JITTER_STREAM: u64 = 0x6A09_E667_F3BC_C908;
const MONITOR_STREAM: u64 = 0xBB67_AE85_84CA_A73B;

/// Knobs of a run beyond the registry names, for comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SimOptions {
    /// Noise gate of the adaptive controllers ([`GateConfig::off`]: ungated rules).
    pub gate: GateConfig,
}

/// Simulate `sc` once. Deterministic: the jitter and monitor draws depend only on the
/// scenario seed (never on decisions), so every controller faces the same luck.
pub fn simulate(sc: &Scenario, controller: &str, predictor: &str) -> Result<RunStats, EvalError> {
    simulate_with(sc, controller, predictor, &SimOptions::default())
}

/// [`simulate`] with explicit options.
pub fn simulate_with(
    sc: &Scenario,
    controller: &str,
    predictor: &str,
    opts: &SimOptions,
) -> Result<RunStats, EvalError> {
    let preds = make_predictors(predictor, sc.seed, sc.n_workers())
        .ok_or_else(|| EvalError::UnknownPredictor(predictor.to_string()))?;
    simulate_custom(sc, controller, opts, preds)
}

/// [`simulate`] with caller-built predictors, one per worker (e.g. model variants
/// that the registry does not name).
pub fn simulate_custom(
    sc: &Scenario,
    controller: &str,
    opts: &SimOptions,
    preds: Vec<Box<dyn SpeedPredictor>>,
) -> Result<RunStats, EvalError> {
    let problem = sc
        .problem()
        .map_err(|e| EvalError::Infeasible(e.to_string()))?;
    if !CONTROLLERS.contains(&controller) {
        return Err(EvalError::UnknownController(controller.to_string()));
    }
    let n = problem.n_workers();
    if preds.len() != n {
        return Err(EvalError::Infeasible(format!(
            "{} predictors for {n} workers",
            preds.len()
        )));
    }
    let mut session = open_session(sc, &problem, controller, opts, preds)?;
    let specs: Vec<_> = sc.expanded().collect();
    let workers = Workers::new(sc);
    let sigma: Vec<f64> = specs.iter().map(|w| w.noise).collect();

    let mut jitter_rng = StdRng::seed_from_u64(sc.seed ^ JITTER_STREAM);
    let mut monitor_rng = StdRng::seed_from_u64(sc.seed ^ MONITOR_STREAM);

    let mut batches = problem.uniform();
    let mut prev = batches.clone();
    let mut last_dir = vec![0i8; n];
    let mut mult = vec![1.0; n];
    let mut exo = vec![Exogenous::default(); n];
    let mut jitter = vec![1.0; n];
    let mut observed = Vec::with_capacity(n);
    let mut predicted = vec![0.0; n];
    let mut oracle = vec![0u64; n];
    let mut oracle_mult: Vec<f64> = Vec::new();

    let (mut total, mut ideal_total) = (0.0, 0.0);
    let (mut ape_sum, mut ape_n) = (0.0, 0u64);
    let mut stats = RunStats {
        mean_iter_s: 0.0,
        ideal_iter_s: 0.0,
        speed_mape: 0.0,
        batch_changes: 0,
        worker_batch_changes: 0,
        direction_flips: 0,
        final_batches: Vec::new(),
    };

    for k in 0..sc.iterations {
        for i in 0..n {
            let (m, mut e) = conditions(specs[i], k);
            if sc.monitor_noise > 0.0 {
                let a: f64 = monitor_rng.sample(StandardNormal);
                let b: f64 = monitor_rng.sample(StandardNormal);
                e.cpu_load = (e.cpu_load + sc.monitor_noise * a).clamp(0.0, 1.0);
                e.mem_load = (e.mem_load + sc.monitor_noise * b).clamp(0.0, 1.0);
            }
            mult[i] = m;
            exo[i] = e;
            let z: f64 = jitter_rng.sample(StandardNormal);
            jitter[i] = (sigma[i] * z).exp();
            session
                .set_next_signals(WorkerKey(i as u64), e)
                .expect("a member");
        }
        let decision = session
            .decide()
            .map_err(|e| EvalError::Infeasible(e.to_string()))?;
        if k > 0 {
            predicted.copy_from_slice(decision.predicted_speed);
            batches.copy_from_slice(decision.batches);
            if batches != prev {
                count_changes(&mut stats, &batches, &prev, &mut last_dir);
                prev.clone_from(&batches);
            }
        } else {
            debug_assert_eq!(decision.batches, batches.as_slice(), "plain BSP start");
        }
        let mut slowest = 0.0f64;
        observed.clear();
        for i in 0..n {
            let t = workers.step[i].seconds(batches[i] as f64) * mult[i] * jitter[i];
            let speed = batches[i] as f64 / t;
            slowest = slowest.max(t);
            if k > 0 {
                ape_sum += (predicted[i] - speed).abs() / speed;
                ape_n += 1;
            }
            observed.push(IterationObservation {
                worker: WorkerKey(i as u64),
                samples: batches[i],
                compute_s: t,
                signals: exo[i],
            });
        }
        session
            .observe(&observed)
            .map_err(|e| EvalError::Infeasible(e.to_string()))?;
        total += slowest + sc.sync_s;

        // The oracle only needs re-solving when the true speeds changed.
        if oracle_mult != mult {
            workers.oracle(sc.global_batch, &mult, &mut oracle);
            oracle_mult.clone_from(&mult);
        }
        let ideal = (0..n)
            .map(|i| workers.step[i].seconds(oracle[i] as f64) * mult[i] * jitter[i])
            .fold(0.0, f64::max);
        ideal_total += ideal + sc.sync_s;
    }
    let iters = sc.iterations as f64;
    stats.mean_iter_s = total / iters;
    stats.ideal_iter_s = ideal_total / iters;
    stats.speed_mape = if ape_n > 0 {
        ape_sum / ape_n as f64
    } else {
        0.0
    };
    stats.final_batches = batches;
    Ok(stats)
}

/// The job session a scenario runs under: the scenario's workers as members
/// 0..n, each with its own predictor (built by the caller) and its scenario bounds.
fn open_session(
    sc: &Scenario,
    problem: &BatchProblem,
    controller: &str,
    opts: &SimOptions,
    preds: Vec<Box<dyn SpeedPredictor>>,
) -> Result<JobSession, EvalError> {
    let label = preds.first().map_or("", |p| p.name()).to_string();
    let preds = std::sync::Mutex::new(preds.into_iter().map(Some).collect::<Vec<_>>());
    let cfg = SessionConfig {
        global_batch: problem.global_batch(),
        controller: controller.to_string(),
        predictor: label,
        seed: sc.seed,
        gate: opts.gate,
        gpu_like: problem.gpu_like(),
    };
    let mut session = JobSession::with_predictors(
        cfg,
        Box::new(move |w: WorkerKey| {
            preds.lock().expect("predictor list")[w.0 as usize]
                .take()
                .expect("each scenario worker joins once")
        }),
    )
    .map_err(|e| EvalError::Infeasible(e.to_string()))?;
    for (i, b) in problem.bounds().iter().enumerate() {
        session
            .join(WorkerKey(i as u64), Some(*b))
            .map_err(|e| EvalError::Infeasible(e.to_string()))?;
    }
    Ok(session)
}

/// Counts one iteration's batch change: workers whose batch moved, and those
/// that moved against their previous direction.
fn count_changes(stats: &mut RunStats, batches: &[u64], prev: &[u64], last_dir: &mut [i8]) {
    stats.batch_changes += 1;
    for i in 0..batches.len() {
        if batches[i] != prev[i] {
            stats.worker_batch_changes += 1;
            let d = if batches[i] > prev[i] { 1 } else { -1 };
            if last_dir[i] == -d {
                stats.direction_flips += 1;
            }
            last_dir[i] = d;
        }
    }
}

/// Run `controller` × `predictor` on `sc` and compare with `uniform`.
/// `uniform` is passed in when the caller already has it (tables reuse one run).
pub fn evaluate(
    sc: &Scenario,
    scenario_name: &str,
    controller: &str,
    predictor: &str,
    uniform: Option<&RunStats>,
) -> Result<EvalReport, EvalError> {
    evaluate_with(
        sc,
        scenario_name,
        controller,
        predictor,
        uniform,
        &SimOptions::default(),
    )
}

/// [`evaluate`] with explicit options.
pub fn evaluate_with(
    sc: &Scenario,
    scenario_name: &str,
    controller: &str,
    predictor: &str,
    uniform: Option<&RunStats>,
    opts: &SimOptions,
) -> Result<EvalReport, EvalError> {
    let started = Instant::now();
    let run = simulate_with(sc, controller, predictor, opts)?;
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let owned;
    let uni = match uniform {
        Some(u) => u,
        None => {
            owned = simulate(sc, "uniform", "last")?;
            &owned
        }
    };
    let problem = sc
        .problem()
        .map_err(|e| EvalError::Infeasible(e.to_string()))?;
    let variant = make_controller_with(controller, &problem, opts.gate)
        .map(|c| c.name().to_string())
        .unwrap_or_default();
    Ok(EvalReport {
        scenario: scenario_name.to_string(),
        controller: controller.to_string(),
        controller_variant: variant,
        predictor: predictor.to_string(),
        gate: opts.gate.z > 0.0,
        workers: sc.n_workers(),
        iterations: sc.iterations,
        mean_iter_s: run.mean_iter_s,
        ideal_iter_s: run.ideal_iter_s,
        efficiency: run.ideal_iter_s / run.mean_iter_s,
        uniform_iter_s: uni.mean_iter_s,
        uniform_efficiency: uni.ideal_iter_s / uni.mean_iter_s,
        speedup_vs_uniform: uni.mean_iter_s / run.mean_iter_s,
        speed_mape: run.speed_mape,
        batch_changes: run.batch_changes,
        worker_batch_changes: run.worker_batch_changes,
        direction_flips: run.direction_flips,
        final_batches: run.final_batches,
        wall_ms,
    })
}

/// Fixed-width table of reports, one line each.
pub fn format_table(reports: &[EvalReport]) -> String {
    let mut s = format!(
        "{:<28} {:<10} {:<6} {:>10} {:>10} {:>6} {:>8} {:>7} {:>7} {:>6} {:>8}\n",
        "scenario",
        "controller",
        "pred",
        "iter_s",
        "ideal_s",
        "eff",
        "speedup",
        "mape",
        "changes",
        "flips",
        "wall_ms"
    );
    for r in reports {
        s.push_str(&format!(
            "{:<28} {:<10} {:<6} {:>10.5} {:>10.5} {:>6.3} {:>8.3} {:>7.4} {:>7} {:>6} {:>8.1}\n",
            r.scenario,
            r.controller,
            r.predictor,
            r.mean_iter_s,
            r.ideal_iter_s,
            r.efficiency,
            r.speedup_vs_uniform,
            r.speed_mape,
            r.batch_changes,
            r.direction_flips,
            r.wall_ms
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc(text: &str) -> Scenario {
        Scenario::from_json(text, "t").unwrap()
    }

    const STATIC: &str = r#"{"global_batch": 1024, "iterations": 300, "seed": 3, "sync_s": 0.001,
        "workers": [{"samples_per_s": 600, "noise": 0.02, "count": 2}, {"samples_per_s": 400, "noise": 0.02},
                    {"samples_per_s": 3200, "noise": 0.02}]}"#;

    #[test]
    fn uniform_loses_what_theory_says_and_lbbsp_recovers_it() {
        let s = sc(STATIC);
        let u = evaluate(&s, "t", "uniform", "last", None).unwrap();
        // n·min(v)/Σv = 4·400/4800
        assert!(
            (u.efficiency - 1600.0 / 4800.0).abs() < 0.05,
            "{}",
            u.efficiency
        );
        let l = evaluate(&s, "t", "lbbsp", "ewma", None).unwrap();
        assert!(l.efficiency > 0.9, "{}", l.efficiency);
        assert!(l.speedup_vs_uniform > 2.5);
    }

    #[test]
    fn same_seed_same_report() {
        let s = sc(STATIC);
        for c in CONTROLLERS {
            for p in PREDICTORS {
                let mut a = simulate(&s, c, p).unwrap();
                let b = simulate(&s, c, p).unwrap();
                a.mean_iter_s = a.mean_iter_s.max(0.0);
                assert_eq!(a, b, "{c} {p}");
            }
        }
    }

    /// Issue 3: on noisy identical workers the adaptive controllers must not lose more
    /// than 1 % to plain BSP, whatever the predictor.
    #[test]
    fn adaptive_controllers_do_not_chase_noise() {
        let s = sc(
            r#"{"global_batch": 1024, "iterations": 600, "seed": 5, "sync_s": 0.002,
            "workers": [{"samples_per_s": 700, "noise": 0.15, "count": 8}]}"#,
        );
        let uni = simulate(&s, "uniform", "last").unwrap();
        let eff_uni = uni.ideal_iter_s / uni.mean_iter_s;
        for c in ["lbbsp-cpu", "lbbsp-gpu", "pid"] {
            for p in PREDICTORS {
                let r = simulate(&s, c, p).unwrap();
                let eff = r.ideal_iter_s / r.mean_iter_s;
                assert!(
                    eff >= eff_uni - 0.01,
                    "{c} + {p}: {eff} vs uniform {eff_uni}"
                );
            }
        }
        // Ungated, the proportional rule chases `last`'s noise.
        let off = SimOptions {
            gate: GateConfig::off(),
        };
        let r = simulate_with(&s, "lbbsp-cpu", "last", &off).unwrap();
        assert!(r.ideal_iter_s / r.mean_iter_s < eff_uni - 0.03);
    }

    /// Issue 3: with interference NARX predicts speeds better than EWMA and ETS, also
    /// on bursts a worker has not seen before (the load response is pooled).
    #[test]
    fn narx_beats_the_baselines_under_interference() {
        let s = sc(
            r#"{"global_batch": 1536, "iterations": 700, "seed": 9, "sync_s": 0.002,
            "monitor_noise": 0.02, "workers": [
            {"samples_per_s": 500, "noise": 0.03, "interference": [{"start": 50, "end": 150, "slowdown": 2.5}]},
            {"samples_per_s": 500, "noise": 0.03, "interference": [{"start": 300, "end": 340, "slowdown": 2.0}]},
            {"samples_per_s": 800, "noise": 0.03, "interference": [{"start": 400, "end": 520, "slowdown": 3.0}]},
            {"samples_per_s": 800, "noise": 0.03, "interference": [{"start": 600, "end": 640, "slowdown": 1.6}]}]}"#,
        );
        let mape = |p| simulate(&s, "pid", p).unwrap().speed_mape;
        let (narx, ets, ewma) = (mape("narx"), mape("ets"), mape("ewma"));
        assert!(
            narx < 0.95 * ets && narx < 0.95 * ewma,
            "narx {narx} ets {ets} ewma {ewma}"
        );
    }

    #[test]
    fn unknown_names_are_errors() {
        let s = sc(STATIC);
        assert!(matches!(
            simulate(&s, "nope", "last"),
            Err(EvalError::UnknownController(_))
        ));
        assert!(matches!(
            simulate(&s, "pid", "nope"),
            Err(EvalError::UnknownPredictor(_))
        ));
    }
}
