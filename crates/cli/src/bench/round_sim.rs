//! `pacer bench round --workload`: every round of a whole simulation of a real
//! workload (e.g. Sia's, with `--apps sia:DIR`), timed.

use super::RoundArgs;
use anyhow::Result;
use pacer_cli::json::SimRoundReport;
use pacer_model::Allocation;
use pacer_policy::ClusterView;
use pacer_sim::{trace, SimConfig, Simulation};
use std::time::Instant;

/// A policy that times each of its inner policy's rounds.
struct Timed {
    inner: Box<dyn pacer_policy::Policy>,
    /// (active jobs, ms) per round.
    rounds: Vec<(usize, f64)>,
}

impl pacer_policy::Policy for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn adaptive_batch(&self) -> bool {
        self.inner.adaptive_batch()
    }
    fn uses_quality(&self) -> bool {
        self.inner.uses_quality()
    }
    // The hooks that change what the simulator does around the rounds, forwarded so
    // that the timed run is the run `pacer simulate` makes (without them the
    // defaults stood: Sia's projection under `--profiles online`, no arrival or
    // wake-up rounds). `incremental` is not: the rounds timed are `allocate`'s.
    fn declined(&self, job: pacer_model::JobId) -> bool {
        self.inner.declined(job)
    }
    fn arrival_replan(&self) -> pacer_policy::ArrivalReplan {
        self.inner.arrival_replan()
    }
    fn type_projection(&self) -> pacer_policy::TypeProjection {
        self.inner.type_projection()
    }
    fn wake_s(&self) -> Option<f64> {
        self.inner.wake_s()
    }
    fn charges_event_overhead(&self) -> bool {
        self.inner.charges_event_overhead()
    }
    fn event_overhead_by_placement(&self) -> bool {
        self.inner.event_overhead_by_placement()
    }
    fn end_event_slot_s(&self) -> Option<f64> {
        self.inner.end_event_slot_s()
    }
    fn allocate(&mut self, view: &ClusterView) -> Vec<Allocation> {
        let t = Instant::now();
        let out = self.inner.allocate(view);
        self.rounds
            .push((view.jobs.len(), t.elapsed().as_secs_f64() * 1e3));
        out
    }
}

fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// `bench round --workload`: every round of a whole simulation, timed.
pub(super) fn round_sim(a: &RoundArgs, file: &str) -> Result<()> {
    crate::simulate::check_round_s("--round-s", a.round_s)?;
    let cluster = crate::simulate::parse_cluster(&a.cluster)?;
    let policies = crate::simulate::policy_names(&a.policy)?;
    let apps = crate::simulate::load_apps_arg(
        a.apps.as_deref(),
        &[],
        a.shared_fabric.as_deref(),
        &cluster,
    )?;
    let text =
        pacer_fsio::read_to_string_limited(std::path::Path::new(file), pacer_fsio::limits::TRACE)
            .map_err(|e| anyhow::anyhow!("--workload {file}: {e}"))?;
    let jobs = trace::load_pollux_workload(&text, file, &apps, 1.0)?;
    let config = SimConfig {
        round_s: a.round_s,
        mixed_types: a.mixed_types,
        profiles: a.profiles,
        ..SimConfig::default()
    };
    config
        .check_jobs(&jobs)
        .map_err(|e| anyhow::anyhow!("--workload {file}: {e}"))?;
    pacer_sim::admit::check_workload(&cluster, &apps, &jobs)
        .map_err(|e| anyhow::anyhow!("--workload {file} on --cluster {}: {e}", a.cluster))?;
    let mut reports = Vec::new();
    for p in &policies {
        let mut timed = Timed {
            inner: pacer_policy::by_name(p).expect("validated"),
            rounds: Vec::new(),
        };
        let sim = Simulation {
            cluster: &cluster,
            apps: &apps,
            jobs: &jobs,
            config: config.clone(),
        };
        let t = Instant::now();
        let res = sim.run(&mut timed, |_| {})?;
        let wall = t.elapsed().as_secs_f64();
        let ms: Vec<f64> = timed.rounds.iter().map(|r| r.1).collect();
        let slowest = timed
            .rounds
            .iter()
            .copied()
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .unwrap_or((0, f64::NAN));
        reports.push(SimRoundReport {
            policy: p.clone(),
            workload: file.to_string(),
            gpus: cluster.total_gpus(),
            rounds: ms.len(),
            first_ms: ms.first().copied().unwrap_or(f64::NAN),
            first_jobs: timed.rounds.first().map_or(0, |r| r.0),
            median_ms: percentile(ms.clone(), 0.5),
            p95_ms: percentile(ms.clone(), 0.95),
            max_ms: slowest.1,
            max_ms_jobs: slowest.0,
            max_jobs: timed.rounds.iter().map(|r| r.0).max().unwrap_or(0),
            sim_wall_s: wall,
            avg_jct_h: res.summary.avg_jct_s / 3600.0,
            notes: timed.inner.notes(),
        });
    }
    if a.json {
        putline!("{}", pacer_cli::json::pretty(&reports)?);
    } else {
        putline!(
            "{:<12} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>10}  notes",
            "policy",
            "gpus",
            "rounds",
            "first_ms",
            "median_ms",
            "p95_ms",
            "max_ms",
            "jobs@max",
            "sim_s",
            "avg_jct_h"
        );
        for r in &reports {
            putline!(
                "{:<12} {:>6} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>11} {:>9.2} {:>10.3}  {}",
                r.policy,
                r.gpus,
                r.rounds,
                r.first_ms,
                r.median_ms,
                r.p95_ms,
                r.max_ms,
                r.max_ms_jobs,
                r.sim_wall_s,
                r.avg_jct_h,
                r.notes
            );
        }
    }
    Ok(())
}
