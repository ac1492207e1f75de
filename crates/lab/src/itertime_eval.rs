//! Held-out step-time error of every model on every application of the Pollux traces
//! (`pacer-lab itertime-eval`; docs/job-models.md).

use pacer_model::profile::{parse_placements, parse_scalability};
use pacer_predict::itertime::{
    error_stats, evaluate, noise_floor, repeat_floor, rows_from_placements, rows_from_scalability,
    split_extrapolate, split_random, ErrorStats, ModelKind, NoiseFloor, RepeatFloor, Split,
    StepModel, StepRow,
};
use std::path::{Path, PathBuf};

fn load(dir: &Path) -> Result<Vec<StepRow>, String> {
    let mut rows = Vec::new();
    let p = dir.join("placements.csv");
    let text = pacer_fsio::read_to_string_limited(&p, pacer_fsio::limits::TABLE)
        .map_err(|e| e.to_string())?;
    let origin = p.display().to_string();
    rows.extend(rows_from_placements(
        &parse_placements(&text, &origin).map_err(|e| e.to_string())?,
        &origin,
    ));
    let s = dir.join("scalability.csv");
    if s.exists() {
        let text = pacer_fsio::read_to_string_limited(&s, pacer_fsio::limits::TABLE)
            .map_err(|e| e.to_string())?;
        let origin = s.display().to_string();
        rows.extend(rows_from_scalability(
            &parse_scalability(&text, &origin).map_err(|e| e.to_string())?,
            &origin,
        ));
    }
    Ok(rows)
}

/// Mean |ln(predicted / measured)| in percent.
fn mean_abs_log_pct(m: &StepModel, rows: &[StepRow]) -> f64 {
    let n = rows.len().max(1) as f64;
    100.0
        * rows
            .iter()
            .map(|r| (m.step_time(&r.config) / r.step_time_s).ln().abs())
            .sum::<f64>()
        / n
}

/// `pacer-lab itertime-eval`
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder with one sub-folder per application (placements.csv, scalability.csv).
    #[arg(default_value = "crates/sim/data/pollux")]
    pub traces: PathBuf,
    /// Seed of the random 30 % split.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also print the extrapolation error by table and replica count.
    #[arg(long)]
    pub breakdown: bool,
}

/// What one application's repeats show: its name, the smallest replica count of
/// the extrapolation test rows, the repeat floors over all rows and over those
/// test rows' replica counts, and the models' held-out errors on the same rows.
type Repeats = (
    String,
    u32,
    Option<RepeatFloor>,
    Option<(ErrorStats, f64)>,
    Option<RepeatFloor>,
    Option<(Option<(ErrorStats, f64)>, Option<(ErrorStats, f64)>)>,
);

/// The models fitted on one split's training rows: (kind, random split, extrapolation split).
type Fitted = Vec<(ModelKind, Option<StepModel>, Option<StepModel>)>;

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        traces: dir,
        seed,
        breakdown,
    } = args;
    let apps = crate::app_traces::app_folders(&dir)?;
    let mut noise = Vec::new();
    let mut repeats = Vec::new();
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
        repeats.push(eval_app(name, &rows, seed, breakdown));
    }
    print_repeats(&repeats);
    print_noise(noise);
    Ok(())
}

/// Every model on one application, both splits: one line each; then (with
/// `breakdown`) the extrapolation error by table and replica count. Returns what
/// its repeats show.
fn eval_app(name: String, rows: &[StepRow], seed: u64, breakdown: bool) -> Repeats {
    let rnd = split_random(rows.len(), 0.3, seed);
    let ext = split_extrapolate(rows, 0.3);
    let min_r = ext
        .test
        .iter()
        .map(|&i| rows[i].config.replicas)
        .min()
        .unwrap_or(0);
    let fitted = fit_models(&name, rows, &rnd, &ext, min_r);
    // The model's error on the held-out rows that have order-permuted repeats.
    let on = |m: &Option<StepModel>, test: &[usize], members: &[usize]| {
        let pick: Vec<StepRow> = test
            .iter()
            .filter(|i| members.binary_search(i).is_ok())
            .map(|&i| rows[i].clone())
            .collect();
        m.as_ref()
            .map(|m| (error_stats(m, &pick), mean_abs_log_pct(m, &pick)))
    };
    let model = |k: ModelKind, rnd: bool| {
        fitted
            .iter()
            .find(|f| f.0 == k)
            .and_then(|f| if rnd { f.1.clone() } else { f.2.clone() })
    };
    if breakdown {
        print_breakdown(&name, rows, &ext, &model);
    }
    let all = repeat_floor(rows, 0);
    let x = repeat_floor(rows, min_r);
    let rnd_err = all
        .as_ref()
        .and_then(|f| on(&model(ModelKind::PacerTable, true), &rnd.test, &f.members));
    let x_err = x.as_ref().map(|f| {
        (
            on(&model(ModelKind::Pollux, false), &ext.test, &f.members),
            on(&model(ModelKind::Pacer, false), &ext.test, &f.members),
        )
    });
    (name, min_r, all, rnd_err, x, x_err)
}

