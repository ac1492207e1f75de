//! A waiting job's plan carried from one round to the next without walking it again,
//! where the walk would repeat itself exactly (`deadline`, not `elasticflow`'s `mix`).
//!
//! [`Timeline::plan`](super::plan::Timeline::plan) walks a job's levels over the free
//! devices its earlier jobs (EDF) left. The walks' arithmetic reads the job's work
//! left, its devices held, deadline and restart budget, its levels, the breakpoints of
//! its type, and the times `now + slot index × slot` of the slots it crosses. A job
//! that did not run (its work left and devices held are bit for bit the last round's)
//! and that no walk of the last round ran before slot `delta` (it first gets devices
//! at or after `delta`, so no walk of it did) sees, `delta` slots later, the same
//! breakpoints moved back by `delta` when the jobs before it left them so; where the
//! clock and the slot are whole seconds below 2⁵², `now' + (k − delta) × slot` is
//! `now + k × slot` exactly, so every walk repeats with the same values: the same
//! levels fail, the same one meets the deadline with the same finish, its runs moved
//! back by `delta`. What else could differ is checked: the deadline's slot and the
//! finish's slot (each a rounding of a division by the slot, recomputed) and the
//! quick rejection of a level that could not do the work even with every slot to the
//! deadline (`rate × (d − now) < work`, which only grows stricter for the levels
//! below). Anything else is walked afresh. `carried_plans_equal_fresh_walks` (in
//! `plan.rs`'s tests) checks carried plans against fresh ones on random timelines.

use super::plan::{ceil_slots, JobPlan, LevelList, PlanJob, Timeline};
use crate::IdMap;
use pacer_model::JobId;
use std::sync::Arc;

/// The plans that may be carried, by job.
#[derive(Debug, Default)]
pub struct Carry {
    memo: IdMap<Carried>,
    /// Plans carried so far.
    carried: u64,
}

/// One job's last fresh (or carried) plan and what it was computed from.
#[derive(Debug)]
struct Carried {
    now_s: f64,
    slot_s: f64,
    work_bits: u64,
    deadline_bits: u64,
    restart_bits: (u64, u64),
    current: u32,
    ty: usize,
    levels: LevelList,
    /// The breakpoints of its type before its plan was taken.
    before: Vec<(usize, u32)>,
    plan: JobPlan,
    finish_s: f64,
    /// The slot its plan first runs in.
    first_slot: usize,
    /// The rate of the level that met the deadline.
    rate: f64,
    /// The deadline's slot and the finish's slot (as the walk rounds them).
    last_slot: usize,
    finish_slot: usize,
}

/// Below this every whole second and its sums are exact in an `f64`.
const EXACT: f64 = 4_503_599_627_370_496.0; // 2^52

impl Carry {
    /// Forgets the jobs `keep` says no to.
    pub fn retain(&mut self, mut keep: impl FnMut(JobId) -> bool) {
        self.memo.retain(|id, _| keep(*id));
    }

    /// Plans `job` on `t` and takes its devices, as [`Timeline::plan`] without `mix`
    /// does: its last plan moved on when that is what the walks would give again (see
    /// the module docs), else walked afresh. A deadline job that holds no devices is
    /// recorded for the next round.
    pub fn plan(&mut self, t: &mut Timeline, job: &PlanJob) -> JobPlan {
        if job.current > 0 {
            // A running job's work left moves: nothing of it carries over (a plan
            // recorded while it waited no longer matches, and is dropped when it ends).
            return t.plan(job, false);
        }
        if let Some(plan) = self.carried(t, job) {
            self.carried += 1;
            return plan;
        }
        let Some(d) = job.deadline_s else {
            return t.plan(job, false);
        };
        let mut before = self
            .memo
            .get_mut(&job.id)
            .map_or_else(Vec::new, |c| std::mem::take(&mut c.before));
        let (now, slot) = (t.now_s, t.slot_s);
        let last_slot = ceil_slots((d - now) / slot);
        // What the walks read: the breakpoints before the deadline's slot.
        before.clear();
        before.extend(t.free_of(job.ty).iter().take_while(|p| p.0 < last_slot));
        let plan = t.plan(job, false);
        if !plan.feasible || before.is_empty() {
            self.memo.remove(&job.id);
            return plan;
        }
        let (Some(finish), Some((_, rate)), Some(first)) = (
            plan.finish_s,
            t.last_level(),
            plan.spans.first().map(|s| s.0),
        ) else {
            self.memo.remove(&job.id);
            return plan;
        };
        // Every slot time the walks compute, now and moved on, is exact.
        let far = last_slot.max(before.last().map_or(0, |p| p.0)) + 2;
        if !(whole(now) && whole(slot) && slot > 0.0 && whole(now + far as f64 * slot)) {
            self.memo.remove(&job.id);
            return plan;
        }
        self.memo.insert(
            job.id,
            Carried {
                now_s: now,
                slot_s: slot,
                work_bits: job.work_left.to_bits(),
                deadline_bits: d.to_bits(),
                restart_bits: (
                    job.restart_s.to_bits(),
                    job.restart_s_per_doubling.to_bits(),
                ),
                current: job.current,
                ty: job.ty,
                levels: job.levels.clone(),
                before,
                plan: plan.clone(),
                finish_s: finish,
                first_slot: first,
                rate,
                last_slot,
                finish_slot: ceil_slots((finish - now) / slot - 1e-9),
            },
        );
        plan
    }

