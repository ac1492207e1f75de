//! Numbers from peers, checked before they are used (issue 23). A worker is a peer
//! the controller does not control: one that sends NaN, ±Inf or an absurdly large
//! gradient once ruined the whole run silently (exit 0 at 10 % accuracy). Here:
//!
//! - **On arrival** (`iteration.rs`): every block of a gradient must have a finite
//!   `Σ g²` (computed anyway for the gradient noise scale, so the check is free: a
//!   NaN or ±Inf value, or one beyond ~1.8e19 whose square overflows, makes it
//!   non-finite), and a task's loss must be finite and ≥ 0.
//! - **At the end of the gather** ([`Run::screen`]): each task's `|g_i|²` against a
//!   robust reference of honest ones — the median of the last [`WINDOW`] accepted
//!   tasks' `|g|²` and of this iteration's. A task is implausible when
//!   `|g_i|² > K² · median · max(1, b_med / b_i)`: the mean gradient of a smaller
//!   batch is noisier, `E|g_i|² = |G|² + tr Σ / b_i`, and the factor covers that.
//!   With fewer than [`MIN_REFERENCE`] norms to compare (the first iteration of a
//!   run with one or two workers) there is no reference and only finiteness holds.
//!
//! A worker that fails either check is dropped at once with a line on stderr naming
//! it (id, name, address) and what was wrong; its tasks of the iteration are taken
//! out of the aggregate (rebuilt from the other tasks' blocks) and recomputed by the
//! others through the lost-worker retry path (`retry.rs`), so the step is the one
//! honest workers would have taken. The reference assumes an honest majority of the
//! norms it sees: a peer that scales its gradient by less than `K` is not caught
//! (that needs robust aggregation, not a screen), and neither is a majority of bad
//! peers. Parameters are checked at every evaluation and at the end
//! ([`check_params`]): non-finite parameters end the run with an error, never a
//! report or a checkpoint of a poisoned model.
//!
//! `K` = [`NORM_FACTOR`]: measured on honest runs of every bundled model on the
//! shipped `tiny` set (docs/runtime.md, "Numbers from peers"), the largest ratio
//! `|g_i| / (median · max(1, b_med/b_i))^½` seen was far below it.

use super::iteration::{Iteration, Task};
use super::run::Run;
use crate::error::RuntimeError;
use std::collections::VecDeque;
use std::time::Instant;

/// How many times the reference norm a task's gradient may have (see the module).
pub const NORM_FACTOR: f64 = 100.0;
/// Accepted tasks' norms the reference remembers.
pub const WINDOW: usize = 64;
/// Fewest norms (history and this iteration together) the screen compares against.
pub const MIN_REFERENCE: usize = 3;

/// One task answered in this iteration: what to take back if its worker is dropped.
pub(super) struct Done {
    pub(super) task: u64,
    pub(super) worker: u32,
    pub(super) stream_start: u64,
    pub(super) len: u64,
    pub(super) main: bool,
    /// `|g|²` of the task's gradient.
    pub(super) sqr: f64,
    pub(super) loss_sum: f64,
    pub(super) screened: bool,
}

/// The recent accepted norms, the reference of [`Run::screen`].
#[derive(Default)]
pub(super) struct NormHistory {
    /// (`|g|²`, batch) of the last [`WINDOW`] accepted tasks.
    recent: VecDeque<(f64, u64)>,
}

impl NormHistory {
    fn push(&mut self, sqr: f64, len: u64) {
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back((sqr, len));
    }
}

/// The lower median of `v` (sorted in place); `None` when empty.
fn lower_median<T: PartialOrd + Copy>(v: &mut [T]) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    Some(v[(v.len() - 1) / 2])
}

/// The ratio `|g|² / (median · max(1, b_med / b))` a gradient of batch `b` has
/// against the reference (`median`, `b_med`); `None` without a usable reference.
pub fn norm_ratio_sqr(sqr: f64, len: u64, median: f64, b_med: u64) -> Option<f64> {
    if median <= 0.0 || !median.is_finite() || len == 0 {
        return None;
    }
    let allowance = (b_med as f64 / len as f64).max(1.0);
    Some(sqr / (median * allowance))
}

/// What is wrong with a block of gradient values whose `Σ g²` is not finite.
pub(super) fn describe_bad_values(values: &[f32], offset: usize) -> String {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => format!("gradient value {} is {}", offset + i, values[i]),
        None => {
            let (i, v) = values
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
                .map_or((0, 0.0), |(i, v)| (i, *v));
            format!(
                "gradient value {} is {v:e}: its square overflows (no honest gradient comes near)",
                offset + i
            )
        }
    }
}

