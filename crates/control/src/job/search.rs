//! Configuration search (Scavenger, Hemingway): placement × global batch × machine
//! type, scored by time and cost to reach a target metric (ALGORITHMS.md §2d).
//!
//! `time = samples_to_target(batch) / batch × step_time / speed(machine)` and
//! `cost = time × replicas × price(machine)`. Offline every candidate is predicted;
//! [`online`] instead profiles a few candidates — first a cost-aware D-optimal
//! design that brackets the candidates (as Ernest's `expt_design.py` chooses
//! experiments), then the model's predicted best until it is one already measured
//! — each for as few steps as its step time's confidence interval allows, and
//! commits. Its overhead is reported two ways ([`OnlineResult::overhead_strict`],
//! [`OnlineResult::overhead_credited`]): profiling steps are real steps of the job,
//! so whether their progress counts is a choice of accounting.

use super::{Candidate, MachineType, MeasuredTable};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{fit, ItertimeError, ModelKind, StepModel, StepRow};
use serde::{Deserialize, Serialize};

/// What to minimise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Time,
    Cost,
}

/// A candidate with its time and cost to reach the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Costed {
    pub candidate: Candidate,
    pub time_s: f64,
    pub cost_usd: f64,
}

impl Costed {
    pub fn value(&self, o: Objective) -> f64 {
        match o {
            Objective::Time => self.time_s,
            Objective::Cost => self.cost_usd,
        }
    }
}

/// Time and cost from a step time; `None` if the batch never reaches `target`.
pub fn cost_of(
    c: &Candidate,
    step_s: f64,
    conv: &ConvergenceModel,
    target: f64,
    machines: &[MachineType],
) -> Option<Costed> {
    let samples = conv.samples_to(target, c.global_batch)?;
    let m = &machines[c.machine];
    let time_s = samples / c.global_batch * step_s / m.speed;
    Some(Costed {
        candidate: c.clone(),
        time_s,
        cost_usd: time_s / 3600.0 * c.replicas() as f64 * m.usd_per_gpu_hour,
    })
}

/// Predicted time/cost of every candidate.
///
/// A candidate whose step time the model extrapolates (its placement was never
/// measured on both sides of its local batch, [`StepModel::interpolates`]) is
/// scored pessimistically, at `step × (1 + extrapolation_margin)`: between a
/// near-tie of an extrapolated and an interpolated candidate, bet on the one the
/// measurements support. Pass the model's held-out p90 relative error, or 0 to
/// trust every prediction alike. (ncf: placement `3` measured up to b = 5803 in
/// training was predicted at b = 10923 from a curve that does not know the step
/// up in sync time between b = 8207 and 11606 — 1.6× slower than predicted.)
pub fn predict_all(
    cands: &[Candidate],
    model: &StepModel,
    conv: &ConvergenceModel,
    target: f64,
    machines: &[MachineType],
    extrapolation_margin: f64,
) -> Vec<Costed> {
    cands
        .iter()
        .filter_map(|c| {
            let mut step = model.step_time(&c.config);
            if !model.interpolates(&c.config) {
                step *= 1.0 + extrapolation_margin.max(0.0);
            }
            cost_of(c, step, conv, target, machines)
        })
        .collect()
}

/// Measured time/cost (candidates at measured batches the table covers).
pub fn measure_all(
    cands: &[Candidate],
    table: &MeasuredTable,
    conv: &ConvergenceModel,
    target: f64,
    machines: &[MachineType],
) -> Vec<Costed> {
    cands
        .iter()
        .filter(|c| {
            conv.curves
                .iter()
                .any(|k| (k.global_batch - c.global_batch).abs() < 1e-9)
        })
        .filter_map(|c| cost_of(c, table.step_time(&c.config)?, conv, target, machines))
        .collect()
}

/// The lowest `objective`.
pub fn best(all: &[Costed], objective: Objective) -> Option<&Costed> {
    all.iter()
        .min_by(|a, b| a.value(objective).total_cmp(&b.value(objective)))
}

/// Time/cost Pareto set, by increasing time.
pub fn pareto(all: &[Costed]) -> Vec<Costed> {
    let mut v: Vec<&Costed> = all.iter().collect();
    v.sort_by(|a, b| {
        a.time_s
            .total_cmp(&b.time_s)
            .then(a.cost_usd.total_cmp(&b.cost_usd))
    });
    let mut out: Vec<Costed> = Vec::new();
    for c in v {
        if out.last().is_none_or(|l| c.cost_usd < l.cost_usd) {
            out.push(c.clone());
        }
    }
    out
}

