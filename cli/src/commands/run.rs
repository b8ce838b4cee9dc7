use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use entrobatch::strategy::{BranchConfig, MtiConfig, TriggerStats, WedlmConfig};
use entrobatch::structured::StructuredOutput;
use entrobatch::{
    ChatMessage, Decoding, Engine, EngineConfig, Event, GenerationParams, Prompt, Request, SamplingParams,
};
use serde_json::json;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// GGUF model file or Hugging Face checkpoint directory (config.json, safetensors,
    /// tokenizer.json; e.g. WeDLM-8B) (default: models/SmolLM2-135M-Instruct.Q4_1.gguf or
    /// $ENTROBATCH_MODEL).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A prompt; repeat the flag for several prompts, all batched together.
    #[arg(long = "prompt")]
    pub prompts: Vec<String>,
    /// A file with one prompt per line.
    #[arg(long)]
    pub prompts_file: Option<PathBuf>,
    /// Plain text completion instead of the chat template.
    #[arg(long)]
    pub raw: bool,
    #[arg(long, default_value_t = 128)]
    pub max_tokens: usize,
    /// 0 means greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long)]
    pub ignore_eos: bool,
    /// One JSON object per prompt per line instead of streamed text.
    #[arg(long)]
    pub json: bool,
    /// Decoding strategy.
    #[arg(long, value_enum, default_value_t = StrategyName::Plain)]
    pub strategy: StrategyName,
    /// MTI: guide tokens whose conditional entropy (nats) exceeds this; negative = every
    /// token, `inf` = none [default: 1.0]. WeDLM: fill every mask whose entropy plus position
    /// penalty is below this; negative = exactly one mask per forward [default: 0.4].
    #[arg(long, allow_negative_numbers = true)]
    pub entropy_threshold: Option<f32>,
    /// WeDLM: mask window size W [default: 16].
    #[arg(long)]
    pub window_size: Option<usize>,
    /// WeDLM: entropy penalty per window slot of distance from the leftmost mask [default: 0.02].
    #[arg(long)]
    pub pos_penalty: Option<f32>,
    /// Speculative decoding (plain strategy only), as `serve --speculative-config`, e.g.
    /// '{"method": "ngram", "num_speculative_tokens": 8}'.
    #[arg(long, value_name = "JSON")]
    pub speculative_config: Option<String>,
    /// Draft from the text in this file, the answer expected to repeat it mostly (OpenAI's
    /// Predicted Outputs: the file a code edit returns with a few lines changed). Plain
    /// strategy only; the answer is the one decoded without it.
    #[arg(long, value_name = "FILE")]
    pub prediction: Option<PathBuf>,
    /// MTI: classifier-free guidance scale (1 = off) [default: 1.5].
    #[arg(long)]
    pub guidance_scale: Option<f32>,
    /// MTI: negative prompt appended to the context for the unconditional branch
    /// [default: "OUTPUT ERROR"].
    #[arg(long)]
    pub negative_prompt: Option<String>,
    /// Entropix: a JSON object (or a file holding one) overriding `EntropixConfig` fields,
    /// e.g. '{"high_ent_thresh": 4.0}'; missing fields keep their v1 defaults.
    #[arg(long)]
    pub entropix_config: Option<String>,
    /// Entropix: candidates the adaptive branch draws (1..=12) [default: 5].
    #[arg(long)]
    pub entropix_samples: Option<usize>,
    /// Branch: a JSON object overriding `BranchConfig` fields, e.g. '{"k": 4,
    /// "entropy_threshold": 1.0, "scorer": "margin"}'; missing fields keep their defaults.
    #[arg(long, value_name = "JSON")]
    pub branch_config: Option<String>,
    /// Print one line per token (entropy, varentropy, attention metrics, entropix branch),
    /// coloured by quadrant on a terminal.
    #[arg(long)]
    pub show_metrics: bool,
    /// Constrain the output to the JSON Schema in this file (structured output).
    /// Keywords a grammar cannot enforce (`uniqueItems`, `not`, ...) are checked on the
    /// finished output, and the verdict printed.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["regex", "choice"])]
    pub json_schema: Option<PathBuf>,
    /// With `--json-schema`: refuse a schema whose keywords the grammar cannot all enforce
    /// (OpenAI's `strict: true`).
    #[arg(long, requires = "json_schema")]
    pub strict: bool,
    /// Constrain the output to this regular expression.
    #[arg(long, conflicts_with = "choice")]
    pub regex: Option<String>,
    /// Constrain the output to one of these strings (repeat the flag for each).
    #[arg(long)]
    pub choice: Vec<String>,
    #[command(flatten)]
    pub kv_cache: super::KvCacheArgs,
    /// Also run the built-in prompt set (it includes "Which number is bigger, 9.9 or 9.11?").
    #[arg(long = "prompts")]
    pub builtin_prompts: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyName {
    Plain,
    /// Entropy-triggered classifier-free guidance.
    Mti,
    /// Entropix v1: quadrant-adaptive sampling from logit and attention entropy.
    Entropix,
    /// WeDLM streaming parallel decoding of mask windows (WeDLM checkpoints only).
    Wedlm,
    /// Entropy-triggered branching: try a few continuations where the model is unsure.
    Branch,
}

