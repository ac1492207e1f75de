//! Tiresias as ElasticFlow's simulator runs its baseline (`dlas-gpu` there): discretised
//! least-attained-service over **three** queues, demoted at 3,250 and 7,200 GPU-seconds
//! of attained service (running time × requested devices; ElasticFlow's
//! `queue_limit`), against pacer's `tiresias`, which follows Pollux's simulator (two
//! queues, 16 GPU-hours). Each round the queues are walked in order and a job runs when
//! its request still fits the free devices (a job that does not fit is passed over, so a
//! smaller one behind it may run); then the jobs left waiting move to the back of their
//! queue, keeping their order, as ElasticFlow's simulator does after each event, so the
//! running jobs of a queue stay ahead of its waiting ones. New jobs enter the first
//! queue's back in arrival order; a demoted job enters the next queue's back. No
//! starvation handling (ElasticFlow's default, `solve_starvation = 0`). Gang-scheduled
//! at the requested size; no admission control and no deadline awareness. It runs on
//! ElasticFlow's simulator's clock ([`ArrivalReplan::Events`]): rounds at arrivals,
//! completions and its own queue demotions ([`Policy::wake_s`]), at least a round
//! apart (docs/elasticflow.md).

use crate::tiresias::{forget_and_enrol, gang_in_order};
use crate::{ArrivalReplan, ClusterView, Policy};
use pacer_model::{Allocation, JobId};
use std::collections::HashMap;

/// ElasticFlow's demotion thresholds (GPU-seconds): queue `q` is left at `LIMITS[q]`.
pub const LIMITS_GPU_S: [f64; 2] = [3250.0, 7200.0];

#[derive(Debug, Clone)]
struct State {
    queue: usize,
    running: bool,
    last_check_s: f64,
    executed_s: f64,
    /// Devices it is charged for (its request, capped by the cluster).
    gpus: u32,
}

/// ElasticFlow's `dlas-gpu` (module docs).
#[derive(Debug, Default)]
pub struct Dlas {
    state: HashMap<JobId, State>,
    /// The queues, each in its order (front first).
    queues: [Vec<JobId>; 3],
}

impl Policy for Dlas {
    fn name(&self) -> &'static str {
        "dlas-gpu"
    }

    fn arrival_replan(&self) -> ArrivalReplan {
        ArrivalReplan::Events
    }

    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let now = view.now_s;
        let cap = view.cluster.total_gpus();
        let fresh = forget_and_enrol(view, &mut self.state);
        for q in &mut self.queues {
            q.retain(|id| self.state.contains_key(id));
        }
        for j in fresh {
            self.state.insert(
                j.id,
                State {
                    queue: 0,
                    running: false,
                    last_check_s: now,
                    executed_s: 0.0,
                    gpus: 1,
                },
            );
            self.queues[0].push(j.id);
        }
        // Account the running jobs' service; demote to the back of the next queue.
        let index: HashMap<JobId, usize> = view
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.id, i))
            .collect();
        for j in view.jobs {
            let s = self.state.get_mut(&j.id).expect("enrolled");
            s.gpus = j.requested_replicas.clamp(1, cap);
            if s.running {
                s.executed_s += now - s.last_check_s;
                let gpu_s = s.executed_s * s.gpus as f64;
                let q = s.queue;
                if q < LIMITS_GPU_S.len() && gpu_s >= LIMITS_GPU_S[q] {
                    s.queue = q + 1;
                    self.queues[q].retain(|&id| id != j.id);
                    self.queues[q + 1].push(j.id);
                }
            }
            s.last_check_s = now;
        }
        // Walk the queues in order; whoever still fits runs.
        let order: Vec<usize> = self.queues.iter().flatten().map(|id| index[id]).collect();
        let (run, out) = gang_in_order(view, &order);
        for (i, j) in view.jobs.iter().enumerate() {
            self.state.get_mut(&j.id).expect("enrolled").running = run[i];
        }
        // The waiting jobs of each queue to its back, in their order.
        for q in &mut self.queues {
            let (running, waiting): (Vec<JobId>, Vec<JobId>) =
                q.iter().partition(|id| run[index[*id]]);
            *q = running;
            q.extend(waiting);
        }
        out
    }

    /// The next queue demotion as ElasticFlow's simulator times its "job jump"
    /// event: for each running job below the last queue, `ceil((limit − executed) /
    /// gpus)` seconds after its last check (its formula, which subtracts executed
    /// seconds from a GPU-seconds limit: at or after the demotion itself).
    fn wake_s(&self) -> Option<f64> {
        self.state
            .values()
            .filter(|s| s.running && s.queue < LIMITS_GPU_S.len())
            .map(|s| {
                s.last_check_s + ((LIMITS_GPU_S[s.queue] - s.executed_s) / s.gpus as f64).ceil()
            })
            .min_by(f64::total_cmp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobView;
    use pacer_model::ClusterSpec;

    fn round(p: &mut Dlas, c: &ClusterSpec, now: f64, jobs: &mut [JobView]) -> Vec<u32> {
        let out = p.allocate(&ClusterView {
            cluster: c,
            now_s: now,
            jobs,
        });
        for (j, a) in jobs.iter_mut().zip(&out) {
            j.current = a.clone();
        }
        out.iter().map(|a| a.replicas()).collect()
    }

    #[test]
    fn demotes_at_elasticflow_s_limits_and_waiting_jobs_go_back() {
        let c = ClusterSpec::parse("1x4:t4", "t").unwrap();
        // Job 0 (4 devices) arrives first and runs; job 1 (2) and job 2 (2) wait.
        let mut jobs = vec![
            JobView::basic(JobId(0), 0.0, 4),
            JobView::basic(JobId(1), 1.0, 2),
            JobView::basic(JobId(2), 2.0, 2),
        ];
        let mut p = Dlas::default();
        assert_eq!(round(&mut p, &c, 0.0, &mut jobs), [4, 0, 0]);
        // 4 devices × 800 s = 3,200 GPU-s: still in the first queue.
        assert_eq!(round(&mut p, &c, 800.0, &mut jobs), [4, 0, 0]);
        // 4 × 820 = 3,280 ≥ 3,250: demoted behind jobs 1 and 2, which now run.
        assert_eq!(round(&mut p, &c, 820.0, &mut jobs), [0, 2, 2]);
        assert_eq!(p.state[&JobId(0)].queue, 1);
        // Jobs 1 and 2 run 1,625 s each at 2 devices (3,250 GPU-s): both demoted to
        // queue 1's back, behind job 0, which runs again.
        assert_eq!(round(&mut p, &c, 820.0 + 1625.0, &mut jobs), [4, 0, 0]);
        assert_eq!(p.queues[1], [JobId(0), JobId(1), JobId(2)]);
    }

    #[test]
    fn a_job_that_does_not_fit_is_passed_over() {
        let c = ClusterSpec::parse("1x4:t4", "t").unwrap();
        let mut jobs = vec![
            JobView::basic(JobId(0), 0.0, 3),
            JobView::basic(JobId(1), 1.0, 2),
            JobView::basic(JobId(2), 2.0, 1),
        ];
        let mut p = Dlas::default();
        assert_eq!(round(&mut p, &c, 0.0, &mut jobs), [3, 0, 1]);
        // Job 1 waited: it goes behind job 2 in the first queue.
        assert_eq!(p.queues[0], [JobId(0), JobId(2), JobId(1)]);
    }
}