/// Features of a candidate for the experiment design: the linear terms of the
/// Pollux step-time model (`α_c + β_c·b` compute, `α + β·r` network inside one
/// node and across nodes), each scaled to [0, 1] over the candidates. A D-optimal
/// design over them brackets the candidates: smallest and largest local batch,
/// fewest and most replicas on one node and across nodes, so the fitted model
/// interpolates towards the (usually many-replica) time optimum instead of
/// extrapolating to it.
fn features(c: &Candidate, max_bsz: f64, max_replicas: f64) -> [f64; 6] {
    let r = c.replicas() as f64 / max_replicas;
    let intra = if c.config.nodes == 1 && c.replicas() > 1 {
        1.0
    } else {
        0.0
    };
    let inter = if c.config.nodes > 1 { 1.0 } else { 0.0 };
    [
        1.0,
        c.config.local_bsz / max_bsz,
        intra,
        intra * r,
        inter,
        inter * r,
    ]
}

/// Greedy D-optimal design: repeatedly add the candidate with the largest
/// `ln(1 + φᵀA⁻¹φ) / cost`, `A = λI + Σ φφᵀ`, as Ernest's `expt_design.py`
/// chooses experiments. `cost(c)` is what profiling `c` for one step costs in the
/// currency of the objective; ties go to the earlier candidate.
pub fn design_with(cands: &[Candidate], k: usize, cost: impl Fn(&Candidate) -> f64) -> Vec<usize> {
    use nalgebra::{DMatrix, DVector};
    const D: usize = 6;
    let max_bsz = cands
        .iter()
        .map(|c| c.config.local_bsz)
        .fold(f64::MIN_POSITIVE, f64::max);
    let max_replicas = cands.iter().map(|c| c.replicas()).max().unwrap_or(1) as f64;
    let phis: Vec<DVector<f64>> = cands
        .iter()
        .map(|c| DVector::from_row_slice(&features(c, max_bsz, max_replicas)))
        .collect();
    let mut a = DMatrix::<f64>::identity(D, D) * 1e-3;
    let mut chosen: Vec<usize> = Vec::new();
    for _ in 0..k.min(cands.len()) {
        let Some(inv) = a.clone().try_inverse() else {
            break;
        };
        let mut best: Option<(f64, usize)> = None;
        for (i, c) in cands.iter().enumerate() {
            if chosen.contains(&i) {
                continue;
            }
            let phi = &phis[i];
            let gain = (1.0 + (phi.transpose() * &inv * phi)[(0, 0)]).ln() / cost(c).max(1e-12);
            if best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, i));
            }
        }
        let Some((_, i)) = best else { break };
        a += &phis[i] * phis[i].transpose();
        chosen.push(i);
    }
    chosen
}

/// [`design_with`] at unit cost per candidate.
pub fn design(cands: &[Candidate], k: usize) -> Vec<usize> {
    design_with(cands, k, |_| 1.0)
}

/// How long one configuration is profiled: `warmup_steps` are run (and paid
/// for) but not measured, as the first steps after a (re)start are not
/// representative; then steps are measured until at least `min_steps` and the
/// 95% confidence half-width of the mean step time is within `rel_ci` of the
/// mean, or `max_steps` (sequential stopping: a steady step time is measured in
/// few steps, a jittery one in more).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRule {
    pub warmup_steps: usize,
    pub min_steps: usize,
    pub max_steps: usize,
    pub rel_ci: f64,
}

impl StepRule {
    /// Exactly `n` measured steps, no warm-up (the rule before sequential stopping).
    pub fn fixed(n: usize) -> Self {
        StepRule {
            warmup_steps: 0,
            min_steps: n.max(1),
            max_steps: n.max(1),
            rel_ci: 0.0,
        }
    }
}

impl Default for StepRule {
    /// 2 warm-up steps, then 5 to 20 measured steps until the mean is known to
    /// ±3% (95%): finer than the 5% the search is asked to be within.
    fn default() -> Self {
        StepRule {
            warmup_steps: 2,
            min_steps: 5,
            max_steps: 20,
            rel_ci: 0.03,
        }
    }
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        d if d <= 30 => T[d - 1],
        _ => 1.96,
    }
}

/// Settings of [`online`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OnlineOptions {
    pub kind: ModelKind,
    pub objective: Objective,
    /// Configurations chosen by the experiment design before the first fit.
    pub initial: usize,
    /// Most configurations profiled in all (design plus exploitation).
    pub max_profiles: usize,
    pub steps: StepRule,
}

