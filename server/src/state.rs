//! What every handler shares: the engine, the served model's name, the HTTP counters, and
//! the submit path that keeps tokenization off the async workers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use entrobatch::{Engine, Request, RequestHandle};

use crate::middleware::http_metrics::HttpMetrics;
use crate::request::defaults::GenerationDefaults;
use crate::response::error::ApiError;

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub engine: Arc<Engine>,
    pub model_id: String,
    pub created: u64,
    pub http: HttpMetrics,
    /// Names the build and the model configuration (OpenAI's `system_fingerprint`).
    pub fingerprint: String,
    /// Random per process, so response ids never repeat across restarts.
    boot_id: String,
    /// Sampling values for the fields a request leaves out.
    pub generation_defaults: GenerationDefaults,
    /// The chat template has a thinking switch (Qwen3): split `<think>` into `reasoning_content`.
    pub thinking_template: bool,
    draining: AtomicBool,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(engine: Arc<Engine>, served_model_name: Option<String>) -> Self {
        Self::with_defaults(engine, served_model_name, GenerationDefaults::default())
    }

    /// A state whose requests take `generation_defaults` for the sampling fields they omit.
    pub fn with_defaults(
        engine: Arc<Engine>,
        served_model_name: Option<String>,
        generation_defaults: GenerationDefaults,
    ) -> Self {
        let model_id = served_model_name.unwrap_or_else(|| engine.info().model_name.clone());
        let thinking_template =
            engine.tokenizer().chat_template.as_deref().is_some_and(|t| t.contains("enable_thinking"));
        let fingerprint = fingerprint(&engine);
        Self(Arc::new(Inner {
            engine,
            model_id,
            fingerprint,
            boot_id: format!("{:012x}", random_u64() & 0xFFFF_FFFF_FFFF),
            created: unix_now(),
            http: HttpMetrics::default(),
            thinking_template,
            draining: AtomicBool::new(false),
            generation_defaults,
        }))
    }

    /// `{kind}-{boot}{n}`: unique across restarts (the boot part is random per process).
    pub fn response_id(&self, kind: &str, request: u64) -> String {
        format!("{kind}-{}{request:x}", self.boot_id)
    }

    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Clients must name the served model, or leave `model` out.
    pub fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            Some(m) if !m.is_empty() && m != self.model_id => Err(ApiError::not_found(format!(
                "the model `{m}` does not exist; this server serves `{}`",
                self.model_id
            ))
            .with_code("model_not_found")),
            _ => Ok(()),
        }
    }

    /// Prepares (tokenizes, validates) and submits on a blocking thread: chat templates and
    /// long prompts cost real CPU time. Bad input comes back as a 4xx and never reaches the loop.
    pub async fn submit(&self, request: Request) -> Result<RequestHandle, ApiError> {
        if self.is_draining() {
            return Err(ApiError::unavailable("the server is shutting down").with_retry_after(1));
        }
        let engine = self.engine.clone();
        let task = tokio::task::spawn_blocking(move || {
            let prepared = engine.prepare(request)?;
            engine.submit_prepared(vec![prepared]).map(|mut handles| handles.remove(0))
        });
        match task.await {
            Ok(result) => result.map_err(ApiError::from),
            Err(e) => Err(ApiError::internal(format!("submit task failed: {e}"))),
        }
    }

    /// Submits `n` copies of each request as one batch (a completion's prompts and their `n`
    /// copies, request-major): all accepted, or none. Each request is prepared once for its
    /// copies (`Engine::prepare_copies`).
    pub async fn submit_copies(&self, requests: Vec<Request>, n: usize) -> Result<Vec<RequestHandle>, ApiError> {
        if self.is_draining() {
            return Err(ApiError::unavailable("the server is shutting down").with_retry_after(1));
        }
        let engine = self.engine.clone();
        let submit = move || {
            let mut prepared = Vec::with_capacity(requests.len() * n);
            for request in requests {
                prepared.extend(engine.prepare_copies(request, n)?);
            }
            engine.submit_prepared(prepared)
        };
        match tokio::task::spawn_blocking(submit).await {
            Ok(result) => result.map_err(ApiError::from),
            Err(e) => Err(ApiError::internal(format!("submit task failed: {e}"))),
        }
    }
}

/// `fp_` and 12 hex digits of a hash over what changes outputs: the version, the model file,
/// its size, and the engine's numerics.
fn fingerprint(engine: &Engine) -> String {
    use std::hash::{Hash, Hasher};
    let info = engine.info();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    info.model_name.hash(&mut h);
    info.model_config.vocab_size.hash(&mut h);
    info.max_model_len.hash(&mut h);
    format!("{:?} {:?}", info.matmul_mode, info.kv_cache_dtype).hash(&mut h);
    format!("fp_{:012x}", h.finish() & 0xFFFF_FFFF_FFFF)
}

pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
