//! `entrobatch eval`: accuracy and speed per decoding strategy on HumanEval, GSM-Symbolic
//! or an MMLU subset (data from `scripts/fetch-eval-data`). Prints a Markdown table;
//! `--json` keeps every graded item, `--plot` draws accuracy against tokens decoded per item.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use entrobatch_eval::runner::Progress;
use entrobatch_eval::{
    compare_with_first, load_task, parse_strategies, run_strategy, EvalReport, LoadOptions, RunOptions, TaskKind,
};
use indicatif::{HumanDuration, ProgressBar, ProgressState, ProgressStyle};

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// GGUF model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf or $ENTROBATCH_MODEL).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// humaneval, gsm-symbolic or mmlu.
    #[arg(long)]
    pub task: TaskKind,
    /// Comma-separated strategies, each NAME[:KEY=VALUE...]: plain, entropix[:samples=N],
    /// mti[:tau=T][:w=W][:neg=TEXT]; any of them with t=TEMPERATURE, top_p=P and n=SAMPLES
    /// per item (e.g. plain:t=0.8:n=5 for pass@1 over 5 draws). The first is the baseline
    /// of the paired comparisons.
    #[arg(long, default_value = "plain,entropix,mti:tau=1.0:w=1.5")]
    pub strategies: String,
    /// At most N items (a seeded sample for HumanEval and MMLU; N generated problems for
    /// GSM-Symbolic, 500 without it).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Picks the items, seeds sampling and the bootstrap.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write the full report (every graded item) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the Markdown table to a file too.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// SVG of accuracy against tokens decoded per item, per strategy [default: the --json path with .svg].
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Output budget per item [default: humaneval 256, gsm-symbolic 256, mmlu 8].
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// 0 = greedy (plain and MTI); entropix uses its own temperatures.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value = "data/eval")]
    pub data_dir: PathBuf,
    /// Wall-clock limit in seconds for one HumanEval test run.
    #[arg(long, default_value_t = 10.0)]
    pub exec_timeout: f64,
    /// Requests decoded together.
    #[arg(long, default_value_t = entrobatch::scheduler::SchedulerConfig::default().max_num_seqs)]
    pub max_num_seqs: usize,
    /// Requests per batched job; each chunk is graded (and kept, with --resume-dir) before
    /// the next starts.
    #[arg(long, default_value_t = 256)]
    pub chunk: usize,
    /// Keep each strategy's graded chunks in DIR; rerunning the same command skips the
    /// items they hold (a stopped evaluation goes on where it stopped).
    #[arg(long)]
    pub resume_dir: Option<PathBuf>,
}

pub fn run(args: EvalArgs) -> Result<()> {
    let model = super::resolve_model(args.model.clone())?;
    let specs = parse_strategies(&args.strategies)?;
    if args.chunk == 0 {
        anyhow::bail!("--chunk must be at least 1 request");
    }
    if !(args.exec_timeout > 0.0 && args.exec_timeout.is_finite()) {
        anyhow::bail!("--exec-timeout must be a positive number of seconds");
    }
    let load = LoadOptions {
        data_dir: args.data_dir.clone(),
        limit: args.limit,
        seed: args.seed,
        exec_timeout: Duration::from_secs_f64(args.exec_timeout),
    };
    let task = load_task(args.task, &load)?;
    let n = task.items().len();
    let options = RunOptions {
        model: model.clone(),
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        seed: args.seed,
        max_num_seqs: args.max_num_seqs,
        chunk: args.chunk,
        resume_dir: args.resume_dir.clone(),
    };
    let requests: usize = specs.iter().map(|s| n * s.samples).sum();
    let bar = ProgressBar::new(requests as u64);
    // Requests finish in bursts (a chunk's answers are collected in order), which throws
    // indicatif's rate estimate off; this run's mean rate, restored work excluded, does not.
    let started = Instant::now();
    let restored = Arc::new(AtomicU64::new(0));
    let restored_key = Arc::clone(&restored);
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} requests ({elapsed}, eta {mean_eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("mean_eta", move |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                let eta =
                    mean_eta(started, restored_key.load(Ordering::Relaxed), state.pos(), state.len().unwrap_or(0));
                let _ = write!(w, "{}", HumanDuration(eta));
            }),
    );
    let mut results = Vec::with_capacity(specs.len());
    for spec in &specs {
        bar.set_message(spec.label.clone());
        let mut on_progress = |p: Progress| match p {
            Progress::Restored(done) => {
                bar.inc(done as u64);
                restored.fetch_add(done as u64, Ordering::Relaxed);
            }
            Progress::Decoded => bar.inc(1),
            Progress::Grading => bar.set_message(format!("{} (grading)", spec.label)),
            Progress::Graded => {
                bar.set_message(spec.label.clone());
                // Not a terminal (a log file): the bar is hidden, so say where the run is.
                if bar.is_hidden() {
                    let eta = mean_eta(started, restored.load(Ordering::Relaxed), bar.position(), requests as u64);
                    eprintln!(
                        "{}: {}/{} requests graded, {} elapsed, eta {}",
                        spec.label,
                        bar.position(),
                        requests,
                        HumanDuration(started.elapsed()),
                        HumanDuration(eta)
                    );
                }
            }
        };
        let result = run_strategy(task.as_ref(), spec, &options, &mut on_progress)
            .with_context(|| format!("strategy {}", spec.label))?;
        let line = format!(
            "{}: {:.1}% ({}/{} correct), {:.1} output tok/s, {:.1} tokens per answer",
            result.label,
            100.0 * result.accuracy,
            result.correct,
            result.n * result.samples,
            result.tokens_per_sec,
            result.mean_output_len
        );
        // A hidden bar (no terminal) prints nothing, its println included.
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        results.push(result);
    }
    bar.finish_and_clear();
    compare_with_first(&mut results, args.seed);

    let report = EvalReport {
        model: model.display().to_string(),
        task: args.task,
        items: n,
        limit: args.limit,
        seed: args.seed,
        max_tokens: args.max_tokens.unwrap_or_else(|| task.default_max_tokens()),
        temperature: args.temperature,
        network_isolated: (args.task == TaskKind::Humaneval).then(entrobatch_eval::sandbox::network_isolated),
        strategies: results,
    };
    let table = report.markdown();
    super::emit(&table);
    if report.network_isolated == Some(false) {
        eprintln!("note: `unshare -n` is unavailable here, so HumanEval tests ran with network access");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, &table).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let plot = args.plot.clone().or_else(|| args.json.as_ref().map(|j| j.with_extension("svg")));
    if let Some(path) = plot {
        entrobatch_eval::plot::draw(&path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Time left at this run's mean rate so far. Requests finish in bursts (a chunk's answers are
/// collected in order), which throws indicatif's moving estimate off, and restored requests
/// took no time in this run.
fn mean_eta(started: Instant, restored: u64, pos: u64, len: u64) -> Duration {
    let done = pos.saturating_sub(restored);
    if done == 0 {
        return Duration::ZERO;
    }
    started.elapsed().mul_f64(len.saturating_sub(pos) as f64 / done as f64)
}
