//! One job's durable record and what a policy sees of it ([`job_view`]).

use crate::deadline::DeadlineRecord;
use crate::executor::RunHandle;
use crate::live::{self, LiveModel};
use crate::spec::{JobSpec, Report};
use pacer_model::{Allocation, ClusterSpec, JobId, NodeId};
use pacer_policy::job_view::{Explore, JobFacts, ReplicaBound};
use pacer_policy::{JobView, QualityView, SpeedCurve, SpeedTable};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for devices (new, or preempted).
    Queued,
    /// Its process runs on an allocation.
    Running,
    /// SIGTERM sent (preemption, resize or cancel); waiting for it to exit.
    Stopping,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Stopping,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];
    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Stopping => "stopping",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

/// One launch of a job on an allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// 1 for the first launch, +1 per relaunch.
    pub attempt: u32,
    /// `(node, devices)` pairs.
    pub alloc: Vec<(u32, u32)>,
    /// Cluster-wide slot ids held (node-major numbering).
    pub slots: Vec<u32>,
    pub device_type: String,
    /// What the executor returned; `None` between the intent to launch (committed
    /// first) and the launch itself, so a crash there is detected on restart.
    pub handle: Option<RunHandle>,
    pub launched_ms: u64,
    /// The job's step when it was launched (its last reported step; the checkpoint it
    /// resumes from may be older). Absent in records written before it existed.
    #[serde(default)]
    pub start_step: u64,
    /// Whether a report of this run has arrived (the first one measures the restart).
    #[serde(default)]
    pub reported: bool,
}

impl Run {
    pub fn allocation(&self) -> Allocation {
        Allocation::from_pairs(self.alloc.iter().map(|&(n, c)| (NodeId(n), c)))
    }
    pub fn replicas(&self) -> u32 {
        self.alloc.iter().map(|p| p.1).sum()
    }
    /// `<job>:<attempt>`, in the launched process's environment (`PACER_RUN_ID`).
    pub fn run_id(&self, job: &str) -> String {
        format!("{job}:{}", self.attempt)
    }
}

/// What happens once a stopping job's process has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterStop {
    /// Back to the queue (preempted or resized; the next round re-decides).
    Requeue,
    Cancel,
    /// Its cost budget (`budget_device_hours` or `budget_usd`) is spent: it ends
    /// cancelled.
    Budget,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stop {
    pub then: AfterStop,
    pub sent_ms: u64,
    pub killed: bool,
}

/// The latest of what the job reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub step: u64,
    pub samples: u64,
    pub throughput: f64,
    pub global_batch: u64,
    pub noise_scale: Option<f64>,
    pub loss: Option<f64>,
    pub first_loss: Option<f64>,
    /// Largest loss decrease per step between two reports (SLAQ's normaliser).
    pub max_loss_drop: f64,
    pub done: bool,
    pub last_report_ms: u64,
}

/// Measured throughput (samples/s) at `replicas` devices of `device_type`: the
/// latest report's, smoothed (EWMA, weight 1/2 on the newest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub device_type: String,
    pub replicas: u32,
    pub throughput: f64,
}

/// A job's durable record (one row of the `jobs` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: String,
    /// Submission order (1, 2, …); the policy's job id.
    pub seq: u64,
    pub spec: JobSpec,
    pub state: JobState,
    pub submitted_ms: u64,
    pub first_start_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub run: Option<Run>,
    pub stop: Option<Stop>,
    pub attempts: u32,
    /// Times it was stopped and put back in the queue.
    pub restarts: u32,
    /// How the last run ended (`exit 0`, `exit 3`, `killed`, `launch failed: …`).
    pub last_exit: Option<String>,
    /// The last run's exit status, when it exited (not killed, not failed to launch).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Why the job is in its state, for people (`pacer jobs`' REASON): what it waits
    /// for while queued (`waiting for devices`, `preempted: waiting for devices`), why it
    /// is stopping, how it ended. Absent in records written before it existed.
    #[serde(default)]
    pub reason: Option<String>,
    /// The per-job report token (never shown by the API).
    pub report_token: String,
    /// Accepted reports (their indices are 0..reports).
    pub reports: u64,
    pub attained_device_s: f64,
    pub progress: Progress,
    pub measured: Vec<Measured>,
    /// Step-time points and fits from the reports ([`crate::live`]); absent in
    /// records written before it existed.
    #[serde(default)]
    pub model: LiveModel,
    /// An admitted deadline job's deadline and admission answer ([`crate::deadline`]);
    /// `None`: best effort (and every record written before deadlines existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineRecord>,
    /// What a launch costs before the job trains at speed, the largest seen (s): from
    /// the launch to a run's first report, less the steps that report counts since the
    /// launch times their mean step time; work redone since the last checkpoint counts
    /// too. `None` before a run has reported. The deadline plan budgets it per restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_s: Option<f64>,
    /// Dollars spent at the service's prices while holding devices (`--price`; 0
    /// without prices), restarts included: what `budget_usd` is counted against.
    #[serde(default)]
    pub spent_usd: f64,
}

