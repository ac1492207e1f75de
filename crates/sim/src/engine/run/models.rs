//! What a run computes once per job before its first round ([`Models`]: each job's
//! progress model, speed table, batch mode, device cap and view constants, and the
//! arrival order), and the views policies see built from them.

use super::super::view::ViewConsts;
use super::*;

/// What a run computes once per job before the first round.
pub(super) struct Models<'s> {
    pub(super) kinds: Vec<progress::Kind<'s>>,
    pub(super) speeds: Vec<Arc<SpeedTable>>,
    pub(super) modes: Vec<BatchMode>,
    /// Devices of the types each job can run on (adaptive jobs explore up to it).
    pub(super) caps: Vec<u32>,
    /// What each job's view reads of its progress model that a run does not change.
    pub(super) consts: Vec<ViewConsts>,
    /// Jobs in arrival order; `rank` inverts it.
    pub(super) order: Vec<usize>,
    pub(super) rank: Vec<usize>,
    pub(super) uses_quality: bool,
    /// Every job is measured on every device type of the cluster: no allocation
    /// can land on an unmeasured one (the per-change check is skipped).
    pub(super) all_measured: bool,
    /// Every job can use every device type at the same speed (the event-driven
    /// forms place jobs without looking at types).
    pub(super) unrestricted: bool,
    /// When arrivals start a round: the configuration's, `Auto` resolved to the
    /// policy's own ([`ArrivalReplan::resolve`]).
    pub(super) replan: ArrivalReplan,
    /// Under the event clock, the policy's [`Policy::end_event_slot_s`]: a
    /// completion's round is at ElasticFlow's end event, in whole slots of it.
    pub(super) end_event_slot_s: Option<f64>,
}

impl Models<'_> {
    /// What a policy sees of job `i` (with its quality view when `uses_quality`).
    pub(super) fn job_view(
        &self,
        sim: &Simulation<'_>,
        i: usize,
        st: &mut JobState,
        uses_quality: bool,
    ) -> JobView {
        self.job_facts(sim, i, st, uses_quality).facts().view()
    }

    /// [`Models::job_view`] written over `view` (last round's view of a job).
    pub(super) fn refresh_view(
        &self,
        sim: &Simulation<'_>,
        i: usize,
        st: &mut JobState,
        uses_quality: bool,
        view: &mut JobView,
    ) {
        self.job_facts(sim, i, st, uses_quality)
            .facts()
            .view_into(view);
    }

    #[inline(always)]
    fn job_facts(
        &self,
        sim: &Simulation<'_>,
        i: usize,
        st: &mut JobState,
        uses_quality: bool,
    ) -> SimJobFacts {
        let (kind, speed) = (&*self.kinds[i], &self.speeds[i]);
        sim.job_facts(
            i,
            kind,
            st,
            self.modes[i],
            speed,
            self.caps[i],
            &self.consts[i],
            uses_quality,
        )
    }
}

impl Simulation<'_> {
    /// The per-job models, speed tables and batch modes, and the arrival order.
    pub(super) fn models(&self, policy: &dyn Policy) -> Models<'_> {
        let adaptive = policy.adaptive_batch();
        let kinds = progress::all(self.jobs);
        let speeds = self.speed_tables_of(&kinds);
        // The event-driven forms place jobs without looking at device types: they run
        // only when every job can use every device type of the cluster at the same
        // speed (the full policies keep each job on the types it has measurements
        // for, and a job whose speed depends on the type on one type).
        let unrestricted = speeds.iter().all(|sp| {
            sp.per_type
                .iter()
                .all(|c| !c.points.is_empty() && *c == sp.per_type[0])
        });
        let types = self.cluster.device_types.len();
        let all_measured = speeds.iter().all(|sp| {
            sp.per_type.len() >= types && sp.per_type[..types].iter().all(|c| !c.points.is_empty())
        });
        let modes: Vec<BatchMode> = self
            .jobs
            .iter()
            .zip(&kinds)
            .map(|(j, kind)| kind.batch_mode(self, j, adaptive))
            .collect();
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&a, &b| {
            self.jobs[a]
                .spec
                .arrival_s
                .total_cmp(&self.jobs[b].spec.arrival_s)
                .then(a.cmp(&b))
        });
        let mut rank = vec![0usize; self.jobs.len()];
        for (r, &i) in order.iter().enumerate() {
            rank[i] = r;
        }
        let caps: Vec<u32> = speeds
            .iter()
            .map(|sp| {
                let usable: Vec<bool> = sp.per_type.iter().map(|c| !c.points.is_empty()).collect();
                crate::admit::capacity(self.cluster, &usable).min(u32::MAX as u64) as u32
            })
            .collect();
        let consts = kinds.iter().map(|k| ViewConsts::of(self, &**k)).collect();
        Models {
            kinds,
            speeds,
            modes,
            caps,
            consts,
            order,
            rank,
            uses_quality: policy.uses_quality(),
            replan: self.config.replan_on_arrival.resolve(policy),
            end_event_slot_s: policy
                .end_event_slot_s()
                .filter(|s| s.is_finite() && *s > 0.0),
            all_measured,
            unrestricted,
        }
    }
}
