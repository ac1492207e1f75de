//! Jobs as process trees and capped logs, end to end through the service: a job's
//! grandchild in its own session (`setsid`) holds the job's slot until it is gone (the
//! next job on that slot never overlaps it), and a log that outgrows `--log-max-mib` is
//! rotated (its last MiB in `<job>.log.1`, the log started again).

mod common;

use common::{test_dir, wait_for, Service};

#[test]
fn a_setsid_grandchild_holds_the_slot_until_it_is_gone() {
    let dir = test_dir("jobs-tree");
    let svc = Service::start(
        &dir,
        &[
            "--cluster",
            "1x1:cpu",
            "--policy",
            "fifo",
            "--round-s",
            "0.2",
            "--grace-s",
            "2",
        ],
    );
    let d = dir.display();
    // Job 1 starts a grandchild in a new session that would run for 60 s, and exits 0.
    let first = format!(
        "name = \"leaves-a-grandchild\"\ncommand = [\"sh\", \"-c\", \"setsid sh -c 'echo $$ > {d}/gc.tmp; mv {d}/gc.tmp {d}/gc; exec sleep 60' & while [ ! -e {d}/gc ]; do sleep 0.05; done\"]\n"
    );
    // Job 2, on the same single slot, records whether that grandchild still runs.
    let second = format!(
        "name = \"next-on-the-slot\"\ncommand = [\"sh\", \"-c\", \"if kill -0 $(cat {d}/gc) 2>/dev/null; then echo overlap > {d}/seen; else echo alone > {d}/seen; fi\"]\n"
    );
    let c = svc.client();
    for spec in [&first, &second] {
        let a = svc.call(
            &c,
            "POST",
            "/v1/jobs",
            Some(spec.as_bytes()),
            "application/toml",
        );
        assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    }
    wait_for("job 2 ran", 30, || dir.join("seen").exists());
    let seen = std::fs::read_to_string(dir.join("seen")).unwrap();
    let gc: i32 = std::fs::read_to_string(dir.join("gc"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill with signal 0 only checks for the process.
    let gc_alive = unsafe { libc::kill(gc, 0) } == 0;
    if gc_alive {
        // SAFETY: the grandchild this test's job started.
        unsafe {
            libc::kill(gc, libc::SIGKILL);
        }
    }
    assert_eq!(
        seen.trim(),
        "alone",
        "job 2 started on the slot while job 1's grandchild {gc} still ran"
    );
    assert!(!gc_alive, "job 1's grandchild {gc} outlived it");
    wait_for("both succeeded", 30, || {
        let v = svc.get_json("/v1/jobs");
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["state"] == "succeeded")
    });
    drop(svc);
}

#[test]
fn a_log_past_its_cap_is_rotated() {
    let dir = test_dir("jobs-log");
    let svc = Service::start(
        &dir,
        &[
            "--cluster",
            "1x1:cpu",
            "--round-s",
            "0.2",
            "--log-max-mib",
            "1",
        ],
    );
    // 5 MB of output at once, then a marker line after the first rotation, then quiet.
    let d = dir.display();
    let spec = format!(
        "name = \"chatty\"\ncommand = [\"sh\", \"-c\", \"yes x | head -c 5000000; echo END-OF-BULK; while [ ! -e {d}/go ]; do sleep 0.05; done; echo AFTER-ROTATION; exec sleep 60\"]\n"
    );
    let c = svc.client();
    let a = svc.call(
        &c,
        "POST",
        "/v1/jobs",
        Some(spec.as_bytes()),
        "application/toml",
    );
    assert_eq!(a.status, 201, "{}", String::from_utf8_lossy(&a.body));
    let logs = svc.state().join("logs");
    wait_for("the log rotated", 30, || logs.join("job-1.log.1").exists());
    let kept = std::fs::read(logs.join("job-1.log.1")).unwrap();
    assert_eq!(kept.len(), 1 << 20, "the rotated part is the last MiB");
    assert!(
        kept.ends_with(b"x\nx\nEND-OF-BULK\n"),
        "{:?}",
        &kept[kept.len() - 20..]
    );
    // The job goes on writing to its log, from its new start.
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("the job's next line", 30, || {
        std::fs::read_to_string(logs.join("job-1.log")).is_ok_and(|s| s.contains("AFTER-ROTATION"))
    });
    let log = std::fs::read(logs.join("job-1.log")).unwrap();
    assert!(log.len() < 1 << 20, "{} bytes", log.len());
    assert_eq!(
        log, b"AFTER-ROTATION\n",
        "no hole or old bytes before the new line"
    );
    let ev = svc.get_json("/v1/jobs/job-1/events");
    assert!(ev.to_string().contains("log-rotated"), "{ev}");
    let a = svc.call(&c, "POST", "/v1/jobs/job-1/cancel", None, "");
    assert_eq!(a.status, 202);
    wait_for("cancelled", 30, || {
        svc.get_json("/v1/jobs/job-1")["state"] == "cancelled"
    });
    drop(svc);
}
