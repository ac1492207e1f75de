//! Files the `pacer` binary writes and reads, against what a hostile local user can
//! put in their place (issue 23), through the real binary: devices and FIFOs are
//! written in place and never replaced, planted symlinks are not followed, and every
//! file read is bounded in size with the limit in the error.
//!
//! `PACER_TEST_BIN=/path/to/pacer` runs these against another build (e.g. one from
//! before a fix, to see a test fail).

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

// ------------------------------------------------------------------ writes

#[cfg(unix)]
mod unix {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    fn cpath(p: &Path) -> std::ffi::CString {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
    }

    /// The jobs CSV `pacer simulate --policy fifo --out DIR` writes.
    const JOBS: &str = "workload-1-fifo-jobs.csv";

    #[test]
    fn simulate_out_to_a_full_device_fails_naming_it_and_keeps_the_device() {
        // As root the old writer renamed a regular file over the device node
        // (`pacer validate pollux --markdown /dev/full` destroyed /dev/full). The
        // node here is the test's own copy of /dev/full, so a regression cannot
        // break the machine's.
        let dir = tmp_dir("files", "dev-full");
        let node = dir.join(JOBS);
        // SAFETY: valid path; makedev has no preconditions.
        let made = unsafe {
            libc::mknod(
                cpath(&node).as_ptr(),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, 7),
            )
        };
        if made != 0 {
            eprintln!("skipped: cannot create a device node (needs root)");
            return;
        }
        let out = pacer(&[
            "simulate",
            "--policy",
            "fifo",
            "--out",
            dir.to_str().unwrap(),
        ]);
        let err = fails_with(&out, &format!("cannot write {}", node.display()));
        assert!(err.contains("No space left on device"), "{err}");
        assert!(std::fs::symlink_metadata(&node)
            .unwrap()
            .file_type()
            .is_char_device());
        assert_eq!(
            files_in(&dir),
            vec![JOBS],
            "no temporary left, nothing after"
        );
    }

    #[test]
    fn simulate_out_to_a_fifo_delivers_the_csv_and_keeps_the_fifo() {
        let dir = tmp_dir("files", "fifo");
        let fifo = dir.join(JOBS);
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mkfifo(cpath(&fifo).as_ptr(), 0o600) }, 0);
        let (tx, rx) = mpsc::channel();
        let reader = fifo.clone();
        // Blocks until pacer opens the FIFO; if it never does (the old writer
        // replaced the FIFO with a file) the test fails at the timeout, leaving
        // the thread behind instead of hanging.
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read_to_string(&reader));
        });
        let out = pacer(&[
            "simulate",
            "--policy",
            "fifo",
            "--out",
            dir.to_str().unwrap(),
        ]);
        let got = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the FIFO's reader got the CSV");
        assert_ok(&out);
        let csv = got.unwrap();
        assert_eq!(csv.lines().count(), 161, "header + 160 jobs");
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
    }

    #[test]
    fn symlinks_planted_for_the_next_pids_do_not_redirect_simulate_out() {
        // The old temporary name was `.NAME.<pid>.tmp`, created following symlinks:
        // links planted for the next pids made `pacer simulate --out` overwrite the
        // victim. Plant them for the next 3000 pids (the machine's other processes
        // take some too).
        let dir = tmp_dir("files", "planted");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(std::process::id());
        for pid in last + 1..=last + 3000 {
            std::os::unix::fs::symlink(&victim, dir.join(format!(".{JOBS}.{pid}.tmp"))).unwrap();
        }
        let out = pacer(&[
            "simulate",
            "--policy",
            "fifo",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_ok(&out);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let jobs = std::fs::read_to_string(dir.join(JOBS)).unwrap();
        assert_eq!(jobs.lines().count(), 161);
        assert_eq!(files_in(&dir).len(), 3000 + 4, "links, victim, 3 outputs");
    }
}

// ------------------------------------------------------------------- reads

/// A sparse file of `len` bytes (instant, and takes no disk).
fn sparse(dir: &Path, name: &str, len: u64) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(len).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn every_file_simulate_fit_and_batching_read_is_bounded_with_the_limit_in_the_error() {
    // Was: read whole whatever its size (a 100 GB file, or /dev/zero, until memory ran
    // out); a file of zeros then failed to parse, with no word about its size.
    let dir = tmp_dir("files", "bounded");
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![
                "simulate".into(),
                "--cluster".into(),
                sparse(&dir, "c.toml", 2 << 20),
            ],
            format!(
                "is {} bytes; the limit for a cluster file is 1048576 bytes",
                2 << 20
            ),
        ),
        (
            vec![
                "simulate".into(),
                "--workload".into(),
                sparse(&dir, "w.csv", 300 << 20),
            ],
            format!(
                "is {} bytes; the limit for a trace or workload file is 268435456 bytes",
                300u64 << 20
            ),
        ),
        (
            vec![
                "simulate".into(),
                "--trace".into(),
                format!("philly:{}", sparse(&dir, "philly.csv", 1 << 40)),
            ],
            format!(
                "is {} bytes; the limit for a trace or workload file is 268435456 bytes",
                1u64 << 40
            ),
        ),
        (
            vec![
                "fit".into(),
                "--placements".into(),
                sparse(&dir, "p.csv", 65 << 20),
            ],
            format!(
                "is {} bytes; the limit for a measured table is 67108864 bytes",
                65 << 20
            ),
        ),
        (
            vec![
                "batching".into(),
                "eval".into(),
                "--scenario".into(),
                sparse(&dir, "s.json", 65 << 20),
            ],
            format!(
                "is {} bytes; the limit for a measured table is 67108864 bytes",
                65 << 20
            ),
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = pacer(&args);
        fails_with(&out, &needle);
    }
}

#[cfg(unix)]
#[test]
fn submit_of_a_100_mb_spec_is_refused_with_the_limit_not_killed_by_sigpipe() {
    // Was: read whole, parsed, sent; the service answers 413 after 64 KiB and closes,
    // and the write to the closed socket killed `pacer submit` by SIGPIPE: no message,
    // status 141. A stand-in service here does what the real one does.
    use std::io::{Read, Write};
    let dir = tmp_dir("files", "submit");
    let spec = dir.join("job.toml");
    let mut text = String::from("name = \"big\"\ncommand = [\"true\"]\n# ");
    text.push_str(&"x".repeat(100 << 20));
    text.push('\n');
    std::fs::write(&spec, &text).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut head = [0u8; 65536];
                    let _ = s.read(&mut head);
                    let body = "{\"error\":\"request body too large\",\"field\":\"\"}";
                    let _ = write!(
                        s,
                        "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    let out = Command::new(bin())
        .args([
            "submit",
            spec.to_str().unwrap(),
            "--server",
            &format!("http://127.0.0.1:{port}"),
        ])
        .env("PACER_TOKEN", "t")
        .output()
        .unwrap();
    let err = fails_with(
        &out,
        &format!(
            "{} is {} bytes; the limit for a job spec (the service's request limit) is 65536 bytes",
            spec.display(),
            text.len()
        ),
    );
    assert_eq!(out.status.code(), Some(1), "{err}");
}
