//! The writer against what a hostile local user can put at or next to a target
//! (issue 23): planted symlinks at temporary names, devices, FIFOs, links owned by
//! someone else. Run as root (as CI does) the device and ownership tests exercise
//! what only root can break; as another user they check what they can and say so.

#![cfg(unix)]

use pacer_fsio::{write_bytes, write_file};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// A fresh folder, removed when the returned guard drops.
fn tmp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("pacer-fsio-test-{name}-"))
        .tempdir()
        .unwrap()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_regular_file_is_replaced_whole_keeping_its_permissions() {
    let tmp = tmp_dir("regular");
    let dir = tmp.path().to_path_buf();
    let p = dir.join("out.txt");
    write_bytes(&p, "one\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    write_bytes(&p, "two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "two\n");
    assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
    assert_eq!(names_in(&dir), vec!["out.txt"], "no temporary left");
}

#[test]
fn a_failed_write_leaves_the_target_and_no_temporary() {
    let tmp = tmp_dir("failed");
    let dir = tmp.path().to_path_buf();
    let p = dir.join("out.txt");
    std::fs::write(&p, "old\n").unwrap();
    let e = write_file(&p, |w| {
        use std::io::Write;
        w.write_all(b"half")?;
        Err(std::io::Error::other("the producer failed"))
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        format!("cannot write {}: the producer failed", p.display())
    );
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\n");
    assert_eq!(names_in(&dir), vec!["out.txt"]);
}

#[test]
fn symlinks_planted_at_the_old_predictable_temporary_names_are_never_followed() {
    // The old writer created `.NAME.<pid>.tmp` with File::create, which follows a
    // symlink: a local user planting links for the next pids in a shared folder got
    // the victim file truncated and overwritten. Plant them for a range of pids
    // around ours (ours included) and write.
    let tmp = tmp_dir("planted");
    let dir = tmp.path().to_path_buf();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let me = std::process::id();
    for pid in me.saturating_sub(50)..=me + 50 {
        std::os::unix::fs::symlink(&victim, dir.join(format!(".out.txt.{pid}.tmp"))).unwrap();
    }
    write_bytes(&dir.join("out.txt"), "result\n").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "result\n"
    );
    assert!(!std::fs::symlink_metadata(dir.join("out.txt"))
        .unwrap()
        .file_type()
        .is_symlink());
    // Every planted link is still a link to the victim, and nothing else was left.
    assert_eq!(names_in(&dir).len(), 101 + 2);
}

/// A copy of the memory device `name` (char device 1:`minor`: 3 null, 7 full) in a
/// folder of this test's own, when we may create device nodes (root); else None.
fn private_dev(dir: &Path, name: &str, minor: u32) -> Option<PathBuf> {
    let p = dir.join(name);
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path; makedev has no preconditions.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, minor)) };
    (made == 0).then_some(p)
}

#[test]
fn dev_full_stays_a_device_and_the_error_names_it() {
    // As root, the old writer renamed its temporary file over /dev/full: the device
    // node became a regular file. The test writes to its own copy of the node when it
    // can make one (root), so a broken writer cannot break the machine's /dev/full;
    // else to /dev/full itself, which a non-root writer could not have replaced.
    let tmp = tmp_dir("dev-full");
    let dir = tmp.path().to_path_buf();
    let p = private_dev(&dir, "full", 7).unwrap_or_else(|| {
        eprintln!("note: cannot create a device node here; writing /dev/full itself");
        PathBuf::from("/dev/full")
    });
    let before = std::fs::symlink_metadata(&p).unwrap();
    assert!(before.file_type().is_char_device());
    let e = write_bytes(&p, vec![b'x'; 100_000])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("cannot write {}: ", p.display())),
        "{e}"
    );
    assert!(e.contains("No space left on device"), "{e}");
    let after = std::fs::symlink_metadata(&p).unwrap();
    assert!(
        after.file_type().is_char_device(),
        "{} was replaced",
        p.display()
    );
    assert_eq!(after.rdev(), before.rdev());
    if p.starts_with(&dir) {
        assert_eq!(names_in(&dir), vec!["full"], "no temporary left");
    }
}

