//! `pacer recommend`: Courier (best metric under a time SLO) or configuration search
//! (least time or cost), with the oracle's choice from the measurements beside it.

use anyhow::{bail, Context};
use clap::Args;
use pacer_cli::json::{CourierAnswer, MarginPct, Pick, Recommendation, SearchAnswer};
use pacer_control::job::courier::{self, Scored};
use pacer_control::job::goal::GoalModel;
use pacer_control::job::search::{self, Costed, Objective};
use pacer_control::job::{batch_grid, candidates, Candidate, MachineType};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{rows_from_placements, rows_from_scalability};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct RecommendArgs {
    /// Application folder in the Pollux layout (placements.csv, scalability.csv,
    /// validation-<batch>.csv).
    #[arg(long)]
    pub app: PathBuf,
    /// Time budget for the whole job, seconds.
    #[arg(long)]
    pub slo_s: f64,
    /// accuracy (Courier), time or cost (configuration search).
    #[arg(long, default_value = "accuracy")]
    pub objective: String,
    /// Machine type and price, `TYPE=USD_PER_GPU_H` or `TYPE=USD_PER_GPU_H:SPEED`
    /// (SPEED relative to the measured GPU, default 1). Repeatable.
    #[arg(long = "price")]
    pub prices: Vec<String>,
    /// Epochs to train (accuracy objective); default: what every measured run covers.
    #[arg(long)]
    pub epochs: Option<f64>,
    /// Largest replica count to consider.
    #[arg(long, default_value_t = 64)]
    pub max_replicas: u32,
    /// Seed of the split that estimates the step-time model's error (the SLO margin).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

fn parse_price(s: &str) -> anyhow::Result<MachineType> {
    let err = || format!("--price {s}: expected TYPE=USD_PER_GPU_H[:SPEED], e.g. v100=3.06");
    let (name, rest) = s.split_once('=').with_context(err)?;
    let (usd, speed) = match rest.split_once(':') {
        Some((u, sp)) => (u, sp.parse::<f64>().ok().with_context(err)?),
        None => (rest, 1.0),
    };
    let usd: f64 = usd.parse().ok().with_context(err)?;
    // NaN fails these checks too; infinity gives NaN costs and times.
    if name.is_empty() || !(usd.is_finite() && usd >= 0.0) || !(speed.is_finite() && speed > 0.0) {
        bail!(err());
    }
    Ok(MachineType {
        name: name.into(),
        usd_per_gpu_hour: usd,
        speed,
    })
}

/// `x` readably: plain in [1e-3, 1e12), else in scientific notation (Rust's plain
/// form of 1e-300 or 1e300 has 300 digits).
fn num(x: f64) -> String {
    if x == 0.0 || (1e-3..1e12).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// `x` with `decimals` decimals when that is readable, else as [`num`] does.
fn fixed(x: f64, decimals: usize) -> String {
    if x == 0.0 || (1e-3..1e12).contains(&x.abs()) {
        format!("{x:.decimals$}")
    } else {
        format!("{x:.3e}")
    }
}

/// Every flag checked before any file is read: the machine types to consider
/// (a single `measured` one without `--price`), whether prices were given, and
/// the objective (`None`: accuracy, Courier).
fn check_flags(
    args: &RecommendArgs,
) -> anyhow::Result<(Vec<MachineType>, bool, Option<Objective>)> {
    // An infinite budget admitted every configuration, NaN none.
    if !(args.slo_s.is_finite() && args.slo_s > 0.0) {
        bail!(
            "--slo-s {}: expected a finite number of seconds > 0",
            num(args.slo_s)
        );
    }
    let mut machines = args
        .prices
        .iter()
        .map(|p| parse_price(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    for (i, m) in machines.iter().enumerate() {
        if machines[..i].iter().any(|o| o.name == m.name) {
            bail!(
                "--price: machine type `{}` is priced twice; give each type once",
                m.name
            );
        }
    }
    if let Some(e) = args.epochs {
        if !(e.is_finite() && e > 0.0) {
            bail!(
                "--epochs {}: expected a finite number of epochs > 0",
                num(e)
            );
        }
    }
    if args.max_replicas == 0 {
        bail!("--max-replicas: expected a whole number ≥ 1, got 0");
    }
    let priced = !machines.is_empty();
    if !priced && args.objective == "cost" {
        bail!(
            "--objective cost: no prices given; add --price TYPE=USD_PER_GPU_H for each \
             machine type to consider (e.g. --price t4=0.53), or choose --objective time"
        );
    }
    if machines.is_empty() {
        machines.push(MachineType {
            name: "measured".into(),
            usd_per_gpu_hour: 0.0,
            speed: 1.0,
        });
    }
    let objective = match args.objective.as_str() {
        "accuracy" => None,
        "time" => Some(Objective::Time),
        "cost" => Some(Objective::Cost),
        o => bail!("--objective {o}: expected accuracy, time or cost"),
    };
    Ok((machines, priced, objective))
}

pub fn run(args: RecommendArgs) -> anyhow::Result<()> {
    let (machines, priced, objective) = check_flags(&args)?;
    let profile = pacer_sim::load_app_dir(&args.app)
        .with_context(|| format!("--app {}", args.app.display()))?;
    let dir = args.app.display().to_string();
    let mut rows = rows_from_placements(&profile.placements, &format!("{dir}/placements.csv"));
    rows.extend(rows_from_scalability(
        &profile.scalability,
        &format!("{dir}/scalability.csv"),
    ));
    let conv = ConvergenceModel::fit(&profile.validation).with_context(|| dir.clone())?;
    // Margins: the model's errors on 30% of the rows it was not fitted on.
    let GoalModel {
        conv,
        model,
        margins,
        margin,
        table,
    } = GoalModel::fit(&rows, conv, args.seed).with_context(|| dir.clone())?;
    let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
    let epochs = args.epochs.unwrap_or_else(|| conv.max_common_epochs());
    let mk = |c: &Candidate, time: f64, metric: f64| {
        let m = &machines[c.machine];
        let time = time / m.speed;
        let meas = courier::measure(c, &table, &conv, epochs);
        Pick {
            batch: c.global_batch,
            replicas: c.replicas(),
            nodes: c.config.nodes,
            machine: m.name.clone(),
            predicted_time_s: time,
            predicted_metric: metric,
            predicted_cost: time / 3600.0 * c.replicas() as f64 * m.usd_per_gpu_hour,
            measured_time_s: meas.as_ref().map(|s| s.time_s / m.speed),
            measured_metric: meas.map(|s| s.metric),
        }
    };
    let out = match objective {
        None => {
            // Courier on the measured GPU: batches between measured ones are predicted
            // by the convergence model; SLO checked with each candidate's margin.
            let cands = candidates(&table, &batch_grid(&measured, true), 1, args.max_replicas);
            let ch = courier::choose_with(&cands, &model, &conv, epochs, args.slo_s, &margins);
            let or = courier::oracle(&cands, &table, &conv, epochs, args.slo_s);
            let p = |s: &Option<Scored>| s.as_ref().map(|s| mk(&s.candidate, s.time_s, s.metric));
            Recommendation::Accuracy(CourierAnswer {
                epochs,
                slo_s: args.slo_s,
                margin_pct: MarginPct {
                    measured: margins.measured * 100.0,
                    interpolated: margins.interpolated * 100.0,
                    extrapolated: margins.extrapolated * 100.0,
                },
                metric_higher_is_better: conv.higher_is_better,
                choice: p(&ch.best),
                runner_up: p(&ch.runner_up),
                oracle: p(&or.best),
            })
        }
        Some(o) => {
            let target = conv.common_target();
            let cands = candidates(&table, &measured, machines.len(), args.max_replicas);
            let within = |v: Vec<Costed>, m: f64| -> Vec<Costed> {
                v.into_iter()
                    .filter(|c| c.time_s * (1.0 + m) <= args.slo_s)
                    .collect()
            };
            let pred = within(
                // Extrapolated step times are scored with the margin too.
                search::predict_all(&cands, &model, &conv, target, &machines, margin),
                margin,
            );
            let meas_all = search::measure_all(&cands, &table, &conv, target, &machines);
            let meas = within(meas_all.clone(), 0.0);
            let p = |c: Option<&Costed>| {
                c.map(|c| {
                    let mut pk = mk(
                        &c.candidate,
                        c.time_s * machines[c.candidate.machine].speed,
                        target,
                    );
                    pk.predicted_cost = c.cost_usd;
                    // Measured: table step time and measured samples to the target.
                    let m = meas_all.iter().find(|m| m.candidate == c.candidate);
                    pk.measured_time_s = m.map(|m| m.time_s);
                    pk.measured_metric = m.map(|_| target);
                    pk
                })
            };
            let answer = SearchAnswer {
                target_metric: target,
                slo_s: args.slo_s,
                margin_pct: margin * 100.0,
                choice: p(search::best(&pred, o)),
                oracle: p(search::best(&meas, o)),
                pareto: search::pareto(&pred)
                    .iter()
                    .filter_map(|c| p(Some(c)))
                    .collect(),
            };
            match o {
                Objective::Time => Recommendation::Time(answer),
                Objective::Cost => Recommendation::Cost(answer),
            }
        }
    };
    if out.choice().is_none() {
        let m = if objective.is_none() {
            format!(
                "safety margins {:.1}% measured / {:.1}% interpolated / {:.1}% extrapolated",
                margins.measured * 100.0,
                margins.interpolated * 100.0,
                margins.extrapolated * 100.0
            )
        } else {
            format!("a {:.1}% safety margin", margin * 100.0)
        };
        // An answer of nothing is not a success: scripts must see it.
        bail!(
            "no configuration meets --slo-s {} (with {m}); raise --slo-s{}",
            num(args.slo_s),
            if objective.is_none() {
                " or lower --epochs"
            } else {
                ", or add faster machine types with --price"
            }
        );
    }
    crate::out::print(&render(&out, args.json, priced)?)
}

/// The answer as printed: pretty JSON (`--json`), else one line per pick.
fn render(out: &Recommendation, json: bool, priced: bool) -> anyhow::Result<String> {
    let mut text = String::new();
    if json {
        writeln!(text, "{}", pacer_cli::json::pretty(out)?)?;
        return Ok(text);
    }
    let picks = match out {
        Recommendation::Accuracy(a) => [
            ("choice", &a.choice),
            ("runner_up", &a.runner_up),
            ("oracle", &a.oracle),
        ]
        .to_vec(),
        Recommendation::Time(s) | Recommendation::Cost(s) => {
            [("choice", &s.choice), ("oracle", &s.oracle)].to_vec()
        }
    };
    for (key, pick) in picks {
        let Some(v) = pick else { continue };
        writeln!(
            text,
            // No widths on batch and replicas: the line has always written them
            // unpadded, as JSON numbers (`512.0`).
            "{key:<10} batch {} replicas {} on {} node{} ({}): predicted {} s, metric {}, cost {}; measured {} s",
            json_number(v.batch), v.replicas, v.nodes, if v.nodes == 1 { "" } else { "s" }, v.machine,
            fixed(v.predicted_time_s, 0),
            fixed(v.predicted_metric, 4),
            if priced {
                format!("${}", fixed(v.predicted_cost, 2))
            } else {
                "- (no --price)".to_string()
            },
            v.measured_time_s.map(|t| fixed(t, 0)).unwrap_or("-".into()),
        )?;
    }
    Ok(text)
}

/// `x` as the JSON output writes it (`512.0`; `null` when not finite).
fn json_number(x: f64) -> String {
    serde_json::Value::from(x).to_string()
}
