//! Courier and configuration search on every application of the Pollux traces, checked
//! against the measured tables (`pacer-lab job-eval`; docs/job-models.md).

use pacer_control::job::courier::{self, measure, Margins};
use pacer_control::job::search::{self, Costed, Objective, OnlineOptions, OnlineResult, StepRule};
use pacer_control::job::{batch_grid, candidates, Candidate, MachineType, MeasuredTable};
use pacer_model::profile::{
    parse_placements, parse_scalability, parse_validation, validation_batch_from_name,
};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{
    error_stats, fit, noise_floor, rows_from_placements, rows_from_scalability, split_random,
    ModelKind, SplitMix64, StepModel, StepRow,
};
use std::path::{Path, PathBuf};

pub(crate) fn load(dir: &Path) -> Result<(Vec<StepRow>, ConvergenceModel), String> {
    let read = |p: &Path| {
        pacer_fsio::read_to_string_limited(p, pacer_fsio::limits::TABLE).map_err(|e| e.to_string())
    };
    let p = dir.join("placements.csv");
    let o = p.display().to_string();
    let mut rows = rows_from_placements(
        &parse_placements(&read(&p)?, &o).map_err(|e| e.to_string())?,
        &o,
    );
    let s = dir.join("scalability.csv");
    if s.is_file() {
        let o = s.display().to_string();
        rows.extend(rows_from_scalability(
            &parse_scalability(&read(&s)?, &o).map_err(|e| e.to_string())?,
            &o,
        ));
    }
    let mut curves = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| e.to_string())? {
        let path = e.map_err(|e| e.to_string())?.path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(b) = validation_batch_from_name(&name) {
            let o = path.display().to_string();
            curves.push(parse_validation(&read(&path)?, b, &o).map_err(|e| e.to_string())?);
        }
    }
    let conv = ConvergenceModel::fit(&curves).map_err(|e| e.to_string())?;
    Ok((rows, conv))
}

/// `pacer-lab job-eval`
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder with one sub-folder per application (placements.csv, scalability.csv,
    /// validation-*.csv).
    #[arg(default_value = "crates/sim/data/pollux")]
    pub traces: PathBuf,
    /// Seed of the random 30 % split.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print every decision.
    #[arg(long)]
    pub verbose: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        traces: dir,
        seed,
        verbose,
    } = args;
    let apps = crate::app_traces::app_folders(&dir)?;
    let machines = vec![
        MachineType {
            name: "measured".into(),
            usd_per_gpu_hour: 3.0,
            speed: 1.0,
        },
        MachineType {
            name: "slow-cheap".into(),
            usd_per_gpu_hour: 1.2,
            speed: 0.6,
        },
    ];
    // Per margin policy: cases, violations, no choice.
    let mut totals = [(0usize, 0usize, 0usize); 3];
    for app in apps {
        let name = app.file_name().unwrap().to_string_lossy().to_string();
        let (rows, conv) = match load(&app) {
            Ok(x) => x,
            Err(e) => {
                println!("{name}: {e}");
                continue;
            }
        };
        let counts = eval_app(&name, &rows, &conv, &machines, seed, verbose);
        for (t, c) in totals.iter_mut().zip(counts) {
            t.0 += c.0;
            t.1 += c.1;
            t.2 += c.2;
        }
    }
    for (policy, (cases, viol, none)) in ["uniform", "per-class", "per-class+noise"]
        .iter()
        .zip(totals)
    {
        println!(
            "TOTAL courier {policy}: {cases} cases, {viol} violations ({:.1}%), {none} without a choice",
            100.0 * viol as f64 / cases.max(1) as f64
        );
    }
    Ok(())
}

/// What one application's evaluation works with.
struct App<'a> {
    name: &'a str,
    rows: &'a [StepRow],
    conv: &'a ConvergenceModel,
    table: MeasuredTable,
    /// Fitted on 70% of the rows.
    model: StepModel,
    machines: &'a [MachineType],
    verbose: bool,
}

