//! One iteration on the wire: the Steps sent (with the previous iteration's deferred
//! optimiser step, range by range), then the gather — gradients and their parts
//! accumulated as they arrive, `g += (b_i / B) · g_i`, each checked to belong to a
//! task still pending and assigned to its sender. Losses go to `retry.rs`.

use super::connections::{recycle, Event, Out, WRITE_CHUNK};
use super::membership::{new_member, next_event, Wait};
use super::report::LedgerEntry;
use super::run::{Halt, Run};
use super::screen::{describe_bad_values, Done};
use crate::error::RuntimeError;
use crate::gns::{accumulate_sqr, clear_sqr, LocalNorm};
use crate::protocol::{self, Signals, StepTiming};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A range of the sample stream given to one worker in this iteration.
pub(super) struct Task {
    pub(super) worker: u32,
    pub(super) stream_start: u64,
    pub(super) len: u64,
    /// The worker's own batch (not a retry of another's).
    pub(super) main: bool,
    pub(super) sent: Instant,
    /// Gradient values received so far as parts (from 0).
    pub(super) received: usize,
    /// `Σ g²` of those values (the gradient noise scale's `|g_i|²` once complete).
    pub(super) sqr: f64,
}

/// One block of gradient accumulated in this iteration: (task, offset, weight, values).
pub(super) type Block = (u64, usize, f32, Vec<f32>);

/// The state of the iteration in flight, and what it measured.
#[derive(Default)]
pub(super) struct Iteration {
    /// The encoded parameters, shared by every Step (`None` when they go out in
    /// chunks behind the deferred optimiser step).
    pub(super) shared_tail: Option<Arc<Vec<u8>>>,
    pub(super) pending: BTreeMap<u64, Task>,
    /// Workers lost and not yet handled, with the reason.
    pub(super) lost_now: Vec<(u32, String)>,
    pub(super) named_batches: Vec<(String, u64)>,
    pub(super) t_sent: Option<Instant>,
    pub(super) t_sent_unix: f64,
    pub(super) t_last: Option<Instant>,
    pub(super) encode_s: f64,
    pub(super) send_work_s: f64,
    pub(super) overlapped_opt_s: f64,
    pub(super) local_norms: Vec<LocalNorm>,
    pub(super) disrupted: bool,
    /// Per worker, of its main task: (len, timing, decode time, signals).
    pub(super) main_results: HashMap<u32, (u64, StepTiming, f64, Signals)>,
    pub(super) arrivals: HashMap<u32, f64>,
    /// The last gradient's downlink and uplink (s).
    pub(super) last_links: (f64, f64),
    /// The last gradient's timing, its controller decode and accumulation.
    pub(super) last_piece: (StepTiming, f64, f64),
    pub(super) aggregate_total_s: f64,
    pub(super) weight_sum: u64,
    /// Σ of the per-sample training losses of the iteration's tasks.
    pub(super) loss_sum: f64,
    /// Every block of gradient accumulated in this iteration. Parts are summed into
    /// `acc` as they arrive (streaming aggregation); if a worker is lost after some
    /// of its task's parts arrived, `acc` is rebuilt from the blocks of the other
    /// tasks, so a partial gradient is never counted (and a retried range only once).
    pub(super) blocks: Vec<Block>,
    pub(super) optimizer_s: f64,
    pub(super) iter_s: f64,
    /// Tasks answered since the last screen of their norms (`screen.rs`).
    pub(super) done: Vec<super::screen::Done>,
}

impl Iteration {
    pub(super) fn gather_s(&self) -> f64 {
        match (self.t_sent, self.t_last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }
}

impl Run<'_> {
    /// Every member's Step: its range of the stream and the model.
    pub(super) async fn send(&mut self) -> Iteration {
        let mut it = Iteration::default();
        let chunked = self.deferred;
        if !chunked {
            let t_enc = Instant::now();
            protocol::encode_params_tail(&self.params, &mut self.tail);
            it.shared_tail = Some(Arc::new(std::mem::take(&mut self.tail)));
            it.encode_s = t_enc.elapsed().as_secs_f64();
        }
        // has_params, count, values
        let tail_len = 1 + 4 + self.params.len() * 4;
        let t_sent = Instant::now();
        it.t_sent = Some(t_sent);
        it.t_last = Some(t_sent);
        it.t_sent_unix = protocol::unix_now_s();
        let mut start = self.pos;
        it.named_batches = self
            .active
            .iter()
            .zip(&self.batches)
            .map(|(m, &b)| (m.name.clone(), b))
            .collect();
        let (k, version) = (self.k, self.version);
        for (m, &b) in self.active.iter_mut().zip(&self.batches) {
            let task = self.next_task;
            self.next_task += 1;
            let mut header =
                protocol::step_frame_header(task, k, version, start, b as u32, tail_len);
            let out = match &it.shared_tail {
                Some(t) => Out::Step {
                    header,
                    tail: t.clone(),
                },
                None => {
                    header.push(1);
                    header.extend_from_slice(&(self.params.len() as u32).to_le_bytes());
                    Out::Head(header)
                }
            };
            if m.tx.send(out).is_err() {
                it.lost_now.push((m.id, "connection closed".into()));
            }
            m.version = version;
            it.pending.insert(
                task,
                Task {
                    worker: m.id,
                    stream_start: start,
                    len: b,
                    main: true,
                    sent: Instant::now(),
                    received: 0,
                    sqr: 0.0,
                },
            );
            start += b;
        }
        if chunked {
            self.send_stepped_params(&mut it).await;
        }
        it
    }

