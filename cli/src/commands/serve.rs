//! `entrobatch serve`: the OpenAI-compatible HTTP server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use entrobatch::scheduler::SchedulerConfig;
use entrobatch::structured::GrammarLimits;
use entrobatch::{Engine, EngineConfig, LatencyTargets};
use entrobatch_server::{serve_until_signal, GenerationConfig, GenerationDefaults, ServerConfig};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// GGUF model file (default: models/SmolLM2-135M-Instruct.Q4_1.gguf or $ENTROBATCH_MODEL).
    #[arg(long)]
    pub model: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// 0 picks a free port (printed on stdout).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Requests in flight (running + waiting) beyond which new ones get 429 with Retry-After
    /// at once; default: 2 x --max-num-seqs.
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Sequences batched together per step.
    #[arg(long, default_value_t = SchedulerConfig::default().max_num_seqs)]
    pub max_num_seqs: usize,
    /// Token budget per step (prefill chunks and decodes).
    #[arg(long, default_value_t = SchedulerConfig::default().max_num_batched_tokens)]
    pub max_num_batched_tokens: usize,
    /// Prefill tokens a step may carry while sequences decode in it: bounds the stall an
    /// arrival's prompt puts on every stream (inter-token latency) at some cost in its TTFT.
    /// With --tpot-slo-ms the target sizes it instead, from the measured step time.
    #[arg(long, default_value_t = SchedulerConfig::default().max_prefill_tokens_with_decodes)]
    pub max_prefill_tokens_with_decodes: usize,
    /// Rows a step gives the continuations of branching requests (strategy `branch`), as a
    /// share of the rows of the other sequences decoding, while a request that does not branch
    /// is running: bounds what branching costs the others' time per output token.
    #[arg(long, default_value_t = SchedulerConfig::default().branch_row_share)]
    pub branch_row_share: f64,
    /// Time-to-first-token target: a request the queue would delay past it is refused at once
    /// with 429 and Retry-After (the estimate counts the wait before its prompt starts and its
    /// own prefill, from the measured step time, and is held to four fifths of the target to
    /// cover its error). A request may send its own `ttft_target_ms`. Off by default.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub ttft_slo_ms: Option<u64>,
    /// Time-per-output-token target: a step carries as many prefill tokens as the measured step
    /// time allows within nine tenths of it beside its decodes (at least one block), a step
    /// with no decodes too, since a request arriving during a step waits for it. Off by default.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub tpot_slo_ms: Option<u64>,
    /// Context limit; default: the model's own.
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// KV cache size in tokens instead: the memory of that many tokens at every layer (rounded
    /// up to whole blocks), e.g. to match another server's `-c`. Models with sliding-window
    /// layers hold more tokens in it.
    #[arg(long, conflicts_with = "kv_cache_mb")]
    pub kv_cache_tokens: Option<usize>,
    #[command(flatten)]
    pub kv_cache: super::KvCacheArgs,
    /// The model id clients send; default: the model file's stem.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Seconds in-flight requests get to finish after SIGINT/SIGTERM before being aborted.
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace: u64,
    /// Sampling defaults for fields a request leaves out, as JSON (vLLM's flag), e.g.
    /// '{"temperature": 0.7, "top_p": 0.9, "max_tokens": 256}'. Keys: temperature, top_p,
    /// top_k, min_p, seed, max_tokens, repetition_penalty, presence_penalty, frequency_penalty.
    #[arg(long, value_name = "JSON")]
    pub override_generation_config: Option<String>,
    /// `auto`: the model's recommended sampling (a GGUF's `general.sampling.*` keys, a
    /// checkpoint's `generation_config.json`) becomes the default for fields a request leaves
    /// out, under `--override-generation-config`. `none` ignores it (vLLM's flag).
    #[arg(long, value_name = "auto|none", default_value = "none")]
    pub generation_config: GenerationConfig,
    /// Largest structured-output spec (schema, regex, grammar, tool list) in bytes; larger
    /// ones get a 400 before any work.
    #[arg(long, default_value_t = GrammarLimits::DEFAULT_MAX_SPEC_BYTES)]
    pub max_grammar_bytes: usize,
    /// Longest a request waits for its grammar to compile before a 400; the compile still
    /// finishes and is cached, so the same spec sent again is answered at once.
    #[arg(long, default_value_t = GrammarLimits::DEFAULT_COMPILE_TIMEOUT.as_millis() as u64)]
    pub grammar_compile_timeout_ms: u64,
    /// Speculative decoding with no draft model, as vLLM spells it: '{"method": "ngram" |
    /// "suffix", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'.
    /// Plain-decoding requests speculate unless they send `"speculative": false`; off by default.
    #[arg(long, value_name = "JSON")]
    pub speculative_config: Option<String>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let overrides = match &args.override_generation_config {
        Some(text) => GenerationDefaults::from_json(text)
            .context("--override-generation-config must be a JSON object of sampling fields")?,
        None => Default::default(),
    };
    let model = super::resolve_model(args.model.clone())?;
    let generation_defaults = GenerationDefaults::resolve(args.generation_config, &model, &overrides)
        .context("cannot read the model's recommended sampling (--generation-config auto)")?;
    let mut config = EngineConfig::new(model);
    config.max_num_seqs = args.max_num_seqs;
    config.max_num_batched_tokens = args.max_num_batched_tokens;
    config.max_prefill_tokens_with_decodes = args.max_prefill_tokens_with_decodes;
    config.branch_row_share = args.branch_row_share;
    config.latency_targets = LatencyTargets {
        ttft: args.ttft_slo_ms.map(Duration::from_millis),
        tpot: args.tpot_slo_ms.map(Duration::from_millis),
    };
    config.max_queued_requests = Some(args.max_queue.unwrap_or_else(|| config.serving_max_queued_requests()));
    config.max_model_len = args.max_model_len;
    args.kv_cache.apply(&mut config);
    config.kv_cache_tokens = args.kv_cache_tokens;
    config.speculative = super::speculative_config(args.speculative_config.as_deref())?;
    config.grammar_limits = GrammarLimits {
        max_spec_bytes: args.max_grammar_bytes,
        compile_timeout: Duration::from_millis(args.grammar_compile_timeout_ms),
        ..GrammarLimits::default()
    };
    let engine = Arc::new(Engine::start(config)?);
    // After the `listening on` line, which scripts read first.
    let kv_line = kv_pool_line(&engine);
    let server_config = ServerConfig {
        served_model_name: args.served_model_name.clone(),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        generation_defaults,
        ..ServerConfig::default()
    };
    // The engine has its own thread and the sampler its rayon pool: two async workers are
    // plenty for HTTP and SSE framing.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        println!("listening on http://{addr} (model {})", engine.info().model_name);
        println!("{kv_line}");
        serve_until_signal(listener, engine, server_config).await.context("server failed")
    })?;
    println!("server stopped");
    Ok(())
}

/// What the KV pool holds, as chosen from `--kv-cache-mb` or `--kv-cache-tokens`.
fn kv_pool_line(engine: &Engine) -> String {
    use entrobatch::model_runner::{KvCache, KvGroups};
    let info = engine.info();
    let slots = info.num_blocks * info.block_size;
    let mib = (slots * KvCache::bytes_per_slot(&info.model_config, info.kv_cache_dtype)) >> 20;
    let dtype = format!("{:?}", info.kv_cache_dtype).to_lowercase();
    let groups = KvGroups::for_model(&info.model_config);
    let windowed = groups.windows().iter().filter(|w| w.is_some()).count();
    if windowed == 0 {
        return format!(
            "KV cache: {} blocks of {} tokens = {slots} tokens ({dtype}, {mib} MiB)",
            info.num_blocks, info.block_size
        );
    }
    format!(
        "KV cache: {} pages of {} tokens x {} layers ({dtype}, {mib} MiB) shared by {} layer groups, {windowed} of them \
         windowed; one sequence holds up to {} tokens",
        info.num_blocks,
        info.block_size,
        groups.group_size(),
        groups.num_groups(),
        info.max_tokens_in_cache.min(info.max_model_len)
    )
}
