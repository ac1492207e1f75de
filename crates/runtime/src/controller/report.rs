//! What a run reports: per-iteration [`Progress`], the final [`TrainReport`], and
//! the sums behind its timing numbers (the oracle of `ideal_iter_s`, the step rate
//! behind the goodput-optimal batch).

use super::ControllerConfig;
use crate::gns::{GnsInput, NoiseScalePoint, StepRate};
use crate::optim::OptimSpec;
use pacer_control::session::IterationObservation;
use pacer_predict::speed::Exogenous;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Progress after each iteration (for a progress bar).
#[derive(Debug, Clone)]
pub struct Progress {
    pub iteration: u64,
    pub epoch: f64,
    pub train_time_s: f64,
    pub accuracy: Option<f64>,
    /// (worker id, local batch) of the iteration that just ran.
    pub batches: Vec<(u32, u64)>,
    /// Gradient noise scale so far (samples; one iteration behind, see [`crate::gns`]).
    pub noise_scale: Option<f64>,
    /// What the job session observed of the iteration that just ran (a replay of these
    /// through a fresh [`JobSession`](pacer_control::session::JobSession) decides the same batches; test
    /// `the_runtime_decides_what_the_session_decides_on_a_replay`).
    pub observed: Vec<IterationObservation>,
    /// The load signals each worker reported for the start of its next iteration.
    pub next_signals: Vec<(u32, Exogenous)>,
}

/// A callback called after every iteration.
pub type ProgressFn = Box<dyn FnMut(&Progress) + Send>;

/// One accumulated gradient: which stream range, from whom, in which iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LedgerEntry {
    pub iteration: u64,
    pub stream_start: u64,
    pub len: u64,
    pub worker: u32,
    pub retry: bool,
}

/// Most points a report's curves (`accuracy_curve`, `noise_scale_curve`) keep: a long
/// run's `--json` stays bounded (one point every 10–16 iterations made an 80 KB
/// report after 3,000 iterations).
pub const CURVE_CAP: usize = 512;

/// Appends `point`; once the curve holds more than [`CURVE_CAP`] points, every other
/// point is dropped, the first and the last kept, so the curve spans the whole run at
/// a resolution that halves as it grows.
pub fn push_capped<T>(curve: &mut Vec<T>, point: T) {
    curve.push(point);
    if curve.len() > CURVE_CAP {
        let last = curve.len() - 1;
        let mut i = 0;
        curve.retain(|_| {
            let keep = i % 2 == 0 || i == last;
            i += 1;
            keep
        });
    }
}

/// A test-set evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EvalPoint {
    pub iteration: u64,
    pub train_time_s: f64,
    pub accuracy: f64,
    pub loss: f64,
}

/// Where an iteration's time goes: mean milliseconds per undisturbed iteration.
/// `iter = control + encode_params + wait + aggregate + optimizer + other`, and the
/// wait for the last gradient splits into that worker's `pre + step + post`, the
/// controller's decode of it, and `network` (transfer both ways, wake-ups, queuing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Overhead {
    pub iter_ms: f64,
    /// Slowest worker's step (real compute + emulation padding): not overhead.
    pub compute_ms: f64,
    /// Controller: predictions + batch decision.
    pub control_ms: f64,
    /// Controller: encoding the parameters (once for all workers).
    pub encode_params_ms: f64,
    /// Controller: from the Steps queued to the last gradient received, less its
    /// own work meanwhile (the deferred optimiser step and parameter encoding, in
    /// their columns), so that `iter` adds up.
    pub wait_ms: f64,
    /// The whole interval from the Steps queued to the last gradient received
    /// (`wait` plus the controller's work meanwhile): what the last worker's
    /// `pre + step + post`, the controller's decode and `network` add up to.
    pub gather_ms: f64,
    /// The last worker to answer: its step, the part before it (decoding the
    /// parameters, of which `worker_decode_ms`) and after it (signals, encoding the
    /// gradient, of which `worker_encode_ms`).
    pub last_step_ms: f64,
    pub worker_pre_ms: f64,
    pub worker_decode_ms: f64,
    pub worker_post_ms: f64,
    pub worker_encode_ms: f64,
    /// Controller: decoding the last gradient.
    pub ctrl_decode_ms: f64,
    /// `gather − last_step − worker_pre − worker_post − ctrl_decode`: the time
    /// outside the last worker's own interval (transfers both ways, wake-ups,
    /// queuing). Each term is a duration on one clock, so it is ≥ 0 up to timer
    /// noise, on one host or across hosts.
    pub network_ms: f64,
    /// Of the last worker: Steps queued → its Step fully read (includes the queue
    /// of writes to the other workers and its thread's wake-up), and its Gradient
    /// written → fully read by the controller. From wall clocks on both sides:
    /// exact on one host, offset by the clock difference across hosts.
    pub downlink_ms: f64,
    pub uplink_ms: f64,
    /// Controller: accumulating the last gradient (the earlier ones overlap waiting).
    pub aggregate_ms: f64,
    /// Controller: all accumulations of the iteration (CPU, mostly off the path).
    pub aggregate_total_ms: f64,
    pub optimizer_ms: f64,
    /// Bookkeeping between iterations.
    pub other_ms: f64,
}

