//! The event clock ([`ArrivalReplan::Events`]), as ElasticFlow's simulator keeps
//! time: no fixed rounds; the next round is at the next event (an arrival, a running
//! job's completion, the policy's own wake-up, [`Policy::wake_s`]) but at least
//! `round_s` after the last round, events inside that window taken together at last
//! + `round_s`. The first round is at the first arrival.
//!
//! A completion is found before the clock moves past it: copies of the running
//! jobs' states are advanced over the whole candidate round with the same arithmetic
//! as [`RunState::advance`], the earliest completion among them ends the round, and
//! the real states are then advanced to it ([`RunState::settle`] takes a copy's
//! state where rounding left the real one a hair short of its end).
//!
//! A policy that asks for it ([`Policy::charges_event_overhead`]: `elasticflow`) has
//! every running job charged its kind's per-event overhead at each round
//! ([`RunState::charge_event_overhead`]), as ElasticFlow's simulator charges at each
//! of its events. One that asks for it ([`Policy::end_event_slot_s`]:
//! `elasticflow-mbpc`) has the round a completion calls at ElasticFlow's end event for
//! the job ([`end_event`]) rather than at the completion.

use super::*;
use std::collections::HashSet;

impl Simulation<'_> {
    /// End of the round that starts now: [`Simulation::next_round`], or under the
    /// event clock [`Simulation::next_event`]. `wake`: the policy's wake-up;
    /// `first`: no round yet; `probe` receives the copies of the jobs the round
    /// sees complete.
    pub(super) fn round_end(
        &self,
        m: &Models<'_>,
        r: &RunState<'_>,
        wake: Option<f64>,
        first: bool,
        idle: bool,
        probe: &mut Vec<(usize, JobState)>,
    ) -> f64 {
        probe.clear();
        if m.replan == ArrivalReplan::Events {
            self.next_event(m, r, wake, first, probe)
        } else {
            self.next_round(m, r.now, idle, r.next_arrival)
        }
    }

    /// The next event, at least `round_s` after now (unless `first`).
    fn next_event(
        &self,
        m: &Models<'_>,
        r: &RunState<'_>,
        wake: Option<f64>,
        first: bool,
        probe: &mut Vec<(usize, JobState)>,
    ) -> f64 {
        let cfg = &self.config;
        let now = r.now;
        let lower = if first { now } else { now + cfg.round_s };
        let arrival = m
            .order
            .get(r.next_arrival)
            .map_or(f64::INFINITY, |&j| self.jobs[j].spec.arrival_s);
        let next = arrival.min(wake.unwrap_or(f64::INFINITY));
        let horizon = lower.max(next.min(cfg.max_time_s));
        let mut done = f64::INFINITY;
        for &i in &r.running {
            if r.states[i].completion_s.is_some() {
                continue;
            }
            let mut st = r.states[i].clone();
            self.step_copy(m, i, &mut st, now, horizon - now);
            if let Some(c) = st.completion_s {
                let end = match m.end_event_slot_s {
                    Some(slot) => end_event(now, r.states[i].rescale_left_s, c, slot),
                    None => c,
                };
                done = done.min(end);
                probe.push((i, st));
            }
        }
        if done < horizon {
            lower.max(done)
        } else {
            horizon
        }
    }

    /// One running job's progress over `dt` from `now`, as [`RunState::advance`]
    /// computes it.
    fn step_copy(&self, m: &Models<'_>, i: usize, st: &mut JobState, now: f64, dt: f64) {
        if st.steady_round(dt).is_some() || st.completion_s.is_some() {
            return;
        }
        m.kinds[i].advance(self, &m.round(self, i), st, now, dt);
    }
}

/// ElasticFlow's end event for a job that completes at `c` when the round at `now`
/// charged it `delay` (its per-event overhead, with any restart delay left): `now +
/// delay` plus the work's time rounded up to whole `slot`s, as its simulator schedules
/// a job's end from its plan (docs/elasticflow.md, "The end event"). A billionth of a
/// slot of float error does not add a slot.
fn end_event(now: f64, delay: f64, c: f64, slot: f64) -> f64 {
    let start = now + delay;
    let slots = ((c - start) / slot - 1e-9).ceil().max(0.0);
    (start + slots * slot).max(c)
}

impl Models<'_> {
    /// What job `i`'s round of progress depends on besides its state (the fields
    /// [`RunState::advance`] hands its kind).
    fn round<'r>(&'r self, sim: &'r Simulation<'_>, i: usize) -> progress::Round<'r> {
        progress::Round {
            job: &sim.jobs[i],
            mode: self.modes[i],
            speed: &self.speeds[i],
            uses_quality: self.uses_quality,
        }
    }
}

impl RunState<'_> {
    /// After [`RunState::advance`] under the event clock: a job whose copy completed
    /// by now but whose own state did not (the round ends at its completion and
    /// rounding can leave it a hair short) takes its copy's state, and is retired
    /// with the others.
    pub(super) fn settle(&mut self, m: &Models<'_>, probe: &[(usize, JobState)]) {
        let mut added = false;
        for (i, copy) in probe {
            let i = *i;
            let st = &self.states[i];
            if st.completion_s.is_some() || copy.completion_s.is_none_or(|c| c > self.now) {
                continue;
            }
            self.busy_gpu_s += copy.attained_gpu_s - st.attained_gpu_s;
            self.states[i] = copy.clone();
            self.finished += 1;
            self.just_finished.push(i);
            self.holds[i] = false;
            self.attained.retain(|&(id, _)| id.0 as usize != i);
            added = true;
        }
        if added {
            self.just_finished.sort_unstable_by_key(|&i| m.rank[i]);
        }
    }
}

