//! The long fuzz pass: every target (or those named) for `--secs` each.
//!
//! ```text
//! cargo run --profile fuzz -p pacer-fuzz -- --secs 180 [--target NAME,...] [--jobs 2] [--seed N]
//! ```
//! Prints one line per target (inputs, inputs/s, accepted share, sizes, peak heap,
//! slowest input) and exits 1 if any target failed, with the shrunk input.

use pacer_fuzz::harness::{self, Budget, Limits, RunConfig, Watchdog};
use pacer_fuzz::targets;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: pacer-fuzz [--secs S] [--cases N] [--target NAME[,NAME...]] [--jobs J] [--seed N] [--verbose] [--list]\n\
         targets: {}",
        targets::all().iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
    );
    std::process::exit(2)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut verbose = false;
    let (mut budget, mut names, mut jobs, mut seed) = (
        Budget::Time(Duration::from_secs(60)),
        None::<Vec<String>>,
        1usize,
        0u64,
    );
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--secs" => {
                budget = Budget::Time(Duration::from_secs_f64(
                    val().parse().unwrap_or_else(|_| usage()),
                ))
            }
            "--cases" => budget = Budget::Cases(val().parse().unwrap_or_else(|_| usage())),
            "--target" => names = Some(val().split(',').map(str::to_string).collect()),
            "--jobs" => jobs = val().parse::<usize>().unwrap_or_else(|_| usage()).max(1),
            "--seed" => seed = val().parse().unwrap_or_else(|_| usage()),
            "--verbose" => verbose = true,
            "--list" => {
                for t in targets::all() {
                    println!("{}", t.name);
                }
                return;
            }
            _ => usage(),
        }
    }
    let all = targets::all();
    let chosen: Vec<_> = match &names {
        None => all,
        Some(n) => {
            for x in n {
                if targets::by_name(x).is_none() {
                    eprintln!("unknown target `{x}`");
                    usage();
                }
            }
            all.into_iter()
                .filter(|t| n.iter().any(|x| x == t.name))
                .collect()
        }
    };
    // Failures are reported with their shrunk input; the default hook would print
    // every panic met while shrinking.
    std::panic::set_hook(Box::new(|_| {}));
    targets::warm_up();
    let cfg = RunConfig {
        limits: Limits::default(),
        budget,
        seed,
        max_shrink: 2000,
    };
    println!(
        "pacer-fuzz: {} target(s), {:?} each, {} thread(s), seed {seed}; limits: {:?} per input, \
         heap ≤ {} × len + {} MiB",
        chosen.len(),
        budget,
        jobs,
        cfg.limits.time,
        cfg.limits.mem_per_byte,
        cfg.limits.mem_const >> 20
    );
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                let dog = Watchdog::start(Duration::from_secs(10), harness::hang_exit);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(t) = chosen.get(i) else { break };
                    let rep = harness::fuzz(t, &cfg, Some(&dog));
                    println!("{rep}");
                    if let Some(dir) = std::env::var_os("PACER_FUZZ_SAVE") {
                        let dir = std::path::PathBuf::from(dir);
                        let _ = std::fs::create_dir_all(&dir);
                        let _ = std::fs::write(
                            dir.join(format!("{}-peak.bin", t.name)),
                            &rep.max_peak_input,
                        );
                        if let Some((_, input)) = &rep.failure {
                            let _ =
                                std::fs::write(dir.join(format!("{}-failure.bin", t.name)), input);
                        }
                    }
                    if verbose {
                        let p = &rep.max_peak_input;
                        println!(
                            "  highest heap peak from ({} bytes): b\"{}\"",
                            p.len(),
                            harness::escape(&p[..p.len().min(400)])
                        );
                    }
                    if rep.failure.is_some() {
                        failed.lock().unwrap().push(t.name);
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    if !failed.is_empty() {
        println!("FAILED: {}", failed.join(", "));
        std::process::exit(1);
    }
    println!("all targets passed");
}
