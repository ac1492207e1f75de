//! Held-out step-time error of every model on every application of the Pollux traces.
//!
//! ```text
//! cargo run --release -p pacer-predict --example itertime_eval -- [TRACES_DIR] [--seed N]
//! ```
//! TRACES_DIR defaults to `../shared/data/pollux/traces` (relative to the workspace).

use pacer_model::profile::{parse_placements, parse_scalability};
use pacer_predict::itertime::{
    evaluate, noise_floor, rows_from_placements, rows_from_scalability, split_extrapolate,
    split_random, ModelKind, StepRow,
};
use std::path::{Path, PathBuf};

fn load(dir: &Path) -> Result<Vec<StepRow>, String> {
    let mut rows = Vec::new();
    let p = dir.join("placements.csv");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let origin = p.display().to_string();
    rows.extend(rows_from_placements(
        &parse_placements(&text, &origin).map_err(|e| e.to_string())?,
        &origin,
    ));
    let s = dir.join("scalability.csv");
    if let Ok(text) = std::fs::read_to_string(&s) {
        let origin = s.display().to_string();
        rows.extend(rows_from_scalability(
            &parse_scalability(&text, &origin).map_err(|e| e.to_string())?,
            &origin,
        ));
    }
    Ok(rows)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = PathBuf::from("../shared/data/pollux/traces");
    let mut seed = 0u64;
    while let Some(a) = args.next() {
        if a == "--seed" {
            seed = args.next().and_then(|s| s.parse().ok()).expect("--seed N");
        } else {
            dir = PathBuf::from(a);
        }
    }
    if !dir.is_dir() {
        eprintln!(
            "{}: not found — the Pollux traces live in ../shared/data, which a plain clone lacks",
            dir.display()
        );
        std::process::exit(2);
    }
    let mut apps: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read traces dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("placements.csv").is_file())
        .collect();
    apps.sort();
    let mut noise = Vec::new();
    println!(
        "{:<12} {:<7} {:>6} {:>6} | {:>7} {:>7} | {:>6} {:>6} {:>8} {:>7} {:>7}",
        "app",
        "model",
        "train",
        "test",
        "rnd_med",
        "rnd_p90",
        "xtrain",
        "xtest",
        "x_r>=",
        "x_med",
        "x_p90"
    );
    for app in apps {
        let name = app.file_name().unwrap().to_string_lossy().to_string();
        let rows = match load(&app) {
            Ok(r) => r,
            Err(e) => {
                println!("{name}: {e}");
                continue;
            }
        };
        noise.push((name.clone(), noise_floor(&rows)));
        let rnd = split_random(rows.len(), 0.3, seed);
        let ext = split_extrapolate(&rows, 0.3);
        let min_r = ext
            .test
            .iter()
            .map(|&i| rows[i].config.replicas)
            .min()
            .unwrap_or(0);
        for kind in ModelKind::ALL {
            let a = evaluate(kind, &rows, &rnd);
            let b = evaluate(kind, &rows, &ext);
            let fmt = |r: &Result<_, _>| match r {
                Ok((_, s)) => {
                    let s: &pacer_predict::itertime::ErrorStats = s;
                    format!(
                        "{:>7.2} {:>7.2}",
                        s.median_abs_pct_error, s.p90_abs_pct_error
                    )
                }
                Err(e) => format!("error: {e}"),
            };
            println!(
                "{:<12} {:<7} {:>6} {:>6} | {} | {:>6} {:>6} {:>8} {}",
                name,
                kind.name(),
                rnd.train.len(),
                rnd.test.len(),
                fmt(&a),
                ext.train.len(),
                ext.test.len(),
                min_r,
                fmt(&b)
            );
            if std::env::var("VERBOSE").is_ok() {
                if let Ok((m, _)) = &a {
                    println!("    {m:?}");
                }
            }
        }
    }
    println!();
    println!("noise floor (no model: each row vs its placement's neighbours in ln batch,");
    println!("shape shared by all placements removed; see itertime::noise_floor)");
    println!(
        "{:<12} {:>6} {:>8} {:>8} {:>9} {:>9}",
        "app", "rows", "sigma%", "raw_sig%", "floor_med", "floor_p90"
    );
    for (name, f) in noise {
        match f {
            Some(f) => println!(
                "{:<12} {:>6} {:>8.2} {:>8.2} {:>9.2} {:>9.2}",
                name, f.rows, f.sigma_pct, f.sigma_raw_pct, f.median_abs_pct, f.p90_abs_pct
            ),
            None => println!("{name:<12} too few rows on a common batch grid"),
        }
    }
}
