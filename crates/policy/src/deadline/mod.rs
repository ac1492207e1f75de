//! Deadline-driven allocation: guaranteed minimum shares with admission control, then
//! spare devices by marginal return (docs/elasticflow.md).
//!
//! Each round: jobs seen for the first time are admitted or declined ([`plan::admit`]:
//! accepted when its minimum satisfactory share fits beside the admitted jobs' without
//! making any of them late); the admitted deadline jobs are planned earliest deadline
//! first on a timeline of free devices ([`plan::Timeline`]), each getting its minimum
//! share now; the devices left go, one size step at a time, to the job whose remaining
//! time drops most per added device (a job with none first). Declined jobs get nothing.
//!
//! Two configurations of the same machinery are registered:
//! - `elasticflow`: ElasticFlow's policy (ASPLOS'23) as its simulator runs it — shares
//!   planned as late as possible (the level below first, [`plan::Timeline::min_share`]
//!   with `mix`), restart overheads not budgeted, a declined job declined for good, every
//!   allocation re-planned at each of ElasticFlow's events (arrivals, completions and
//!   the plan's next breakpoint, [`DeadlineConfig::wake_at_breakpoints`]), where every
//!   running job pays ElasticFlow's per-event overhead
//!   ([`DeadlineConfig::event_overhead`]).
//! - `deadline`: pacer's — shares run from now at one size, each restart's delay
//!   budgeted in the plan, a declined job re-tried every round until even the empty
//!   cluster could not finish it in time (its user was told the earliest deadline that
//!   would have fitted), and a job grown beyond the devices it holds only when the time
//!   that saves exceeds twice the restart it costs. Running jobs keep no claim on their
//!   size: the spare is shared anew each round, a waiting job's first devices first
//!   (keeping sizes cost best-effort jobs 13–33 % of their mean JCT on Figure 11's
//!   setup with no deadline gained, docs/elasticflow.md).

mod admit;
mod carry;
mod config;
mod marginal;
mod place;
pub mod plan;

use crate::{ArrivalReplan, ClusterView, IdMap, JobView, Policy, SpeedTable};
use pacer_model::{Allocation, DeviceTypeId, JobId};
pub(crate) use place::place_counts;
use place::place_packed;
use plan::{Admission, AdmitRules, Admitter, PlanJob};
use std::collections::BTreeSet;
use std::sync::Arc;

pub use config::DeadlineConfig;

/// The admitted deadline jobs of a round planned together: `idx[k]` is the index in
/// the round's jobs of the admitter's `k`-th job.
struct Base<'a> {
    idx: Vec<usize>,
    admitter: Admitter<'a>,
}

/// A deadline policy ([`DeadlineConfig`]) and what it has decided about each job.
#[derive(Debug)]
pub struct Deadline {
    name: &'static str,
    cfg: DeadlineConfig,
    /// Each job seen so far: admitted (`true`) or declined. Lookups only (no
    /// decision follows their order): hashed by id.
    decided: IdMap<bool>,
    /// `decided` of each of the round's jobs (indexed like the view's), read once a
    /// round and kept equal to it as the round decides ([`Deadline::decide`]):
    /// every step of a round asks about every job.
    round: Vec<Option<bool>>,
    /// Every admission answer, in order (for reports and tests).
    pub answers: Vec<(JobId, f64, Admission)>,
    /// Each job's plan levels and type, kept while its speed table (the same `Arc`)
    /// and the devices per type (`levels_caps`) are those they were read from.
    levels: IdMap<Levels>,
    /// The devices per type `levels` were read with (all of them forgotten when
    /// these change).
    levels_caps: Vec<u32>,
    /// The start of the plan's next slot, while jobs are active ([`Policy::wake_s`]).
    next_slot_s: Option<f64>,
    /// Waiting jobs' plans, carried to the next round where they carry over exactly.
    carry: carry::Carry,
}

/// A job's [`PlanJob`] levels and device type, and what they were read from.
#[derive(Debug)]
struct Levels {
    speed: Arc<SpeedTable>,
    requested: u32,
    ty: usize,
    levels: plan::LevelList,
}

impl Deadline {
    pub fn new(name: &'static str, cfg: DeadlineConfig) -> Self {
        Deadline {
            name,
            cfg,
            decided: IdMap::default(),
            round: Vec::new(),
            answers: Vec::new(),
            levels: IdMap::default(),
            levels_caps: Vec::new(),
            next_slot_s: None,
            carry: carry::Carry::default(),
        }
    }

    /// Parses the slot knob of `PREFIX-sS` (S seconds > 0).
    pub fn parse_slot(name: &str, prefix: &str) -> Option<f64> {
        let s: f64 = name
            .strip_prefix(prefix)?
            .strip_prefix("-s")?
            .parse()
            .ok()?;
        (s.is_finite() && s > 0.0).then_some(s)
    }

    /// The admitted deadline jobs (indices into `jobs`) planned EDF: what a new job
    /// is admitted beside, and the minimum shares of this round.
    fn base<'a>(&mut self, view: &'a ClusterView, jobs: &'a [PlanJob]) -> Base<'a> {
        let mut idx = Vec::with_capacity(jobs.len());
        idx.extend(
            (0..jobs.len())
                .filter(|&i| jobs[i].deadline_s.is_some() && self.round[i] == Some(true)),
        );
        let admitter = Admitter::carrying(
            view.cluster,
            view.now_s,
            self.cfg.slot_s,
            idx.iter().map(|&i| &jobs[i]).collect(),
            AdmitRules {
                mix: self.cfg.mix,
                decline_if_any_late: self.cfg.decline_if_any_late,
                switch_at_breakpoints: self.cfg.switch_at_breakpoints,
            },
            Some(&mut self.carry),
        );
        Base { idx, admitter }
    }

