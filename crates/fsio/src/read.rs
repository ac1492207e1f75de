//! Reads bounded in size.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most bytes a kind of file may have, and what to call that kind in an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The kind of file, with its article: "a cluster file".
    pub what: &'static str,
    /// The largest accepted size, bytes.
    pub bytes: u64,
}

/// A file that could not be read whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The OS refused (missing, permissions, a folder, …).
    #[error("cannot read {}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Larger than its limit. `size` is `None` when the file's size was not known in
    /// advance (a FIFO, a device) and reading stopped at the limit.
    #[error("{} is {}; the limit for {what} is {limit} bytes", path.display(), match size {
        Some(n) => format!("{n} bytes"),
        None => format!("more than {limit} bytes"),
    })]
    TooLarge {
        path: PathBuf,
        size: Option<u64>,
        what: &'static str,
        limit: u64,
    },
    /// Not UTF-8 text.
    #[error("{} is not UTF-8 text (invalid byte at offset {offset})", path.display())]
    NotText { path: PathBuf, offset: usize },
}

impl ReadError {
    /// The message without the path, for errors that name the file already
    /// (`FILE: field …: <reason>`): "cannot read: …", "it is N bytes; the limit …".
    pub fn reason(&self) -> String {
        match self {
            ReadError::Io { error, .. } => format!("cannot read: {error}"),
            ReadError::TooLarge {
                size, what, limit, ..
            } => format!(
                "it is {}; the limit for {what} is {limit} bytes",
                match size {
                    Some(n) => format!("{n} bytes"),
                    None => format!("more than {limit} bytes"),
                }
            ),
            ReadError::NotText { offset, .. } => {
                format!("not UTF-8 text (invalid byte at offset {offset})")
            }
        }
    }
}

/// The bytes of `path`, or [`ReadError::TooLarge`] when it has more than
/// `limit.bytes` (checked from its size before reading when it is a regular file, and
/// by reading at most one byte past the limit otherwise).
pub fn read_limited(path: &Path, limit: Limit) -> Result<Vec<u8>, ReadError> {
    let io = |error| ReadError::Io {
        path: path.to_path_buf(),
        error,
    };
    let too_large = |size| ReadError::TooLarge {
        path: path.to_path_buf(),
        size,
        what: limit.what,
        limit: limit.bytes,
    };
    let file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::other("it is a folder; expected a file")));
    }
    let known = meta.is_file().then_some(meta.len());
    if let Some(n) = known {
        if n > limit.bytes {
            return Err(too_large(Some(n)));
        }
    }
    // A regular file's size is only a hint (it may grow while read); the limit holds
    // anyway because at most limit + 1 bytes are read.
    let hint = known.unwrap_or(0).min(limit.bytes).min(1 << 20) as usize;
    let mut bytes = Vec::with_capacity(hint);
    file.take(limit.bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(too_large(None));
    }
    Ok(bytes)
}

/// [`read_limited`] for UTF-8 text.
pub fn read_to_string_limited(path: &Path, limit: Limit) -> Result<String, ReadError> {
    let bytes = read_limited(path, limit)?;
    String::from_utf8(bytes).map_err(|e| ReadError::NotText {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder, removed when the returned guard drops.
    fn dir(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("pacer-fsio-read-{tag}-"))
            .tempdir()
            .unwrap()
    }

    const L: Limit = Limit {
        what: "a test file",
        bytes: 10,
    };

    #[test]
    fn at_the_limit_is_read_and_above_it_is_refused_with_size_and_limit() {
        let tmp = dir("limit");
        let d = tmp.path();
        let p = d.join("f");
        std::fs::write(&p, "0123456789").unwrap();
        assert_eq!(read_limited(&p, L).unwrap().len(), 10);
        std::fs::write(&p, "0123456789A").unwrap();
        let e = read_limited(&p, L).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{} is 11 bytes; the limit for a test file is 10 bytes",
                p.display()
            )
        );
    }

    #[test]
    fn a_huge_sparse_file_is_refused_without_reading_it() {
        let tmp = dir("sparse");
        let d = tmp.path();
        let p = d.join("f");
        std::fs::File::create(&p)
            .unwrap()
            .set_len(100 << 30)
            .unwrap();
        let e = read_limited(&p, L).unwrap_err().to_string();
        assert!(e.contains(&format!("is {} bytes", 100u64 << 30)), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn an_endless_device_is_cut_at_the_limit() {
        let e = read_limited(Path::new("/dev/zero"), L)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/dev/zero is more than 10 bytes; the limit for a test file is 10 bytes"
        );
    }

    #[test]
    fn missing_folder_and_binary_files_name_the_path() {
        let tmp = dir("errors");
        let d = tmp.path();
        let e = read_limited(&d.join("nope"), L).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read {}", d.join("nope").display())),
            "{e}"
        );
        let e = read_limited(d, L).unwrap_err().to_string();
        assert!(e.contains("it is a folder"), "{e}");
        let p = d.join("bin");
        std::fs::write(&p, b"ab\xffcd").unwrap();
        let e = read_to_string_limited(&p, L).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{} is not UTF-8 text (invalid byte at offset 2)",
                p.display()
            )
        );
    }
}
