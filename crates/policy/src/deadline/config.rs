//! How a [`super::Deadline`] policy plans: [`DeadlineConfig`] and its named setups.

use crate::ArrivalReplan;

/// How a [`Deadline`] policy plans (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeadlineConfig {
    /// The planning slot (s): the scheduling round the allocations hold for.
    pub slot_s: f64,
    /// Shares as late as possible (the level below first).
    pub mix: bool,
    /// Budget each job's restart delay in its plan.
    pub budget_restarts: bool,
    /// Decline while any admitted job is planned late ([`plan::AdmitRules`]).
    pub decline_if_any_late: bool,
    /// Re-try declined jobs every round.
    pub retry_declined: bool,
    /// Decide the deadline jobs first seen in one round together, all admitted or all
    /// declined ([`plan::Admitter::admit_together`]; ElasticFlow's simulator admits
    /// one scheduling event's arrivals so). Off: one at a time in arrival order.
    pub joint_admission: bool,
    /// When a simulator should start a round at an arrival unless told otherwise
    /// ([`Policy::arrival_replan`]).
    pub arrivals: ArrivalReplan,
    /// Grow a job beyond the devices it holds only when the time saved exceeds twice
    /// the restart it costs.
    pub sticky: bool,
    /// Every job the view shows with a deadline was admitted by the driver (the
    /// service answers admission on submission and shows no declined job): admit it
    /// without planning, so a fresh policy (a restarted service) never re-decides a
    /// guarantee already given.
    pub admitted_by_driver: bool,
    /// Under the event clock, wake at the plan's next breakpoint (the first slot where
    /// a job that took no spare device changes size) instead of every slot: the plan
    /// is carried out between events, as ElasticFlow's simulator does (its next
    /// "scale event" is the earliest allocation change of any job's plan).
    pub wake_at_breakpoints: bool,
    /// Under the event clock, ask the driver to charge ElasticFlow's per-event
    /// overhead ([`Policy::charges_event_overhead`]).
    pub event_overhead: bool,
    /// A new job declined on its first answer hears the earliest deadline that would
    /// have fitted ([`plan::Admitter::admit`]: a bisection of admission checks) in
    /// [`Deadline::answers`]. Off in both constructors: `pacer simulate` reads no
    /// answer, and the service answers a submission with [`plan::admit`] itself (its
    /// policy never declines: `admitted_by_driver`). Off, the answer is
    /// `Declined { earliest_deadline_s: None }`; the decisions are the same.
    pub earliest_on_decline: bool,
    /// Spare devices by ElasticFlow's marginal ([`marginal`]: its simulator's
    /// `allocate_free_gpus`): the change in planned device-time per added device,
    /// a step that outlasts the free devices' next change re-planning the rest; one
    /// job at a time, marginals computed again after each step. Off: the remaining
    /// time saved per added device.
    pub ef_marginal: bool,
    /// With `mix`, a share's upper level starts at the latest breakpoint of the free
    /// devices (or now) from which it alone meets the deadline, as ElasticFlow's
    /// `ef_sim_allocation` plans it ([`plan::AdmitRules::switch_at_breakpoints`]).
    /// Off: at the latest slot that still meets it.
    pub switch_at_breakpoints: bool,
    /// Place every job afresh each round, largest first, on the lowest-numbered
    /// devices of its type (ElasticFlow's placement, [`place::place_packed`]), and
    /// with `event_overhead` have the overhead charged by placement as ElasticFlow's
    /// simulator charges it ([`Policy::event_overhead_by_placement`]: a placement held
    /// since the last periodic restart is cached, changed allocation or not). Off:
    /// running jobs keep their devices while their counts hold
    /// ([`place::place_counts`]) and a kept allocation is the cached one.
    pub ef_placement: bool,
    /// Under the event clock, the round a completion calls is at ElasticFlow's end
    /// event for the job ([`Policy::end_event_slot_s`]: the round's time, plus the
    /// overhead charged there, plus whole slots of `slot_s`). Off: at the completion.
    pub ef_end_events: bool,
}

impl DeadlineConfig {
    /// ElasticFlow's policy as its simulator runs it.
    pub fn elasticflow(slot_s: f64) -> Self {
        DeadlineConfig {
            slot_s,
            mix: true,
            decline_if_any_late: true,
            budget_restarts: false,
            retry_declined: false,
            joint_admission: true,
            arrivals: ArrivalReplan::Events,
            sticky: false,
            admitted_by_driver: false,
            wake_at_breakpoints: true,
            event_overhead: true,
            earliest_on_decline: false,
            ef_marginal: false,
            switch_at_breakpoints: false,
            ef_placement: false,
            ef_end_events: false,
        }
    }

    /// [`DeadlineConfig::elasticflow`] with ElasticFlow's placement and its per-event
    /// overhead by placement ([`DeadlineConfig::ef_placement`]).
    pub fn elasticflow_placement(slot_s: f64) -> Self {
        DeadlineConfig {
            ef_placement: true,
            ..Self::elasticflow(slot_s)
        }
    }

    /// [`DeadlineConfig::elasticflow`] with the spare by ElasticFlow's own marginal
    /// ([`DeadlineConfig::ef_marginal`]).
    pub fn elasticflow_marginal(slot_s: f64) -> Self {
        DeadlineConfig {
            ef_marginal: true,
            ..Self::elasticflow(slot_s)
        }
    }

    /// [`DeadlineConfig::elasticflow_marginal`] with ElasticFlow's switch of a share's
    /// level ([`DeadlineConfig::switch_at_breakpoints`]).
    pub fn elasticflow_marginal_switch(slot_s: f64) -> Self {
        DeadlineConfig {
            switch_at_breakpoints: true,
            ..Self::elasticflow_marginal(slot_s)
        }
    }

    /// [`DeadlineConfig::elasticflow_marginal_switch`] with ElasticFlow's placement
    /// ([`DeadlineConfig::ef_placement`]).
    pub fn elasticflow_marginal_switch_placement(slot_s: f64) -> Self {
        DeadlineConfig {
            ef_placement: true,
            ..Self::elasticflow_marginal_switch(slot_s)
        }
    }

    /// [`DeadlineConfig::elasticflow_marginal_switch_placement`] with ElasticFlow's
    /// end events ([`DeadlineConfig::ef_end_events`]).
    pub fn elasticflow_marginal_switch_placement_clock(slot_s: f64) -> Self {
        DeadlineConfig {
            ef_end_events: true,
            ..Self::elasticflow_marginal_switch_placement(slot_s)
        }
    }

    /// pacer's deadline policy.
    pub fn pacer(slot_s: f64) -> Self {
        DeadlineConfig {
            slot_s,
            mix: false,
            decline_if_any_late: false,
            budget_restarts: true,
            retry_declined: true,
            joint_admission: false,
            arrivals: ArrivalReplan::Always,
            sticky: true,
            admitted_by_driver: false,
            wake_at_breakpoints: false,
            event_overhead: false,
            earliest_on_decline: false,
            ef_marginal: false,
            switch_at_breakpoints: false,
            ef_placement: false,
            ef_end_events: false,
        }
    }
}
