//! Targets, the per-input checks and the fuzz loop.

use crate::alloc;
use crate::mutate;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where an error says the problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// 1-based line of the input.
    Line(usize),
    /// A field (column, JSON path, frame field); the message must quote it.
    Field(String),
    /// The input as a whole (empty file, no jobs, an out-of-range total).
    Whole,
}

/// What a target made of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Rejected {
        message: String,
        place: Place,
    },
    /// Accepted, but the value breaks what the parser promises (e.g. a decoded frame
    /// that does not re-encode to its bytes).
    Broken(String),
    /// Not run: outside what the target fuzzes (documented per target).
    Skipped,
}

/// One parser under test: bytes in, [`Outcome`] out.
pub struct Target {
    pub name: &'static str,
    /// The origin (file name, flag, peer) the target passes to the parser; every
    /// error must quote it.
    pub origin: &'static str,
    pub run: fn(&[u8]) -> Outcome,
    /// Valid inputs (each must be accepted) that mutations start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Memory the parser may use beyond the linear bound for this input, where the
    /// format itself declares a size (0 for all but documented exceptions).
    pub extra_mem: fn(&[u8]) -> usize,
}

/// No allowance beyond the linear bound.
pub fn no_extra(_: &[u8]) -> usize {
    0
}

/// Per-input limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A single input may take at most this long (a hang detector, not a speed test:
    /// inputs are at most 64 KiB, so 1 s is ≥ 15 µs per byte).
    pub time: Duration,
    /// Peak live heap bytes ≤ `mem_per_byte` × input length + `mem_const` (+ the
    /// target's `extra_mem`).
    pub mem_per_byte: usize,
    pub mem_const: usize,
}

impl Default for Limits {
    /// 1 s; 64 × len + 32 MiB. 64 bytes per input byte covers a parser that holds
    /// the text, its records (a CSV field costs a 1-byte value plus an 8-byte end
    /// offset; a JSON `0,` element a 32-byte value in a doubling vector) and the
    /// parsed rows; 32 MiB covers the fixed tables (embedded application profiles
    /// are built before, not counted) and the largest allocation a short input may
    /// legitimately ask for: 10^6 nodes of a cluster spec (8 MB, doubled by vector
    /// growth), 10^6 workers of a scenario (16 MB of bounds).
    fn default() -> Self {
        Limits {
            time: Duration::from_secs(1),
            mem_per_byte: 64,
            mem_const: 32 << 20,
        }
    }
}

/// Why an input failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Panic(String),
    Slow(Duration),
    Memory {
        peak: usize,
        bound: usize,
    },
    /// The error does not quote the origin.
    NoOrigin(String),
    /// The error's place is not in the input (line 0, a line past the end, a field
    /// the message does not name).
    BadPlace(String),
    Broken(String),
}

impl Failure {
    fn same_kind(&self, o: &Failure) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(o)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Panic(m) => write!(f, "panicked: {m}"),
            Failure::Slow(d) => write!(f, "took {:.3} s", d.as_secs_f64()),
            Failure::Memory { peak, bound } => {
                write!(f, "peak heap {peak} bytes exceeds the bound {bound}")
            }
            Failure::NoOrigin(m) => write!(f, "error does not name the origin: {m}"),
            Failure::BadPlace(m) => write!(f, "error names no valid place: {m}"),
            Failure::Broken(m) => write!(f, "accepted value breaks its contract: {m}"),
        }
    }
}

/// What one passing input did.
#[derive(Debug, Clone, Copy)]
pub struct Pass {
    pub accepted: bool,
    pub skipped: bool,
    pub peak: usize,
    pub elapsed: Duration,
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".into()
    }
}

