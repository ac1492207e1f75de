//! `sia-pacer`: Sia's round objective (`p`, `λ_n`, re-allocation factor, the fast
//! solver and placement all [`Sia`]'s) with two changes, chosen on saturn
//! workloads 1–5 only (`pacer-lab sia-tune`; docs/sia.md, "sia-pacer"):
//!
//! 1. **No exploration ladder when the scaling is known.** A job's `max_replicas`
//!    (Pollux's and Sia's rule: at most twice the most replicas it has run) exists
//!    so that an online-learned model is never trusted far beyond what it has
//!    measured. It costs a restart per doubling (1 → 2 → 4 → 8 devices: three
//!    restarts of 15–250 s each, and rounds on sizes the job would not choose).
//!    `sia-pacer` offers a job that has run every configuration up to its batch
//!    limit (`max_batch / min_atomic`, at most 64, as Sia's cap; [`Sia::explore_cap`]) whenever it has a
//!    goodput model for the type; a cap of 1 (a job that has not run, or a rigid
//!    one-device job: ncf, as in Sia's simulator) stays. With fitted profiles (`--profiles fitted`) the
//!    model is the type's whole table, so the ladder buys nothing; with online
//!    profiles the policy extrapolates its fit (docs/sia.md reports both).
//! 2. **New jobs on their fastest type.** Sia offers a job that has not run one
//!    device of every type at `S = 1` (it knows nothing yet); `sia-pacer` weighs
//!    those devices by the job's one-device goodput per type, known from the
//!    tables' one-device rows ([`Sia::fresh_by_speed`]).
//!
//! 3. **No move while restarting** (Sia's `scaling_underway`, which `sia` has
//!    too): a job this policy re-allocated less than its restart time ago keeps its
//!    devices this round ([`Sia::hold_restarts`]); on saturn 1–5 it changed
//!    the mean avg JCT by −0.3 %, within noise, and is kept as Sia's behaviour.
//!
//! 4. **Types it has not run on, projected at one batch** (issue 25; online
//!    profiles only): [`TypeProjection::MatchedBatch`] instead of Sia's ratio of
//!    one-device throughputs at each type's own largest batch, which made yolov3 on
//!    rtx (largest one-device batch 8 against dgx-ext's 32) look 4.8× slower per
//!    device than dgx-ext where its step at the batches rtx runs is 2× slower, so
//!    on bert-1 two yolov3 jobs held 16 A100s while 48 other devices stood idle.
//!    Chosen on saturn 1–5 and bert-1 (docs/sia.md, "yolov3 on bert-1").
//!
//! `sia`'s other Sia behaviours are off here, as when this policy was chosen:
//! a job has its models once it has held devices ([`Sia::fresh_until_trained`]
//! off), costs are not rounded, and ties go by arrival ([`Sia::shuffle_ties`] off).
//!
//! Measured and left off (the same search): least-attained-service and
//! remaining-time job weights ([`Weights`]) and `p = −1` were worse.

use super::{place, solve_fast_with, Sia, SiaSolver};
use crate::{ClusterView, Policy, TypeProjection};
use pacer_model::Allocation;

/// How a job's attained service weighs its term of the objective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Weights {
    /// Every job alike (Sia's).
    Uniform,
    /// `w = τ / (τ + a)`: young jobs first (least attained service).
    Young { tau_gpu_s: f64 },
    /// `w = (τ + a) / τ`: proportional to the remaining time expected after `a`
    /// GPU-seconds of service on a heavy-tailed job-size distribution.
    Old { tau_gpu_s: f64 },
}

impl Weights {
    /// The weight of a job that has held `a` GPU-seconds.
    pub fn of(self, a: f64) -> f64 {
        let a = a.max(0.0);
        match self {
            Weights::Young { tau_gpu_s: t } if t > 0.0 => t / (t + a),
            Weights::Old { tau_gpu_s: t } if t > 0.0 => (t + a) / t,
            _ => 1.0,
        }
    }
}

