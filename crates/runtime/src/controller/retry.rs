//! A worker lost in the middle of an iteration: dropped, and its tasks split among
//! the survivors by predicted speed, with the same model version, so the iteration
//! completes on exactly the samples it was given (see the module docs of
//! `controller`). Parts of the lost tasks already summed are taken out of the
//! aggregate by rebuilding it from the other tasks' blocks.

use super::connections::{recycle, Out};
use super::iteration::{Iteration, Task};
use super::membership::sync_session;
use super::run::{Halt, Run};
use crate::protocol::Message;
use pacer_control::worker::{apportion, BatchBounds};
use std::time::Instant;

impl Run<'_> {
    /// Every worker in `it.lost_now`: dropped, its tasks retried.
    pub(super) async fn handle_losses(&mut self, it: &mut Iteration) -> Result<(), Halt> {
        let k = self.k;
        while let Some((id, reason)) = it.lost_now.pop() {
            let Some(i) = self.active.iter().position(|m| m.id == id) else {
                self.joiners.retain(|m| m.id != id);
                continue;
            };
            let dead = self.active.remove(i);
            let _ = dead.tx.send(Out::Close(None));
            self.report.leaves += 1;
            it.disrupted = true;
            if self.cfg.verbose {
                eprintln!(
                    "pacer controller: worker {} ({}) lost in iteration {k}: {reason}",
                    dead.id, dead.addr
                );
            }
            let orphans: Vec<u64> = it
                .pending
                .iter()
                .filter(|(_, t)| t.worker == id)
                .map(|(&task, _)| task)
                .collect();
            if orphans.is_empty() {
                continue;
            }
            if orphans.iter().any(|t| it.pending[t].received > 0) {
                self.drop_blocks(it, &orphans);
            }
            // Capacity for the retries: survivors, else a worker that joined.
            self.await_capacity(true).await?;
            sync_session(&mut self.session, &self.active);
            let speeds = self.session.predicted_speeds();
            for task in orphans {
                let t = it.pending.remove(&task).expect("listed");
                self.retry(it, &t, &speeds);
            }
        }
        Ok(())
    }

    /// Parts of the orphans already in `acc`: rebuild it without them.
    fn drop_blocks(&mut self, it: &mut Iteration, orphans: &[u64]) {
        let t_agg = Instant::now();
        let mut kept = Vec::with_capacity(it.blocks.len());
        for b in it.blocks.drain(..) {
            if orphans.contains(&b.0) {
                recycle(self.grad_pool, b.3);
            } else {
                kept.push(b);
            }
        }
        it.blocks = kept;
        self.acc.iter_mut().for_each(|v| *v = 0.0);
        for (_, a, w, values) in &it.blocks {
            for (s, g) in self.acc[*a..*a + values.len()].iter_mut().zip(values) {
                *s += w * g;
            }
        }
        it.aggregate_total_s += t_agg.elapsed().as_secs_f64();
    }

    /// Task `t` of a lost worker, split among the members by `speeds`.
    fn retry(&mut self, it: &mut Iteration, t: &Task, speeds: &[f64]) {
        let (k, version) = (self.k, self.version);
        let bounds = vec![BatchBounds { min: 0, max: t.len }; self.active.len()];
        let mut parts = vec![0u64; self.active.len()];
        apportion(speeds, t.len, &bounds, &mut parts);
        let mut s = t.stream_start;
        for (m, &len) in self.active.iter_mut().zip(&parts) {
            if len == 0 {
                continue;
            }
            let task = self.next_task;
            self.next_task += 1;
            self.report.retried_tasks += 1;
            let include = m.version != version;
            let mut frame = Vec::new();
            Message::Step {
                task,
                iteration: k,
                version,
                stream_start: s,
                len: len as u32,
                params: include.then(|| self.params.clone()),
            }
            .encode(&mut frame);
            if m.tx.send(Out::Frame(frame)).is_err() {
                it.lost_now.push((m.id, "connection closed".into()));
            }
            m.version = version;
            it.pending.insert(
                task,
                Task {
                    worker: m.id,
                    stream_start: s,
                    len,
                    main: false,
                    sent: Instant::now(),
                    received: 0,
                    sqr: 0.0,
                },
            );
            s += len;
        }
    }
}