/// The request's decoding strategy from the flags; strategy flags need their strategy.
/// `--json-schema`, `--regex` or `--choice` as the engine's constraint.
fn structured_output(args: &RunArgs) -> Result<Option<StructuredOutput>> {
    if let Some(path) = &args.json_schema {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let schema = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
        return Ok(Some(if args.strict {
            StructuredOutput::StrictJsonSchema(schema)
        } else {
            StructuredOutput::JsonSchema(schema)
        }));
    }
    if let Some(regex) = &args.regex {
        return Ok(Some(StructuredOutput::Regex(regex.clone())));
    }
    Ok((!args.choice.is_empty()).then(|| StructuredOutput::Choice(args.choice.clone())))
}

fn decoding(args: &RunArgs) -> Result<Decoding> {
    let mti_flags = args.guidance_scale.is_some() || args.negative_prompt.is_some();
    if mti_flags && args.strategy != StrategyName::Mti {
        anyhow::bail!("--guidance-scale and --negative-prompt need --strategy mti");
    }
    if args.entropy_threshold.is_some() && !matches!(args.strategy, StrategyName::Mti | StrategyName::Wedlm) {
        anyhow::bail!("--entropy-threshold needs --strategy mti or --strategy wedlm");
    }
    if (args.window_size.is_some() || args.pos_penalty.is_some()) && args.strategy != StrategyName::Wedlm {
        anyhow::bail!("--window-size and --pos-penalty need --strategy wedlm");
    }
    if (args.entropix_config.is_some() || args.entropix_samples.is_some()) && args.strategy != StrategyName::Entropix {
        anyhow::bail!("--entropix-config and --entropix-samples need --strategy entropix");
    }
    if args.branch_config.is_some() && args.strategy != StrategyName::Branch {
        anyhow::bail!("--branch-config needs --strategy branch");
    }
    Ok(match args.strategy {
        StrategyName::Plain => Decoding::Plain,
        StrategyName::Branch => {
            let config: BranchConfig = match &args.branch_config {
                Some(json) => serde_json::from_str(json).context("--branch-config is not a BranchConfig object")?,
                None => BranchConfig::default(),
            };
            config.validate()?;
            Decoding::Branch(config)
        }
        StrategyName::Entropix => Decoding::Entropix(super::entropix::config_from_flags(
            args.entropix_config.as_deref(),
            args.entropix_samples,
        )?),
        StrategyName::Wedlm => {
            let d = WedlmConfig::default();
            Decoding::Wedlm(WedlmConfig {
                window_size: args.window_size.unwrap_or(d.window_size),
                // Negative: nothing is ever below it, so exactly one mask per forward.
                entropy_threshold: match args.entropy_threshold {
                    Some(t) if t < 0.0 => None,
                    Some(t) => Some(t),
                    None => d.entropy_threshold,
                },
                pos_penalty: args.pos_penalty.unwrap_or(d.pos_penalty),
            })
        }
        StrategyName::Mti => {
            let d = MtiConfig::default();
            Decoding::Mti(MtiConfig {
                entropy_threshold: args.entropy_threshold.unwrap_or(d.entropy_threshold),
                guidance_scale: args.guidance_scale.unwrap_or(d.guidance_scale),
                negative_prompt: args.negative_prompt.clone().unwrap_or(d.negative_prompt),
            })
        }
    })
}

