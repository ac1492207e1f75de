//! Spare devices by ElasticFlow's marginal ([`DeadlineConfig::ef_marginal`]): its
//! simulator's `allocate_free_gpus` and `get_marginal` (`scheduler.py`).
//!
//! Each candidate job's next size step is simulated on the timeline of free devices
//! with the job's own plan given back: at the next size from now, to its end when it
//! ends before the free devices next change (and meets its deadline); otherwise at the
//! next size until that change (or its deadline's slot when there is none), the rest
//! re-planned from there as a minimum share is ([`Timeline::plan`]: as late as
//! possible with `mix`; greedily when no share meets the deadline). The marginal is
//! the change in planned device-time per added device (a job holding none first).
//! One job steps at a time, the largest marginal first, and every marginal is
//! computed again after each step; the order is kept between steps (a stable sort,
//! first by deadline), as ElasticFlow's list is.
//!
//! Device-time is counted as ElasticFlow's `get_allocation_time` counts it on the
//! plans `ef_sim_allocation` leaves: a share planned on the timeline holds its last
//! size up to the first change of the free devices at or after its end when that
//! comes before its deadline's slot (that plan's next allocation is there, of no
//! devices), else to its end; a step that runs to its end at one size counts to its
//! end.
//!
//! [`DeadlineConfig::ef_marginal`]: super::DeadlineConfig::ef_marginal

use super::plan::{ceil_slots, PlanJob, Span, Spans, Timeline};

/// A plan and the slot its device-time is counted to (at least its end).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Counted {
    pub spans: Spans,
    pub to: usize,
}

impl Counted {
    /// ElasticFlow's device-time of the plan, in device-slots: each run's devices
    /// over its slots, the last run's up to `to`.
    fn device_slots(&self) -> u64 {
        let mut sum: u64 = self
            .spans
            .iter()
            .map(|s| u64::from(s.2) * s.1.saturating_sub(s.0) as u64)
            .sum();
        if let Some(last) = self.spans.last() {
            sum += u64::from(last.2) * self.to.saturating_sub(last.1) as u64;
        }
        sum
    }
}

/// The slot ElasticFlow counts a share planned as `spans` on `timeline` (before its
/// devices are taken) to: the first change of the free devices at or after its end
/// when that comes before its deadline's slot (its plan's next allocation, 0 devices,
/// is there), else its end.
pub(super) fn counted_to(timeline: &Timeline, job: &PlanJob, spans: &[Span]) -> usize {
    let end = spans.last().map_or(0, |s| s.1);
    let ddl = job
        .deadline_s
        .map(|d| ceil_slots((d - timeline.now_s) / timeline.slot_s - 1e-9));
    match timeline.change_from(job.ty, end) {
        Some(c) if ddl.is_none_or(|d| c < d) => c,
        _ => end,
    }
}

/// One job's part in [`spare`]: its plan now and its simulated next step.
struct Cand {
    job: usize,
    plan: Counted,
    /// The plan the next step gives it, and the devices now in it.
    next: Option<(Counted, u32)>,
    marginal: f64,
    /// It took a step this round.
    stepped: bool,
}

/// `job`'s next size step on `timeline` (its plan `plan` given back, `devices` held
/// now): the new plan and the marginal, or `None` when it has no larger size or the
/// step does not fit the devices free now (`spare`).
fn step(
    timeline: &Timeline,
    job: &PlanJob,
    plan: &Counted,
    devices: u32,
    spare: u32,
    mix: bool,
) -> Option<(Counted, f64)> {
    let next = job.next_level(devices)?;
    if next - devices > spare {
        return None;
    }
    let mut tmp = timeline.clone();
    tmp.give_back(job.ty, &plan.spans);
    let (now, slot) = (tmp.now_s, tmp.slot_s);
    let rate = job.rate(next);
    // ElasticFlow counts whole seconds to the end, then whole slots.
    let secs = (job.work_left / rate).ceil();
    let end = ceil_slots(secs / slot - 1e-9).max(1);
    let ddl_slot = job.deadline_s.map(|d| ceil_slots((d - now) / slot - 1e-9));
    let change = tmp.change_from(job.ty, 1);
    let until = change.or(ddl_slot);
    let meets = job.deadline_s.is_none_or(|d| d >= now + secs);
    let whole = |end: usize| Counted {
        spans: Spans::from_slice(&[(0, end, next)]),
        to: end,
    };
    let new = match until {
        Some(u) if u > 0 && !(u >= end && meets) => {
            // At the next size until the free devices change (or its deadline), the
            // rest planned from there.
            let ran = if change.is_some() {
                u as f64 * slot
            } else {
                job.deadline_s.map_or(0.0, |d| d - now)
            };
            let left = job.work_left - rate * ran;
            if left <= 0.0 {
                whole(end)
            } else {
                let mut spans = Spans::from_slice(&[(0, u, next)]);
                tmp.reserve(job, &spans);
                let mut rest = job.clone();
                rest.work_left = left;
                rest.current = next;
                let from = tmp.seen_from(u);
                let p = from.clone().plan(&rest, mix);
                let to = if p.feasible {
                    counted_to(&from, &rest, &p.spans) + u
                } else {
                    p.spans.last().map_or(u, |s| s.1 + u)
                };
                spans.extend(p.spans.iter().map(|s| (s.0 + u, s.1 + u, s.2)));
                Counted { spans, to }
            }
        }
        _ => whole(end),
    };
    let marginal = if devices == 0 {
        f64::INFINITY
    } else {
        (new.device_slots() as f64 - plan.device_slots() as f64) / f64::from(next - devices)
    };
    Some((new, marginal))
}

