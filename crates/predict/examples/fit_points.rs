//! Fits the step-time model to given points, one set per blank-line-separated block
//! of stdin lines `nodes replicas atomic_batch step_s sync_s`; prints per set the
//! fitted `alpha_c beta_c alpha_n beta_n alpha_r beta_r gamma` (or `error: …`).
//! Used by `experiments/sia/fit_cmp.py` to compare pacer's fit with Sia's
//! `fit_perf_params` on the same points (issue 25).
//!
//!     cargo run --release -p pacer-predict --example fit_points < points.txt

use pacer_predict::goodput::{fit_perf_params_from, PerfObservation};
use std::io::Read;

fn parse(line: &str) -> Result<PerfObservation, String> {
    let v: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse::<f64>().map_err(|e| format!("`{x}`: {e}")))
        .collect::<Result<_, _>>()?;
    if v.len() != 5 {
        return Err(format!("`{line}`: expected 5 numbers, got {}", v.len()));
    }
    Ok(PerfObservation {
        nodes: v[0] as u32,
        replicas: v[1] as u32,
        atomic_bsz: v[2],
        compute_time_s: (v[3] - v[4]).max(1e-9),
        step_time_s: v[3],
    })
}

fn main() -> Result<(), String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    for block in text.split("\n\n") {
        let obs: Vec<PerfObservation> = block
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(parse)
            .collect::<Result<_, _>>()?;
        if obs.is_empty() {
            continue;
        }
        match fit_perf_params_from(&obs, None) {
            Ok(p) => println!(
                "{} {} {} {} {} {} {}",
                p.alpha_c, p.beta_c, p.alpha_n, p.beta_n, p.alpha_r, p.beta_r, p.gamma
            ),
            Err(e) => println!("error: {e}"),
        }
    }
    Ok(())
}
