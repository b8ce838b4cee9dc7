use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use entrobatch_bench::throughput::{render_table, run, Progress, ThroughputConfig, ThroughputReport};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;

use super::emitln;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Requests through the engine against candle-transformers' sequential model, in one run.
    Throughput(ThroughputArgs),
    /// Time to first token with a cold and a cached prompt prefix.
    PrefixCache(PrefixCacheArgs),
    /// Requests under a JSON schema against the same requests free, alternating in one engine.
    Structured(StructuredArgs),
    /// Half the requests branching beside half plain, against all plain, alternating in one
    /// engine: the plain half's TPOT and the branching half's extra tokens.
    Branching(BranchingArgs),
}

#[derive(Args, Debug)]
pub struct BranchingArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[arg(long, default_value_t = 16)]
    pub requests: usize,
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Rounds of (mixed, all plain) pairs, alternating which runs first.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Sequence slots (the engine's max_num_seqs); branches use only those the requests leave.
    #[arg(long, default_value_t = 64)]
    pub max_num_seqs: usize,
    /// The branching requests' `BranchConfig`, as JSON; missing fields keep their defaults.
    #[arg(long, value_name = "JSON")]
    pub branch_config: Option<String>,
    /// Rows a step gives branch continuations beside the plain requests' (as `serve`'s flag).
    #[arg(long, default_value_t = entrobatch::scheduler::SchedulerConfig::default().branch_row_share)]
    pub branch_row_share: f64,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StructuredArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Rounds of (constrained, free) pairs, alternating which runs first.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// JSON Schema file; defaults to an array of 64+ records (outputs longer than --output-len).
    #[arg(long)]
    pub schema: Option<PathBuf>,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct PrefixCacheArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[arg(long, default_value_t = 512)]
    pub prefix_len: usize,
    #[arg(long, default_value_t = 16)]
    pub suffix_len: usize,
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ThroughputArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    #[arg(long, default_value_t = 128)]
    pub prompt_len: usize,
    #[arg(long, default_value_t = 128)]
    pub output_len: usize,
    /// Sequences running at once (the engine's max_num_seqs).
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Requests the sequential baseline runs (its rate is per request); 0 skips it.
    #[arg(long, default_value_t = 4)]
    pub baseline_requests: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run concurrency 1, 2, 4, ... up to --concurrency and plot throughput against it.
    #[arg(long)]
    pub sweep: bool,
    /// SVG for --sweep.
    #[arg(long, default_value = "throughput_sweep.svg")]
    pub plot: PathBuf,
    /// Engine matmul mode: int8 (the engine's default and fastest), dense (f32 GEMM from 8
    /// rows) or quantized (candle's kernels).
    #[arg(long, default_value = "int8", value_parser = entrobatch_bench::throughput::parse_matmul_mode)]
    pub matmul: entrobatch::MatmulMode,
    #[command(flatten)]
    pub kv_cache: super::KvCacheArgs,
    /// Speculative decoding, as `serve --speculative-config`; the table adds the share of draft
    /// tokens kept and the tokens per verifying forward.
    #[arg(long, value_name = "JSON")]
    pub speculative_config: Option<String>,
    /// After the run, measure this machine's read bandwidth and int8 kernel peak (a few
    /// seconds) and report the run as fractions of them.
    #[arg(long)]
    pub limits: bool,
    /// Prefill every prompt once, untimed, first: the measured requests find their prompts in
    /// the prefix cache and start decoding together, so the decode-only rate is the whole batch
    /// at the prompts' context (a cold run reaches decode-only steps only as requests end).
    #[arg(long)]
    pub warm_prefix: bool,
}

pub fn run_bench(command: BenchCommand) -> Result<()> {
    match command {
        BenchCommand::Throughput(args) => throughput(args),
        BenchCommand::PrefixCache(args) => prefix_cache(args),
        BenchCommand::Structured(args) => structured(args),
        BenchCommand::Branching(args) => branching(args),
    }
}

