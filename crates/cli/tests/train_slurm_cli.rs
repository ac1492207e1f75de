//! `pacer train --slurm`: two processes given the variables `srun` and `pacer serve` set
//! (SLURM_NTASKS, SLURM_PROCID, MASTER_ADDR, MASTER_PORT) train one job together on
//! loopback: rank 0 is the controller, each rank runs a worker; SIGTERM to both ranks
//! leaves one checkpoint (rank 0 exits 143) and a new pair resumes from it. The same
//! command under a live Slurm is in scripts/slurm-e2e.sh (phase `train`).

mod common;

use common::Scratch;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rank(r: usize, port: u16, ckpt: &Path, iters: u64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pacer"))
        .args([
            "train",
            "--slurm",
            "--dataset",
            "tiny",
            "--json",
            "--no-progress",
        ])
        .args(["--max-iterations", &iters.to_string(), "--normal-priority"])
        .env("SLURM_NTASKS", "2")
        .env("SLURM_PROCID", r.to_string())
        .env("SLURMD_NODENAME", format!("n{}", r + 1))
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("PACER_CHECKPOINT_DIR", ckpt)
        .env_remove("PACER_SERVER")
        .env_remove("PACER_REPLICAS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (at most 120 s) for a rank; its exit code, stdout and stderr. The pipes are
/// read while it runs (a thread): a `--json` report is larger than a pipe's buffer
/// (80 KB after 2,934 steps), and a rank blocked writing it would never exit.
fn finish(c: Child) -> (Option<i32>, String, String) {
    let out = common::wait_bounded(c, Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("a rank ran past 120 s"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A fresh checkpoint folder, removed when the guard drops.
fn scratch(name: &str) -> Scratch {
    Scratch::dir(&format!("train-slurm-{name}"))
}

#[test]
fn two_ranks_train_one_job_and_both_workers_take_part() {
    let ckpt = scratch("run");
    let port = free_port();
    // The worker rank may start first: it waits for the controller.
    let r1 = rank(1, port, &ckpt, 200);
    std::thread::sleep(Duration::from_millis(300));
    let r0 = rank(0, port, &ckpt, 200);
    let (c0, out0, err0) = finish(r0);
    let (c1, _, err1) = finish(r1);
    assert_eq!(c0, Some(0), "rank 0: {err0}");
    assert_eq!(c1, Some(0), "rank 1: {err1}");
    let v: serde_json::Value =
        serde_json::from_str(&out0).unwrap_or_else(|e| panic!("{e}: {out0}"));
    assert_eq!(
        (v["workers"].as_u64(), v["iterations"].as_u64()),
        (Some(2), Some(200)),
        "{out0}"
    );
    let names = v["final_batches_named"].to_string();
    assert!(
        names.contains("rank0-n1-0") && names.contains("rank1-n2-0"),
        "{names}"
    );
    assert!(err1.contains("rank 1 on n2: 1 worker(s) trained"), "{err1}");
}

#[test]
fn sigterm_to_every_rank_leaves_one_checkpoint_and_the_next_pair_resumes() {
    let ckpt = scratch("term");
    let port = free_port();
    let r0 = rank(0, port, &ckpt, 1_000_000);
    let r1 = rank(1, port, &ckpt, 1_000_000);
    std::thread::sleep(Duration::from_millis(2500));
    for c in [&r0, &r1] {
        let ok = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let (c0, out0, err0) = finish(r0);
    let (c1, _, err1) = finish(r1);
    assert_eq!(c0, Some(143), "rank 0 checkpoints and exits 143: {err0}");
    assert_eq!(c1, Some(0), "rank 1 ends when rank 0 shuts it down: {err1}");
    let v: serde_json::Value =
        serde_json::from_str(&out0).unwrap_or_else(|e| panic!("{e}: {out0}"));
    let done = v["iterations"].as_u64().unwrap();
    assert!(done > 0, "{out0}");
    assert!(ckpt.join("pacer-checkpoint.bin").exists(), "{err0}");
    // A new pair resumes there and trains to a total of done + 50.
    let port = free_port();
    let total = done + 50;
    let r0 = rank(0, port, &ckpt, total);
    let r1 = rank(1, port, &ckpt, total);
    let (c0, out0, err0) = finish(r0);
    let (c1, _, err1) = finish(r1);
    assert_eq!((c0, c1), (Some(0), Some(0)), "{err0}\n{err1}");
    let v: serde_json::Value =
        serde_json::from_str(&out0).unwrap_or_else(|e| panic!("{e}: {out0}"));
    assert_eq!(
        v["iterations"].as_u64(),
        Some(total),
        "resumed at {done}: {out0}\n{err0}"
    );
}

#[test]
fn a_worker_rank_stopped_before_its_controller_answers_exits_at_once() {
    // Rank 0 never comes (under Slurm: it died of the SIGTERM before its handler was in
    // place). The worker rank used to wait 60 s for it, holding the Slurm job.
    let ckpt = scratch("early");
    let r1 = rank(1, free_port(), &ckpt, 100);
    std::thread::sleep(Duration::from_millis(1000));
    let ok = Command::new("kill")
        .args(["-TERM", &r1.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let t = Instant::now();
    let (c1, _, err1) = finish(r1);
    assert_eq!(c1, Some(143), "{err1}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(err1.contains("SIGTERM before the controller"), "{err1}");
}
