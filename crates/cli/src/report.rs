//! Files written by `pacer simulate --out DIR`: one per-job CSV and one per-round
//! timeline CSV per (workload, policy), and `allocation.svg` plotting devices in
//! use and active jobs over time for every run.

use anyhow::{Context, Result};
use pacer_sim::SimResult;
use plotters::prelude::*;
use std::path::Path;

pub fn write_outputs(dir: &Path, results: &[(String, SimResult)], total_gpus: u32) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    for (workload, r) in results {
        let stem = format!("{workload}-{}", r.summary.policy);
        let path = dir.join(format!("{stem}-jobs.csv"));
        crate::out::write_file(&path, |f| {
            let mut w = csv::Writer::from_writer(f);
            w.write_record([
                "name",
                "application",
                "arrival_s",
                "start_s",
                "completion_s",
                "jct_s",
                "queueing_s",
                "restarts",
                "gpu_s",
                "avg_contention",
                "independent_s",
                "ftf_rho",
                "restart_paid_s",
                "mixed_gpu_s",
            ])?;
            let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.1}"));
            for j in &r.jobs {
                w.write_record([
                    j.name.clone(),
                    j.application.clone(),
                    format!("{:.1}", j.arrival_s),
                    opt(j.start_s),
                    opt(j.completion_s),
                    opt(j.jct_s()),
                    opt(j.queueing_s()),
                    j.restarts.to_string(),
                    format!("{:.1}", j.gpu_s),
                    format!("{:.3}", j.avg_contention),
                    format!("{:.1}", j.independent_s),
                    j.ftf_rho().map_or(String::new(), |x| format!("{x:.4}")),
                    format!("{:.1}", j.restart_paid_s),
                    format!("{:.1}", j.mixed_gpu_s),
                ])?;
            }
            w.flush()?;
            Ok(())
        })?;
        let path = dir.join(format!("{stem}-timeline.csv"));
        crate::out::write_file(&path, |f| {
            let mut w = csv::Writer::from_writer(f);
            w.write_record(["time_s", "active_jobs", "running_jobs", "used_gpus"])?;
            for t in &r.timeline {
                w.write_record([
                    format!("{:.0}", t.time_s),
                    t.active_jobs.to_string(),
                    t.running_jobs.to_string(),
                    t.used_gpus.to_string(),
                ])?;
            }
            w.flush()?;
            Ok(())
        })?;
    }
    plot(&dir.join("allocation.svg"), results, total_gpus)
}

fn plot(path: &Path, results: &[(String, SimResult)], total_gpus: u32) -> Result<()> {
    let n = results.len().max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, (220 * n) as u32)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        let areas = root.split_evenly((n, 1));
        for ((workload, r), area) in results.iter().zip(areas) {
            let t_max = r
                .timeline
                .last()
                .map_or(1.0, |t| t.time_s / 3600.0)
                .max(0.1);
            let y_max = r
                .timeline
                .iter()
                .map(|t| t.active_jobs.max(t.used_gpus))
                .max()
                .unwrap_or(1)
                .max(total_gpus) as f64
                * 1.05;
            let mut chart = ChartBuilder::on(&area)
                .caption(
                    format!("{workload} — {}", r.summary.policy),
                    ("sans-serif", 16),
                )
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(40)
                .build_cartesian_2d(0.0..t_max, 0.0..y_max)
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
            chart
                .configure_mesh()
                .x_desc("hours")
                .y_desc("count")
                .light_line_style(WHITE)
                .draw()
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
            let gpus = r
                .timeline
                .iter()
                .map(|t| (t.time_s / 3600.0, t.used_gpus as f64));
            chart
                .draw_series(LineSeries::new(gpus, BLUE.stroke_width(1)))
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?
                .label("devices in use")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLUE));
            let jobs = r
                .timeline
                .iter()
                .map(|t| (t.time_s / 3600.0, t.active_jobs as f64));
            chart
                .draw_series(LineSeries::new(jobs, RED.stroke_width(1)))
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?
                .label("active jobs")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], RED));
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
        }
        root.present().map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    }
    crate::out::write_bytes(path, svg)
}
