//! The 8-bit cache's key offset on a model whose keys carry a large constant part (a tiny
//! Qwen2 with Qwen2.5's kind of key bias in its slowest-turning RoPE pair): the offset is that
//! bias, the cache stores keys less it and reads them back whole, and the model's logits over
//! the q8 cache are as close to the f32 cache's as on the same model without the outlier, and
//! an order of magnitude closer than with the constant quantized inside each key's group.

use entrobatch_model_runner::model::Model;
use entrobatch_model_runner::testing::{prompt_chunk, unique_test_path, write_tiny_gguf, TinyModelSpec};
use entrobatch_model_runner::{load_gguf, KvCache, KvDtype, MatmulMode};

const BLOCK_SIZE: usize = 16;
const OUTLIER: f32 = 60.0;

fn tiny_model(name: &str, spec: &TinyModelSpec) -> Model {
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), name);
    write_tiny_gguf(&path, spec).expect("write");
    // f32 projections: int8 activations round, and a rounding that flips moves the logits
    // more than the cache's own error does on a model this small.
    let model = load_gguf(&path, MatmulMode::DenseAbove { min_rows: 0 }).expect("load").0;
    let _ = std::fs::remove_file(&path);
    model
}

/// The prompt in two chunks (the second reads the first's keys back from the cache); the
/// logits of every row of the second.
fn logits(model: &Model, cache: &mut KvCache, tokens: &[u32]) -> Vec<f32> {
    let split = tokens.len() / 2;
    let mut step = |range: std::ops::Range<usize>| {
        let rows = (0..range.len()).collect();
        model.forward(&prompt_chunk(tokens, range, (0..8).collect(), rows), cache).expect("forward").logits
    };
    step(0..split);
    step(split..tokens.len())
}

fn max_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max)
}

#[test]
fn the_key_offset_is_the_slowly_turning_part_of_the_key_bias() {
    let spec = TinyModelSpec { key_bias_outlier: Some(OUTLIER), ..TinyModelSpec::qwen2() };
    let model = tiny_model("key-offset-qwen2", &spec);
    let hd = spec.head_dim();
    let offsets = model.key_offsets();
    assert_eq!(offsets.len(), spec.n_layers);
    for offset in &offsets {
        let offset = offset.as_ref().expect("a Qwen2 layer's keys have a bias");
        assert_eq!(offset.len(), spec.n_kv_heads * hd);
        for head in offset.chunks_exact(hd) {
            // The slowest pair turns a fraction of a radian over the whole context: kept.
            assert!((head[hd / 2 - 1] - OUTLIER).abs() < 0.05 * OUTLIER, "{head:?}");
            assert!((head[hd - 1] + OUTLIER).abs() < 0.05 * OUTLIER, "{head:?}");
        }
    }
    // No bias (Llama), or a norm after it (Qwen3): nothing to take out.
    let llama = tiny_model("key-offset-llama", &TinyModelSpec::llama());
    assert!(llama.key_offsets().iter().all(Option::is_none));
    let qwen3 = tiny_model("key-offset-qwen3", &TinyModelSpec::qwen3());
    assert!(qwen3.key_offsets().iter().all(Option::is_none));
}

#[test]
fn the_q8_cache_with_the_offset_stays_close_to_the_f32_cache() {
    let spec = TinyModelSpec { key_bias_outlier: Some(OUTLIER), ..TinyModelSpec::qwen2() };
    let model = tiny_model("key-offset-logits", &spec);
    let tokens: Vec<u32> = (0..96u32).map(|i| (i * 37 + 11) % 200 + 3).collect();
    let cache = |dtype| KvCache::new(model.config(), 8, BLOCK_SIZE, dtype).expect("cache");

    let mut f32_cache = cache(KvDtype::F32);
    let exact = logits(&model, &mut f32_cache, &tokens);
    let mut with_offset = cache(KvDtype::Q8).with_key_offsets(model.key_offsets());
    let shifted = logits(&model, &mut with_offset, &tokens);
    let plain = logits(&model, &mut cache(KvDtype::Q8), &tokens);
    let (shifted_error, plain_error) = (max_difference(&shifted, &exact), max_difference(&plain, &exact));
    // The same model without the outlier: what the q8 cache costs anyway.
    let base = tiny_model("key-offset-base", &TinyModelSpec::qwen2());
    let base_cache = |dtype| KvCache::new(base.config(), 8, BLOCK_SIZE, dtype).expect("cache");
    let base_error = max_difference(
        &logits(&base, &mut base_cache(KvDtype::Q8), &tokens),
        &logits(&base, &mut base_cache(KvDtype::F32), &tokens),
    );
    assert!(shifted_error < 2.0 * base_error, "with the offset {shifted_error}, without the outlier {base_error}");
    assert!(shifted_error * 8.0 < plain_error, "with the offset {shifted_error}, without {plain_error}");

    // The cache holds residuals and gives the keys back whole.
    for slot in [0, 17, 95] {
        let (k, _) = with_offset.read_slot(0, slot);
        let (exact_k, _) = f32_cache.read_slot(0, slot);
        let error = max_difference(&k, &exact_k);
        assert!(error < 0.05, "slot {slot}: keys back within {error}");
    }
}
