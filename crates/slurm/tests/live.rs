//! Live tests against the dev cluster (deploy/slurm/dev-cluster.sh: 4 nodes n1..n4, 4
//! `gpu:t4` each, partition `gpu`). They are `#[ignore]`d, so `cargo test` lists them as
//! ignored rather than passing them; they run with `--ignored` and need
//! `SLURM_CONF` (the dev cluster's) in the environment, root, and `PACER_SLURM_DIR` when the
//! cluster is not in /var/lib/pacer-slurm; scripts/slurm-e2e.sh sets all of that up.
//!
//! Each test holds one lock, so they run one at a time even under cargo's parallel runner,
//! and each cancels what it submitted. Every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use pacer_slurm::{
    JobEvent, JobRequest, JobState, JobWatch, SignalTarget, SlurmClient, SlurmError,
};

static SERIAL: Mutex<()> = Mutex::new(());

fn client() -> SlurmClient {
    SlurmClient::new().with_timeout(Duration::from_secs(30))
}

fn cluster_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("PACER_SLURM_DIR").unwrap_or_else(|_| "/var/lib/pacer-slurm".into()),
    )
}

/// A scratch directory for one test's job output, under cargo's `CARGO_TARGET_TMPDIR`:
/// removed when the test passes, kept for a look when it fails (its path is printed).
struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.disable_cleanup(true);
            eprintln!("kept {} for a look", self.0.path().display());
        }
    }
}

fn scratch(test: &str) -> Scratch {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(&format!("pacer-slurm-live-{test}-"))
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    // As readable as a folder `mkdir` makes (a temporary folder is the owner's alone).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Scratch(dir)
}

/// Polls `f` every `poll` until it gives `Some`, at most `limit`.
fn wait_for<T>(what: &str, limit: Duration, poll: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        thread::sleep(poll);
    }
}

