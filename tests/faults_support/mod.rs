#![allow(dead_code)]
//! Damaged model files for tests/faults.rs: each helper starts from a valid tiny GGUF and
//! breaks exactly one thing, so a test can tell which check caught it.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

/// A fresh, per-process temp dir for the damaged copies.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir =
        entrobatch::model_runner::testing::unique_test_path(env!("CARGO_TARGET_TMPDIR"), &format!("faults-{name}"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Reads `src` fully, lets `edit` change its metadata and tensors, writes the result to `dst`.
/// Goes through candle's own reader and writer, so everything not edited stays valid.
pub fn rewrite_gguf(src: &Path, dst: &Path, edit: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<(String, QTensor)>)) {
    let mut file = std::fs::File::open(src).expect("open source model");
    let content = gguf_file::Content::read(&mut file).expect("read source model");
    let mut metadata: Vec<(String, Value)> = content.metadata.clone().into_iter().collect();
    let mut tensors: Vec<(String, QTensor)> = content
        .tensor_infos
        .keys()
        .map(|name| {
            let t = content.tensor(&mut file, name, &Device::Cpu).expect("read tensor");
            (name.clone(), t)
        })
        .collect();
    edit(&mut metadata, &mut tensors);
    let mut out = std::io::BufWriter::new(std::fs::File::create(dst).expect("create model"));
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    gguf_file::write(&mut out, &md, &ts).expect("write model");
    std::io::Write::flush(&mut out).expect("flush model");
}

/// Sets one metadata string (e.g. `general.architecture`).
pub fn with_metadata_string(src: &Path, dst: &Path, key: &str, value: &str) {
    rewrite_gguf(src, dst, |md, _| {
        md.retain(|(k, _)| k != key);
        md.push((key.to_string(), Value::String(value.to_string())));
    });
}

/// Drops one metadata key.
pub fn without_metadata(src: &Path, dst: &Path, key: &str) {
    rewrite_gguf(src, dst, |md, _| md.retain(|(k, _)| k != key));
}

/// Replaces a tensor with an F32 one of the same shape full of NaN: a file that loads but
/// whose forward produces NaN logits, as a bit-flipped or badly converted checkpoint would.
/// (It must be a matrix the logits come from unquantized: NaN activations entering a
/// quantized matmul are quantized to zeros, not NaN.)
pub fn with_nan_tensor(src: &Path, dst: &Path, name: &str) {
    rewrite_gguf(src, dst, |_, tensors| {
        let entry = tensors.iter_mut().find(|(k, _)| k == name).expect("tensor present");
        let shape = entry.1.shape().clone();
        let nan = Tensor::full(f32::NAN, shape, &Device::Cpu).expect("nan tensor");
        entry.1 = QTensor::quantize(&nan, GgmlDType::F32).expect("quantize");
    });
}

/// Overwrites the GGML type id in `tensor`'s header with `type_id`. No writer would emit an
/// unknown id, so this patches bytes: the tensor info is the length-prefixed name followed
/// by `n_dims: u32`, `dims: [u64; n_dims]`, `type: u32`.
pub fn with_tensor_type_id(src: &Path, dst: &Path, tensor: &str, type_id: u32) {
    let mut bytes = std::fs::read(src).expect("read model");
    let mut needle = (tensor.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(tensor.as_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle.as_slice()).expect("tensor info present");
    let dims_at = at + needle.len();
    let n_dims = u32::from_le_bytes(bytes[dims_at..dims_at + 4].try_into().unwrap()) as usize;
    let type_at = dims_at + 4 + 8 * n_dims;
    bytes[type_at..type_at + 4].copy_from_slice(&type_id.to_le_bytes());
    std::fs::write(dst, bytes).expect("write model");
}

/// The first `len` bytes of `src`.
pub fn truncated(src: &Path, dst: &Path, len: usize) {
    let bytes = std::fs::read(src).expect("read model");
    std::fs::write(dst, &bytes[..len.min(bytes.len())]).expect("write model");
}