    /// Reads what was decided about each of the round's jobs into `round`.
    fn read_round(&mut self, jobs: &[PlanJob]) {
        self.round.clear();
        self.round
            .extend(jobs.iter().map(|j| self.decided.get(&j.id).copied()));
    }

    /// Records that job `id` is admitted (`true`) or declined, in `decided` and at
    /// every index of the round's jobs that shows it.
    fn decide(&mut self, jobs: &[PlanJob], id: JobId, admitted: bool) {
        if self.decided.insert(id, admitted) != Some(admitted) {
            for (k, j) in jobs.iter().enumerate() {
                if j.id == id {
                    self.round[k] = Some(admitted);
                }
            }
        }
    }

    /// Admits or declines the jobs seen for the first time (and, when re-trying, the
    /// declined ones), in arrival order; `base` follows the admitted set.
    fn admit_new<'a>(&mut self, view: &'a ClusterView, jobs: &'a [PlanJob], base: &mut Base<'a>) {
        // Only the jobs seen for the first time or re-tried are decided.
        let mut order = Vec::with_capacity(jobs.len());
        order.extend((0..jobs.len()).filter(|&i| {
            self.round[i].is_none() || (self.cfg.retry_declined && self.round[i] == Some(false))
        }));
        order.sort_by(|&a, &b| {
            view.jobs[a]
                .arrival_s
                .total_cmp(&view.jobs[b].arrival_s)
                .then(view.jobs[a].id.cmp(&view.jobs[b].id))
        });
        let mut stale = self.admit_jointly(view, jobs, base, &order);
        for i in order {
            let id = jobs[i].id;
            let fresh = self.round[i].is_none();
            let retry = self.cfg.retry_declined && self.round[i] == Some(false);
            if !fresh && !retry {
                continue;
            }
            if jobs[i].deadline_s.is_none() || self.cfg.admitted_by_driver {
                self.decide(jobs, id, true);
                stale |= jobs[i].deadline_s.is_some();
                continue;
            }
            if stale {
                *base = self.base(view, jobs);
                stale = false;
            }
            // A re-tried job that is declined again hears nothing: the earliest
            // deadline that would fit is looked for only on a first answer.
            let answer = if fresh && self.cfg.earliest_on_decline {
                Some(base.admitter.admit(&jobs[i]))
            } else if fresh {
                Some(
                    base.admitter
                        .accept(&jobs[i])
                        .unwrap_or(Admission::Declined {
                            earliest_deadline_s: None,
                        }),
                )
            } else {
                base.admitter.accept(&jobs[i])
            };
            let accepted = matches!(answer, Some(Admission::Accepted { .. }));
            if let Some(answer) = answer.filter(|_| fresh || accepted) {
                self.answers.push((id, view.now_s, answer));
            }
            self.decide(jobs, id, accepted);
            stale |= accepted;
        }
        if stale {
            *base = self.base(view, jobs);
        }
    }

    /// With [`DeadlineConfig::joint_admission`] and two or more deadline jobs seen for
    /// the first time among `order`: decides them together (all admitted or all
    /// declined) and marks them seen; whether the admitted set changed (`base` is then
    /// stale). One such job alone is left to [`Deadline::admit_new`]'s loop (the same
    /// answer, with the earliest deadline that fits when declined).
    fn admit_jointly(
        &mut self,
        view: &ClusterView,
        jobs: &[PlanJob],
        base: &Base<'_>,
        order: &[usize],
    ) -> bool {
        if !self.cfg.joint_admission || self.cfg.admitted_by_driver {
            return false;
        }
        let group: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| jobs[i].deadline_s.is_some() && self.round[i].is_none())
            .collect();
        if group.len() < 2 {
            return false;
        }
        let candidates: Vec<&PlanJob> = group.iter().map(|&i| &jobs[i]).collect();
        let plans = base.admitter.admit_together(&candidates);
        for (k, &i) in group.iter().enumerate() {
            let id = jobs[i].id;
            self.decide(jobs, id, plans.is_some());
            let answer = match &plans {
                Some(p) => Admission::Accepted {
                    share_now: p[k].now(),
                    planned_finish_s: p[k].finish_s.unwrap_or(f64::INFINITY),
                },
                None => {
                    // Declined with its event-mates: no earliest deadline is looked for.
                    Admission::Declined {
                        earliest_deadline_s: None,
                    }
                }
            };
            self.answers.push((id, view.now_s, answer));
        }
        plans.is_some()
    }

    /// Devices per job now and the type they are on: minimum shares (`base`'s plans),
    /// then the spare by marginal return, then devices of types left idle
    /// ([`Deadline::idle_types`]); with [`DeadlineConfig::ef_marginal`], also the
    /// first later slot where a job that took spare devices changes size.
    fn counts(
        &self,
        view: &ClusterView,
        jobs: &[PlanJob],
        base: &Base<'_>,
    ) -> (Vec<u32>, Vec<usize>, Option<usize>) {
        let mut live = Vec::with_capacity(jobs.len());
        live.extend((0..jobs.len()).filter(|&i| self.round[i] == Some(true)));
        let mut counts = vec![0u32; jobs.len()];
        for (&i, p) in base.idx.iter().zip(base.admitter.plans()) {
            if let Some(p) = p {
                counts[i] = p.now();
            }
        }
        let timeline = base.admitter.timeline();
        let types = view.cluster.device_types.len().max(1);
        let mut spare: Vec<u32> = (0..types).map(|t| timeline.free(t, 0)).collect();
        // A best-effort job that runs on another type than its best (it took idle
        // devices there, [`Deadline::idle_types`]) stays there at its size while the
        // devices are free: pulled back, it would restart, often smaller.
        let mut moved: Vec<(usize, PlanJob)> = Vec::new();
        if types > 1 {
            for &i in &live {
                if jobs[i].deadline_s.is_some() || counts[i] > 0 {
                    continue;
                }
                let v = &view.jobs[i];
                let held = v.current.replicas();
                let Some(t) = held_type(view, &v.current).filter(|&t| t != jobs[i].ty) else {
                    continue;
                };
                let p = PlanJob::on_type(v, view.cluster, t, self.cfg.budget_restarts);
                if held <= spare[t] && p.levels.iter().any(|l| l.0 == held) {
                    spare[t] -= held;
                    counts[i] = held;
                    moved.push((i, p));
                }
            }
        }
        let mut spare_break = None;
        if self.cfg.ef_marginal {
            // The shares as ElasticFlow counts their device-time: replayed in EDF
            // order on the timeline each was planned on.
            let mut planned: Vec<(usize, &plan::JobPlan)> = base
                .idx
                .iter()
                .zip(base.admitter.plans())
                .filter_map(|(&i, p)| p.as_ref().map(|p| (i, p)))
                .collect();
            planned.sort_by_key(|&(i, _)| edf_key(&jobs[i]));
            let mut t = plan::Timeline::new(view.cluster, view.now_s, self.cfg.slot_s);
            let mut plans: Vec<Option<marginal::Counted>> = vec![None; jobs.len()];
            for (i, p) in planned {
                let to = if p.feasible {
                    marginal::counted_to(&t, &jobs[i], &p.spans)
                } else {
                    p.spans.last().map_or(0, |s| s.1)
                };
                t.reserve(&jobs[i], &p.spans);
                plans[i] = Some(marginal::Counted {
                    spans: p.spans.clone(),
                    to,
                });
            }
            let cands = live
                .iter()
                .filter(|&&i| !moved.iter().any(|m| m.0 == i))
                .map(|&i| {
                    let c = plans[i].take().unwrap_or(marginal::Counted {
                        spans: plan::Spans::new(),
                        to: 0,
                    });
                    (i, c)
                })
                .collect();
            spare_break =
                marginal::spare(timeline, jobs, cands, &mut counts, &mut spare, self.cfg.mix);
        } else {
            self.spare_by_time_saved(view, jobs, &live, &moved, &mut counts, &mut spare);
        }
        let mut tys: Vec<usize> = jobs.iter().map(|j| j.ty).collect();
        for (i, p) in &moved {
            tys[*i] = p.ty;
        }
        let mut sh = Shares { counts, tys, spare };
        self.idle_types(view, jobs, &live, &mut sh, moved);
        (sh.counts, sh.tys, spare_break)
    }

    /// The spare devices one size step at a time to the job whose remaining time drops
    /// most per added device (a job holding none first).
    fn spare_by_time_saved(
        &self,
        view: &ClusterView,
        jobs: &[PlanJob],
        live: &[usize],
        moved: &[(usize, PlanJob)],
        counts: &mut [u32],
        spare: &mut [u32],
    ) {
        // Each job's next step up and its gain depend on its own count only: computed
        // once, and again only for the job that took a step (`None`: it takes none).
        let step = |i: usize, n: u32| -> Option<(f64, u32)> {
            let j = &jobs[i];
            let next = j.next_level(n)?;
            if n == 0 {
                return Some((f64::INFINITY, next));
            }
            let (r0, r1) = (j.rate(n), j.rate(next));
            if r1 <= r0 {
                return None;
            }
            let saved = j.work_left / r0 - j.work_left / r1;
            let restart = view.jobs[i].restart_delay_s(next).unwrap_or(0.0);
            // Beyond the devices it holds, a step restarts the job: it must pay for
            // that. Up to them it is free, so a running job shrunk to make room for
            // a newcomer is not left smaller than the gain warrants.
            if self.cfg.sticky && next > j.current && saved <= restart * 2.0 {
                return None;
            }
            Some((saved / f64::from(next - n), next))
        };
        let mut steps: Vec<Step> = live
            .iter()
            .map(|&i| {
                let s = if moved.iter().any(|m| m.0 == i) {
                    None
                } else {
                    step(i, counts[i])
                };
                Step::new(i, &jobs[i], counts[i], s)
            })
            .collect();
        loop {
            let mut best: Option<(f64, usize)> = None;
            for (k, s) in steps.iter().enumerate() {
                if s.need > u64::from(spare[s.ty]) {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((g, b)) => s.gain > g || (s.gain == g && s.edf < steps[b].edf),
                };
                if better {
                    best = Some((s.gain, k));
                }
            }
            let Some((_, k)) = best else { break };
            let s = &mut steps[k];
            let (i, next) = (s.job, s.next);
            spare[s.ty] -= next - counts[i];
            counts[i] = next;
            s.set(counts[i], step(i, next));
        }
    }

    /// Devices of a type left idle once every job has had its share on its own best
    /// type go to best-effort jobs still waiting, each on the type where the smallest
    /// size it can get there runs fastest (a job already running on such a type at a
    /// size that still fits keeps it); then one size step at a time by marginal
    /// return, growth beyond what a job holds paying for its restart as above.
    /// Deadline jobs stay on the type their plan reserves. Without this, on a
    /// heterogeneous cluster every job waits for its own best type while the others
    /// sit idle.
    fn idle_types(
        &self,
        view: &ClusterView,
        jobs: &[PlanJob],
        live: &[usize],
        sh: &mut Shares,
        mut moved: Vec<(usize, PlanJob)>,
    ) {
        let Shares { counts, tys, spare } = sh;
        if spare.len() < 2 || spare.iter().all(|&s| s == 0) {
            return;
        }
        for &i in live {
            if counts[i] > 0 || jobs[i].deadline_s.is_some() {
                continue;
            }
            let v = &view.jobs[i];
            let held_ty = held_type(view, &v.current);
            let held = v.current.replicas();
            let mut best: Option<(f64, PlanJob, u32)> = None;
            for t in (0..spare.len()).filter(|&t| t != jobs[i].ty && spare[t] > 0) {
                let p = PlanJob::on_type(v, view.cluster, t, self.cfg.budget_restarts);
                if held_ty == Some(t) && held <= spare[t] && p.levels.iter().any(|l| l.0 == held) {
                    best = Some((f64::INFINITY, p, held));
                    break;
                }
                let Some(n) = p.levels.first().map(|l| l.0).filter(|&n| n <= spare[t]) else {
                    continue;
                };
                let r = p.rate(n);
                if best.as_ref().is_none_or(|b| r > b.0) {
                    best = Some((r, p, n));
                }
            }
            if let Some((_, p, n)) = best {
                spare[p.ty] -= n;
                counts[i] = n;
                tys[i] = p.ty;
                moved.push((i, p));
            }
        }
        loop {
            let mut best: Option<(f64, usize, u32)> = None;
            for (k, (i, p)) in moved.iter().enumerate() {
                let n = counts[*i];
                let Some(next) = p.next_level(n).filter(|&m| m - n <= spare[p.ty]) else {
                    continue;
                };
                let (r0, r1) = (p.rate(n), p.rate(next));
                if r1 <= r0 {
                    continue;
                }
                let saved = p.work_left / r0 - p.work_left / r1;
                let restart = view.jobs[*i].restart_delay_s(next).unwrap_or(0.0);
                if self.cfg.sticky && next > p.current && saved <= restart * 2.0 {
                    continue;
                }
                let gain = saved / f64::from(next - n);
                if best.is_none_or(|b| gain > b.0) {
                    best = Some((gain, k, next));
                }
            }
            let Some((_, k, next)) = best else { break };
            let (i, p) = &moved[k];
            spare[p.ty] -= next - counts[*i];
            counts[*i] = next;
        }
    }
}