fn state(c: &SlurmClient, id: u64) -> Option<JobState> {
    c.job(id).unwrap().map(|j| j.state)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn discovers_the_dev_cluster_and_names_what_is_missing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = client();
    let cluster = c.discover_for("gpu", true).unwrap();
    let nodes = cluster.partition_nodes("gpu").unwrap();
    assert_eq!(nodes.len(), 4);
    for n in nodes {
        assert!(n.state.is_up(), "{} is {}", n.name, n.state);
        assert_eq!(
            (n.gpus(Some("t4")), n.device_type().as_deref()),
            (4, Some("t4"))
        );
    }

    let err = c.discover_for("nope", true).unwrap_err();
    assert!(matches!(err, SlurmError::NoSuchPartition { .. }), "{err}");
    println!("missing partition: {err}");

    let err = client()
        .with_bin_dir("/nonexistent/slurm/bin")
        .discover_for("gpu", true)
        .unwrap_err();
    assert!(matches!(err, SlurmError::NotInstalled { .. }), "{err}");
    println!("no Slurm: {err}");

    // A slurm.conf whose controller port nobody listens on.
    let dir = scratch("unreachable");
    let conf = std::fs::read_to_string(std::env::var("SLURM_CONF").expect("SLURM_CONF")).unwrap();
    let conf: String = conf
        .lines()
        .map(|l| {
            if l.starts_with("SlurmctldPort=") {
                "SlurmctldPort=9".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("slurm.conf"), conf).unwrap();
    std::fs::copy(cluster_dir().join("gres.conf"), dir.join("gres.conf")).unwrap();
    let t = Instant::now();
    let err = client()
        .with_slurm_conf(dir.join("slurm.conf"))
        .discover_for("gpu", true)
        .unwrap_err();
    assert!(
        matches!(
            err,
            SlurmError::Unreachable { .. } | SlurmError::Timeout { .. }
        ),
        "{err}"
    );
    println!(
        "controller down ({:.1} s): {err}",
        t.elapsed().as_secs_f64()
    );
}

#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn two_node_job_rendezvous_placement_and_start_latency() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = client();
    let cluster = c.discover_for("gpu", true).unwrap();
    let dir = scratch("two-node");
    let out = dir.join("job-%j.out");
    let script = "echo rank=$SLURM_PROCID node=$SLURM_NODEID name=$SLURMD_NODENAME ntasks=$SLURM_NTASKS \
                  nodes=$SLURM_JOB_NODELIST cvd=$CUDA_VISIBLE_DEVICES ckpt=$PACER_CHECKPOINT_DIR; sleep 4";
    let mut req = JobRequest::new("two-node", "gpu", &["n1", "n2"], 2, &["bash", "-c", script]);
    req.gpu_type = Some("t4".into());
    req.per_task = true;
    req.output = out.clone();
    req.env
        .insert("PACER_CHECKPOINT_DIR".into(), "/ckpt/a,b c".into());

    let t0 = Instant::now();
    let id = c.submit_checked(&req, &cluster).unwrap();
    let out = PathBuf::from(out.to_string_lossy().replace("%j", &id.to_string()));
    let mut watch = JobWatch::default();
    watch.follow(id);
    let running = wait_for(
        "RUNNING",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || {
            let jobs = c.jobs().unwrap();
            let started = watch
                .update(&jobs)
                .into_iter()
                .any(|e| matches!(e, JobEvent::Started { .. }));
            started.then(|| (t0.elapsed(), jobs.into_iter().find(|j| j.id == id).unwrap()))
        },
    );
    let first_line = wait_for(
        "first output line",
        Duration::from_secs(30),
        Duration::from_millis(10),
        || read(&out).contains('\n').then(|| t0.elapsed()),
    );
    println!(
        "decision-to-start: submit -> RUNNING {:.2} s, submit -> first output line {:.2} s",
        running.0.as_secs_f64(),
        first_line.as_secs_f64()
    );

    // squeue's placement is the request's.
    let job = running.1;
    assert_eq!(job.nodes, ["n1", "n2"]);
    assert_eq!((job.gpus_on("n1"), job.gpus_on("n2")), (2, 2));
    assert_eq!(job.name, "pacer-two-node");

    wait_for(
        "job end",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || state(&c, id).filter(|s| s.is_terminal()),
    );
    assert_eq!(state(&c, id), Some(JobState::Completed));
    let text = read(&out);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    println!("{}", lines.join("\n"));
    assert_eq!(lines.len(), 2, "{text}");
    for (rank, node) in [(0, "n1"), (1, "n2")] {
        let want = format!(
            "rank={rank} node={rank} name={node} ntasks=2 nodes=n[1-2] cvd=0,1 ckpt=/ckpt/a,b c"
        );
        assert_eq!(lines[rank], want);
    }
}

/// A job that traps SIGTERM, saves and exits: preemption ends it by itself, before any kill.
#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn sigterm_reaches_the_job_before_it_is_killed() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = client();
    let dir = scratch("sigterm");
    // `wrapped`: the command is a child of a shell that survives SIGTERM (as pacer serve's
    // wrapper runs jobs), which `--batch` alone would signal.
    for (per_task, wrapped) in [(false, false), (false, true), (true, false)] {
        let out = dir.join(format!("term-{per_task}-{wrapped}.out"));
        let script = "trap 'echo got-term; sleep 1; echo saved; exit 0' TERM; echo started; \
                      while true; do sleep 0.1; done";
        let mut argv = vec!["bash", "-c", script];
        if wrapped {
            argv.splice(0..0, ["sh", "-c", "trap : TERM; \"$@\"", "wrapper"]);
        }
        let mut req = JobRequest::new("term", "gpu", &["n3"], 1, &argv);
        req.output = out.clone();
        req.per_task = per_task;
        let id = c.submit(&req).unwrap();
        wait_for(
            "started",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || read(&out).contains("started").then_some(()),
        );
        let t = Instant::now();
        let end = c
            .preempt(
                id,
                req.signal_target(),
                Duration::from_secs(20),
                Duration::from_millis(100),
            )
            .unwrap();
        let text = read(&out);
        println!(
            "per_task={per_task} wrapped={wrapped}: ended {end:?} {:.2} s after SIGTERM; output: {text:?}",
            t.elapsed().as_secs_f64()
        );
        assert!(
            text.contains("got-term") && text.contains("saved"),
            "{text}"
        );
        assert_eq!(end, Some(JobState::Completed), "{text}");
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the job ended by itself, not at the grace limit"
        );
    }

    // A job that ignores SIGTERM is cancelled after the grace period.
    let out = dir.join("ignore.out");
    let mut req = JobRequest::new(
        "ignore",
        "gpu",
        &["n3"],
        1,
        &[
            "bash",
            "-c",
            "trap '' TERM; echo started; while true; do sleep 0.1; done",
        ],
    );
    req.output = out.clone();
    let id = c.submit(&req).unwrap();
    wait_for(
        "started",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || read(&out).contains("started").then_some(()),
    );
    let t = Instant::now();
    let end = c
        .preempt(
            id,
            SignalTarget::Batch,
            Duration::from_secs(2),
            Duration::from_millis(100),
        )
        .unwrap();
    println!(
        "ignores TERM: ended {end:?} {:.2} s after SIGTERM",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(end, Some(JobState::Cancelled));
    assert!(t.elapsed() >= Duration::from_secs(2));
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn node_state(c: &SlurmClient, node: &str) -> String {
    c.nodes()
        .unwrap()
        .into_iter()
        .find(|n| n.name == node)
        .map(|n| n.state.to_string())
        .unwrap_or_default()
}

/// Kills n4's slurmd under a running job: Slurm marks the node down and requeues the job
/// (it asked for `--requeue`); the dev cluster script then brings the node back.
#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn a_killed_slurmd_marks_the_node_down_and_the_job_requeued() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = client();
    let dir = scratch("node-fail");
    let out = dir.join("job.out");
    let mut req = JobRequest::new(
        "node-fail",
        "gpu",
        &["n4"],
        1,
        &[
            "bash",
            "-c",
            "echo run restart=${SLURM_RESTART_COUNT:-0}; while true; do sleep 0.1; done",
        ],
    );
    req.output = out.clone();
    req.requeue = true;
    let id = c.submit(&req).unwrap();
    let mut watch = JobWatch::default();
    watch.follow(id);
    wait_for(
        "running",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            watch
                .update(&c.jobs().unwrap())
                .into_iter()
                .any(|e| matches!(e, JobEvent::Started { .. }))
                .then_some(())
        },
    );

    // The machine "dies": its slurmd and the job's processes on it are killed.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/slurm/dev-cluster.sh");
    let t = Instant::now();
    let st = Command::new(&script)
        .args(["fail-node", "n4"])
        .status()
        .unwrap();
    assert!(st.success(), "dev-cluster.sh fail-node n4 failed");
    let old_output = read(&out);
    assert!(old_output.contains("restart=0"), "{old_output}");

    let lost = wait_for(
        "n4 not responding",
        Duration::from_secs(90),
        Duration::from_millis(250),
        || {
            let s = node_state(&c, "n4");
            (s.starts_with("down") || s.contains("not_responding")).then_some(s)
        },
    );
    println!(
        "n4 is `{lost}` {:.1} s after its slurmd was killed",
        t.elapsed().as_secs_f64()
    );
    let down = wait_for(
        "n4 down",
        Duration::from_secs(90),
        Duration::from_millis(250),
        || {
            let s = node_state(&c, "n4");
            s.starts_with("down").then_some(s)
        },
    );
    println!(
        "n4 is `{down}` {:.1} s after its slurmd was killed",
        t.elapsed().as_secs_f64()
    );
    let (events, job) = wait_for(
        "job requeued or ended",
        Duration::from_secs(90),
        Duration::from_millis(250),
        || {
            let jobs = c.jobs().unwrap();
            let ev = watch.update(&jobs);
            let job = jobs.into_iter().find(|j| j.id == id);
            let moved = ev
                .iter()
                .any(|e| matches!(e, JobEvent::Requeued { .. } | JobEvent::Ended { .. }));
            moved.then_some((ev, job))
        },
    );
    let job = job.unwrap();
    println!(
        "{:.1} s after the kill Slurm reports job {id}: {:?} reason={} restart_count={} \
         eligible in {} s; events={events:?}",
        t.elapsed().as_secs_f64(),
        job.state,
        job.reason,
        job.restart_count,
        job.eligible_time - job.submit_time.max(now_unix()),
    );
    assert!(job.was_requeued(), "{job:?}");
    assert!(!job.state.holds_resources());

    // Slurm holds the requeued job back ~2 minutes (BeginTime): letting it start at once on
    // the returned node (`scontrol update StartTime=now`) was seen to have the new run killed
    // by SIGTERM within 0.1 s, Slurm's termination of the old run reaching the new one (same
    // job id). pacer cancels it and resubmits from the checkpoint instead, here on n3.
    c.cancel(id).unwrap();
    wait_for(
        "cancelled",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || state(&c, id).filter(|s| s.is_terminal()),
    );
    let resubmitted = JobRequest {
        nodes: vec!["n3".into()],
        output: dir.join("resubmitted.out"),
        ..req.clone()
    };
    let id2 = c.submit(&resubmitted).unwrap();
    wait_for(
        "resubmitted job's output",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            read(&resubmitted.output)
                .contains("restart=0")
                .then_some(())
        },
    );
    println!(
        "{:.1} s after the kill the resubmitted job {id2} runs on n3",
        t.elapsed().as_secs_f64()
    );
    c.cancel(id2).unwrap();
    wait_for(
        "cancelled",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || state(&c, id2).filter(|s| s.is_terminal()),
    );

    // Bring n4 back (starts only the missing slurmd).
    let st = Command::new(&script).arg("up").status().unwrap();
    assert!(st.success(), "dev-cluster.sh up failed");
    assert!(c
        .nodes()
        .unwrap()
        .iter()
        .find(|n| n.name == "n4")
        .unwrap()
        .state
        .is_up());
}

