//! The gradient path of one synchronous data-parallel iteration, measured side by
//! side in one process: pacer's binary framing over tokio TCP against tonic
//! (gRPC over HTTP/2) as unary calls, bidirectional streams, and streams with
//! `bytes` vectors. See README.md for what is measured and the results.
//!
//! Controller and workers are tokio tasks on one multi-thread runtime (2 threads by
//! default), talking over loopback TCP. A round: the controller sends every worker
//! a Step (header + the whole parameter vector) and waits for every worker's
//! Gradient (header + a gradient as long as the model). Workers do no compute.

mod binary;
mod grpc;
mod payload;
mod traffic;

use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::time::Instant;
use traffic::Traffic;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the controller checks of every reply.
pub struct Reply {
    pub task: u64,
    pub loss_sum: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Variant {
    Binary,
    TonicUnary,
    TonicStream,
    TonicBytes,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Binary => "binary",
            Variant::TonicUnary => "tonic-unary",
            Variant::TonicStream => "tonic-stream",
            Variant::TonicBytes => "tonic-bytes",
        }
    }
}

/// Measure the gradient path: binary framing vs tonic.
#[derive(Debug, Clone, Parser)]
#[command(version)]
struct Args {
    /// Measured rounds per variant.
    #[arg(long, default_value_t = 500)]
    rounds: usize,
    /// Model size in f32 parameters (the MNIST MLP: 101,770).
    #[arg(long, default_value_t = 101_770)]
    params: usize,
    /// Workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Unmeasured rounds per variant before the first measured one.
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Rounds per block: variants take turns block by block (the starting variant
    /// rotates), so drift in machine load reaches them all alike.
    #[arg(long, default_value_t = 50)]
    block: usize,
    /// Variants to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "binary,tonic-unary,tonic-stream,tonic-bytes"
    )]
    variants: Vec<Variant>,
    /// HTTP/2 initial stream and connection window of both ends, in bytes (default:
    /// hyper's own defaults).
    #[arg(long)]
    h2_window: Option<u32>,
    /// Runtime worker threads (controller and workers all run on them).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seed of the parameter and gradient values.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

enum Bench {
    Binary(binary::Binary),
    Tonic(grpc::Tonic),
}

impl Bench {
    async fn start(v: Variant, a: &Args) -> Result<Self, BoxError> {
        let (w, n, s) = (a.workers, a.params, a.seed);
        let h2 = grpc::H2 {
            window: a.h2_window,
        };
        Ok(match v {
            Variant::Binary => Bench::Binary(binary::Binary::start(w, n, s).await?),
            Variant::TonicUnary => {
                Bench::Tonic(grpc::Tonic::start(grpc::Kind::Unary, w, n, s, h2).await?)
            }
            Variant::TonicStream => {
                Bench::Tonic(grpc::Tonic::start(grpc::Kind::Stream, w, n, s, h2).await?)
            }
            Variant::TonicBytes => {
                Bench::Tonic(grpc::Tonic::start(grpc::Kind::Bytes, w, n, s, h2).await?)
            }
        })
    }

    async fn round(&mut self, params: &[f32], iteration: u64) -> Result<Vec<Reply>, BoxError> {
        match self {
            Bench::Binary(b) => b.round(params, iteration).await,
            Bench::Tonic(t) => t.round(params, iteration).await,
        }
    }

    fn grads(&self) -> &[Vec<f32>] {
        match self {
            Bench::Binary(b) => &b.grads,
            Bench::Tonic(t) => &t.grads,
        }
    }

    fn traffic(&self) -> &Traffic {
        match self {
            Bench::Binary(b) => &b.traffic,
            Bench::Tonic(t) => &t.traffic,
        }
    }
}

