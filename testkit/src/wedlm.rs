//! Shared pieces of the WeDLM tests: tiny Hugging Face checkpoints, and a dense reference of
//! the WeDLM step with no KV cache. Every step it recomputes prompt + committed tokens +
//! the reordered window as one causal span from position 0 on a fresh cache, which is the
//! spec's mask `j < ctx || j - ctx <= i`; selection and sampling are re-implemented here.

use std::path::{Path, PathBuf};

use entrobatch::model_runner::testing_hf::{write_tiny_hf, TinyHfSpec};
use entrobatch::model_runner::{load_model, ForwardBatch, KvCache, KvDtype, MatmulMode, Model, SeqSpan};
use entrobatch::strategy::WedlmConfig;
use entrobatch::{Decoding, Engine, EngineConfig, GenerationParams, SamplingParams};

/// Test checkpoints: 4 layers with strong projections, so the context (not just the mask
/// embedding) shapes each row and greedy outputs vary; lm_head scaled so mask-row entropies
/// sit around 2.5..4 nats, where the thresholds below fill some masks and not others.
pub const OUTPUT_STD: f32 = 0.3;
pub const PROJ_STD: f32 = 0.3;
pub const LAYERS: usize = 4;

pub fn checkpoint(name: &str, spec: &TinyHfSpec) -> PathBuf {
    let dir = entrobatch::model_runner::testing::unique_test_path(crate::tmp_dir(), &format!("wedlm-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    write_tiny_hf(&dir, spec).expect("write tiny checkpoint");
    dir
}

pub fn qwen3_spec() -> TinyHfSpec {
    TinyHfSpec { output_std: OUTPUT_STD, proj_std: PROJ_STD, n_layers: LAYERS, seed: 21, ..TinyHfSpec::qwen3() }
}

pub fn qwen2_spec() -> TinyHfSpec {
    TinyHfSpec { output_std: OUTPUT_STD, proj_std: PROJ_STD, n_layers: LAYERS, seed: 5, ..TinyHfSpec::qwen2() }
}

pub fn load(dir: &Path) -> Model {
    load_model(dir, MatmulMode::default()).expect("load checkpoint").0
}

/// Small budget and pool: prompts arrive in chunks, windows share forwards with them.
pub fn engine_config(dir: &Path) -> EngineConfig {
    let mut c = EngineConfig::new(dir);
    c.block_size = 16;
    c.num_blocks = Some(96);
    c.max_num_batched_tokens = 64;
    c.max_num_seqs = 16;
    c
}

pub fn start(config: EngineConfig) -> Engine {
    Engine::start(config).expect("engine start")
}

pub fn wedlm_params(cfg: &WedlmConfig, max_tokens: usize) -> GenerationParams {
    GenerationParams {
        sampling: SamplingParams::greedy(),
        max_tokens,
        ignore_eos: true,
        decoding: Decoding::Wedlm(cfg.clone()),
        ..GenerationParams::default()
    }
}

pub fn plain_params(max_tokens: usize) -> GenerationParams {
    GenerationParams { sampling: SamplingParams::greedy(), max_tokens, ignore_eos: true, ..GenerationParams::default() }
}

pub fn wedlm(window_size: usize, entropy_threshold: Option<f32>, pos_penalty: f32) -> WedlmConfig {
    WedlmConfig { window_size, entropy_threshold, pos_penalty }
}

/// Deterministic prompts of ordinary tokens (ids 3..300 of the tiny vocabulary).
pub fn prompt(seed: u64, len: usize) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            3 + (s % 297) as u32
        })
        .collect()
}

/// One committed token of the reference and when it was filled / committed (forward index).
#[derive(Clone, Debug, PartialEq)]
pub struct TraceToken {
    pub token: u32,
    pub filled_at: usize,
    pub committed_at: usize,
}

#[derive(Debug, Default)]
pub struct Trace {
    pub tokens: Vec<TraceToken>,
    /// Window forwards run.
    pub forwards: usize,
    /// Tokens committed per forward.
    pub commits: Vec<usize>,
}

impl Trace {
    pub fn ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|t| t.token).collect()
    }

    /// Tokens filled while a mask was still to their left (committed in a later forward).
    pub fn out_of_order_fills(&self) -> usize {
        self.tokens.iter().filter(|t| t.committed_at > t.filled_at).count()
    }
}

