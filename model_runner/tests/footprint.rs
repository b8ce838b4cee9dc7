//! A model's weight footprint and KV read per row, recounted from the GGUF's own tensor list
//! and the cache formats' sizes.

use candle_core::quantized::gguf_file::Content;
use candle_core::quantized::GgmlDType;
use entrobatch_model_runner::testing::{unique_test_path, write_tiny_gguf, TinyModelSpec};
use entrobatch_model_runner::{load_gguf, KvCache, KvDtype, MatmulMode};

const PROJECTIONS: [&str; 7] = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];

/// (body multiply-adds per row, lm_head multiply-adds, every projection's (out, in)).
fn gguf_shapes(path: &std::path::Path) -> (usize, usize, Vec<(usize, usize)>) {
    let mut f = std::fs::File::open(path).unwrap();
    let content = Content::read(&mut f).unwrap();
    let dims = |name: &str| -> Option<(usize, usize)> {
        let d = content.tensor_infos.get(name)?.shape.dims().to_vec();
        Some((d[0], d[1]))
    };
    let mut shapes = Vec::new();
    for l in 0.. {
        let layer: Vec<_> = PROJECTIONS.iter().filter_map(|p| dims(&format!("blk.{l}.{p}.weight"))).collect();
        if layer.is_empty() {
            break;
        }
        assert_eq!(layer.len(), PROJECTIONS.len());
        shapes.extend(layer);
    }
    let body = shapes.iter().map(|(o, i)| o * i).sum();
    let head = dims("output.weight").or_else(|| dims("token_embd.weight")).unwrap();
    shapes.push(head);
    (body, head.0 * head.1, shapes)
}

#[test]
fn footprint_counts_every_projection_once_and_the_head_apart() {
    let spec = TinyModelSpec::gemma3();
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), "gemma3.gguf");
    write_tiny_gguf(&path, &spec).unwrap();
    let (body, head, shapes) = gguf_shapes(&path);

    // The int8 repack of Q8_0: one byte a weight and an f16 scale a block, columns padded to
    // panels of 8.
    let (model, _) = load_gguf(&path, MatmulMode::Int8).unwrap();
    let f = model.weight_footprint();
    assert!(f.projections.iter().all(|p| p.int8_format == Some(GgmlDType::Q8_0)));
    assert_eq!(f.macs(5, 0, |_| true), 5 * body);
    assert_eq!(f.macs(0, 3, |p| p.lm_head), 3 * head);
    let packed: usize = shapes.iter().map(|(o, i)| o.div_ceil(8) * 8 * i * 34 / 32).sum();
    assert_eq!(f.bytes_per_token(), packed);

    // candle's kernels read the GGUF blocks as they are: 34 bytes per 32 weights.
    let (model, _) = load_gguf(&path, MatmulMode::Quantized).unwrap();
    let f = model.weight_footprint();
    assert!(f.projections.iter().all(|p| p.int8_format.is_none()));
    assert_eq!(f.bytes_per_token(), (body + head) * 34 / 32);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn kv_read_counts_each_layers_window() {
    // Four layers, the first three windowed to 8 keys; two KV heads of 32.
    let spec = TinyModelSpec::gemma3();
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), "gemma3-kv.gguf");
    write_tiny_gguf(&path, &spec).unwrap();
    let (model, _) = load_gguf(&path, MatmulMode::Int8).unwrap();
    let config = model.config();
    let values = 2 * 32;
    for (context, keys) in [(1, 4), (8, 32), (100, 3 * 8 + 100)] {
        let f16 = KvCache::bytes_read_per_row(config, KvDtype::F16, context);
        assert_eq!(f16, 2 * keys * values * 2, "context {context}");
        // int8 values and one f16 scale per 32.
        let q8 = KvCache::bytes_read_per_row(config, KvDtype::Q8, context);
        assert_eq!(q8, 2 * keys * (values + 2 * values / 32), "context {context}");
    }
    let _ = std::fs::remove_file(&path);
}
