//! `Embedding::gather` decodes only the rows it returns, and each one is bit for bit the row
//! that dequantizing the whole table gives (the path the engine took before), for every GGUF
//! format candle reads and for the real models' embeddings.

mod common;

use std::path::Path;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use entrobatch_model_runner::testing::{unique_test_path, write_tiny_gguf, TinyModelSpec, TINY_VOCAB_SIZE};
use entrobatch_model_runner::{load_gguf, Embedding, MatmulMode, ModelError};

fn read_tensor(path: &Path, name: &str) -> QTensor {
    let mut f = std::fs::File::open(path).expect("open gguf");
    let content = common::read_content(path);
    content.tensor(&mut f, name, &Device::Cpu).expect("read tensor")
}

/// Every row of `weight` through `gather`, one at a time and all at once in a shuffled
/// order with repeats, against the full dequantized table, compared as f32 bits.
fn check_against_full_dequantize(label: &str, weight: QTensor) {
    let (rows, hidden) = weight.shape().dims2().expect("2-D embedding");
    let full: Vec<u32> = weight
        .dequantize(&Device::Cpu)
        .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
        .expect("dequantize")
        .into_iter()
        .map(f32::to_bits)
        .collect();
    let emb = Embedding::from_qtensor(weight).expect("embedding");
    assert_eq!((emb.rows(), emb.hidden()), (rows, hidden), "{label}");
    assert!(emb.is_quantized(), "{label}: rows are whole blocks, the table should stay quantized");
    let row = |r: usize| &full[r * hidden..(r + 1) * hidden];
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();

    for r in 0..rows {
        let got = bits(emb.gather(std::iter::once(r)).expect("row in range"));
        assert_eq!(got, row(r), "{label}: row {r} of {rows}");
    }
    // A batch: last and first rows, a repeat, a stride through the table.
    let ids: Vec<usize> = [rows - 1, 0, rows - 1].into_iter().chain((0..rows).step_by(rows / 7 + 1).rev()).collect();
    let got = bits(emb.gather(ids.iter().copied()).expect("rows in range"));
    let want: Vec<u32> = ids.iter().flat_map(|&r| row(r).iter().copied()).collect();
    assert_eq!(got, want, "{label}: batch {ids:?}");

    assert!(emb.gather(std::iter::empty()).expect("no rows").is_empty());
    for bad in [rows, usize::MAX] {
        let err = emb.gather([0, bad].into_iter()).expect_err("out of range");
        assert!(matches!(err, ModelError::InvalidBatch(_)), "{label}: id {bad} gave {err:?}");
    }
}

/// Every format a generated model can be written in and read back (candle reads no GGUF
/// tensor in Q8_1 or Q8_K, which are only dot-product operand formats). 256-wide rows and an
/// MLP of 512 fit the k-quants' 256-element blocks as well as the 32-element ones.
#[test]
fn gather_matches_full_dequantize_for_every_generated_dtype() {
    use GgmlDType::*;
    for dtype in [F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K] {
        let spec = TinyModelSpec { dtype, hidden: 256, intermediate: 512, seed: 11, ..TinyModelSpec::llama() };
        let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), &format!("embed-{dtype:?}.gguf"));
        write_tiny_gguf(&path, &spec).expect("write tiny gguf");
        let weight = read_tensor(&path, "token_embd.weight");
        let _ = std::fs::remove_file(&path);
        assert_eq!(weight.dtype(), dtype);
        assert_eq!(weight.shape().dims(), [TINY_VOCAB_SIZE, 256]);
        check_against_full_dequantize(&format!("tiny {dtype:?}"), weight);
    }
}

/// The dense table (Hugging Face checkpoints) gives the rows of its values and rejects ids
/// beyond it the same way.
#[test]
fn dense_table_gathers_rows_and_rejects_out_of_range_ids() {
    let values: Vec<f32> = (0..4 * 40).map(|i| ((i * 37) % 101) as f32 / 17.0 - 3.0).collect();
    let emb = Embedding::from_dense(values.clone(), 40).expect("embedding");
    assert!(!emb.is_quantized());
    assert_eq!((emb.rows(), emb.hidden()), (4, 40));
    assert_eq!(
        emb.gather([3, 0, 3].into_iter()).expect("in range"),
        [&values[120..], &values[..40], &values[120..]].concat()
    );
    assert!(matches!(emb.gather(std::iter::once(4)), Err(ModelError::InvalidBatch(_))));
    assert!(matches!(Embedding::from_dense(values, 41), Err(ModelError::Unsupported(_))));
    assert!(matches!(Embedding::from_dense(Vec::new(), 0), Err(ModelError::Unsupported(_))));
}

/// The real models' embeddings (SmolLM2: Q4_1; Qwen2.5-Coder Q4_K_M: the file's own choice),
/// and the loaded model keeps them quantized.
#[test]
fn gather_matches_full_dequantize_on_real_models() {
    for file in [common::SMOLLM2, common::QWEN25_CODER] {
        let Some(path) = common::model_path(file) else { continue };
        let weight = read_tensor(&path, "token_embd.weight");
        eprintln!("{file}: token_embd.weight {:?} {:?}", weight.dtype(), weight.shape());
        check_against_full_dequantize(file, weight);
        let (model, _) = load_gguf(&path, MatmulMode::default()).expect("load");
        let emb = model.embedding();
        assert!(emb.is_quantized(), "{file}: {emb:?}");
        let dense = emb.rows() * emb.hidden() * 4;
        eprintln!("{file}: {emb:?} holds {} bytes (dense f32: {dense})", emb.size_in_bytes());
        assert!(emb.size_in_bytes() < dense / 3);
    }
}
