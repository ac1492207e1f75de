//! SIGINT as a request to stop: the controller ([`crate::ControllerConfig::interrupt`])
//! ends the run, abandoning the iteration in flight, and returns the report of what
//! was done, marked `interrupted`; the CLI prints it and exits 130.
//!
//! The handler only stores into an atomic (async-signal-safe) and restores the
//! default disposition, so a second Ctrl-C kills the process as usual.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the SIGINT handler (and by anyone who wants the run to stop).
pub static SIGINT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    SIGINT.store(true, Ordering::SeqCst);
}

/// Install the handler; `Err` with the OS error if it cannot be installed.
pub fn install_sigint_handler() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGINT arrived.
pub fn sigint_received() -> bool {
    SIGINT.load(Ordering::SeqCst)
}
