//! `entrobatch plot-sweep`: several systems' load-test runs (the `--json` of `loadtest`, one
//! run or a `--sweep` each) in one chart: goodput or throughput, and p99 TTFT, against rate.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use entrobatch_loadtest::{draw_sweeps, LoadTestReport, Series};

#[derive(Args, Debug)]
pub struct PlotSweepArgs {
    /// The SVG to write.
    #[arg(long)]
    pub out: PathBuf,
    /// `LABEL=FILE[,FILE...]`: one system's runs, e.g. `llama-server=l1.json,l2.json`.
    #[arg(required = true)]
    pub systems: Vec<String>,
}

pub fn run(args: PlotSweepArgs) -> Result<()> {
    let mut loaded: Vec<(String, Vec<LoadTestReport>)> = Vec::new();
    for system in &args.systems {
        let Some((label, files)) = system.split_once('=') else {
            bail!("expected LABEL=FILE[,FILE...], got {system:?}");
        };
        let mut reports = Vec::new();
        for file in files.split(',') {
            let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?;
            let value: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{file}: not JSON"))?;
            let runs = match value.get("sweep") {
                Some(sweep) => serde_json::from_value::<Vec<LoadTestReport>>(sweep.clone()),
                None => serde_json::from_value::<LoadTestReport>(value).map(|r| vec![r]),
            };
            reports.extend(runs.with_context(|| format!("{file}: not a loadtest --json report"))?);
        }
        loaded.push((label.to_string(), reports));
    }
    let series: Vec<Series<'_>> = loaded.iter().map(|(label, reports)| Series { label, reports }).collect();
    draw_sweeps(&args.out, &series)?;
    super::emitln!("chart written to {}", args.out.display());
    Ok(())
}
