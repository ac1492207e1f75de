//! Heterogeneity and interference, emulated honestly on whatever machine this runs.
//!
//! A worker with speed `s` and, at iteration `k`, interference slowdown `m_k` takes
//! `time_scale · cpu · m_k / s` seconds for a step whose real compute used `cpu`
//! seconds of its own thread's CPU time: it computes for real, then sleeps for the
//! rest (padding after real compute). The step is never shorter than its real wall
//! time; when the machine is so contended that the real wall time exceeds the target,
//! the step takes the real time and the worker reports it (an "overrun").
//!
//! Why CPU time and `time_scale`: four one-thread workers on a 2-core machine wait
//! for cores, so their wall time measures the machine's contention rather than their
//! work. Thread CPU time does not count that waiting, so `cpu / s` is the time the
//! work would take on a dedicated core `s` times as fast; the speed ratios between
//! workers are exactly the configured ones. `time_scale ≥ 1` dilates every worker's
//! emulated time by the same factor so that the total CPU demand of all workers fits
//! in the cores actually available (LB-BSP at speeds 1,1,0.5,0.25 needs 2.75 busy
//! cores at `time_scale = 1`); it changes absolute times, never ratios.
//!
//! Compute slots (optional, `--compute-slots N`): workers start computing at the same
//! instant every iteration, so four workers on two cores queue for the CPU, and a
//! worker whose thread is not scheduled reads its parameters late — time that shows
//! up as "network" overhead (conservative: it lowers the measured gain). With
//! [`ComputeSlots`] a worker reads its Step at once, then waits for a slot, computes,
//! and pads; the emulated step runs from the end of decoding to the end of padding,
//! so the wait for a slot is absorbed by the padding — as on a cluster where every
//! worker has its own core — unless wait + compute exceed the target, which is
//! reported as an overrun. Off by default: on this loaded 2-core machine two slots
//! raised overruns from ~2 % to 15–36 % of steps and barely moved the network time.
//!
//! Interference windows use the scenario format of `pacer batching eval`
//! (`scenarios/worker/*.json`): per worker `interference: [{start, end, slowdown,
//! cpu_load?, mem_load?}]`, in iterations. A full scenario file can be given as is;
//! only its workers' (count-expanded) interference windows are read.

use crate::error::RuntimeError;
use serde::Deserialize;
use std::path::Path;

/// Most an emulated step may be stretched (`time_scale · slowdown / speed`): a
/// millisecond of compute then takes 17 minutes. Beyond it the padding's sleep no
/// longer fits a `Duration` (the compute thread panicked) or never ends.
pub const MAX_DILATION: f64 = 1e6;

/// Most worker slots an interference file may describe.
const MAX_PLAN_WORKERS: usize = 1_000_000;

/// Checks that a worker of `speed` under `time_scale` and slowdowns up to
/// `max_slowdown` stays within [`MAX_DILATION`]; the message names the values.
pub fn check_dilation(speed: f64, time_scale: f64, max_slowdown: f64) -> Result<(), String> {
    let d = time_scale * max_slowdown / speed;
    if d.is_finite() && d <= MAX_DILATION {
        Ok(())
    } else {
        Err(format!(
            "speed {speed:?} with time scale {time_scale:?} and interference slowdown up \
             to {max_slowdown:?} stretches compute time {d:.3e}-fold, more than {MAX_DILATION:e}"
        ))
    }
}

/// One co-located-load window on iterations `[start, end)`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Window {
    pub start: u64,
    pub end: u64,
    pub slowdown: f64,
    #[serde(default)]
    pub cpu_load: Option<f64>,
    #[serde(default)]
    pub mem_load: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct FileWorker {
    #[serde(default = "one")]
    count: u32,
    #[serde(default)]
    interference: Vec<Window>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
struct File {
    workers: Vec<FileWorker>,
}

/// Interference windows per worker slot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InterferencePlan {
    pub workers: Vec<Vec<Window>>,
}