/// What [`RunState::charge_event_overhead`] keeps between rounds.
#[derive(Debug, Default)]
pub(super) struct EventOverhead {
    /// Rounds charged so far (ElasticFlow's `schedule_count`).
    rounds: u64,
    /// The last round was a periodic restart.
    after_restart: bool,
    /// The jobs whose allocation this round changes ([`RunState::note_changes`]).
    changed: Vec<usize>,
    /// By placement ([`Policy::event_overhead_by_placement`]): the placements held by
    /// any job since the last periodic restart (ElasticFlow's `LOG.cache`; a placement
    /// is pacer's allocation, its devices per node).
    cache: HashSet<Allocation>,
    /// By placement: this round's running jobs' placements were in `cache` (in
    /// `running`'s order; kept to save an allocation per round).
    cached: Vec<bool>,
}

impl RunState<'_> {
    /// Before [`RunState::apply`]: the jobs whose allocation changes this round.
    pub(super) fn note_changes(&mut self) {
        self.events.changed.clear();
        self.events
            .changed
            .extend(self.changes.iter().map(|(id, _)| id.0 as usize));
        self.events.changed.sort_unstable();
    }

    /// After [`RunState::apply`]: every running job pays its kind's per-event
    /// overhead (on top of the restart delay a changed allocation pays), as a delay
    /// before its next progress; every `round_s`-th round (ElasticFlow's
    /// `scheduling_slot`-th event) is a periodic restart. `by_placement`: the policy's
    /// [`Policy::event_overhead_by_placement`].
    pub(super) fn charge_event_overhead(&mut self, m: &Models<'_>, by_placement: bool) {
        if by_placement {
            self.charge_event_overhead_by_placement(m);
            return;
        }
        let sim = self.sim;
        let every = (sim.config.round_s.round() as u64).max(1);
        let ev = &mut self.events;
        let restart = ev.rounds > 0 && ev.rounds.is_multiple_of(every);
        ev.rounds += 1;
        for &i in &self.running {
            let st = &mut self.states[i];
            if st.alloc.is_empty() || st.completion_s.is_some() {
                continue;
            }
            let kept = ev.changed.binary_search(&i).is_err();
            st.rescale_left_s +=
                m.kinds[i].event_overhead_s(sim, &st.alloc, kept, restart, ev.after_restart);
        }
        ev.after_restart = restart;
    }

    /// [`RunState::charge_event_overhead`] by placement
    /// ([`Policy::event_overhead_by_placement`]), as ElasticFlow's simulator charges at
    /// the end of each event (`utils.estimate_overhead`): a running job's delay before
    /// its next progress becomes its kind's per-event overhead, the smaller one when its
    /// placement is cached (held by any job, itself or another, since the last periodic
    /// restart) whether or not its own allocation changed, the full restart overhead for
    /// its size when not. Every `round_s`-th round is a periodic restart, after which
    /// the cache starts empty. The overhead replaces the restart delay of a changed
    /// allocation and any delay left from the last round (ElasticFlow resets each job's
    /// overhead at every event and does not carry what a short interval left unpaid).
    fn charge_event_overhead_by_placement(&mut self, m: &Models<'_>) {
        let sim = self.sim;
        let every = (sim.config.round_s.round() as u64).max(1);
        let ev = &mut self.events;
        let restart = ev.rounds > 0 && ev.rounds.is_multiple_of(every);
        ev.rounds += 1;
        // All looked up before any is added: two jobs may share a key (pacer's
        // placement names a node's devices by count, not position).
        let states = &self.states;
        let holds = |i: usize| !states[i].alloc.is_empty() && states[i].completion_s.is_none();
        ev.cached.clear();
        ev.cached.extend(
            self.running
                .iter()
                .map(|&i| holds(i) && ev.cache.contains(&states[i].alloc)),
        );
        if restart {
            ev.cache.clear();
        } else {
            for (&i, &cached) in self.running.iter().zip(&ev.cached) {
                if holds(i) && !cached {
                    ev.cache.insert(states[i].alloc.clone());
                }
            }
        }
        for (&i, &cached) in self.running.iter().zip(&ev.cached) {
            let st = &mut self.states[i];
            if st.alloc.is_empty() || st.completion_s.is_some() {
                continue;
            }
            st.rescale_left_s = m.kinds[i].placement_overhead_s(sim, &st.alloc, cached, restart);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::end_event;

    #[test]
    fn end_event_is_the_rounds_time_plus_the_delay_plus_whole_slots() {
        // ElasticFlow's job 1 on cluster 01: a round at 68,556 s charges 17 s, the
        // work takes 563.4 s (done at 69,136.4 s): 10 slots of 60 s, end at 69,173 s.
        assert_eq!(end_event(68_556.0, 17.0, 69_136.4, 60.0), 69_173.0);
        // Work of exactly whole slots ends there, a float hair past it included.
        assert_eq!(end_event(0.0, 8.0, 108.0, 10.0), 108.0);
        assert_eq!(end_event(0.0, 8.0, 108.0 + 1e-12, 10.0), 108.0 + 1e-12);
        assert_eq!(end_event(0.0, 8.0, 108.5, 10.0), 118.0);
    }
}
