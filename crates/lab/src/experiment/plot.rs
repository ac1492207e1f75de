//! Small SVG plots for the experiments (plotters, SVG backend only).

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Lines `(label, points)` on one chart.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let (mut x_max, mut y_max) = (1e-9f64, 1e-9f64);
    for (_, pts) in series {
        for &(x, y) in pts {
            x_max = x_max.max(x);
            y_max = y_max.max(y);
        }
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max * 1.05)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .light_line_style(WHITE)
            .draw()
            .map_err(|x| e(&x))?;
        for (k, (label, pts)) in series.iter().enumerate() {
            let c = COLORS[k % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], c.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    pacer_cli::out::write_bytes(path, svg)
}

/// Grouped bars: one panel per metric, one group per category, one bar per series.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    categories: &[String],
    series: &[String],
    panels: &[(String, Vec<Vec<f64>>)],
) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let n = panels.len().max(1);
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (1000, 300 * n as u32 + 40)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (top, rest) = root.split_vertically(40);
        top.titled(title, ("sans-serif", 20)).map_err(|x| e(&x))?;
        let areas = rest.split_evenly((n, 1));
        let ns = series.len().max(1);
        for ((metric, values), area) in panels.iter().zip(areas) {
            // values[category][series]
            let y_max = values
                .iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
                .fold(1e-9f64, f64::max);
            let width = categories.len() as f64;
            let mut chart = ChartBuilder::on(&area)
                .caption(metric, ("sans-serif", 15))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d(0.0..width, 0.0..y_max * 1.1)
                .map_err(|x| e(&x))?;
            let cats = categories.to_vec();
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(categories.len() * 2 + 1)
                .x_label_formatter(&move |x: &f64| {
                    let i = x.floor() as usize;
                    if (x - i as f64 - 0.5).abs() < 0.26 {
                        cats.get(i).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                })
                .light_line_style(WHITE)
                .draw()
                .map_err(|x| e(&x))?;
            for (s, name) in series.iter().enumerate() {
                let c = COLORS[s % COLORS.len()];
                let bars = values.iter().enumerate().filter_map(|(ci, row)| {
                    let v = *row.get(s)?;
                    if !v.is_finite() {
                        return None;
                    }
                    let x0 = ci as f64 + 0.1 + 0.8 * s as f64 / ns as f64;
                    let x1 = x0 + 0.8 / ns as f64 * 0.9;
                    Some(Rectangle::new([(x0, 0.0), (x1, v)], c.filled()))
                });
                chart
                    .draw_series(bars)
                    .map_err(|x| e(&x))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled())
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    pacer_cli::out::write_bytes(path, svg)
}
