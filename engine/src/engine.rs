//! `Engine`: the embeddable engine's front. It owns the request `Validation`, starts the
//! `EngineLoop` on its own thread, and sends it `Command`s; each submitted request gets a
//! `RequestHandle` to stream its events from.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use entrobatch_model_runner::{
    load_model, ChatTemplate, KvCache, KvDtype, KvGroups, MatmulMode, ModelConfig, ModelRunner, Tokenizer,
    WeightFootprint,
};
use entrobatch_scheduler::{Scheduler, SchedulerConfig, WouldMissTtft};
use parking_lot::Mutex;

use crate::command::{Command, PendingRequest};
use crate::config::EngineConfig;
use crate::engine_loop::EngineLoop;
use crate::error::{EngineError, Result};
use crate::handle::{GenerationOutput, RequestHandle};
use crate::in_flight::InFlightPermit;
use crate::latency_gate::LatencyGate;
use crate::metrics::EngineMetrics;
use crate::request::{GenerationParams, Prompt, Request};
use crate::structured::{StructuredBackend, StructuredError};
use crate::validation::{PreparedRequest, Validation};

/// What callers may want to know about the running engine.
#[derive(Clone, Debug)]
pub struct EngineInfo {
    pub model_config: ModelConfig,
    pub model_name: String,
    /// Pages in the KV pool (blocks, for a model without windowed layers).
    pub num_blocks: usize,
    /// The longest sequence the KV pool holds alone.
    pub max_tokens_in_cache: usize,
    pub block_size: usize,
    pub max_model_len: usize,
    /// Rows one forward may run (tokens plus strategy scratch rows).
    pub max_num_batched_tokens: usize,
    /// The numerics in force: projection kernels and KV cache values.
    pub matmul_mode: MatmulMode,
    pub kv_cache_dtype: KvDtype,
    /// The projections' bytes and multiply-adds per token, for rates against the machine's limits.
    pub weights: WeightFootprint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Finish every request already submitted, then stop.
    Finish,
    /// Abort in-flight requests (their streams end with `abort`), then stop.
    Abort,
}

/// The embeddable engine: a loop thread that batches every submitted request.
/// `submit` validates and tokenizes on the caller's thread (`Engine::prepare`), so bad input
/// fails there and never reaches the loop.
pub struct Engine {
    commands: Sender<Command>,
    thread: Mutex<Option<JoinHandle<()>>>,
    validation: Validation,
    metrics: Arc<EngineMetrics>,
    info: EngineInfo,
    next_id: AtomicU64,
    max_queued_requests: usize,
    gate: Arc<LatencyGate>,
}

