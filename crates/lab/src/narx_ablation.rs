//! Speed-prediction error (MAPE) of NARX variants next to the baselines, on scenario
//! files — the numbers behind the NARX design notes in `pacer_predict::speed::Narx`
//! (`pacer-lab narx-ablation scenarios/worker/interference*.json`).
//!
//! Variants: `narx` as shipped (load response pooled over the job's workers, filtered
//! monitor signals, processor-sharing basis); `unpooled` (each worker learns its own
//! load response); `raw-exo` (no monitor filter); `no-ln` (no `ln(1 − load)` basis).
//! Runs use the `uniform` controller, so that every variant sees the same batches.

use pacer_predict::speed::{make_predictors, LoadPool, Narx, NarxConfig, SpeedPredictor};
use pacer_workersim::{load_scenario, simulate_custom, SimOptions};

fn worker_seed(seed: u64, worker: u64) -> u64 {
    seed ^ worker.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn narx(cfg: NarxConfig, seed: u64, n: usize, pooled: bool) -> Vec<Box<dyn SpeedPredictor>> {
    let pool = LoadPool::new(&cfg, seed);
    (0..n)
        .map(|i| {
            let s = worker_seed(seed, i as u64);
            let m = if pooled {
                Narx::pooled(cfg, s, pool.clone())
            } else {
                Narx::new(cfg, s)
            };
            Box::new(m) as Box<dyn SpeedPredictor>
        })
        .collect()
}

/// `pacer-lab narx-ablation`
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Scenario files (`pacer batching eval` format).
    #[arg(required = true)]
    pub scenarios: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let files = args.scenarios;
    let variants = [
        "last", "ewma", "ets", "narx", "unpooled", "raw-exo", "no-ln",
    ];
    print!("{:<24}", "scenario");
    for v in variants {
        print!(" {v:>9}");
    }
    println!();
    for f in &files {
        let sc = load_scenario(std::path::Path::new(f))?;
        let n = sc.n_workers();
        let name = std::path::Path::new(f)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        print!("{name:<24}");
        for v in variants {
            let base = NarxConfig::default();
            let preds = match v {
                "unpooled" => narx(base, sc.seed, n, false),
                "raw-exo" => narx(
                    NarxConfig {
                        exo_gain: 1.0,
                        ..base
                    },
                    sc.seed,
                    n,
                    true,
                ),
                "no-ln" => narx(
                    NarxConfig {
                        sharing_basis: false,
                        ..base
                    },
                    sc.seed,
                    n,
                    true,
                ),
                name => make_predictors(name, sc.seed, n).expect("registry name"),
            };
            let r = simulate_custom(&sc, "uniform", &SimOptions::default(), preds)?;
            print!(" {:>9.5}", r.speed_mape);
        }
        println!();
    }
    Ok(())
}
