//! The one writer: atomic for regular files, direct for devices and FIFOs, through a
//! symbolic link only when the link is ours (see the crate's documentation).

use std::fmt::Display;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

/// A file that could not be written; the message names the path as given.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {reason}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    pub reason: String,
}

/// How many unpredictable temporary names are tried before giving up (each one
/// that exists already is someone else's file, or a planted link).
const TMP_TRIES: usize = 16;

/// How many symbolic links are followed at most (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Writes `path` through `write` by the rules of the crate's documentation: a
/// regular (or missing) file whole-or-nothing, a device or FIFO directly, a symbolic
/// link only when it and every link after it belong to us or to root. On any error
/// a regular target is left as it was.
pub fn write_file<E: Display>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<(), WriteError> {
    let fail = |reason: String| WriteError {
        path: path.to_path_buf(),
        reason,
    };
    if path.file_name().is_none() {
        return Err(fail("not a file name".into()));
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => replace(path, path, write),
        Err(e) => Err(fail(e.to_string())),
        Ok(m) => {
            let t = m.file_type();
            if t.is_symlink() {
                through_link(path, write)
            } else if t.is_dir() {
                Err(fail("it is a folder".into()))
            } else if t.is_file() {
                replace(path, path, write)
            } else {
                direct(path, false, write)
            }
        }
    }
}

/// [`write_file`] with the whole content at hand.
pub fn write_bytes(path: &Path, bytes: impl AsRef<[u8]>) -> Result<(), WriteError> {
    write_file(path, |w| w.write_all(bytes.as_ref()))
}

/// `path` is a symbolic link: check every link of its chain, then write what it
/// leads to.
fn through_link<E: Display>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<(), WriteError> {
    let fail = |reason: String| WriteError {
        path: path.to_path_buf(),
        reason,
    };
    trust_links(path).map_err(fail)?;
    match std::fs::metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => Err(fail(
            "it is a symbolic link to a file that does not exist; not creating a file through it"
                .into(),
        )),
        Err(e) => Err(fail(e.to_string())),
        Ok(m) if m.is_dir() => Err(fail("it is a symbolic link to a folder".into())),
        Ok(m) if m.is_file() => {
            let real = std::fs::canonicalize(path).map_err(|e| fail(e.to_string()))?;
            replace(path, &real, write)
        }
        Ok(_) => direct(path, true, write),
    }
}

/// Every symbolic link from `path` on belongs to us or to root. A link owned by
/// someone else may have been planted (in a shared folder) to redirect our write.
#[cfg(unix)]
fn trust_links(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            return Ok(());
        };
        if !m.file_type().is_symlink() {
            return Ok(());
        }
        if m.uid() != me && m.uid() != 0 {
            let which = if p == path {
                "it is a symbolic link".to_string()
            } else {
                format!("it leads through the symbolic link {}", p.display())
            };
            return Err(format!(
                "{which} owned by user {} (neither you nor root); refusing to write through it",
                m.uid()
            ));
        }
        let target = std::fs::read_link(&p).map_err(|e| e.to_string())?;
        p = match p.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    Err("too many levels of symbolic links".into())
}

#[cfg(not(unix))]
fn trust_links(_path: &Path) -> Result<(), String> {
    Ok(())
}

/// Writes a device or FIFO in place: opened for writing without creating or
/// truncating it, and (unless reached through a trusted link) without following a
/// link swapped in since we looked. Refuses if a regular file appeared meanwhile.
fn direct<E: Display>(
    path: &Path,
    follow: bool,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<(), WriteError> {
    let fail = |reason: String| WriteError {
        path: path.to_path_buf(),
        reason,
    };
    let mut open = OpenOptions::new();
    open.write(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        if let Ok(m) = std::fs::metadata(path) {
            if m.file_type().is_socket() {
                return Err(fail(
                    "it is a socket; expected a file, a device or a FIFO".into(),
                ));
            }
        }
        if !follow {
            open.custom_flags(libc::O_NOFOLLOW);
        }
    }
    let file = open.open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if meta.is_file() {
        return Err(fail(
            "it was replaced by a regular file while being opened; not writing".into(),
        ));
    }
    let mut w = BufWriter::new(file);
    write(&mut w).map_err(|e| fail(e.to_string()))?;
    w.flush().map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// Writes `target` (a regular file or nothing; `shown` is the path as the user gave
/// it) whole-or-nothing through a new temporary file in `target`'s folder.
fn replace<E: Display>(
    shown: &Path,
    target: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<(), E>,
) -> Result<(), WriteError> {
    let fail = |reason: String| WriteError {
        path: shown.to_path_buf(),
        reason,
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .ok_or_else(|| fail("not a file name".into()))?
        .to_string_lossy()
        .into_owned();
    let old = std::fs::symlink_metadata(target)
        .ok()
        .filter(|m| m.is_file());
    let (file, tmp) = create_tmp(&dir, &name).map_err(fail)?;
    let tmp = Removed(Some(tmp));
    let path = tmp.0.as_deref().expect("set above");
    (|| -> Result<(), String> {
        if let Some(old) = &old {
            // The replacement keeps the old file's permissions (a private file stays private).
            file.set_permissions(old.permissions())
                .map_err(|e| e.to_string())?;
        }
        let mut w = BufWriter::new(file);
        write(&mut w).map_err(|e| e.to_string())?;
        let file = w.into_inner().map_err(|e| e.into_error().to_string())?;
        file.sync_all().map_err(|e| e.to_string())?;
        std::fs::rename(path, target).map_err(|e| e.to_string())
    })()
    .map_err(fail)?;
    tmp.disarm();
    // Make the rename durable. Some file systems cannot sync a folder; the file's
    // content is synced already, so that is not an error.
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Creates a new file `.NAME.<random>.tmp` in `dir` that did not exist before and
/// is not reached through a symbolic link (`O_CREAT|O_EXCL`, plus `O_NOFOLLOW`).
fn create_tmp(dir: &Path, name: &str) -> Result<(File, PathBuf), String> {
    let mut last = None;
    for _ in 0..TMP_TRIES {
        let tmp = dir.join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
        let mut open = OpenOptions::new();
        open.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            open.custom_flags(libc::O_NOFOLLOW);
        }
        match open.open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(tmp),
            Err(e) => {
                return Err(format!(
                    "cannot create a temporary file in {}: {e}",
                    dir.display()
                ))
            }
        }
    }
    Err(format!(
        "{TMP_TRIES} random temporary names in {} all existed already (last {})",
        dir.display(),
        last.map(|p| p.display().to_string()).unwrap_or_default()
    ))
}

/// Removes the temporary file when dropped, unless disarmed after the rename.
struct Removed(Option<PathBuf>);

impl Removed {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Removed {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}
