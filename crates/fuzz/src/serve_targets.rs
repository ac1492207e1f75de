//! Fuzz targets of `pacer serve`'s request bodies (issue 23): job specs as TOML and
//! JSON, job reports and the dashboard's login form, each held to the API's contract
//! (an accepted spec validates against a cluster; a refusal is a 400 naming its field).
//! Registered with the other targets in `targets.rs`.

use crate::harness::{Outcome, Place};
use crate::targets::text;
use std::sync::OnceLock;

/// What the service's API reads from a request body. Its errors are the API's answer,
/// `{"error", "field"}` with a 400: rendered here as the client shows them, quoting the
/// field, which must be named (a body error must say which field or `body`).
pub(crate) const API_BODY: &str = "request body";

fn api_error(origin: &str, e: pacer_serve::error::ApiError) -> Outcome {
    if e.status != 400 || e.field.is_empty() || e.message.is_empty() {
        return Outcome::Broken(format!(
            "not a 400 naming a field: {} `{}`: {}",
            e.status, e.field, e.message
        ));
    }
    Outcome::Rejected {
        message: format!("{origin}: field `{}`: {}", e.field, e.message),
        place: Place::Field(e.field),
    }
}

fn serve_cluster() -> &'static pacer_model::ClusterSpec {
    static C: OnceLock<pacer_model::ClusterSpec> = OnceLock::new();
    C.get_or_init(|| pacer_model::ClusterSpec::parse("4x2:cpu,2x8:a100", "fuzz").unwrap())
}

/// An accepted spec keeps its contract: validated against the cluster, with
/// `min ≤ max` replicas and a non-empty command line.
fn accepted_spec(origin: &str, s: pacer_serve::spec::JobSpec) -> Outcome {
    if let Err(e) = s.validate(serve_cluster()) {
        return api_error(origin, e);
    }
    if s.min() > s.max() || s.argv("pacer", s.max()).is_empty() {
        return Outcome::Broken(format!(
            "accepted with min {} > max {} or an empty command",
            s.min(),
            s.max()
        ));
    }
    Outcome::Accepted
}

pub(crate) const JOB_TOML: &str = "fuzz/job.toml";

/// `POST /v1/jobs` with a TOML body and `pacer submit FILE` (TOML errors name
/// `origin:line`; what validation refuses names the field).
pub(crate) fn serve_job_toml(b: &[u8]) -> Outcome {
    match pacer_serve::spec::JobSpec::from_toml(&text(b), JOB_TOML) {
        Ok(s) => accepted_spec(JOB_TOML, s),
        Err(e) if e.message.contains(JOB_TOML) => Outcome::Rejected {
            message: e.message,
            place: Place::Whole,
        },
        Err(e) => api_error(JOB_TOML, e),
    }
}

pub(crate) fn serve_job_toml_seeds() -> Vec<Vec<u8>> {
    [
        "name = \"mnist\"\ncommand = [\"python3\", \"train.py\", \"--epochs\", \"3\"]\nreplicas = 2\n",
        "name = \"adaptive\"\ncommand = [\"sh\", \"-c\", \"exec sleep 1\"]\nadaptive = true\nmin_replicas = 1\nmax_replicas = 8\ndevice_types = [\"a100\"]\nglobal_batch = 256\n",
        "name = \"trainer\"\n[trainer]\ndataset = \"tiny\"\nmodel = \"mlp\"\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// `POST /v1/jobs` with `Content-Type: application/json`.
pub(crate) fn serve_job_json(b: &[u8]) -> Outcome {
    match pacer_serve::spec::JobSpec::from_json(b) {
        Ok(s) => accepted_spec(API_BODY, s),
        Err(e) => api_error(API_BODY, e),
    }
}

pub(crate) fn serve_job_json_seeds() -> Vec<Vec<u8>> {
    vec![
        br#"{"name":"mnist","command":["python3","train.py"],"replicas":2}"#.to_vec(),
        br#"{"name":"adaptive","command":["sleep","1"],"adaptive":true,"min_replicas":1,"max_replicas":8,"device_types":["cpu"],"global_batch":256}"#.to_vec(),
        br#"{"name":"trainer","trainer":{"dataset":"tiny","model":"mlp"}}"#.to_vec(),
    ]
}

/// `POST /v1/jobs/{id}/reports` (what a running job sends).
pub(crate) fn serve_report(b: &[u8]) -> Outcome {
    match pacer_serve::spec::report_from_json(b) {
        Ok(_) => Outcome::Accepted,
        Err(e) => api_error(API_BODY, e),
    }
}

pub(crate) fn serve_report_seeds() -> Vec<Vec<u8>> {
    vec![
        br#"{"step":5,"samples":160,"time_s":1.0,"replicas":1,"device_type":"cpu","throughput":100.0}"#.to_vec(),
        br#"{"step":100,"samples":3200,"time_s":12.5,"replicas":2,"device_type":"a100","global_batch":32,"local_batches":[16,16],"throughput":640.0,"step_time_s":0.1,"noise_scale":170.0,"loss":0.01,"done":true}"#.to_vec(),
    ]
}

/// `POST /login` (the dashboard's form, before any authentication).
pub(crate) fn serve_login(b: &[u8]) -> Outcome {
    match pacer_serve::api::parse_login(b) {
        Ok(_) => Outcome::Accepted,
        Err(e) => api_error(API_BODY, e),
    }
}

pub(crate) fn serve_login_seeds() -> Vec<Vec<u8>> {
    vec![
        b"token=0123456789abcdef0123456789abcdef".to_vec(),
        b"token=a%20b%2Bc+d".to_vec(),
    ]
}

// ------------------------------------------------------------------ runtime
