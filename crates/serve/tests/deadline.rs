//! Deadline jobs end to end through the service, local executor on 127.0.0.1: the
//! admission answer on submission (accepted with its plan, declined with the earliest
//! deadline, bad input refused naming the field), the guarantee kept across a SIGKILL
//! and restart of the service, and the status in the job's record and `/metrics`.
//! Every wait is bounded.

mod common;

use common::{test_dir, wait_for, Service};
use std::time::Instant;

const ARGS: [&str; 6] = [
    "--cluster",
    "1x4:cpu",
    "--policy",
    "deadline",
    "--round-s",
    "0.2",
];

/// b: all 4 devices for 100 s, due in 50 s: never fits.
const TOO_BIG: &str = "name = \"b\"\ncommand = [\"true\"]\nreplicas = 4\nexpected_runtime = \"100s\"\ndeadline = \"50s\"\n";

#[test]
fn deadline_jobs_are_admitted_kept_across_a_restart_and_met() {
    let dir = test_dir("deadline");
    let mut svc = Service::start(&dir, &ARGS);
    let c = svc.client();
    // a: 2 devices for about 2 s (it says 5 s), due in 120 s.
    let a_spec = "name = \"a\"\ncommand = [\"sh\", \"-c\", \"sleep 2\"]\nreplicas = 2\nexpected_runtime = \"5s\"\ndeadline = \"120s\"\n";
    let t = Instant::now();
    let ans = svc.submit_toml(&c, a_spec);
    let took_ms = t.elapsed().as_secs_f64() * 1e3;
    eprintln!("admission answer (accepted) in {took_ms:.1} ms");
    assert_eq!(ans.status, 201, "{}", String::from_utf8_lossy(&ans.body));
    let a = ans.json().unwrap();
    let id = a["id"].as_str().unwrap().to_string();
    let adm = &a["admission"];
    assert_eq!(adm["decision"], "accepted", "{a}");
    assert_eq!(adm["share_now"], 2, "{a}");
    let deadline_ms = adm["deadline_ms"].as_u64().unwrap();
    assert!(
        adm["planned_finish_ms"].as_u64().unwrap() < deadline_ms,
        "{a}"
    );
    assert!(adm["deadline"].as_str().unwrap().ends_with('Z'), "{a}");

    // Declined: nothing stored, the earliest deadline given.
    let t = Instant::now();
    let no = svc.submit_toml(&c, TOO_BIG);
    eprintln!(
        "admission answer (declined) in {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(no.status, 409, "{}", String::from_utf8_lossy(&no.body));
    let no = no.json().unwrap();
    assert_eq!(no["field"], "deadline", "{no}");
    assert_eq!(no["admission"]["decision"], "declined", "{no}");
    assert!(
        no["admission"]["earliest_deadline_ms"].as_u64().unwrap() > deadline_ms - 120_000 + 100_000
    );

    // Bad input: one error naming the field, nothing stored.
    for (spec, field) in [
        ("name = \"x\"\ncommand = [\"true\"]\nexpected_runtime = \"1m\"\ndeadline = \"tomorrow\"\n", "deadline"),
        ("name = \"x\"\ncommand = [\"true\"]\ndeadline = \"1h\"\n", "expected_runtime"),
        ("name = \"x\"\ncommand = [\"true\"]\nexpected_runtime = \"1h\"\n", "expected_runtime"),
        ("name = \"x\"\ncommand = [\"true\"]\nbudget_device_hours = -1\n", "budget_device_hours"),
        ("name = \"x\"\ncommand = [\"true\"]\nbudget_device_hours = nan\n", "budget_device_hours"),
        ("name = \"x\"\ncommand = [\"true\"]\nbudget_device_hours = 2\nexpected_runtime = \"soon\"\n", "expected_runtime"),
    ] {
        let e = svc.submit_toml(&c, spec);
        assert_eq!(e.status, 400, "{}", String::from_utf8_lossy(&e.body));
        assert_eq!(e.json().unwrap()["field"], field);
    }
    assert_eq!(
        svc.get_json("/v1/jobs")["jobs"].as_array().unwrap().len(),
        1
    );

    wait_for("a runs", 20, || {
        svc.get_json(&format!("/v1/jobs/{id}"))["state"] == "running"
    });
    let before = svc.get_json(&format!("/v1/jobs/{id}"))["deadline_status"].clone();
    assert_eq!(before["status"], "on track", "{before}");

    // The service dies and comes back: the admitted job keeps its deadline and its
    // guarantee (the job that did not fit still does not).
    svc.kill9();
    svc.restart();
    let c = svc.client();
    let after = svc.get_json(&format!("/v1/jobs/{id}"));
    assert_eq!(
        after["deadline_status"]["deadline_ms"], deadline_ms,
        "{after}"
    );
    assert_eq!(after["deadline"]["deadline_ms"], deadline_ms, "{after}");
    let no = svc.submit_toml(&c, TOO_BIG);
    assert_eq!(no.status, 409, "{}", String::from_utf8_lossy(&no.body));

    wait_for("a succeeds", 30, || {
        svc.get_json(&format!("/v1/jobs/{id}"))["state"] == "succeeded"
    });
    let done = svc.get_json(&format!("/v1/jobs/{id}"));
    assert_eq!(done["deadline_status"]["status"], "met", "{done}");
    let m = svc.call(&c, "GET", "/metrics", None, "");
    let text = String::from_utf8_lossy(&m.body);
    for line in [
        "pacer_serve_deadline_jobs{status=\"met\"} 1",
        "pacer_serve_deadline_jobs{status=\"on_track\"} 0",
        "pacer_serve_deadline_admitted 0",
        // Since this process started: the one decline after the restart.
        "pacer_serve_deadline_admissions_total{decision=\"declined\"} 1",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    drop(svc);
}

/// Several local deadline jobs and a best-effort one: each deadline job is admitted or
/// declined on submission, and every admitted one meets its deadline.
#[test]
fn every_admitted_local_job_meets_its_deadline() {
    let dir = test_dir("deadline-e2e");
    let svc = Service::start(&dir, &ARGS);
    let c = svc.client();
    // Each runs about 1 s on 2 devices and says 4 s; deadlines from 6 s to 16 s: the
    // 1x4 cluster fits two at a time, so the tight late-comers are declined.
    let mut admitted = Vec::new();
    let mut declined = 0;
    for (k, due) in [16, 6, 12, 6, 8, 7, 10, 14].iter().enumerate() {
        let spec = format!(
            "name = \"d{k}\"\ncommand = [\"sh\", \"-c\", \"sleep 1\"]\nreplicas = 2\n\
             expected_runtime = \"4s\"\ndeadline = \"{due}s\"\n"
        );
        let a = svc.submit_toml(&c, &spec);
        match a.status {
            201 => admitted.push(a.json().unwrap()["id"].as_str().unwrap().to_string()),
            409 => declined += 1,
            s => panic!("{s}: {}", String::from_utf8_lossy(&a.body)),
        }
    }
    let best = svc.submit_toml(
        &c,
        "name = \"best-effort\"\ncommand = [\"sh\", \"-c\", \"sleep 1\"]\nreplicas = 4\n",
    );
    assert_eq!(best.status, 201);
    eprintln!("{} admitted, {declined} declined", admitted.len());
    assert!(
        admitted.len() >= 2 && declined >= 1,
        "{admitted:?}, {declined} declined"
    );
    wait_for("every job ended", 60, || {
        svc.get_json("/v1/jobs")["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["state"] == "succeeded" || j["state"] == "failed")
    });
    for id in &admitted {
        let j = svc.get_json(&format!("/v1/jobs/{id}"));
        let (end, due) = (
            j["finished_ms"].as_u64().unwrap(),
            j["deadline"]["deadline_ms"].as_u64().unwrap(),
        );
        eprintln!(
            "{id}: finished {:.1} s before its deadline",
            (due as f64 - end as f64) / 1e3
        );
        assert_eq!(j["deadline_status"]["status"], "met", "{j}");
    }
    let m = svc.call(&c, "GET", "/metrics", None, "");
    let text = String::from_utf8_lossy(&m.body);
    let met = format!(
        "pacer_serve_deadline_jobs{{status=\"met\"}} {}",
        admitted.len()
    );
    assert!(text.contains(&met), "{met} not in:\n{text}");
    drop(svc);
}