impl Engine {
    pub fn start(config: EngineConfig) -> Result<Self> {
        if !config.model_path.exists() {
            return Err(EngineError::Config(format!(
                "model file {} not found; fetch the default model with `scripts/fetch-model smollm2`",
                config.model_path.display()
            )));
        }
        if let Some(speculative) = &config.speculative {
            speculative.validate()?;
        }
        // A GGUF file, or a Hugging Face checkpoint directory (config.json + safetensors).
        let (mut model, tokenizer) = load_model(&config.model_path, config.matmul_mode)?;
        model.set_attention_kernel(config.attention_kernel);
        let trained_context = model.config().max_position_embeddings;
        let max_model_len = config.max_model_len.unwrap_or(trained_context).min(trained_context);
        model.set_served_context(max_model_len);
        let model_config = model.config().clone();
        let weights = model.weight_footprint();
        let kv_dtype = config.kv_cache_dtype();
        let kv_groups = KvGroups::for_model(&model_config);
        let num_blocks = match (config.num_blocks, config.kv_cache_tokens) {
            (Some(pages), _) => pages,
            (None, Some(tokens)) => tokens.div_ceil(config.block_size) * kv_groups.num_groups(),
            (None, None) => {
                KvCache::blocks_for_budget(&model_config, config.block_size, config.kv_cache_bytes, kv_dtype)
            }
        };
        let limits = SchedulerConfig {
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_prefill_tokens_with_decodes: config.max_prefill_tokens_with_decodes,
            max_num_seqs: config.max_num_seqs,
            block_size: config.block_size,
            num_blocks,
            max_model_len,
            kv_group_windows: kv_groups.windows().to_vec(),
            enable_prefix_caching: config.enable_prefix_caching,
            latency_targets: config.latency_targets,
            branch_row_share: config.branch_row_share,
        };
        let scheduler = Scheduler::new(limits.clone())?;
        let max_tokens_in_cache = limits.max_tokens_in_cache();
        let runner = ModelRunner::new(model, num_blocks, config.block_size, kv_dtype)?;
        let chat_template = ChatTemplate::for_tokenizer(&tokenizer)?;
        let tokenizer = Arc::new(tokenizer);
        let metrics = Arc::new(EngineMetrics::default());
        let validation = Validation::new(
            tokenizer.clone(),
            chat_template,
            model_config.clone(),
            limits,
            config.grammar_limits,
            metrics.clone(),
            config.speculative.clone(),
        );
        let (commands, receiver) = crossbeam_channel::unbounded();
        let gate = Arc::new(LatencyGate::new(scheduler.prefix_probe()));
        let method = config.speculative.as_ref().map(|s| s.method);
        let engine_loop =
            EngineLoop::new(scheduler, runner, tokenizer, metrics.clone(), gate.clone(), receiver, method);
        #[cfg(feature = "faults")]
        let engine_loop = engine_loop.with_faults(config.faults.clone());
        let thread = std::thread::Builder::new()
            .name("entrobatch-engine".into())
            .spawn(move || engine_loop.run())
            .map_err(|e| EngineError::Config(format!("cannot start the engine thread: {e}")))?;
        let model_name =
            config.model_path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
        tracing::info!(
            model = %model_name,
            num_blocks,
            block_size = config.block_size,
            kv_dtype = ?kv_dtype,
            max_model_len,
            max_num_seqs = config.max_num_seqs,
            max_num_batched_tokens = config.max_num_batched_tokens,
            max_prefill_tokens_with_decodes = config.max_prefill_tokens_with_decodes,
            max_queued_requests = ?config.max_queued_requests,
            ttft_target = ?config.latency_targets.ttft,
            tpot_target = ?config.latency_targets.tpot,
            "engine started"
        );
        Ok(Self {
            commands,
            thread: Mutex::new(Some(thread)),
            validation,
            metrics,
            info: EngineInfo {
                model_config,
                model_name,
                num_blocks,
                max_tokens_in_cache,
                block_size: config.block_size,
                max_model_len,
                max_num_batched_tokens: config.max_num_batched_tokens,
                matmul_mode: config.matmul_mode,
                kv_cache_dtype: kv_dtype,
                weights,
            },
            next_id: AtomicU64::new(1),
            max_queued_requests: config.max_queued_requests.unwrap_or(usize::MAX),
            gate,
        })
    }

    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    /// The grammar compiler for this model's vocabulary, built once.
    pub fn structured_backend(&self) -> std::result::Result<&StructuredBackend, StructuredError> {
        self.validation.structured_backend()
    }

    /// Whether the chat template renders `tools` (tool calling needs it).
    pub fn supports_tools(&self) -> bool {
        self.validation.supports_tools()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        self.validation.tokenizer()
    }

    pub fn metrics(&self) -> &Arc<EngineMetrics> {
        &self.metrics
    }

    /// Renders a prompt to token ids the way `submit` will.
    pub fn tokenize_prompt(&self, prompt: &Prompt, params: &GenerationParams) -> Result<Vec<u32>> {
        self.validation.tokenize_prompt(prompt, params)
    }

    /// Tokenizes and validates `request` against this engine's model and limits.
    pub fn prepare(&self, request: Request) -> Result<PreparedRequest> {
        self.validation.validate(request)
    }

    /// `prepare` for `n` copies of one request (OpenAI's `n`): the prompt is tokenized and
    /// checked once, a structured output's grammar compiled once and a prediction tokenized
    /// once. Copy `i` of a seeded request draws from `seed + i`; unseeded copies each draw
    /// from a fresh seed. `n` of 0 gives one copy, as 1 does.
    pub fn prepare_copies(&self, request: Request, n: usize) -> Result<Vec<PreparedRequest>> {
        self.validation.validate_copies(request, n)
    }

    pub fn submit(&self, request: Request) -> Result<RequestHandle> {
        let mut handles = self.submit_all(vec![request])?;
        Ok(handles.remove(0))
    }

    /// Submits requests as one batch: the loop admits them all before its next step, so a
    /// batch is scheduled the same way whatever the timing. Either every request is accepted
    /// or none is (the first invalid one's error is returned).
    pub fn submit_all(&self, requests: Vec<Request>) -> Result<Vec<RequestHandle>> {
        let prepared = requests.into_iter().map(|r| self.prepare(r)).collect::<Result<Vec<_>>>()?;
        self.submit_prepared(prepared)
    }