/// Greedy WeDLM exactly as the spec's DECODE_STEP, without a KV cache.
pub fn dense_wedlm(
    model: &Model,
    prompt: &[u32],
    cfg: &WedlmConfig,
    max_tokens: usize,
    max_model_len: usize,
    stop_ids: &[u32],
) -> Trace {
    let mask = model.config().mask_token_id.expect("mask token");
    let limit = (prompt.len() + max_tokens).min(max_model_len);
    let window_len = |ctx: usize| cfg.window_size.min(limit.saturating_sub(ctx));
    let mut tokens = prompt.to_vec();
    // Slot k: Some((token, forward that filled it)) or a mask.
    let mut window: Vec<Option<(u32, usize)>> = vec![None; window_len(tokens.len())];
    let mut trace = Trace::default();
    while !window.is_empty() {
        let ctx = tokens.len();
        let filled: Vec<usize> = (0..window.len()).filter(|&k| window[k].is_some()).collect();
        let masks: Vec<usize> = (0..window.len()).filter(|&k| window[k].is_none()).collect();
        let mut ids = tokens.clone();
        let mut positions: Vec<u32> = (0..ctx as u32).collect();
        for &k in filled.iter().chain(&masks) {
            ids.push(window[k].map_or(mask, |(t, _)| t));
            positions.push((ctx + k) as u32);
        }
        let rows = ids.len();
        let first_mask_row = ctx + filled.len();
        let batch = ForwardBatch {
            input_ids: ids,
            positions,
            slot_mappings: vec![vec![-1; rows]],
            seqs: vec![SeqSpan {
                query_start: 0,
                query_len: rows,
                context_len: 0,
                block_tables: vec![Vec::new()],
                want_attn_metrics: false,
                attn_pad_to: None,
            }],
            logits_rows: (first_mask_row..rows).collect(),
        };
        let mut cache = KvCache::new(model.config(), 1, 16, KvDtype::F32).expect("cache");
        let out = model.forward(&batch, &mut cache).expect("dense forward");
        let entropy: Vec<f64> = (0..masks.len()).map(|j| entropy(out.row(j))).collect();
        let chosen = select(&entropy, &masks, cfg.entropy_threshold, cfg.pos_penalty);
        let step = trace.forwards;
        for j in chosen {
            window[masks[j]] = Some((argmax(out.row(j)), step));
        }
        trace.forwards += 1;
        let p = window.iter().take_while(|s| s.is_some()).count();
        trace.commits.push(p);
        for (token, filled_at) in window.drain(..p).flatten() {
            trace.tokens.push(TraceToken { token, filled_at, committed_at: step });
            tokens.push(token);
            if stop_ids.contains(&token) || trace.tokens.len() >= max_tokens {
                return trace;
            }
        }
        window.resize(window_len(tokens.len()), None);
    }
    trace
}

/// Entropy in nats of softmax(logits), straight from the definition in f64.
pub fn entropy(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let exps: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let z: f64 = exps.iter().sum();
    -exps.iter().map(|e| e / z).filter(|&p| p > 0.0).map(|p| p * p.ln()).sum::<f64>()
}

fn select(entropy: &[f64], slots: &[usize], tau: Option<f32>, lambda: f32) -> Vec<usize> {
    let adjusted: Vec<f64> =
        entropy.iter().zip(slots).map(|(&h, &s)| h + lambda as f64 * (s - slots[0]) as f64).collect();
    if let Some(tau) = tau {
        let below: Vec<usize> = (0..adjusted.len()).filter(|&j| adjusted[j] < tau as f64).collect();
        if !below.is_empty() {
            return below;
        }
    }
    let mut best = 0;
    for j in 1..adjusted.len() {
        if adjusted[j] < adjusted[best] {
            best = j;
        }
    }
    vec![best]
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy autoregressive tokens by dense recomputation (the plain requests' reference).
pub fn dense_greedy(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut tokens = prompt.to_vec();
    for _ in 0..n {
        let rows = tokens.len();
        let batch = ForwardBatch {
            input_ids: tokens.clone(),
            positions: (0..rows as u32).collect(),
            slot_mappings: vec![vec![-1; rows]],
            seqs: vec![SeqSpan {
                query_start: 0,
                query_len: rows,
                context_len: 0,
                block_tables: vec![Vec::new()],
                want_attn_metrics: false,
                attn_pad_to: None,
            }],
            logits_rows: vec![rows - 1],
        };
        let mut cache = KvCache::new(model.config(), 1, 16, KvDtype::F32).expect("cache");
        let out = model.forward(&batch, &mut cache).expect("dense forward");
        tokens.push(argmax(out.row(0)));
    }
    tokens[prompt.len()..].to_vec()
}