/// The first non-finite parameter, as an error naming the iteration.
pub fn check_params(params: &[f32], k: u64, what: &str) -> Result<(), RuntimeError> {
    match params.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(RuntimeError::Stopped(format!(
            "parameter {i} of {} is {} {what} (iteration {k}): the model diverged or a \
             peer's numbers got through; nothing is saved from a poisoned model",
            params.len(),
            params[i]
        ))),
    }
}

impl Run<'_> {
    /// Worker `id` sent numbers that cannot be used: said on stderr (always), kept in
    /// the report, and the worker is dropped (`handle_losses` retries its tasks).
    pub(super) fn bad_peer(&mut self, it: &mut Iteration, id: u32, what: String) {
        if it.lost_now.iter().any(|(w, _)| *w == id) {
            return;
        }
        let who = match self.active.iter().find(|m| m.id == id) {
            Some(m) => format!("worker {id} ({}, {})", m.name, m.addr),
            None => format!("worker {id}"),
        };
        let line = format!(
            "dropped {who} in iteration {}: {what}; its samples are recomputed by the others",
            self.k
        );
        eprintln!("pacer controller: {line}");
        self.report.bad_peers.push(line);
        it.lost_now.push((id, format!("bad numbers: {what}")));
    }

    /// The tasks answered since the last screen, against the reference: a worker with
    /// an implausible gradient is dropped and every task it answered in this
    /// iteration reopened (taken back out of the sums; `handle_losses` rebuilds the
    /// aggregate and retries them). `true` when someone was dropped.
    pub(super) fn screen(&mut self, it: &mut Iteration) -> bool {
        if it.done.iter().all(|d| d.screened) {
            return false;
        }
        let mut sqrs: Vec<f64> = self.norms.recent.iter().map(|r| r.0).collect();
        let mut lens: Vec<u64> = self.norms.recent.iter().map(|r| r.1).collect();
        for d in &it.done {
            sqrs.push(d.sqr);
            lens.push(d.len);
        }
        let enough = sqrs.len() >= MIN_REFERENCE;
        let median = lower_median(&mut sqrs).unwrap_or(0.0);
        let b_med = lower_median(&mut lens).unwrap_or(1);
        let limit = NORM_FACTOR * NORM_FACTOR;
        let mut offenders: Vec<(u32, String)> = Vec::new();
        for d in it.done.iter_mut().filter(|d| !d.screened) {
            d.screened = true;
            let ratio = enough
                .then(|| norm_ratio_sqr(d.sqr, d.len, median, b_med))
                .flatten();
            if let Some(r) = ratio.filter(|r| *r <= limit) {
                let m = &mut self.report.max_norm_ratio;
                *m = m.max(r.sqrt());
            }
            if let Some(r) = ratio.filter(|r| *r > limit) {
                if !offenders.iter().any(|o| o.0 == d.worker) {
                    offenders.push((
                        d.worker,
                        format!(
                            "its gradient for samples {}..{} has norm {:.3e}, {:.0} × the \
                             reference {:.3e} of honest ones (at most {NORM_FACTOR} ×)",
                            d.stream_start,
                            d.stream_start + d.len,
                            d.sqr.sqrt(),
                            r.sqrt(),
                            (median * (b_med as f64 / d.len as f64).max(1.0)).sqrt(),
                        ),
                    ));
                }
            }
        }
        for (id, what) in &offenders {
            self.reopen(it, *id);
            self.bad_peer(it, *id, what.clone());
        }
        // The accepted ones teach the reference.
        for d in &it.done {
            if d.screened && !offenders.iter().any(|o| o.0 == d.worker) {
                self.norms.push(d.sqr, d.len);
            }
        }
        // Each accepted task once: forget them (they stay in `blocks` and the sums).
        it.done.retain(|d| !d.screened);
        !offenders.is_empty()
    }

    /// Every task worker `id` answered in this iteration back to pending, its loss
    /// and samples out of the sums; marked as partly in the aggregate so that
    /// `handle_losses` rebuilds it without them.
    fn reopen(&mut self, it: &mut Iteration, id: u32) {
        let mine: Vec<Done> = {
            let (mine, rest) = std::mem::take(&mut it.done)
                .into_iter()
                .partition(|d| d.worker == id);
            it.done = rest;
            mine
        };
        for d in mine {
            it.weight_sum -= d.len;
            it.loss_sum -= d.loss_sum;
            if d.main {
                it.main_results.remove(&id);
                it.arrivals.remove(&id);
            }
            let k = self.k;
            self.report.ledger.retain(|e| {
                !(e.iteration == k && e.worker == id && e.stream_start == d.stream_start)
            });
            it.pending.insert(
                d.task,
                Task {
                    worker: id,
                    stream_start: d.stream_start,
                    len: d.len,
                    main: d.main,
                    sent: Instant::now(),
                    received: 1,
                    sqr: 0.0,
                },
            );
        }
    }
}
