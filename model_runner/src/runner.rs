use std::fs::File;
use std::path::Path;

use candle_core::quantized::gguf_file;

use crate::batch::ForwardBatch;
use crate::error::{ModelError, Result};
use crate::hot_workers::with_hot_workers;
use crate::kv_cache::{KvCache, KvDtype};
use crate::linear::MatmulMode;
use crate::model::{ForwardOutput, Model};
use crate::tokenizer::GgufTokenizer;

/// Reads a GGUF file once for both the weights and the tokenizer defined in its metadata.
pub fn load_gguf(path: &Path, mode: MatmulMode) -> Result<(Model, GgufTokenizer)> {
    let load_err = |message: String| ModelError::Load { path: path.display().to_string(), message };
    let mut file = File::open(path).map_err(|e| load_err(e.to_string()))?;
    let content =
        gguf_file::Content::read(&mut file).map_err(|e| load_err(format!("not a readable GGUF file ({e})")))?;
    let file_len = file.metadata().map_err(|e| load_err(e.to_string()))?.len();
    check_tensor_extents(&content, file_len).map_err(load_err)?;
    let tokenizer = GgufTokenizer::from_gguf(&content)?;
    let model = Model::from_gguf(&content, &mut file, mode).map_err(|e| match e {
        ModelError::Candle(c) => load_err(format!("corrupt or truncated tensor data ({c})")),
        // Tensor reads name the tensor; say which file it came from and what to do.
        ModelError::Load { path: tensor, message } => {
            load_err(format!("tensor {tensor}: {message}; the file looks corrupt or truncated, fetch it again"))
        }
        other => other,
    })?;
    Ok((model, tokenizer))
}

/// Tensors are read lazily by name, so a truncated file whose cut falls in a tensor the
/// model never reads would load silently; checking every extent against the file length
/// catches any truncation up front (as llama.cpp does).
fn check_tensor_extents(content: &gguf_file::Content, file_len: u64) -> std::result::Result<(), String> {
    for (name, info) in &content.tensor_infos {
        let bytes =
            (info.shape.elem_count() / info.ggml_dtype.block_size()) as u64 * info.ggml_dtype.type_size() as u64;
        let end = content.tensor_data_offset.saturating_add(info.offset).saturating_add(bytes);
        if end > file_len {
            return Err(format!(
                "truncated: tensor {name} ends at byte {end} but the file has {file_len} bytes; fetch it again"
            ));
        }
    }
    Ok(())
}

/// Loads a model by path: a directory is a Hugging Face checkpoint (`config.json`,
/// safetensors, `tokenizer.json`), anything else a GGUF file. `mode` applies to GGUF weights;
/// checkpoint weights are always dense f32.
pub fn load_model(path: &Path, mode: MatmulMode) -> Result<(Model, GgufTokenizer)> {
    if path.is_dir() {
        crate::hf_loader::load_hf_dir(path)
    } else {
        load_gguf(path, mode)
    }
}

/// Executes one packed batch per engine step against the paged KV cache it owns.
pub struct ModelRunner {
    model: Model,
    cache: KvCache,
    /// The logits allocation of the last step the engine handed back (`recycle`).
    spare_logits: Vec<f32>,
}

impl ModelRunner {
    /// The cache's value type has no default here: the engine picks it (`EngineConfig::kv_cache_dtype`).
    pub fn new(model: Model, num_blocks: usize, block_size: usize, dtype: KvDtype) -> Result<Self> {
        let cache = KvCache::new(model.config(), num_blocks, block_size, dtype)?;
        Ok(Self { model, cache, spare_logits: Vec::new() })
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    pub fn execute(&mut self, batch: &ForwardBatch) -> Result<ForwardOutput> {
        let (model, cache, logits) = (&self.model, &mut self.cache, std::mem::take(&mut self.spare_logits));
        // The forward runs on a worker of rayon's pool, so each of its parallel regions (a
        // few per layer) starts on the thread already running it, instead of waking a worker
        // and putting this thread to sleep until the region ends; the other workers stay
        // awake until it returns.
        with_hot_workers(|| model.forward_into(batch, cache, logits))
    }

    /// Takes back a step's output once its logits are used, so the next step writes its
    /// logits into the same allocation (on Qwen2.5 at 64 rows, 39 MB that would otherwise be
    /// mapped, faulted in page by page, and unmapped every step).
    pub fn recycle(&mut self, output: ForwardOutput) {
        self.spare_logits = output.logits;
    }
}
