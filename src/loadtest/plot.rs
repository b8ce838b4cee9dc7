//! `--sweep` chart: output throughput and p99 TTFT against request rate, side by side in
//! one SVG.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::LoadTestReport;

pub fn draw_sweep(path: &Path, reports: &[LoadTestReport]) -> Result<()> {
    let throughput: Vec<(f64, f64)> =
        reports.iter().filter_map(|r| Some((r.rate?, r.summary.output_throughput))).collect();
    let ttft: Vec<(f64, f64)> = reports.iter().filter_map(|r| Some((r.rate?, r.summary.ttft_ms.p99))).collect();
    if throughput.is_empty() {
        return Err(anyhow!("nothing to plot: the sweep has no rated runs"));
    }
    crate::plot_font::register();
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let (left, right) = root.split_horizontally(500);
    panel(&left, "Output throughput", "output tokens/s", &throughput, BLUE)?;
    panel(&right, "P99 time to first token", "p99 TTFT (ms)", &ttft, RED)?;
    root.present().map_err(|e| anyhow!("plot: cannot write {}: {e}", path.display()))?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_desc: &str,
    points: &[(f64, f64)],
    color: RGBColor,
) -> Result<()> {
    let x_max = points.iter().map(|p| p.0).fold(0.0, f64::max) * 1.1;
    let y_max = points.iter().map(|p| p.1).filter(|y| y.is_finite()).fold(0.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max.max(1e-9), 0.0..y_max.max(1e-9))
        .map_err(|e| anyhow!("plot: {e}"))?;
    chart.configure_mesh().x_desc("request rate (req/s)").y_desc(y_desc).draw().map_err(|e| anyhow!("plot: {e}"))?;
    chart.draw_series(LineSeries::new(points.iter().copied(), &color)).map_err(|e| anyhow!("plot: {e}"))?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(|e| anyhow!("plot: {e}"))?;
    Ok(())
}
