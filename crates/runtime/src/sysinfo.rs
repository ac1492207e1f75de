//! Resource signals from the operating system (Linux `/proc`; elsewhere they read
//! as zero): the inputs NARX sees besides past speeds.

use std::time::Duration;

/// CPU time consumed by the calling thread. Unlike wall time it does not grow while
/// the thread waits for a core, which is what lets a 2-core machine emulate more
/// workers than it has cores honestly (see `emulation`).
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Ask for `bytes` of kernel send and receive buffer on a socket. A whole parameter
/// or gradient frame then moves in one write and few reads instead of trickling
/// through the 16 KiB default window with a wake-up per chunk. Best effort: the
/// kernel caps it (`net.core.wmem_max`), and a failure only costs speed.
pub fn set_socket_buffers<S: std::os::fd::AsRawFd>(sock: &S, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: a valid fd owned by `sock`, and a pointer to a c_int of the
        // advertised size.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Switch the calling thread to real-time scheduling (`SCHED_FIFO` at `priority`,
/// 1–99) or, with 0, back to the normal policy; false when the system refuses
/// (needs root or `CAP_SYS_NICE`) or is not Linux. The controller's threads use
/// [`RT_CONTROLLER`], a worker's [`RT_WORKER`]: a worker's socket thread preempts
/// the controller (as if each worker had its own machine) — with equal priorities
/// the controller's two threads writing parameters held both cores and the
/// workers read their first bytes only once every write was done.
///
/// Why: on a machine shared with other CPU-bound work, every wake-up of a thread
/// that moves a message (the controller's runtime, a worker's socket thread) waited
/// ~0.2 ms on average and up to 2–4 ms for a core (`perf sched latency`), several
/// times per iteration and on its critical path. The threads that move messages
/// block almost all the time, so a real-time policy costs the others little; the
/// compute threads stay at the normal policy (see `worker`).
pub fn set_thread_realtime(priority: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let on = priority > 0;
        let param = libc::sched_param {
            sched_priority: priority.clamp(0, 99),
        };
        let policy = if on {
            libc::SCHED_FIFO
        } else {
            libc::SCHED_OTHER
        };
        // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param.
        unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = priority;
        false
    }
}

/// Real-time priority of the controller's threads.
pub const RT_CONTROLLER: i32 = 1;
/// Real-time priority of a worker's socket thread (and of its compute thread while
/// it sends).
pub const RT_WORKER: i32 = 2;

/// Whether the calling thread runs at a real-time policy.
pub fn thread_is_realtime() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: no arguments beyond the calling thread's pid 0.
        let p = unsafe { libc::sched_getscheduler(0) };
        p == libc::SCHED_FIFO || p == libc::SCHED_RR
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Reads `/proc/stat`, `/proc/meminfo` and `/proc/loadavg`; keeps the previous CPU
/// counters so that busy share is measured over the interval between readings.
#[derive(Debug, Default)]
pub struct ProcMonitor {
    prev: Option<(u64, u64)>,
}

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcReading {
    /// Share of all cores busy since the previous reading.
    pub cpu_busy: f32,
    /// `1 − MemAvailable / MemTotal`.
    pub mem_used: f32,
    /// 1-minute load average divided by the number of cores.
    pub loadavg1_per_core: f32,
}

impl ProcMonitor {
    pub fn read(&mut self) -> ProcReading {
        let mut r = ProcReading::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
            if let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) {
                let v: Vec<u64> = line
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|x| x.parse().ok())
                    .collect();
                if v.len() >= 4 {
                    let total: u64 = v.iter().sum();
                    // idle + iowait
                    let idle = v[3] + v.get(4).copied().unwrap_or(0);
                    if let Some((pt, pi)) = self.prev {
                        let dt = total.saturating_sub(pt);
                        let di = idle.saturating_sub(pi);
                        if dt > 0 {
                            r.cpu_busy = (1.0 - di as f32 / dt as f32).clamp(0.0, 1.0);
                        }
                    }
                    self.prev = Some((total, idle));
                }
            }
        }
        if let Ok(mem) = std::fs::read_to_string("/proc/meminfo") {
            let field = |name: &str| -> Option<f64> {
                mem.lines()
                    .find(|l| l.starts_with(name))?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            };
            if let (Some(t), Some(a)) = (field("MemTotal:"), field("MemAvailable:")) {
                if t > 0.0 {
                    r.mem_used = (1.0 - a / t).clamp(0.0, 1.0) as f32;
                }
            }
        }
        if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
            if let Some(Ok(v)) = l.split_whitespace().next().map(str::parse::<f32>) {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                r.loadavg1_per_core = v / cores as f32;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_are_fractions_and_cpu_time_grows() {
        let mut m = ProcMonitor::default();
        m.read();
        let t0 = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_time() > t0);
        let r = m.read();
        assert!((0.0..=1.0).contains(&r.cpu_busy));
        assert!((0.0..=1.0).contains(&r.mem_used));
    }
}
