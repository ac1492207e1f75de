//! Cost of the worker-level control path: predictions for every worker plus one
//! controller decision, as a real runtime would run it between two iterations.

use pacer_control::worker::{make_controller, BatchBounds, BatchProblem, Observation};
use pacer_predict::speed::{make_predictors, Exogenous};
use serde::Serialize;
use std::time::Instant;

/// Mean microseconds per step of the control path for `workers` workers.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub workers: usize,
    pub controller: String,
    pub predictor: String,
    pub reps: u32,
    /// `predict_next` for every worker + `decide`: what stands between two iterations.
    pub predict_and_decide_us: f64,
    /// `observe` for every worker (can overlap with the next iteration).
    pub observe_us: f64,
}

/// Time `reps` rounds after a warm-up with synthetic, varying speeds and loads.
pub fn bench(
    workers: usize,
    controller: &str,
    predictor: &str,
    reps: u32,
    seed: u64,
) -> Result<BenchReport, String> {
    let b = 64 * workers as u64;
    let problem = BatchProblem::new(b, vec![BatchBounds { min: 1, max: b }; workers], false)
        .map_err(|e| e.to_string())?;
    let mut ctrl = make_controller(controller, &problem)
        .ok_or_else(|| format!("unknown controller `{controller}`"))?;
    let mut preds = make_predictors(predictor, seed, workers)
        .ok_or_else(|| format!("unknown predictor `{predictor}`"))?;
    let mut batches = problem.uniform();
    let mut predicted = vec![0.0; workers];
    let compute = vec![0.1; workers];
    let speed_of = |i: usize, k: u32| 500.0 + 50.0 * ((i * 31 + k as usize * 7) % 17) as f64;
    let exo_of = |i: usize, k: u32| Exogenous {
        cpu_load: if (i + k as usize) % 50 < 5 { 0.5 } else { 0.0 },
        mem_load: 0.0,
    };
    let (mut t_pd, mut t_obs) = (0.0, 0.0);
    let warm = 20;
    for k in 0..warm + reps {
        let t0 = Instant::now();
        for (i, p) in preds.iter().enumerate() {
            predicted[i] = p.predict_next(&exo_of(i, k)).unwrap_or(1.0);
        }
        ctrl.decide(
            &Observation {
                compute_s: &compute,
                predicted_speed: &predicted,
            },
            &mut batches,
        );
        let t1 = Instant::now();
        for (i, p) in preds.iter_mut().enumerate() {
            p.observe(speed_of(i, k), &exo_of(i, k));
        }
        let t2 = Instant::now();
        if k >= warm {
            t_pd += (t1 - t0).as_secs_f64();
            t_obs += (t2 - t1).as_secs_f64();
        }
    }
    std::hint::black_box(&batches);
    Ok(BenchReport {
        workers,
        controller: controller.to_string(),
        predictor: predictor.to_string(),
        reps,
        predict_and_decide_us: t_pd / reps as f64 * 1e6,
        observe_us: t_obs / reps as f64 * 1e6,
    })
}