/// What one worker did and reported (means over its main tasks): the NARX inputs
/// as the controller saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkerStats {
    pub id: u32,
    pub name: String,
    pub addr: String,
    pub steps: u64,
    pub samples: u64,
    pub mean_batch: f64,
    /// Thread CPU time of the real compute.
    pub mean_cpu_ms: f64,
    /// Emulated step (compute + padding).
    pub mean_step_ms: f64,
    pub mean_samples_per_s: f64,
    /// Load signal the predictor saw at the start of the worker's iterations.
    pub mean_cpu_load: f64,
    pub max_cpu_load: f64,
    /// /proc: machine CPU busy share, memory in use, 1-minute load per core.
    pub mean_proc_cpu_busy: f64,
    pub mean_proc_mem_used: f64,
    pub mean_loadavg1: f64,
    /// Steps whose real work exceeded their emulated target (see
    /// [`TrainReport::overrun_frac`]).
    pub overruns: u64,
    /// Controller: Steps queued → the first chunk of this worker's Step written
    /// into its socket.
    pub mean_sent_ms: f64,
    /// Steps queued → this worker's Step fully read by it (wall clocks of both
    /// sides: exact on one host).
    pub mean_downlink_ms: f64,
    /// Its Gradient written → fully read by the controller.
    pub mean_uplink_ms: f64,
}

