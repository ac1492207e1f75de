//! `pacer-lab sia-eval --compare-profiles`: `sia`, `sia-exact` and `sia-pacer` on Sia's workloads
//! with each type's model fitted to its whole table (what the simulator hands the
//! policies by default) and with profiles learned online as Sia's simulator learns
//! them (`--profiles online`, `crates/sim/src/engine/online.rs`); docs/sia.md.

use crate::sia_eval::{run_one, workload_files, Anchor, Args, Run};
use anyhow::{Context, Result};
use pacer_model::ClusterSpec;
use pacer_sim::ProfileMode;
use serde::Serialize;

#[derive(Debug, Serialize)]
struct Row {
    trace: String,
    workload: String,
    sia_anchor_avg_jct_h: Option<f64>,
    sia_fitted: Run,
    sia_online: Run,
    sia_exact_fitted: Run,
    sia_exact_online: Run,
    sia_pacer_fitted: Run,
    sia_pacer_online: Run,
}

/// Runs the comparison and writes `profiles.md` and `profiles.json` under `--out`.
pub fn run(
    a: &Args,
    cluster: &ClusterSpec,
    apps: &[pacer_sim::AppModel],
    find: &dyn Fn(&str, &str, &str) -> Option<Anchor>,
) -> Result<()> {
    let mut rows = Vec::new();
    for (trace, n, file) in workload_files(a)? {
        let w = format!("workload-{n}");
        eprintln!("{trace} {w}");
        let one = |policy: &str, mode| run_one(cluster, apps, &file, policy, 60.0, mode);
        rows.push(Row {
            sia_anchor_avg_jct_h: find("sia", &trace, &w).map(|x| x.avg_jct_h),
            sia_fitted: one("sia", ProfileMode::Fitted)?,
            sia_online: one("sia", ProfileMode::Online)?,
            sia_exact_fitted: one("sia-exact", ProfileMode::Fitted)?,
            sia_exact_online: one("sia-exact", ProfileMode::Online)?,
            sia_pacer_fitted: one("sia-pacer", ProfileMode::Fitted)?,
            sia_pacer_online: one("sia-pacer", ProfileMode::Online)?,
            trace,
            workload: w,
        });
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let json = a.out.join("profiles.json");
    pacer_cli::out::write_bytes(&json, serde_json::to_string_pretty(&rows)?)?;
    let md = a.out.join("profiles.md");
    let text = markdown(&rows, a);
    pacer_cli::out::write_bytes(&md, &text)?;
    println!("{text}");
    Ok(())
}

fn markdown(rows: &[Row], a: &Args) -> String {
    let cell = |x: &Run| {
        let unfinished = if x.finished < x.jobs {
            " (unfinished)"
        } else {
            ""
        };
        format!("{:.3}{unfinished}", x.avg_jct_h)
    };
    let delta =
        |on: &Run, fit: &Run| format!("{:+.1} %", 100.0 * (on.avg_jct_h / fit.avg_jct_h - 1.0));
    let mut s = format!(
        "# Sia's workloads: fitted vs online per-type profiles\n\n\
         `pacer-lab sia-eval --compare-profiles --data {} --cluster {}` (calibrated `sia:` \
         tables, 60 s rounds). Avg JCT in hours; `fitted`: each type's model fitted to its \
         whole table from the start (`--profiles fitted`, the default); `online`: learned \
         from the points each job ran at, projected to unseen types by one-device \
         throughput ratios, as Sia's simulator does (`--profiles online`). Δ: online \
         against fitted. Wall: whole simulation, seconds (shared machine).\n\n\
         | trace | workload | Sia avg | sia fitted | sia online | Δ | wall fitted / online | sia-exact fitted | sia-exact online | Δ | wall fitted / online | sia-pacer fitted | sia-pacer online | Δ | wall fitted / online |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        a.data.display(),
        a.cluster,
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} / {:.2} | {} | {} | {} | {:.2} / {:.2} | {} | {} | {} | {:.2} / {:.2} |\n",
            r.trace,
            r.workload,
            r.sia_anchor_avg_jct_h
                .map_or("—".to_string(), |x| format!("{x:.3}")),
            cell(&r.sia_fitted),
            cell(&r.sia_online),
            delta(&r.sia_online, &r.sia_fitted),
            r.sia_fitted.wall_s,
            r.sia_online.wall_s,
            cell(&r.sia_exact_fitted),
            cell(&r.sia_exact_online),
            delta(&r.sia_exact_online, &r.sia_exact_fitted),
            r.sia_exact_fitted.wall_s,
            r.sia_exact_online.wall_s,
            cell(&r.sia_pacer_fitted),
            cell(&r.sia_pacer_online),
            delta(&r.sia_pacer_online, &r.sia_pacer_fitted),
            r.sia_pacer_fitted.wall_s,
            r.sia_pacer_online.wall_s,
        );
    }
    let mean =
        |pick: &dyn Fn(&Row) -> f64| rows.iter().map(pick).sum::<f64>() / rows.len().max(1) as f64;
    let wins = |pick: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| pick(r)).count();
    s += &format!(
        "\nMean over {} workloads: sia {:.3} → {:.3} h, sia-exact {:.3} → {:.3} h, sia-pacer \
         {:.3} → {:.3} h (fitted → online). At or below Sia's avg JCT online: sia {}, sia-exact {}, \
         sia-pacer {} of {} with Sia numbers (fitted: sia-pacer {}).\n",
        rows.len(),
        mean(&|r| r.sia_fitted.avg_jct_h),
        mean(&|r| r.sia_online.avg_jct_h),
        mean(&|r| r.sia_exact_fitted.avg_jct_h),
        mean(&|r| r.sia_exact_online.avg_jct_h),
        mean(&|r| r.sia_pacer_fitted.avg_jct_h),
        mean(&|r| r.sia_pacer_online.avg_jct_h),
        wins(&|r| r.sia_anchor_avg_jct_h.is_some_and(|x| r.sia_online.avg_jct_h <= x)),
        wins(&|r| r.sia_anchor_avg_jct_h.is_some_and(|x| r.sia_exact_online.avg_jct_h <= x)),
        wins(&|r| r.sia_anchor_avg_jct_h.is_some_and(|x| r.sia_pacer_online.avg_jct_h <= x)),
        wins(&|r| r.sia_anchor_avg_jct_h.is_some()),
        wins(&|r| r.sia_anchor_avg_jct_h.is_some_and(|x| r.sia_pacer_fitted.avg_jct_h <= x)),
    );
    s
}
