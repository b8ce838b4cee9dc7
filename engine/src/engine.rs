use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;
use entrobatch_model_runner::{load_model, ChatTemplate, GgufTokenizer, KvCache, ModelConfig, ModelRunner};
use entrobatch_scheduler::{Scheduler, SchedulerConfig};
use parking_lot::Mutex;

use crate::config::EngineConfig;
use crate::engine_loop::{Command, EngineLoop, PendingRequest};
use crate::error::{EngineError, Result};
use crate::handle::{GenerationOutput, RequestHandle};
use crate::metrics::EngineMetrics;
use crate::request::{GenerationParams, Prompt, Request};

/// What callers may want to know about the running engine.
#[derive(Clone, Debug)]
pub struct EngineInfo {
    pub model_config: ModelConfig,
    pub model_name: String,
    pub num_blocks: usize,
    pub block_size: usize,
    pub max_model_len: usize,
    /// Rows one forward may run (tokens plus strategy scratch rows).
    pub max_num_batched_tokens: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Finish every request already submitted, then stop.
    Finish,
    /// Abort in-flight requests (their streams end with `abort`), then stop.
    Abort,
}

/// The embeddable engine: a loop thread that batches every submitted request.
/// `submit` validates and tokenizes on the caller's thread, so bad input fails there and
/// never reaches the loop.
pub struct Engine {
    commands: Sender<Command>,
    thread: Mutex<Option<JoinHandle<()>>>,
    tokenizer: Arc<GgufTokenizer>,
    chat_template: ChatTemplate,
    metrics: Arc<EngineMetrics>,
    info: EngineInfo,
    next_id: AtomicU64,
    max_queued_requests: usize,
}

impl Engine {
    pub fn start(config: EngineConfig) -> Result<Self> {
        if !config.model_path.exists() {
            return Err(EngineError::Config(format!(
                "model file {} not found; fetch the default model with `scripts/fetch-model smollm2`",
                config.model_path.display()
            )));
        }
        // A GGUF file, or a Hugging Face checkpoint directory (config.json + safetensors).
        let (mut model, tokenizer) = load_model(&config.model_path, config.matmul_mode)?;
        model.set_attention_kernel(config.attention_kernel);
        let model_config = model.config().clone();
        let max_model_len = config
            .max_model_len
            .unwrap_or(model_config.max_position_embeddings)
            .min(model_config.max_position_embeddings);
        let kv_dtype = config.kv_cache_dtype();
        let num_blocks = config.num_blocks.unwrap_or_else(|| {
            KvCache::blocks_for_budget(&model_config, config.block_size, config.kv_cache_bytes, kv_dtype)
        });
        let scheduler = Scheduler::new(SchedulerConfig {
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_num_seqs: config.max_num_seqs,
            block_size: config.block_size,
            num_blocks,
            max_model_len,
            enable_prefix_caching: config.enable_prefix_caching,
        })
        .map_err(|e| EngineError::Config(e.to_string()))?;
        let runner = ModelRunner::with_kv_dtype(model, num_blocks, config.block_size, kv_dtype)?;
        let chat_template = ChatTemplate::for_tokenizer(&tokenizer)?;
        let tokenizer = Arc::new(tokenizer);
        let metrics = Arc::new(EngineMetrics::default());
        let (commands, receiver) = crossbeam_channel::unbounded();
        let engine_loop = EngineLoop {
            scheduler,
            runner,
            tokenizer: tokenizer.clone(),
            metrics: metrics.clone(),
            commands: receiver,
            requests: HashMap::new(),
            draining: false,
            faults: config.faults.clone(),
            forwards: 0,
        };
        let thread = std::thread::Builder::new()
            .name("entrobatch-engine".into())
            .spawn(move || engine_loop.run())
            .map_err(|e| EngineError::Config(format!("cannot start the engine thread: {e}")))?;
        let model_name = config
            .model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        tracing::info!(model = %model_name, num_blocks, block_size = config.block_size, max_model_len, "engine started");
        Ok(Self {
            commands,
            thread: Mutex::new(Some(thread)),
            tokenizer,
            chat_template,
            metrics,
            info: EngineInfo {
                model_config,
                model_name,
                num_blocks,
                block_size: config.block_size,
                max_model_len,
                max_num_batched_tokens: config.max_num_batched_tokens,
            },
            next_id: AtomicU64::new(1),
            max_queued_requests: config.max_queued_requests,
        })
    }

    pub fn info(&self) -> &EngineInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    pub fn metrics(&self) -> &Arc<EngineMetrics> {
        &self.metrics
    }

