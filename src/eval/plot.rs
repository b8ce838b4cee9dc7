//! The evaluation's picture: two bar panels over the same strategies, accuracy (with its
//! bootstrap interval as a whisker) on the left and output tokens/s on the right, so the
//! cost of any accuracy gain is read off side by side. SVG only: plotters is built without
//! a font engine, and only its SVG backend can write text without one.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::EvalReport;

const COLOURS: [RGBColor; 6] = [
    RGBColor(90, 90, 90),
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
];

pub fn draw(path: &Path, report: &EvalReport) -> Result<()> {
    if path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() != Some("svg") {
        bail!("{}: the plot must be an .svg file", path.display());
    }
    if report.strategies.is_empty() {
        bail!("no strategy results to plot");
    }
    crate::plot_font::register();
    let root = SVGBackend::new(path, (1000, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("plot: {e}"))?;
    let model = Path::new(&report.model).file_name().map_or(report.model.clone(), |f| f.to_string_lossy().into_owned());
    let title = format!("{} on {} ({} items)", model, report.task.as_str(), report.items);
    let root = root.titled(&title, ("sans-serif", 20)).map_err(|e| anyhow!("plot: {e}"))?;
    let (left, right) = root.split_horizontally(500);
    let labels: Vec<String> = report.strategies.iter().map(|s| s.label.clone()).collect();
    let accuracy: Vec<(f64, f64, f64)> =
        report.strategies.iter().map(|s| (100.0 * s.accuracy, 100.0 * s.ci95.low, 100.0 * s.ci95.high)).collect();
    let speed: Vec<(f64, f64, f64)> =
        report.strategies.iter().map(|s| (s.tokens_per_sec, s.tokens_per_sec, s.tokens_per_sec)).collect();
    let speed_max = speed.iter().map(|s| s.0).fold(1.0, f64::max) * 1.15;
    panel(&left, &labels, &accuracy, 100.0, "accuracy (%) with 95% CI")?;
    panel(&right, &labels, &speed, speed_max, "output tokens/s")?;
    root.present().map_err(|e| anyhow!("plot: {e}"))?;
    Ok(())
}

/// One bar per strategy; `(value, low, high)` with a whisker when low < high.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: &[String],
    values: &[(f64, f64, f64)],
    y_max: f64,
    y_desc: &str,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plot: {e}");
    let n = labels.len() as u32;
    let mut chart = ChartBuilder::on(area)
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..y_max)
        .map_err(err)?;
    let label_of = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        .x_labels(labels.len())
        .x_label_formatter(&label_of)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, &(value, low, high)) in values.iter().enumerate() {
        let i = i as u32;
        let colour = COLOURS[i as usize % COLOURS.len()];
        let mut bar = Rectangle::new(
            [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), value)],
            colour.mix(0.8).filled(),
        );
        bar.set_margin(0, 0, 18, 18);
        chart.draw_series(std::iter::once(bar)).map_err(err)?;
        if high > low {
            let whisker = [(SegmentValue::CenterOf(i), low), (SegmentValue::CenterOf(i), high)];
            chart.draw_series(std::iter::once(PathElement::new(whisker, BLACK.stroke_width(2)))).map_err(err)?;
        }
    }
    Ok(())
}
