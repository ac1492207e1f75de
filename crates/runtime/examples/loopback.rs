//! Where does a parameter broadcast's time go on this machine? Sends a frame of the
//! MLP's size (407 KB) to N receiver threads over loopback TCP and reports, per
//! round, when the last receiver had the whole frame, with and without threads
//! burning CPU (standing in for workers that already got their parameters and
//! compute), sequential or concurrent sends, blocking or busy-polling receivers.
//!
//! `cargo run --release -p pacer-runtime --example loopback -- [ROUNDS]`

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const BYTES: usize = 101_770 * 4 + 41;

fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    c.set_nodelay(true).unwrap();
    s.set_nodelay(true).unwrap();
    (s, c)
}

fn read_all(s: &mut TcpStream, buf: &mut [u8], spin: bool) {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => panic!("closed"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && spin => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Median and 90th percentile (ms) of the time from the first send to the last
/// receiver's completion, and of each receiver's completion.
fn scenario(n: usize, rounds: usize, burners: usize, concurrent: bool, spin: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..n {
        let (s, c) = pair(&l);
        if spin {
            c.set_nonblocking(true).unwrap();
        }
        senders.push(s);
        receivers.push(c);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let burn: Vec<_> = (0..burners)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
        })
        .collect();
    let t0 = Arc::new(std::sync::Mutex::new(Instant::now()));
    let bar = Arc::new(Barrier::new(n + 1));
    let done: Vec<_> = receivers
        .into_iter()
        .map(|mut c| {
            let bar = bar.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; BYTES];
                let mut at = Vec::new();
                for _ in 0..rounds {
                    bar.wait();
                    read_all(&mut c, &mut buf, spin);
                    at.push(Instant::now());
                    c.write_all(&[1]).unwrap();
                }
                at
            })
        })
        .collect();
    let frame = Arc::new(vec![7u8; BYTES]);
    let mut starts = Vec::new();
    for _ in 0..rounds {
        bar.wait();
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        *t0.lock().unwrap() = t;
        starts.push(t);
        if concurrent {
            std::thread::scope(|sc| {
                for s in senders.iter_mut() {
                    let f = frame.clone();
                    sc.spawn(move || s.write_all(&f).unwrap());
                }
            });
        } else {
            for s in senders.iter_mut() {
                s.write_all(&frame).unwrap();
            }
        }
        for s in senders.iter_mut() {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
        }
    }
    let ats: Vec<Vec<Instant>> = done.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    for b in burn {
        b.join().unwrap();
    }
    let mut last: Vec<f64> = (0..rounds)
        .map(|r| {
            ats.iter()
                .map(|a| (a[r] - starts[r]).as_secs_f64() * 1e3)
                .fold(0.0, f64::max)
        })
        .collect();
    last.sort_by(|a, b| a.total_cmp(b));
    let per: Vec<String> = ats
        .iter()
        .map(|a| {
            let mut v: Vec<f64> = a
                .iter()
                .zip(&starts)
                .map(|(x, s)| (*x - *s).as_secs_f64() * 1e3)
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            format!("{:.2}", v[v.len() / 2])
        })
        .collect();
    format!(
        "receivers {n} burners {burners} {} {}: last median {:.3} ms p90 {:.3} ms; per receiver median [{}]",
        if concurrent { "concurrent" } else { "sequential" },
        if spin { "spin" } else { "block" },
        last[rounds / 2],
        last[rounds * 9 / 10],
        per.join(", ")
    )
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    for burners in [0, 1, 2] {
        for (concurrent, spin) in [(false, false), (true, false), (false, true)] {
            println!("{}", scenario(1, rounds, burners, concurrent, spin));
            println!("{}", scenario(4, rounds, burners, concurrent, spin));
        }
    }
}