impl InterferencePlan {
    /// Read a scenario-format file; errors name the file and the field.
    pub fn load(path: &Path) -> Result<Self, RuntimeError> {
        let bad = |m: String| RuntimeError::Data {
            path: path.to_path_buf(),
            message: m,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
        Self::parse(&text).map_err(bad)
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let f: File = serde_json::from_str(text).map_err(|e| {
            format!("expected a scenario file with `workers: [{{interference: [{{start, end, slowdown}}]}}]`: {e}")
        })?;
        let mut workers = Vec::new();
        for (i, w) in f.workers.iter().enumerate() {
            for (j, win) in w.interference.iter().enumerate() {
                let at = format!("workers[{i}].interference[{j}]");
                if win.start >= win.end {
                    return Err(format!("field `{at}.end`: must be > start ({})", win.start));
                }
                if !(win.slowdown.is_finite() && (1.0..=MAX_DILATION).contains(&win.slowdown)) {
                    return Err(format!(
                        "field `{at}.slowdown`: must be in [1, {MAX_DILATION:e}], got {:?}",
                        win.slowdown
                    ));
                }
                for (name, v) in [("cpu_load", win.cpu_load), ("mem_load", win.mem_load)] {
                    if let Some(v) = v {
                        if !(0.0..=1.0).contains(&v) {
                            return Err(format!("field `{at}.{name}`: must be in [0, 1], got {v}"));
                        }
                    }
                }
            }
            if workers.len() + w.count as usize > MAX_PLAN_WORKERS {
                return Err(format!(
                    "field `workers[{i}].count`: more than {MAX_PLAN_WORKERS} workers in all"
                ));
            }
            for _ in 0..w.count {
                workers.push(w.interference.clone());
            }
        }
        Ok(InterferencePlan { workers })
    }

    /// Largest slowdown of any window (1 when there is none).
    pub fn max_slowdown(&self) -> f64 {
        self.workers
            .iter()
            .flatten()
            .map(|w| w.slowdown)
            .fold(1.0, f64::max)
    }

    /// Windows of worker slot `slot` (slots beyond the file have none).
    pub fn for_slot(&self, slot: usize) -> Vec<Window> {
        self.workers.get(slot).cloned().unwrap_or_default()
    }
}

/// A counting semaphore shared by the local workers of one machine.
#[derive(Debug)]
pub struct ComputeSlots {
    free: std::sync::Mutex<usize>,
    cv: std::sync::Condvar,
}

/// A held slot; released on drop.
pub struct SlotGuard<'a>(&'a ComputeSlots);

impl ComputeSlots {
    pub fn new(slots: usize) -> Self {
        ComputeSlots {
            free: std::sync::Mutex::new(slots.max(1)),
            cv: std::sync::Condvar::new(),
        }
    }
    /// Block until a slot is free.
    pub fn acquire(&self) -> SlotGuard<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        SlotGuard(self)
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|e| e.into_inner());
        *free += 1;
        self.0.cv.notify_one();
    }
}

/// What a worker emulates.
#[derive(Debug, Clone)]
pub struct Emulation {
    /// Relative speed `s` (1 = real speed).
    pub speed: f64,
    /// Common dilation of emulated time (≥ 1 on an oversubscribed machine).
    pub time_scale: f64,
    pub windows: Vec<Window>,
    /// Shared with the other local workers (see the module docs); `None` computes at
    /// once.
    pub slots: Option<std::sync::Arc<ComputeSlots>>,
}

impl PartialEq for Emulation {
    fn eq(&self, o: &Self) -> bool {
        self.speed == o.speed && self.time_scale == o.time_scale && self.windows == o.windows
    }
}

impl Default for Emulation {
    fn default() -> Self {
        Emulation {
            speed: 1.0,
            time_scale: 1.0,
            windows: Vec::new(),
            slots: None,
        }
    }
}

impl Emulation {
    /// Slowdown and the load a monitor would see at the start of iteration `k`
    /// (same rule as the scenario simulator: `cpu_load` defaults to the intruder's
    /// share `1 − 1/slowdown`).
    pub fn conditions(&self, k: u64) -> (f64, f32, f32) {
        let (mut mult, mut free_cpu, mut free_mem) = (1.0, 1.0, 1.0);
        for w in &self.windows {
            if (w.start..w.end).contains(&k) {
                mult *= w.slowdown;
                free_cpu *= 1.0 - w.cpu_load.unwrap_or(1.0 - 1.0 / w.slowdown);
                free_mem *= 1.0 - w.mem_load.unwrap_or(0.0);
            }
        }
        (mult, (1.0 - free_cpu) as f32, (1.0 - free_mem) as f32)
    }

    /// Target wall seconds of a step whose real compute used `cpu_s`.
    pub fn target_s(&self, cpu_s: f64, slowdown: f64) -> f64 {
        self.time_scale * cpu_s * slowdown / self.speed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_files_are_read_with_counts() {
        let p = InterferencePlan::parse(
            r#"{"global_batch": 8, "workers": [{"samples_per_s": 1, "count": 2,
               "interference": [{"start": 1, "end": 3, "slowdown": 2}]}, {"samples_per_s": 2}]}"#,
        )
        .unwrap();
        assert_eq!(p.workers.len(), 3);
        let e = Emulation {
            windows: p.for_slot(1),
            ..Default::default()
        };
        assert_eq!(e.conditions(0).0, 1.0);
        let (m, cpu, _) = e.conditions(2);
        assert_eq!(m, 2.0);
        assert!((cpu - 0.5).abs() < 1e-6);
        assert!(p.for_slot(2).is_empty() && p.for_slot(9).is_empty());
    }

    #[test]
    fn bad_windows_are_named() {
        let e = InterferencePlan::parse(
            r#"{"workers": [{}, {"interference": [{"start": 5, "end": 3, "slowdown": 2}]}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("workers[1].interference[0].end"), "{e}");
    }

    #[test]
    fn shipped_interference_file_parses() {
        let p = InterferencePlan::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/interference4.json"
        )))
        .unwrap();
        assert_eq!(p.workers.len(), 4);
    }
}
