//! Deadline jobs in the [`Core`]: admission on submission, the plan of the admitted
//! jobs each round (derived, for status), and each job's status.

use super::Core;
use crate::deadline::{self, rfc3339, DeadlineRecord, Status};
use crate::error::ApiError;
use crate::goal::{goal_of, GoalPlan};
use crate::job::{deadline_sizes, job_view_with_prior, launch_prior_s, JobRecord, JobState};
use crate::spec::JobSpec;
use pacer_model::ClusterSpec;
use pacer_policy::deadline::plan::{plan_all, Admission, AdmitRules, Admitter, PlanJob, Timeline};
use pacer_policy::JobView;

impl Core {
    /// Admits the deadline job `job` (not yet stored) at `now_ms`: its deadline
    /// resolved and its minimum share planned beside the active admitted jobs' on the
    /// whole cluster ([`admit`]). Declined: a 409 naming `deadline`, with the earliest
    /// deadline that would have fitted.
    pub(super) fn admit(
        &mut self,
        job: &JobRecord,
        now_ms: u64,
    ) -> Result<DeadlineRecord, ApiError> {
        let spec = &job.spec;
        let text = spec.deadline.as_deref().unwrap_or_default();
        let Some(cfg) = self.deadline_cfg else {
            return Err(ApiError::bad(
                "deadline",
                format!(
                    "this service runs policy `{}`, which does not plan deadlines; submit \
                     the job without `deadline`, or start the service with `--policy \
                     deadline` (or `elasticflow`)",
                    self.settings.policy
                ),
            ));
        };
        let deadline_ms =
            deadline::resolve_deadline(text, now_ms).map_err(|e| ApiError::bad("deadline", e))?;
        let expected_runtime_s = match spec.app {
            Some(_) => 0.0,
            None => spec.expected_runtime_s().ok_or_else(|| {
                ApiError::bad("expected_runtime", deadline::DURATION_FORMS.to_string())
            })?,
        };
        // What to plan it with: `expected_runtime`, or each of the profile's options
        // for the goal, best first.
        let tries: Vec<Option<GoalPlan>> = match &spec.app {
            None => vec![None],
            Some(app) => self
                .goal_options(spec, app)?
                .into_iter()
                .map(Some)
                .collect(),
        };
        let mut rec = DeadlineRecord {
            deadline_ms,
            expected_runtime_s,
            share_now: 0,
            planned_finish_ms: deadline_ms,
            profile: None,
        };
        let cluster = &self.settings.cluster;
        let prior = launch_prior_s(self.jobs.values());
        let plan = |j: &JobRecord| {
            PlanJob::from_view(
                &job_view_with_prior(j, cluster, self.epoch_ms, prior),
                cluster,
                cfg.budget_restarts,
            )
            .up_to_fastest()
        };
        let admitted: Vec<PlanJob> = self
            .jobs
            .values()
            .filter(|j| j.deadline.is_some() && !j.state.is_terminal())
            .map(plan)
            .collect();
        let now_s = self.clock_s(now_ms);
        let rules = AdmitRules {
            mix: cfg.mix,
            decline_if_any_late: cfg.decline_if_any_late,
            switch_at_breakpoints: cfg.switch_at_breakpoints,
        };
        let admitter = Admitter::new(cluster, now_s, cfg.slot_s, admitted.iter().collect(), rules);
        let mut cand = job.clone();
        let mut earliest_s: Option<f64> = None;
        let n_tries = tries.len();
        for profile in tries {
            rec.profile = profile;
            cand.deadline = Some(rec.clone());
            match admitter.admit(&plan(&cand)) {
                Admission::Accepted {
                    share_now,
                    planned_finish_s,
                } => {
                    rec.share_now = share_now;
                    rec.planned_finish_ms = self.wall_ms(planned_finish_s);
                    self.metrics.deadline_admissions("accepted").inc();
                    return Ok(rec);
                }
                Admission::Declined {
                    earliest_deadline_s,
                } => {
                    if let Some(e) = earliest_deadline_s {
                        earliest_s = Some(earliest_s.map_or(e, |b: f64| b.min(e)));
                    }
                }
            }
        }
        self.metrics.deadline_admissions("declined").inc();
        let earliest = earliest_s.map(|s| self.wall_ms(s));
        let options = match &spec.app {
            Some(app) => format!(" (with any of the {n_tries} batch option(s) of profile `{app}`)"),
            None => String::new(),
        };
        let why = match earliest {
            Some(e) => format!(
                "declined: its minimum share cannot be guaranteed by {} beside the {} \
                 admitted deadline job(s){options}; the earliest deadline that fits is {} \
                 ({} from now)",
                rfc3339(deadline_ms),
                admitted.len(),
                rfc3339(e),
                deadline::human_s(e.saturating_sub(now_ms) as f64 / 1e3)
            ),
            None => format!(
                "declined: no deadline fits{options} (its sizes do not fit this cluster's \
                 free devices within the {} admitted deadline job(s)' plans)",
                admitted.len()
            ),
        };
        let mut e = ApiError::conflict("deadline", why);
        e.detail = Some(serde_json::json!({
            "admission": {
                "decision": "declined",
                "deadline": rfc3339(deadline_ms),
                "deadline_ms": deadline_ms,
                "earliest_deadline": earliest.map(rfc3339),
                "earliest_deadline_ms": earliest,
                "admitted_deadline_jobs": admitted.len(),
            }
        }));
        Err(e)
    }

