//! Whether the state directory and the token file can be trusted: they hold the
//! service's token, the jobs' tokens and everything the service runs, so they must be
//! this user's own and closed to everyone else. A directory someone else created (say a
//! `mkdir -m 777 /tmp/pacer-state` before the service first ran), or a token someone
//! else could have written or read, is refused with what was found and what is expected,
//! never silently used.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The state directory when `--state` is not given: `$XDG_STATE_HOME/pacer`, else
/// `~/.local/state/pacer` (a per-user folder, unlike anything under `/tmp`).
pub fn default_state_dir() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        if d.is_absolute() {
            return Ok(d.join("pacer"));
        }
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/state/pacer")),
        None => Err(
            "--state: not given, and neither XDG_STATE_HOME nor HOME is set to find the default (~/.local/state/pacer)"
                .into(),
        ),
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `dir` (and missing parents) with mode 0700 when it does not exist, then
/// checks it: a directory, owned by this process's user, with no access for group or
/// others.
pub fn state_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
        {
            return Err(format!("--state {}: cannot create: {e}", dir.display()));
        }
    }
    // Checked after creating: whoever made it, what is there now is what is used.
    let m = std::fs::metadata(dir)
        .map_err(|e| format!("--state {}: cannot read: {e}", dir.display()))?;
    if !m.is_dir() {
        return Err(format!(
            "--state {}: not a directory (expected a directory of uid {}, mode 0700)",
            dir.display(),
            euid()
        ));
    }
    check_owner_mode(
        &format!("--state {}", dir.display()),
        &m,
        "a directory",
        0o700,
        &format!("chmod 700 {}", dir.display()),
    )
}

/// Refuses `m` when another user owns it or group or others have any access to it.
fn check_owner_mode(
    what: &str,
    m: &std::fs::Metadata,
    kind: &str,
    expected_mode: u32,
    fix: &str,
) -> Result<(), String> {
    let me = euid();
    let mode = m.mode() & 0o7777;
    if m.uid() != me {
        return Err(format!(
            "{what}: owned by uid {} with mode {mode:04o}; expected {kind} owned by uid {me} (the user running pacer serve) with mode {expected_mode:04o}. Someone else may have created it: do not use it; pick another --state (e.g. the default, ~/.local/state/pacer)",
            m.uid()
        ));
    }
    if mode & 0o077 != 0 {
        let open = if mode & 0o022 != 0 {
            "writable"
        } else {
            "readable"
        };
        return Err(format!(
            "{what}: mode {mode:04o} is {open} by group or others; expected {kind} with mode {expected_mode:04o} (owned by uid {me}): `{fix}`, after checking nothing in it was planted"
        ));
    }
    Ok(())
}

/// Opens an existing token file without following a symlink and checks it: a regular
/// file, owned by this process's user, with no access for group or others (0600).
/// `Ok(None)` when there is no such file.
pub fn open_token(path: &Path) -> Result<Option<std::fs::File>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
            "token file {}: is a symbolic link; expected a regular file owned by uid {}, mode 0600",
            path.display(),
            euid()
        ))
        }
        Err(e) => return Err(format!("token file {}: cannot open: {e}", path.display())),
    };
    let m = f
        .metadata()
        .map_err(|e| format!("token file {}: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!(
            "token file {}: not a regular file; expected a regular file owned by uid {}, mode 0600",
            path.display(),
            euid()
        ));
    }
    check_owner_mode(
        &format!("token file {}", path.display()),
        &m,
        "a file",
        0o600,
        &format!("chmod 600 {}", path.display()),
    )?;
    Ok(Some(f))
}
