//! GGUF files: the weights and the tokenizer of a llama.cpp conversion, read from one file.

use std::fs::File;
use std::path::Path;

use candle_core::quantized::gguf_file;

use crate::error::{ModelError, Result};
use crate::linear::MatmulMode;
use crate::model::Model;
use crate::tokenizer::Tokenizer;

/// Reads a GGUF file once for both the weights and the tokenizer defined in its metadata.
pub fn load_gguf(path: &Path, mode: MatmulMode) -> Result<(Model, Tokenizer)> {
    let load_err = |message: String| ModelError::Load { path: path.display().to_string(), message };
    let mut file = File::open(path).map_err(|e| load_err(e.to_string()))?;
    let content =
        gguf_file::Content::read(&mut file).map_err(|e| load_err(format!("not a readable GGUF file ({e})")))?;
    let file_len = file.metadata().map_err(|e| load_err(e.to_string()))?.len();
    check_tensor_extents(&content, file_len).map_err(load_err)?;
    // Building a vocabulary's BPE (merges derived from SentencePiece scores for Gemma's 262k
    // tokens) takes one core for a second or two; it runs beside the weights' reading and repacking.
    let (tokenizer, model) = std::thread::scope(|scope| {
        let tokenizer = scope.spawn(|| Tokenizer::from_gguf(&content).map_err(ModelError::from));
        let model = Model::from_gguf(&content, &mut file, mode);
        let tokenizer = tokenizer.join().unwrap_or_else(|_| Err(load_err("building the tokenizer panicked".into())));
        (tokenizer, model)
    });
    let tokenizer = tokenizer?;
    let model = model.map_err(|e| match e {
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