/// The first slot after the current one where `spans` change their devices before
/// their end (`None`: they hold one size to the end).
fn change_in(spans: &[Span]) -> Option<usize> {
    let first = spans.first()?;
    let n0 = if first.0 == 0 { first.2 } else { 0 };
    let mut at = 0usize;
    for s in spans {
        if s.0 > at && n0 != 0 {
            return Some(at);
        }
        if s.2 != n0 && s.0 > 0 {
            return Some(s.0);
        }
        at = s.1;
    }
    None
}

/// Shares the devices `timeline` leaves free now among `cands` (indices into `jobs`,
/// each with its plan so far) as ElasticFlow's `allocate_free_gpus` does, raising
/// `counts` and lowering `spare`. Returns the first later slot where a job that
/// stepped changes its devices (ElasticFlow's next "scale event" from those jobs).
pub(super) fn spare(
    timeline: &Timeline,
    jobs: &[PlanJob],
    cands: Vec<(usize, Counted)>,
    counts: &mut [u32],
    spare: &mut [u32],
    mix: bool,
) -> Option<usize> {
    let mut timeline = timeline.clone();
    let mut cands: Vec<Cand> = cands
        .into_iter()
        .map(|(job, plan)| Cand {
            job,
            plan,
            next: None,
            marginal: f64::NEG_INFINITY,
            stepped: false,
        })
        .collect();
    // ElasticFlow's list is in deadline order when its loop starts.
    cands.sort_by(|a, b| {
        let (ja, jb) = (&jobs[a.job], &jobs[b.job]);
        let da = ja.deadline_s.unwrap_or(f64::INFINITY);
        let db = jb.deadline_s.unwrap_or(f64::INFINITY);
        da.total_cmp(&db).then(ja.id.cmp(&jb.id))
    });
    loop {
        for c in cands.iter_mut() {
            let j = &jobs[c.job];
            let s = spare.get(j.ty).copied().unwrap_or(0);
            match step(&timeline, j, &c.plan, counts[c.job], s, mix) {
                Some((plan, m)) => {
                    let n = plan.spans.first().filter(|s| s.0 == 0).map_or(0, |s| s.2);
                    c.next = Some((plan, n));
                    c.marginal = m;
                }
                None => {
                    c.next = None;
                    c.marginal = f64::NEG_INFINITY;
                }
            }
        }
        // Largest marginal first, ties kept in the list's order (a stable sort).
        cands.sort_by(|a, b| b.marginal.total_cmp(&a.marginal));
        let Some(k) = cands.iter().position(|c| c.next.is_some()) else {
            break;
        };
        let c = &mut cands[k];
        let j = &jobs[c.job];
        let (plan, n) = c.next.take().expect("checked");
        timeline.give_back(j.ty, &c.plan.spans);
        timeline.reserve(j, &plan.spans);
        spare[j.ty] -= n - counts[c.job];
        counts[c.job] = n;
        c.plan = plan;
        c.stepped = true;
    }
    cands
        .iter()
        .filter(|c| c.stepped)
        .filter_map(|c| change_in(&c.plan.spans))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pacer_model::{ClusterSpec, JobId};

    fn job(id: u32, levels: &[(u32, f64)], work: f64, deadline: f64, current: u32) -> PlanJob {
        PlanJob {
            id: JobId(id),
            ty: 0,
            levels: levels.into(),
            work_left: work,
            deadline_s: Some(deadline),
            restart_s: 0.0,
            restart_s_per_doubling: 0.0,
            current,
        }
    }

    fn counted(spans: &[Span]) -> Counted {
        Counted {
            spans: Spans::from_slice(spans),
            to: spans.last().map_or(0, |s| s.1),
        }
    }

    /// 8 devices, 10 s slots. P holds 2 (work 60 at 1.5/s: slots 0-3), Q 1 (work 10
    /// at 1/s: slot 0), R 3 (its only size) for slots 0-19; 2 devices are spare.
    /// Worked through ElasticFlow's `allocate_free_gpus` by hand (seconds from now):
    /// - `get_marginal(P)`, 2 -> 4: the free devices with P given back are
    ///   {0: 4, 10: 5, 200: 8}; at 4 devices P would end at 30 s, after the change at
    ///   10 s, so `ef_sim_allocation` runs it at 4 until 10 s (20 of its 60 units) and
    ///   plans the other 40 as late as possible from there: 1 device from the last
    ///   breakpoint where it alone meets the deadline (10 s), to 50 s. Allocations
    ///   {0: 4, 10: 1}, GPU-time 4 x 10 + 1 x 40 = 80 against 2 x 40 = 80: marginal 0.
    /// - `get_marginal(Q)`, 1 -> 2: with Q given back the devices next change at 40 s;
    ///   at 2 devices it ends at ceil(10 / 1.5) = 7 s (slot 10 s), before that: GPU-time
    ///   2 x 10 against 1 x 10, marginal 10 (1 in device-slots).
    /// - R has no larger size (-maxsize). Sorted: Q, P, R. Q steps to 2; then P needs
    ///   2 more devices and R none larger, with 1 spare: no step is left.
    ///
    /// Had P's step been kept at 4 devices to its end (ElasticFlow's branch for a
    /// step that ends before the free devices change), P's marginal would be
    /// (4 x 30 - 80) / 2 = 20 s per device, above Q's, and P would step first; by
    /// remaining time saved per device (`elasticflow`'s rule) P saves 10 s / 2 and Q
    /// 3.3 s / 1, P first as well.
    #[test]
    fn a_step_past_the_next_change_re_plans_the_rest_and_loses_its_turn() {
        let cluster = ClusterSpec::parse("1x8:t4", "t").unwrap();
        let mut t = Timeline::new(&cluster, 0.0, 10.0);
        t.switch_at_breakpoints();
        let lv = [(1, 1.0), (2, 1.5), (4, 2.0)];
        let jobs = [
            job(1, &lv, 60.0, 200.0, 2),
            job(2, &lv, 10.0, 300.0, 1),
            job(3, &[(3, 1.0)], 200.0, 400.0, 3),
        ];
        let plans = [
            counted(&[(0, 4, 2)]),
            counted(&[(0, 1, 1)]),
            counted(&[(0, 20, 3)]),
        ];
        for (j, p) in jobs.iter().zip(&plans) {
            t.reserve(j, &p.spans);
        }
        assert_eq!(t.free(0, 0), 2);

        let (p_next, p_marginal) = step(&t, &jobs[0], &plans[0], 2, 2, true).unwrap();
        assert_eq!(p_next.spans.as_slice(), &[(0, 1, 4), (1, 5, 1)]);
        assert_eq!(p_marginal, 0.0);
        let (q_next, q_marginal) = step(&t, &jobs[1], &plans[1], 1, 2, true).unwrap();
        assert_eq!(q_next.spans.as_slice(), &[(0, 1, 2)]);
        assert_eq!(q_marginal, 1.0);
        assert!(step(&t, &jobs[2], &plans[2], 3, 2, true).is_none());
        // Not enough spare for P's step: no step.
        assert!(step(&t, &jobs[0], &plans[0], 2, 1, true).is_none());

        let mut counts = [2, 1, 3];
        let mut spare_now = [2];
        let cands = (0..3).map(|i| (i, plans[i].clone())).collect();
        let wake = spare(&t, &jobs, cands, &mut counts, &mut spare_now, true);
        assert_eq!(counts, [2, 2, 3]);
        assert_eq!(spare_now, [1]);
        // Q's new plan holds 2 devices to its end: no size change to wake for.
        assert_eq!(wake, None);
    }

    /// ElasticFlow's plan of a share leaves its next allocation (no devices) at the
    /// first change of the free devices at or after its end when that is before its
    /// deadline's slot: the device-time counts the last size up to there.
    #[test]
    fn a_share_s_device_time_runs_to_the_next_change_before_its_deadline() {
        let cluster = ClusterSpec::parse("1x8:t4", "t").unwrap();
        let mut t = Timeline::new(&cluster, 0.0, 10.0);
        let other = job(9, &[(2, 1.0)], 50.0, 1000.0, 2);
        t.reserve(&other, &[(0, 5, 2)]);
        let lv = [(1, 1.0), (2, 1.5)];
        // Ends at slot 3; the free devices change at 5, its deadline's slot is 10.
        assert_eq!(
            counted_to(&t, &job(1, &lv, 30.0, 100.0, 1), &[(0, 3, 1)]),
            5
        );
        // Its deadline's slot (4) comes first: counted to its end.
        assert_eq!(counted_to(&t, &job(1, &lv, 30.0, 40.0, 1), &[(0, 3, 1)]), 3);
        // A change at its end: counted to its end.
        assert_eq!(
            counted_to(&t, &job(1, &lv, 50.0, 100.0, 1), &[(0, 5, 1)]),
            5
        );
        let c = Counted {
            spans: Spans::from_slice(&[(0, 2, 2), (2, 3, 1)]),
            to: 5,
        };
        assert_eq!(c.device_slots(), 2 * 2 + 3);
    }
}