/// One profiled configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub candidate: Candidate,
    /// Steps run, warm-up included.
    pub steps: usize,
    /// Mean measured step and sync time (reference machine).
    pub step_s: f64,
    pub sync_s: f64,
    /// Wall time spent on this configuration (all steps, on its machine).
    pub time_s: f64,
    /// Fraction of the job's training these steps did, were they kept as progress:
    /// `steps × batch / samples_to(target, batch)` (0 if the batch never reaches it).
    pub progress: f64,
}

/// Result of an online search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OnlineResult {
    /// In the order profiled.
    pub profiles: Vec<Profile>,
    /// Seconds spent profiling.
    pub profile_time_s: f64,
    /// Sum of the profiles' `progress`.
    pub profile_progress: f64,
    /// How many profiles the design chose (the rest chased the predicted best).
    pub designed: usize,
    pub choice: Costed,
    pub model: StepModel,
}

impl OnlineResult {
    /// Strict accounting: every profiling step is overhead; the job then trains
    /// from scratch on the choice, taking `job_time_s`. Returns the overhead share
    /// of the total.
    pub fn overhead_strict(&self, job_time_s: f64) -> f64 {
        self.profile_time_s / (self.profile_time_s + job_time_s)
    }

    /// Credited accounting: profiling steps are real training steps of the job
    /// and their (efficiency-weighted) progress is kept, so the choice only has
    /// `1 − progress` of the job left. Returns `(total time, overhead share)`,
    /// the overhead being the time beyond running the choice from the start.
    pub fn overhead_credited(&self, job_time_s: f64) -> (f64, f64) {
        let left = (1.0 - self.profile_progress).max(0.0);
        let total = self.profile_time_s + left * job_time_s;
        (total, ((total - job_time_s) / total).max(0.0))
    }
}

/// Median absolute relative error of `kind` predicting each row from the others
/// (0 if there are too few rows to leave one out).
fn loo_median_error(kind: ModelKind, rows: &[StepRow]) -> f64 {
    let mut errs: Vec<f64> = (0..rows.len())
        .filter_map(|i| {
            let rest: Vec<StepRow> = rows
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, r)| r.clone())
                .collect();
            let m = fit(kind, &rest).ok()?;
            Some((m.step_time(&rows[i].config) / rows[i].step_time_s - 1.0).abs())
        })
        .filter(|e| e.is_finite())
        .collect();
    errs.sort_by(|a, b| a.total_cmp(b));
    if errs.is_empty() {
        0.0
    } else {
        pacer_predict::itertime::quantile(&errs, 0.5)
    }
}

/// Key of a step-time measurement: placement and local batch (not the machine,
/// whose speed is known).
fn config_key(c: &Candidate) -> (u64, u64) {
    (c.config.group, c.config.local_bsz.to_bits())
}

