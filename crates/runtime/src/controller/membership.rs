//! Who trains: the members, the workers that joined and wait for the next iteration
//! boundary, the wait for the first workers, and the one wait for capacity once
//! every worker is gone (at a boundary or in the middle of an iteration).

use super::connections::{Event, Out};
use super::report::TrainReport;
use super::run::{Halt, Run};
use super::ControllerConfig;
use crate::error::RuntimeError;
use pacer_control::session::{JobSession, WorkerKey};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often the training loop looks at [`ControllerConfig::interrupt`] while it
/// waits for events.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);

pub(super) struct Member {
    pub(super) id: u32,
    pub(super) name: String,
    pub(super) addr: SocketAddr,
    pub(super) tx: mpsc::UnboundedSender<Out>,
    /// UNIX time (f64 bits) the connection last wrote the first chunk of a Step.
    pub(super) written: Arc<AtomicU64>,
    /// Last measured speed (samples/s), 0 before the first (its predictor lives in the
    /// job session).
    pub(super) speed: f64,
    /// Model version this worker holds.
    pub(super) version: u64,
}

pub(super) fn new_member(
    id: u32,
    name: String,
    addr: SocketAddr,
    tx: mpsc::UnboundedSender<Out>,
    written: Arc<AtomicU64>,
) -> Member {
    Member {
        id,
        name,
        addr,
        tx,
        written,
        speed: 0.0,
        version: u64::MAX,
    }
}