    /// The options of profile `app` for `spec`'s goal, best first, at the sizes it may
    /// run at, on placements that fit the largest node of a type it accepts (at
    /// `global_batch` only, when the spec gives one); a 400 naming `app` when none.
    fn goal_options(&self, spec: &JobSpec, app: &str) -> Result<Vec<GoalPlan>, ApiError> {
        let model = self.goals.get(app)?;
        let goal = goal_of(spec, &model);
        let cluster = &self.settings.cluster;
        let per_node = cluster
            .nodes
            .iter()
            .filter(|n| spec.accepts(&cluster.device_types[n.device_type.0 as usize]))
            .map(|n| n.gpus)
            .max()
            .unwrap_or(0);
        let sizes = deadline_sizes(spec);
        let batch = spec.global_batch.map(|b| [b as f64]);
        let options = model.options(goal, batch.as_ref().map(|b| &b[..]), &sizes, per_node);
        if options.is_empty() {
            return Err(ApiError::bad(
                "app",
                format!(
                    "profile `{app}` has no measured placement for the sizes this job may run \
                     at ({sizes:?} devices, at most {per_node} on a node){}{}",
                    match spec.global_batch {
                        Some(b) => format!(" at global batch {b}"),
                        None => String::new(),
                    },
                    match goal.target() {
                        Some(target) => format!(" that reaches target_metric {target}"),
                        None => String::new(),
                    }
                ),
            ));
        }
        Ok(options
            .into_iter()
            .enumerate()
            .map(|(i, option)| GoalPlan {
                app: app.to_string(),
                goal,
                option,
                declined_better: i as u32,
            })
            .collect())
    }

    /// Seconds on the policy's clock (since the service's epoch) of `ms`.
    fn clock_s(&self, ms: u64) -> f64 {
        (ms as f64 - self.epoch_ms as f64) / 1e3
    }

    /// Ms since the Unix epoch of `s` on the policy's clock (infinite: the far end).
    fn wall_ms(&self, s: f64) -> u64 {
        let ms = self.epoch_ms as f64 + s * 1e3;
        if ms.is_finite() {
            ms.max(0.0).round() as u64
        } else {
            u64::MAX
        }
    }

    /// Plans the deadline jobs of a round's `views` (ids alike) as the policy does,
    /// and keeps each one's planned finish for [`Core::deadline_status`].
    pub(super) fn plan_deadlines(
        &mut self,
        views: &[JobView],
        ids: &[String],
        cluster: &ClusterSpec,
        now_s: f64,
    ) {
        self.planned_finish_ms.clear();
        let Some(cfg) = self.deadline_cfg else { return };
        let (jobs, names): (Vec<PlanJob>, Vec<&String>) = views
            .iter()
            .zip(ids)
            .filter(|(v, _)| v.deadline_s.is_some())
            .map(|(v, id)| {
                (
                    PlanJob::from_view(v, cluster, cfg.budget_restarts).up_to_fastest(),
                    id,
                )
            })
            .unzip();
        if jobs.is_empty() {
            return;
        }
        let plans = plan_all(
            &mut Timeline::new(cluster, now_s, cfg.slot_s),
            &jobs,
            cfg.mix,
        );
        for (p, id) in plans.into_iter().zip(names) {
            let finish = p
                .filter(|p| p.feasible)
                .and_then(|p| p.finish_s)
                .map(|s| self.wall_ms(s));
            self.planned_finish_ms.insert(id.clone(), finish);
        }
    }

    /// `job`'s deadline status at `now_ms` (`None`: best effort).
    pub fn deadline_status(&self, job: &JobRecord, now_ms: u64) -> Option<Status> {
        let d = job.deadline.as_ref()?;
        let finished = job
            .finished_ms
            .filter(|_| job.state.is_terminal())
            .map(|t| (job.state == JobState::Succeeded, t));
        // Before its first round: the admission's plan.
        let planned = self
            .planned_finish_ms
            .get(&job.id)
            .copied()
            .unwrap_or(Some(d.planned_finish_ms));
        Some(deadline::status(d.deadline_ms, finished, now_ms, planned))
    }

    /// What the API and the dashboard show of `job`'s deadline (`None`: best effort).
    pub fn deadline_json(&self, job: &JobRecord, now_ms: u64) -> Option<serde_json::Value> {
        let d = job.deadline.as_ref()?;
        let status = self.deadline_status(job, now_ms)?;
        let planned = self
            .planned_finish_ms
            .get(&job.id)
            .copied()
            .unwrap_or(Some(d.planned_finish_ms))
            .filter(|p| *p != u64::MAX);
        Some(serde_json::json!({
            "status": status.name(),
            "deadline": rfc3339(d.deadline_ms),
            "deadline_ms": d.deadline_ms,
            "planned_finish": planned.map(rfc3339),
            "planned_finish_ms": planned,
            "expected_runtime_s": d.expected_runtime_s,
            "profile": d.profile.as_ref().map(|p| serde_json::json!({
                "app": p.app,
                "global_batch": p.option.global_batch,
                "samples": p.option.samples,
                "predicted_metric": p.option.metric,
            })),
        }))
    }
}
