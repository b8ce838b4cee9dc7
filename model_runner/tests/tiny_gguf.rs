//! The tiny random GGUF models load in candle-transformers' reference implementations, give
//! non-degenerate logits, and carry a working tokenizer.

mod common;

use std::path::PathBuf;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::quantized::GgmlDType;
use candle_core::{Device, Tensor};
use candle_transformers::models::{quantized_llama, quantized_qwen2};
use entrobatch_model_runner::testing::{write_tiny_gguf, TinyArch, TinyModelSpec, TINY_VOCAB_SIZE};
use entrobatch_model_runner::tokenizer::Tokenizer;

/// A file in the temp dir, removed on drop.
struct TempGguf(PathBuf);

impl TempGguf {
    fn write(name: &str, spec: &TinyModelSpec) -> Self {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("entrobatch-tiny-{}-{name}.gguf", std::process::id()));
        write_tiny_gguf(&path, spec).unwrap();
        Self(path)
    }
}

impl Drop for TempGguf {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

enum Reference {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
}

impl Reference {
    fn load(path: &std::path::Path, arch: TinyArch) -> Self {
        let mut f = std::fs::File::open(path).unwrap();
        let content = Content::read(&mut f).unwrap();
        match arch {
            TinyArch::Llama => {
                Self::Llama(quantized_llama::ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap())
            }
            TinyArch::Qwen2 => {
                Self::Qwen2(quantized_qwen2::ModelWeights::from_gguf(content, &mut f, &Device::Cpu).unwrap())
            }
            // The other families are compared with their references in the root tests/family_logits.rs.
            other => unreachable!("this file checks llama and qwen2 only, not {other:?}"),
        }
    }

