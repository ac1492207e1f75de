//! A damaged state database (truncated, or with a flipped byte) stops the service
//! with a clear error that names the file and how to start again — never a panic
//! (exit 101). Moving the file aside as the error says starts a fresh service.

mod common;

use common::{test_dir, Service};
use std::path::Path;
use std::time::{Duration, Instant};

enum Outcome {
    /// Listening: the damage was not in anything read at start.
    Started,
    Refused {
        code: Option<i32>,
        stderr: String,
    },
}

/// Runs `pacer-serve run` on `state` for at most 20 s.
fn start(state: &Path) -> Outcome {
    let log = state.with_extension("log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pacer-serve"))
        .args(["run", "--listen", "127.0.0.1:0", "--cluster", "1x1:cpu"])
        .arg("--state")
        .arg(state)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return Outcome::Refused {
                code: st.code(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
        }
        if std::fs::read_to_string(&log).is_ok_and(|s| s.contains("listening on")) {
            child.kill().unwrap();
            child.wait().unwrap();
            return Outcome::Started;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "pacer-serve neither started nor stopped in 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_clear_refusal(what: &str, db: &Path, o: Outcome) {
    match o {
        Outcome::Started => panic!("{what}: the service started on a damaged database"),
        Outcome::Refused { code, stderr } => {
            assert_eq!(code, Some(1), "{what}: exit {code:?}, not 1: {stderr}");
            assert!(!stderr.contains("panicked"), "{what}: {stderr}");
            for w in [db.to_str().unwrap(), "cannot be opened", "mv ", ".corrupt"] {
                assert!(stderr.contains(w), "{what}: `{w}` not in {stderr}");
            }
        }
    }
}

#[test]
fn damaged_database_is_a_clear_error() {
    let dir = test_dir("corrupt");
    let mut svc = Service::start(&dir, &["--cluster", "1x1:cpu", "--round-s", "0.2"]);
    let c = svc.client();
    for k in 0..20 {
        let spec = format!("name = \"j{k}\"\ncommand = [\"true\"]\n");
        let a = svc.submit_toml(&c, &spec);
        assert_eq!(a.status, 201);
    }
    std::thread::sleep(Duration::from_millis(500));
    svc.kill9();
    let good = std::fs::read(svc.state().join("state.redb")).unwrap();
    let token = std::fs::read(svc.state().join("token")).unwrap();
    assert!(good.len() > 4096, "{} bytes", good.len());

    let fresh = |name: &str, bytes: &[u8]| {
        use std::os::unix::fs::PermissionsExt;
        let d = dir.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(d.join("token"), &token).unwrap();
        std::fs::set_permissions(d.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(d.join("state.redb"), bytes).unwrap();
        d
    };

    // Truncated to half, and to a few bytes.
    for (name, len) in [("half", good.len() / 2), ("stub", 10)] {
        let d = fresh(name, &good[..len]);
        assert_clear_refusal(name, &d.join("state.redb"), start(&d));
    }
    // One byte flipped: in the file's header (its magic number and the commit slots),
    // and in 24 pages spread over the rest (4 KiB pages, a byte at a fixed offset in
    // each). A flip may land in unused space and go unnoticed; where it is noticed it is
    // a clear refusal, and never a panic.
    let mut noticed = 0;
    let mut offsets = vec![0usize, 9, 64, 200, 600];
    let step = (good.len() / 24 / 4096).max(1) * 4096;
    offsets.extend((4096..good.len() - 4096).step_by(step).map(|p| p + 1234));
    let tried = offsets.len();
    for off in offsets {
        let mut bad = good.clone();
        bad[off] ^= 0x5a;
        let name = format!("flip-{off}");
        let d = fresh(&name, &bad);
        match start(&d) {
            Outcome::Started => {}
            o => {
                assert_clear_refusal(&name, &d.join("state.redb"), o);
                noticed += 1;
            }
        }
        let _ = std::fs::remove_dir_all(&d);
    }
    eprintln!("{noticed} of {tried} flipped bytes refused clearly, the others started; no panic");
    assert!(noticed >= 2, "only {noticed} flipped bytes were noticed");

    // What the error says to do works: the file moved aside, a fresh service starts.
    let d = dir.join("half");
    std::fs::rename(d.join("state.redb"), d.join("state.redb.corrupt")).unwrap();
    assert!(matches!(start(&d), Outcome::Started));
}
