//! The WeDLM strategy driven step by step against a real paged cache, the way the engine
//! drives it (committed tokens as token rows with KV slots, the window as scratch rows):
//! the K/V it leaves in the cache equals a fresh prefill of prompt + committed tokens, and
//! with no threshold and a huge position penalty it decodes one token per forward, left to
//! right, each token being what a mask right after the committed tokens predicts.

use entrobatch_testkit::wedlm as wedlm_common;

use std::sync::atomic::Ordering;

use entrobatch::model_runner::{ForwardBatch, KvDtype, Model, ModelRunner, SeqSpan};
use entrobatch::strategy::{build_strategy, SpanPlan, StrategyContext, StrategyInput, WedlmConfig};
use entrobatch::{Decoding, Prompt, Request, SamplingParams};
use wedlm_common::*;

const BLOCK: usize = 16;
const BLOCKS: usize = 8;

struct Run {
    runner: ModelRunner,
    output: Vec<u32>,
    /// Tokens returned by each window forward.
    commits: Vec<usize>,
}

/// Prefill, then window steps until `max_tokens` are committed (no stop tokens).
fn drive(dir: &std::path::Path, prompt: &[u32], cfg: &WedlmConfig, max_tokens: usize) -> Run {
    let (model, tokenizer) = entrobatch::model_runner::load_model(dir, Default::default()).unwrap();
    let ctx = StrategyContext {
        mask_token_id: model.config().mask_token_id,
        max_model_len: model.config().max_position_embeddings,
        max_tokens,
        ..StrategyContext::new(&tokenizer)
    };
    let mut strategy = build_strategy(&Decoding::Wedlm(cfg.clone()), &ctx).unwrap();
    let mut runner = ModelRunner::new(model, BLOCKS, BLOCK, KvDtype::F32).unwrap();
    let sampling = SamplingParams::greedy();
    let (mut computed, mut pending, mut scratch) = (0usize, prompt.to_vec(), 0usize);
    let mut output: Vec<u32> = Vec::new();
    let mut commits = Vec::new();
    let mut first = true;
    while output.len() < max_tokens {
        let plan = SpanPlan { context_len: computed, token_ids: &pending, scratch_rows: scratch, needs_sample: true };
        let rows = strategy.scratch_rows(&plan);
        let logits_rows = strategy.logits_rows(&plan, rows.len());
        let n = pending.len();
        let mut batch = ForwardBatch {
            input_ids: pending.clone(),
            positions: (computed..computed + n).map(|p| p as u32).collect(),
            slot_mappings: vec![(computed..computed + n).map(|p| p as i64).collect()],
            seqs: vec![SeqSpan {
                query_start: 0,
                query_len: n + rows.len(),
                context_len: computed,
                block_tables: vec![(0..BLOCKS as u32).collect()],
                want_attn_metrics: false,
                attn_pad_to: None,
            }],
            logits_rows: logits_rows.clone(),
        };
        for r in &rows {
            batch.input_ids.push(r.token_id);
            batch.positions.push(r.position);
            batch.slot_mappings[0].push(-1);
        }
        let out = runner.execute(&batch).unwrap();
        computed += n;
        let all: Vec<u32> = prompt.iter().chain(&output).copied().collect();
        let input = StrategyInput {
            logits: (0..logits_rows.len()).map(|i| out.row(i)).collect(),
            attn_metrics: None,
            prompt_token_ids: prompt,
            output_token_ids: &all[prompt.len()..],
            sampling: &sampling,
            seed: 1,
            return_metrics: false,
            mask: None,
        };
        let decided = strategy.process(input).unwrap();
        if !first {
            commits.push(decided.tokens.len());
        }
        first = false;
        pending = decided.tokens.iter().map(|t| t.token_id).collect();
        output.extend(&pending);
        scratch = decided.next_scratch_rows;
    }
    // The last commit's K/V: one more forward of those token rows, as the engine would run.
    if !pending.is_empty() {
        let n = pending.len();
        let batch = ForwardBatch {
            input_ids: pending.clone(),
            positions: (computed..computed + n).map(|p| p as u32).collect(),
            slot_mappings: vec![(computed..computed + n).map(|p| p as i64).collect()],
            seqs: vec![SeqSpan {
                query_start: 0,
                query_len: n,
                context_len: computed,
                block_tables: vec![(0..BLOCKS as u32).collect()],
                want_attn_metrics: false,
                attn_pad_to: None,
            }],
            logits_rows: Vec::new(),
        };
        runner.execute(&batch).unwrap();
    }
    Run { runner, output, commits }
}