/// Decision-to-start latency, measured (not asserted): for 6 jobs one after another, the
/// time from `sbatch` to squeue's RUNNING and to the job's first line of output.
#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn start_latency_over_six_jobs() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = client();
    let dir = scratch("latency");
    let (mut to_running, mut to_output) = (Vec::new(), Vec::new());
    for i in 0..6 {
        let node = format!("n{}", 1 + i % 4);
        let out = dir.join(format!("job-{i}.out"));
        let mut req = JobRequest::new(
            &format!("lat-{i}"),
            "gpu",
            &[node.as_str()],
            1,
            &["bash", "-c", "echo step 1; sleep 1"],
        );
        req.output = out.clone();
        let t0 = Instant::now();
        let id = c.submit(&req).unwrap();
        let run = wait_for(
            "RUNNING",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                c.job(id)
                    .unwrap()
                    .filter(|j| j.state.holds_resources() || j.state.is_terminal())
                    .map(|_| t0.elapsed())
            },
        );
        let first = wait_for(
            "first line",
            Duration::from_secs(30),
            Duration::from_millis(10),
            || read(&out).contains("step 1").then(|| t0.elapsed()),
        );
        println!(
            "job {id} on {node}: submit -> RUNNING {:.2} s, -> first output line {:.2} s",
            run.as_secs_f64(),
            first.as_secs_f64()
        );
        to_running.push(run.as_secs_f64());
        to_output.push(first.as_secs_f64());
        wait_for(
            "end",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || state(&c, id).filter(|s| s.is_terminal()),
        );
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        format!(
            "min {:.2} s, median {:.2} s, max {:.2} s",
            v[0],
            (v[2] + v[3]) / 2.0,
            v[5]
        )
    };
    println!("submit -> RUNNING: {}", summary(&mut to_running));
    println!("submit -> first output line: {}", summary(&mut to_output));
}