    /// Logits of the last position, as a Vec.
    fn forward(&mut self, ids: &[u32], pos: usize) -> Vec<f32> {
        let x = Tensor::new(ids, &Device::Cpu).unwrap().unsqueeze(0).unwrap();
        let logits = match self {
            Self::Llama(m) => m.forward(&x, pos),
            Self::Qwen2(m) => m.forward(&x, pos),
        };
        logits.unwrap().flatten_all().unwrap().to_vec1().unwrap()
    }
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map(|(i, _)| i as u32).unwrap()
}

fn check_reference_forward(name: &str, spec: TinyModelSpec) {
    let file = TempGguf::write(name, &spec);
    let tok = Tokenizer::from_gguf(&common::read_content(&file.0)).unwrap();
    let prompt = tok.encode("<|im_start|>user\nHello world, the cat<|im_end|>\n", false).unwrap();
    let mut model = Reference::load(&file.0, spec.arch);

    let logits = model.forward(&prompt, 0);
    assert_eq!(logits.len(), TINY_VOCAB_SIZE);
    assert!(logits.iter().all(|x| x.is_finite()), "{name}: non-finite logits");
    let (lo, hi) = logits.iter().fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(hi - lo > 1.0, "{name}: logits nearly flat ({lo}..{hi})");

    let mut generated = vec![argmax(&logits)];
    let mut pos = prompt.len();
    while generated.len() < 16 {
        let last = *generated.last().unwrap();
        let logits = model.forward(&[last], pos);
        assert!(logits.iter().all(|x| x.is_finite()), "{name}: non-finite logits at {pos}");
        generated.push(argmax(&logits));
        pos += 1;
    }
    let mut distinct = generated.clone();
    distinct.sort();
    distinct.dedup();
    eprintln!("{name}: greedy ids {generated:?}");
    assert!(distinct.len() >= 2, "{name}: greedy decoding is stuck on one token: {generated:?}");
}

#[test]
fn llama_q8_0_runs_in_candle_reference() {
    check_reference_forward("llama-q8", TinyModelSpec::llama());
}

#[test]
fn llama_q4_1_runs_in_candle_reference() {
    check_reference_forward("llama-q41", TinyModelSpec { dtype: GgmlDType::Q4_1, seed: 7, ..TinyModelSpec::llama() });
}

#[test]
fn qwen2_q8_0_runs_in_candle_reference() {
    check_reference_forward("qwen2-q8", TinyModelSpec::qwen2());
}

#[test]
fn qwen2_q4_1_runs_in_candle_reference() {
    check_reference_forward("qwen2-q41", TinyModelSpec { dtype: GgmlDType::Q4_1, seed: 3, ..TinyModelSpec::qwen2() });
}

#[test]
fn metadata_and_tensor_layout() {
    for spec in [TinyModelSpec::llama(), TinyModelSpec::qwen2()] {
        let arch = spec.arch.gguf_name();
        let file = TempGguf::write(&format!("layout-{arch}"), &spec);
        let c = common::read_content(&file.0);
        let u32_of = |k: &str| c.metadata[k].to_u32().unwrap();
        assert_eq!(c.metadata["general.architecture"].to_string().unwrap(), arch);
        assert_eq!(u32_of(&format!("{arch}.attention.head_count")), 4);
        assert_eq!(u32_of(&format!("{arch}.attention.head_count_kv")), 2);
        assert_eq!(u32_of(&format!("{arch}.block_count")), 2);
        assert_eq!(u32_of(&format!("{arch}.embedding_length")), 64);
        assert_eq!(u32_of(&format!("{arch}.feed_forward_length")), 128);
        assert_eq!(u32_of(&format!("{arch}.context_length")), 512);
        assert!(c.metadata.contains_key(&format!("{arch}.rope.freq_base")));
        assert!(c.metadata.contains_key(&format!("{arch}.attention.layer_norm_rms_epsilon")));
        assert_eq!(c.metadata.contains_key(&format!("{arch}.rope.dimension_count")), spec.arch == TinyArch::Llama);

        let info = |n: &str| c.tensor_infos.get(n).unwrap_or_else(|| panic!("{arch}: missing {n}"));
        assert_eq!(info("token_embd.weight").shape.dims(), [TINY_VOCAB_SIZE, 64]);
        assert_eq!(info("token_embd.weight").ggml_dtype, GgmlDType::Q8_0);
        assert_eq!(info("output.weight").shape.dims(), [TINY_VOCAB_SIZE, 64]);
        assert_eq!(info("output_norm.weight").ggml_dtype, GgmlDType::F32);
        assert_eq!(info("blk.1.attn_norm.weight").ggml_dtype, GgmlDType::F32);
        assert_eq!(info("blk.1.ffn_norm.weight").ggml_dtype, GgmlDType::F32);
        assert_eq!(info("blk.0.attn_k.weight").shape.dims(), [32, 64]);
        assert_eq!(info("blk.0.ffn_down.weight").shape.dims(), [64, 128]);
        assert_eq!(info("blk.0.ffn_gate.weight").ggml_dtype, GgmlDType::Q8_0);
        let biases = ["blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"];
        for b in biases {
            match spec.arch {
                TinyArch::Qwen2 => assert_eq!(info(b).ggml_dtype, GgmlDType::F32),
                TinyArch::Llama => assert!(!c.tensor_infos.contains_key(b)),
                other => unreachable!("this file checks llama and qwen2 only, not {other:?}"),
            }
        }
        let expected_tensors = 1 + 2 + spec.n_layers * if spec.arch == TinyArch::Qwen2 { 12 } else { 9 };
        assert_eq!(c.tensor_infos.len(), expected_tensors);
    }
}

#[test]
fn seeded_and_validated() {
    let read = |name: &str, spec: &TinyModelSpec| std::fs::read(&TempGguf::write(name, spec).0).unwrap();
    let a = read("seed-a", &TinyModelSpec::llama());
    let b = read("seed-b", &TinyModelSpec::llama());
    let c = read("seed-c", &TinyModelSpec { seed: 1, ..TinyModelSpec::llama() });
    assert_eq!(a, b, "same seed must give identical files");
    assert_ne!(a, c, "different seeds must give different weights");
    // Q4_K's 256-wide blocks don't divide the 64-wide rows: a clear error, not a panic.
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("entrobatch-tiny-{}-bad.gguf", std::process::id()));
    let bad = TinyModelSpec { dtype: GgmlDType::Q4K, ..TinyModelSpec::llama() };
    assert!(write_tiny_gguf(&path, &bad).is_err());
    let _ = std::fs::remove_file(&path);
}