/// The reason of a job queued for the first time.
pub const WAITING: &str = "waiting for devices";

/// Whether `id` is a valid job id: `[a-z0-9-]{1,64}`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl JobRecord {
    /// A job just submitted: queued, never run, nothing reported.
    pub fn queued(id: String, seq: u64, spec: JobSpec, now_ms: u64, report_token: String) -> Self {
        JobRecord {
            id,
            seq,
            spec,
            state: JobState::Queued,
            submitted_ms: now_ms,
            first_start_ms: None,
            finished_ms: None,
            run: None,
            stop: None,
            attempts: 0,
            restarts: 0,
            last_exit: None,
            exit_code: None,
            reason: Some(WAITING.into()),
            report_token,
            reports: 0,
            attained_device_s: 0.0,
            progress: Progress::default(),
            measured: Vec::new(),
            model: LiveModel::default(),
            deadline: None,
            restart_s: None,
            spent_usd: 0.0,
        }
    }

    /// Folds an accepted report into progress and measurements.
    pub fn absorb(&mut self, r: &Report, now_ms: u64) {
        let p = &mut self.progress;
        if let (Some(l), Some(prev)) = (r.loss, p.loss) {
            let steps = r.step.saturating_sub(p.step).max(1) as f64;
            p.max_loss_drop = p.max_loss_drop.max((prev - l) / steps);
        }
        if p.first_loss.is_none() {
            p.first_loss = r.loss;
        }
        p.step = r.step;
        p.samples = r.samples;
        p.throughput = r.throughput;
        p.global_batch = r.global_batch;
        p.noise_scale = r.noise_scale.or(p.noise_scale);
        p.loss = r.loss.or(p.loss);
        p.done |= r.done;
        p.last_report_ms = now_ms;
        if let Some(run) = self.run.as_mut().filter(|run| !run.reported) {
            run.reported = true;
            let elapsed = now_ms.saturating_sub(run.launched_ms) as f64 / 1e3;
            let trained = r.step.saturating_sub(run.start_step) as f64 * r.step_time_s;
            let s = (elapsed - trained).clamp(0.0, elapsed);
            self.restart_s = Some(self.restart_s.map_or(s, |m| m.max(s)));
        }
        // Nodes of the run the report is from (a report whose replicas differ from
        // the run's is not attributed to a shape).
        let nodes = match &self.run {
            Some(run) if run.replicas() == r.replicas => run.alloc.len() as u32,
            _ => 0,
        };
        self.model.observe(r, nodes);
        if r.throughput > 0.0 {
            let room = self.measured.len() < 256;
            match self
                .measured
                .iter_mut()
                .find(|m| m.replicas == r.replicas && m.device_type == r.device_type)
            {
                Some(m) => m.throughput = 0.5 * (m.throughput + r.throughput),
                None if room => self.measured.push(Measured {
                    device_type: r.device_type.clone(),
                    replicas: r.replicas,
                    throughput: r.throughput,
                }),
                None => {}
            }
        }
    }

    /// The API's view: the record without its report token.
    pub fn public_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("a job record always serialises");
        if let Some(o) = v.as_object_mut() {
            o.remove("report_token");
        }
        v
    }
}

