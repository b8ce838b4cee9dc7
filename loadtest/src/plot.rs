//! Sweep charts: goodput (or output throughput when no latency targets were set) and p99
//! TTFT against request rate, one line per system, side by side in one SVG.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::LoadTestReport;

const COLORS: [RGBColor; 4] = [BLUE, RED, GREEN, MAGENTA];

/// One system's sweep: `label` and its runs (any order; unrated runs are left out).
pub struct Series<'a> {
    pub label: &'a str,
    pub reports: &'a [LoadTestReport],
}

pub fn draw_sweep(path: &Path, reports: &[LoadTestReport]) -> Result<()> {
    draw_sweeps(path, &[Series { label: "", reports }])
}

pub fn draw_sweeps(path: &Path, systems: &[Series<'_>]) -> Result<()> {
    let goodput = systems.iter().flat_map(|s| s.reports).all(|r| r.summary.goodput.is_some());
    let points = |value: &dyn Fn(&LoadTestReport) -> f64| -> Vec<(&str, Vec<(f64, f64)>)> {
        systems
            .iter()
            .map(|s| {
                let mut p: Vec<(f64, f64)> = s.reports.iter().filter_map(|r| Some((r.rate?, value(r)))).collect();
                p.sort_by(|a, b| a.0.total_cmp(&b.0));
                (s.label, p)
            })
            .collect()
    };
    let left =
        if goodput { points(&|r| r.summary.goodput.unwrap_or(0.0)) } else { points(&|r| r.summary.output_throughput) };
    let ttft = points(&|r| r.summary.ttft_ms.p99);
    if left.iter().all(|(_, p)| p.is_empty()) {
        return Err(anyhow!("nothing to plot: the sweep has no rated runs"));
    }
    entrobatch_plot::register();
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let (l, r) = root.split_horizontally(500);
    if goodput {
        panel(&l, "Goodput", "requests/s meeting the targets", &left)?;
    } else {
        panel(&l, "Output throughput", "output tokens/s", &left)?;
    }
    panel(&r, "P99 time to first token", "p99 TTFT (ms)", &ttft)?;
    root.present().map_err(|e| anyhow!("plot: cannot write {}: {e}", path.display()))?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    series: &[(&str, Vec<(f64, f64)>)],
) -> Result<()> {
    let all = series.iter().flat_map(|(_, p)| p);
    let x_max = all.clone().map(|p| p.0).fold(0.0, f64::max) * 1.1;
    let y_max = all.map(|p| p.1).filter(|y| y.is_finite()).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max.max(1e-9), 0.0..y_max.max(1e-9))
        .map_err(|e| anyhow!("plot: {e}"))?;
    chart.configure_mesh().x_desc("request rate (req/s)").y_desc(y_desc).draw().map_err(|e| anyhow!("plot: {e}"))?;
    for (i, (label, points)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let line =
            chart.draw_series(LineSeries::new(points.iter().copied(), &color)).map_err(|e| anyhow!("plot: {e}"))?;
        if !label.is_empty() {
            line.label(*label).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| anyhow!("plot: {e}"))?;
    }
    if series.iter().any(|(label, _)| !label.is_empty()) {
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()
            .map_err(|e| anyhow!("plot: {e}"))?;
    }
    Ok(())
}