    /// The previous iteration's optimiser step, deferred to here: applied range by
    /// range, each range sent as soon as it is updated, so the workers start on the
    /// first rows of the new model while the controller computes the rest.
    async fn send_stepped_params(&mut self, it: &mut Iteration) {
        // Let the writers send the Steps' headers first: a task woken from this
        // one waits in this runtime thread's LIFO slot, which no other thread
        // steals, until this task yields — otherwise the last worker reads its
        // header (and starts its step) only after the first range's optimiser
        // step and copy (downlink 0.097 → 0.071 ms, overhead −0.6 points at
        // time scale 3, experiments/runtime/RESULTS.md).
        tokio::task::yield_now().await;
        self.optimizer.begin_step();
        let n = self.params.len();
        let per = WRITE_CHUNK / 4;
        for a in (0..n).step_by(per) {
            let r = a..(a + per).min(n);
            let t0 = Instant::now();
            self.optimizer
                .step_range(&mut self.params, &self.acc, r.clone());
            let t1 = Instant::now();
            let mut bytes = Vec::new();
            protocol::f32s_le_bytes(&self.params[r], &mut bytes);
            let bytes = Arc::new(bytes);
            for m in &self.active {
                if m.tx.send(Out::Chunk(bytes.clone())).is_err()
                    && !it.lost_now.iter().any(|(w, _)| *w == m.id)
                {
                    it.lost_now.push((m.id, "connection closed".into()));
                }
            }
            it.overlapped_opt_s += (t1 - t0).as_secs_f64();
            it.encode_s += t1.elapsed().as_secs_f64();
            it.send_work_s += t0.elapsed().as_secs_f64();
            // Let the writers run.
            tokio::task::yield_now().await;
        }
        self.deferred = false;
    }

    /// Until every task of the iteration is answered: gradients accumulated, lost
    /// workers' tasks retried on the others.
    pub(super) async fn gather(&mut self, it: &mut Iteration) -> Result<(), Halt> {
        // The workers are computing: the last aggregate's norm costs nothing here.
        if self.gns.waiting() {
            self.gns.aggregate(clear_sqr(&mut self.acc));
        } else {
            self.acc.iter_mut().for_each(|v| *v = 0.0);
        }
        it.local_norms = Vec::with_capacity(self.active.len());
        loop {
            while !it.pending.is_empty() {
                if it.lost_now.is_empty() {
                    if let Some(ev) = self.next_or_overdue(it).await? {
                        self.on_event(it, ev);
                    }
                }
                self.handle_losses(it).await?;
            }
            // Every task answered: their norms against the reference; a worker
            // dropped for an implausible gradient has its tasks retried.
            if !self.screen(it) {
                break;
            }
            self.handle_losses(it).await?;
        }
        debug_assert_eq!(it.weight_sum, self.cfg.global_batch);
        Ok(())
    }

    /// The next event, or `None` once the oldest pending task is overdue (every
    /// worker whose task is overdue is then in `lost_now`).
    async fn next_or_overdue(&mut self, it: &mut Iteration) -> Result<Option<Event>, Halt> {
        let cfg = self.cfg;
        let oldest = it
            .pending
            .values()
            .map(|t| t.sent)
            .min()
            .unwrap_or_else(Instant::now);
        let deadline = oldest + Duration::from_secs_f64(cfg.worker_timeout_s);
        match next_event(self.events, deadline, cfg).await {
            Wait::Event(e) => Ok(Some(e)),
            Wait::Closed => Err(RuntimeError::Stopped("event channel closed".into()).into()),
            Wait::Interrupted => Err(Halt::Interrupted),
            Wait::TimedOut => {
                let now = Instant::now();
                for t in it.pending.values() {
                    if now.duration_since(t.sent).as_secs_f64() >= cfg.worker_timeout_s
                        && !it.lost_now.iter().any(|(w, _)| *w == t.worker)
                    {
                        it.lost_now.push((
                            t.worker,
                            format!(
                                "no answer within {} s (--worker-timeout-s)",
                                cfg.worker_timeout_s
                            ),
                        ));
                    }
                }
                Ok(None)
            }
        }
    }

    fn on_event(&mut self, it: &mut Iteration, ev: Event) {
        match ev {
            Event::Joined {
                id,
                name,
                addr,
                tx,
                written,
            } => self.joiners.push(new_member(id, name, addr, tx, written)),
            Event::Lost { id, reason } => it.lost_now.push((id, reason)),
            Event::GradientPart {
                id,
                task,
                iteration,
                offset,
                values,
            } => self.on_part(it, id, task, iteration, offset as usize, values),
            Event::Gradient {
                id,
                msg,
                decode_s,
                arrived_unix_s,
            } => self.on_gradient(it, id, msg, decode_s, arrived_unix_s),
        }
    }

