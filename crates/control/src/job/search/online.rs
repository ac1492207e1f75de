//! Online configuration search: profile a bracketing design, then the predicted
//! best until it is one already measured, within a profiling budget.

use super::{cost_of, design_with, Costed, Objective};
use crate::job::{Candidate, MachineType};
use pacer_predict::convergence::ConvergenceModel;
use pacer_predict::itertime::{fit, ItertimeError, ModelKind, StepModel, StepRow};
use serde::{Deserialize, Serialize};

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
    /// Profiling budget as a share of the whole run, in the strict accounting
    /// ([`OnlineResult::overhead_strict`]): a configuration is profiled only if
    /// `profiling / (profiling + T̂) ≤ budget_frac` is expected to hold after it,
    /// `T̂` being the optimistic job time of the search's current best (see
    /// [`online`]). In (0, 1], else [`online`] returns an error; `None` profiles
    /// regardless of the job's length.
    pub budget_frac: Option<f64>,
}

impl Default for OnlineOptions {
    /// Pollux model, time objective, 6 designed and at most 12 configurations,
    /// the default [`StepRule`], and profiling at most 10% of the run: the
    /// natural reading of "search overhead ≤ 10%". The budget is not tuned per
    /// application (docs/job-models.md shows 5%, 10%, 20% and none).
    fn default() -> Self {
        OnlineOptions {
            kind: ModelKind::Pollux,
            objective: Objective::Time,
            initial: 6,
            max_profiles: 12,
            steps: StepRule::default(),
            budget_frac: Some(0.10),
        }
    }
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
    /// The profiling budget ([`OnlineOptions::budget_frac`]) cut the search
    /// short: a designed configuration was skipped, or the predicted best was not
    /// profiled, or a profile was measured for fewer steps than [`StepRule`]
    /// would have taken (never fewer than `min_steps`).
    pub budget_stopped: bool,
    pub choice: Costed,
    /// The model fitted on every profile; `None` only if the budget stopped the
    /// search before `kind` could be fitted (the choice is then the best measured).
    pub model: Option<StepModel>,
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

/// Mean measured step time by [`config_key`].
type Measured = std::collections::BTreeMap<(u64, u64), f64>;

/// Key of a step-time measurement: placement and local batch (not the machine,
/// whose speed is known).
pub(super) fn config_key(c: &Candidate) -> (u64, u64) {
    (c.config.group, c.config.local_bsz.to_bits())
}

/// Every candidate scored for the search: a profiled configuration by its
/// measurement, the rest by `model` (skipped without one) times `1 − eps`.
/// Returns `(costed, ranking value, optimism factor)`.
#[allow(clippy::too_many_arguments)]
fn score_all(
    cands: &[Candidate],
    model: Option<&StepModel>,
    measured: &Measured,
    eps: f64,
    conv: &ConvergenceModel,
    target: f64,
    machines: &[MachineType],
    objective: Objective,
) -> Vec<(Costed, f64, f64)> {
    let mut scored = Vec::new();
    for c in cands {
        let (step, optimism) = match (measured.get(&config_key(c)), model) {
            (Some(&t), _) => (t, 1.0),
            (None, Some(m)) => (m.step_time(&c.config), 1.0 - eps),
            (None, None) => continue,
        };
        if let Some(x) = cost_of(c, step, conv, target, machines) {
            let v = x.value(objective) * optimism;
            scored.push((x, v, optimism));
        }
    }
    scored
}

/// Online search: profile the `initial` configurations of a cost-aware D-optimal
/// design ([`design_with`]) through `measure_step`, fit `kind`, and score every
/// candidate (profiled ones by their measurement, the rest by the model). While
/// the best-scored candidate has not been profiled, profile it and refit (its
/// steps are the job's own if it stays the choice); stop when the best is a
/// measured one — the predicted best stopped changing — or after `max_profiles`.
///
/// With a profiling budget `f` ([`OnlineOptions::budget_frac`]) the search also
/// weighs profiling against the job it is for. Strict overhead `P / (P + T) ≤ f`
/// is `P ≤ f / (1 − f) · T`, so before every configuration after the first it
/// estimates `T̂`, the optimistic job time of its current best (the lowest
/// score, unmeasured candidates at `1 − ε` times their prediction: if the search
/// finds what it hopes for, the job is that short), and profiles the next
/// configuration only if `P` plus that configuration's least cost — warm-up plus
/// `min_steps` steps at its predicted step time — stays within `f / (1 − f) · T̂`.
/// In the design phase the model is refitted after each profile for this
/// estimate; if `kind` cannot be fitted yet, `T̂` is the best measured time and
/// the next step time the slowest measured one. While profiling, measured steps
/// also stop (after `min_steps`) when the next one would overrun the allowance,
/// which then also counts the profiled configuration's own job time. Whatever
/// stops the search, it commits as it does at `max_profiles`, and
/// [`OnlineResult::budget_stopped`] says whether the budget did. The first
/// configuration is always profiled: a job shorter than about `(warm-up +
/// min_steps) / f` steps cannot be searched online within `f`.
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
    if let Some(f) = opts.budget_frac {
        if !(f > 0.0 && f <= 1.0) {
            return Err(ItertimeError::BadOption {
                name: "budget_frac",
                reason: format!("must be in (0, 1], got {f}"),
            });
        }
    }
    let search = Search::new(cands, conv, target, machines, opts);
    let mut p = Progress::default();
    search.design(&mut measure_step, &mut p);
    let designed = p.profiles.len();
    let (model, choice) = search.exploit(&mut measure_step, &mut p)?;
    let profiles = p.profiles;
    Ok(OnlineResult {
        profile_time_s: profiles.iter().map(|p| p.time_s).sum(),
        profile_progress: profiles.iter().map(|p| p.progress).sum(),
        profiles,
        designed,
        budget_stopped: p.budget_stopped,
        choice,
        model,
    })
}