/// The result of a training run.
#[derive(Debug, Clone, Serialize)]
pub struct TrainReport {
    pub controller: String,
    pub controller_variant: String,
    pub predictor: String,
    pub model: String,
    pub dataset: String,
    pub workers: usize,
    pub global_batch: u64,
    pub optimizer: OptimSpec,
    pub target_accuracy: Option<f64>,
    pub reached: bool,
    pub time_to_target_s: Option<f64>,
    pub iterations_to_target: Option<u64>,
    pub iterations: u64,
    pub epochs: f64,
    pub final_accuracy: f64,
    pub final_loss: f64,
    pub best_accuracy: f64,
    pub train_time_s: f64,
    pub mean_iter_s: f64,
    /// Mean iteration time of an oracle balancer that knows every worker's true
    /// speed but not the next step's jitter — the scenario simulator's oracle. Per
    /// iteration `k`: worker `i`'s true speed `v̄_ik` is the median of its measured
    /// speeds `v_i = b_i / step_s_i` over iterations `k ± ORACLE_WINDOW`; the
    /// oracle gives it `b*_i = B · v̄_ik / Σ_j v̄_jk` samples, which take
    /// `b*_i / v_ik` at the speed it actually had; the iteration lasts the slowest
    /// of those plus this iteration's `overhead_k` (iteration time − slowest step),
    /// the synchronisation cost the simulator's oracle pays as `sync_s`.
    pub ideal_iter_s: f64,
    /// `ideal_iter_s / mean_iter_s`: how close the batches came to the oracle's balance.
    pub efficiency: f64,
    /// Stricter, with hindsight no balancer has: the oracle also knows each
    /// iteration's jitter, i.e. mean of `B / Σ_i v_ik + overhead_k` over the mean
    /// iteration time (`v_ik` measured in the same iteration).
    pub hindsight_efficiency: f64,
    /// Stricter: `mean(B / Σ_i v_i) / mean_iter_s`, perfect balance and zero
    /// overhead (= efficiency × (1 − overhead) when balanced).
    pub compute_efficiency: f64,
    /// `1 − Σ max_i step_s / Σ iteration time`: time not spent in worker compute.
    pub overhead_frac: f64,
    pub overhead: Overhead,
    /// Mean absolute percentage error of the one-step speed predictions (fraction):
    /// mean over steps of `|predicted − measured| / measured`, measured speed =
    /// local batch / step time. A step slowed k-fold by contention adds `k − 1`, so
    /// on a loaded machine a few such steps dominate it: see `speed_ape_median`.
    pub speed_mape: f64,
    /// Median of the same absolute percentage errors: the typical step.
    pub speed_ape_median: f64,
    /// Share of steps whose real work (wait for a compute slot and for the compute
    /// thread to wake, plus the real compute's wall time) exceeded the emulated
    /// target by more than 2 %: contention the padding could not hide, so the
    /// worker ran slower than its emulated speed.
    pub overrun_frac: f64,
    /// Whether the controller's training loop ran at real-time priority
    /// (`ControllerConfig::realtime_io`, granted).
    pub realtime_io: bool,
    /// The run was stopped by [`ControllerConfig::interrupt`] (SIGINT): the numbers
    /// are those of the iterations completed before it.
    pub interrupted: bool,
    /// Iterations disturbed by a failure (excluded from the timing means).
    pub disrupted_iterations: u64,
    pub joins: u64,
    pub leaves: u64,
    pub retried_tasks: u64,
    pub stale_results: u64,
    /// Connections refused, with the reason sent to the peer.
    pub rejected: Vec<String>,
    /// Workers dropped for numbers that cannot be used (NaN, ±Inf, an implausible
    /// gradient norm, a bad loss): the line said on stderr, naming the worker and
    /// what was wrong (`controller/screen.rs`).
    pub bad_peers: Vec<String>,
    /// The largest `|g_i|` of an accepted gradient over the screen's reference
    /// (`controller/screen.rs`; a worker is dropped above `NORM_FACTOR`): how close
    /// honest gradients came to the limit. 0 until the screen has a reference.
    pub max_norm_ratio: f64,
    /// Workers admitted (`id name address`), in admission order.
    pub admitted: Vec<String>,
    /// In worker-id order (ids are given in connection order).
    pub final_batches: Vec<u64>,
    /// (worker name, local batch) of the last iteration: which worker got what.
    pub final_batches_named: Vec<(String, u64)>,
    /// Every evaluation, at most [`CURVE_CAP`] points ([`push_capped`]).
    pub accuracy_curve: Vec<EvalPoint>,
    /// Gradient noise scale `B_noise = tr Σ / |G|²` (samples) at the end of training,
    /// from the workers' gradients (`crate::gns`); `None` without an observed iteration
    /// (one worker, every iteration disrupted).
    pub gradient_noise_scale: Option<f64>,
    /// Its smoothed `|G|²` (squared norm of the true gradient) and `tr Σ` (per-sample
    /// gradient variance), as `pacer_predict::gns::GnsEstimator` reports them.
    pub grad_sqr: Option<f64>,
    pub trace_cov: Option<f64>,
    /// Iterations the estimate observed, and those it skipped (disrupted, fewer than
    /// two non-empty tasks, a non-finite norm).
    pub gns_iterations: u64,
    pub gns_skipped: u64,
    /// The estimate at every evaluation (and at the end), at most [`CURVE_CAP`] points.
    pub noise_scale_curve: Vec<NoiseScalePoint>,
    /// The global batch with the highest goodput at the end of training, between
    /// the run's `global_batch` and `max_global_batch` (Pollux's efficiency from the
    /// noise scale; step time `B / Σ v_i + overhead` from the medians over the last
    /// 10–50 undisturbed iterations), and its goodput over the run's batch. `None`
    /// without a noise scale or those iterations. Reported, not applied: the run's
    /// batch stays what was asked.
    pub goodput_optimal_batch: Option<f64>,
    pub goodput_gain: Option<f64>,
    pub max_global_batch: u64,
    /// Per worker, in id order (including those that left).
    pub worker_stats: Vec<WorkerStats>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ledger: Vec<LedgerEntry>,
    #[serde(skip)]
    pub grads: Vec<Vec<f32>>,
    /// What the gradient-noise estimator was fed, first `record_grads` observations.
    #[serde(skip)]
    pub gns_inputs: Vec<GnsInput>,
    #[serde(skip)]
    pub final_params: Vec<f32>,
}

