//! The service's clients as a user runs them: a real `pacer serve` on a loopback port
//! with a fresh state directory, and `pacer submit` (a spec file, `--wrap`), `pacer jobs`,
//! `pacer job` as child processes. Every wait is bounded.

mod common;

use common::Scratch;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Serve {
    child: Child,
    url: String,
    state: PathBuf,
    /// Dropped after the service is stopped (fields drop after `Drop::drop`).
    dir: Scratch,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh folder for one service, removed when the guard drops.
fn test_dir(name: &str) -> Scratch {
    Scratch::dir(&format!("serve-cli-{name}"))
}

/// `pacer serve` on `127.0.0.1:0` (the port it prints), cluster `2x2:cpu`, short rounds.
fn serve(name: &str) -> Serve {
    serve_with(name, "fifo")
}

/// [`serve`] with another policy.
fn serve_with(name: &str, policy: &str) -> Serve {
    serve_on(name, policy, "2x2:cpu", &[])
}

/// [`serve`] with another policy, cluster and more flags.
fn serve_on(name: &str, policy: &str, cluster: &str, more: &[&str]) -> Serve {
    let dir = test_dir(name);
    let state = dir.join("state");
    let log = dir.join("service.log");
    let child = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(["serve", "--listen", "127.0.0.1:0", "--state"])
        .arg(&state)
        .args(["--cluster", cluster, "--policy", policy, "--round-s", "0.2"])
        .args(more)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.join("service.err")).unwrap())
        .spawn()
        .unwrap();
    let mut s = Serve {
        child,
        url: String::new(),
        state,
        dir,
    };
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(rest) = text.split("listening on ").nth(1) {
            if let Some(url) = rest.lines().next() {
                s.url = url.trim().to_string();
                return s;
            }
        }
        if let Some(st) = s.child.try_wait().unwrap() {
            panic!(
                "pacer serve exited with {st}: {}",
                std::fs::read_to_string(s.dir.join("service.err")).unwrap_or_default()
            );
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "pacer serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Serve {
    /// `pacer ARGS…` against this service, run in `cwd`, with `PACER_SERVER` and
    /// `PACER_TOKEN` set as a user would.
    fn pacer(&self, cwd: &Path, args: &[&str]) -> Output {
        let token = std::fs::read_to_string(self.state.join("token")).unwrap();
        Command::new(env!("CARGO_BIN_EXE_pacer"))
            .args(args)
            .current_dir(cwd)
            .env("PACER_SERVER", &self.url)
            .env("PACER_TOKEN", token.trim())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `pacer ARGS…` that must succeed; its stdout.
    fn ok(&self, cwd: &Path, args: &[&str]) -> String {
        let o = self.pacer(cwd, args);
        assert!(
            o.status.success(),
            "pacer {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }

    /// The job's API record (from `pacer jobs --json`).
    fn job(&self, id: &str) -> serde_json::Value {
        let all: serde_json::Value =
            serde_json::from_str(&self.ok(&self.dir, &["jobs", "--json"])).unwrap();
        all["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {all}"))
            .clone()
    }

    /// Waits (≤ `limit`) until job `id` has ended; its record.
    fn wait(&self, id: &str, limit: Duration) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let j = self.job(id);
            if ["succeeded", "failed", "cancelled"].contains(&j["state"].as_str().unwrap()) {
                return j;
            }
            assert!(
                t0.elapsed() < limit,
                "{id} did not end within {limit:?}: {j}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self, id: &str) -> String {
        std::fs::read_to_string(self.state.join("logs").join(format!("{id}.log"))).unwrap()
    }
}

#[test]
fn submit_wrap_and_a_spec_file_run_in_the_submitters_directory() {
    let s = serve("submit");
    let work = s.dir.join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    // --wrap: sh -c CMD, replicas, name, env; the job runs where pacer submit ran.
    let id = s.ok(
        &work,
        &[
            "submit",
            "--wrap",
            "echo \"cwd=$(pwd) n=$PACER_REPLICAS foo=$FOO eq=$EQ\"",
            "-n",
            "2",
            "--name",
            "wrapped",
            "--env",
            "FOO=bar baz",
            "--env",
            "EQ=a=b",
        ],
    );
    let id = id.trim();
    let j = s.wait(id, Duration::from_secs(30));
    assert_eq!(j["state"], "succeeded", "{j}");
    assert_eq!(j["spec"]["name"], "wrapped");
    assert_eq!(j["spec"]["command"][0], "sh");
    let real = std::fs::canonicalize(&work).unwrap();
    assert!(
        s.log(id)
            .contains(&format!("cwd={} n=2 foo=bar baz eq=a=b", real.display())),
        "{}",
        s.log(id)
    );

    // A spec file without cwd, submitted from work/sub: runs there; --cwd overrides it,
    // relative to where pacer submit runs.
    let spec = s.dir.join("pwd.toml");
    std::fs::write(&spec, "name = \"pwd\"\ncommand = [\"pwd\"]\n").unwrap();
    let spec = spec.to_str().unwrap();
    let a = s.ok(&work.join("sub"), &["submit", spec]);
    let b = s.ok(
        &work,
        &["submit", spec, "--cwd", "sub/..", "--name", "other"],
    );
    for (id, dir) in [(a.trim(), work.join("sub")), (b.trim(), work.clone())] {
        let j = s.wait(id, Duration::from_secs(30));
        assert_eq!(j["state"], "succeeded", "{j}");
        let printed = s.log(id);
        assert_eq!(
            std::fs::canonicalize(printed.trim()).unwrap(),
            std::fs::canonicalize(&dir).unwrap(),
            "{id}"
        );
    }

    // Bad flags: one clear error each, nothing submitted.
    for (args, says) in [
        (
            vec!["submit", "--wrap", "true", "--env", "NOEQUALS"],
            "expected KEY=VALUE",
        ),
        (
            vec!["submit", "--wrap", "true", "--env", "PACER_JOB_ID=x"],
            "env.PACER_JOB_ID",
        ),
        (
            vec!["submit", "--wrap", "true", "--cwd", "no/such/dir"],
            "cwd",
        ),
        (vec!["submit", "--wrap", "  "], "empty"),
        (vec!["submit"], "--wrap"),
        (
            vec!["submit", spec, "--wrap", "true"],
            "cannot be used with",
        ),
    ] {
        let o = s.pacer(&work, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let listed: serde_json::Value =
        serde_json::from_str(&s.ok(&work, &["jobs", "--json"])).unwrap();
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 3);
}

#[test]
fn jobs_and_job_print_state_reason_exit_code_and_times() {
    let s = serve("show");
    let dir = s.dir.to_path_buf();
    // job-1 fails with exit 3; job-2 holds all 4 slots; job-3 waits behind it and is
    // cancelled while queued.
    let failed = s.ok(
        &dir,
        &["submit", "--wrap", "echo out; exit 3", "--name", "fails"],
    );
    let failed = failed.trim();
    assert_eq!(s.wait(failed, Duration::from_secs(30))["exit_code"], 3);
    let hold = s.ok(
        &dir,
        &[
            "submit",
            "--wrap",
            "exec sleep 60",
            "-n",
            "4",
            "--name",
            "holder",
        ],
    );
    let waits = s.ok(&dir, &["submit", "--wrap", "true", "--name", "waiter"]);
    let (hold, waits) = (hold.trim(), waits.trim());
    let t0 = Instant::now();
    while s.job(hold)["state"] != "running" {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{hold} did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let table = s.ok(&dir, &["jobs"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    for col in [
        "ID",
        "NAME",
        "STATE",
        "REASON",
        "REPLICAS",
        "EXIT",
        "SUBMITTED",
        "START",
        "END",
        "ELAPSED",
    ] {
        assert!(lines[0].contains(col), "{table}");
    }
    // Columns line up: every row's STATE starts where the header's does.
    let at = lines[0].find("STATE").unwrap();
    for (l, state) in lines[1..].iter().zip(["failed", "running", "queued"]) {
        assert_eq!(&l[at..at + state.len()], state, "{table}");
    }
    let row = |id: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(id))
            .unwrap()
            .to_string()
    };
    let f = row(failed);
    assert!(f.contains("exit 3") && f.contains(" 3 "), "{f}");
    assert!(f.contains("0:00:0"), "elapsed: {f}");
    let h = row(hold);
    assert!(h.contains("4/4"), "{h}");
    let w = row(waits);
    assert!(
        w.contains("waiting for devices") && w.contains("-/1"),
        "{w}"
    );

    // pacer job: key: value lines and the events.
    let text = s.ok(&dir, &["job", failed]);
    for want in [
        "state:       failed",
        "reason:      exit 3",
        "exit code:   3",
        "command:     sh -c 'echo out; exit 3'",
        &format!("cwd:         {}", dir.display()),
        "replicas:    1 asked",
        "progress:    no reports",
        "cost:        0.0",
        &format!(
            "log:         {} (pacer logs {failed})",
            s.state.join("logs").join(format!("{failed}.log")).display()
        ),
        "events (3):",
        "submitted",
        "launched",
    ] {
        assert!(text.contains(want), "`{want}` not in\n{text}");
    }
    let v: serde_json::Value =
        serde_json::from_str(&s.ok(&dir, &["job", failed, "--json"])).unwrap();
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["events"].as_array().unwrap().len(), 3, "{v}");

    s.ok(&dir, &["cancel", waits]);
    let j = s.wait(waits, Duration::from_secs(10));
    assert_eq!(j["reason"], "cancelled while queued");
    s.ok(&dir, &["cancel", hold]);
    let j = s.wait(hold, Duration::from_secs(30));
    assert_eq!(j["state"], "cancelled");
    assert_eq!(j["exit_code"], 143, "{j}");
    assert_eq!(j["reason"], "cancelled (exit 143)", "{j}");
    let text = s.ok(&dir, &["job", hold]);
    assert!(text.contains("allocation:  -"), "{text}");
}

#[test]
fn token_errors_say_where_the_token_comes_from_and_where_the_services_is() {
    let s = serve("token");
    let wrong = s.dir.join("wrong-token");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let run = |token_env: Option<&str>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pacer"));
        c.args(args)
            .env("PACER_SERVER", &s.url)
            .env_remove("PACER_TOKEN");
        if let Some(t) = token_env {
            c.env("PACER_TOKEN", t);
        }
        let o = c.output().unwrap();
        assert!(!o.status.success(), "{args:?}");
        String::from_utf8(o.stderr).unwrap()
    };
    let wrong_file = wrong.to_str().unwrap();
    for (env, args, from) in [
        (
            Some("nope"),
            vec!["jobs"],
            "refused the token from PACER_TOKEN".to_string(),
        ),
        (
            None,
            vec!["job", "job-1", "--token-file", wrong_file],
            format!("refused the token from --token-file {wrong_file}"),
        ),
        (
            Some("nope"),
            vec!["submit", "--wrap", "true"],
            "refused the token from PACER_TOKEN".into(),
        ),
        (
            None,
            vec!["jobs"],
            "no token: give --token-file FILE or set PACER_TOKEN".into(),
        ),
    ] {
        let err = run(env, &args);
        assert!(err.contains(&from), "{args:?}: {err}");
        assert!(err.contains("<state>/token"), "{args:?}: {err}");
        assert!(err.contains("pacer serve --state DIR"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

/// The repository root (the examples are submitted from there, as their README says).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[test]
fn the_shipped_example_jobs_run_as_written() {
    let s = serve("examples");
    let root = repo_root();
    let hello = s.ok(&root, &["submit", "examples/jobs/hello.toml"]);
    let trainer = s.ok(&root, &["submit", "examples/jobs/trainer.toml"]);
    let (hello, trainer) = (hello.trim(), trainer.trim());
    for id in [hello, trainer] {
        let j = s.wait(id, Duration::from_secs(180));
        assert_eq!(j["state"], "succeeded", "{j}\n{}", s.log(id));
    }
    let log = s.log(hello);
    for want in [
        format!("hello from {hello} (run {hello}:1) in {}", root.display()),
        "devices: 1 cpu".to_string(),
        "GREETING=hi there".to_string(),
        "bye".to_string(),
    ] {
        assert!(log.contains(&want), "`{want}` not in\n{log}");
    }
    let j = s.job(trainer);
    assert!(j["reports"].as_u64().unwrap() > 0, "{j}");
    assert!(
        s.log(trainer).contains("final accuracy"),
        "{}",
        s.log(trainer)
    );

    // docs/serve.md's job spec, as written.
    let doc = std::fs::read_to_string(root.join("docs/serve.md")).unwrap();
    let block = doc
        .split("## Job spec (TOML")
        .nth(1)
        .and_then(|rest| rest.split("```toml\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("docs/serve.md has a job spec block");
    let file = s.dir.join("doc-spec.toml");
    std::fs::write(&file, block).unwrap();
    let id = s.ok(&root, &["submit", file.to_str().unwrap()]);
    let j = s.wait(id.trim(), Duration::from_secs(180));
    assert_eq!(j["state"], "succeeded", "{j}\n{}", s.log(id.trim()));

    // torchrun.toml needs torch (the Python tests run it); here: it is a valid spec that
    // starts torchrun with the script the README names.
    let text = std::fs::read_to_string(root.join("examples/jobs/torchrun.toml")).unwrap();
    let spec = pacer_serve::spec::JobSpec::from_toml(&text, "torchrun.toml").unwrap();
    let cluster = pacer_model::ClusterSpec::parse("2x2:cpu", "test").unwrap();
    spec.validate(&cluster).unwrap();
    let argv = spec.argv("pacer", 2);
    assert!(argv.iter().any(|a| a == "torchrun"), "{argv:?}");
    assert!(
        argv.iter().any(|a| a == "python/examples/train_ddp.py"),
        "{argv:?}"
    );
}

#[test]
fn a_trainer_job_logs_progress_while_it_runs() {
    let s = serve("progress");
    let spec = s.dir.join("long.toml");
    std::fs::write(
        &spec,
        "name = \"long\"\n[trainer]\ndataset = \"tiny\"\n\
         args = [\"--max-iterations\", \"1000000\", \"--max-time-s\", \"120\", \"--progress-every-s\", \"0.2\"]\n",
    )
    .unwrap();
    let id = s.ok(&s.dir, &["submit", spec.to_str().unwrap()]);
    let id = id.trim();
    // Progress lines reach the log while the job runs (before, `pacer train` printed
    // nothing until its report at the end).
    let t0 = Instant::now();
    loop {
        let log = std::fs::read_to_string(s.state.join("logs").join(format!("{id}.log")))
            .unwrap_or_default();
        let lines = log
            .lines()
            .filter(|l| l.starts_with("progress: step "))
            .count();
        if lines >= 3 {
            assert!(!log.contains("final accuracy"), "{log}");
            assert!(log.contains("/1000000  epoch "), "{log}");
            assert!(log.contains(" samples/s  train "), "{log}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no progress lines within 60 s:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.job(id)["state"], "running");
    s.ok(&s.dir, &["cancel", id]);
    assert_eq!(s.wait(id, Duration::from_secs(60))["state"], "cancelled");

    // Outside the service: lines on stdout when it is not a terminal, none with --json.
    let train = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_pacer"))
            .args([
                "train",
                "--dataset",
                "tiny",
                "--max-iterations",
                "30",
                "--progress-every-s",
                "0",
            ])
            .args(extra)
            .env_remove("PACER_JOB_ID")
            .env_remove("PACER_SERVER")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let (out, _) = train(&[]);
    assert!(out.starts_with("progress: step 1/30  epoch "), "{out}");
    assert!(out.contains("progress: step 30/30"), "{out}");
    let (out, err) = train(&["--json"]);
    serde_json::from_str::<serde_json::Value>(&out).unwrap();
    assert!(!err.contains("progress:"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args(["train", "--dataset", "tiny", "--progress-every-s", "NaN"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--progress-every-s"));
}

#[test]
fn submit_with_a_deadline_says_accepted_or_declined() {
    let s = serve_with("deadline", "deadline");
    let dir = s.dir.to_path_buf();
    // 2 of the 4 devices for 60 s, due in an hour: accepted, with its plan.
    let out = s.ok(
        &dir,
        &[
            "submit",
            "--wrap",
            "true",
            "-n",
            "2",
            "--deadline",
            "1h",
            "--expected-runtime",
            "60",
        ],
    );
    eprintln!("pacer submit printed:\n{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], "job-1");
    assert!(
        lines[1].starts_with("accepted: deadline ") && lines[1].contains("2 devices now"),
        "{out}"
    );
    // All 4 for an hour, due in 30 minutes: declined, with the earliest deadline.
    let o = s.pacer(
        &dir,
        &[
            "submit",
            "--wrap",
            "true",
            "-n",
            "4",
            "--deadline",
            "30m",
            "--expected-runtime",
            "1h",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("pacer submit (declined) said:\n{err}");
    assert!(!o.status.success());
    assert!(
        err.contains("declined") && err.contains("earliest deadline"),
        "{err}"
    );
    // Bad values: one error naming the field.
    for (args, says) in [
        (
            ["--deadline", "soon", "--expected-runtime", "1m"],
            "field `deadline`",
        ),
        (
            ["--deadline", "1h", "--expected-runtime", "1x"],
            "field `expected_runtime`",
        ),
    ] {
        let mut all = vec!["submit", "--wrap", "true"];
        all.extend(args);
        let o = s.pacer(&dir, &all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{all:?}");
        assert!(err.contains(says), "{all:?}: {err}");
    }
    let listed: serde_json::Value = serde_json::from_str(&s.ok(&dir, &["jobs", "--json"])).unwrap();
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);
}

#[test]
fn a_job_on_a_dollar_budget_is_placed_on_the_cheapest_type() {
    let s = serve_on(
        "cost",
        "fifo",
        "1x2:a100,1x2:t4",
        &["--price", "a100=2.93", "--price", "t4=0.35"],
    );
    let dir = s.dir.to_path_buf();
    let submit = |more: &[&str]| {
        let mut all = vec!["submit", "--wrap", "sleep 30", "-n", "2"];
        all.extend(more);
        s.ok(&dir, &all).trim().to_string()
    };
    let run_type = |id: &str| {
        let t0 = Instant::now();
        loop {
            let j = s.job(id);
            if let Some(t) = j["run"]["device_type"].as_str() {
                return t.to_string();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{id} never ran: {j}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // Both types free, nothing measured: the budget job goes to the lower price.
    let a = submit(&["--budget-usd", "10"]);
    assert_eq!(run_type(&a), "t4");
    let b = submit(&["--budget-usd", "10", "--placement", "any"]);
    assert_eq!(run_type(&b), "a100");
    assert_eq!(s.job(&b)["spec"]["placement"], "any");
    for id in [&a, &b] {
        s.ok(&dir, &["cancel", id]);
    }
    let o = s.pacer(
        &dir,
        &["submit", "--wrap", "true", "--placement", "fastest"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--placement"), "{err}");
}