/// The speed curve of `job` on device type `ty` from its measurements: the measured
/// points (samples/s per replica count), extended linearly to `max_replicas` from the
/// two largest measured points (one point: proportional scaling, i.e. perfect linear
/// speed-up, an optimistic model until a second size is measured).
pub fn speed_curve(measured: &[Measured], ty: &str, max_replicas: u32) -> SpeedCurve {
    let mut pts: Vec<(u32, f64)> = measured
        .iter()
        .filter(|m| m.device_type == ty)
        .map(|m| (m.replicas, m.throughput))
        .collect();
    pts.sort_by_key(|p| p.0);
    if let Some(&(d1, r1)) = pts.last() {
        if max_replicas > d1 {
            let slope = match pts.len() {
                1 => r1 / d1 as f64,
                n => {
                    let (d0, r0) = pts[n - 2];
                    ((r1 - r0) / (d1 - d0) as f64).max(0.0)
                }
            };
            pts.push((max_replicas, r1 + slope * (max_replicas - d1) as f64));
        }
    }
    SpeedCurve {
        points: pts,
        spread_factor: 1.0,
    }
}

/// What a policy sees of `job` at `now_ms` (times relative to `epoch_ms`): the
/// service's facts of it ([`job_facts`]) through the one `JobView` builder.
pub fn job_view(job: &JobRecord, cluster: &ClusterSpec, epoch_ms: u64) -> JobView {
    job_facts(job, cluster, epoch_ms).view()
}

/// [`job_view`] with `prior` as the launch cost of a job that has measured none of its
/// own ([`launch_prior_s`]), so that its first launch is budgeted too.
pub fn job_view_with_prior(
    job: &JobRecord,
    cluster: &ClusterSpec,
    epoch_ms: u64,
    prior: Option<f64>,
) -> JobView {
    let mut v = job_view(job, cluster, epoch_ms);
    v.restart_s = v.restart_s.or(prior);
    v
}

/// The launch cost assumed for a job that has measured none: the median of the costs
/// the service's jobs measured ([`JobRecord::restart_s`]; the upper middle of an even
/// count). `None` while no job has measured one.
pub fn launch_prior_s<'a>(jobs: impl IntoIterator<Item = &'a JobRecord>) -> Option<f64> {
    let mut seen: Vec<f64> = jobs
        .into_iter()
        .filter_map(|j| j.restart_s)
        .filter(|s| s.is_finite())
        .collect();
    if seen.is_empty() {
        return None;
    }
    let mid = seen.len() / 2;
    let (_, m, _) = seen.select_nth_unstable_by(mid, f64::total_cmp);
    Some(*m)
}

