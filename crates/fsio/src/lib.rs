//! # pacer-fsio
//!
//! Files a user names on a command line or a peer hands over: the one writer every
//! output goes through, and reads bounded in size. Used by the `pacer` and
//! `pacer-lab` binaries (through `pacer_cli::out`) and by the trace and application
//! loaders of `pacer-sim`; the service and the runtime can use it the same way.
//!
//! - [`write_file`] / [`write_bytes`]: what a path names decides how it is written.
//!   - nothing, or a **regular file**: written whole-or-nothing — into a new temporary
//!     file in the same folder, created with `O_CREAT|O_EXCL|O_NOFOLLOW` under an
//!     unpredictable name (`.NAME.<16 random hex digits>.tmp`), synced, then renamed
//!     over the target. A failed write leaves the target as it was and removes the
//!     temporary file. A replaced file keeps its permission bits.
//!   - a **device, a FIFO** (`/dev/null`, `/dev/full`, `mkfifo`): opened for writing
//!     without `O_CREAT`/`O_TRUNC` and without following a symlink, and written
//!     directly. It is never replaced by a regular file. One owned by another user
//!     (not root) is refused: a planted FIFO would receive the output.
//!   - a **symbolic link**: followed only if every link on the way is owned by the
//!     user running the command or by root, like Linux's `protected_symlinks` but in
//!     every folder; the file it leads to is then written by the rules above (a
//!     regular file atomically, in its own folder). A link owned by anyone else is
//!     refused with an error naming it and its owner: in a shared folder it may have
//!     been planted to make us overwrite a file of someone else's choosing. A link to
//!     nothing is refused too (the file it names would be created through it).
//!   - a folder or a socket: refused.
//!
//!   Every error names the path as given ([`WriteError`]).
//! - [`read_limited`] / [`read_to_string_limited`]: a whole file, refused when it is
//!   larger than a [`Limit`] for its kind; the error states the size and the limit
//!   ([`ReadError::TooLarge`]). A file whose size is unknown in advance (a FIFO,
//!   `/dev/zero`) is read up to the limit and refused beyond it, so memory stays bounded.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap(); // removed when dropped
//! let path = dir.path().join("out.txt");
//! pacer_fsio::write_bytes(&path, "hello\n").unwrap();
//! let limit = pacer_fsio::Limit { what: "a greeting", bytes: 16 };
//! assert_eq!(pacer_fsio::read_to_string_limited(&path, limit).unwrap(), "hello\n");
//! let small = pacer_fsio::Limit { what: "a greeting", bytes: 3 };
//! let e = pacer_fsio::read_to_string_limited(&path, small).unwrap_err();
//! assert!(e.to_string().ends_with("is 6 bytes; the limit for a greeting is 3 bytes"));
//! ```

mod read;
mod write;

pub use read::{read_limited, read_to_string_limited, Limit, ReadError};
pub use write::{write_bytes, write_file, WriteError};

/// Size limits of the files pacer reads, by kind (documented in docs/limits.md).
pub mod limits {
    use crate::Limit;

    /// A workload or trace (Pollux and Sia workload CSVs, Philly, Gavel traces). The
    /// largest shipped is the Philly trace, 3.4 MB for 82 k jobs; 256 MiB holds about
    /// 6 M jobs, more than the simulator's job limit needs in practice.
    pub const TRACE: Limit = Limit {
        what: "a trace or workload file",
        bytes: 256 << 20,
    };
    /// A measured table: an application's profile CSVs, a throughput or scenario file,
    /// a placements table. The largest shipped is Gavel's throughputs, 1.2 MB.
    pub const TABLE: Limit = Limit {
        what: "a measured table",
        bytes: 64 << 20,
    };
    /// A cluster description (TOML).
    pub const CLUSTER: Limit = Limit {
        what: "a cluster file",
        bytes: 1 << 20,
    };
    /// A file holding a bearer token.
    pub const TOKEN: Limit = Limit {
        what: "a token file",
        bytes: 4 << 10,
    };
}
