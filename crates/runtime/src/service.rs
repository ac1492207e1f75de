//! Reports to a scheduler service (`pacer serve`), when the job was launched by one.
//!
//! The service starts a job with `PACER_SERVER` (base URL, `http://HOST:PORT`),
//! `PACER_JOB_ID` (`[a-z0-9-]{1,64}`), `PACER_TOKEN` and `PACER_DEVICE_TYPE` in its
//! environment ([`ServiceEnv::from_env`]). The controller then posts a [`JobReport`]
//! about once per second ([`REPORT_INTERVAL`]) and a last one when the run ends to
//! `POST {PACER_SERVER}/v1/jobs/{PACER_JOB_ID}/reports` with
//! `Authorization: Bearer {PACER_TOKEN}`, from a thread of its own: the training loop
//! only replaces the report waiting to go out (never blocks, never queues more than
//! one), each request has a 2 s timeout, and a failure is logged once on stderr and
//! never stops training.
//!
//! The client is `ureq` without TLS (default features off; the service is on the
//! same machine or cluster network): a few small crates, against hand-writing
//! HTTP/1.1 (chunked bodies, status lines, keep-alive) or building a client on
//! hyper, which the runtime does not otherwise use.

use crate::error::RuntimeError;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the controller reports at most.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Timeout of one report request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Where and as whom to report; from the environment the service sets.
#[derive(Clone, PartialEq)]
pub struct ServiceEnv {
    /// `{PACER_SERVER}/v1/jobs/{PACER_JOB_ID}/reports`.
    pub url: String,
    pub job_id: String,
    token: String,
    /// `PACER_DEVICE_TYPE`, `cpu` when unset.
    pub device_type: String,
}

impl std::fmt::Debug for ServiceEnv {
    // The token stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceEnv")
            .field("url", &self.url)
            .field("job_id", &self.job_id)
            .field("token", &"<redacted>")
            .field("device_type", &self.device_type)
            .finish()
    }
}

impl ServiceEnv {
    /// From the process environment: `None` without `PACER_JOB_ID` (set only for
    /// the jobs a service launches: a shell may hold `PACER_SERVER` and
    /// `PACER_TOKEN` for the `pacer submit` client); with it, an error naming the
    /// variable when one is malformed or missing.
    pub fn from_env() -> Result<Option<ServiceEnv>, RuntimeError> {
        ServiceEnv::from_lookup(|k| std::env::var(k).ok())
    }

    /// From `get` (the environment, or a test's table).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<ServiceEnv>, RuntimeError> {
        let Some(job_id) = get("PACER_JOB_ID") else {
            return Ok(None);
        };
        let bad = |var: &str, msg: String| Err(RuntimeError::config(var, msg));
        let Some(server) = get("PACER_SERVER") else {
            return bad("PACER_SERVER", "must be set with PACER_JOB_ID".into());
        };
        let base = server.trim_end_matches('/');
        let host = base.strip_prefix("http://").unwrap_or("");
        if host.is_empty() || host.contains(['/', '?', '#', ' ']) {
            return bad(
                "PACER_SERVER",
                format!("`{server}`: expected a base URL http://HOST:PORT (no TLS, no path)"),
            );
        }
        if job_id.is_empty()
            || job_id.len() > 64
            || !job_id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad(
                "PACER_JOB_ID",
                format!("`{job_id}`: expected 1 to 64 of a-z, 0-9 and -"),
            );
        }
        let Some(token) = get("PACER_TOKEN") else {
            return bad("PACER_TOKEN", "must be set with PACER_JOB_ID".into());
        };
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return bad(
                "PACER_TOKEN",
                "must be non-empty printable ASCII without spaces".into(),
            );
        }
        let device_type = get("PACER_DEVICE_TYPE").unwrap_or_else(|| "cpu".into());
        if !pacer_model::report::is_device_type(&device_type) {
            return bad(
                "PACER_DEVICE_TYPE",
                format!(
                    "`{device_type}`: expected a device type name such as cpu or t4 (a run \
                     across types: names joined by +, such as t4+a100)"
                ),
            );
        }
        Ok(Some(ServiceEnv {
            url: format!("{base}/v1/jobs/{job_id}/reports"),
            job_id,
            token,
            device_type,
        }))
    }
}