// ------------------------------------------------------------------ connections

// ------------------------------------------------------------------ sums

#[derive(Default)]
pub(super) struct Sums {
    pub(super) iters: u64,
    pub(super) iter_s: f64,
    pub(super) compute_s: f64,
    pub(super) ideal_s: f64,
    pub(super) balanced_s: f64,
    pub(super) control_s: f64,
    pub(super) encode_s: f64,
    pub(super) wait_s: f64,
    pub(super) gather_s: f64,
    pub(super) downlink_s: f64,
    pub(super) uplink_s: f64,
    pub(super) last_step_s: f64,
    pub(super) worker_pre_s: f64,
    pub(super) worker_decode_s: f64,
    pub(super) worker_post_s: f64,
    pub(super) worker_encode_s: f64,
    pub(super) ctrl_decode_s: f64,
    pub(super) aggregate_last_s: f64,
    pub(super) aggregate_total_s: f64,
    pub(super) optimizer_s: f64,
    pub(super) ape: f64,
    pub(super) ape_n: u64,
    /// Every absolute percentage error, for the median.
    pub(super) apes: Vec<f32>,
    pub(super) steps: u64,
    pub(super) overruns: u64,
    /// Per counted iteration: global batch, overhead (iteration − slowest step)
    /// and each worker's measured speed, for the oracle of `ideal_iter_s`.
    pub(super) records: Vec<IterRecord>,
}

#[derive(Clone)]
pub(super) struct IterRecord {
    pub(super) batch: f64,
    pub(super) overhead_s: f64,
    pub(super) speeds: Vec<(u32, f64)>,
}

/// Iterations (the last undisturbed ones) the step rate behind the goodput-optimal
/// batch is measured over, and the fewest it needs.
const RATE_WINDOW: usize = 50;
const RATE_MIN: usize = 10;