/// Sia's objective without the exploration ladder, new jobs on their fastest type;
/// optionally job weights and no moves during a restart.
#[derive(Debug, Clone)]
pub struct SiaPacer {
    /// The Sia formulation it weights (fast solver).
    pub sia: Sia,
    pub weights: Weights,
    /// How online profiles show the job on types it has not run on
    /// ([`TypeProjection::MatchedBatch`]; point 4 above).
    pub projection: TypeProjection,
}

impl Default for SiaPacer {
    fn default() -> Self {
        SiaPacer::new(Weights::Uniform, -0.5, true)
    }
}

impl SiaPacer {
    pub fn new(weights: Weights, p: f64, hold_restarts: bool) -> Self {
        let mut sia = Sia::new(SiaSolver::Fast);
        sia.p = p;
        sia.fresh_by_speed = true;
        sia.explore_cap = false;
        sia.fresh_until_trained = false;
        sia.round_costs = false;
        sia.shuffle_ties = false;
        sia.batch_up_to_request = false;
        sia.swaps = false;
        sia.hold_restarts = hold_restarts;
        SiaPacer {
            sia,
            weights,
            projection: TypeProjection::MatchedBatch,
        }
    }
}

impl Policy for SiaPacer {
    fn name(&self) -> &'static str {
        "sia-pacer"
    }

    fn adaptive_batch(&self) -> bool {
        true
    }

    fn type_projection(&self) -> TypeProjection {
        self.projection
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let (problem, choice) = self.choose(view, &[]);
        let out = place(view.cluster, view.jobs, &problem.configs, &choice);
        self.note_restarts(view, &out);
        out
    }
}

impl SiaPacer {
    /// The round's knapsack and its fast solution. `reserved[j]` (when given): devices
    /// per type job `j` keeps outside the knapsack (`sia-pacer-mix`'s mixed
    /// allocations), its options cleared and the devices out of the capacity.
    pub(super) fn choose(
        &mut self,
        view: &ClusterView,
        reserved: &[Option<Vec<u64>>],
    ) -> (super::Problem, Vec<Option<usize>>) {
        self.sia.forget_finished(view);
        let mut problem = self.sia.problem(view);
        let mut held = self.sia.held(view);
        for (j, r) in reserved.iter().enumerate() {
            let Some(r) = r else { continue };
            problem.options[j].clear();
            held[j] = None;
            for (cap, &n) in problem.capacity.iter_mut().zip(r) {
                *cap = cap.saturating_sub(n);
            }
        }
        // Jobs in a restart this policy caused keep their configuration: out of the
        // knapsack, their devices out of its capacity.
        let pinned = self.sia.pin_restarting(view, &mut problem, &held);
        for (j, job) in view.jobs.iter().enumerate() {
            if pinned[j].is_some() {
                continue;
            }
            let w = self.weights.of(job.attained_gpu_s);
            for o in &mut problem.options[j] {
                o.1 *= w;
            }
        }
        let start: Vec<Option<usize>> = held
            .iter()
            .zip(&pinned)
            .map(|(h, p)| if p.is_some() { None } else { *h })
            .collect();
        let mut choice = solve_fast_with(&problem, &start, self.sia.swaps);
        for (c, p) in choice.iter_mut().zip(&pinned) {
            if p.is_some() {
                *c = *p;
            }
        }
        (problem, choice)
    }

    /// Remembers the jobs this round moves: they restart until their penalty ends.
    pub(super) fn note_restarts(&mut self, view: &ClusterView, out: &[Allocation]) {
        self.sia.note_restarts(view, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sia_pacer_projects_unseen_types_at_one_batch() {
        assert_eq!(
            SiaPacer::default().type_projection(),
            TypeProjection::MatchedBatch
        );
        assert_eq!(
            super::super::SiaPacerMix::default().type_projection(),
            TypeProjection::MatchedBatch
        );
        assert_eq!(Sia::default().type_projection(), TypeProjection::Sia);
    }
}
