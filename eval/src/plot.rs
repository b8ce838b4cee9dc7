//! The evaluation's picture: one point per strategy, tokens decoded per item across (output
//! and branch continuations not kept: the compute a method spends on one question) and
//! accuracy up (its bootstrap interval as a whisker), so what a strategy gains in accuracy is
//! read against what it costs. Strategies with several samples per item add their best-of-n
//! and majority-vote points; the points of one method (the strategy's name) are joined into
//! a curve. SVG only: plotters is built without a font engine, and only its SVG backend can
//! write text without one.

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
    let points = points(report);
    let x_max = points.iter().map(|p| p.x).fold(1.0, f64::max) * 1.25;
    let acc_max = points.iter().map(|p| p.high).fold(10.0, f64::max);
    let acc_max = (acc_max * 1.15).min(100.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 20))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..acc_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("tokens decoded per item (output and discarded branches)")
        .y_desc("accuracy (%) with 95% CI")
        .draw()
        .map_err(err)?;
    let mut methods: Vec<&str> = Vec::new();
    for p in &points {
        if !methods.contains(&p.method) {
            methods.push(p.method);
        }
    }
    for (i, method) in methods.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut curve: Vec<(f64, f64)> = points.iter().filter(|p| p.method == *method).map(|p| (p.x, p.y)).collect();
        curve.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart.draw_series(std::iter::once(PathElement::new(curve, colour.mix(0.5).stroke_width(1)))).map_err(err)?;
        for p in points.iter().filter(|p| p.method == *method) {
            let whisker = [(p.x, p.low), (p.x, p.high)];
            chart.draw_series(std::iter::once(PathElement::new(whisker, colour.stroke_width(2)))).map_err(err)?;
            chart.draw_series(std::iter::once(Circle::new((p.x, p.y), 5, colour.filled()))).map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    p.label.clone(),
                    (p.x, p.y),
                    ("sans-serif", 12).into_font().color(&colour),
                )))
                .map_err(err)?;
        }
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(err)?
            .label(method.to_string())
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

/// One point of the picture, accuracy and its interval in percent.
struct Point<'a> {
    method: &'a str,
    label: String,
    x: f64,
    y: f64,
    low: f64,
    high: f64,
}

/// Each strategy's pass@1, then its best-of-n and majority picks where it has them.
fn points(report: &EvalReport) -> Vec<Point<'_>> {
    // A selection's points form their own curve ("best-of-n", "majority") across sample counts.
    let mut points = Vec::new();
    for s in &report.strategies {
        let method = s.label.split(':').next().unwrap_or(&s.label);
        let pct = |x: f64| 100.0 * x;
        let label = if s.samples > 1 { format!("{} (pass@1)", s.label) } else { s.label.clone() };
        let (x, low, high) = (s.mean_decoded_len, pct(s.ci95.low), pct(s.ci95.high));
        points.push(Point { method, label, x, y: pct(s.accuracy), low, high });
        for (name, sel) in [("best-of-n", s.best_of_samples), ("majority", s.majority_of_samples)] {
            if let Some(sel) = sel {
                let (y, low, high) = (pct(sel.accuracy), pct(sel.ci95.low), pct(sel.ci95.high));
                points.push(Point { method: name, label: format!("{} {name}", s.label), x, y, low, high });
            }
        }
    }
    points
}
