//! Admission: whether a new deadline job fits beside the admitted ones without making
//! any of them late, and if not the earliest deadline that would fit ([`admit`],
//! [`Admitter`]); the admitted jobs planned in EDF order ([`plan_all`]). Planning one
//! job on the timeline is `plan.rs`'s.

use super::carry::Carry;
use super::plan::{JobPlan, PlanJob, Timeline};
use pacer_model::{ClusterSpec, JobId};

/// Earliest deadline first, best-effort jobs last; ties by id.
pub fn edf_order(jobs: &[PlanJob]) -> Vec<usize> {
    edf_sorted(jobs.iter())
}

/// The indices of `jobs` in [`edf_cmp`] order, equal ones by index (a stable sort's
/// order): sorted by integer keys, each compared as `edf_cmp` compares.
fn edf_sorted<'j>(jobs: impl ExactSizeIterator<Item = &'j PlanJob>) -> Vec<usize> {
    let mut keyed: Vec<((i64, JobId), usize)> = Vec::with_capacity(jobs.len());
    keyed.extend(jobs.enumerate().map(|(i, j)| {
        // `f64::total_cmp`'s order as an integer's (its own definition).
        let bits = j.deadline_s.unwrap_or(f64::INFINITY).to_bits() as i64;
        ((bits ^ (((bits >> 63) as u64) >> 1) as i64, j.id), i)
    }));
    keyed.sort_unstable();
    keyed.into_iter().map(|k| k.1).collect()
}

/// Plans `jobs` in EDF order on a fresh timeline; the plans are indexed like `jobs`.
/// Best-effort jobs are not planned (they get what is spare).
pub fn plan_all(timeline: &mut Timeline, jobs: &[PlanJob], mix: bool) -> Vec<Option<JobPlan>> {
    let mut plans = vec![None; jobs.len()];
    for i in edf_order(jobs) {
        if jobs[i].deadline_s.is_some() {
            plans[i] = Some(timeline.plan(&jobs[i], mix));
        }
    }
    plans
}

/// How [`admit`] plans and judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdmitRules {
    /// Shares as late as possible (the level below first).
    pub mix: bool,
    /// Decline while any admitted job is planned late, even one that was late
    /// before (ElasticFlow's simulator: its whole plan must meet every deadline).
    pub decline_if_any_late: bool,
    /// With `mix`, the upper level from a breakpoint of the free devices
    /// (ElasticFlow's switch: [`Timeline`]'s `switch_at_breakpoints`).
    pub switch_at_breakpoints: bool,
}

impl AdmitRules {
    /// An empty timeline that plans by these rules.
    fn timeline(&self, cluster: &ClusterSpec, now_s: f64, slot_s: f64) -> Timeline {
        let mut t = Timeline::new(cluster, now_s, slot_s);
        if self.switch_at_breakpoints {
            t.switch_at_breakpoints();
        }
        t
    }
}

/// The answer to a deadline job's submission.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Its minimum share can be guaranteed beside the admitted jobs: `share_now`
    /// devices in the current slot, finishing at `planned_finish_s`.
    Accepted {
        share_now: u32,
        planned_finish_s: f64,
    },
    /// It cannot: the earliest deadline it could be given instead (`None`: not even
    /// alone on the cluster's free horizon, e.g. no level fits).
    Declined { earliest_deadline_s: Option<f64> },
}

/// Whether `candidate` can be admitted beside `admitted` (the deadline jobs already
/// guaranteed; best-effort ones are ignored) on `cluster` from `now_s`, planning in
/// slots of `slot_s`: it must meet its deadline and every admitted job that met its
/// own without it must still meet it (with `rules.decline_if_any_late`, every
/// admitted job). A declined job hears the earliest deadline that
/// would have been accepted (bisection to within one second).
pub fn admit(
    cluster: &ClusterSpec,
    now_s: f64,
    slot_s: f64,
    admitted: &[PlanJob],
    candidate: &PlanJob,
    rules: AdmitRules,
) -> Admission {
    Admitter::new(cluster, now_s, slot_s, admitted.iter().collect(), rules).admit(candidate)
}

