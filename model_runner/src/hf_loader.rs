//! Hugging Face checkpoint directories: `config.json`, `model.safetensors` (or shards listed
//! in `model.safetensors.index.json`), `tokenizer.json` and `tokenizer_config.json`, exactly
//! as `save_pretrained` writes them (WeDLM-7B/8B ship in this layout).
//!
//! Weights are memory-mapped and converted to f32 one tensor at a time (bf16 and f32 files
//! alike), so peak memory stays near the f32 model plus one tensor.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};

use crate::error::{ModelError, Result};
use crate::hf_config::HfConfig;
use crate::model::Model;
use crate::tokenizer::Tokenizer;

pub const CONFIG_FILE: &str = "config.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";

/// Loads a checkpoint directory's weights and tokenizer. Projections are dense f32
/// (`Linear::from_dense`) whatever the engine's `MatmulMode`: there is nothing quantized to keep.
pub fn load_hf_dir(dir: &Path) -> Result<(Model, Tokenizer)> {
    let config = read_hf_config(dir)?;
    let tokenizer = Tokenizer::from_hf_dir(dir, &config.eos_token_ids, config.bos_token_id)?;
    let tensors = HfTensors::open(dir)?;
    let model = Model::from_hf(config, &tensors)?;
    Ok((model, tokenizer))
}

pub fn read_hf_config(dir: &Path) -> Result<HfConfig> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| load_error(&path, e.to_string()))?;
    HfConfig::parse(&text).map_err(|e| load_error(&path, e.to_string()))
}

/// The checkpoint's tensors by Hugging Face name, read lazily from the mapped files.
pub struct HfTensors {
    files: MmapedSafetensors,
    names: HashSet<String>,
    dir: PathBuf,
}

impl HfTensors {
    pub fn open(dir: &Path) -> Result<Self> {
        let paths = safetensors_files(dir)?;
        // SAFETY: the mapping is only read, and checkpoint files are not rewritten while a
        // model loads from them (the same contract as candle's and HF's own loaders).
        let files = unsafe { MmapedSafetensors::multi(&paths) }
            .map_err(|e| load_error(dir, format!("unreadable safetensors ({e})")))?;
        let names = files.tensors().into_iter().map(|(name, _)| name).collect();
        Ok(Self { files, names, dir: dir.to_path_buf() })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Tensor `name` as f32 on the CPU, checked against the shape the config implies.
    pub fn get(&self, name: &str, dims: &[usize]) -> Result<Tensor> {
        if !self.contains(name) {
            return Err(load_error(&self.dir, format!("tensor `{name}` is missing")));
        }
        let tensor = self
            .files
            .load(name, &Device::Cpu)
            .and_then(|t| t.to_dtype(DType::F32))
            .map_err(|e| load_error(&self.dir, format!("tensor `{name}`: {e}")))?;
        if tensor.dims() != dims {
            return Err(load_error(
                &self.dir,
                format!("tensor `{name}` has shape {:?}, the config implies {dims:?}", tensor.dims()),
            ));
        }
        Ok(tensor)
    }
}

/// The shard list from the index if there is one, else the single weights file.
fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join(WEIGHTS_INDEX_FILE);
    if index.is_file() {
        let text = std::fs::read_to_string(&index).map_err(|e| load_error(&index, e.to_string()))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| load_error(&index, e.to_string()))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| load_error(&index, "no `weight_map` object".into()))?;
        let shards: BTreeSet<&str> = map.values().filter_map(|v| v.as_str()).collect();
        if shards.is_empty() {
            return Err(load_error(&index, "`weight_map` names no shard".into()));
        }
        return Ok(shards.into_iter().map(|s| dir.join(s)).collect());
    }
    let single = dir.join(WEIGHTS_FILE);
    if single.is_file() {
        return Ok(vec![single]);
    }
    Err(load_error(dir, format!("neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE} found")))
}

fn load_error(path: &Path, message: String) -> ModelError {
    ModelError::Load { path: path.display().to_string(), message }
}
