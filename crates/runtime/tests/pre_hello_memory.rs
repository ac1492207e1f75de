//! Issue 19: peers that have not said Hello cost the controller no memory to speak
//! of. 200 connections announce the largest frames and stall, while real workers
//! join and train to completion; the process's resident memory stays under 100 MB.
//!
//! Alone in its test binary, so that no other test's memory is counted: the
//! controller, the workers and the attackers all live in this process, and its RSS
//! (`/proc/self/status`, VmRSS) bounds the controller's.

use pacer_runtime::controller;
use pacer_runtime::protocol::{kind, Message, MAX_FRAME, MAX_HELLO_FRAME};
use pacer_runtime::worker::{self, DataSource, WorkerConfig};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::{config, tiny};

/// Resident memory of this process, MB (`None` where /proc is missing).
fn rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

const CONNECTIONS: usize = 200;
const LIMIT_MB: f64 = 100.0;

#[test]
fn stalled_connections_before_hello_cost_no_memory_and_workers_still_train() {
    let Some(start_mb) = rss_mb() else {
        eprintln!("no /proc/self/status here: nothing to measure");
        return;
    };
    let d = tiny();
    let mut cfg = config(&d, "mlp", 32, 64, 40);
    cfg.min_workers = 2;
    // The stalled peers outlive the training: they are refused only at the end.
    cfg.hello_timeout_s = 120.0;
    // All of them held (none shed for a newer one from the same address), so that
    // their memory is what is measured.
    cfg.max_pre_hello_per_addr = CONNECTIONS + 10;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let served = rt.spawn(controller::serve(listener, d.clone(), cfg, None));

    // Peak RSS, sampled every 5 ms from here to the end of training.
    let peak_kb = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak_kb, stop) = (peak_kb.clone(), stop.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(300) {
                if let Some(mb) = rss_mb() {
                    peak_kb.fetch_max((mb * 1024.0) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    // Half announce the largest frame any reader accepts (256 MiB: once allocated
    // and zeroed on the spot), half the largest frame allowed before Hello; each
    // sends the kind byte and 1 KiB of it, then stalls.
    let mut attackers = Vec::with_capacity(CONNECTIONS);
    for i in 0..CONNECTIONS {
        let mut s = TcpStream::connect(addr).unwrap();
        let len = if i % 2 == 0 {
            MAX_FRAME
        } else {
            MAX_HELLO_FRAME
        };
        let mut f = len.to_le_bytes().to_vec();
        f.push(kind::HELLO);
        f.extend_from_slice(&[0u8; 1024]);
        // The controller may already have refused (and closed) an oversized one.
        let _ = s.write_all(&f);
        attackers.push(s);
    }
    std::thread::sleep(Duration::from_millis(300));
    let with_attackers_mb = rss_mb().unwrap_or(0.0);

    // Real workers join and train to completion meanwhile.
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let w = WorkerConfig::new(addr, format!("w{i}"));
            let d = d.clone();
            std::thread::spawn(move || worker::run_blocking(w, DataSource::Loaded(d)))
        })
        .collect();
    let report = rt.block_on(served).unwrap().unwrap();
    for w in workers {
        w.join().unwrap().unwrap();
    }
    let end_mb = rss_mb().unwrap_or(0.0);
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak_mb = peak_kb.load(Ordering::Relaxed) as f64 / 1024.0;
    eprintln!(
        "RSS: {start_mb:.1} MB at start, {with_attackers_mb:.1} MB with {CONNECTIONS} stalled \
         connections, peak {peak_mb:.1} MB while training, {end_mb:.1} MB at the end"
    );
    assert_eq!(report.iterations, 40);
    assert_eq!(report.admitted.len(), 2, "{:?}", report.admitted);
    assert!(
        peak_mb < LIMIT_MB,
        "peak RSS {peak_mb:.1} MB with {CONNECTIONS} stalled connections (limit {LIMIT_MB} MB)"
    );
    // An oversized announcement is refused at once, saying why.
    let mut s = attackers.swap_remove(0);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    match Message::decode(&body, "controller").unwrap() {
        Message::Reject { reason } => assert!(
            reason.contains(&format!("exceeds the limit of {MAX_HELLO_FRAME} bytes")),
            "{reason}"
        ),
        m => panic!("{m:?}"),
    }
}