/// The service's translation of `job`'s record (its spec, reports and runs) into the
/// driver-neutral facts of its view ([`JobFacts`]).
pub fn job_facts(job: &JobRecord, cluster: &ClusterSpec, epoch_ms: u64) -> JobFacts {
    let spec = &job.spec;
    // The goodput model: the fit of the type the job runs on, else of a type it has
    // a fit for ([`crate::live`]); `None` until a type has enough shapes.
    let run_ty = job.run.as_ref().map(|r| r.device_type.as_str());
    let fitted_ty = run_ty
        .filter(|t| job.model.fit(t).is_some())
        .or_else(|| job.model.fits.first().map(|f| f.device_type.as_str()));
    let noise = job.progress.noise_scale;
    let goodput = fitted_ty.and_then(|t| live::job_goodput(spec, &job.model, noise, t));
    let replicas = ReplicaBound {
        limit: if spec.adaptive {
            spec.max()
        } else {
            spec.replicas
        },
        // Pollux's exploration limit, as the simulator sets it, once the job has a
        // model: at most twice the most replicas it has been measured at.
        explore: (goodput.is_some() && spec.adaptive).then(|| Explore {
            measured_replicas: job.model.max_measured_replicas(),
            floor: spec.min(),
        }),
    };
    let goodput_by_type = if goodput.is_some() {
        cluster
            .device_types
            .iter()
            .map(|t| {
                let ty = if job.model.fit(t).is_some() {
                    t.as_str()
                } else {
                    fitted_ty?
                };
                spec.accepts(t)
                    .then(|| live::job_goodput(spec, &job.model, noise, ty))
                    .flatten()
            })
            .collect()
    } else {
        Vec::new()
    };
    // A type without the job's own fit is valued by `fitted_ty`'s model above.
    let measured_by_type = if goodput.is_some() {
        let own = |t: &String| job.model.fit(t).is_some();
        cluster.device_types.iter().map(own).collect()
    } else {
        Vec::new()
    };
    let max = replicas.max_replicas();
    let (work_done, work_left) = if job.measured.is_empty() {
        (0.0, 1.0)
    } else {
        let done = job.progress.samples as f64;
        let left = match total_samples(job) {
            Some(t) => (t - done).max(1.0),
            None => done.max(1.0),
        };
        (done, left)
    };
    let quality = match (job.progress.loss, job.progress.first_loss) {
        (Some(loss), Some(first)) => Some(QualityView {
            iteration: job.progress.step as f64,
            loss,
            first_loss: first,
            max_delta_per_iter: job.progress.max_loss_drop.max(1e-9),
            curve: None,
        }),
        _ => None,
    };
    let mut f = JobFacts {
        id: JobId(job.seq.min(u32::MAX as u64) as u32),
        arrival_s: job.submitted_ms.saturating_sub(epoch_ms) as f64 / 1000.0
            - spec.priority as f64 * 1e-3,
        attained_gpu_s: job.attained_device_s,
        requested_replicas: spec.replicas,
        requested_batch: None,
        replicas,
        num_restarts: job.restarts,
        restart_s: job.restart_s,
        restart_s_per_doubling: 0.0,
        current: job
            .run
            .as_ref()
            .map_or_else(Allocation::empty, Run::allocation),
        goodput,
        goodput_by_type,
        measured_by_type,
        goodput_version: job.reports,
        mixed_types: spec.mixed_types,
        speed: Some(Arc::new(speed_table(job, cluster, max, fitted_ty))),
        iterations_per_work: None,
        work_done,
        work_left,
        quality,
        one_type: !spec.mixed_types,
        deadline_s: None,
    };
    if let Some(d) = &job.deadline {
        deadline_model(&mut f, job, d, cluster, epoch_ms);
    }
    f
}

/// What a deadline job shows a deadline policy: its deadline on the round's clock, and
/// a throughput model in one of three units. Once it has reported throughput and its
/// total is known (its spec's `total_samples`, or its profile's): samples left at its
/// measured speed (the view as for any job). Before that, planned from a profile
/// (`app`, [`crate::goal`]): samples left of the admitted option's, at the option's
/// predicted speed per size (what it has done: its device-seconds at the option's
/// speed per device at its planned share). Otherwise: seconds of work at `replicas`
/// devices, `expected_runtime` less what it has held (device-seconds / `replicas`,
/// restarts counted as work: an optimistic estimate), at `d / replicas` of that speed
/// on `d` devices, i.e. linear speed-up, at the sizes it may run at
/// ([`deadline_sizes`]).
fn deadline_model(
    v: &mut JobFacts,
    job: &JobRecord,
    d: &DeadlineRecord,
    cluster: &ClusterSpec,
    epoch_ms: u64,
) {
    let spec = &job.spec;
    v.deadline_s = Some((d.deadline_ms as f64 - epoch_ms as f64) / 1000.0);
    if !job.measured.is_empty() && total_samples(job).is_some() {
        return;
    }
    let sizes = deadline_sizes(spec);
    let req = spec.replicas.max(1);
    let (points, done, left) = match &d.profile {
        Some(p) => {
            // Its device-seconds at the option's speed per device at the size it runs
            // at (or was planned at).
            let at = job.run.as_ref().map_or(d.share_now, |r| r.replicas());
            let done = job.attained_device_s * p.per_device_rate(at);
            let pts: Vec<(u32, f64)> = p
                .option
                .levels
                .iter()
                .copied()
                .filter(|l| sizes.contains(&l.0))
                .collect();
            (pts, done, p.option.samples - done)
        }
        None => {
            let done = job.attained_device_s / req as f64;
            let pts = sizes.iter().map(|&n| (n, n as f64 / req as f64)).collect();
            (pts, done, d.expected_runtime_s - done)
        }
    };
    let curve = SpeedCurve {
        points,
        spread_factor: 1.0,
    };
    v.speed = Some(Arc::new(SpeedTable {
        per_type: cluster
            .device_types
            .iter()
            .map(|t| {
                if spec.accepts(t) {
                    curve.clone()
                } else {
                    SpeedCurve::default()
                }
            })
            .collect(),
    }));
    v.replicas = ReplicaBound {
        limit: sizes.last().copied().unwrap_or(req),
        explore: None,
    };
    v.work_done = done;
    v.work_left = left.max(1.0);
}