impl Deadline {
    /// The round's jobs as the planner sees them: `PlanJob::from_view(..).up_to_fastest()`,
    /// with the levels of a job whose speed table and cluster are unchanged taken from
    /// the last round instead of read again (the same values).
    fn plan_jobs(&mut self, view: &ClusterView) -> Vec<PlanJob> {
        let types = view.cluster.device_types.len().max(1);
        let caps: Vec<u32> = (0..types)
            .map(|t| view.cluster.gpus_of_type(DeviceTypeId(t as u16)))
            .collect();
        if caps != self.levels_caps {
            self.levels.clear();
            self.levels_caps = caps;
        }
        let budget = self.cfg.budget_restarts;
        let jobs: Vec<PlanJob> =
            view.jobs
                .iter()
                .map(|v: &JobView| {
                    let Some(speed) = &v.speed else {
                        return PlanJob::from_view(v, view.cluster, budget).up_to_fastest();
                    };
                    if let Some(l) = self.levels.get(&v.id).filter(|l| {
                        Arc::ptr_eq(&l.speed, speed) && l.requested == v.requested_replicas
                    }) {
                        return PlanJob::with_levels(v, l.ty, l.levels.clone(), budget);
                    }
                    let p = PlanJob::from_view(v, view.cluster, budget).up_to_fastest();
                    self.levels.insert(
                        v.id,
                        Levels {
                            speed: speed.clone(),
                            requested: v.requested_replicas,
                            ty: p.ty,
                            levels: p.levels.clone(),
                        },
                    );
                    p
                })
                .collect();
        // Forget the jobs that left.
        if self.levels.len() > 2 * jobs.len() + 64 {
            let live: BTreeSet<JobId> = jobs.iter().map(|j| j.id).collect();
            self.levels.retain(|id, _| live.contains(id));
            self.carry.retain(|id| live.contains(&id));
        }
        jobs
    }
}