    /// Submits requests `prepare` already checked, as one batch (see `submit_all`).
    pub fn submit_prepared(&self, prepared: Vec<PreparedRequest>) -> Result<Vec<RequestHandle>> {
        let prompts: Vec<(&[u32], bool)> =
            prepared.iter().map(|r| (r.prompt_token_ids.as_slice(), r.skips_prefix_cache())).collect();
        let target = prepared.iter().filter_map(|r| r.params.ttft_target_ms).min().map(Duration::from_millis);
        let submitted_at = Instant::now();
        let unadmitted = (self.in_flight() as usize).saturating_sub(self.gate.num_queued());
        let estimated_ttfts = match self.gate.check(&prompts, target, unadmitted) {
            Ok(ttfts) => ttfts,
            Err(miss) => {
                self.metrics.requests_rejected.fetch_add(prepared.len() as u64, Ordering::Relaxed);
                self.metrics.requests_refused_ttft.fetch_add(prepared.len() as u64, Ordering::Relaxed);
                tracing::debug!(
                    estimated_ttft_ms = miss.estimated_ttft.as_millis() as u64,
                    target_ms = miss.target.as_millis() as u64,
                    unadmitted,
                    "refused: would miss its TTFT target"
                );
                return Err(EngineError::WouldMissTtft(miss));
            }
        };
        let bound = self.max_queued_requests as u64;
        let Some(permits) = InFlightPermit::acquire_many(&self.metrics, prepared.len(), bound) else {
            self.metrics.requests_rejected.fetch_add(prepared.len() as u64, Ordering::Relaxed);
            self.metrics.requests_refused_queue_full.fetch_add(prepared.len() as u64, Ordering::Relaxed);
            return Err(EngineError::QueueFull(self.max_queued_requests));
        };
        let mut pending = Vec::with_capacity(prepared.len());
        let mut handles = Vec::with_capacity(prepared.len());
        for ((request, in_flight), estimated_ttft) in prepared.into_iter().zip(permits).zip(estimated_ttfts) {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (sender, events) = tokio::sync::mpsc::unbounded_channel();
            handles.push(RequestHandle::new(id, request.prompt_token_ids.clone(), events, self.commands.clone()));
            pending.push(PendingRequest { id, request, sender, in_flight, submitted_at, estimated_ttft });
        }
        // A batch the loop can no longer take drops here with its permits, freeing their slots.
        if self.commands.send(Command::Submit(pending)).is_err() {
            return Err(EngineError::ShutDown);
        }
        Ok(handles)
    }

    pub fn abort(&self, id: u64) {
        let _ = self.commands.send(Command::Abort(id));
    }

    /// Runs every prompt to completion in one batch and returns outputs in prompt order.
    pub fn generate(&self, prompts: Vec<Prompt>, params: &GenerationParams) -> Result<Vec<GenerationOutput>> {
        let handles = self.submit_all(prompts.into_iter().map(|p| Request::new(p, params.clone())).collect())?;
        Ok(handles.into_iter().map(RequestHandle::collect_blocking).collect())
    }

    /// Requests submitted whose `Finished` event has not been emitted yet (exact: counted on
    /// submit and on finish, not sampled from the per-step gauges).
    pub fn in_flight(&self) -> u64 {
        self.metrics.in_flight.load(Ordering::SeqCst)
    }

    /// The in-flight bound beyond which `submit` answers `QueueFull`; `None`: unbounded.
    pub fn max_queued_requests(&self) -> Option<usize> {
        (self.max_queued_requests != usize::MAX).then_some(self.max_queued_requests)
    }

    /// Why a short request submitted now would be refused under the server's TTFT target
    /// (`submit`'s own rule), when a target is set and the engine has measured its steps.
    pub fn short_request_refusal(&self) -> Option<WouldMissTtft> {
        let unadmitted = (self.in_flight() as usize).saturating_sub(self.gate.num_queued());
        self.gate.short_prompt_refusal(unadmitted)
    }

    /// Stops the loop thread; safe to call more than once.
    pub fn shutdown(&self, mode: ShutdownMode) {
        let _ = self.commands.send(Command::Shutdown { finish_in_flight: mode == ShutdownMode::Finish });
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!("engine thread panicked during shutdown");
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown(ShutdownMode::Abort);
    }
}