fn throughput(args: ThroughputArgs) -> Result<()> {
    let model = super::resolve_model(args.model.clone())?;
    let levels: Vec<usize> = if args.sweep {
        std::iter::successors(Some(1usize), |c| Some(c * 2)).take_while(|&c| c <= args.concurrency).collect()
    } else {
        vec![args.concurrency]
    };
    let mut reports: Vec<ThroughputReport> = Vec::new();
    for (i, &concurrency) in levels.iter().enumerate() {
        let config = ThroughputConfig {
            model: model.clone(),
            requests: args.requests,
            prompt_len: args.prompt_len,
            output_len: args.output_len,
            concurrency,
            // The baseline does not depend on concurrency: measure it once.
            baseline_requests: if i == 0 { args.baseline_requests } else { 0 },
            engine: Some({
                let mut engine = entrobatch_bench::throughput::engine_config_with(&model, args.matmul);
                engine.speculative = super::speculative_config(args.speculative_config.as_deref())?;
                args.kv_cache.apply(&mut engine);
                engine
            }),
            decoding: Default::default(),
            limits: args.limits,
            warm_prefix: args.warm_prefix,
        };
        let bar = ProgressBar::new(args.requests as u64);
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} requests ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(format!("concurrency {concurrency}"));
        let mut report = run(&config, |progress| match progress {
            Progress::Warmed(done) => {
                bar.set_message(format!("concurrency {concurrency}, warming the prefix cache"));
                bar.set_position(done as u64);
            }
            Progress::Finished(done) => {
                bar.set_message(format!("concurrency {concurrency}"));
                bar.set_position(done as u64);
            }
        })?;
        bar.finish_and_clear();
        if let Some(first) = reports.first() {
            report.baseline = first.baseline.clone();
            if let Some(b) = &report.baseline {
                report.output_speedup = Some(report.engine.output_tokens_per_s / b.output_tokens_per_s);
                report.total_speedup = Some(report.engine.total_tokens_per_s / b.total_tokens_per_s);
            }
        }
        super::emit(&render_table(&report));
        reports.push(report);
    }
    let json =
        if args.sweep { serde_json::to_string_pretty(&reports)? } else { serde_json::to_string_pretty(&reports[0])? };
    if let Some(path) = &args.json {
        std::fs::write(path, &json).with_context(|| format!("write {}", path.display()))?;
    }
    emitln!("{json}");
    if args.sweep {
        plot_sweep(&reports, &args.plot)?;
        eprintln!("wrote {}", args.plot.display());
    }
    Ok(())
}