    /// Renders a prompt to token ids the way `submit` will.
    pub fn tokenize_prompt(&self, prompt: &Prompt, params: &GenerationParams) -> Result<Vec<u32>> {
        let ids = match prompt {
            Prompt::Text(text) => self.tokenizer.encode(text, true)?,
            Prompt::Chat(messages) => {
                let rendered = self.chat_template.apply(messages, true, params.enable_thinking)?;
                self.tokenizer.encode(&rendered, false)?
            }
            Prompt::TokenIds(ids) => ids.clone(),
        };
        if ids.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.info.model_config.vocab_size) {
            return Err(EngineError::InvalidRequest(format!(
                "token id {bad} is outside the vocabulary of {}",
                self.info.model_config.vocab_size
            )));
        }
        Ok(ids)
    }

    /// Checks a request against the engine's limits without submitting it.
    pub fn validate(&self, params: &GenerationParams, num_prompt_tokens: usize) -> Result<()> {
        params
            .sampling
            .validate(self.info.model_config.vocab_size)
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        if params.max_tokens == 0 {
            return Err(EngineError::InvalidRequest("max_tokens must be at least 1".into()));
        }
        // Building the strategy checks its parameters here, on the caller's thread, so an
        // out-of-range value is a request error and never reaches the loop.
        let ctx = crate::strategy::StrategyContext {
            mask_token_id: self.info.model_config.mask_token_id,
            max_model_len: self.info.max_model_len,
            max_tokens: params.max_tokens,
            ..crate::strategy::StrategyContext::new(&self.tokenizer)
        };
        // WeDLM on a model without a mask token is rejected here, with the reason.
        crate::strategy::build_strategy(&params.decoding, &ctx)
            .map_err(|e| EngineError::InvalidRequest(format!("decoding: {e}")))?;
        if let crate::strategy::Decoding::Wedlm(w) = &params.decoding {
            // A window runs in one forward beside at least one token row.
            if w.window_size >= self.info.max_num_batched_tokens {
                return Err(EngineError::InvalidRequest(format!(
                    "decoding: wedlm window_size {} must be below max_num_batched_tokens {}",
                    w.window_size, self.info.max_num_batched_tokens
                )));
            }
        }
        if let crate::strategy::Decoding::Mti(mti) = &params.decoding {
            // The negative prompt's scratch rows sit after the sequence's last token, so they
            // must stay inside the rotary table or the whole batch's forward would fail.
            let extra = mti.negative_prompt_ids(&self.tokenizer).map_err(EngineError::InvalidRequest)?.len();
            let needed = num_prompt_tokens.saturating_add(params.max_tokens).saturating_add(extra.saturating_sub(1));
            let limit = self.info.model_config.max_position_embeddings;
            if needed > limit {
                let reason = format!("MTI's negative prompt ({extra} tokens) runs past the model's positions");
                return Err(EngineError::NeverFits { needed, limit, reason });
            }
        }
        let needed = num_prompt_tokens.saturating_add(params.max_tokens);
        if needed > self.info.max_model_len {
            return Err(EngineError::NeverFits {
                needed,
                limit: self.info.max_model_len,
                reason: format!(
                    "prompt ({num_prompt_tokens} tokens) plus max_tokens ({}) exceeds the context length",
                    params.max_tokens
                ),
            });
        }
        let capacity = self.info.num_blocks * self.info.block_size;
        if needed > capacity {
            return Err(EngineError::NeverFits {
                needed,
                limit: capacity,
                reason: "more tokens than the whole KV cache holds".into(),
            });
        }
        Ok(())
    }

    pub fn submit(&self, request: Request) -> Result<RequestHandle> {
        let mut handles = self.submit_all(vec![request])?;
        Ok(handles.remove(0))
    }

    /// Submits requests as one batch: the loop admits them all before its next step, so a
    /// batch is scheduled the same way whatever the timing. Either every request is accepted
    /// or none is (the first invalid one's error is returned).
    pub fn submit_all(&self, requests: Vec<Request>) -> Result<Vec<RequestHandle>> {
        let prepared = requests
            .into_iter()
            .map(|request| {
                let prompt_token_ids = self.tokenize_prompt(&request.prompt, &request.params)?;
                self.validate(&request.params, prompt_token_ids.len())?;
                Ok((prompt_token_ids, request.params))
            })
            .collect::<Result<Vec<_>>>()?;
        let count = prepared.len() as u64;
        if !self.metrics.try_reserve_in_flight(count, self.max_queued_requests as u64) {
            self.metrics.requests_rejected.fetch_add(count, Ordering::Relaxed);
            return Err(EngineError::QueueFull(self.max_queued_requests));
        }
        let mut pending = Vec::with_capacity(prepared.len());
        let mut handles = Vec::with_capacity(prepared.len());
        for (prompt_token_ids, params) in prepared {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let seed = params.sampling.seed.unwrap_or_else(|| random_seed(id));
            let (sender, events) = tokio::sync::mpsc::unbounded_channel();
            handles.push(RequestHandle::new(id, prompt_token_ids.clone(), events, self.commands.clone()));
            pending.push(PendingRequest { id, prompt_token_ids, params, seed, sender });
        }
        if self.commands.send(Command::Submit(pending)).is_err() {
            for _ in 0..count {
                self.metrics.release_in_flight();
            }
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

fn random_seed(id: u64) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    nanos ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