/// The fixed inputs of one [`online`] search.
struct Search<'a> {
    cands: &'a [Candidate],
    conv: &'a ConvergenceModel,
    target: f64,
    machines: &'a [MachineType],
    opts: &'a OnlineOptions,
    /// The machine type configurations are profiled on.
    probe: usize,
    /// Profiling time allowed per second of job (`None`: no budget).
    allowance_per_job_s: Option<f64>,
}

/// What an [`online`] search has measured so far.
#[derive(Default)]
struct Progress {
    rows: Vec<StepRow>,
    profiles: Vec<Profile>,
    measured: Measured,
    budget_stopped: bool,
}

impl<'a> Search<'a> {
    fn new(
        cands: &'a [Candidate],
        conv: &'a ConvergenceModel,
        target: f64,
        machines: &'a [MachineType],
        opts: &'a OnlineOptions,
    ) -> Self {
        let mut s = Search {
            cands,
            conv,
            target,
            machines,
            opts,
            probe: 0,
            // Profiling time allowed per second of job: strict P / (P + T) ≤ f ⇔ P ≤ f/(1−f) · T.
            allowance_per_job_s: opts.budget_frac.map(|f| {
                if f >= 1.0 {
                    f64::INFINITY
                } else {
                    f / (1.0 - f)
                }
            }),
        };
        s.probe = (0..machines.len())
            .min_by(|&a, &b| {
                s.per_work(&machines[a])
                    .total_cmp(&s.per_work(&machines[b]))
            })
            .unwrap_or(0);
        s
    }

    fn per_work(&self, m: &MachineType) -> f64 {
        match self.opts.objective {
            Objective::Time => 1.0 / m.speed,
            Objective::Cost => m.usd_per_gpu_hour / m.speed,
        }
    }

    /// Least wall time of profiling a configuration whose step takes `step_s`.
    fn least_profile_s(&self, step_s: f64) -> f64 {
        let rule = self.opts.steps;
        (rule.warmup_steps + rule.min_steps.max(2)) as f64 * step_s
            / self.machines[self.probe].speed
    }

    fn score(
        &self,
        model: Option<&StepModel>,
        measured: &Measured,
        eps: f64,
    ) -> Vec<(Costed, f64, f64)> {
        score_all(
            self.cands,
            model,
            measured,
            eps,
            self.conv,
            self.target,
            self.machines,
            self.opts.objective,
        )
    }

    /// The budget's T̂ from what is measured: `kind` fitted if it fits, and the
    /// lowest optimistic time of the scored candidates (measured ones alone
    /// without a model). With one row the model's error cannot be estimated, so
    /// its optimism is the largest the search allows, 50%.
    fn outlook(&self, rows: &[StepRow], measured: &Measured) -> (Option<StepModel>, f64) {
        let kind = self.opts.kind;
        let model = fit(kind, rows).ok();
        let eps = match model {
            Some(_) if rows.len() < 2 => 0.5,
            Some(_) => loo_median_error(kind, rows).min(0.5),
            None => 0.0,
        };
        let scored = self.score(model.as_ref(), measured, eps);
        let job_s_hat = scored
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(f64::INFINITY, |(x, _, o)| x.time_s * o);
        (model, job_s_hat)
    }