/// The admitted deadline jobs planned once (EDF on a fresh timeline), to answer
/// [`admit`] for several candidates at one time without planning them again for each:
/// the jobs before a candidate in EDF order are planned exactly as without it (the
/// same jobs on the same timeline), so their plans are taken as they are and only the
/// candidate and the jobs after it are planned.
#[derive(Debug, Clone)]
pub struct Admitter<'a> {
    cluster: &'a ClusterSpec,
    now_s: f64,
    slot_s: f64,
    rules: AdmitRules,
    jobs: Vec<&'a PlanJob>,
    /// `jobs` in EDF order, and each job's plan (`None`: best effort, not planned).
    order: Vec<usize>,
    plans: Vec<Option<JobPlan>>,
    /// The timeline after every plan.
    timeline: Timeline,
}

impl<'a> Admitter<'a> {
    /// Plans `admitted` (the deadline jobs already guaranteed) EDF from `now_s`.
    pub fn new(
        cluster: &'a ClusterSpec,
        now_s: f64,
        slot_s: f64,
        admitted: Vec<&'a PlanJob>,
        rules: AdmitRules,
    ) -> Self {
        Self::carrying(cluster, now_s, slot_s, admitted, rules, None)
    }

    /// [`Admitter::new`], the plans of jobs that did not run carried from the last
    /// round's where they carry over exactly (without `mix`; [`Carry`]).
    pub fn carrying(
        cluster: &'a ClusterSpec,
        now_s: f64,
        slot_s: f64,
        admitted: Vec<&'a PlanJob>,
        rules: AdmitRules,
        mut carry: Option<&mut Carry>,
    ) -> Self {
        let order = edf_sorted(admitted.iter().copied());
        let mut timeline = rules.timeline(cluster, now_s, slot_s);
        if carry.is_some() && !rules.mix {
            timeline.decide_constant_runs();
        }
        let mut plans = vec![None; admitted.len()];
        for &k in &order {
            if admitted[k].deadline_s.is_some() {
                plans[k] = Some(match carry.as_deref_mut().filter(|_| !rules.mix) {
                    Some(c) => c.plan(&mut timeline, admitted[k]),
                    None => timeline.plan(admitted[k], rules.mix),
                });
            }
        }
        Admitter {
            cluster,
            now_s,
            slot_s,
            rules,
            jobs: admitted,
            order,
            plans,
            timeline,
        }
    }

    /// Each admitted job's plan, indexed like the jobs given to [`Admitter::new`]
    /// (what [`plan_all`] returns for them).
    pub fn plans(&self) -> &[Option<JobPlan>] {
        &self.plans
    }

    /// The timeline the admitted jobs' plans leave.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The candidate's plan when it can be admitted: it meets its deadline and every
    /// admitted job keeps meeting its own ([`admit`]'s rule).
    fn fits(&self, c: &PlanJob) -> Option<JobPlan> {
        let d = c.deadline_s?;
        // No level can do the work by the deadline even with every device from now:
        // `min_share` skips them all on any timeline, so no plan of the others is
        // needed to know the answer.
        if c.levels
            .iter()
            .all(|&(_, rate)| rate * (d - self.now_s) < c.work_left)
        {
            return None;
        }
        let (mix, strict) = (self.rules.mix, self.rules.decline_if_any_late);
        let mut t = self.rules.timeline(self.cluster, self.now_s, self.slot_s);
        let mut mine: Option<JobPlan> = None;
        for &k in &self.order {
            let j = self.jobs[k];
            if mine.is_none() && edf_cmp(c, j).is_lt() {
                mine = Some(t.plan_share(c, mix)?);
            }
            let Some(b) = &self.plans[k] else { continue };
            if mine.is_none() {
                // Before the candidate: planned as without it.
                if !b.feasible && strict {
                    return None;
                }
                t.reserve(j, &b.spans);
            } else {
                let p = t.plan(j, mix);
                if !(p.feasible || (!b.feasible && !strict)) {
                    return None;
                }
            }
        }
        match mine {
            Some(p) => Some(p),
            None => t.plan_share(c, mix),
        }
    }