/// Online search: profile the `initial` configurations of a cost-aware D-optimal
/// design ([`design_with`]) through `measure_step`, fit `kind`, and score every
/// candidate (profiled ones by their measurement, the rest by the model). While
/// the best-scored candidate has not been profiled, profile it and refit (its
/// steps are the job's own if it stays the choice); stop when the best is a
/// measured one — the predicted best stopped changing — or after `max_profiles`.
///
/// `measure_step(c, i)` returns step `i`'s `(step, sync)` time for `c` on the
/// reference machine (speed 1; a real run divides by the machine's speed), or
/// `None` if `c` cannot run. Configurations are profiled on the machine type
/// cheapest to profile on for the objective (fastest for time, lowest price per
/// unit of work for cost); the step time on other types follows from their speed.
pub fn online(
    cands: &[Candidate],
    mut measure_step: impl FnMut(&Candidate, usize) -> Option<(f64, f64)>,
    conv: &ConvergenceModel,
    target: f64,
    machines: &[MachineType],
    opts: &OnlineOptions,
) -> Result<OnlineResult, ItertimeError> {
    let per_work = |m: &MachineType| match opts.objective {
        Objective::Time => 1.0 / m.speed,
        Objective::Cost => m.usd_per_gpu_hour / m.speed,
    };
    let probe = (0..machines.len())
        .min_by(|&a, &b| per_work(&machines[a]).total_cmp(&per_work(&machines[b])))
        .unwrap_or(0);
    let pool: Vec<Candidate> = cands
        .iter()
        .filter(|c| c.machine == probe)
        .cloned()
        .collect();
    // Cost of a profiling step before anything is measured: wall time per step is
    // unknown and similar across configurations (within a few ×), so for time
    // every step costs 1; for cost a step costs GPUs × price.
    let cost = |c: &Candidate| match opts.objective {
        Objective::Time => 1.0,
        Objective::Cost => c.replicas() as f64 * per_work(&machines[c.machine]),
    };
    let rule = opts.steps;
    let mut rows: Vec<StepRow> = Vec::new();
    let mut profiles: Vec<Profile> = Vec::new();
    let mut measured: std::collections::BTreeMap<(u64, u64), f64> = Default::default();
    let mut profile = |c: &Candidate, rows: &mut Vec<StepRow>, profiles: &mut Vec<Profile>| {
        let mut wall = 0.0;
        let mut steps = Vec::new();
        let mut syncs = Vec::new();
        let mut i = 0;
        loop {
            let (t, sync) = measure_step(c, i)?;
            i += 1;
            wall += t / machines[c.machine].speed;
            if i <= rule.warmup_steps {
                continue;
            }
            steps.push(t);
            syncs.push(sync);
            let n = steps.len();
            if n >= rule.max_steps.max(1) {
                break;
            }
            if n >= rule.min_steps.max(2) {
                let mean = steps.iter().sum::<f64>() / n as f64;
                let var = steps.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
                if t95(n - 1) * (var / n as f64).sqrt() <= rule.rel_ci * mean {
                    break;
                }
            }
        }
        let n = steps.len() as f64;
        let step_s = steps.iter().sum::<f64>() / n;
        let sync_s = syncs.iter().sum::<f64>() / n;
        let progress = conv
            .samples_to(target, c.global_batch)
            .map_or(0.0, |s| i as f64 * c.global_batch / s);
        rows.push(StepRow {
            config: c.config,
            step_time_s: step_s,
            sync_time_s: sync_s,
            source: format!("profile {}", rows.len() + 1),
        });
        profiles.push(Profile {
            candidate: c.clone(),
            steps: i,
            step_s,
            sync_s,
            time_s: wall,
            progress,
        });
        Some(step_s)
    };
    for i in design_with(&pool, opts.initial, cost) {
        if let Some(t) = profile(&pool[i], &mut rows, &mut profiles) {
            measured.insert(config_key(&pool[i]), t);
        }
    }
    let designed = profiles.len();
    let kind = opts.kind;
    let no_choice = || ItertimeError::NoConvergence {
        model: kind.name(),
        reason: "no candidate reaches the target metric".into(),
    };
    let (model, choice) = loop {
        let model = fit(kind, &rows)?;
        // Unmeasured candidates are scored optimistically, `1 − ε` times their
        // prediction, ε the model's leave-one-out median error on what it measured:
        // one that could beat the best measurement within the model's typical error
        // is worth measuring (the Pollux form cannot tell 32 replicas on 8 nodes
        // from 32 on 16, which differ by 10–20%).
        let eps = loo_median_error(kind, &rows).min(0.5);
        let mut scored: Vec<(Costed, f64)> = Vec::new();
        for c in cands {
            let (step, optimism) = match measured.get(&config_key(c)) {
                Some(&t) => (t, 1.0),
                None => (model.step_time(&c.config), 1.0 - eps),
            };
            if let Some(x) = cost_of(c, step, conv, target, machines) {
                let v = x.value(opts.objective) * optimism;
                scored.push((x, v));
            }
        }
        let measured_best = scored
            .iter()
            .filter(|(x, _)| measured.contains_key(&config_key(&x.candidate)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let hopeful = scored.iter().min_by(|a, b| a.1.total_cmp(&b.1));
        let Some((next, _)) = hopeful else {
            return Err(no_choice());
        };
        let key = config_key(&next.candidate);
        let done = measured.contains_key(&key) || profiles.len() >= opts.max_profiles;
        if done {
            // Commit to the best measured, or (capped) to the best prediction.
            let plain = scored
                .iter()
                .filter(|(x, _)| !measured.contains_key(&config_key(&x.candidate)))
                .map(|(x, _)| x)
                .min_by(|a, b| a.value(opts.objective).total_cmp(&b.value(opts.objective)));
            let choice = match (measured_best, plain) {
                (Some((m, _)), Some(p)) if p.value(opts.objective) < m.value(opts.objective) => {
                    p.clone()
                }
                (Some((m, _)), _) => m.clone(),
                (None, Some(p)) => p.clone(),
                (None, None) => return Err(no_choice()),
            };
            break (model, choice);
        }
        let c = Candidate {
            machine: probe,
            ..next.candidate.clone()
        };
        match profile(&c, &mut rows, &mut profiles) {
            Some(t) => measured.insert(key, t),
            // Cannot run: never propose it again.
            None => measured.insert(key, f64::INFINITY),
        };
    };
    Ok(OnlineResult {
        profile_time_s: profiles.iter().map(|p| p.time_s).sum(),
        profile_progress: profiles.iter().map(|p| p.progress).sum(),
        profiles,
        designed,
        choice,
        model,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{batch_grid, candidates, testdata};
    use super::*;

    fn machines() -> Vec<MachineType> {
        vec![
            MachineType {
                name: "a".into(),
                usd_per_gpu_hour: 3.0,
                speed: 1.0,
            },
            MachineType {
                name: "b".into(),
                usd_per_gpu_hour: 1.0,
                speed: 0.5,
            },
        ]
    }

    #[test]
    fn offline_search_matches_the_oracle_on_a_known_model() {
        let rows = testdata::rows();
        let table = MeasuredTable::new(&rows);
        let conv = ConvergenceModel::fit(&testdata::curves()).unwrap();
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let ms = machines();
        let cands = candidates(&table, &batch_grid(&measured, false), ms.len(), 64);
        let target = 0.85;
        let model = fit(ModelKind::PacerTable, &rows).unwrap();
        let pred = predict_all(&cands, &model, &conv, target, &ms, 0.0);
        let meas = measure_all(&cands, &table, &conv, target, &ms);
        for o in [Objective::Time, Objective::Cost] {
            let p = best(&pred, o).unwrap();
            let m = best(&meas, o).unwrap();
            let pm = meas.iter().find(|x| x.candidate == p.candidate).unwrap();
            assert!(pm.value(o) <= m.value(o) * 1.05, "{o:?}: {pm:?} vs {m:?}");
        }
        // Cost-optimal uses the cheap machine here, time-optimal the fast one.
        assert_eq!(best(&meas, Objective::Time).unwrap().candidate.machine, 0);
        let front = pareto(&meas);
        assert!(front
            .windows(2)
            .all(|w| w[0].time_s <= w[1].time_s && w[0].cost_usd > w[1].cost_usd));
    }

    #[test]
    fn extrapolated_candidates_are_scored_pessimistically() {
        let rows = testdata::rows();
        let table = MeasuredTable::new(&rows);
        let conv = ConvergenceModel::fit(&testdata::curves()).unwrap();
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let ms = machines();
        let cands = candidates(&table, &batch_grid(&measured, false), 1, 64);
        // The model never sees one placement: every prediction there extrapolates.
        let unseen = rows[0].config.group;
        let train: Vec<StepRow> = rows
            .iter()
            .filter(|r| r.config.group != unseen)
            .cloned()
            .collect();
        let model = fit(ModelKind::PacerTable, &train).unwrap();
        let plain = predict_all(&cands, &model, &conv, 0.85, &ms, 0.0);
        let guarded = predict_all(&cands, &model, &conv, 0.85, &ms, 0.25);
        assert_eq!(plain.len(), guarded.len());
        let (mut n_unseen, mut n_inside) = (0, 0);
        for (a, b) in plain.iter().zip(&guarded) {
            let ratio = b.time_s / a.time_s;
            if a.candidate.config.group == unseen {
                n_unseen += 1;
                assert!((ratio - 1.25).abs() < 1e-12, "{ratio}");
            } else if model.interpolates(&a.candidate.config) {
                n_inside += 1;
                assert!((ratio - 1.0).abs() < 1e-12, "{ratio}");
            }
        }
        assert!(n_unseen > 0 && n_inside > 0, "{n_unseen} {n_inside}");
    }

    fn setup() -> (
        MeasuredTable,
        ConvergenceModel,
        Vec<Candidate>,
        Vec<MachineType>,
    ) {
        let rows = testdata::rows();
        let table = MeasuredTable::new(&rows);
        let conv = ConvergenceModel::fit(&testdata::curves()).unwrap();
        let measured: Vec<f64> = conv.curves.iter().map(|c| c.global_batch).collect();
        let ms = machines();
        let cands = candidates(&table, &batch_grid(&measured, false), ms.len(), 64);
        (table, conv, cands, ms)
    }

    fn opts(kind: ModelKind, steps: StepRule) -> OnlineOptions {
        OnlineOptions {
            kind,
            objective: Objective::Time,
            initial: 6,
            max_profiles: 10,
            steps,
        }
    }

    #[test]
    fn design_brackets_replicas_and_batches() {
        let (_, _, cands, _) = setup();
        let pool: Vec<Candidate> = cands.into_iter().filter(|c| c.machine == 0).collect();
        let chosen: Vec<&Candidate> = design(&pool, 6).into_iter().map(|i| &pool[i]).collect();
        let max_r = pool.iter().map(|c| c.replicas()).max().unwrap();
        let max_b = pool.iter().map(|c| c.config.local_bsz).fold(0.0, f64::max);
        let min_b = pool
            .iter()
            .map(|c| c.config.local_bsz)
            .fold(f64::INFINITY, f64::min);
        assert!(chosen.iter().any(|c| c.replicas() == max_r), "{chosen:?}");
        assert!(chosen.iter().any(|c| c.replicas() == 1));
        assert!(chosen
            .iter()
            .any(|c| c.config.nodes == 1 && c.replicas() > 1));
        assert!(chosen.iter().any(|c| c.config.local_bsz == max_b));
        assert!(chosen.iter().any(|c| c.config.local_bsz == min_b));
        // Priced by GPUs, the same design stays on few replicas.
        let cheap: Vec<&Candidate> = design_with(&pool, 6, |c| c.replicas() as f64)
            .into_iter()
            .map(|i| &pool[i])
            .collect();
        assert!(cheap.iter().all(|c| c.replicas() < max_r), "{cheap:?}");
    }

    #[test]
    fn sequential_stopping_measures_steady_steps_briefly_and_jittery_ones_longer() {
        let (table, conv, cands, ms) = setup();
        let rule = StepRule::default();
        let run = |jitter: f64| {
            online(
                &cands,
                |c, i| {
                    let (t, s) = table.step_and_sync(&c.config)?;
                    let f = 1.0 + if i % 2 == 0 { jitter } else { -jitter };
                    Some((t * f, s))
                },
                &conv,
                0.85,
                &ms,
                &opts(ModelKind::Pollux, rule),
            )
            .unwrap()
        };
        let steady = run(0.0);
        assert!(steady
            .profiles
            .iter()
            .all(|p| p.steps == rule.warmup_steps + rule.min_steps));
        let jittery = run(0.2);
        assert!(jittery
            .profiles
            .iter()
            .all(|p| p.steps == rule.warmup_steps + rule.max_steps));
        // Warm-up steps are paid for but not measured.
        let p = &steady.profiles[0];
        let t = table.step_time(&p.candidate.config).unwrap();
        assert!((p.step_s - t).abs() < 1e-12);
        assert!((p.time_s - t * p.steps as f64).abs() < 1e-9);
        let fixed = run(0.0);
        assert_eq!(fixed, steady, "deterministic");
    }

    #[test]
    fn online_chases_the_predicted_best_until_it_is_measured() {
        let (table, conv, cands, ms) = setup();
        let r = online(
            &cands,
            |c, _| table.step_and_sync(&c.config),
            &conv,
            0.85,
            &ms,
            &opts(ModelKind::Pollux, StepRule::default()),
        )
        .unwrap();
        assert_eq!(r.designed, 6);
        assert!(r.profiles.len() <= 10);
        // Stopped because the best is measured, not because of the cap.
        assert!(r.profiles.len() < 10, "{}", r.profiles.len());
        assert!(r
            .profiles
            .iter()
            .any(|p| config_key(&p.candidate) == config_key(&r.choice.candidate)));
        let meas = measure_all(&cands, &table, &conv, 0.85, &ms);
        let oracle = best(&meas, Objective::Time).unwrap().time_s;
        let chosen = meas
            .iter()
            .find(|m| m.candidate == r.choice.candidate)
            .unwrap()
            .time_s;
        assert!(chosen <= oracle * 1.05, "{chosen} vs {oracle}");
        // Accounting: credited overhead is below strict, equal without progress.
        assert!(r.profile_progress > 0.0);
        let strict = r.overhead_strict(chosen);
        let (total, credited) = r.overhead_credited(chosen);
        assert!(credited < strict && total < r.profile_time_s + chosen);
        let none = OnlineResult {
            profile_progress: 0.0,
            ..r.clone()
        };
        assert!((none.overhead_credited(chosen).1 - strict).abs() < 1e-12);
    }
}