/// Fits and evaluates every model kind on both splits, printing one line each.
fn fit_models(name: &str, rows: &[StepRow], rnd: &Split, ext: &Split, min_r: u32) -> Fitted {
    let mut fitted: Vec<(ModelKind, Option<StepModel>, Option<StepModel>)> = Vec::new();
    for kind in ModelKind::ALL {
        let a = evaluate(kind, rows, rnd);
        let b = evaluate(kind, rows, ext);
        fitted.push((
            kind,
            a.as_ref().ok().map(|r| r.0.clone()),
            b.as_ref().ok().map(|r| r.0.clone()),
        ));
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
    fitted
}

/// Extrapolation error by table and replica count, for the model fitted on
/// the training rows and (to tell form error from extrapolation error) on
/// every row.
fn print_breakdown(
    name: &str,
    rows: &[StepRow],
    ext: &Split,
    model: &dyn Fn(ModelKind, bool) -> Option<StepModel>,
) {
    for (fit_on, k) in [
        ("train", ModelKind::Pollux),
        ("train", ModelKind::Pacer),
        ("all", ModelKind::Pollux),
        ("all", ModelKind::Pacer),
    ] {
        let m = if fit_on == "all" {
            pacer_predict::itertime::fit(k, rows).ok()
        } else {
            model(k, false)
        };
        let Some(m) = m else { continue };
        for (label, lo, hi, scal) in [
            ("all", 0, u32::MAX, None),
            ("placements", 0, 16, Some(false)),
            ("scal r<=16", 0, 16, Some(true)),
            ("scal 17-32", 17, 32, Some(true)),
            ("scal 33-64", 33, 64, Some(true)),
        ] {
            let pick: Vec<StepRow> = ext
                .test
                .iter()
                .map(|&i| rows[i].clone())
                .filter(|r| {
                    scal.is_none_or(|s| r.source.contains("scalability.csv") == s)
                        && (lo..=hi).contains(&r.config.replicas)
                })
                .collect();
            if pick.is_empty() {
                continue;
            }
            let bias = pick
                .iter()
                .map(|r| (m.step_time(&r.config) / r.step_time_s).ln())
                .sum::<f64>()
                / pick.len() as f64;
            let s = error_stats(&m, &pick);
            println!(
            "  {:<12} x test rows, fit on {:<5} {:<7} {:<11} n={:>4} med {:>6.2} p90 {:>6.2} mean ln(pred/meas) {:>+6.2}%",
            name,
            fit_on,
            k.name(),
            label,
            s.rows,
            s.median_abs_pct_error,
            s.p90_abs_pct_error,
            100.0 * bias
        );
        }
    }
}

/// The repeats table: noise of order-permuted repeats beside the models' errors on them.
fn print_repeats(repeats: &[Repeats]) {
    println!();
    println!("repeats: placements that differ only in node order (1344, 1434, 1443) are");
    println!("repeated measurements for any model that, like all here, ignores node order");
    println!("(see itertime::repeat_floor): floor_* = |noise| of one row if Gaussian, within_* =");
    println!("the same after removing each placement's offset. Next to them the models'");
    println!("held-out error on the same rows (rnd: pacer+table; x: pollux | pacer), and on x");
    println!("the hard bound on any order-blind model's mean |ln error| vs the models' own.");
    println!(
        "{:<12} {:>5} {:>9} {:>9} {:>9} {:>9} | {:>5} {:>7} {:>7} | {:>5} {:>5} {:>9} {:>9} {:>6} | {:>13} | {:>13} | {:>13}",
        "app",
        "rows",
        "floor_med",
        "floor_p90",
        "within_med",
        "within_p90",
        "rnd_n",
        "rnd_med",
        "rnd_p90",
        "x_r>=",
        "x_n",
        "floor_med",
        "floor_p90",
        "bound",
        "pollux med/p90",
        "pacer med/p90",
        "mean|ln| px/pc"
    );
    let mp = |e: &Option<(ErrorStats, f64)>| match e {
        Some((s, _)) => format!(
            "{:>6.2}/{:<6.2}",
            s.median_abs_pct_error, s.p90_abs_pct_error
        ),
        None => format!("{:>13}", "-"),
    };
    for (name, min_r, all, rnd_err, x, x_err) in repeats {
        let Some(all) = all else {
            println!("{name:<12} no order-permuted repeats");
            continue;
        };
        let (rn, rm, rp) = match rnd_err {
            Some((s, _)) => (s.rows, s.median_abs_pct_error, s.p90_abs_pct_error),
            None => (0, f64::NAN, f64::NAN),
        };
        let xs = match (x, x_err) {
            (Some(f), Some((px, pc))) => format!(
                "{:>5} {:>5} {:>9.2} {:>9.2} {:>6.2} | {} | {} | {:>6.2}/{:<6.2}",
                min_r,
                px.as_ref().map_or(0, |e| e.0.rows),
                f.median_abs_pct,
                f.p90_abs_pct,
                f.mean_abs_log_bound_pct,
                mp(px),
                mp(pc),
                px.as_ref().map_or(f64::NAN, |e| e.1),
                pc.as_ref().map_or(f64::NAN, |e| e.1),
            ),
            _ => format!("{min_r:>5} no repeats at these replica counts"),
        };
        println!(
            "{:<12} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.2} | {:>5} {:>7.2} {:>7.2} | {}",
            name,
            all.members.len(),
            all.median_abs_pct,
            all.p90_abs_pct,
            all.within_median_abs_pct,
            all.within_p90_abs_pct,
            rn,
            rm,
            rp,
            xs
        );
    }
}

/// The noise-floor table.
fn print_noise(noise: Vec<(String, Option<NoiseFloor>)>) {
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