    /// Profiles `c` (warm-up, then steps until the confidence interval, the step
    /// limit or the budget stops it) and records it in `p`. `job_s_hat`: the job
    /// time the budget is measured against (∞: unknown yet). `None` if `c` cannot run.
    fn profile(
        &self,
        measure_step: &mut impl FnMut(&Candidate, usize) -> Option<(f64, f64)>,
        c: &Candidate,
        mut job_s_hat: f64,
        p: &mut Progress,
    ) -> Option<f64> {
        let rule = self.opts.steps;
        let spent: f64 = p.profiles.iter().map(|p| p.time_s).sum();
        let mut first = p.profiles.is_empty();
        let speed = self.machines[c.machine].speed;
        let mut wall = 0.0;
        let mut steps = Vec::new();
        let mut syncs = Vec::new();
        let mut i = 0;
        loop {
            let (t, sync) = measure_step(c, i)?;
            i += 1;
            wall += t / speed;
            if i <= rule.warmup_steps {
                continue;
            }
            steps.push(t);
            syncs.push(sync);
            let n = steps.len();
            if n >= rule.max_steps.max(1) {
                break;
            }
            let mean = steps.iter().sum::<f64>() / n as f64;
            if n >= rule.min_steps.max(2) {
                let var = steps.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
                if t95(n - 1) * (var / n as f64).sqrt() <= rule.rel_ci * mean {
                    break;
                }
            }
            if let Some(per_s) = self.allowance_per_job_s {
                if n >= rule.min_steps.max(2) && first {
                    // The first configuration: T̂ from its measurement so far.
                    first = false;
                    let row = StepRow {
                        config: c.config,
                        step_time_s: mean,
                        sync_time_s: syncs.iter().sum::<f64>() / n as f64,
                        source: "profile 1".into(),
                    };
                    let so_far = Measured::from([(config_key(c), mean)]);
                    job_s_hat = self.outlook(&[row], &so_far).1;
                }
                if n >= rule.min_steps.max(2) {
                    // Were this configuration the choice, the job would take `own`.
                    let own = cost_of(c, mean, self.conv, self.target, self.machines)
                        .map_or(f64::INFINITY, |x| x.time_s);
                    // The next step may be as slow as the slowest one measured.
                    let slowest = steps.iter().fold(0.0, |a: f64, &b| a.max(b));
                    if spent + wall + slowest / speed > per_s * job_s_hat.min(own) {
                        p.budget_stopped = true;
                        break;
                    }
                }
            }
        }
        let n = steps.len() as f64;
        let step_s = steps.iter().sum::<f64>() / n;
        let sync_s = syncs.iter().sum::<f64>() / n;
        let progress = self
            .conv
            .samples_to(self.target, c.global_batch)
            .map_or(0.0, |s| i as f64 * c.global_batch / s);
        p.rows.push(StepRow {
            config: c.config,
            step_time_s: step_s,
            sync_time_s: sync_s,
            source: format!("profile {}", p.rows.len() + 1),
        });
        p.profiles.push(Profile {
            candidate: c.clone(),
            steps: i,
            step_s,
            sync_s,
            time_s: wall,
            progress,
        });
        Some(step_s)
    }

    /// The design phase: the `initial` configurations of the cost-aware design on
    /// the probe machine, while the budget allows.
    fn design(
        &self,
        measure_step: &mut impl FnMut(&Candidate, usize) -> Option<(f64, f64)>,
        p: &mut Progress,
    ) {
        let pool: Vec<Candidate> = self
            .cands
            .iter()
            .filter(|c| c.machine == self.probe)
            .cloned()
            .collect();
        // Cost of a profiling step before anything is measured: wall time per step is
        // unknown and similar across configurations (within a few ×), so for time
        // every step costs 1; for cost a step costs GPUs × price.
        let cost = |c: &Candidate| match self.opts.objective {
            Objective::Time => 1.0,
            Objective::Cost => c.replicas() as f64 * self.per_work(&self.machines[c.machine]),
        };
        for i in design_with(&pool, self.opts.initial, cost) {
            let c = &pool[i];
            let mut job_s_hat = f64::INFINITY;
            if let (Some(per_s), false) = (self.allowance_per_job_s, p.profiles.is_empty()) {
                // The design does not trust a model yet, but the budget needs T̂ and
                // the next step time: from a fit if `kind` fits what is measured, else
                // from the measurements alone.
                let model;
                (model, job_s_hat) = self.outlook(&p.rows, &p.measured);
                let next_step_s = match &model {
                    Some(m) => m.step_time(&c.config),
                    None => p.profiles.iter().map(|p| p.step_s).fold(0.0, f64::max),
                };
                let spent: f64 = p.profiles.iter().map(|p| p.time_s).sum();
                if spent + self.least_profile_s(next_step_s) > per_s * job_s_hat {
                    p.budget_stopped = true;
                    break;
                }
            }
            if let Some(t) = self.profile(measure_step, c, job_s_hat, p) {
                p.measured.insert(config_key(c), t);
            }
        }
    }