/// One report, as the service's API takes it: the one report type
/// ([`pacer_model::report`]) that the service parses and checks.
pub use pacer_model::report::{reportable, JobReport};

#[derive(Default)]
struct Slot {
    next: Option<JobReport>,
    closed: bool,
}

/// The reporting thread and the window of the next report.
pub struct Reporter {
    slot: Arc<(Mutex<Slot>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    started: Instant,
    /// Start of the current window: when, and the step and samples then.
    window: (Instant, u64, u64),
    pub(crate) device_type: String,
}

impl Reporter {
    /// Starts the thread; `step` and `samples` are where the run starts (a resumed
    /// run's are not 0).
    pub fn start(env: ServiceEnv, step: u64, samples: u64) -> Result<Reporter, RuntimeError> {
        let slot: Arc<(Mutex<Slot>, Condvar)> = Arc::default();
        let s = slot.clone();
        let device_type = env.device_type.clone();
        let thread = std::thread::Builder::new()
            .name("pacer-report".into())
            .spawn(move || post_loop(&env, &s))
            .map_err(|e| RuntimeError::io("starting the report thread", e))?;
        let now = Instant::now();
        Ok(Reporter {
            slot,
            thread: Some(thread),
            started: now,
            window: (now, step, samples),
            device_type,
        })
    }

    /// Whether a report is due (the window is [`REPORT_INTERVAL`] old).
    pub fn due(&self) -> bool {
        self.window.0.elapsed() >= REPORT_INTERVAL
    }

    /// The time fields of a report at `step`, `samples`: seconds since the start,
    /// throughput and step time over the window (which then starts again).
    pub fn close_window(&mut self, step: u64, samples: u64) -> (f64, f64, f64) {
        let now = Instant::now();
        let dt = (now - self.window.0).as_secs_f64();
        let (steps, n) = (
            step.saturating_sub(self.window.1),
            samples.saturating_sub(self.window.2),
        );
        let throughput = if dt > 0.0 { n as f64 / dt } else { 0.0 };
        let step_time_s = if steps > 0 { dt / steps as f64 } else { 0.0 };
        self.window = (now, step, samples);
        ((now - self.started).as_secs_f64(), throughput, step_time_s)
    }

    /// Hands `r` to the thread, replacing a report it has not sent yet.
    pub fn offer(&self, r: JobReport) {
        let (m, cv) = &*self.slot;
        m.lock().expect("report slot").next = Some(r);
        cv.notify_one();
    }

    /// Sends `last` and waits for the thread (at most about one request timeout).
    pub fn finish(mut self, last: JobReport) {
        self.offer(last);
        self.close();
    }

    fn close(&mut self) {
        let (m, cv) = &*self.slot;
        m.lock().expect("report slot").closed = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.close();
        }
    }
}

/// The thread: posts the latest report, until closed with nothing left to send.
fn post_loop(env: &ServiceEnv, slot: &(Mutex<Slot>, Condvar)) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        // The service is addressed directly: an HTTP_PROXY meant for the internet
        // must not carry a job's token.
        .proxy(None)
        .build()
        .into();
    let auth = format!("Bearer {}", env.token);
    let mut failed_once = false;
    loop {
        let report = {
            let (m, cv) = slot;
            let mut s = m.lock().expect("report slot");
            loop {
                if let Some(r) = s.next.take() {
                    break r;
                }
                if s.closed {
                    return;
                }
                s = cv.wait(s).expect("report slot");
            }
        };
        let body = serde_json::to_string(&report).expect("plain data serialises");
        let outcome = match agent
            .post(&env.url)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body.as_str())
        {
            Ok(resp) if resp.status().is_success() => Ok(()),
            Ok(resp) => Err(format!("answered {}", resp.status())),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = outcome {
            if !failed_once {
                failed_once = true;
                eprintln!(
                    "pacer controller: reporting to {} failed: {e} (training goes on; later failures are not logged)",
                    env.url
                );
            }
        }
    }
}