/// A restarted pacer finds its running jobs by name prefix (to match against the ids in its
/// state), and counts the GPUs of jobs it did not submit as taken.
#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn adopts_its_jobs_and_counts_others_as_capacity_taken() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("adopt");
    let c = client();
    let mut req = JobRequest::new("adopt-me", "gpu", &["n1", "n2"], 3, &["sleep", "60"]);
    req.output = dir.join("adopt.out");
    let ours = c.submit(&req).unwrap();
    // Someone else's job, submitted with plain sbatch: 2 GPUs on n3.
    let out = Command::new("sbatch")
        .args([
            "--parsable",
            "--job-name=someone-else",
            "--nodelist=n3",
            "--gres=gpu:2",
        ])
        .arg(format!("--output={}", dir.join("other.out").display()))
        .args(["--wrap", "sleep 60"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();

    // A fresh client, as after a restart.
    let fresh = client();
    let cluster = wait_for(
        "both running",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let cl = fresh.discover_for("gpu", true).unwrap();
            let running = |id| {
                cl.jobs
                    .iter()
                    .any(|j| j.id == id && j.state == JobState::Running)
            };
            (running(ours) && running(theirs)).then_some(cl)
        },
    );
    let own: Vec<u64> = cluster
        .own_jobs(fresh.prefix())
        .filter(|j| !j.state.is_terminal())
        .map(|j| j.id)
        .collect();
    assert_eq!(own, [ours]);
    let job = cluster.jobs.iter().find(|j| j.id == ours).unwrap();
    assert_eq!(
        (job.nodes.clone(), job.gpus_on("n1"), job.gpus_on("n2")),
        (vec!["n1".to_string(), "n2".to_string()], 3, 3)
    );
    let foreign = cluster.foreign_gpus(fresh.prefix());
    assert_eq!(foreign.get("n3"), Some(&2), "{foreign:?}");
    assert_eq!(foreign.get("n1"), None, "{foreign:?}");
    let n3 = cluster.node("n3").unwrap();
    assert_eq!((n3.gpus_used(), n3.gpus_free()), (2, 2));
    println!(
        "adopted job {ours} on {:?}; others hold {foreign:?}",
        job.nodes
    );

    let mut watch = JobWatch::default();
    watch.follow(ours);
    fresh.cancel(ours).unwrap();
    fresh.cancel(theirs).unwrap();
    let ended = wait_for(
        "ended",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            watch
                .update(&fresh.jobs().unwrap())
                .into_iter()
                .find(|e| matches!(e, JobEvent::Ended { .. }))
        },
    );
    assert_eq!(
        ended,
        JobEvent::Ended {
            id: ours,
            state: JobState::Cancelled
        }
    );
}