pub(super) fn interrupted(cfg: &ControllerConfig) -> bool {
    cfg.interrupt.is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Said at once, whatever `verbose` says: otherwise a run whose workers all died
/// is silent until the rejoin wait ends.
fn all_gone_notice(cfg: &ControllerConfig, k: u64) {
    eprintln!(
        "pacer controller: every worker is gone (iteration {k}); waiting up to {} s for one to join (--rejoin-timeout-s)",
        cfg.rejoin_timeout_s
    );
}

pub(super) enum Wait {
    Event(Event),
    Closed,
    TimedOut,
    Interrupted,
}

/// The next event before `deadline`, looking at the interrupt flag every
/// [`INTERRUPT_POLL`].
pub(super) async fn next_event(
    events: &mut mpsc::UnboundedReceiver<Event>,
    deadline: Instant,
    cfg: &ControllerConfig,
) -> Wait {
    loop {
        if interrupted(cfg) {
            return Wait::Interrupted;
        }
        // An event already there wins over a deadline already past.
        match events.try_recv() {
            Ok(e) => return Wait::Event(e),
            Err(mpsc::error::TryRecvError::Disconnected) => return Wait::Closed,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Wait::TimedOut;
        }
        let mut step = deadline - now;
        if cfg.interrupt.is_some() {
            step = step.min(INTERRUPT_POLL);
        }
        match tokio::time::timeout(step, events.recv()).await {
            Ok(Some(e)) => return Wait::Event(e),
            Ok(None) => return Wait::Closed,
            Err(_) => {}
        }
    }
}

/// Brings the session's membership to `active` (sorted by id, as the session keeps its
/// members): the workers gone leave, the new ones join.
pub(super) fn sync_session(session: &mut JobSession, active: &[Member]) {
    let gone: Vec<WorkerKey> = session
        .workers()
        .filter(|w| !active.iter().any(|m| u64::from(m.id) == w.0))
        .collect();
    for w in gone {
        session.leave(w).expect("a member");
    }
    for m in active {
        // Already a member: nothing to do.
        let _ = session.join(WorkerKey(u64::from(m.id)), None);
    }
    debug_assert!(session
        .workers()
        .map(|w| w.0)
        .eq(active.iter().map(|m| u64::from(m.id))));
}

/// Waits for the first `cfg.min_workers` workers (within `cfg.join_timeout_s`); an
/// interrupt ends the wait with the report marked `interrupted`.
pub(super) async fn wait_for_first_workers(
    cfg: &ControllerConfig,
    events: &mut mpsc::UnboundedReceiver<Event>,
    report: &mut TrainReport,
) -> Result<Vec<Member>, RuntimeError> {
    let mut joiners = Vec::new();
    let join_deadline = Instant::now() + Duration::from_secs_f64(cfg.join_timeout_s);
    while joiners.len() < cfg.min_workers.max(1) {
        match next_event(events, join_deadline, cfg).await {
            Wait::TimedOut => {
                return Err(RuntimeError::Stopped(format!(
                    "only {} of the {} workers needed joined within {} s",
                    joiners.len(),
                    cfg.min_workers,
                    cfg.join_timeout_s
                )))
            }
            Wait::Interrupted => {
                report.interrupted = true;
                break;
            }
            Wait::Closed => return Err(RuntimeError::Stopped("event channel closed".into())),
            Wait::Event(Event::Joined {
                id,
                name,
                addr,
                tx,
                written,
            }) => joiners.push(new_member(id, name, addr, tx, written)),
            Wait::Event(Event::Lost { id, .. }) => joiners.retain(|m| m.id != id),
            Wait::Event(Event::Gradient { .. }) => report.stale_results += 1,
            Wait::Event(Event::GradientPart { .. }) => {}
        }
    }
    Ok(joiners)
}

impl Run<'_> {
    /// The iteration boundary: the events that came meanwhile (joins, losses, stale
    /// results), then the joiners become members.
    pub(super) fn boundary(&mut self) {
        while let Ok(ev) = self.events.try_recv() {
            match ev {
                Event::Joined {
                    id,
                    name,
                    addr,
                    tx,
                    written,
                } => self.joiners.push(new_member(id, name, addr, tx, written)),
                Event::Lost { id, reason } => {
                    if let Some(i) = self.active.iter().position(|m| m.id == id) {
                        let m = self.active.remove(i);
                        self.report.leaves += 1;
                        if self.cfg.verbose {
                            eprintln!(
                                "pacer controller: worker {} ({}) left: {reason}",
                                m.id, m.addr
                            );
                        }
                    }
                    self.joiners.retain(|m| m.id != id);
                }
                Event::Gradient { .. } => self.report.stale_results += 1,
                // Parts of a stale result: its Gradient is counted when it comes.
                Event::GradientPart { .. } => {}
            }
        }
        if !self.joiners.is_empty() {
            let k = self.k;
            if k > 0 {
                self.report.joins += self.joiners.len() as u64;
            }
            for m in &self.joiners {
                if self.cfg.verbose && k > 0 {
                    eprintln!(
                        "pacer controller: worker {} ({}, {}) joined at iteration {k}",
                        m.id, m.name, m.addr
                    );
                }
            }
            self.admit_joiners();
        }
    }

    fn admit_joiners(&mut self) {
        self.active.append(&mut self.joiners);
        self.active.sort_by_key(|m| m.id);
    }

    /// Until there is a member again: the joiners waiting are admitted, else a worker
    /// must join within `--rejoin-timeout-s` (said on stderr at once). The wait is not
    /// training time. `in_iteration`: every worker was lost in the middle of one (its
    /// tasks wait for the newcomer), which the error says.
    pub(super) async fn await_capacity(&mut self, in_iteration: bool) -> Result<(), Halt> {
        if self.active.is_empty() && self.joiners.is_empty() {
            all_gone_notice(self.cfg, self.k);
        }
        let deadline = Instant::now() + Duration::from_secs_f64(self.cfg.rejoin_timeout_s);
        while self.active.is_empty() {
            if !self.joiners.is_empty() {
                self.report.joins += self.joiners.len() as u64;
                self.admit_joiners();
                continue;
            }
            let t_wait = Instant::now();
            match next_event(self.events, deadline, self.cfg).await {
                Wait::Event(Event::Joined {
                    id,
                    name,
                    addr,
                    tx,
                    written,
                }) => self.joiners.push(new_member(id, name, addr, tx, written)),
                Wait::Event(_) => {}
                Wait::Interrupted => return Err(Halt::Interrupted),
                Wait::TimedOut | Wait::Closed => {
                    let (k, s) = (self.k, self.cfg.rejoin_timeout_s);
                    return Err(Halt::Failed(RuntimeError::Stopped(if in_iteration {
                        format!("every worker was lost in iteration {k} and none joined within {s} s (`rejoin_timeout_s`)")
                    } else {
                        format!("every worker is gone (at iteration {k}) and none joined within {s} s (`rejoin_timeout_s`)")
                    })));
                }
            }
            self.clock.excluded += t_wait.elapsed();
        }
        Ok(())
    }
}
