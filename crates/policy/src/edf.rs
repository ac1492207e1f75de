//! Earliest deadline first, as ElasticFlow's simulator runs its EDF baseline: every
//! round, jobs in deadline order (best-effort jobs last, by arrival) each take the
//! largest of their measured sizes that fits the free devices, up to their largest;
//! no admission control, so a job that cannot make its deadline still runs. It asks a
//! simulator for ElasticFlow's simulator's clock, rounds at arrivals and completions
//! at least a round apart ([`ArrivalReplan::Events`], [`Policy::arrival_replan`];
//! docs/elasticflow.md).

use crate::deadline::place_counts;
use crate::deadline::plan::{edf_order, PlanJob};
use crate::{ArrivalReplan, ClusterView, Policy};
use pacer_model::Allocation;

#[derive(Debug, Default)]
pub struct Edf;

impl Policy for Edf {
    fn name(&self) -> &'static str {
        "edf"
    }

    fn arrival_replan(&self) -> ArrivalReplan {
        ArrivalReplan::Events
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let jobs: Vec<PlanJob> = view
            .jobs
            .iter()
            .map(|v| PlanJob::from_view(v, view.cluster, false))
            .collect();
        let types = view.cluster.device_types.len().max(1);
        let mut free: Vec<u32> = (0..types)
            .map(|t| {
                view.cluster
                    .gpus_of_type(pacer_model::DeviceTypeId(t as u16))
            })
            .collect();
        let mut counts = vec![0u32; jobs.len()];
        let mut order = edf_order(&jobs);
        // Best-effort jobs (ordered last) by arrival.
        order.sort_by(|&a, &b| match (jobs[a].deadline_s, jobs[b].deadline_s) {
            (None, None) => view.jobs[a]
                .arrival_s
                .total_cmp(&view.jobs[b].arrival_s)
                .then(jobs[a].id.cmp(&jobs[b].id)),
            _ => std::cmp::Ordering::Equal,
        });
        for i in order {
            let j = &jobs[i];
            let n = j.level_at_most(free[j.ty]);
            counts[i] = n;
            free[j.ty] -= n;
        }
        let tys: Vec<usize> = jobs.iter().map(|j| j.ty).collect();
        place_counts(view, &counts, &tys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobView, SpeedCurve, SpeedTable};
    use pacer_model::{ClusterSpec, JobId};
    use std::sync::Arc;

    fn job(id: u32, deadline: Option<f64>) -> JobView {
        let curve = SpeedCurve {
            points: vec![(1, 1.0), (2, 1.9), (4, 3.6)],
            spread_factor: 1.0,
        };
        JobView {
            speed: Some(Arc::new(SpeedTable::uniform(1, curve))),
            deadline_s: deadline,
            work_left: 100.0,
            ..JobView::basic(JobId(id), f64::from(id), 1)
        }
    }

    #[test]
    fn earliest_deadline_takes_its_largest_size_first() {
        let cluster = ClusterSpec::parse("1x6:t4", "t").unwrap();
        let jobs = [job(0, None), job(1, Some(500.0)), job(2, Some(200.0))];
        let view = ClusterView {
            now_s: 0.0,
            cluster: &cluster,
            jobs: &jobs,
        };
        let a = Edf.allocate(&view);
        // Job 2 (deadline 200) takes 4, job 1 the 2 left, best effort nothing.
        assert_eq!(
            a.iter().map(Allocation::replicas).collect::<Vec<_>>(),
            vec![0, 2, 4]
        );
    }
}