#[test]
fn dev_null_takes_the_bytes_and_stays_a_device() {
    let tmp = tmp_dir("dev-null");
    let dir = tmp.path().to_path_buf();
    let p = private_dev(&dir, "null", 3).unwrap_or_else(|| PathBuf::from("/dev/null"));
    write_bytes(&p, "discarded\n").unwrap();
    assert!(std::fs::symlink_metadata(&p)
        .unwrap()
        .file_type()
        .is_char_device());
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn a_fifo_delivers_the_bytes_and_remains_a_fifo() {
    let tmp = tmp_dir("fifo");
    let dir = tmp.path().to_path_buf();
    let p = dir.join("pipe");
    mkfifo(&p);
    let (tx, rx) = mpsc::channel();
    let reader = p.clone();
    // The reader blocks until a writer opens the FIFO. If the writer never does
    // (the old writer replaced the FIFO with a file), the test fails at the
    // timeout below instead of hanging; the thread is left behind.
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read(&reader));
    });
    let wrote = write_bytes(&p, "through the pipe\n");
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the FIFO's reader got an end of file within 10 s");
    wrote.unwrap();
    assert_eq!(got.unwrap(), b"through the pipe\n");
    assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
    assert_eq!(names_in(&dir), vec!["pipe"]);
}

#[test]
fn a_fifo_owned_by_another_user_is_refused_without_blocking() {
    if !is_root() {
        eprintln!("skipped: needs root to give a FIFO another owner");
        return;
    }
    // A FIFO planted at an output's name would get the output (or, unread, block
    // the command forever). Nobody reads this one: a writer that opened it would
    // block, so the write runs on a thread and the test fails at the timeout.
    let tmp = tmp_dir("foreign-fifo");
    let dir = tmp.path().to_path_buf();
    let p = dir.join("out.txt");
    mkfifo(&p);
    std::os::unix::fs::lchown(&p, Some(12345), Some(12345)).unwrap();
    let (tx, rx) = mpsc::channel();
    let q = p.clone();
    std::thread::spawn(move || {
        let _ = tx.send(write_bytes(&q, "secret\n").map_err(|e| e.to_string()));
    });
    let e = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the write returned within 10 s")
        .unwrap_err();
    assert_eq!(
        e,
        format!(
            "cannot write {}: it is a FIFO owned by user 12345 (neither you nor root); refusing to write to it",
            p.display()
        )
    );
    assert!(std::fs::symlink_metadata(&p).unwrap().file_type().is_fifo());
}

#[test]
fn our_own_symlink_is_followed_and_its_file_replaced_atomically() {
    let tmp = tmp_dir("own-link");
    let dir = tmp.path().to_path_buf();
    std::fs::create_dir(dir.join("real")).unwrap();
    let target = dir.join("real").join("data.txt");
    std::fs::write(&target, "old\n").unwrap();
    let link = dir.join("latest.txt");
    std::os::unix::fs::symlink("real/data.txt", &link).unwrap();
    write_bytes(&link, "new\n").unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
    assert_eq!(names_in(&dir.join("real")), vec!["data.txt"]);
    // A link to nothing is refused: the file would be created through it.
    let dangling = dir.join("dangling");
    std::os::unix::fs::symlink("real/nothing.txt", &dangling).unwrap();
    let e = write_bytes(&dangling, "x").unwrap_err().to_string();
    assert!(
        e.contains("symbolic link to a file that does not exist"),
        "{e}"
    );
    assert!(!dir.join("real/nothing.txt").exists());
}

#[test]
fn a_symlink_owned_by_another_user_is_refused_and_its_target_untouched() {
    if !is_root() {
        eprintln!("skipped: needs root to give a symlink another owner");
        return;
    }
    let tmp = tmp_dir("foreign-link");
    let dir = tmp.path().to_path_buf();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = dir.join("out.txt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(12345), Some(12345)).unwrap();
    let e = write_bytes(&link, "overwritten\n").unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "cannot write {}: it is a symbolic link owned by user 12345 (neither you nor root); refusing to write through it",
            link.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    // The same link one hop later in a chain of our own links.
    let first = dir.join("first");
    std::os::unix::fs::symlink(&link, &first).unwrap();
    let e = write_bytes(&first, "overwritten\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "it leads through the symbolic link {} owned by user 12345",
            link.display()
        )),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn folders_sockets_and_non_names_are_refused() {
    // Under /tmp whatever TMPDIR says: a Unix socket's path is at most 107 bytes.
    let tmp = tempfile::Builder::new()
        .prefix("pacer-fsio-test-refused-")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let e = write_bytes(&dir, "x").unwrap_err().to_string();
    assert!(e.ends_with("it is a folder"), "{e}");
    let sock = dir.join("sock");
    assert!(sock.as_os_str().len() <= 107, "{}", sock.display());
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let e = write_bytes(&sock, "x").unwrap_err().to_string();
    assert!(e.contains("it is a socket"), "{e}");
    assert!(std::fs::symlink_metadata(&sock)
        .unwrap()
        .file_type()
        .is_socket());
    let e = write_bytes(&dir.join(".."), "x").unwrap_err().to_string();
    assert!(e.ends_with("not a file name"), "{e}");
}