/// `pacer controller` and two `pacer worker`s as one Slurm job across n1 and n2: rank 0
/// (`SLURM_PROCID`) also runs the controller, every rank a worker, world size from
/// `SLURM_NTASKS`; the rendezvous address is the first node's Slurm address, given by the
/// submitter as a Slurm executor would. Needs a built `pacer` binary in `PACER_BIN`.
const TRAIN_SCRIPT: &str = r#"set -eu
if [ "$SLURM_PROCID" = 0 ]; then
  "$PACER_BIN" controller --listen "$MASTER_ADDR:$MASTER_PORT" --dataset tiny \
    --min-workers "$SLURM_NTASKS" --join-timeout-s 60 --max-iterations 200 --json --no-progress \
    > "$PACER_REPORT" &
  ctrl=$!
fi
for i in $(seq 300); do
  (exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null && break
  sleep 0.1
done
echo "rank $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME joins $MASTER_ADDR:$MASTER_PORT"
"$PACER_BIN" worker --connect "$MASTER_ADDR:$MASTER_PORT" --name "rank$SLURM_PROCID-$SLURMD_NODENAME"
if [ "$SLURM_PROCID" = 0 ]; then wait "$ctrl"; fi
"#;

#[test]
#[ignore = "needs a live Slurm: scripts/slurm-e2e.sh brings up the dev cluster and runs these with --ignored"]
fn pacer_train_across_two_nodes() {
    let Ok(pacer) = std::env::var("PACER_BIN") else {
        eprintln!(
            "skipped: PACER_BIN (a built `pacer` binary) is not set; scripts/slurm-e2e.sh sets it"
        );
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("train");
    let c = client();
    let cluster = c.discover_for("gpu", true).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut req = JobRequest::new(
        "train-2n",
        "gpu",
        &["n1", "n2"],
        1,
        &["bash", "-c", TRAIN_SCRIPT],
    );
    req.per_task = true;
    req.output = dir.join("train.out");
    let report = dir.join("report.json");
    for (k, v) in [
        ("PACER_BIN", pacer),
        ("MASTER_ADDR", cluster.node("n1").unwrap().address.clone()),
        ("MASTER_PORT", port.to_string()),
        ("PACER_REPORT", report.display().to_string()),
    ] {
        req.env.insert(k.into(), v);
    }
    let t = Instant::now();
    let id = c.submit_checked(&req, &cluster).unwrap();
    let end = wait_for(
        "training job end",
        Duration::from_secs(300),
        Duration::from_millis(250),
        || state(&c, id).filter(|s| s.is_terminal()),
    );
    let out = read(&req.output);
    println!(
        "job {id}: {end:?} after {:.1} s\n{out}",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(end, JobState::Completed, "{out}");
    assert!(
        out.contains("rank 0 of 2 on n1") && out.contains("rank 1 of 2 on n2"),
        "{out}"
    );
    // `pacer controller --json`: first a line with the bound address, then the report.
    let text = read(&report);
    let (first, text) = text.split_once('\n').unwrap_or(("", &text));
    let listening: serde_json::Value =
        serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert!(listening["listening"].is_string(), "{first}");
    let v: serde_json::Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    println!(
        "report: workers {} iterations {} final_accuracy {} train_time_s {} mean_iter_s {} final_batches_named {}",
        v["workers"], v["iterations"], v["final_accuracy"], v["train_time_s"], v["mean_iter_s"], v["final_batches_named"]
    );
    assert_eq!(
        (v["workers"].as_u64(), v["iterations"].as_u64()),
        (Some(2), Some(200)),
        "{text}"
    );
    let names = v["final_batches_named"].to_string();
    assert!(
        names.contains("rank0-n1") && names.contains("rank1-n2"),
        "{names}"
    );
}
