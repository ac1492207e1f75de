//! [`Timeline::run_into`]'s answer in closed form for a walk of one level (`low ==
//! high`) where the free devices allow that level from slot 0 on until the walk
//! ends: the job then runs at one rate `r` from `t0 = now + pause` (its restart
//! budget, when it changes size) without a break, and finishes at `t0 + work / r`.
//! The walk computes the same finish by subtracting each segment's work in turn; its
//! roundings stay below `segments × 2⁻⁵² × 5 × (work / r + |finish|)` seconds, far
//! under the margin used here (`1e-9 ×` the times involved, at most 10⁵ segments).
//! Where the closed form is outside that margin from every slot boundary and from the
//! deadline, every decision of the walk — in which segment it finishes, the finish's
//! slot, whether it meets the deadline — is the closed form's, and the walk's runs are
//! one span `(0, finish slot, level)` (the runs join at every breakpoint). The finish
//! time itself may differ from the walk's in its last bits; it is used only for the
//! policy's own plans ([`Timeline::constant_runs`]), whose finish times decide
//! nothing else. Within the margin, or where the devices dip below the level, the
//! caller walks. `constant_runs_answer_as_whole_walks` checks it against walks.

use super::{ascending, ceil_slots, pick_level, PlanJob, Span, Timeline};

impl Timeline {
    /// The walk's answer for `job` at `level` devices (`low == high`, no switch) to
    /// deadline `d` (slot `last_slot`), with its one span written to `spans`, when the
    /// closed form decides it; `None`: walk.
    pub(super) fn run_constant(
        &self,
        job: &PlanJob,
        level: u32,
        d: f64,
        last_slot: usize,
        spans: Option<&mut Vec<Span>>,
    ) -> Option<Option<f64>> {
        if !(self.early_stop && self.coalesce) || job.work_left <= 0.0 || job.levels.is_empty() {
            return None;
        }
        if last_slot == 0 {
            // The walk stops before its first segment.
            return Some(None);
        }
        let f = self.free.get(job.ty)?;
        let (n, r) = pick_level(job, ascending(job), level);
        let positive = r > 0.0;
        if n == 0 || !positive || f.len() > 100_000 {
            return None;
        }
        let (now, slot) = (self.now_s, self.slot_s);
        let pause = if n != job.current {
            job.restart_to(n)
        } else {
            0.0
        };
        let t0 = now + pause;
        let finish = t0 + job.work_left / r;
        let eps = 1e-9 * (job.work_left / r + finish.abs() + now.abs() + pause.abs() + slot);
        if !eps.is_finite() || pause < 0.0 {
            return None;
        }
        // The first segment ends at the next breakpoint or the deadline's slot, and
        // at the deadline: the pause must end well inside it.
        let first_end =
            (now + f.get(1).map_or(last_slot, |p| p.0.min(last_slot)) as f64 * slot).min(d);
        let inside = t0 + eps < first_end;
        if !inside {
            return None;
        }
        // Every segment the walk runs in has the level free: those starting before
        // slot `upto`.
        let runs_through = |upto: usize| f.iter().take_while(|p| p.0 < upto).all(|p| p.1 >= n);
        if finish - eps > d {
            // Not done by the deadline at this rate: the walk fails, provided it runs
            // at this rate up to the deadline's slot.
            return runs_through(last_slot).then_some(None);
        }
        let met = finish + eps < d;
        if !met {
            return None;
        }
        let x = (finish - now) / slot;
        let near = eps / slot + 1e-12 * (x.abs() + 1.0) + 1e-9;
        let after = x > 0.0;
        if !after || (x - x.round()).abs() <= near {
            return None;
        }
        let k = ceil_slots(x);
        if k > last_slot || !runs_through(k) {
            return None;
        }
        if let Some(s) = spans {
            s.clear();
            s.push((0, k, n));
        }
        Some(Some(finish))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Rng;
    use super::*;
    use pacer_model::ClusterSpec;

    /// `plan.rs`'s test job (levels 1, 2, 4, 8 at sub-linear rates), due after `now`,
    /// with any restart budget and devices held.
    fn job(rng: &mut Rng, id: u32, now: f64) -> PlanJob {
        let mut j = super::super::tests::job(rng, id, 0.0);
        j.deadline_s = Some(now + 300.0 + 15_000.0 * rng.unit());
        j.restart_s = [0.0, 7.0, 90.0][(rng.next() % 3) as usize];
        j.restart_s_per_doubling = [0.0, 2.5][(rng.next() % 2) as usize];
        j.current = [0, 1, 2, 4, 8][(rng.next() % 5) as usize];
        j
    }

    /// On random timelines (random jobs planned first), every walk of one level with
    /// the closed form on answers as the whole walk does: the same finish slot and
    /// runs, met or not, the finish within 1e-9; and many were decided by it.
    #[test]
    fn constant_runs_answer_as_whole_walks() {
        let cluster = ClusterSpec::parse("4x4:t4", "t").unwrap();
        let mut rng = Rng(23);
        let (mut decided, mut walks) = (0usize, 0usize);
        for case in 0..300 {
            let now = [0.0, 60.0 * case as f64, 1234.5][case % 3];
            let mut walk = Timeline::new(&cluster, now, 60.0);
            for k in 0..10 {
                let j = job(&mut rng, k, now);
                let d = j.deadline_s.unwrap();
                let mut closed = walk.clone();
                closed.constant_runs = true;
                for &(level, _) in j.levels.iter() {
                    let ls = ceil_slots((d - now) / 60.0);
                    let (mut ps, mut qs) = (Vec::new(), Vec::new());
                    let p = closed.run_into(&j, (level, 0, level), Some(d), Some(&mut ps));
                    let q = walk.run_into(&j, (level, 0, level), Some(d), Some(&mut qs));
                    let decided_here = closed.run_constant(&j, level, d, ls, None).is_some();
                    decided += usize::from(decided_here);
                    walks += 1;
                    assert_eq!(
                        p.is_some(),
                        q.is_some(),
                        "case {case} job {k} level {level}"
                    );
                    if let (Some(x), Some(y)) = (p, q) {
                        assert!(
                            (x - y).abs() <= 1e-9 * y.abs(),
                            "case {case} job {k}: {x} {y}"
                        );
                        assert_eq!(ps, qs, "case {case} job {k} level {level}");
                    }
                }
                // The same job with its finish at a slot boundary, or within a hair
                // of one (where the walk's `- 1e-9` and its roundings decide).
                for frac in [0.0, 1e-13, -1e-13, 1e-10, -1e-10, 2e-9, -2e-9, 1e-6] {
                    let mut b = j.clone();
                    let (level, rate) = b.levels[1];
                    b.current = level;
                    let slots = 1.0 + (k % 7) as f64 + frac;
                    b.work_left = rate * 60.0 * slots + rate * (now.ceil() - now);
                    b.deadline_s = Some(now + 60.0 * 40.0);
                    let d = b.deadline_s.unwrap();
                    let (mut ps, mut qs) = (Vec::new(), Vec::new());
                    let p = closed.run_into(&b, (level, 0, level), Some(d), Some(&mut ps));
                    let q = walk.run_into(&b, (level, 0, level), Some(d), Some(&mut qs));
                    assert_eq!(p.is_some(), q.is_some(), "case {case} job {k} frac {frac}");
                    assert_eq!(ps, qs, "case {case} job {k} frac {frac}");
                }
                walk.plan(&j, false);
            }
        }
        assert!(
            decided > walks / 3,
            "{decided} of {walks} walks decided in closed form"
        );
    }
}
