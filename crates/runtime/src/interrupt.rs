//! SIGINT and SIGTERM as requests to stop: the controller
//! ([`crate::ControllerConfig::interrupt`]) ends the run, abandoning the iteration in
//! flight, and returns the report of what was done, marked `interrupted` (and writes
//! a checkpoint when it has a `checkpoint_dir`, [`crate::checkpoint`]); the CLI prints
//! it and exits 130 (SIGINT) or 143 (SIGTERM, how a scheduler service preempts a job).
//!
//! The handlers only store into atomics (async-signal-safe). SIGINT's restores the
//! default disposition, so a second Ctrl-C kills the process as usual. SIGTERM's stays:
//! schedulers repeat SIGTERM (Slurm signals the batch step and the job steps, and `srun
//! --kill-on-bad-exit` terminates the other tasks when one exits 143), and a repeat
//! that killed the process between writing its checkpoint and saying so left a resume
//! that the log could not explain (seen in `scripts/slurm-e2e.sh`, phase `preempt`); a
//! process that must die gets SIGKILL after the grace period from them anyway.

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

fn install(
    signal: libc::c_int,
    handler: extern "C" fn(libc::c_int),
    once: bool,
) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler only touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_RESTART | if once { libc::SA_RESETHAND } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(signal, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Install the SIGINT handler; `Err` with the OS error if it cannot be installed.
pub fn install_sigint_handler() -> std::io::Result<()> {
    install(libc::SIGINT, on_sigint, true)
}

/// Install the SIGTERM handler (it also sets [`SIGINT`], the flag the controller
/// watches).
pub fn install_sigterm_handler() -> std::io::Result<()> {
    install(libc::SIGTERM, on_sigterm, false)
}

/// Whether SIGINT (or SIGTERM) arrived.
pub fn sigint_received() -> bool {
    SIGINT.load(Ordering::SeqCst)
}

/// Whether SIGTERM arrived.
pub fn sigterm_received() -> bool {
    SIGTERM.load(Ordering::SeqCst)
}
