//! Each GGUF family loads as the description llama.cpp would read from the same metadata,
//! and a file this runner would not execute as llama.cpp does is refused with a message that
//! names what is missing.

mod common;

use candle_core::quantized::gguf_file::Value;
use entrobatch_model_runner::testing::{unique_test_path, write_tiny_gguf, TinyModelSpec};
use entrobatch_model_runner::{load_gguf, Activation, Architecture, MatmulMode, ModelConfig, ModelError};

fn load(name: &str, spec: &TinyModelSpec) -> Result<ModelConfig, ModelError> {
    let path = unique_test_path(env!("CARGO_TARGET_TMPDIR"), &format!("{name}.gguf"));
    write_tiny_gguf(&path, spec).expect("write");
    let loaded = load_gguf(&path, MatmulMode::Int8).map(|(model, _)| model.config().clone());
    let _ = std::fs::remove_file(&path);
    loaded
}

fn with_metadata(spec: TinyModelSpec, key: &str, value: Value) -> TinyModelSpec {
    let mut extra = spec.extra_metadata.clone();
    extra.push((key.to_string(), value));
    TinyModelSpec { extra_metadata: extra, ..spec }
}

#[test]
fn every_family_reads_its_description_from_the_metadata() {
    let qwen3 = load("qwen3", &TinyModelSpec::qwen3()).unwrap();
    assert_eq!(qwen3.architecture, Architecture::Qwen3);
    assert_eq!(qwen3.head_dim, 32, "attention.key_length, not hidden / heads");
    assert!(qwen3.qk_norm && !qwen3.qkv_bias && !qwen3.rope.interleaved);

    let gemma = load("gemma3", &TinyModelSpec::gemma3()).unwrap();
    assert_eq!(gemma.architecture, Architecture::Gemma3);
    assert_eq!(gemma.activation, Activation::GeluTanh);
    assert!(gemma.sandwich_norms && gemma.qk_norm);
    assert_eq!(gemma.embedding_scale, Some(8.0), "sqrt(64)");
    let windows: Vec<Option<usize>> = (0..4).map(|l| gemma.layer_window(l)).collect();
    assert_eq!(windows, [Some(8), Some(8), Some(8), None], "the last layer of every 4 is global");
    assert_eq!(gemma.layer_rope(0).theta, 10_000.0, "windowed layers: rope.freq_base_swa");
    assert_eq!(gemma.layer_rope(3).theta, 1_000_000.0, "global layers: rope.freq_base");

    let phi = load("phi3", &TinyModelSpec::phi3()).unwrap();
    assert_eq!(phi.architecture, Architecture::Phi3);
    assert!(phi.sliding_window.is_none() && !phi.rope.interleaved);

    let phi_long = load("phi3-long", &TinyModelSpec::phi3_long_context()).unwrap();
    let pair = TinyModelSpec::phi3_long_context().long_context_rope.unwrap();
    assert_eq!(phi_long.max_position_embeddings, 1024, "the trained context, not the original 256");
    assert_eq!(phi_long.long_context_rope.as_ref(), Some(&pair));
    assert_eq!(
        phi_long.rope.freq_factors.as_ref(),
        Some(&pair.long_factors),
        "the trained context selects the long factors"
    );
    assert!(
        (phi_long.rope.attn_factor - 1.1180).abs() < 1e-4,
        "rope.scaling.attn_factor: {}",
        phi_long.rope.attn_factor
    );

    let llama3 = load("llama3", &TinyModelSpec::llama3()).unwrap();
    let factors = llama3.rope.freq_factors.expect("rope_freqs.weight read");
    assert_eq!(factors, TinyModelSpec::llama3().rope_freq_factors.unwrap());
    assert!(factors.contains(&1.0) && factors.contains(&8.0), "{factors:?}");
    assert!(llama3.rope.interleaved);

    let linear = load("linear", &with_metadata(TinyModelSpec::llama(), "llama.rope.scaling.factor", Value::F32(4.0)));
    assert_eq!(linear.unwrap().rope.freq_scale, 0.25);
}

#[test]
fn files_the_runner_would_run_differently_are_refused_by_name() {
    let refused = |name: &str, spec: TinyModelSpec, wanted: &str| {
        let err = load(name, &spec).expect_err(name).to_string();
        assert!(err.contains(wanted), "{name}: {err:?} should name {wanted:?}");
    };
    refused(
        "mamba",
        with_metadata(TinyModelSpec::llama(), "general.architecture", Value::String("mamba".into())),
        "architecture `mamba`",
    );
    refused(
        "yarn",
        with_metadata(TinyModelSpec::qwen3(), "qwen3.rope.scaling.type", Value::String("yarn".into())),
        "rope.scaling.type `yarn`",
    );
    refused("moe", with_metadata(TinyModelSpec::llama(), "llama.expert_count", Value::U32(8)), "mixture-of-experts");
    refused(
        "softcap",
        with_metadata(TinyModelSpec::gemma3(), "gemma3.attn_logit_softcapping", Value::F32(50.0)),
        "soft-capping",
    );
    refused(
        "value-length",
        with_metadata(TinyModelSpec::qwen3(), "qwen3.attention.value_length", Value::U32(16)),
        "value length 16",
    );
}
