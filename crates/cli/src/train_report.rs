//! The report `pacer train` and `pacer controller` print at the end of a run: text, each
//! figure on its own line with its definition (`REPORT_FIELDS`, also in `--help`), or
//! `--json` (the runtime's `TrainReport` and the run's settings).

use crate::runtime_cmd::signal_name;
use pacer_runtime::controller::TrainReport;
use serde::Serialize;

/// What the text report prints, for `--help` (the README says the same).
pub(crate) const REPORT_FIELDS: &str = "\
Report (text; --json has the same numbers under the TrainReport field names):
  balance                mean time of an undisturbed iteration, and the oracle's: it knows each
                         worker's true speed (median over ±10 iterations) but not the jitter;
                         efficiency = oracle / iteration (above 1 when jitter hurt the oracle more)
  stricter bounds        the oracle with hindsight (knows every step's jitter), and perfect
                         balance with zero overhead, each over the achieved iteration time
  overhead               1 − Σ slowest step / Σ iteration: time not spent in worker compute
  speed prediction error |predicted − measured| / measured per step (measured = batch / step
                         time): median, and mean (MAPE; a step slowed k-fold adds k − 1)
  overruns               share of steps whose real work (slot wait + compute wall time) exceeded
                         the emulated target by > 2 %: contention the padding could not hide;
                         not measured when nothing is emulated (--speeds all 1, --time-scale 1)
  per iteration          control + encode params + wait (for the last gradient, without the
                         controller's own work meanwhile) + aggregate + optimiser + other
  gather                 Steps sent → last gradient in = the last worker's step + before it
                         (decode, waiting for parameters) + after it (encoding) + the
                         controller's decode + network (the rest: transfers both ways,
                         wake-ups; downlink and uplink from both sides' clocks)
  workers                one line per worker, by id (local workers: id i is local-i, the i-th
                         of --speeds): steps, mean batch, CPU and step time, samples/s, load
                         signals, overrun count, and sent / down / up times
An interrupted run (SIGINT) prints the same report for the iterations done, marked
INTERRUPTED, and exits with status 130.";

#[derive(Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    report: &'a TrainReport,
    speeds: Vec<f64>,
    time_scale: f64,
    interference: Option<String>,
}

pub(crate) fn print_report(
    r: &TrainReport,
    json: bool,
    speeds: Vec<f64>,
    time_scale: f64,
    interference: Option<String>,
) -> anyhow::Result<()> {
    if json {
        let o = Output {
            report: r,
            speeds,
            time_scale,
            interference,
        };
        putline!("{}", pacer_cli::json::pretty(&o)?);
        return Ok(());
    }
    if r.interrupted {
        putline!(
            "INTERRUPTED ({}) after {} iterations: the report covers the iterations done",
            signal_name(),
            r.iterations
        );
    }
    putline!(
        "{} on {} · {} workers · B = {} · {} ({}) + {}",
        r.model,
        r.dataset,
        r.workers,
        r.global_batch,
        r.controller,
        r.controller_variant,
        r.predictor
    );
    match (r.reached, r.time_to_target_s, r.target_accuracy) {
        (true, Some(t), Some(a)) => putline!(
            "reached {:.2}% in {:.2} s ({} iterations)",
            a * 100.0,
            t,
            r.iterations_to_target.unwrap_or(0)
        ),
        (false, _, Some(a)) => putline!("did not reach {:.2}%", a * 100.0),
        _ => {}
    }
    putline!(
        "final accuracy {:.2}% (best {:.2}%), {} iterations, {:.2} epochs, {:.2} s training",
        r.final_accuracy * 100.0,
        r.best_accuracy * 100.0,
        r.iterations,
        r.epochs,
        r.train_time_s
    );
    // Each figure on its own line with its definition, so that none reads as
    // contradicting another (`--help` has the full definitions).
    let mean_step_ms = if r.worker_stats.is_empty() {
        0.0
    } else {
        r.worker_stats.iter().map(|w| w.mean_step_ms).sum::<f64>() / r.worker_stats.len() as f64
    };
    putline!(
        "balance: iteration {:.2} ms; an oracle knowing each worker's true speed (not the next step's jitter) {:.2} ms: efficiency {:.3}{}",
        r.mean_iter_s * 1e3,
        r.ideal_iter_s * 1e3,
        r.efficiency,
        if r.efficiency > 1.0 {
            " (above 1: these batches did better than that oracle, which balances on median speeds)"
        } else {
            ""
        }
    );
    putline!(
        "  stricter bounds, as fractions of the achieved iteration: {:.3} against hindsight (knowing every step's jitter too), {:.3} against perfect balance with zero overhead; overhead {:.1}% of the time",
        r.hindsight_efficiency,
        r.compute_efficiency,
        r.overhead_frac * 100.0,
    );
    putline!(
        "speed prediction error per step: {:.1}% median, {:.1}% mean{}",
        r.speed_ape_median * 100.0,
        r.speed_mape * 100.0,
        if mean_step_ms > 0.0 && mean_step_ms < 10.0 {
            format!(" (steps of {mean_step_ms:.1} ms: at this length timer and scheduling noise dominate)")
        } else {
            String::new()
        }
    );
    let emulated = time_scale > 1.0 || speeds.iter().any(|&v| v < 1.0);
    if emulated || speeds.is_empty() {
        putline!(
            "overruns: {:.1}% of steps ran past their emulated target by > 2% (contention the padding could not hide){}",
            r.overrun_frac * 100.0,
            if emulated {
                ""
            } else {
                "; with no emulated slowdown on a worker every step counts"
            }
        );
    } else {
        putline!("overruns: not measured (no emulated slowdown: every --speeds is 1 and --time-scale is 1)");
    }
    let o = &r.overhead;
    putline!("per iteration (ms): {:.3} = control {:.3} + encode params {:.3} + wait {:.3} + aggregate {:.3} + optimiser {:.3} + other {:.3}",
        o.iter_ms, o.control_ms, o.encode_params_ms, o.wait_ms, o.aggregate_ms, o.optimizer_ms, o.other_ms
    );
    putline!("  gather {:.3} (Steps sent → last gradient in) = last worker's step {:.3} (slowest step {:.3}) + before {:.3} (decode {:.3}) + after {:.3} (encode {:.3}) + controller decode {:.3} + network {:.3} (downlink {:.3}, uplink {:.3})",
        o.gather_ms, o.last_step_ms, o.compute_ms, o.worker_pre_ms, o.worker_decode_ms, o.worker_post_ms, o.worker_encode_ms, o.ctrl_decode_ms, o.network_ms, o.downlink_ms, o.uplink_ms
    );
    if r.joins + r.leaves > 0 {
        putline!(
            "membership: {} joined, {} left, {} tasks retried, {} stale results ignored",
            r.joins,
            r.leaves,
            r.retried_tasks,
            r.stale_results
        );
    }
    for x in &r.rejected {
        putline!("refused {x}");
    }
    putline!("workers (id name address; means per step):");
    for w in &r.worker_stats {
        putline!("  {:>2} {:<12} {:<21} {:>5} steps  batch {:>6.1}  cpu {:>7.2} ms  step {:>7.2} ms  {:>8.0} samples/s  load {:.2} (max {:.2})  /proc busy {:.2} mem {:.2} load1 {:.2}  overruns {}  sent {:.2} down {:.2} up {:.2} ms",
            w.id, w.name, w.addr, w.steps, w.mean_batch, w.mean_cpu_ms, w.mean_step_ms,
            w.mean_samples_per_s, w.mean_cpu_load, w.max_cpu_load, w.mean_proc_cpu_busy,
            w.mean_proc_mem_used, w.mean_loadavg1, w.overruns, w.mean_sent_ms,
            w.mean_downlink_ms, w.mean_uplink_ms
        );
    }
    match (r.gradient_noise_scale, r.grad_sqr, r.trace_cov) {
        (Some(b), Some(g), Some(t)) => putline!("gradient noise scale {b:.1} samples (|G|² {g:.4e}, tr Σ {t:.4e}; {} iterations observed, {} skipped)",
            r.gns_iterations, r.gns_skipped
        ),
        _ if r.gns_iterations > 0 => putline!("gradient noise scale: not resolved ({} iterations observed, {} skipped): |G|² is still within its noise, so B_noise is only known to be much larger than the batch",
            r.gns_iterations, r.gns_skipped
        ),
        _ => putline!("gradient noise scale: none ({} iterations observed, {} skipped)",
            r.gns_iterations, r.gns_skipped
        ),
    }
    if let (Some(b), Some(g)) = (r.goodput_optimal_batch, r.goodput_gain) {
        putline!(
            "goodput-optimal global batch now {b:.0} (of {}–{}): goodput {g:.3}× that of B = {}",
            r.global_batch,
            r.max_global_batch,
            r.global_batch
        );
    }
    let batches: Vec<String> = r
        .final_batches_named
        .iter()
        .map(|(w, b)| format!("{w}: {b}"))
        .collect();
    putline!("final batches {}", batches.join(", "));
    Ok(())
}
