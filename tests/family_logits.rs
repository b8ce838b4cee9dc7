//! Each generated family's logits at every position of one prefill, against
//! candle-transformers' model fed the same tokens one at a time: close in every position, and
//! the error far below what leaving out one of the family's features costs (the windowed
//! layers' window above all, which only shows past the window).

use entrobatch_testkit::common;

use common::{prefill_batch, reference_logits_per_position, tiny_model, RefArch};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::model_runner::{load_gguf, KvCache, KvDtype, KvGroups, MatmulMode};

const BLOCK: usize = 16;

/// The engine's logits for every position of `tokens`, in one prefill.
fn engine_logits(path: &std::path::Path, mode: MatmulMode, tokens: &[u32]) -> Vec<Vec<f32>> {
    let (model, _) = load_gguf(path, mode).expect("load");
    let n = tokens.len();
    let pages = n.div_ceil(BLOCK) * KvGroups::for_model(model.config()).num_groups();
    let mut cache = KvCache::new(model.config(), pages, BLOCK, KvDtype::F32).expect("cache");
    let batch = prefill_batch(tokens, &cache, (0..n).collect());
    let out = model.forward(&batch, &mut cache).expect("forward");
    (0..n).map(|i| out.row(i).to_vec()).collect()
}

/// Largest difference of the two log-softmax rows over their top 20 tokens (a shift of the
/// whole row is no error).
fn log_prob_error(a: &[f32], b: &[f32]) -> f32 {
    let log_softmax = |x: &[f32]| {
        let max = x.iter().cloned().fold(f32::MIN, f32::max);
        let sum: f32 = x.iter().map(|v| (v - max).exp()).sum();
        x.iter().map(|v| v - max - sum.ln()).collect::<Vec<f32>>()
    };
    let (la, lb) = (log_softmax(a), log_softmax(b));
    let mut order: Vec<usize> = (0..b.len()).collect();
    order.sort_by(|&i, &j| lb[j].total_cmp(&lb[i]));
    order.iter().take(20).map(|&i| (la[i] - lb[i]).abs()).fold(0.0, f32::max)
}

/// `mode` runs the weights as the reference does: candle's quantized kernels for its quantized
/// models, dequantized f32 for its dense Gemma 3.
fn check_family(name: &str, spec: TinyModelSpec, arch: RefArch, mode: MatmulMode) {
    let path = tiny_model(&spec, name);
    // 40 tokens: five times the tiny Gemma's window.
    let tokens: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 200 + 20).collect();
    let got = engine_logits(&path, mode, &tokens);
    let want = reference_logits_per_position(&path, arch, &tokens);
    let worst = got.iter().zip(&want).map(|(g, w)| log_prob_error(g, w)).fold(0.0, f32::max);
    eprintln!("{name}: {worst}");
    assert!(worst < 1e-3, "{name}: log-probs differ by up to {worst} from candle-transformers'");
}

#[test]
fn tiny_qwen3_logits_match_candle_quantized_qwen3() {
    let spec = TinyModelSpec {
        extra_metadata: vec![("general.dtype".into(), candle_core::quantized::gguf_file::Value::U32(0))],
        ..TinyModelSpec::qwen3()
    };
    check_family("logits-qwen3", spec, RefArch::Qwen3, MatmulMode::Quantized);
}

#[test]
fn tiny_phi3_logits_match_candle_quantized_phi3() {
    check_family("logits-phi3", TinyModelSpec::phi3(), RefArch::Phi3, MatmulMode::Quantized);
}

#[test]
fn tiny_gemma3_logits_match_candle_gemma3() {
    check_family("logits-gemma3", TinyModelSpec::gemma3(), RefArch::Gemma3, MatmulMode::DenseAbove { min_rows: 1 });
}

/// Phi-3's LongRoPE: a file with both factor sets rotates as a file holding only the set its
/// served context selects (the short one up to the original context, the long one past it),
/// and the two choices give different logits.
#[test]
fn phi3_rotates_by_the_factors_its_served_context_selects() {
    use entrobatch::model_runner::{LongContextRope, Model};
    let spec = TinyModelSpec::phi3_long_context();
    let LongContextRope { original_context, short_factors, long_factors } = spec.long_context_rope.clone().unwrap();
    let single =
        |factors: Vec<f32>| TinyModelSpec { long_context_rope: None, rope_freq_factors: Some(factors), ..spec.clone() };
    let pair = tiny_model(&spec, "phi3-long-pair");
    let only_short = tiny_model(&single(short_factors.unwrap()), "phi3-long-short");
    let only_long = tiny_model(&single(long_factors), "phi3-long-long");
    let tokens: Vec<u32> = (0..96).map(|i| (i * 37 + 11) % 200 + 20).collect();
    let logits = |model: &Model| {
        let mut cache = KvCache::new(model.config(), tokens.len().div_ceil(BLOCK), BLOCK, KvDtype::F32).expect("cache");
        let batch = prefill_batch(&tokens, &cache, (0..tokens.len()).collect());
        model.forward(&batch, &mut cache).expect("forward").logits
    };
    let load = |path: &std::path::Path| load_gguf(path, MatmulMode::Int8).expect("load").0;

    let mut served = load(&pair);
    let trained = logits(&served);
    assert_eq!(trained, logits(&load(&only_long)), "the trained context (1024) is past the original one");
    served.set_served_context(original_context);
    let short = logits(&served);
    assert_eq!(short, logits(&load(&only_short)), "a context of {original_context} is the original one");
    served.set_served_context(original_context + 1);
    assert_eq!(logits(&served), trained, "one position past the original context");
    let differ = short.iter().zip(&trained).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(differ > 1e-2, "the two factor sets should rotate differently: logits differ by {differ}");
}
