//! Everything the `pacer` and `pacer-lab` binaries write for people goes through here: standard output and
//! files. Nothing in the output paths uses `println!`, which panics when stdout
//! cannot be written (`pacer simulate > /dev/full`); a write error becomes an
//! error that names what could not be written.
//!
//! - [`print`]: text to stdout. A reader that went away (`| head -1`) is
//!   [`StdoutClosed`], which `main` turns into a quiet exit with status 0 (on Unix
//!   the offline commands restore the default SIGPIPE disposition first, so there
//!   the process ends by SIGPIPE, status 141 in a shell, like `cat` or `seq`);
//!   any other error (`/dev/full`: no space left) is an error exit naming stdout.
//! - [`write_file`]: a file, written to a temporary file in the same folder and
//!   renamed over the target only when complete, so a failed write never leaves
//!   a partial file behind; a device or FIFO is written in place, a symbolic link
//!   followed only when it is ours (`pacer_fsio`, the one writer of every output);
//!   errors name the target path.

use anyhow::{anyhow, Result};
use std::fs::File;
use std::io::{BufWriter, ErrorKind, Write};
use std::path::Path;

/// The reader of stdout went away (EPIPE). Not a failure of the command.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow!("cannot write to standard output: {e}")),
    }
}

/// Whether `e` is (caused by) [`StdoutClosed`].
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// Writes `path` through `write` with [`pacer_fsio::write_file`]: a regular (or
/// missing) file whole-or-nothing through a temporary file created under an
/// unpredictable name with `O_EXCL|O_NOFOLLOW` and renamed over it; a device or FIFO
/// directly, never replaced; a symbolic link only when it (and every link after it)
/// belongs to us or to root. On any error a regular `path` is left as it was; the
/// error names `path`.
pub fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    pacer_fsio::write_file(path, |w| write(w).map_err(|e| format!("{e:#}")))?;
    Ok(())
}

/// [`write_file`] with the whole content at hand.
pub fn write_bytes(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    write_file(path, |w| Ok(w.write_all(bytes.as_ref())?))
}

/// Before any work: each of `names` in `dir` (given by `flag`) must be writable as
/// a file, so that a run does not fail after writing some of its files (or after
/// minutes of simulation). Catches targets that are folders; the rest (a full
/// disk, permissions) [`write_file`] reports with the path.
pub fn check_targets<S: AsRef<str>>(flag: &str, dir: &Path, names: &[S]) -> Result<()> {
    for n in names {
        let p = dir.join(n.as_ref());
        if p.is_dir() {
            return Err(anyhow!(
                "{flag} {}: cannot write {}: it is a folder",
                dir.display(),
                p.display()
            ));
        }
    }
    Ok(())
}

/// Before any work: `dir` (given by `flag`) is a folder or can be created as one:
/// neither it nor any of its existing ancestors is a file.
pub fn check_out_dir(flag: &str, dir: &Path) -> Result<()> {
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.exists() {
            if !p.is_dir() {
                return Err(anyhow!(
                    "{flag} {}: {} is a file; expected a folder (created if missing)",
                    dir.display(),
                    p.display()
                ));
            }
            break;
        }
        d = p.parent();
    }
    Ok(())
}

/// Before any work: `path` (given by `flag`) can be written as a file: it is not
/// a folder, and its parent is an existing folder (not a file).
pub fn check_file(flag: &str, path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(anyhow!(
            "{flag} {}: it is a folder; expected a file path",
            path.display()
        ));
    }
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        let why = if parent.exists() {
            "is a file, not a folder"
        } else {
            "does not exist"
        };
        return Err(anyhow!(
            "{flag} {}: cannot write it: {} {why}",
            path.display(),
            parent.display()
        ));
    }
    Ok(())
}

/// `println!` for the output paths (same width, so swapping one for the other
/// leaves the formatting of the call alone): formats one line, writes it with [`print`] and
/// returns from the enclosing function (`?`) if stdout cannot be written.
#[macro_export]
macro_rules! putline {
    ($($arg:tt)*) => {
        $crate::out::print(&format!("{}\n", format_args!($($arg)*)))?
    };
}