/// Runs `target` on `input` and checks every property.
pub fn check(target: &Target, input: &[u8], limits: &Limits) -> Result<Pass, Failure> {
    let t0 = Instant::now();
    let (res, peak) = alloc::measure(|| catch_unwind(AssertUnwindSafe(|| (target.run)(input))));
    let elapsed = t0.elapsed();
    let outcome = res.map_err(|p| Failure::Panic(panic_message(&*p)))?;
    if elapsed > limits.time {
        // Once more before calling it slow: the machine may have been busy.
        let t1 = Instant::now();
        let _ = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
        let again = t1.elapsed();
        if again > limits.time {
            return Err(Failure::Slow(elapsed.min(again)));
        }
    }
    let bound = limits
        .mem_per_byte
        .saturating_mul(input.len())
        .saturating_add(limits.mem_const)
        .saturating_add((target.extra_mem)(input));
    if peak > bound {
        return Err(Failure::Memory { peak, bound });
    }
    let accepted = outcome == Outcome::Accepted;
    let skipped = outcome == Outcome::Skipped;
    match outcome {
        Outcome::Accepted | Outcome::Skipped => {}
        Outcome::Broken(m) => return Err(Failure::Broken(m)),
        Outcome::Rejected { message, place } => {
            if !message.contains(target.origin) {
                return Err(Failure::NoOrigin(message));
            }
            match place {
                Place::Whole => {}
                Place::Line(n) => {
                    let lines = input.iter().filter(|&&c| c == b'\n').count() + 1;
                    if n == 0 || n > lines + 1 {
                        return Err(Failure::BadPlace(format!(
                            "line {n} of an input of {lines} lines: {message}"
                        )));
                    }
                }
                Place::Field(f) => {
                    if f.is_empty() || !message.contains(&f) {
                        return Err(Failure::BadPlace(format!(
                            "field `{f}` not quoted: {message}"
                        )));
                    }
                }
            }
        }
    }
    Ok(Pass {
        accepted,
        skipped,
        peak,
        elapsed,
    })
}

/// Watches the input in flight; an input running past `hard` is a hang that the
/// per-input check would never see return: `on_hang` gets the target and input
/// (the fuzz binary prints them and exits).
pub struct Watchdog {
    started_ns: AtomicU64,
    input: Mutex<(&'static str, Vec<u8>)>,
    epoch: Instant,
}

impl Watchdog {
    pub fn start(hard: Duration, on_hang: fn(&str, &[u8])) -> Arc<Watchdog> {
        let w = Arc::new(Watchdog {
            started_ns: AtomicU64::new(0),
            input: Mutex::new(("", Vec::new())),
            epoch: Instant::now(),
        });
        let weak = Arc::downgrade(&w);
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let Some(w) = weak.upgrade() else { return };
            let s = w.started_ns.load(Ordering::Acquire);
            if s != 0 && w.epoch.elapsed().as_nanos() as u64 - s > hard.as_nanos() as u64 {
                let g = w.input.lock().unwrap_or_else(|e| e.into_inner());
                on_hang(g.0, &g.1);
                w.started_ns.store(0, Ordering::Release);
            }
        });
        w
    }

    fn enter(&self, target: &'static str, input: &[u8]) {
        let mut g = self.input.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = target;
        g.1.clear();
        g.1.extend_from_slice(input);
        drop(g);
        let now = (self.epoch.elapsed().as_nanos() as u64).max(1);
        self.started_ns.store(now, Ordering::Release);
    }

    fn leave(&self) {
        self.started_ns.store(0, Ordering::Release);
    }
}

/// Prints a hung input and exits the process (status 3).
pub fn hang_exit(target: &str, input: &[u8]) {
    eprintln!(
        "HANG in target {target}: one input ran past the hard limit\n  input ({} bytes): {}",
        input.len(),
        escape(input)
    );
    std::process::exit(3);
}

/// `input` as a Rust byte-string literal body.
pub fn escape(input: &[u8]) -> String {
    let shown = &input[..input.len().min(4096)];
    let mut s: String = shown.escape_ascii().to_string();
    if input.len() > shown.len() {
        s.push_str(&format!("... ({} more bytes)", input.len() - shown.len()));
    }
    s
}

/// How long a fuzz run goes on.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    Cases(u64),
    Time(Duration),
}

/// Settings of one fuzz run of one target.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    pub limits: Limits,
    pub budget: Budget,
    pub seed: u64,
    /// Shrinking steps after a failure.
    pub max_shrink: u32,
}

/// What a fuzz run did.
#[derive(Debug, Clone)]
pub struct Report {
    pub target: &'static str,
    pub cases: u64,
    pub accepted: u64,
    pub skipped: u64,
    pub elapsed: Duration,
    pub bytes: u64,
    pub max_len: usize,
    pub max_peak: usize,
    /// The input with the highest heap peak (what sets the memory bound).
    pub max_peak_input: Vec<u8>,
    pub slowest: Duration,
    /// The first failure, shrunk: (failure, input).
    pub failure: Option<(Failure, Vec<u8>)>,
}