/// That round `iteration` delivered this round's parameters to every worker and
/// every worker's gradient back (all values if `full`, else the first and last).
fn check(
    bench: &Bench,
    replies: &[Reply],
    params: &[f32],
    iteration: u64,
    expected: &[Vec<f32>],
    full: bool,
) -> Result<(), BoxError> {
    let workers = expected.len();
    if replies.len() != workers {
        return Err(format!("{} replies from {workers} workers", replies.len()).into());
    }
    for (w, (r, (got, want))) in replies
        .iter()
        .zip(bench.grads().iter().zip(expected))
        .enumerate()
    {
        if r.task != payload::task(iteration, workers, w) {
            return Err(
                format!("worker {w}: reply to task {} in round {iteration}", r.task).into(),
            );
        }
        if r.loss_sum != payload::probe(params) {
            return Err(
                format!("worker {w}: round {iteration}'s parameters did not arrive").into(),
            );
        }
        let ok = if full {
            got == want
        } else {
            got.len() == want.len() && got.first() == want.first() && got.last() == want.last()
        };
        if !ok {
            return Err(format!("worker {w}: wrong gradient in round {iteration}").into());
        }
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct Stats {
    variant: &'static str,
    rounds: usize,
    median_us: f64,
    p10_us: f64,
    p90_us: f64,
    p99_us: f64,
    mean_us: f64,
    min_us: f64,
    /// This variant's median over `binary`'s (if binary ran).
    median_vs_binary: Option<f64>,
    /// Bytes read + written at the workers' ends of the connections, per round.
    wire_bytes_per_round: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    workers: usize,
    params: usize,
    rounds: usize,
    warmup: usize,
    block: usize,
    threads: usize,
    seed: u64,
    h2_window: Option<u32>,
    /// f32 values moved per round: a parameter vector to and a gradient from each
    /// worker, 4 bytes each.
    payload_bytes_per_round: u64,
    loadavg_start: String,
    loadavg_end: String,
    results: Vec<Stats>,
}

/// Time for in-flight bookkeeping to land before the byte counters are read.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

async fn run(a: Args) -> Result<Report, BoxError> {
    if a.variants.is_empty() || a.workers == 0 || a.params < 2 || a.block == 0 {
        return Err("need a variant, a worker, two parameters and a block of one round".into());
    }
    let loadavg_start = loadavg();
    let n = a.params;
    let mut benches = Vec::new();
    for &v in &a.variants {
        benches.push(Bench::start(v, &a).await?);
    }
    let expected: Vec<Vec<f32>> = (0..a.workers)
        .map(|w| payload::gradient(a.seed, w, n))
        .collect();
    let mut params = payload::vector(a.seed.rotate_left(32), n);
    let mut iteration = 0u64;

    for b in &mut benches {
        for i in 0..a.warmup.max(1) {
            iteration += 1;
            params[0] = iteration as f32;
            let replies = b.round(&params, iteration).await?;
            check(b, &replies, &params, iteration, &expected, i == 0)?;
        }
    }

    let k = benches.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(a.rounds); k];
    // A worker counts its last write just after the controller may have read it:
    // bytes are read off the counters only when every connection has gone quiet, and
    // no variant moves any bytes while another one's block runs.
    tokio::time::sleep(SETTLE).await;
    let wire_before: Vec<u64> = benches.iter().map(|b| b.traffic().total()).collect();
    for rep in 0..a.rounds.div_ceil(a.block) {
        let this = a.block.min(a.rounds - rep * a.block);
        for j in 0..k {
            let v = (rep + j) % k;
            let b = &mut benches[v];
            for _ in 0..this {
                iteration += 1;
                params[0] = iteration as f32;
                let t0 = Instant::now();
                let replies = b.round(&params, iteration).await?;
                let dt = t0.elapsed();
                check(b, &replies, &params, iteration, &expected, false)?;
                times[v].push(dt.as_secs_f64() * 1e6);
            }
        }
    }
    tokio::time::sleep(SETTLE).await;
    let wire: Vec<u64> = benches
        .iter()
        .zip(wire_before)
        .map(|(b, before)| b.traffic().total() - before)
        .collect();

    let mut results: Vec<Stats> = Vec::new();
    for ((v, mut t), bytes) in a.variants.iter().zip(times).zip(wire) {
        t.sort_by(f64::total_cmp);
        results.push(Stats {
            variant: v.name(),
            rounds: t.len(),
            median_us: percentile(&t, 50.0),
            p10_us: percentile(&t, 10.0),
            p90_us: percentile(&t, 90.0),
            p99_us: percentile(&t, 99.0),
            mean_us: t.iter().sum::<f64>() / t.len() as f64,
            min_us: t[0],
            median_vs_binary: None,
            wire_bytes_per_round: bytes as f64 / t.len() as f64,
        });
    }
    if let Some(base) = results
        .iter()
        .find(|s| s.variant == "binary")
        .map(|s| s.median_us)
    {
        for s in &mut results {
            s.median_vs_binary = Some(s.median_us / base);
        }
    }
    Ok(Report {
        workers: a.workers,
        params: n,
        rounds: a.rounds,
        warmup: a.warmup.max(1),
        block: a.block,
        threads: a.threads,
        seed: a.seed,
        h2_window: a.h2_window,
        payload_bytes_per_round: 2 * a.workers as u64 * n as u64 * 4,
        loadavg_start,
        loadavg_end: loadavg(),
        results,
    })
}

fn print_table(r: &Report) {
    println!(
        "{} workers, {} params ({} B per vector), {} measured rounds per variant in \
         interleaved blocks of {}, {} warm-up rounds, {} runtime threads, seed {}, HTTP/2 \
         window: {}",
        r.workers,
        r.params,
        r.params * 4,
        r.rounds,
        r.block,
        r.warmup,
        r.threads,
        r.seed,
        r.h2_window
            .map_or("hyper defaults".to_string(), |w| format!("{w} B"))
    );
    println!(
        "f32 payload per round: {} B; load average at start {}, at end {}",
        r.payload_bytes_per_round, r.loadavg_start, r.loadavg_end
    );
    println!(
        "| variant | median µs | p10 µs | p90 µs | p99 µs | mean µs | median / binary | wire B/round |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in &r.results {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {:.0} |",
            s.variant,
            s.median_us,
            s.p10_us,
            s.p90_us,
            s.p99_us,
            s.mean_us,
            s.median_vs_binary
                .map_or("-".to_string(), |x| format!("{x:.2}")),
            s.wire_bytes_per_round
        );
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let json = args.json;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    // The controller runs as a task too, so every part of the benchmark shares the
    // runtime's threads (block_on would drive it on a third thread).
    let report = rt.block_on(async move { tokio::spawn(run(args)).await? })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}
