//! `pacer-lab goal-eval`: what a deadline job's minimum share is worth when the job level
//! feeds it (docs/serve.md, "Deadlines from a profile"), checked against the measured
//! tables of every Pollux application.
//!
//! One job at a time on an empty cluster of 4-device nodes (the Pollux testbed's), sizes
//! 1, 2, 4, 8, 16; the planner's rule there is the fewest devices whose time meets the
//! deadline. Two ways to plan it:
//! - **linear**: what a user states without a profile — `expected_runtime` measured at
//!   4 devices (exact: the table's time) at the batch they would choose for accuracy
//!   (the measured batch with the best measured metric after the epochs, among those
//!   measured on 4 devices), and linear speed-up to the other sizes;
//! - **profile**: `GoalModel::options` for the accuracy goal (Courier's order), the
//!   first option fast enough, with models fitted on 70 % of the rows (seed `s`), so the
//!   rows the check reads are partly unseen.
//!
//! Ground truth for a plan (share `n`, batch `b`): the measured table's step time of the
//! fastest measured placement of `n` devices (at most 4 on a node) at local batch
//! `b / n`, times the steps of the job's epochs. A plan is **met** when that time is at
//! most the deadline, **missed** when above, **unmeasured** when the table has no such
//! row; a **false decline** is a declined job that some measured configuration (for
//! linear: at its batch) would have finished in time.

use crate::job_eval::load;
use pacer_control::job::goal::{Goal, GoalModel, GoalOption};
use pacer_control::job::{candidates, MeasuredTable};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{split_random, StepRow};
use std::path::PathBuf;

const SIZES: [u32; 5] = [1, 2, 4, 8, 16];
const PER_NODE: u32 = 4;
/// Deadlines as multiples of the job's measured time on 4 devices at the user's batch.
const FACTORS: [f64; 13] = [
    0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0,
];

/// `pacer-lab goal-eval`
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder with one sub-folder per application (placements.csv, scalability.csv,
    /// validation-*.csv).
    #[arg(default_value = "crates/sim/data/pollux")]
    pub traces: PathBuf,
    /// Seeds of the 70 % split the profile's models are fitted on.
    #[arg(long, default_value = "0,1,2", value_delimiter = ',')]
    pub seeds: Vec<u64>,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    cases: usize,
    admitted: usize,
    met: usize,
    missed: usize,
    unmeasured: usize,
    false_declines: usize,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.cases += o.cases;
        self.admitted += o.admitted;
        self.met += o.met;
        self.missed += o.missed;
        self.unmeasured += o.unmeasured;
        self.false_declines += o.false_declines;
    }

    fn line(&self, what: &str) -> String {
        format!(
            "{what:<8} cases {:>3}  admitted {:>3}  met {:>3}  missed {:>3}  unmeasured {:>2}  false declines {:>3}",
            self.cases, self.admitted, self.met, self.missed, self.unmeasured, self.false_declines
        )
    }
}

/// Measured time of `samples` at batch `b` on `n` devices (`None`: no row covers it).
fn truth(table: &MeasuredTable, b: f64, n: u32, samples: f64) -> Option<f64> {
    candidates(table, &[b], 1, n)
        .into_iter()
        .filter(|c| c.replicas() == n && c.config.max_per_node <= PER_NODE)
        .filter_map(|c| table.step_time(&c.config))
        .map(|step| samples / b * step)
        .reduce(f64::min)
}

/// Judges a plan: share `n` at batch `b` (`None`: declined); `could` says whether some
/// configuration would have met the deadline.
fn judge(
    t: &mut Tally,
    plan: Option<(u32, f64)>,
    d: f64,
    samples: f64,
    could: bool,
    table: &MeasuredTable,
) {
    t.cases += 1;
    let Some((n, b)) = plan else {
        t.false_declines += usize::from(could);
        return;
    };
    t.admitted += 1;
    match truth(table, b, n, samples) {
        Some(time) if time <= d => t.met += 1,
        Some(_) => t.missed += 1,
        None => t.unmeasured += 1,
    }
}