    /// The plan recorded for `job` moved on to `t`'s clock and taken from `t`; `None`
    /// (nothing taken) when it does not carry over. The record stays as it was made:
    /// the next round moves it on from there again.
    fn carried(&self, t: &mut Timeline, job: &PlanJob) -> Option<JobPlan> {
        let c = self.memo.get(&job.id)?;
        let d = job.deadline_s?;
        if c.work_bits != job.work_left.to_bits()
            || c.deadline_bits != d.to_bits()
            || c.restart_bits
                != (
                    job.restart_s.to_bits(),
                    job.restart_s_per_doubling.to_bits(),
                )
            || c.current != job.current
            || c.ty != job.ty
            || !Arc::ptr_eq(&c.levels, &job.levels)
            || c.slot_s != t.slot_s
        {
            return None;
        }
        // The record's clock, slot and slot times are whole seconds below 2^52
        // ([`Carry::plan`]): so must this clock be, a whole number of slots later.
        let (now, slot) = (t.now_s, t.slot_s);
        if !(whole(now) && now >= c.now_s) {
            return None;
        }
        let delta = ((now - c.now_s) / slot) as usize;
        if delta as f64 * slot != now - c.now_s {
            return None;
        }
        // No walk ran before slot `delta`: the plan starts there or later.
        if c.first_slot < delta
            || c.last_slot < delta
            || c.finish_slot < delta
            || ceil_slots((d - now) / slot) != c.last_slot - delta
            || ceil_slots((c.finish_s - now) / slot - 1e-9) != c.finish_slot - delta
            || c.rate * (d - now) < job.work_left
            || !shifted_eq(&c.before, delta, t.free_of(job.ty), c.last_slot)
        {
            return None;
        }
        let mut plan = c.plan.clone();
        for s in plan.spans.iter_mut() {
            s.0 -= delta;
            s.1 -= delta;
        }
        t.reserve(job, &plan.spans);
        Some(plan)
    }
}

/// `x` is a whole number of magnitude below 2^52 (without the library's `trunc`).
fn whole(x: f64) -> bool {
    x.abs() < EXACT && (x as i64) as f64 == x
}

/// Whether `new` is `old` from slot `delta` on, moved back by `delta` slots, as far
/// as a walk to the deadline's slot `last_slot` (of `old`) reads them: the same
/// breakpoints before it, none added or dropped after slot 0. (Past the last one
/// before the deadline's slot a walk reads only that one follows, or that none does,
/// and stops either way.)
fn shifted_eq(old: &[(usize, u32)], delta: usize, new: &[(usize, u32)], last_slot: usize) -> bool {
    let i = old.partition_point(|p| p.0 <= delta);
    let Some(&(0, v)) = new.first() else {
        return false;
    };
    if i == 0 || old[i - 1].1 != v {
        return false;
    }
    // `old`'s breakpoints after `delta` (and before the deadline's slot, all of them
    // as recorded) against `new`'s after 0.
    let old = &old[i..];
    let new = &new[1..];
    if new.len() < old.len() || new.get(old.len()).is_some_and(|n| n.0 + delta < last_slot) {
        return false;
    }
    old.iter()
        .zip(new)
        .all(|(o, n)| o.1 == n.1 && o.0 == n.0 + delta)
}