/// Courier under three margin policies, then configuration search offline and
/// online, on one application. Returns (cases, violations, no choice) per policy.
fn eval_app(
    name: &str,
    rows: &[StepRow],
    conv: &ConvergenceModel,
    machines: &[MachineType],
    seed: u64,
    verbose: bool,
) -> [(usize, usize, usize); 3] {
    let table = MeasuredTable::new(rows);
    // The model Courier uses is fitted on 70% of the rows; its p90 error on the
    // other 30% is the safety margin.
    let split = split_random(rows.len(), 0.3, seed);
    let (train, test) = split.pick(rows);
    let model = fit(ModelKind::PacerTable, &train).expect("fit");
    let stats = error_stats(&model, &test);
    let margin = stats.p90_abs_pct_error / 100.0;
    // Per-candidate margins: the held-out under-prediction p90 of rows the model
    // interpolates / extrapolates; a configuration measured as such gets either
    // the interpolated margin ("safe") or the one-sided 90% noise of a single
    // measurement from the noise floor (1.2816 σ; an upper bound on noise).
    let floor_sigma = noise_floor(rows).map_or(0.03, |f| f.sigma_pct / 100.0);
    let safe = Margins::from_holdout(&model, &test, 0.0);
    let safe = Margins {
        measured: safe.interpolated,
        ..safe
    };
    let noisy = Margins::from_holdout(&model, &test, 1.2816 * floor_sigma);
    let policies = [
        ("uniform", Margins::uniform(margin)),
        ("per-class", safe),
        ("per-class+noise", noisy),
    ];
    let epochs = conv.max_common_epochs();
    let loo = conv.leave_one_out(epochs);
    let loo_err: f64 = loo
        .iter()
        .map(|(_, m, p)| (m - p).abs())
        .fold(0.0, f64::max);
    println!(
        "== {name}: {} rows, {} curves, metric {} is better, {epochs:.1} epochs, margin {:.1}% (held-out p90); convergence leave-one-batch-out max |err| {loo_err:.4}",
        rows.len(),
        conv.curves.len(),
        if conv.higher_is_better { "higher" } else { "lower" },
        margin * 100.0
    );
    println!(
        "  margins (measured / interpolated / extrapolated): per-class {:.1}/{:.1}/{:.1}%, per-class+noise {:.1}/{:.1}/{:.1}%",
        safe.measured * 100.0, safe.interpolated * 100.0, safe.extrapolated * 100.0,
        noisy.measured * 100.0, noisy.interpolated * 100.0, noisy.extrapolated * 100.0
    );
    let app = App {
        name,
        rows,
        conv,
        table,
        model,
        machines,
        verbose,
    };
    let mut counts = [(0usize, 0usize, 0usize); 3];
    for (pi, (policy, margins)) in policies.iter().enumerate() {
        counts[pi] = app.courier_sweep(pi, policy, margins, epochs);
    }
    app.search(margin, seed);
    counts
}