/// The fewest devices of `option` that meet `d` (`None`: none).
fn share(option: &GoalOption, d: f64) -> Option<u32> {
    option
        .levels
        .iter()
        .find(|l| option.samples / l.1 <= d)
        .map(|l| l.0)
}

fn eval_app(
    name: &str,
    rows: &[StepRow],
    conv: &ConvergenceModel,
    seeds: &[u64],
) -> anyhow::Result<(Tally, Tally)> {
    let table = MeasuredTable::new(rows);
    let epochs = conv.max_common_epochs();
    let samples = epochs * conv.epoch_samples;
    // The user's batch: the measured one with the best measured metric after the
    // epochs among those measured on 4 devices (what Courier picks without a deadline).
    let Some((b0, t4)) = conv
        .curves
        .iter()
        .filter_map(|c| Some((c, truth(&table, c.global_batch, 4, samples)?)))
        .reduce(|a, b| {
            if conv.better(b.0.at(samples), a.0.at(samples)) {
                b
            } else {
                a
            }
        })
        .map(|(c, t)| (c.global_batch, t))
    else {
        println!("{name}: no measured batch has a 4-device placement; left out");
        return Ok((Tally::default(), Tally::default()));
    };
    let grid: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
    let (mut lin, mut prof) = (Tally::default(), Tally::default());
    // The predicted metric of each admitted profile plan.
    let mut metrics: Vec<f64> = Vec::new();
    for &seed in seeds {
        let split = split_random(rows.len(), 0.3, seed);
        let (train, _) = split.pick(rows);
        let model = GoalModel::fit(&train, conv.clone(), seed)?;
        let options = model.options(Goal::Accuracy { epochs }, None, &SIZES, PER_NODE);
        for f in FACTORS {
            let d = t4 * f;
            // Linear: the fewest devices whose 4 / n of the 4-device time meets d.
            let n = SIZES.iter().copied().find(|&n| t4 * 4.0 / n as f64 <= d);
            let could = SIZES
                .iter()
                .any(|&n| truth(&table, b0, n, samples).is_some_and(|t| t <= d));
            judge(&mut lin, n.map(|n| (n, b0)), d, samples, could, &table);
            // Profile: the first option, in Courier's order, with a level fast enough.
            let chosen = options.iter().find_map(|o| share(o, d).map(|n| (n, o)));
            metrics.extend(chosen.map(|(_, o)| o.metric));
            let plan = chosen.map(|(n, o)| (n, o.global_batch));
            let could_any = grid.iter().any(|&b| {
                SIZES
                    .iter()
                    .any(|&n| truth(&table, b, n, samples).is_some_and(|t| t <= d))
            });
            judge(&mut prof, plan, d, samples, could_any, &table);
        }
    }
    println!("{name}: {epochs:.1} epochs, user's batch {b0}, 4-device time {t4:.0} s");
    println!("  {}", lin.line("linear"));
    println!("  {}", prof.line("profile"));
    let user = conv
        .curves
        .iter()
        .find(|c| c.global_batch == b0)
        .map_or(f64::NAN, |c| c.at(samples));
    let (lo, hi) = metrics
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &m| {
            (l.min(m), h.max(m))
        });
    println!(
        "  metric ({}): user's batch measured {user:.4}; profile plans predicted {lo:.4} … {hi:.4}, mean {:.4}",
        if conv.higher_is_better { "higher is better" } else { "lower is better" },
        metrics.iter().sum::<f64>() / metrics.len().max(1) as f64
    );
    Ok((lin, prof))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let apps = crate::app_traces::app_folders(&args.traces)?;
    let (mut lin, mut prof) = (Tally::default(), Tally::default());
    for app in apps {
        let name = app.file_name().unwrap().to_string_lossy().to_string();
        let (rows, conv) = load(&app).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let (l, p) = eval_app(&name, &rows, &conv, &args.seeds)?;
        lin.add(&l);
        prof.add(&p);
    }
    println!("TOTAL");
    println!("  {}", lin.line("linear"));
    println!("  {}", prof.line("profile"));
    Ok(())
}