impl Report {
    pub fn per_s(&self) -> f64 {
        self.cases as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<20} {:>9} inputs in {:>6.1} s = {:>8.0}/s  accepted {:>5.1}%  skipped {}  \
             mean {:>5.0} B  max {:>5} B  peak heap {:>6.1} MiB  slowest {:>6.1} ms  {}",
            self.target,
            self.cases,
            self.elapsed.as_secs_f64(),
            self.per_s(),
            100.0 * self.accepted as f64 / self.cases.max(1) as f64,
            self.skipped,
            self.bytes as f64 / self.cases.max(1) as f64,
            self.max_len,
            self.max_peak as f64 / (1u64 << 20) as f64,
            self.slowest.as_secs_f64() * 1e3,
            match &self.failure {
                None => "ok".to_string(),
                Some((fl, input)) => format!(
                    "FAILED: {fl}\n  input ({} bytes): b\"{}\"",
                    input.len(),
                    escape(input)
                ),
            }
        )
    }
}

/// Checks every seed (they must be accepted) and then generated inputs until the
/// budget is spent or an input fails; a failing input is shrunk.
pub fn fuzz(target: &Target, cfg: &RunConfig, watchdog: Option<&Watchdog>) -> Report {
    let t0 = Instant::now();
    let mut rep = Report {
        target: target.name,
        cases: 0,
        accepted: 0,
        skipped: 0,
        elapsed: Duration::ZERO,
        bytes: 0,
        max_len: 0,
        max_peak: 0,
        max_peak_input: Vec::new(),
        slowest: Duration::ZERO,
        failure: None,
    };
    let run_one = |input: &[u8]| {
        if let Some(w) = watchdog {
            w.enter(target.name, input);
        }
        let r = check(target, input, &cfg.limits);
        if let Some(w) = watchdog {
            w.leave();
        }
        r
    };
    let seeds = Arc::new((target.seeds)());
    for s in seeds.iter() {
        match run_one(s) {
            Ok(p) if p.accepted => {}
            Ok(_) => {
                rep.failure = Some((Failure::Broken("a seed is not accepted".into()), s.clone()));
                rep.elapsed = t0.elapsed();
                return rep;
            }
            Err(f) => {
                rep.failure = Some((f, s.clone()));
                rep.elapsed = t0.elapsed();
                return rep;
            }
        }
    }
    let strategy = mutate::inputs(seeds);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&cfg.seed.to_le_bytes());
    seed_bytes[8..16].copy_from_slice(&(target.name.len() as u64).to_le_bytes());
    for (i, b) in target.name.bytes().enumerate() {
        seed_bytes[16 + i % 16] ^= b;
    }
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    loop {
        match cfg.budget {
            Budget::Cases(n) if rep.cases >= n => break,
            Budget::Time(d) if t0.elapsed() >= d => break,
            _ => {}
        }
        let mut tree = match strategy.new_tree(&mut runner) {
            Ok(t) => t,
            Err(_) => continue,
        };
        let input = tree.current();
        rep.cases += 1;
        rep.bytes += input.len() as u64;
        rep.max_len = rep.max_len.max(input.len());
        match run_one(&input) {
            Ok(p) => {
                rep.accepted += p.accepted as u64;
                rep.skipped += p.skipped as u64;
                if p.peak > rep.max_peak {
                    rep.max_peak = p.peak;
                    rep.max_peak_input = input.clone();
                }
                rep.slowest = rep.slowest.max(p.elapsed);
            }
            Err(f) => {
                let mut best = (f, input);
                // Shrink: simplify while it still fails the same way.
                if tree.simplify() {
                    for _ in 0..cfg.max_shrink {
                        let cand = tree.current();
                        match run_one(&cand) {
                            Err(g) if g.same_kind(&best.0) => {
                                best = (g, cand);
                                if !tree.simplify() {
                                    break;
                                }
                            }
                            _ => {
                                if !tree.complicate() {
                                    break;
                                }
                            }
                        }
                    }
                }
                // Then drop lines and byte ranges while it still fails that way.
                let mut tries = cfg.max_shrink;
                let mut fails = |c: &[u8], kind: &Failure| {
                    if tries == 0 {
                        return None;
                    }
                    tries -= 1;
                    run_one(c).err().filter(|g| g.same_kind(kind))
                };
                let mut n = best.1.len() / 2;
                while n >= 1 {
                    let mut i = 0;
                    while i < best.1.len() {
                        let mut cand = best.1.clone();
                        cand.drain(i..(i + n).min(best.1.len()));
                        match fails(&cand, &best.0) {
                            Some(g) => best = (g, cand),
                            None => i += n,
                        }
                    }
                    n /= 2;
                }
                rep.failure = Some(best);
                break;
            }
        }
    }
    rep.elapsed = t0.elapsed();
    rep
}