#[test]
fn tiny_tokenizer_round_trips() {
    for spec in [TinyModelSpec::llama(), TinyModelSpec::qwen2()] {
        let arch = spec.arch;
        let file = TempGguf::write(&format!("tok-{}", arch.gguf_name()), &spec);
        let c = common::read_content(&file.0);
        let pre = c.metadata["tokenizer.ggml.pre"].to_string().unwrap().clone();
        assert_eq!(pre, if arch == TinyArch::Llama { "smollm" } else { "qwen2" });
        let tok = Tokenizer::from_gguf(&c).unwrap();
        assert_eq!(tok.vocab_size, TINY_VOCAB_SIZE);
        let (im_start, im_end, eot) = (
            tok.token_id("<|im_start|>").unwrap(),
            tok.token_id("<|im_end|>").unwrap(),
            tok.token_id("<|endoftext|>").unwrap(),
        );
        assert_eq!(tok.eos_token_ids, vec![im_end, eot]);
        assert!(tok.is_special(im_start) && tok.is_special(im_end) && tok.is_special(eot));
        match arch {
            TinyArch::Llama => assert_eq!((tok.bos_token_id, im_start), (Some(1), 1)),
            TinyArch::Qwen2 => assert_eq!(tok.bos_token_id, Some(eot)),
            other => unreachable!("this file checks llama and qwen2 only, not {other:?}"),
        }
        assert_eq!(
            tok.encode("Hello world", false).unwrap(),
            vec![tok.token_id("Hello").unwrap(), tok.token_id("Ġworld").unwrap()],
            "{arch:?}"
        );
        assert_eq!(tok.encode("12345", false).unwrap().len(), 5, "{arch:?}: digits split one by one");
        for text in common::TRICKY {
            let ids = tok.encode(text, false).unwrap();
            assert!(ids.iter().all(|&i| (i as usize) < TINY_VOCAB_SIZE));
            assert_eq!(tok.decode(&ids, false).unwrap(), *text, "{arch:?} round trip of {text:?}");
        }
        let ids = tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap();
        assert_eq!((ids[0], *ids.last().unwrap()), (im_start, im_end));
        assert_eq!(tok.decode(&ids, true).unwrap(), "user\nhi");
        // The padding rows exist as tokens, so any sampled id decodes.
        assert!(tok.id_to_token(TINY_VOCAB_SIZE as u32 - 1).unwrap().starts_with("[PAD"));
    }
}

/// Reads the tiny llama GGUF and lets the caller edit its metadata.
fn tiny_content_with(edit: impl FnOnce(&mut std::collections::HashMap<String, Value>)) -> Content {
    let file = TempGguf::write(&format!("edit-{:?}", std::thread::current().id()), &TinyModelSpec::llama());
    let mut c = common::read_content(&file.0);
    edit(&mut c.metadata);
    c
}

#[test]
fn add_bos_token_prepends_bos_only_with_special_tokens() {
    let c = tiny_content_with(|md| {
        md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(true));
    });
    let tok = Tokenizer::from_gguf(&c).unwrap();
    assert!(tok.add_bos_token);
    let plain = tok.encode("Hello", false).unwrap();
    let with = tok.encode("Hello", true).unwrap();
    assert_eq!(with[0], tok.bos_token_id.unwrap());
    assert_eq!(&with[1..], &plain[..]);
}