/// `B / Σ v + overhead` from the medians of `Σ v` and of the overhead over the last
/// [`RATE_WINDOW`] undisturbed iterations (medians: one stalled iteration must not
/// move the answer); `None` with fewer than [`RATE_MIN`].
pub(super) fn recent_rate(records: &[IterRecord]) -> Option<StepRate> {
    let last = &records[records.len().saturating_sub(RATE_WINDOW)..];
    if last.len() < RATE_MIN {
        return None;
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let samples_per_s = median(
        last.iter()
            .map(|r| r.speeds.iter().map(|s| s.1).sum::<f64>())
            .collect(),
    );
    let overhead_s = median(last.iter().map(|r| r.overhead_s).collect());
    (samples_per_s.is_finite() && samples_per_s > 0.0).then_some(StepRate {
        samples_per_s,
        overhead_s,
    })
}

/// Half-width (iterations) of the window whose median speed the oracle of
/// [`TrainReport::ideal_iter_s`] takes as a worker's true speed.
const ORACLE_WINDOW: usize = 10;

/// Mean oracle iteration time (see [`TrainReport::ideal_iter_s`]); 0 without records.
pub(super) fn oracle_mean_iter_s(records: &[IterRecord]) -> f64 {
    if records.is_empty() {
        return 0.0;
    }
    // Each worker's speed series and, per record, its index in that series.
    let mut series: HashMap<u32, Vec<f64>> = HashMap::new();
    let positions: Vec<Vec<usize>> = records
        .iter()
        .map(|r| {
            r.speeds
                .iter()
                .map(|&(id, v)| {
                    let s = series.entry(id).or_default();
                    s.push(v);
                    s.len() - 1
                })
                .collect()
        })
        .collect();
    let mut window = Vec::with_capacity(2 * ORACLE_WINDOW + 1);
    let mut total = 0.0;
    for (r, pos) in records.iter().zip(&positions) {
        let true_speed: Vec<f64> = r
            .speeds
            .iter()
            .zip(pos)
            .map(|(&(id, _), &p)| {
                let s = &series[&id];
                window.clear();
                window.extend_from_slice(
                    &s[p.saturating_sub(ORACLE_WINDOW)..(p + ORACLE_WINDOW + 1).min(s.len())],
                );
                window.sort_by(f64::total_cmp);
                let m = window.len();
                if m % 2 == 1 {
                    window[m / 2]
                } else {
                    0.5 * (window[m / 2 - 1] + window[m / 2])
                }
            })
            .collect();
        let sum: f64 = true_speed.iter().sum();
        let slowest = r
            .speeds
            .iter()
            .zip(&true_speed)
            .map(|(&(_, v), &tv)| r.batch * tv / sum / v)
            .fold(0.0, f64::max);
        total += slowest + r.overhead_s;
    }
    total / records.len() as f64
}

impl TrainReport {
    /// The report before the first iteration: what was asked, nothing measured.
    pub(super) fn start(cfg: &ControllerConfig, model: &str, dataset: &str) -> TrainReport {
        TrainReport {
            controller: cfg.controller.clone(),
            controller_variant: String::new(),
            predictor: cfg.predictor.clone(),
            model: model.to_string(),
            dataset: dataset.to_string(),
            workers: 0,
            global_batch: cfg.global_batch,
            optimizer: cfg.optimizer,
            target_accuracy: cfg.target_accuracy,
            reached: false,
            time_to_target_s: None,
            iterations_to_target: None,
            iterations: 0,
            epochs: 0.0,
            final_accuracy: 0.0,
            final_loss: 0.0,
            best_accuracy: 0.0,
            train_time_s: 0.0,
            mean_iter_s: 0.0,
            ideal_iter_s: 0.0,
            efficiency: 0.0,
            compute_efficiency: 0.0,
            hindsight_efficiency: 0.0,
            overhead_frac: 0.0,
            overhead: Overhead::default(),
            speed_mape: 0.0,
            speed_ape_median: 0.0,
            overrun_frac: 0.0,
            realtime_io: crate::sysinfo::thread_is_realtime(),
            interrupted: false,
            disrupted_iterations: 0,
            joins: 0,
            leaves: 0,
            retried_tasks: 0,
            stale_results: 0,
            rejected: Vec::new(),
            bad_peers: Vec::new(),
            max_norm_ratio: 0.0,
            admitted: Vec::new(),
            final_batches: Vec::new(),
            final_batches_named: Vec::new(),
            accuracy_curve: Vec::new(),
            gradient_noise_scale: None,
            grad_sqr: None,
            trace_cov: None,
            gns_iterations: 0,
            gns_skipped: 0,
            noise_scale_curve: Vec::new(),
            goodput_optimal_batch: None,
            goodput_gain: None,
            max_global_batch: 0,
            worker_stats: Vec::new(),
            ledger: Vec::new(),
            grads: Vec::new(),
            gns_inputs: Vec::new(),
            final_params: Vec::new(),
        }
    }

    /// The timing numbers (means per undisturbed iteration, efficiencies, where the
    /// time went, prediction errors, overruns) from the sums of the run.
    pub(super) fn fill_timing(&mut self, sums: &mut Sums) {
        let report = self;
        let it = sums.iters.max(1) as f64;
        report.mean_iter_s = sums.iter_s / it;
        report.ideal_iter_s = oracle_mean_iter_s(&sums.records);
        if sums.iter_s > 0.0 {
            report.efficiency = report.ideal_iter_s / report.mean_iter_s;
            report.hindsight_efficiency = sums.ideal_s / sums.iter_s;
            report.compute_efficiency = sums.balanced_s / sums.iter_s;
        }
        report.overhead_frac = if sums.iter_s > 0.0 {
            1.0 - sums.compute_s / sums.iter_s
        } else {
            0.0
        };
        let ms = |s: f64| s / it * 1e3;
        let mut o = Overhead {
            iter_ms: ms(sums.iter_s),
            compute_ms: ms(sums.compute_s),
            control_ms: ms(sums.control_s),
            encode_params_ms: ms(sums.encode_s),
            wait_ms: ms(sums.wait_s),
            gather_ms: ms(sums.gather_s),
            last_step_ms: ms(sums.last_step_s),
            worker_pre_ms: ms(sums.worker_pre_s),
            worker_decode_ms: ms(sums.worker_decode_s),
            worker_post_ms: ms(sums.worker_post_s),
            worker_encode_ms: ms(sums.worker_encode_s),
            ctrl_decode_ms: ms(sums.ctrl_decode_s),
            network_ms: 0.0,
            downlink_ms: ms(sums.downlink_s),
            uplink_ms: ms(sums.uplink_s),
            aggregate_ms: ms(sums.aggregate_last_s),
            aggregate_total_ms: ms(sums.aggregate_total_s),
            optimizer_ms: ms(sums.optimizer_s),
            other_ms: 0.0,
        };
        // From the whole interval Steps queued → last gradient in, not from `wait`: the
        // controller's sending work (left out of `wait`, counted in encode and
        // optimiser) runs while the workers already step, and the last worker's
        // `pre`/`step` covered it too, so subtracting both went negative.
        o.network_ms =
            o.gather_ms - o.last_step_ms - o.worker_pre_ms - o.worker_post_ms - o.ctrl_decode_ms;
        o.other_ms = o.iter_ms
            - o.control_ms
            - o.encode_params_ms
            - o.wait_ms
            - o.aggregate_ms
            - o.optimizer_ms;
        report.overhead = o;
        report.speed_mape = if sums.ape_n > 0 {
            sums.ape / sums.ape_n as f64
        } else {
            0.0
        };
        if !sums.apes.is_empty() {
            sums.apes.sort_by(f32::total_cmp);
            let n = sums.apes.len();
            report.speed_ape_median = f64::from(if n % 2 == 1 {
                sums.apes[n / 2]
            } else {
                0.5 * (sums.apes[n / 2 - 1] + sums.apes[n / 2])
            });
        }
        report.overrun_frac = sums.overruns as f64 / sums.steps.max(1) as f64;
    }
}

/// Each worker's sums divided by its steps: the means of [`WorkerStats`].
pub(super) fn worker_means(wstats: BTreeMap<u32, WorkerStats>) -> Vec<WorkerStats> {
    wstats
        .into_values()
        .map(|mut w| {
            let n = w.steps.max(1) as f64;
            w.mean_batch = w.samples as f64 / n;
            for v in [
                &mut w.mean_cpu_ms,
                &mut w.mean_step_ms,
                &mut w.mean_samples_per_s,
                &mut w.mean_cpu_load,
                &mut w.mean_proc_cpu_busy,
                &mut w.mean_proc_mem_used,
                &mut w.mean_loadavg1,
                &mut w.mean_sent_ms,
                &mut w.mean_downlink_ms,
                &mut w.mean_uplink_ms,
            ] {
                *v /= n;
            }
            w
        })
        .collect()
}

#[cfg(test)]
mod curve_tests {
    use super::{push_capped, CURVE_CAP};

    #[test]
    fn a_capped_curve_spans_the_run_and_stays_bounded() {
        let mut c = Vec::new();
        for i in 0..100_000u32 {
            push_capped(&mut c, i);
            assert!(c.len() <= CURVE_CAP);
            assert_eq!((c[0], *c.last().unwrap()), (0, i), "first and last kept");
        }
        assert!(c.len() >= CURVE_CAP / 2, "{} points", c.len());
        assert!(c.windows(2).all(|w| w[0] < w[1]), "order kept");
        // A short run keeps every point.
        let mut s = Vec::new();
        (0..CURVE_CAP as u32).for_each(|i| push_capped(&mut s, i));
        assert_eq!(s, (0..CURVE_CAP as u32).collect::<Vec<_>>());
    }
}