impl App<'_> {
    /// Courier at 20 SLOs between the fastest and the slowest measured candidate,
    /// against the oracle. Returns (cases, violations, no choice).
    fn courier_sweep(
        &self,
        pi: usize,
        policy: &str,
        margins: &Margins,
        epochs: f64,
    ) -> (usize, usize, usize) {
        let (table, conv, model) = (&self.table, self.conv, &self.model);
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let cands = candidates(table, &batch_grid(&measured, false), 1, 64);
        // SLO sweep between the fastest and the slowest measured candidate.
        let all: Vec<_> = cands
            .iter()
            .filter_map(|c| measure(c, table, conv, epochs))
            .collect();
        let tmin = all.iter().map(|s| s.time_s).fold(f64::INFINITY, f64::min);
        let tmax = all.iter().map(|s| s.time_s).fold(0.0, f64::max);
        let n_slo = 20;
        let (mut viol, mut none, mut cases) = (0, 0, 0);
        let (mut worst_gap, mut worst_gap_slack) = (0.0f64, 0.0f64);
        for i in 0..n_slo {
            let slo = tmin * 1.05 * (tmax / (tmin * 1.05)).powf(i as f64 / (n_slo - 1) as f64);
            let ch = courier::choose_with(&cands, model, conv, epochs, slo, margins);
            let or = courier::oracle(&cands, table, conv, epochs, slo);
            let Some(orb) = or.best else { continue };
            cases += 1;
            let Some(b) = ch.best else {
                none += 1;
                continue;
            };
            let m = measure(&b.candidate, table, conv, epochs).unwrap();
            let violated = m.time_s > slo;
            viol += violated as usize;
            // Gap in points (accuracy ×100) or % of loss.
            let gap = if conv.higher_is_better {
                let scale = if orb.metric <= 1.0 { 100.0 } else { 1.0 };
                (orb.metric - m.metric) * scale
            } else {
                (m.metric - orb.metric) / orb.metric * 100.0
            };
            worst_gap = worst_gap.max(gap);
            // SLOs at least 10% above the oracle's measured time: room for a margin.
            if slo >= orb.time_s * 1.1 {
                worst_gap_slack = worst_gap_slack.max(gap);
            }
            if (pi == 0 && i % 6 == 0) || violated || (self.verbose && gap > 0.0) {
                println!(
                    "  {policy} SLO {slo:>10.0}s: courier batch {:>5} r={:>2} pred {:>9.0}s meas {:>9.0}s metric {:.4} | oracle batch {:>5} r={:>2} {:>9.0}s (slack {:.1}%) metric {:.4} | runner-up batch {}{}",
                    b.candidate.global_batch, b.candidate.replicas(), b.time_s, m.time_s, m.metric,
                    orb.candidate.global_batch, orb.candidate.replicas(), orb.time_s,
                    (slo / orb.time_s - 1.0) * 100.0, orb.metric,
                    ch.runner_up.map(|r| r.candidate.global_batch.to_string()).unwrap_or("-".into()),
                    if violated { "  VIOLATION" } else { "" }
                );
            }
        }
        println!(
            "  courier {policy}: {cases} SLOs with a feasible oracle choice, {viol} violations, {none} with no choice (margin too strict), worst gap to oracle {worst_gap:.3} {unit} (SLOs >= 10% above the oracle's time: {worst_gap_slack:.3})",
            unit = if conv.higher_is_better { "points" } else { "% of loss" }
        );
        (cases, viol, none)
    }

    /// Configuration search to the metric every measured batch reaches: offline
    /// (predicted vs measured, per objective) and online.
    fn search(&self, margin: f64, seed: u64) {
        let conv = self.conv;
        let target = conv.common_target();
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let scands = candidates(&self.table, &measured, self.machines.len(), 64);
        // Extrapolated predictions carry the uniform held-out p90 |error| margin.
        let pred = search::predict_all(&scands, &self.model, conv, target, self.machines, margin);
        let meas = search::measure_all(&scands, &self.table, conv, target, self.machines);
        for o in [Objective::Time, Objective::Cost] {
            self.offline(o, &pred, &meas);
        }
        println!(
            "  pareto (predicted): {} points",
            search::pareto(&pred).len()
        );
        self.online(&scands, &meas, target, seed);
    }

    /// Offline search under objective `o`: the predicted best, measured, vs the oracle.
    fn offline(&self, o: Objective, pred: &[Costed], meas: &[Costed]) {
        let machines = self.machines;
        let p = search::best(pred, o).unwrap();
        let pm = meas.iter().find(|m| m.candidate == p.candidate).unwrap();
        let orc = search::best(meas, o).unwrap();
        println!(
            "  search {o:?}: choice batch {} r={} {} -> measured {:.1} vs oracle {:.1} (batch {} r={} {}): +{:.2}%",
            p.candidate.global_batch, p.candidate.replicas(), machines[p.candidate.machine].name,
            pm.value(o), orc.value(o), orc.candidate.global_batch, orc.candidate.replicas(),
            machines[orc.candidate.machine].name,
            (pm.value(o) / orc.value(o) - 1.0) * 100.0
        );
        if self.verbose {
            for (what, c) in [("choice", &p.candidate), ("oracle", &orc.candidate)] {
                let pr = pred
                    .iter()
                    .find(|x| x.candidate == *c)
                    .map_or(f64::NAN, |x| x.value(o));
                let me = meas
                    .iter()
                    .find(|x| x.candidate == *c)
                    .map_or(f64::NAN, |x| x.value(o));
                println!(
                    "      {what}: nodes={} local {:.1} predicted {pr:.1} measured {me:.1} ({:+.1}%), support {:?}",
                    c.config.nodes, c.config.local_bsz, (pr / me - 1.0) * 100.0, self.model.support(&c.config)
                );
            }
        }
    }

    /// Online: profile a few configurations (time objective). Each profiling step
    /// is the table's step time times a seeded log-normal jitter whose spread is
    /// the app's noise floor (an upper bound on one row's noise; the traces hold
    /// no per-step times).
    fn online(&self, scands: &[Candidate], meas: &[Costed], target: f64, seed: u64) {
        let jitter = noise_floor(self.rows).map_or(0.03, |f| f.sigma_pct / 100.0);
        let orc = search::best(meas, Objective::Time).unwrap();
        // `adapt`: the default options (profiling budget 10% of the run, strict);
        // `b=…`: the same at other budgets, for the trade-off.
        let adapt = |kind, budget_frac| OnlineOptions {
            kind,
            budget_frac,
            ..OnlineOptions::default()
        };
        let fixed = |kind| OnlineOptions {
            kind,
            initial: 8,
            max_profiles: 8,
            steps: StepRule::fixed(20),
            budget_frac: None,
            ..OnlineOptions::default()
        };
        for (label, opts) in [
            ("pollux 8x20", fixed(ModelKind::Pollux)),
            ("pollux adapt", OnlineOptions::default()),
            ("pollux b=0.05", adapt(ModelKind::Pollux, Some(0.05))),
            ("pollux b=0.20", adapt(ModelKind::Pollux, Some(0.20))),
            ("pollux b=none", adapt(ModelKind::Pollux, None)),
            ("ernest 8x20", fixed(ModelKind::Ernest)),
            ("ernest adapt", adapt(ModelKind::Ernest, Some(0.10))),
        ] {
            let mut rng = SplitMix64(
                seed.wrapping_mul(0x9E37_79B9)
                    .wrapping_add(self.name.len() as u64),
            );
            let mut normal = move || {
                let u =
                    |r: &mut SplitMix64| ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                let (u1, u2) = (u(&mut rng), u(&mut rng));
                (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
            };
            let r = search::online(
                scands,
                |c, _| {
                    let (t, sync) = self.table.step_and_sync(&c.config)?;
                    let f = (jitter * normal()).exp();
                    Some((t * f, sync * f))
                },
                self.conv,
                target,
                self.machines,
                &opts,
            );
            match &r {
                Ok(r) => print_online(label, r, meas, orc),
                Err(e) => println!("  online {label}: {e}"),
            }
            if let (true, Ok(r)) = (self.verbose, &r) {
                self.print_profiles(r, orc);
            }
        }
    }

    /// `--verbose`: every configuration online search profiled, and its choice.
    fn print_profiles(&self, r: &OnlineResult, orc: &Costed) {
        for p in &r.profiles {
            let c = &p.candidate;
            println!(
                "      profiled batch {} r={} nodes={} local {:.1}: {} steps, {:.4}s/step (predicted now {:.4}s)",
                c.global_batch, c.replicas(), c.config.nodes, c.config.local_bsz, p.steps, p.step_s,
                r.model.as_ref().map_or(f64::NAN, |m| m.step_time(&c.config))
            );
        }
        let c = &r.choice.candidate;
        println!(
            "      choice batch {} r={} nodes={} predicted {:.0}s; oracle batch {} r={} nodes={}, model predicts it at {:.4}s/step, measured {:.4}",
            c.global_batch, c.replicas(), c.config.nodes, r.choice.time_s,
            orc.candidate.global_batch, orc.candidate.replicas(), orc.candidate.config.nodes,
            r.model.as_ref().map_or(f64::NAN, |m| m.step_time(&orc.candidate.config)), self.table.step_time(&orc.candidate.config).unwrap()
        );
    }
}

