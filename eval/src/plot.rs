//! The evaluation's picture: one point per strategy, output tokens/s across and accuracy
//! up (its bootstrap interval as a whisker), so what a strategy gains in accuracy is read
//! against what it costs in speed. SVG only: plotters is built without a font engine, and
//! only its SVG backend can write text without one.

use std::path::Path;

use anyhow::{anyhow, bail, Result};
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
    entrobatch_plot::register();
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("plot: {e}");
    let root = SVGBackend::new(path, (820, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let model = Path::new(&report.model).file_name().map_or(report.model.clone(), |f| f.to_string_lossy().into_owned());
    let title = format!("{} on {} ({} items)", model, report.task.as_str(), report.items);
    let speed_max = report.strategies.iter().map(|s| s.tokens_per_sec).fold(1.0, f64::max) * 1.25;
    let acc_max = report.strategies.iter().map(|s| 100.0 * s.ci95.high).fold(10.0, f64::max);
    let acc_max = (acc_max * 1.15).min(100.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..speed_max, 0.0..acc_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("output tokens/s (prefill included)")
        .y_desc("accuracy (%) with 95% CI")
        .draw()
        .map_err(err)?;
    for (i, s) in report.strategies.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let (x, y) = (s.tokens_per_sec, 100.0 * s.accuracy);
        let whisker = [(x, 100.0 * s.ci95.low), (x, 100.0 * s.ci95.high)];
        chart.draw_series(std::iter::once(PathElement::new(whisker, colour.stroke_width(2)))).map_err(err)?;
        chart.draw_series(std::iter::once(Circle::new((x, y), 6, colour.filled()))).map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                s.label.clone(),
                (x, y),
                ("sans-serif", 14).into_font().color(&colour),
            )))
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(lx, ly)| Circle::new((lx + 8, ly), 5, colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