/// A live job's next step up in [`Deadline::counts`]'s spare loop, with what the loop
/// reads of it in one record: the gain per added device, the devices the step adds
/// (`u64::MAX`: it takes none), its type and its EDF key (ties), so that a scan of
/// the jobs makes no lookups into the round's jobs.
struct Step {
    need: u64,
    ty: usize,
    gain: f64,
    next: u32,
    job: usize,
    edf: (u64, JobId),
}

impl Step {
    fn new(job: usize, j: &PlanJob, count: u32, step: Option<(f64, u32)>) -> Self {
        let mut s = Step {
            need: u64::MAX,
            ty: j.ty,
            gain: 0.0,
            next: count,
            job,
            edf: edf_key(j),
        };
        s.set(count, step);
        s
    }

    /// The step from `count` devices: `(gain, next level)`, or `None`.
    fn set(&mut self, count: u32, step: Option<(f64, u32)>) {
        match step {
            Some((gain, next)) => {
                self.gain = gain;
                self.next = next;
                self.need = u64::from(next - count);
            }
            None => self.need = u64::MAX,
        }
    }
}

fn edf_key(j: &PlanJob) -> (u64, JobId) {
    (j.deadline_s.unwrap_or(f64::INFINITY).to_bits(), j.id)
}

/// Allocations of `counts[i]` devices of type `types[i]`: jobs keeping their size keep
/// their devices, the others are placed largest first on the most free nodes.
/// A round's devices per job, the type each is on, and the devices left per type.
struct Shares {
    counts: Vec<u32>,
    tys: Vec<usize>,
    spare: Vec<u32>,
}

