//! `/metrics` in the Prometheus text format (prometheus-client). Gauges that mirror
//! the job table are recomputed at each scrape; counters and histograms are updated
//! where things happen.

use crate::deadline::Status;
use crate::job::{JobRecord, JobState};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

pub struct Metrics {
    registry: Registry,
    jobs: Family<Labels, Gauge>,
    devices: Family<Labels, Gauge>,
    pub round_seconds: Histogram,
    pub policy_seconds: Histogram,
    pub reports: Counter,
    pub submissions: Counter,
    pub restarts: Gauge,
    /// Jobs stopped because their cost budget was spent, by budget
    /// (`device_hours`, `usd`): [`Metrics::budget_stop`].
    budget_stops: Family<Labels, Counter>,
    /// Device-hours held and dollars spent by each job not yet ended.
    job_device_hours: Family<Labels, FloatGauge>,
    job_spent_usd: Family<Labels, FloatGauge>,
    deadline_jobs: Family<Labels, Gauge>,
    deadline_admitted: Gauge,
    deadline_admissions: Family<Labels, Counter>,
    deadline_ended: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("pacer_serve");
        let jobs = Family::<Labels, Gauge>::default();
        let devices = Family::<Labels, Gauge>::default();
        let round_seconds = Histogram::new(exponential_buckets(1e-4, 4.0, 10));
        let policy_seconds = Histogram::new(exponential_buckets(1e-5, 4.0, 10));
        let reports = Counter::default();
        let submissions = Counter::default();
        let restarts = Gauge::default();
        let budget_stops = Family::<Labels, Counter>::default();
        let job_device_hours = Family::<Labels, FloatGauge>::default();
        let job_spent_usd = Family::<Labels, FloatGauge>::default();
        let deadline_jobs = Family::<Labels, Gauge>::default();
        let deadline_admitted = Gauge::default();
        let deadline_admissions = Family::<Labels, Counter>::default();
        let deadline_ended = Family::<Labels, Counter>::default();
        registry.register(
            "deadline_jobs",
            "Admitted deadline jobs by deadline status (on_track, at_risk, missed, met, ended)",
            deadline_jobs.clone(),
        );
        registry.register(
            "deadline_admitted",
            "Admitted deadline jobs active and before their deadline (on_track + at_risk)",
            deadline_admitted.clone(),
        );
        registry.register(
            "deadline_admissions",
            "Admission answers to deadline jobs since this process started, by decision",
            deadline_admissions.clone(),
        );
        registry.register(
            "deadline_ended",
            "Deadline jobs that ended since this process started, by outcome (met, missed, ended)",
            deadline_ended.clone(),
        );
        registry.register("jobs", "Jobs by state", jobs.clone());
        registry.register(
            "devices",
            "Devices allocated, per job and device type",
            devices.clone(),
        );
        registry.register(
            "round_seconds",
            "Duration of a scheduling round",
            round_seconds.clone(),
        );
        registry.register(
            "policy_seconds",
            "Duration of the policy's decision in a round",
            policy_seconds.clone(),
        );
        registry.register("reports_accepted", "Job reports accepted", reports.clone());
        registry.register(
            "submissions",
            "Jobs submitted since this process started",
            submissions.clone(),
        );
        registry.register(
            "restarts",
            "Times the service has started on this state directory, minus one",
            restarts.clone(),
        );
        registry.register(
            "budget_stops",
            "Jobs stopped because their budget was spent, by budget (device_hours: budget_device_hours; usd: budget_usd)",
            budget_stops.clone(),
        );
        registry.register(
            "job_device_hours",
            "Device-hours each job not yet ended has held, restarts included",
            job_device_hours.clone(),
        );
        registry.register(
            "job_spent_usd",
            "Dollars each job not yet ended has spent at the service's --price (0 without prices)",
            job_spent_usd.clone(),
        );
        Metrics {
            registry,
            jobs,
            devices,
            round_seconds,
            policy_seconds,
            reports,
            submissions,
            restarts,
            budget_stops,
            job_device_hours,
            job_spent_usd,
            deadline_jobs,
            deadline_admitted,
            deadline_admissions,
            deadline_ended,
        }
    }

    /// The counter of admission answers `decision` (`accepted`, `declined`).
    pub fn deadline_admissions(&self, decision: &str) -> Counter {
        self.deadline_admissions
            .get_or_create(&vec![("decision".into(), decision.into())])
            .clone()
    }

    /// Counts a job stopped because its budget in `unit` (`device-hours`, `USD`:
    /// [`crate::budget::spent`]) was spent.
    pub fn budget_stop(&self, unit: &str) {
        self.budget_stops
            .get_or_create(&vec![("budget".into(), budget_label(unit).into())])
            .inc();
    }

    /// Jobs stopped for their budget in `unit` (`device-hours`, `USD`).
    pub fn budget_stops(&self, unit: &str) -> u64 {
        self.budget_stops
            .get_or_create(&vec![("budget".into(), budget_label(unit).into())])
            .get()
    }

    /// Counts a deadline job that just ended with status `s`.
    pub fn deadline_ended(&self, s: Status) {
        self.deadline_ended
            .get_or_create(&vec![("outcome".into(), s.label().into())])
            .inc();
    }

    /// The text exposition, with the job gauges recomputed from `jobs`.
    /// `deadlines`: the status of every deadline job.
    pub fn render<'a>(
        &self,
        jobs: impl Iterator<Item = &'a JobRecord>,
        deadlines: &[Status],
    ) -> String {
        self.deadline_jobs.clear();
        for s in Status::ALL {
            let n = deadlines.iter().filter(|&&d| d == s).count();
            self.deadline_jobs
                .get_or_create(&vec![("status".into(), s.label().into())])
                .set(n as i64);
        }
        self.deadline_admitted.set(
            deadlines
                .iter()
                .filter(|s| matches!(s, Status::OnTrack | Status::AtRisk))
                .count() as i64,
        );
        for d in ["accepted", "declined"] {
            self.deadline_admissions(d);
        }
        for s in [Status::Met, Status::Missed] {
            let _ = self
                .deadline_ended
                .get_or_create(&vec![("outcome".into(), s.label().into())]);
        }
        for unit in ["device-hours", "USD"] {
            let _ = self.budget_stops(unit);
        }
        self.jobs.clear();
        self.devices.clear();
        self.job_device_hours.clear();
        self.job_spent_usd.clear();
        for s in JobState::ALL {
            self.jobs
                .get_or_create(&vec![("state".into(), s.name().into())])
                .set(0);
        }
        for j in jobs {
            self.jobs
                .get_or_create(&vec![("state".into(), j.state.name().into())])
                .inc();
            if !j.state.is_terminal() {
                let job = vec![("job".into(), j.id.clone())];
                self.job_device_hours
                    .get_or_create(&job)
                    .set(j.attained_device_s / 3600.0);
                self.job_spent_usd.get_or_create(&job).set(j.spent_usd);
            }
            if let Some(r) = &j.run {
                self.devices
                    .get_or_create(&vec![
                        ("job".into(), j.id.clone()),
                        ("device_type".into(), r.device_type.clone()),
                    ])
                    .set(r.replicas() as i64);
            }
        }
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// The `budget` label of a budget unit (`device-hours` → `device_hours`, `USD` → `usd`).
fn budget_label(unit: &str) -> &'static str {
    if unit == "USD" {
        "usd"
    } else {
        "device_hours"
    }
}
