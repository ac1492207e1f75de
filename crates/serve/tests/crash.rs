//! Crash safety: a 20-job workload of real processes (tests/job.py) while the
//! service is killed with SIGKILL at seeded random moments — during submissions
//! (one with a request in flight) and while jobs run, launch, stop and report.
//! After every restart each accepted job is present; in the end all succeeded,
//! none ran twice at once (the jobs' flock), and every report a job saw answered
//! 202 is stored.

mod common;

use common::{test_dir, Service};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const JOBS: usize = 20;

/// The Python interpreter itself (not a wrapper such as a pyenv shim, which takes
/// long to start and dies of the SIGTERM meant for the job).
fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("this test runs its jobs with python3, which is not on PATH");
    assert!(out.status.success(), "python3 -c failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn spec(k: usize, python: &str, job_py: &str, out: &str, rng: &mut StdRng) -> String {
    let replicas = rng.random_range(1..=2);
    let steps = rng.random_range(15..=30);
    let adaptive = rng.random_bool(0.3);
    format!(
        "name = \"crash-{k}\"\ncommand = [\"{python}\", \"{job_py}\", \"{out}\", \"{steps}\"]\nreplicas = {replicas}\nadaptive = {adaptive}\nmax_replicas = 2\n"
    )
}

fn listed(svc: &Service) -> BTreeMap<String, serde_json::Value> {
    let v = svc.get_json("/v1/jobs?limit=1000");
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap().to_string(), j.clone()))
        .collect()
}

fn check_present(svc: &Service, accepted: &BTreeSet<String>) {
    let jobs = listed(svc);
    for id in accepted {
        assert!(
            jobs.contains_key(id),
            "job {id} was accepted (201) but is missing after a restart"
        );
    }
}

#[test]
fn survives_kill9_at_random_moments() {
    let python = python();
    let dir = test_dir("crash");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let job_py = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/job.py");
    let out_s = out.display().to_string();
    let mut svc = Service::start(
        &dir,
        &[
            "--cluster",
            "4x2:cpu",
            "--policy",
            "fair",
            "--round-s",
            "0.3",
            "--grace-s",
            "5",
        ],
    );
    let mut rng = StdRng::seed_from_u64(16);
    let mid_submission = [rng.random_range(2..8), rng.random_range(10..17)];
    let mut accepted = BTreeSet::new();
    let mut kills = 0;
    for k in 0..JOBS {
        let text = spec(k, &python, job_py, &out_s, &mut rng);
        if mid_submission.contains(&k) {
            // Kill while this submission is in flight: either it was answered 201 (then
            // the job must exist after the restart) or it was not (then it may or may not).
            let c = svc.client();
            let body = text.clone().into_bytes();
            let t = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(c.post("/v1/jobs", body, "application/toml"))
            });
            std::thread::sleep(Duration::from_micros(rng.random_range(0..3000)));
            svc.kill9();
            kills += 1;
            let answered = match t.join() {
                Ok(Ok(a)) if a.status == 201 => {
                    accepted.insert(a.json().unwrap()["id"].as_str().unwrap().to_string());
                    true
                }
                _ => false,
            };
            svc.restart();
            check_present(&svc, &accepted);
            // Unanswered: the job exists if its commit happened; if not, submit it again.
            let jobs = listed(&svc);
            let extra: Vec<String> = jobs
                .keys()
                .filter(|id| !accepted.contains(*id))
                .cloned()
                .collect();
            assert!(extra.len() <= 1, "more jobs than submitted: {extra:?}");
            if answered {
                assert!(
                    extra.is_empty(),
                    "a job appeared that nobody submitted: {extra:?}"
                );
            } else if extra.is_empty() {
                let a = svc.call(
                    &svc.client(),
                    "POST",
                    "/v1/jobs",
                    Some(text.as_bytes()),
                    "application/toml",
                );
                assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
                accepted.insert(a.json().unwrap()["id"].as_str().unwrap().to_string());
            } else {
                accepted.extend(extra);
            }
        } else {
            let a = svc.call(
                &svc.client(),
                "POST",
                "/v1/jobs",
                Some(text.as_bytes()),
                "application/toml",
            );
            assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
            accepted.insert(a.json().unwrap()["id"].as_str().unwrap().to_string());
        }
    }
    // While the jobs run: kill at random moments (rounds run every 0.3 s).
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(rng.random_range(200..2500)));
        svc.kill9();
        kills += 1;
        std::thread::sleep(Duration::from_millis(rng.random_range(0..1000)));
        svc.restart();
        check_present(&svc, &accepted);
    }
    assert!(kills >= 5);
    let t0 = Instant::now();
    let jobs = loop {
        let jobs = listed(&svc);
        if jobs
            .values()
            .all(|j| ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap()))
        {
            break jobs;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "jobs did not finish in 300 s: {jobs:#?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    for id in &accepted {
        assert_eq!(jobs[id]["state"], "succeeded", "{id}: {:#}", jobs[id]);
    }
    assert_eq!(jobs.len(), JOBS);
    let violations = std::fs::read_to_string(out.join("violations")).unwrap_or_default();
    assert!(violations.is_empty(), "{violations}");
    // Every report a job saw accepted is stored, with the step it sent.
    let log = std::fs::read_to_string(out.join("accepted.log")).unwrap();
    let mut stored: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    let mut n = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (job, index, step) = (
            f[0],
            f[1].parse::<u64>().unwrap(),
            f[2].parse::<u64>().unwrap(),
        );
        let reports = stored.entry(job.to_string()).or_insert_with(|| {
            svc.get_json(&format!("/v1/jobs/{job}/reports?limit=10000"))["reports"]
                .as_array()
                .unwrap()
                .clone()
        });
        let r = reports.iter().find(|r| r["index"] == index);
        assert!(
            r.is_some_and(|r| r["step"] == step),
            "{job}: accepted report #{index} (step {step}) missing"
        );
        n += 1;
    }
    assert!(n >= JOBS, "only {n} reports accepted");
    let restarts: u64 = jobs.values().map(|j| j["restarts"].as_u64().unwrap()).sum();
    eprintln!("crash test: {kills} kills, {} jobs succeeded, {n} accepted reports all stored, {restarts} job restarts", jobs.len());
}