/// The sizes a deadline job may run at: `replicas`; adaptive: also 1, 2, 4, … within
/// `min_replicas..=max_replicas` (ascending).
pub fn deadline_sizes(spec: &JobSpec) -> Vec<u32> {
    let req = spec.replicas.max(1);
    if !spec.adaptive {
        return vec![req];
    }
    let (lo, hi) = (spec.min().max(1), spec.max().max(1));
    let mut s: Vec<u32> = SpeedCurve::doubling_sizes(hi)
        .into_iter()
        .chain([lo, req])
        .filter(|&n| (lo..=hi).contains(&n))
        .collect();
    s.sort_unstable();
    s.dedup();
    s
}

/// Samples the job processes in all: its spec's `total_samples`, else the profile's
/// option admission chose (`None`: unknown).
pub fn total_samples(job: &JobRecord) -> Option<f64> {
    job.spec.total_samples.map(|t| t as f64).or_else(|| {
        let p = job.deadline.as_ref()?.profile.as_ref()?;
        Some(p.option.samples)
    })
}

/// One curve per cluster type: measured where measured; a type the job accepts but
/// has not run on borrows the curve of the type it was first measured on; no
/// measurement at all: one unit per second at the requested size, linear below. With
/// a step-time fit, sizes not measured (1, 2, 4, … up to `max`) come from the fit at
/// the job's current global batch on as few nodes as they fit instead of the linear
/// extension ([`speed_curve`]).
fn speed_table(
    job: &JobRecord,
    cluster: &ClusterSpec,
    max: u32,
    fitted: Option<&str>,
) -> SpeedTable {
    let spec = &job.spec;
    let fallback_ty = job.measured.first().map(|m| m.device_type.as_str());
    let batch = match job.progress.global_batch {
        0 => live::limits(spec, &job.model).map_or(0.0, |l| l.base_batch),
        b => b as f64,
    };
    let per_node = cluster.max_gpus_per_node().max(1);
    let per_type = cluster
        .device_types
        .iter()
        .map(|t| {
            if !spec.accepts(t) {
                return SpeedCurve::default();
            }
            if job.measured.is_empty() {
                return SpeedCurve::single(max, max as f64 / spec.replicas.max(1) as f64, 1.0);
            }
            let has_own = job.measured.iter().any(|m| m.device_type == *t);
            let ty = if has_own {
                t.as_str()
            } else {
                fallback_ty.unwrap_or("")
            };
            let fit = job
                .model
                .fit(ty)
                .or_else(|| fitted.and_then(|f| job.model.fit(f)));
            match fit {
                Some(perf) if batch > 0.0 => {
                    let mut c = speed_curve(&job.measured, ty, 0);
                    for r in SpeedCurve::doubling_sizes(max) {
                        if c.points.iter().all(|p| p.0 != r) {
                            let step = perf.step_time(r.div_ceil(per_node), r, batch / r as f64, 0);
                            c.points.push((r, batch / step));
                        }
                    }
                    c.points.sort_by_key(|p| p.0);
                    c
                }
                _ => speed_curve(&job.measured, ty, max),
            }
        })
        .collect();
    SpeedTable { per_type }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(valid_id("job-12"));
        for bad in ["", "../x", "A", "a/b", "a.b", &"x".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn curve_extends_from_measurements() {
        let m = |r, x| Measured {
            device_type: "cpu".into(),
            replicas: r,
            throughput: x,
        };
        let c = speed_curve(&[m(2, 100.0)], "cpu", 4);
        assert_eq!(c.points, vec![(2, 100.0), (4, 200.0)]);
        let c = speed_curve(&[m(1, 60.0), m(2, 100.0)], "cpu", 4);
        assert_eq!(c.points, vec![(1, 60.0), (2, 100.0), (4, 180.0)]);
        assert!(speed_curve(&[m(1, 60.0)], "t4", 4).points.is_empty());
    }
}
