//! What a job's processes get from its spec, through a real service and the local
//! executor: `cwd` and `env` (and the refusals that name them), and the `torchrun`
//! launcher (a fake `torchrun` on the job's PATH records its arguments).

mod common;

use common::{test_dir, Service};
use std::path::Path;
use std::time::{Duration, Instant};

fn start(name: &str) -> (std::path::PathBuf, Service) {
    let dir = test_dir(name);
    let svc = Service::start(
        &dir,
        &[
            "--cluster",
            "2x2:cpu",
            "--policy",
            "fifo",
            "--round-s",
            "0.2",
        ],
    );
    (dir, svc)
}

/// Submits a JSON spec; returns (status, body).
fn submit(svc: &Service, spec: &serde_json::Value) -> (u16, serde_json::Value) {
    let a = svc.call(
        &svc.client(),
        "POST",
        "/v1/jobs",
        Some(spec.to_string().as_bytes()),
        "application/json",
    );
    (a.status, a.json().unwrap_or_default())
}

/// Waits (≤ 30 s) until job `id` has ended; returns its record.
fn wait_done(svc: &Service, id: &str) -> serde_json::Value {
    let t0 = Instant::now();
    loop {
        let j = svc.get_json(&format!("/v1/jobs/{id}"));
        if ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or("")) {
            return j;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{id} did not end in 30 s: {j}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn a_job_runs_in_its_cwd_with_its_env_and_bad_ones_are_refused() {
    let (dir, svc) = start("cwd-env");
    let work = dir.join("work dir");
    std::fs::create_dir_all(&work).unwrap();
    let spec = serde_json::json!({
        "name": "where",
        "command": ["sh", "-c", "pwd > out.txt; printf '%s|%s|%s\\n' \"$GREETING\" \"$EMPTY\" \"$PACER_JOB_ID\" >> out.txt"],
        "cwd": work.to_str().unwrap(),
        "env": {"GREETING": "hello, \"world\" $HOME", "EMPTY": ""},
    });
    let (status, body) = submit(&svc, &spec);
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().unwrap().to_string();
    assert_eq!(body["spec"]["cwd"], work.to_str().unwrap());
    let j = wait_done(&svc, &id);
    assert_eq!(j["state"], "succeeded", "{j}");
    let out = read(&work.join("out.txt"));
    let mut lines = out.lines();
    assert_eq!(
        std::fs::canonicalize(lines.next().unwrap()).unwrap(),
        std::fs::canonicalize(&work).unwrap()
    );
    assert_eq!(
        lines.next().unwrap(),
        format!("hello, \"world\" $HOME||{id}")
    );

    // Refusals name the field; nothing is queued.
    let before = svc.get_json("/v1/jobs")["jobs"].as_array().unwrap().len();
    let cases = [
        (
            serde_json::json!({"name": "x", "command": ["true"], "cwd": dir.join("missing").to_str().unwrap()}),
            "cwd",
            "does not exist",
        ),
        (
            serde_json::json!({"name": "x", "command": ["true"], "cwd": dir.join("service.log").to_str().unwrap()}),
            "cwd",
            "not a directory",
        ),
        (
            serde_json::json!({"name": "x", "command": ["true"], "cwd": "relative/dir"}),
            "cwd",
            "absolute",
        ),
        (
            serde_json::json!({"name": "x", "command": ["true"], "env": {"PACER_TOKEN": "mine"}}),
            "env.PACER_TOKEN",
            "cannot be overridden",
        ),
        (
            serde_json::json!({"name": "x", "command": ["true"], "env": {"MASTER_PORT": "1"}}),
            "env.MASTER_PORT",
            "cannot be overridden",
        ),
        (
            serde_json::json!({"name": "x", "command": ["true"], "env": {"BAD NAME": "1"}}),
            "env.BAD NAME",
            "not a variable name",
        ),
    ];
    for (spec, field, says) in cases {
        let (status, body) = submit(&svc, &spec);
        assert_eq!(status, 400, "{spec}: {body}");
        assert_eq!(body["field"], field, "{spec}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(says),
            "{spec}: {body}"
        );
    }
    // TOML too (the key named with its line).
    let a = svc.call(
        &svc.client(),
        "POST",
        "/v1/jobs",
        Some(b"name = \"x\"\ncommand = [\"true\"]\nenv = { WORLD_SIZE = \"9\" }\n"),
        "application/toml",
    );
    assert_eq!(a.status, 400);
    assert_eq!(a.json().unwrap()["field"], "env.WORLD_SIZE");
    let after = svc.get_json("/v1/jobs")["jobs"].as_array().unwrap().len();
    assert_eq!(before, after);

    // A cwd removed between submission and launch fails the job with a reason that
    // names it (not "No such file or directory" as if the program were missing).
    let gone = dir.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let blocker = serde_json::json!({"name": "hold", "command": ["sleep", "30"], "replicas": 4});
    let (_, b) = submit(&svc, &blocker);
    let hold = b["id"].as_str().unwrap().to_string();
    let (status, b) = submit(
        &svc,
        &serde_json::json!({"name": "late", "command": ["true"], "cwd": gone.to_str().unwrap()}),
    );
    assert_eq!(status, 201, "{b}");
    let late = b["id"].as_str().unwrap().to_string();
    std::fs::remove_dir(&gone).unwrap();
    svc.call(
        &svc.client(),
        "POST",
        &format!("/v1/jobs/{hold}/cancel"),
        None,
        "",
    );
    let j = wait_done(&svc, &late);
    assert_eq!(j["state"], "failed", "{j}");
    let why = j["last_exit"].as_str().unwrap();
    assert!(why.contains("cwd") && why.contains("gone"), "{why}");
    let _ = std::fs::remove_dir_all(&dir);
}