/// One online search's line: profiles, job time against the oracle, overheads.
fn print_online(label: &str, r: &OnlineResult, meas: &[Costed], orc: &Costed) {
    let pm = meas
        .iter()
        .find(|m| m.candidate == r.choice.candidate)
        .unwrap();
    let steps: usize = r.profiles.iter().map(|p| p.steps).sum();
    let (total, credited) = r.overhead_credited(pm.time_s);
    // Each profiled configuration after the first is a restart, and so
    // is committing to a choice other than the last one profiled
    // (the simulator charges 30 s per restart).
    let last = r.profiles.last().map(|p| p.candidate.config);
    let restarts =
        r.profiles.len().saturating_sub(1) + usize::from(last != Some(r.choice.candidate.config));
    let with_restarts = (r.profile_time_s + 30.0 * restarts as f64)
        / (r.profile_time_s + 30.0 * restarts as f64 + pm.time_s);
    println!(
        "  online {label:<13}: {} profiles ({} designed{}), {steps} steps, {:.0}s; job {:.0}s (oracle {:.0}s, +{:.1}%); overhead strict {:.2}%, credited {:.2}% (total {:.0}s, +{:.1}% vs oracle); strict + {restarts} restarts x 30s {:.1}%",
        r.profiles.len(), r.designed,
        if r.budget_stopped { ", budget stopped" } else { "" },
        r.profile_time_s, pm.time_s, orc.time_s,
        (pm.time_s / orc.time_s - 1.0) * 100.0,
        r.overhead_strict(pm.time_s) * 100.0, credited * 100.0, total,
        (total / orc.time_s - 1.0) * 100.0, with_restarts * 100.0
    );
}