    fn no_choice(&self) -> ItertimeError {
        ItertimeError::NoConvergence {
            model: self.opts.kind.name(),
            reason: "no candidate reaches the target metric".into(),
        }
    }

    /// Commit to the best measured, or (stopped early) to the best prediction.
    fn commit(
        &self,
        scored: &[(Costed, f64, f64)],
        measured: &Measured,
    ) -> Result<Costed, ItertimeError> {
        let objective = self.opts.objective;
        let measured_best = scored
            .iter()
            .filter(|(x, _, _)| measured.contains_key(&config_key(&x.candidate)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let plain = scored
            .iter()
            .filter(|(x, _, _)| !measured.contains_key(&config_key(&x.candidate)))
            .map(|(x, _, _)| x)
            .min_by(|a, b| a.value(objective).total_cmp(&b.value(objective)));
        match (measured_best, plain) {
            (Some((m, _, _)), Some(p)) if p.value(objective) < m.value(objective) => Ok(p.clone()),
            (Some((m, _, _)), _) => Ok(m.clone()),
            (None, Some(p)) => Ok(p.clone()),
            (None, None) => Err(self.no_choice()),
        }
    }

    /// The exploitation phase: fit, profile the best-scored candidate while it is
    /// unmeasured (and the budget and `max_profiles` allow), then commit.
    fn exploit(
        &self,
        measure_step: &mut impl FnMut(&Candidate, usize) -> Option<(f64, f64)>,
        p: &mut Progress,
    ) -> Result<(Option<StepModel>, Costed), ItertimeError> {
        let kind = self.opts.kind;
        loop {
            let model = match fit(kind, &p.rows) {
                Ok(m) => m,
                // The budget left too few profiles to fit `kind`: the best measured.
                Err(_) if p.budget_stopped => {
                    let scored = self.score(None, &p.measured, 0.0);
                    return Ok((None, self.commit(&scored, &p.measured)?));
                }
                Err(e) => return Err(e),
            };
            // Unmeasured candidates are scored optimistically, `1 − ε` times their
            // prediction, ε the model's leave-one-out median error on what it measured:
            // one that could beat the best measurement within the model's typical error
            // is worth measuring (the Pollux form cannot tell 32 replicas on 8 nodes
            // from 32 on 16, which differ by 10–20%).
            let eps = loo_median_error(kind, &p.rows).min(0.5);
            let scored = self.score(Some(&model), &p.measured, eps);
            let hopeful = scored.iter().min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((next, _, _)) = hopeful else {
                return Err(self.no_choice());
            };
            let key = config_key(&next.candidate);
            let mut done =
                p.measured.contains_key(&key) || p.profiles.len() >= self.opts.max_profiles;
            let mut job_s_hat = f64::INFINITY;
            if let (Some(per_s), false) = (self.allowance_per_job_s, done) {
                // `next.time_s × optimism` but for the 50% optimism of a single row.
                job_s_hat = self.outlook(&p.rows, &p.measured).1;
                let spent: f64 = p.profiles.iter().map(|p| p.time_s).sum();
                if spent + self.least_profile_s(model.step_time(&next.candidate.config))
                    > per_s * job_s_hat
                {
                    p.budget_stopped = true;
                    done = true;
                }
            }
            if done {
                return Ok((Some(model), self.commit(&scored, &p.measured)?));
            }
            let c = Candidate {
                machine: self.probe,
                ..next.candidate.clone()
            };
            match self.profile(measure_step, &c, job_s_hat, p) {
                Some(t) => p.measured.insert(key, t),
                // Cannot run: never propose it again.
                None => p.measured.insert(key, f64::INFINITY),
            };
        }
    }
}
