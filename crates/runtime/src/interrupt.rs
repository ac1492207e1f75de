//! SIGINT and SIGTERM as requests to stop: the controller
//! ([`crate::ControllerConfig::interrupt`]) ends the run, abandoning the iteration in
//! flight, and returns the report of what was done, marked `interrupted` (and writes
//! a checkpoint when it has a `checkpoint_dir`, [`crate::checkpoint`]); the CLI prints
//! it and exits 130 (SIGINT) or 143 (SIGTERM, how a scheduler service preempts a job).
//!
//! The handlers only store into atomics (async-signal-safe) and restore the default
//! disposition, so a second signal kills the process as usual.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by either handler (and by anyone who wants the run to stop): the flag the
/// controller watches.
pub static SIGINT: AtomicBool = AtomicBool::new(false);
/// Set by the SIGTERM handler only: which signal it was.
pub static SIGTERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    SIGINT.store(true, Ordering::SeqCst);
}

extern "C" fn on_sigterm(_: libc::c_int) {
    SIGTERM.store(true, Ordering::SeqCst);
    SIGINT.store(true, Ordering::SeqCst);
}

fn install(signal: libc::c_int, handler: extern "C" fn(libc::c_int)) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler only touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(signal, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Install the SIGINT handler; `Err` with the OS error if it cannot be installed.
pub fn install_sigint_handler() -> std::io::Result<()> {
    install(libc::SIGINT, on_sigint)
}

/// Install the SIGTERM handler (it also sets [`SIGINT`], the flag the controller
/// watches).
pub fn install_sigterm_handler() -> std::io::Result<()> {
    install(libc::SIGTERM, on_sigterm)
}

/// Whether SIGINT (or SIGTERM) arrived.
pub fn sigint_received() -> bool {
    SIGINT.load(Ordering::SeqCst)
}

/// Whether SIGTERM arrived.
pub fn sigterm_received() -> bool {
    SIGTERM.load(Ordering::SeqCst)
}
