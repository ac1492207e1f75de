//! Configuration search (Scavenger, Hemingway): placement × global batch × machine
//! type, scored by time and cost to reach a target metric (docs/algorithms.md §2d).
//!
//! `time = samples_to_target(batch) / batch × step_time / speed(machine)` and
//! `cost = time × replicas × price(machine)`. Offline every candidate is predicted;
//! [`online`] instead profiles a few candidates — first a cost-aware D-optimal
//! design that brackets the candidates (as Ernest's `expt_design.py` chooses
//! experiments), then the model's predicted best until it is one already measured
//! — each for as few steps as its step time's confidence interval allows, and
//! commits; a profiling budget ([`OnlineOptions::budget_frac`]) stops it early
//! when profiling would not pay for itself on a short job. Its overhead is
//! reported two ways ([`OnlineResult::overhead_strict`],
//! [`OnlineResult::overhead_credited`]): profiling steps are real steps of the job,
//! so whether their progress counts is a choice of accounting.

mod design;
mod online;

pub use design::{design, design_with};
pub use online::{online, OnlineOptions, OnlineResult, Profile, StepRule};

use super::{Candidate, MachineType, MeasuredTable};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::StepModel;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{batch_grid, candidates, testdata};
    use online::config_key;
    use pacer_predict::itertime::{fit, ModelKind, StepRow};

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
            budget_frac: None,
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
        // Greedy: a shorter design is a prefix of a longer one, so a design cut
        // short by the profiling budget keeps its most informative configurations.
        let long = design(&pool, 6);
        for k in 1..6 {
            assert_eq!(design(&pool, k), long[..k]);
        }
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

    /// The true job time (table step times) of a result's choice.
    fn job_time(r: &OnlineResult, table: &MeasuredTable, conv: &ConvergenceModel) -> f64 {
        let ms = machines();
        let step = table.step_time(&r.choice.candidate.config).unwrap();
        cost_of(&r.choice.candidate, step, conv, 0.85, &ms)
            .unwrap()
            .time_s
    }

    /// The Pollux search with the default step rule at `budget_frac`, measuring
    /// the table's own step times.
    fn run_with_budget(
        table: &MeasuredTable,
        conv: &ConvergenceModel,
        cands: &[Candidate],
        ms: &[MachineType],
        budget_frac: Option<f64>,
    ) -> OnlineResult {
        online(
            cands,
            |c, _| table.step_and_sync(&c.config),
            conv,
            0.85,
            ms,
            &OnlineOptions {
                budget_frac,
                ..opts(ModelKind::Pollux, StepRule::default())
            },
        )
        .unwrap()
    }

    #[test]
    fn without_a_budget_the_search_is_unchanged() {
        let (table, conv, cands, ms) = setup();
        let run = |budget_frac| run_with_budget(&table, &conv, &cands, &ms, budget_frac);
        let r = run(None);
        // Recorded from the search before the budget existed (commit 76fad74).
        let profiled: Vec<(u32, u32, f64, usize)> = r
            .profiles
            .iter()
            .map(|p| {
                let c = &p.candidate.config;
                (c.nodes, c.replicas, c.local_bsz, p.steps)
            })
            .collect();
        assert_eq!(
            profiled,
            [
                (1, 2, 256.0, 7),
                (4, 16, 8.0, 7),
                (1, 1, 256.0, 7),
                (1, 4, 8.0, 7),
                (2, 8, 8.0, 7),
                (1, 2, 16.0, 7),
                (4, 16, 32.0, 7),
            ]
        );
        assert!(
            (r.profile_time_s - 6.72).abs() < 1e-9,
            "{}",
            r.profile_time_s
        );
        let c = &r.choice.candidate;
        assert_eq!(
            (c.config.nodes, c.replicas(), c.config.local_bsz, c.machine),
            (4, 16, 32.0, 0)
        );
        assert!((r.choice.time_s - 3.296_330_683_943_131_7).abs() < 1e-9);
        assert!(!r.budget_stopped && r.model.is_some());
        // A budget of the whole run never binds.
        let all = run(Some(1.0));
        assert_eq!(
            (all.profiles, all.choice, all.budget_stopped),
            (r.profiles, r.choice, false)
        );
    }

    #[test]
    fn budget_stops_a_tiny_job_early_within_the_budget() {
        // The synthetic job reaches its target in ~3.3 s, about the time of 11
        // profiling steps of the first designed configuration: unbudgeted, the
        // search spends twice the job on profiling.
        let (table, conv, cands, ms) = setup();
        let run = |budget_frac| run_with_budget(&table, &conv, &cands, &ms, budget_frac);
        let free = run(None);
        let free_overhead = free.overhead_strict(job_time(&free, &table, &conv));
        assert!(free_overhead > 0.6, "{free_overhead}");
        let rule = StepRule::default();
        for f in [0.4, 0.5] {
            let r = run(Some(f));
            assert!(r.budget_stopped, "{f}");
            assert!(
                r.profiles.len() < free.profiles.len(),
                "{f}: {}",
                r.profiles.len()
            );
            assert!(r.designed < 6, "{f}: the design was cut short");
            assert!(r
                .profiles
                .iter()
                .all(|p| p.steps >= rule.warmup_steps + rule.min_steps));
            let overhead = r.overhead_strict(job_time(&r, &table, &conv));
            assert!(overhead <= f, "{f}: strict overhead {overhead}");
        }
        // Jittery steps are measured to `max_steps` (20; 6.4 s for the first
        // configuration alone, 66% of the run): the budget ends them earlier.
        let jittery = online(
            &cands,
            |c, i| {
                let (t, s) = table.step_and_sync(&c.config)?;
                Some((t * if i % 2 == 0 { 1.2 } else { 0.8 }, s))
            },
            &conv,
            0.85,
            &ms,
            &OnlineOptions {
                budget_frac: Some(0.5),
                ..opts(ModelKind::Pollux, rule)
            },
        )
        .unwrap();
        let steps: Vec<usize> = jittery.profiles.iter().map(|p| p.steps).collect();
        assert!(
            steps
                .iter()
                .any(|&n| n < rule.warmup_steps + rule.max_steps),
            "{steps:?}"
        );
        assert!(steps
            .iter()
            .all(|&n| n >= rule.warmup_steps + rule.min_steps));
        assert!(jittery.budget_stopped);
        let overhead = jittery.overhead_strict(job_time(&jittery, &table, &conv));
        assert!(overhead <= 0.5, "{overhead}");
        // A budget outside (0, 1] is an error, not a silent default.
        for bad in [0.0, -0.1, 1.5, f64::NAN] {
            let e = online(
                &cands,
                |c, _| table.step_and_sync(&c.config),
                &conv,
                0.85,
                &ms,
                &OnlineOptions {
                    budget_frac: Some(bad),
                    ..opts(ModelKind::Pollux, rule)
                },
            )
            .unwrap_err();
            assert!(e.to_string().contains("budget_frac"), "{e}");
        }
    }
}
