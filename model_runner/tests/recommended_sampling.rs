//! `RecommendedSampling::read`: a GGUF's `general.sampling.*` keys (whatever numeric type the
//! converter wrote) and a checkpoint's `generation_config.json`, by OpenAI field name.

use std::path::PathBuf;

use candle_core::quantized::gguf_file::Value;
use entrobatch_model_runner::testing::{unique_test_path, write_tiny_gguf, TinyModelSpec};
use entrobatch_model_runner::testing_hf::{write_tiny_hf, TinyHfSpec};
use entrobatch_model_runner::{ModelError, RecommendedSampling};

fn gguf(name: &str, metadata: Vec<(&str, Value)>) -> PathBuf {
    let dir = unique_test_path(env!("CARGO_TARGET_TMPDIR"), name);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("model.gguf");
    let extra_metadata = metadata.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    write_tiny_gguf(&path, &TinyModelSpec { extra_metadata, ..TinyModelSpec::llama() }).expect("write gguf");
    path
}

fn checkpoint(name: &str, generation_config: Option<&str>) -> PathBuf {
    let dir = unique_test_path(env!("CARGO_TARGET_TMPDIR"), name);
    write_tiny_hf(&dir, &TinyHfSpec::qwen2()).expect("write checkpoint");
    match generation_config {
        Some(text) => std::fs::write(dir.join("generation_config.json"), text).expect("write generation_config"),
        None => std::fs::remove_file(dir.join("generation_config.json")).expect("remove generation_config"),
    }
    dir
}

#[test]
fn gguf_sampling_keys_of_any_numeric_type() {
    let path = gguf(
        "sampling-keys",
        vec![
            ("general.sampling.temp", Value::F32(0.6)),
            ("general.sampling.top_k", Value::U32(20)),
            ("general.sampling.top_p", Value::F64(0.95)),
            // A declared zero is a choice, not an absence.
            ("general.sampling.min_p", Value::F32(0.0)),
            ("general.sampling.penalty_repeat", Value::F32(1.05)),
            // Keys with no OpenAI field are passed over.
            ("general.sampling.mirostat", Value::U32(0)),
            ("general.sampling.sequence", Value::String("top_k;top_p;temp".into())),
        ],
    );
    let r = RecommendedSampling::read(&path).expect("read");
    let expected = RecommendedSampling {
        temperature: Some(0.6),
        top_p: Some(0.95),
        top_k: Some(20),
        min_p: Some(0.0),
        repetition_penalty: Some(1.05),
        max_tokens: None,
    };
    assert_eq!(r, expected);
    let plain = gguf("sampling-none", vec![]);
    assert!(RecommendedSampling::read(&plain).expect("read").is_empty(), "no keys, nothing recommended");
}

#[test]
fn a_sampling_key_that_is_not_a_number_is_an_error_naming_it() {
    let path = gguf("sampling-bad", vec![("general.sampling.temp", Value::String("warm".into()))]);
    match RecommendedSampling::read(&path) {
        Err(ModelError::Load { message, .. }) => assert!(message.contains("general.sampling.temp"), "{message}"),
        other => panic!("expected a load error, got {other:?}"),
    }
}

#[test]
fn generation_config_json_of_a_checkpoint() {
    let config = r#"{"eos_token_id": 2, "do_sample": true, "temperature": 0.7, "top_k": 20.0, "top_p": 0.8,
        "repetition_penalty": 1.1, "max_new_tokens": 64, "min_p": null}"#;
    let r = RecommendedSampling::read(&checkpoint("gen-config", Some(config))).expect("read");
    let expected = RecommendedSampling {
        temperature: Some(0.7),
        top_p: Some(0.8),
        top_k: Some(20),
        min_p: None,
        repetition_penalty: Some(1.1),
        max_tokens: Some(64),
    };
    assert_eq!(r, expected);
    let none = RecommendedSampling::read(&checkpoint("gen-config-missing", None)).expect("read");
    assert!(none.is_empty(), "a checkpoint without generation_config.json recommends nothing");
    for (name, bad, key) in [
        ("gen-config-fraction", r#"{"top_k": 20.5}"#, "top_k"),
        ("gen-config-string", r#"{"temperature": "0.7"}"#, "temperature"),
    ] {
        match RecommendedSampling::read(&checkpoint(name, Some(bad))) {
            Err(ModelError::Load { message, .. }) => assert!(message.contains(key), "{name}: {message}"),
            other => panic!("{name}: expected a load error, got {other:?}"),
        }
    }
}