    /// Values `[offset, offset + values.len())` of a task's gradient, ahead of its
    /// Gradient: summed at once if they continue the task's values.
    fn on_part(
        &mut self,
        it: &mut Iteration,
        id: u32,
        task: u64,
        iteration: u64,
        a: usize,
        values: Vec<f32>,
    ) {
        let n_params = self.params.len();
        let Some(t) = it
            .pending
            .get_mut(&task)
            .filter(|t| t.worker == id && iteration == self.k)
        else {
            // Late parts of a task retried elsewhere: dropped.
            recycle(self.grad_pool, values);
            return;
        };
        let n = values.len();
        if a != t.received || a + n > n_params {
            it.lost_now.push((
                id,
                format!(
                    "GradientPart for task {task} holds values {a}..{}, expected the next from {} of {}",
                    a + n,
                    t.received,
                    n_params
                ),
            ));
            recycle(self.grad_pool, values);
            return;
        }
        t.received += n;
        let t_agg = Instant::now();
        let w = t.len as f32 / self.cfg.global_batch as f32;
        let sqr = accumulate_sqr(&mut self.acc[a..a + n], w, &values);
        t.sqr += sqr;
        it.aggregate_total_s += t_agg.elapsed().as_secs_f64();
        // A NaN, an infinity or an overflowing value: the worker is dropped; the
        // aggregate is rebuilt without this task (it has `received > 0`).
        let bad = (!sqr.is_finite()).then(|| describe_bad_values(&values, a));
        it.blocks.push((task, a, w, values));
        if let Some(what) = bad {
            self.bad_peer(it, id, format!("task {task}: {what}"));
        }
    }

    /// A task's (last) Gradient: accepted only for a task still pending, assigned to
    /// the sender, whose values continue exactly where its parts ended.
    fn on_gradient(
        &mut self,
        it: &mut Iteration,
        id: u32,
        msg: super::connections::GradientMsg,
        decode_s: f64,
        arrived_unix_s: f64,
    ) {
        let k = self.k;
        let n_params = self.params.len();
        let ok = it
            .pending
            .get(&msg.task)
            .is_some_and(|t| t.worker == id && msg.iteration == k);
        if !ok {
            self.report.stale_results += 1;
            return;
        }
        let t = &it.pending[&msg.task];
        let first = msg.first as usize;
        if msg.len as u64 != t.len || first != t.received || first + msg.grad.len() != n_params {
            it.lost_now.push((
                id,
                format!(
                    "Gradient for task {} has len {} and values {first}..{}, expected len {} and values {}..{}",
                    msg.task, msg.len, first + msg.grad.len(), t.len, t.received, n_params
                ),
            ));
            return;
        }
        let t = it.pending.get_mut(&msg.task).expect("checked");
        let t_agg = Instant::now();
        let w = t.len as f32 / self.cfg.global_batch as f32;
        let last = accumulate_sqr(&mut self.acc[first..], w, &msg.grad);
        let sqr = t.sqr + last;
        // Numbers that cannot be used: the worker is dropped and the aggregate
        // rebuilt without this task (marked as partly summed), which is retried.
        let bad = if !last.is_finite() {
            Some(describe_bad_values(&msg.grad, first))
        } else if !(msg.loss_sum.is_finite() && msg.loss_sum >= 0.0) {
            Some(format!("its loss is {}", msg.loss_sum))
        } else {
            None
        };
        if let Some(what) = bad {
            t.received = t.received.max(1);
            let task = msg.task;
            recycle(self.grad_pool, msg.grad);
            self.bad_peer(it, id, format!("task {task}: {what}"));
            return;
        }
        let t = it.pending.remove(&msg.task).expect("checked");
        let agg_s = t_agg.elapsed().as_secs_f64();
        it.aggregate_total_s += agg_s;
        it.weight_sum += t.len;
        it.loss_sum += msg.loss_sum;
        it.last_piece = (msg.timing, decode_s, agg_s);
        it.last_links = (
            msg.timing.recv_unix_s - it.t_sent_unix,
            arrived_unix_s - msg.timing.send_unix_s,
        );
        it.t_last = Some(t_agg);
        if self.cfg.record_ledger {
            self.report.ledger.push(LedgerEntry {
                iteration: k,
                stream_start: t.stream_start,
                len: t.len,
                worker: id,
                retry: !t.main,
            });
        }
        if t.main {
            it.main_results
                .insert(id, (t.len, msg.timing, decode_s, msg.signals));
            it.arrivals.insert(id, arrived_unix_s);
        }
        it.local_norms.push(LocalNorm {
            stream_start: t.stream_start,
            len: t.len,
            sqr,
        });
        it.done.push(Done {
            task: msg.task,
            worker: id,
            stream_start: t.stream_start,
            len: t.len,
            main: t.main,
            sqr,
            loss_sum: msg.loss_sum,
            screened: false,
        });
        it.blocks.push((msg.task, first, w, msg.grad));
    }
}