fn prefill(model: Model, tokens: &[u32]) -> ModelRunner {
    let mut runner = ModelRunner::new(model, BLOCKS, BLOCK, KvDtype::F32).unwrap();
    let batch = entrobatch_testkit::common::prefill_batch(tokens, runner.cache(), Vec::new());
    runner.execute(&batch).unwrap();
    runner
}

#[test]
fn committed_kv_equals_a_fresh_prefill_of_prompt_and_committed_tokens() {
    let dir = checkpoint("kv", &qwen3_spec());
    let prompt = prompt(7, 21);
    let cfg = wedlm(6, Some(3.4), 0.02);
    let run = drive(&dir, &prompt, &cfg, 40);
    assert!(run.commits.iter().any(|&c| c >= 2), "no multi-token commit: {:?}", run.commits);
    let all: Vec<u32> = prompt.iter().chain(&run.output).copied().collect();
    // The same tokens as the dense, cache-free reference.
    let model = load(&dir);
    let trace = dense_wedlm(&model, &prompt, &cfg, 40, usize::MAX, &[]);
    assert_eq!(run.output, trace.ids());
    let fresh = prefill(model, &all);
    let layers = fresh.model().config().num_layers;
    let mut max_diff = 0f32;
    for layer in 0..layers {
        for pos in 0..all.len() {
            let (k1, v1) = run.runner.cache().read_slot(layer, pos);
            let (k2, v2) = fresh.cache().read_slot(layer, pos);
            for (a, b) in k1.iter().zip(k2).chain(v1.iter().zip(v2)) {
                max_diff = max_diff.max((a - b).abs());
            }
        }
    }
    eprintln!("committed K/V max |diff| vs fresh prefill: {max_diff}");
    assert!(max_diff <= 1e-5, "committed K/V differs from a fresh prefill by {max_diff}");
}

#[test]
fn no_threshold_and_a_huge_penalty_commit_one_token_per_forward_left_to_right() {
    let dir = checkpoint("one", &qwen3_spec());
    let prompt = prompt(9, 17);
    let cfg = wedlm(5, None, 1000.0);
    let run = drive(&dir, &prompt, &cfg, 20);
    assert_eq!(run.commits, vec![1; 20], "every forward commits exactly its leftmost mask");
    // Leftmost-first means each token is what a single [MASK] right after the committed
    // tokens predicts: a plain prefill of prompt + committed + [MASK].
    let model = load(&dir);
    let mask = model.config().mask_token_id.unwrap();
    let mut tokens = prompt.clone();
    for (i, &got) in run.output.iter().enumerate() {
        let mut with_mask = tokens.clone();
        with_mask.push(mask);
        let n = with_mask.len();
        let batch = ForwardBatch {
            input_ids: with_mask,
            positions: (0..n as u32).collect(),
            slot_mappings: vec![vec![-1; n]],
            seqs: vec![SeqSpan {
                query_start: 0,
                query_len: n,
                context_len: 0,
                block_tables: vec![vec![]],
                want_attn_metrics: false,
                attn_pad_to: None,
            }],
            logits_rows: vec![n - 1],
        };
        let mut cache = entrobatch::model_runner::KvCache::new(model.config(), 1, 16, KvDtype::F32).unwrap();
        let want = argmax(model.forward(&batch, &mut cache).unwrap().row(0));
        assert_eq!(got, want, "token {i}");
        tokens.push(got);
    }

    // Through the engine too: tokens per forward is exactly 1.
    let engine = start(engine_config(&dir));
    let out = engine
        .submit(Request::new(Prompt::TokenIds(prompt.clone()), wedlm_params(&cfg, 20)))
        .unwrap()
        .collect_blocking();
    assert_eq!(out.token_ids, run.output);
    let m = &engine.metrics().wedlm;
    assert_eq!(m.forwards.load(Ordering::Relaxed), 20);
    assert_eq!(m.tokens.load(Ordering::Relaxed), 20);
}
