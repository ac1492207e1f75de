//! What a job's processes get from its spec, through a real service and the local
//! executor: `cwd` and `env` (and the refusals that name them), and the `torchrun`
//! launcher (a fake `torchrun` on the job's PATH records its arguments).

mod common;

use common::{test_dir, Service, TestDir};
use std::path::Path;
use std::time::{Duration, Instant};

/// The tests of this file run one at a time: `common`'s port choice is per process.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn start(name: &str) -> (TestDir, Service) {
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
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
}

#[test]
fn torchrun_jobs_get_nproc_and_the_rendezvous_from_their_allocation() {
    use std::os::unix::fs::PermissionsExt;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, svc) = start("torchrun");
    // A fake torchrun (and a fake python for `python = …`) on the job's PATH: each
    // writes its name and arguments, one per line, to argv-<job>.txt in its cwd.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for prog in ["torchrun", "venv-python"] {
        let p = bin.join(prog);
        std::fs::write(
            &p,
            "#!/bin/sh\nf=argv-$PACER_JOB_ID.txt\necho \"$0\" > $f\nfor a do echo \"$a\" >> $f; done\n",
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let spec = |python: Option<String>| {
        let mut s = serde_json::json!({
            "name": "ddp",
            "launcher": "torchrun",
            "command": ["train.py", "--lr", "0.1", "two words"],
            "replicas": 3,
            "cwd": work.to_str().unwrap(),
            "env": {"PATH": path},
        });
        if let Some(p) = python {
            s["python"] = p.into();
        }
        s
    };
    let mut ids = Vec::new();
    for python in [None, Some(bin.join("venv-python").display().to_string())] {
        let (status, body) = submit(&svc, &spec(python));
        assert_eq!(status, 201, "{body}");
        ids.push(body["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let j = wait_done(&svc, id);
        assert_eq!(j["state"], "succeeded", "{j}");
    }
    let argv = |id: &str| -> Vec<String> {
        read(&work.join(format!("argv-{id}.txt")))
            .lines()
            .map(String::from)
            .collect()
    };
    let a = argv(&ids[0]);
    assert!(a[0].ends_with("/bin/torchrun"), "{a:?}");
    let port = a[5].strip_prefix("--master_port=").unwrap();
    assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{a:?}");
    assert_eq!(
        a[1..5],
        [
            "--nproc_per_node=3",
            "--nnodes=1",
            "--node_rank=0",
            "--master_addr=127.0.0.1"
        ]
    );
    assert_eq!(a[6..], ["train.py", "--lr", "0.1", "two words"]);
    let b = argv(&ids[1]);
    assert!(b[0].ends_with("/bin/venv-python"), "{b:?}");
    assert_eq!(b[1..3], ["-m", "torch.distributed.run"]);
    assert_eq!(b[3], "--nproc_per_node=3");
    assert_eq!(b[8..], ["train.py", "--lr", "0.1", "two words"]);
    // The launcher says what it started, in the job's log.
    let log = svc.get_json(&format!("/v1/jobs/{}/logs", ids[0]));
    assert!(
        log["data"]
            .as_str()
            .unwrap()
            .contains("1 node(s), 3 process(es) on this one, node rank 0"),
        "{log}"
    );
}