#[cfg(test)]
mod tests {
    use super::super::plan::tests::Rng;
    use super::super::plan::{AdmitRules, Admitter};
    use super::*;
    use pacer_model::ClusterSpec;

    /// Rounds of a busy cluster: a running job holds every device for a while (its
    /// work left moving as it runs), waiting jobs behind it keep or change their
    /// work, and the clock moves on by a slot, half a slot or not at all. Every
    /// round's plans made with the last round's carried over where they carry
    /// ([`Admitter::carrying`]) equal the plans made afresh ([`Admitter::new`]):
    /// the same runs, feasibility and timeline; and many were carried.
    #[test]
    fn carried_plans_equal_fresh_walks() {
        let cluster = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let rules = AdmitRules::default();
        let mut rng = Rng(17);
        let (mut carried, mut plans) = (0u64, 0usize);
        for case in 0..40 {
            let mut carry = Carry::default();
            let levels = |rng: &mut Rng| -> LevelList {
                let mut rate = 0.5 + rng.unit();
                let mut l = Vec::new();
                for d in [1, 2, 4, 8] {
                    l.push((d, rate));
                    rate *= 1.3 + 0.6 * rng.unit();
                }
                l.into()
            };
            let mut jobs: Vec<PlanJob> = (0..8)
                .map(|k| PlanJob {
                    id: JobId(k + 1),
                    ty: 0,
                    levels: levels(&mut rng),
                    work_left: 200.0 + 8_000.0 * rng.unit(),
                    deadline_s: Some(3_000.0 + 30_000.0 * rng.unit()),
                    restart_s: if case % 2 == 0 { 0.0 } else { 7.0 },
                    restart_s_per_doubling: if case % 4 == 1 { 3.0 } else { 0.0 },
                    current: 0,
                })
                .collect();
            // The blocker: every device until about slot 12, due first.
            jobs.push(PlanJob {
                id: JobId(0),
                ty: 0,
                levels: vec![(16, 16.0)].into(),
                work_left: 16.0 * 60.0 * (11.0 + rng.unit()),
                deadline_s: Some(2_000.0),
                restart_s: 0.0,
                restart_s_per_doubling: 0.0,
                current: 16,
            });
            let mut now = 0.0;
            for round in 0..30 {
                let refs: Vec<&PlanJob> = jobs.iter().collect();
                let a =
                    Admitter::carrying(&cluster, now, 60.0, refs.clone(), rules, Some(&mut carry));
                let b = Admitter::new(&cluster, now, 60.0, refs, rules);
                for (p, q) in a.plans().iter().zip(b.plans()) {
                    let (p, q) = (p.as_ref().unwrap(), q.as_ref().unwrap());
                    assert_eq!(
                        (p.feasible, &p.spans),
                        (q.feasible, &q.spans),
                        "case {case} round {round}"
                    );
                    let (x, y) = (p.finish_s.unwrap(), q.finish_s.unwrap());
                    assert!(
                        (x - y).abs() <= 1e-9 * y.abs(),
                        "case {case} round {round}: {x} {y}"
                    );
                    plans += 1;
                }
                assert_eq!(a.timeline().free_of(0), b.timeline().free_of(0));
                // The next round: the clock moves on; the blocker runs its slot; a
                // waiting job now and then changes (it ran, or was re-sized).
                let step = match rng.next() % 8 {
                    0 => 30.0,
                    1 => 0.0,
                    2 => 120.0,
                    _ => 60.0,
                };
                let blocker = jobs.last_mut().unwrap();
                blocker.work_left = (blocker.work_left - 16.0 * step).max(1.0);
                if rng.next().is_multiple_of(3) {
                    let k = (rng.next() % 8) as usize;
                    jobs[k].work_left *= 0.9 + 0.2 * rng.unit();
                }
                now += step;
            }
            carried += carry.carried;
        }
        assert!(
            carried as usize > plans / 4,
            "{carried} of {plans} plans carried"
        );
    }
}