fn plot_sweep(reports: &[ThroughputReport], path: &PathBuf) -> Result<()> {
    entrobatch_plot::register();
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_c = reports.iter().map(|r| r.concurrency).max().unwrap_or(1) as f64;
    let max_t = reports.iter().map(|r| r.engine.total_tokens_per_s).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption("entrobatch throughput against concurrency", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.5f64..max_c * 1.5).log_scale(), 0f64..max_t)?;
    chart.configure_mesh().x_desc("concurrent sequences").y_desc("tokens/s").draw()?;
    /// Reads one plotted quantity from a report.
    type Metric = fn(&ThroughputReport) -> f64;
    let series = |f: Metric| -> Vec<(f64, f64)> { reports.iter().map(|r| (r.concurrency as f64, f(r))).collect() };
    let lines: [(&str, RGBColor, Metric); 3] = [
        ("total tokens/s", BLUE, |r| r.engine.total_tokens_per_s),
        ("decode tokens/s", RED, |r| r.engine.decode_tokens_per_s),
        ("output tokens/s", GREEN, |r| r.engine.output_tokens_per_s),
    ];
    for (label, color, f) in lines {
        let points = series(f);
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    if let Some(b) = reports.first().and_then(|r| r.baseline.as_ref()) {
        let y = b.total_tokens_per_s;
        chart
            .draw_series(LineSeries::new(vec![(0.5, y), (max_c * 1.5, y)], BLACK.stroke_width(1)))?
            .label("candle sequential, total tokens/s")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}

fn prefix_cache(args: PrefixCacheArgs) -> Result<()> {
    use entrobatch_bench::prefix_cache::{render_table, run, PrefixCacheConfig};
    let model = super::resolve_model(args.model.clone())?;
    let engine = entrobatch::EngineConfig::new(&model);
    let config = PrefixCacheConfig {
        model,
        prefix_len: args.prefix_len,
        suffix_len: args.suffix_len,
        rounds: args.rounds,
        engine: Some(engine),
    };
    let bar = ProgressBar::new(args.rounds as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} rounds ({elapsed})")?.progress_chars("=> "),
    );
    bar.set_message("prefix cache");
    let report = run(&config, |done| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.json {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    super::emit(&render_table(&report));
    emitln!("{json}");
    Ok(())
}

fn structured(args: StructuredArgs) -> Result<()> {
    use entrobatch_bench::structured::{default_schema, run, StructuredBenchConfig};
    let model = super::resolve_model(args.model.clone())?;
    let mut engine_config = entrobatch::EngineConfig::new(&model);
    engine_config.max_num_seqs = args.requests.max(1);
    let engine = entrobatch::Engine::start(engine_config)?;
    let schema = match &args.schema {
        Some(path) => {
            serde_json::from_str(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)
                .with_context(|| format!("{} is not JSON", path.display()))?
        }
        None => default_schema(),
    };
    let config =
        StructuredBenchConfig { requests: args.requests, max_tokens: args.output_len, rounds: args.rounds, schema };
    let bar = ProgressBar::new(2 * args.rounds as u64);
    bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs ({elapsed})")?.progress_chars("=> "));
    bar.set_message("structured vs free");
    let report = run(&engine, &config, |_| bar.inc(1))?;
    bar.finish_and_clear();
    emitln!("| run | prompt tok | output tok | seconds | total tok/s | output tok/s |");
    emitln!("|---|---:|---:|---:|---:|---:|");
    for r in &report.runs {
        let kind = if r.constrained { "json schema" } else { "free" };
        emitln!(
            "| {kind} | {} | {} | {:.2} | {:.1} | {:.1} |",
            r.prompt_tokens,
            r.output_tokens,
            r.seconds,
            r.total_tok_s,
            r.output_tok_s
        );
    }
    let mask = report.mean_mask_us.map_or("n/a".to_string(), |us| format!("{us:.1} us"));
    emitln!("constrained / free total tok/s: {:.3}; mean mask time per token: {mask}", report.total_ratio);
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.json {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn branching(args: BranchingArgs) -> Result<()> {
    use entrobatch_bench::branch_mix::{run, BranchMixConfig};
    let model = super::resolve_model(args.model.clone())?;
    let branch: entrobatch::strategy::BranchConfig = match &args.branch_config {
        Some(json) => serde_json::from_str(json).context("--branch-config is not a BranchConfig object")?,
        None => Default::default(),
    };
    branch.validate()?;
    let mut engine_config = entrobatch::EngineConfig::new(&model);
    engine_config.max_num_seqs = args.max_num_seqs.max(args.requests).max(1);
    engine_config.branch_row_share = args.branch_row_share;
    let engine = entrobatch::Engine::start(engine_config)?;
    let config = BranchMixConfig { requests: args.requests, max_tokens: args.output_len, rounds: args.rounds, branch };
    let bar = ProgressBar::new(2 * args.rounds as u64);
    bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} runs ({elapsed})")?.progress_chars("=> "));
    bar.set_message("half branching vs all plain");
    let report = run(&engine, &config, |_| bar.inc(1))?;
    bar.finish_and_clear();
    emitln!("| run | seconds | plain TPOT p50 ms | plain TPOT p99 ms | other half done p50 s | output tok | branch points | extra tok |");
    emitln!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &report.runs {
        let kind = if r.mixed { "half branching" } else { "all plain" };
        emitln!(
            "| {kind} | {:.2} | {:.1} | {:.1} | {:.2} | {} | {} | {} |",
            r.seconds,
            r.plain_tpot_p50_ms,
            r.plain_tpot_p99_ms,
            r.other_half_done_p50_s,
            r.output_tokens,
            r.branch_points,
            r.branch_extra_tokens
        );
    }
    emitln!(
        "plain TPOT p99 beside branching / all plain (best rounds): {:.3}; wall time mixed / plain: {:.3}",
        report.p99_ratio,
        report.seconds_ratio
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