/// The device type of `alloc`'s first node (`None`: it holds none).
fn held_type(view: &ClusterView, alloc: &Allocation) -> Option<usize> {
    let &(node, _) = alloc.slots().first()?;
    let ty = view.cluster.nodes.get(node.0 as usize)?.device_type;
    Some(ty.0 as usize)
}

/// The first slot after this one where the plan of an admitted job that holds
/// exactly its share now (no spare step) changes its devices (`None`: none does).
fn next_breakpoint(base: &Base<'_>, counts: &[u32]) -> Option<usize> {
    let mut next: Option<usize> = None;
    for (&i, p) in base.idx.iter().zip(base.admitter.plans()) {
        let Some(p) = p else { continue };
        if counts[i] != p.now() {
            continue;
        }
        let at = p.spans.iter().find_map(|s| {
            if s.0 > 0 {
                Some(s.0)
            } else {
                (s.1 > 0).then_some(s.1)
            }
        });
        if let Some(k) = at {
            next = Some(next.map_or(k, |n| n.min(k)));
        }
    }
    next
}

impl Policy for Deadline {
    fn name(&self) -> &'static str {
        self.name
    }

    fn declined(&self, job: JobId) -> bool {
        self.decided.get(&job) == Some(&false)
    }

    fn arrival_replan(&self) -> ArrivalReplan {
        self.cfg.arrivals
    }

    /// The plan's next slot: its shares hold for one slot, so under the event clock
    /// it asks for a round one slot after each while jobs are active.
    fn wake_s(&self) -> Option<f64> {
        self.next_slot_s
    }

    fn charges_event_overhead(&self) -> bool {
        self.cfg.event_overhead
    }

    fn event_overhead_by_placement(&self) -> bool {
        self.cfg.event_overhead && self.cfg.ef_placement
    }

    fn end_event_slot_s(&self) -> Option<f64> {
        self.cfg.ef_end_events.then_some(self.cfg.slot_s)
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        self.next_slot_s = (!view.jobs.is_empty()).then_some(view.now_s + self.cfg.slot_s);
        let jobs = self.plan_jobs(view);
        self.read_round(&jobs);
        let mut base = self.base(view, &jobs);
        self.admit_new(view, &jobs, &mut base);
        let (counts, types, spare_break) = self.counts(view, &jobs, &base);
        if self.cfg.wake_at_breakpoints {
            let at = match (next_breakpoint(&base, &counts), spare_break) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            self.next_slot_s = at.map(|k| view.now_s + k as f64 * self.cfg.slot_s);
        }
        if self.cfg.ef_placement {
            place_packed(view, &counts, &types)
        } else {
            place_counts(view, &counts, &types)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plan::admit;
    use super::*;
    use crate::{SpeedCurve, SpeedTable};
    use pacer_model::ClusterSpec;
    use std::sync::Arc;

    /// A job of `work` iterations at 1/s per device (linear up to 4).
    fn job(id: u32, work: f64, deadline: Option<f64>) -> JobView {
        let curve = SpeedCurve {
            points: vec![(1, 1.0), (2, 2.0), (4, 4.0)],
            spread_factor: 1.0,
        };
        JobView {
            speed: Some(Arc::new(SpeedTable::uniform(1, curve))),
            deadline_s: deadline,
            work_left: work,
            ..JobView::basic(JobId(id), f64::from(id), 1)
        }
    }

    fn cluster() -> ClusterSpec {
        ClusterSpec::parse("1x4:t4", "t").unwrap()
    }

    #[test]
    fn ef_placement_places_every_job_afresh_largest_first() {
        // Three nodes of 4. Job 0 (deadline 500 s) held node 0; job 1 (deadline 100
        // s) is new; both get 4, job 2 (best effort) 2 and job 3 (deadline 50 s) 2.
        // ElasticFlow's placement: largest first, ties by deadline: job 1 on node 0,
        // job 0 moved to node 1, then job 3 and job 2 on node 2 (the same count on one
        // node: the same allocation, pacer naming a node's devices by count).
        let c = ClusterSpec::parse("3x4:t4", "t").unwrap();
        let mut jobs = vec![
            job(0, 100.0, Some(500.0)),
            job(1, 100.0, Some(100.0)),
            job(2, 100.0, None),
            job(3, 100.0, Some(50.0)),
        ];
        jobs[0].current = Allocation::from_pairs([(pacer_model::NodeId(0), 4)]);
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let on = |pairs: &[(u32, u32)]| {
            Allocation::from_pairs(pairs.iter().map(|&(n, k)| (pacer_model::NodeId(n), k)))
        };
        let out = place_packed(&view, &[4, 4, 2, 2], &[0; 4]);
        assert_eq!(
            out,
            vec![on(&[(1, 4)]), on(&[(0, 4)]), on(&[(2, 2)]), on(&[(2, 2)])]
        );
        // The default keeps job 0 where it was.
        let kept = place_counts(&view, &[4, 4, 2, 2], &[0; 4]);
        assert_eq!(kept[0], on(&[(0, 4)]));
        // A count larger than a node spans the next nodes; one that does not fit gets
        // none.
        let out = place_packed(&view, &[2, 8, 0, 4], &[0; 4]);
        assert_eq!(out[1], on(&[(0, 4), (1, 4)]));
        assert_eq!(out[3], on(&[(2, 4)]));
        assert_eq!(out[0], Allocation::empty());
    }

    #[test]
    fn elasticflow_wakes_at_its_plans_breakpoints_not_every_slot() {
        // One job alone takes the spare now, from now to its end: ElasticFlow's plan
        // has no later allocation change, so no wake-up; pacer's wakes a slot later.
        let c = cluster();
        let jobs = [job(0, 400.0, Some(1000.0))];
        let view = ClusterView {
            now_s: 5.0,
            cluster: &c,
            jobs: &jobs,
        };
        let mut ef = Deadline::new("elasticflow", DeadlineConfig::elasticflow(10.0));
        assert_eq!(ef.allocate(&view)[0].replicas(), 4);
        assert_eq!(ef.wake_s(), None);
        assert!(ef.charges_event_overhead());
        let mut pacer = Deadline::new("deadline", DeadlineConfig::pacer(10.0));
        pacer.allocate(&view);
        assert_eq!(pacer.wake_s(), Some(15.0));
        assert!(!pacer.charges_event_overhead());
    }

    #[test]
    fn admission_accepts_what_fits_and_declines_with_the_earliest_deadline() {
        let c = cluster();
        let plan = |v: &JobView| PlanJob::from_view(v, &c, false);
        // Job 0: 400 iterations by t = 200 needs 2 devices from now.
        let a = plan(&job(0, 400.0, Some(200.0)));
        match admit(&c, 0.0, 10.0, &[], &a, AdmitRules::default()) {
            Admission::Accepted {
                share_now,
                planned_finish_s,
            } => {
                assert_eq!(share_now, 2);
                assert!((planned_finish_s - 200.0).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
        // Job 1: 600 iterations by t = 200 needs 3 devices: only 2 are left.
        let b = plan(&job(1, 600.0, Some(200.0)));
        match admit(
            &c,
            0.0,
            10.0,
            std::slice::from_ref(&a),
            &b,
            AdmitRules::default(),
        ) {
            Admission::Declined {
                earliest_deadline_s,
            } => {
                // Last in line: 2 devices until 200 (400 done), then 4: 250.
                let d = earliest_deadline_s.expect("some deadline fits");
                assert!((d - 250.0).abs() <= 1.0, "{d}");
            }
            other => panic!("{other:?}"),
        }
        // Job 2: 200 iterations by t = 200 fits on the 2 left.
        let c2 = plan(&job(2, 200.0, Some(200.0)));
        assert!(matches!(
            admit(
                &c,
                0.0,
                10.0,
                std::slice::from_ref(&a),
                &c2,
                AdmitRules::default()
            ),
            Admission::Accepted { share_now: 1, .. }
        ));
    }

    #[test]
    fn the_policy_declines_for_good_or_retries() {
        let c = cluster();
        let jobs = [
            job(0, 400.0, Some(200.0)),
            job(1, 600.0, Some(200.0)),
            job(2, 100.0, None),
        ];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let mut ef = Deadline::new("elasticflow", DeadlineConfig::elasticflow(10.0));
        let a = ef.allocate(&view);
        assert!(a[1].is_empty(), "job 1 is declined");
        assert_eq!(
            a[0].replicas() + a[2].replicas(),
            4,
            "the spare goes to others"
        );
        assert!(ef.declined(JobId(1)));
        // Jobs 0 and 1 arrived together: ElasticFlow declines them together.
        assert!(ef.declined(JobId(0)), "declined with its event-mate");
        let mut pacer = Deadline::new("deadline", DeadlineConfig::pacer(10.0));
        let a = pacer.allocate(&view);
        assert!(a[1].is_empty());
        assert_eq!(a[0].replicas(), 2, "pacer admits job 0 alone");
        assert_eq!(pacer.answers.len(), 2, "one answer per deadline job");
    }

    /// The round's copy of the decisions (`Deadline::round`) follows every decision of
    /// the round: after each round it equals `decided` at every job, with jobs
    /// arriving, admitted, declined, re-tried and shown twice under one id; and the
    /// answers are those of a policy that was shown each job once.
    #[test]
    fn the_round_s_decisions_follow_every_decision() {
        let c = ClusterSpec::parse("1x8:t4", "t").unwrap();
        for cfg in [
            DeadlineConfig::pacer(10.0),
            DeadlineConfig::elasticflow(10.0),
        ] {
            let mut p = Deadline::new("d", cfg);
            let mut shown: Vec<JobView> = Vec::new();
            for round in 0..12u32 {
                let now = f64::from(round) * 10.0;
                // Two arrivals a round: one that fits, one too tight or best effort.
                shown.push(job(2 * round, 300.0, Some(now + 400.0)));
                let other = match round % 3 {
                    0 => job(2 * round + 1, 5000.0, Some(now + 100.0)),
                    1 => job(2 * round + 1, 50.0, None),
                    _ => job(2 * round + 1, 900.0, Some(now + 300.0)),
                };
                shown.push(other);
                let mut jobs = shown.clone();
                // The same id twice in one view.
                jobs.push(shown[shown.len() - 2].clone());
                let view = ClusterView {
                    now_s: now,
                    cluster: &c,
                    jobs: &jobs,
                };
                let a = p.allocate(&view);
                assert_eq!(a.len(), jobs.len());
                assert_eq!(p.round.len(), jobs.len());
                for (k, j) in jobs.iter().enumerate() {
                    assert_eq!(
                        p.round[k],
                        p.decided.get(&j.id).copied(),
                        "round {round}, job {k}"
                    );
                    assert!(p.round[k].is_some(), "every job shown is decided");
                }
            }
            assert!(p.decided.values().any(|&a| a) && p.decided.values().any(|&a| !a));
        }
    }

    /// A job's levels kept from the last round are read again when the devices per
    /// type change: on the second cluster the job's best type is the other one, as a
    /// fresh policy finds.
    #[test]
    fn levels_are_read_again_when_the_devices_per_type_change() {
        let curve = SpeedCurve {
            points: vec![(1, 1.0), (2, 2.0), (4, 4.0), (8, 8.0)],
            spread_factor: 1.0,
        };
        let jobs = [JobView {
            speed: Some(Arc::new(SpeedTable::uniform(2, curve))),
            work_left: 100.0,
            ..JobView::basic(JobId(0), 0.0, 8)
        }];
        let first = ClusterSpec::parse("1x4:t4,1x8:a100", "t").unwrap();
        let second = ClusterSpec::parse("1x8:t4,1x4:a100", "t").unwrap();
        let view = |cluster| ClusterView {
            now_s: 0.0,
            cluster,
            jobs: &jobs,
        };
        let mut kept = Deadline::new("d", DeadlineConfig::pacer(10.0));
        let a = kept.allocate(&view(&first));
        assert_eq!(a[0].slots(), &[(pacer_model::NodeId(1), 8)]);
        let b = kept.allocate(&view(&second));
        let fresh = Deadline::new("d", DeadlineConfig::pacer(10.0)).allocate(&view(&second));
        assert_eq!(b, fresh);
        assert_eq!(b[0].slots(), &[(pacer_model::NodeId(0), 8)]);
    }

    #[test]
    fn the_earliest_deadline_is_looked_for_only_when_asked() {
        // Job 1 does not fit beside job 0 (above); asked, its answer carries the
        // earliest deadline that would fit (2 devices until 200, then 4: 250), and
        // the allocations are the same either way.
        let c = cluster();
        let jobs = [job(0, 400.0, Some(200.0)), job(1, 600.0, Some(200.0))];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let mut plain = Deadline::new("deadline", DeadlineConfig::pacer(10.0));
        let asked_cfg = DeadlineConfig {
            earliest_on_decline: true,
            ..DeadlineConfig::pacer(10.0)
        };
        let mut asked = Deadline::new("deadline", asked_cfg);
        assert_eq!(plain.allocate(&view), asked.allocate(&view));
        let declined = |p: &Deadline| {
            p.answers.iter().find_map(|(id, _, a)| match a {
                Admission::Declined {
                    earliest_deadline_s,
                } if *id == JobId(1) => Some(*earliest_deadline_s),
                _ => None,
            })
        };
        assert_eq!(declined(&plain), Some(None));
        let d = declined(&asked).flatten().expect("some deadline fits");
        assert!((d - 250.0).abs() <= 1.0, "{d}");
    }

    #[test]
    fn a_job_the_driver_admitted_is_never_declined() {
        // Job 1 alone does not fit beside job 0 (see above): planned by the policy it
        // is declined; admitted by the driver, it is kept and planned greedily.
        let c = cluster();
        let jobs = [job(0, 400.0, Some(200.0)), job(1, 600.0, Some(200.0))];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let cfg = DeadlineConfig {
            admitted_by_driver: true,
            wake_at_breakpoints: false,
            ..DeadlineConfig::pacer(10.0)
        };
        let mut p = Deadline::new("deadline", cfg);
        let a = p.allocate(&view);
        assert!(!p.declined(JobId(1)));
        assert!(p.answers.is_empty(), "no admission was planned");
        assert_eq!(a[0].replicas(), 2, "job 0 keeps its minimum share");
        assert_eq!(a[1].replicas(), 2, "job 1 gets what is left");
    }

    #[test]
    fn restarts_are_budgeted_at_the_size_restarted_onto() {
        // 760 iterations by t = 200 need all 4 devices (190 s) and a start: 4 s onto
        // one device; 4 s more per doubling makes it 12 s onto 4, ending at 202.
        let c = cluster();
        let flat = JobView {
            restart_s: Some(4.0),
            ..job(0, 760.0, Some(200.0))
        };
        let grows = JobView {
            restart_s_per_doubling: 4.0,
            ..flat.clone()
        };
        assert_eq!(flat.restart_delay_s(4), Some(4.0));
        assert_eq!(grows.restart_delay_s(4), Some(12.0));
        assert_eq!(grows.restart_delay_s(1), Some(4.0));
        let plan = |v: &JobView| PlanJob::from_view(v, &c, true);
        assert!(matches!(
            admit(&c, 0.0, 10.0, &[], &plan(&flat), AdmitRules::default()),
            Admission::Accepted { share_now: 4, .. }
        ));
        assert!(matches!(
            admit(&c, 0.0, 10.0, &[], &plan(&grows), AdmitRules::default()),
            Admission::Declined { .. }
        ));
        // Held at 4 already: no restart, it fits.
        let running = JobView {
            current: pacer_model::Allocation::from_pairs([(pacer_model::NodeId(0), 4)]),
            ..grows.clone()
        };
        assert!(matches!(
            admit(&c, 0.0, 10.0, &[], &plan(&running), AdmitRules::default()),
            Admission::Accepted { share_now: 4, .. }
        ));
        // Not budgeted (ElasticFlow's own policy): no delay at any size.
        assert_eq!(PlanJob::from_view(&grows, &c, false).restart_to(4), 0.0);
    }

    #[test]
    fn a_waiting_job_gets_devices_a_running_one_holds_and_growth_pays_for_its_restart() {
        let c = cluster();
        let on = |n: u32| pacer_model::Allocation::from_pairs([(pacer_model::NodeId(0), n)]);
        // Best effort: job 0 holds all 4 devices; job 1 has just arrived.
        let holder = JobView {
            current: on(4),
            restart_s: Some(30.0),
            ..job(0, 4_000.0, None)
        };
        let newcomer = JobView {
            restart_s: Some(30.0),
            ..job(1, 4_000.0, None)
        };
        let jobs = vec![holder.clone(), newcomer];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let a = Deadline::new("x", DeadlineConfig::pacer(10.0)).allocate(&view);
        // The newcomer's first device comes first, then both grow by their gain: equal
        // jobs, equal halves (the holder used to keep all 4, the newcomer waiting).
        assert_eq!(a[1].replicas(), 2, "{a:?}");
        assert_eq!(a[0].replicas(), 2, "{a:?}");
        // Growing beyond what a job holds must save more than twice the restart: 2 → 4
        // on 100 iterations saves 25 s, less than 2 × 30 s, so a job on 2 stays on 2.
        let small = JobView {
            current: on(2),
            restart_s: Some(30.0),
            ..job(0, 100.0, None)
        };
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: std::slice::from_ref(&small),
        };
        let a = Deadline::new("x", DeadlineConfig::pacer(10.0)).allocate(&view);
        assert_eq!(a[0].replicas(), 2, "{a:?}");
        // With a long way to go the same step pays: 4,000 iterations save 1,000 s.
        let long = JobView {
            work_left: 4_000.0,
            ..small
        };
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: std::slice::from_ref(&long),
        };
        let a = Deadline::new("x", DeadlineConfig::pacer(10.0)).allocate(&view);
        assert_eq!(a[0].replicas(), 4, "{a:?}");
        // A job held at 4 and shrunk for a newcomer does not pay to get back to 4.
        let jobs = vec![JobView {
            work_left: 100.0,
            ..holder
        }];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let a = Deadline::new("x", DeadlineConfig::pacer(10.0)).allocate(&view);
        assert_eq!(a[0].replicas(), 4, "{a:?}");
    }

    #[test]
    fn a_best_effort_job_takes_another_type_rather_than_wait_for_its_best() {
        // Both jobs run twice as fast on a100 (type 1) as on t4 (type 0).
        let c = ClusterSpec::parse("1x2:t4,1x2:a100", "t").unwrap();
        let curve = |k: f64| SpeedCurve {
            points: vec![(1, k), (2, 2.0 * k)],
            spread_factor: 1.0,
        };
        let speed = Arc::new(SpeedTable {
            per_type: vec![curve(1.0), curve(2.0)],
        });
        let be = |id: u32| JobView {
            speed: Some(speed.clone()),
            work_left: 1_000.0,
            ..JobView::basic(JobId(id), f64::from(id), 2)
        };
        let jobs = vec![be(0), be(1), be(2)];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let a = Deadline::new("x", DeadlineConfig::pacer(10.0)).allocate(&view);
        let ty = |al: &Allocation| c.nodes[al.slots()[0].0 .0 as usize].device_type.0;
        // Jobs 0 and 1 share the a100s; job 2 would wait for one, and takes the t4s
        // instead (it used to wait while they idled).
        assert_eq!((a[0].replicas(), ty(&a[0])), (1, 1), "{a:?}");
        assert_eq!((a[1].replicas(), ty(&a[1])), (1, 1), "{a:?}");
        assert_eq!((a[2].replicas(), ty(&a[2])), (2, 0), "{a:?}");
        // A job already on t4 at a size that still fits keeps it (no restart).
        let on_t4 = Allocation::from_pairs([(pacer_model::NodeId(0), 2)]);
        let jobs = vec![
            be(0),
            JobView {
                current: on_t4.clone(),
                ..be(1)
            },
        ];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        let a = Deadline::new("x", DeadlineConfig::pacer(10.0)).allocate(&view);
        assert_eq!(a[1], on_t4, "{a:?}");
        assert_eq!((a[0].replicas(), ty(&a[0])), (2, 1), "{a:?}");
    }

    #[test]
    fn same_view_same_allocation() {
        let c = ClusterSpec::parse("2x4:t4", "t").unwrap();
        let jobs: Vec<JobView> = (0..6)
            .map(|i| job(i, 100.0 * f64::from(i + 1), Some(60.0 * f64::from(i + 2))))
            .collect();
        let view = ClusterView {
            now_s: 0.0,
            cluster: &c,
            jobs: &jobs,
        };
        for cfg in [
            DeadlineConfig::elasticflow(10.0),
            DeadlineConfig::pacer(10.0),
        ] {
            let a = Deadline::new("x", cfg).allocate(&view);
            let b = Deadline::new("x", cfg).allocate(&view);
            assert_eq!(a, b);
        }
    }
}
