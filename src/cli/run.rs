use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use entrobatch::{
    ChatMessage, Engine, EngineConfig, Event, GenerationParams, Prompt, Request, SamplingParams,
};
use serde_json::json;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// GGUF model file (default: models/SmolLM2-135M-Instruct.Q4_1.gguf or $ENTROBATCH_MODEL).
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
}

pub fn run(args: RunArgs) -> Result<()> {
    let model = super::resolve_model(args.model.clone())?;
    let mut prompts = args.prompts.clone();
    if let Some(file) = &args.prompts_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read prompts file {}", file.display()))?;
        prompts.extend(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
    if prompts.is_empty() {
        anyhow::bail!("no prompt given: pass --prompt TEXT or --prompts-file FILE");
    }
    let engine = Engine::start(EngineConfig::new(model))?;
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
        ..GenerationParams::default()
    };
    let mut handles = Vec::with_capacity(prompts.len());
    for text in &prompts {
        let prompt = if args.raw {
            Prompt::Text(text.clone())
        } else {
            Prompt::Chat(vec![ChatMessage { role: "user".into(), content: text.clone() }])
        };
        let handle = engine
            .submit(Request::new(prompt, params.clone()))
            .with_context(|| format!("prompt rejected: {text:?}"))?;
        handles.push(handle);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let many = prompts.len() > 1;
    for (text, mut handle) in prompts.iter().zip(handles) {
        if args.json {
            let result = handle.collect_blocking();
            let line = json!({
                "prompt": text,
                "prompt_token_ids": result.prompt_token_ids,
                "token_ids": result.token_ids,
                "text": result.text,
                "finish_reason": result.finish_reason.as_str(),
                "error": result.error,
            });
            writeln!(out, "{line}")?;
            continue;
        }
        if many {
            writeln!(out, "=== {text}")?;
        }
        while let Some(event) = handle.next_blocking() {
            match event {
                Event::Tokens { text, .. } => {
                    write!(out, "{text}")?;
                    out.flush()?;
                }
                Event::Finished { reason, error, .. } => {
                    writeln!(out)?;
                    if let Some(e) = error {
                        eprintln!("request failed ({}): {e}", reason.as_str());
                    }
                }
            }
        }
    }
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    Ok(())
}
