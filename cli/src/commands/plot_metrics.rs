//! `entrobatch plot-metrics`: the entropy-quadrant picture (the MLX port's
//! `entropy_quadrants.png`) from `run --json` output: logit entropy against varentropy per
//! token, coloured by the entropix branch taken, with the quadrant threshold lines.
//!
//! SVG carries every label. PNG has the same points, lines and axes but no text: plotters is
//! built without a font engine (no system-font or TTF dependency), and its bitmap backend
//! cannot draw text without one.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use entrobatch::sampler::entropix::{Branch, EntropixConfig};
use entrobatch::Decoding;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

#[derive(Args, Debug)]
pub struct PlotMetricsArgs {
    /// `entrobatch run --json` output: one JSON object per line, with per-token metrics.
    #[arg(long)]
    pub input: PathBuf,
    /// Output image; `.svg` or `.png`.
    #[arg(long)]
    pub output: PathBuf,
}

/// One plotted token.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub entropy: f64,
    pub varentropy: f64,
    /// `None` for tokens decoded without entropix (plain, MTI).
    pub branch: Option<Branch>,
}

/// The tokens with metrics in `run --json` lines, and the thresholds of the first entropix
/// request (v1 defaults if there is none).
pub fn read_points(text: &str) -> Result<(Vec<Point>, EntropixConfig)> {
    let mut points = Vec::new();
    let mut config = None;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).with_context(|| format!("line {}: not JSON", i + 1))?;
        if config.is_none() {
            if let Some(Ok(Decoding::Entropix(c))) = v.get("decoding").map(|d| serde_json::from_value(d.clone())) {
                config = Some(c);
            }
        }
        for t in v.get("tokens").and_then(Value::as_array).into_iter().flatten() {
            let Some(m) = t.get("metrics") else { continue };
            let (Some(h), Some(vh)) =
                (m.get("entropy").and_then(Value::as_f64), m.get("varentropy").and_then(Value::as_f64))
            else {
                continue;
            };
            let branch = m.get("branch").and_then(Value::as_str).and_then(Branch::parse);
            points.push(Point { entropy: h, varentropy: vh, branch });
        }
    }
    Ok((points, config.unwrap_or_default()))
}

pub fn run(args: PlotMetricsArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.input).with_context(|| format!("cannot read {}", args.input.display()))?;
    let (points, config) = read_points(&text)?;
    if points.is_empty() {
        bail!("{} has no per-token metrics: produce it with `entrobatch run --json`", args.input.display());
    }
    draw(&args.output, &points, &config)?;
    eprintln!("wrote {} ({} tokens)", args.output.display(), points.len());
    Ok(())
}

pub fn draw(path: &Path, points: &[Point], config: &EntropixConfig) -> Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let size = (900, 700);
    // Text layout needs font metrics on both backends.
    entrobatch_plot::register();
    match ext.as_deref() {
        Some("svg") => chart(&SVGBackend::new(path, size).into_drawing_area(), points, config),
        Some("png") => chart(&BitMapBackend::new(path, size).into_drawing_area(), points, config),
        _ => bail!("{}: the output must end in .svg or .png", path.display()),
    }
}

fn branch_colour(branch: Option<Branch>) -> RGBColor {
    match branch {
        Some(Branch::Argmax) => RGBColor(46, 160, 67),
        Some(Branch::Pause) => RGBColor(230, 160, 0),
        Some(Branch::PauseSample) => RGBColor(180, 120, 0),
        Some(Branch::Explore) => RGBColor(0, 150, 200),
        Some(Branch::Resample) => RGBColor(210, 40, 40),
        Some(Branch::Adaptive) => RGBColor(140, 60, 190),
        None => RGBColor(120, 120, 120),
    }
}

fn chart<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, points: &[Point], cfg: &EntropixConfig) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let x_max = points.iter().map(|p| p.entropy).fold(f64::from(cfg.high_ent_thresh) + 0.5, f64::max) * 1.05;
    let y_max = points.iter().map(|p| p.varentropy).fold(f64::from(cfg.high_vent_thresh) + 0.5, f64::max) * 1.05;
    let mut builder = ChartBuilder::on(root);
    builder.margin(20);
    builder.caption("Entropix quadrants: logit entropy vs varentropy", ("sans-serif", 22));
    builder.x_label_area_size(45).y_label_area_size(60);
    let mut chart = builder.build_cartesian_2d(0.0..x_max, 0.0..y_max).map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.light_line_style(WHITE.mix(0.0));
    mesh.x_desc("entropy (bits)").y_desc("varentropy (bits²)");
    mesh.draw().map_err(err)?;

    let grey = RGBColor(90, 90, 90);
    let vertical = [cfg.low_ent_thresh, cfg.med_ent_thresh, cfg.high_ent_thresh];
    for x in vertical.map(f64::from).into_iter().filter(|x| (0.0..x_max).contains(x)) {
        chart.draw_series(DashedLineSeries::new([(x, 0.0), (x, y_max)], 6, 4, grey.stroke_width(1))).map_err(err)?;
    }
    for y in [cfg.low_vent_thresh, cfg.high_vent_thresh].map(f64::from).into_iter().filter(|y| (0.0..y_max).contains(y))
    {
        chart.draw_series(DashedLineSeries::new([(0.0, y), (x_max, y)], 6, 4, grey.stroke_width(1))).map_err(err)?;
    }
    // One series per branch so each gets a legend entry; plain tokens first, underneath.
    let groups = std::iter::once(None).chain(Branch::ALL.into_iter().map(Some));
    for branch in groups {
        let colour = branch_colour(branch);
        let pts: Vec<(f64, f64)> =
            points.iter().filter(|p| p.branch == branch).map(|p| (p.entropy, p.varentropy)).collect();
        if pts.is_empty() {
            continue;
        }
        let series =
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.mix(0.75).filled()))).map_err(err)?;
        let name = branch.map_or("plain".to_string(), |b| format!("{b}: {}", b.description()));
        let label = format!("{name} ({})", pts.len());
        series.label(label).legend(move |(x, y)| Circle::new((x + 8, y), 4, colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