    /// The plans of `candidates` (deadline jobs) when they can be admitted together,
    /// all or none: planned EDF with the admitted jobs, every candidate meets its
    /// deadline and every admitted job that met its own still does (with
    /// `rules.decline_if_any_late`, every admitted job). ElasticFlow's simulator
    /// admits the arrivals of one scheduling event so (`estimate_all_jobs` over the
    /// admitted jobs and the event's arrivals; all declined when it fails).
    pub fn admit_together(&self, candidates: &[&'a PlanJob]) -> Option<Vec<JobPlan>> {
        let strict = self.rules.decline_if_any_late;
        if strict && self.plans.iter().flatten().any(|p| !p.feasible) {
            return None;
        }
        let hopeless = |c: &PlanJob| {
            let d = c.deadline_s.unwrap_or(f64::INFINITY);
            c.levels
                .iter()
                .all(|&(_, rate)| rate * (d - self.now_s) < c.work_left)
        };
        if candidates.iter().any(|c| hopeless(c)) {
            return None;
        }
        let mut jobs = self.jobs.clone();
        jobs.extend_from_slice(candidates);
        let n = self.jobs.len();
        let all = Admitter::new(self.cluster, self.now_s, self.slot_s, jobs, self.rules);
        let kept = all.plans[..n]
            .iter()
            .zip(&self.plans)
            .all(|(p, before)| match (p, before) {
                (Some(p), Some(b)) => p.feasible || (!b.feasible && !strict),
                _ => true,
            });
        if !kept {
            return None;
        }
        all.plans[n..]
            .iter()
            .map(|p| p.clone().filter(|p| p.feasible))
            .collect()
    }

    /// `Accepted` when `candidate` can be admitted, else `None` (without looking for
    /// the earliest deadline that would fit, which [`Admitter::admit`] does).
    pub fn accept(&self, candidate: &PlanJob) -> Option<Admission> {
        if candidate.deadline_s.is_none() {
            return Some(Admission::Accepted {
                share_now: 0,
                planned_finish_s: f64::INFINITY,
            });
        }
        self.fits(candidate).map(|p| Admission::Accepted {
            share_now: p.now(),
            planned_finish_s: p.finish_s.unwrap_or(f64::INFINITY),
        })
    }

    /// [`admit`]'s answer for `candidate`.
    pub fn admit(&self, candidate: &PlanJob) -> Admission {
        if let Some(a) = self.accept(candidate) {
            return a;
        }
        // Last in EDF order it disturbs nobody: its greedy finish on what the others
        // leave, or their latest deadline, is feasible.
        let mut last = candidate.clone();
        last.deadline_s = None;
        let top = last.levels.last().map_or(0, |l| l.0);
        let Some(greedy) = self.timeline.run_into(&last, (top, 0, top), None, None) else {
            return Admission::Declined {
                earliest_deadline_s: None,
            };
        };
        let latest = self
            .jobs
            .iter()
            .filter_map(|j| j.deadline_s)
            .fold(greedy, f64::max)
            + 1.0;
        let (mut lo, mut hi) = (self.now_s, latest);
        let with = |d: f64| {
            let mut c = candidate.clone();
            c.deadline_s = Some(d);
            self.fits(&c).is_some()
        };
        if !with(hi) {
            return Admission::Declined {
                earliest_deadline_s: None,
            };
        }
        while hi - lo > 1.0 {
            let mid = 0.5 * (lo + hi);
            if with(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Admission::Declined {
            earliest_deadline_s: Some(hi.ceil()),
        }
    }
}

/// [`edf_order`]'s order of two jobs.
fn edf_cmp(a: &PlanJob, b: &PlanJob) -> std::cmp::Ordering {
    let d = |j: &PlanJob| j.deadline_s.unwrap_or(f64::INFINITY);
    d(a).total_cmp(&d(b)).then(a.id.cmp(&b.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `edf_sorted` is the stable sort by `edf_cmp`, with equal deadlines, equal ids,
    /// no deadline, signed zeros, infinities and NaNs among the jobs.
    #[test]
    fn edf_sorted_is_the_stable_sort_by_edf_cmp() {
        let deadlines = [
            None,
            Some(0.0),
            Some(-0.0),
            Some(-5.0),
            Some(60.0),
            Some(60.0),
            Some(1e300),
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(f64::NAN),
            Some(-f64::NAN),
        ];
        let mut state = 9u64;
        for n in 0..40 {
            let jobs: Vec<PlanJob> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let r = (state >> 33) as usize;
                    PlanJob {
                        id: JobId((r % 7) as u32),
                        ty: 0,
                        levels: Vec::new().into(),
                        work_left: 1.0,
                        deadline_s: deadlines[(r / 7) % deadlines.len()],
                        restart_s: 0.0,
                        restart_s_per_doubling: 0.0,
                        current: 0,
                    }
                })
                .collect();
            let mut want: Vec<usize> = (0..jobs.len()).collect();
            want.sort_by(|&a, &b| edf_cmp(&jobs[a], &jobs[b]));
            assert_eq!(edf_order(&jobs), want, "{n} jobs");
        }
    }
}