pub fn run(args: RunArgs) -> Result<()> {
    let model = super::resolve_model(args.model.clone())?;
    let mut prompts = args.prompts.clone();
    if let Some(file) = &args.prompts_file {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("cannot read prompts file {}", file.display()))?;
        prompts.extend(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
    if args.builtin_prompts {
        prompts.extend(super::prompts::BUILTIN_PROMPTS.iter().map(|p| p.to_string()));
    }
    if prompts.is_empty() {
        anyhow::bail!("no prompt given: pass --prompt TEXT, --prompts-file FILE or --prompts");
    }
    let mut config = EngineConfig::new(model);
    config.speculative = super::speculative_config(args.speculative_config.as_deref())?;
    args.kv_cache.apply(&mut config);
    let engine = Engine::start(config)?;
    let params = GenerationParams {
        sampling: SamplingParams {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            seed: args.seed,
            ..SamplingParams::default()
        },
        max_tokens: args.max_tokens,
        ignore_eos: args.ignore_eos,
        decoding: decoding(&args)?,
        return_metrics: args.show_metrics || args.json,
        structured: structured_output(&args)?,
        prediction: args
            .prediction
            .as_ref()
            .map(|path| std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display())))
            .transpose()?,
        ..GenerationParams::default()
    };
    let mut handles = Vec::with_capacity(prompts.len());
    for text in &prompts {
        let prompt = if args.raw {
            Prompt::Text(text.clone())
        } else {
            Prompt::Chat(vec![ChatMessage::new("user", text.clone())])
        };
        let handle = engine
            .submit(Request::new(prompt, params.clone()))
            .with_context(|| format!("request for prompt {text:?} refused"))?;
        handles.push(handle);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let many = prompts.len() > 1;
    let printed = (|| -> Result<()> {
        for (text, mut handle) in prompts.iter().zip(handles) {
            if args.json {
                let result = handle.collect_blocking();
                let mut line = json!({
                    "prompt": text,
                    "prompt_token_ids": result.prompt_token_ids,
                    "token_ids": result.token_ids,
                    "text": result.text,
                    "finish_reason": result.finish_reason.as_str(),
                    "error": result.error,
                    "strategy_stats": result.strategy_stats,
                    "prediction": result.prediction,
                });
                line["decoding"] = serde_json::to_value(&params.decoding)?;
                line["tokens"] = super::entropix::token_records(&result.tokens, engine.tokenizer());
                if args.strategy == StrategyName::Mti {
                    let stats = TriggerStats::from_tokens(&result.tokens);
                    line["mti"] = json!({
                        "tokens": stats.tokens,
                        "triggered": stats.triggered,
                        "trigger_rate": stats.rate(),
                    });
                }
                writeln!(out, "{line}")?;
                continue;
            }
            if many {
                writeln!(out, "=== {text}")?;
            }
            let mut mti = TriggerStats::default();
            let mut trace = super::entropix::TokenTrace::new();
            while let Some(event) = handle.next_blocking() {
                match event {
                    Event::Tokens { text, tokens } => {
                        let s = TriggerStats::from_tokens(&tokens);
                        mti = TriggerStats { tokens: mti.tokens + s.tokens, triggered: mti.triggered + s.triggered };
                        if args.show_metrics {
                            trace.tokens(&mut out, &tokens, &text, engine.tokenizer())?;
                        } else {
                            write!(out, "{text}")?;
                        }
                        out.flush()?;
                    }
                    Event::PromptLogprobs(_) => {}
                    Event::Finished { reason, error, strategy_stats, schema_errors, prediction, .. } => {
                        writeln!(out)?;
                        if let Some(p) = prediction {
                            let (kept, thrown) = (p.accepted, p.rejected);
                            writeln!(out, "[prediction: {kept} draft tokens kept, {thrown} thrown away]")?;
                        }
                        match schema_errors.as_deref() {
                            Some([]) => writeln!(out, "[schema: checked after decoding, valid]")?,
                            Some(errors) => eprintln!("the output does not satisfy the schema: {}", errors.join("; ")),
                            None => {}
                        }
                        let per_forward = strategy_stats.as_ref().and_then(|s| s.get("tokens_per_forward")?.as_f64());
                        if let (StrategyName::Wedlm, Some(per)) = (args.strategy, per_forward) {
                            writeln!(out, "[wedlm: {per:.2} tokens per forward for this request]")?;
                        }
                        if args.show_metrics {
                            trace.finish(&mut out)?;
                        }
                        if args.strategy == StrategyName::Mti {
                            let (rate, k, n) = (100.0 * mti.rate(), mti.triggered, mti.tokens);
                            writeln!(out, "[mti trigger rate: {rate:.1}% ({k} of {n} tokens guided)]")?;
                        }
                        if let Some(e) = error {
                            eprintln!("request failed ({}): {e}", reason.as_str());
                        }
                    }
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = printed {
        // A reader that left (`| head`) ends the output, not with an error: nothing is lost,
        // `run` writes nothing else. The requests still decoding are aborted.
        if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            engine.shutdown(entrobatch::ShutdownMode::Abort);
            return Ok(());
        }
        return Err(e);
    }
    if args.strategy == StrategyName::Wedlm {
        let w = &engine.metrics().wedlm;
        let forwards = w.forwards.load(std::sync::atomic::Ordering::Relaxed);
        let tokens = w.tokens.load(std::sync::atomic::Ordering::Relaxed);
        let per = w.tokens_per_forward().unwrap_or(0.0);
        eprintln!("[wedlm: {tokens} tokens committed in {forwards} window forwards, {per:.2} tokens per forward]");
    }
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    Ok(())
}
