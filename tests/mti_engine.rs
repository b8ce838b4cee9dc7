//! MTI through the whole engine: the off settings reproduce plain decoding exactly, a negative
//! threshold guides every token exactly as a blend of candle-transformers' conditional and
//! unconditional logits, and MTI requests batched with plain ones (chunked, preempted) leave
//! the plain ones' tokens untouched and free every block.

use entrobatch_testkit::common;

use std::path::Path;

use common::{reference_logits, tiny_model, varied_prompts, RefArch};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::strategy::{MtiConfig, TriggerStats};
use entrobatch::{
    Decoding, Engine, EngineConfig, EngineMetrics, GenerationOutput, GenerationParams, MatmulMode, Prompt,
    SamplingParams,
};

fn config(path: &Path, num_blocks: usize) -> EngineConfig {
    let mut config = EngineConfig::new(path);
    config.num_blocks = Some(num_blocks);
    config.max_num_batched_tokens = 48;
    config.max_num_seqs = 8;
    config.matmul_mode = MatmulMode::Quantized;
    config
}

fn params(sampling: SamplingParams, decoding: Decoding, n: usize) -> GenerationParams {
    GenerationParams { sampling, max_tokens: n, ignore_eos: true, decoding, ..GenerationParams::default() }
}

fn mti(tau: f32, w: f32) -> Decoding {
    Decoding::Mti(MtiConfig { entropy_threshold: tau, guidance_scale: w, ..MtiConfig::default() })
}

fn ids(outputs: &[GenerationOutput]) -> Vec<Vec<u32>> {
    outputs
        .iter()
        .map(|o| {
            assert_eq!(o.error, None);
            o.token_ids.clone()
        })
        .collect()
}

fn prompts(engine: &Engine, n: usize) -> Vec<Vec<u32>> {
    let p = params(SamplingParams::greedy(), Decoding::Plain, 1);
    varied_prompts()
        .iter()
        .take(n)
        .map(|t| {
            let mut ids = engine.tokenize_prompt(&Prompt::Text(t.clone()), &p).expect("tokenize");
            ids.truncate(160);
            ids
        })
        .collect()
}

#[test]
fn infinite_threshold_and_unit_scale_decode_exactly_like_plain() {
    const N: usize = 16;
    let engine = Engine::start(config(&common::smollm2_path(), 256)).expect("engine");
    let sampling = SamplingParams { temperature: 0.9, top_p: 0.95, seed: Some(11), ..SamplingParams::default() };
    let prompts: Vec<Prompt> = prompts(&engine, 3).into_iter().map(Prompt::TokenIds).collect();
    let run = |decoding: Decoding| {
        engine.generate(prompts.clone(), &params(sampling.clone(), decoding, N)).expect("generate")
    };
    let plain = run(Decoding::Plain);
    let never = run(mti(f32::INFINITY, 1.5));
    let metrics = engine.metrics();
    assert_eq!(EngineMetrics::get(&metrics.mti_tokens), 3 * N as u64);
    assert_eq!(EngineMetrics::get(&metrics.mti_triggered_tokens), 0);
    let off = run(mti(-1.0, 1.0));
    assert_eq!(ids(&never), ids(&plain), "tau = +inf must decode exactly like plain");
    assert_eq!(ids(&off), ids(&plain), "omega = 1 must decode exactly like plain");
    for out in &never {
        assert_eq!(TriggerStats::from_tokens(&out.tokens), TriggerStats { tokens: N, triggered: 0 });
    }
    for out in &off {
        assert!(out.tokens.iter().all(|t| t.metrics.is_none()), "omega = 1 is plain decoding");
    }
    // omega = 1 adds no work: nothing was counted as an MTI token after the tau = inf run.
    assert_eq!(EngineMetrics::get(&metrics.mti_tokens), 3 * N as u64);
}

#[test]
fn negative_threshold_guides_every_token_with_candle_blend() {
    let path = common::smollm2_path();
    let engine = Engine::start(config(&path, 64)).expect("engine");
    let prompt = prompts(&engine, 2).pop().expect("prompt");
    let w = 3.0f32;
    let p = params(SamplingParams::greedy(), mti(-1.0, w), 8);
    let out = engine.generate(vec![Prompt::TokenIds(prompt.clone())], &p).expect("generate").remove(0);
    assert_eq!(out.error, None);
    assert_eq!(TriggerStats::from_tokens(&out.tokens), TriggerStats { tokens: 8, triggered: 8 });
    let negative = engine.tokenizer().encode(&MtiConfig::default().negative_prompt, false).expect("encode");
    let mut context = prompt.clone();
    for (i, &token) in out.token_ids.iter().enumerate() {
        let lc = entrobatch::sampler::log_softmax(&reference_logits(&path, RefArch::Llama, &context));
        let mut with_np = context.clone();
        with_np.extend(&negative);
        let lu = entrobatch::sampler::log_softmax(&reference_logits(&path, RefArch::Llama, &with_np));
        let blend: Vec<f32> = lc.iter().zip(&lu).map(|(c, u)| u + w * (c - u)).collect();
        let mut order: Vec<usize> = (0..blend.len()).collect();
        order.sort_by(|&a, &b| blend[b].total_cmp(&blend[a]));
        if blend[order[0]] - blend[order[1]] < 1e-3 {
            assert!(order[..2].contains(&(token as usize)), "step {i}: {token} is not a near-tie winner");
            break;
        }
        assert_eq!(token as usize, order[0], "step {i}: guided token differs from the reference blend");
        context.push(token);
    }
    let metrics = engine.metrics().clone();
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    assert_eq!(EngineMetrics::get(&metrics.mti_triggered_tokens), 8);
    let exposition = metrics.render_prometheus();
    assert!(
        exposition.lines().any(|l| l == "entrobatch_mti_trigger_rate 1"),
        "trigger rate gauge missing:\n{exposition}"
    );
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "blocks leaked");
}

/// Plain and MTI requests interleaved in one batch; every request must equal its own solo run
/// (the default mode is batch-invariant), and every block must come back.
fn batched_with_plain(path: &Path, num_blocks: usize, expect_preemption: bool) {
    const N: usize = 16;
    let engine = Engine::start(config(path, num_blocks)).expect("engine");
    let prompts = prompts(&engine, 6);
    let decodings: Vec<Decoding> = (0..prompts.len())
        .map(|i| match i % 3 {
            0 => Decoding::Plain,
            1 => mti(0.5, 1.5),
            _ => mti(-1.0, 1.5),
        })
        .collect();
    // One submission, so the first step sees every request and the pressure does not depend
    // on how fast this thread submits.
    let requests = prompts
        .iter()
        .zip(&decodings)
        .map(|(p, d)| {
            entrobatch::Request::new(Prompt::TokenIds(p.clone()), params(SamplingParams::greedy(), d.clone(), N))
        })
        .collect();
    let handles = engine.submit_all(requests).expect("submit");
    let outputs: Vec<GenerationOutput> = handles.into_iter().map(|h| h.collect_blocking()).collect();
    let metrics = engine.metrics().clone();
    engine.shutdown(entrobatch::ShutdownMode::Finish);
    assert_eq!(EngineMetrics::get(&metrics.kv_blocks_used), 0, "blocks leaked");
    if expect_preemption {
        assert!(EngineMetrics::get(&metrics.preemptions) > 0, "{num_blocks} blocks were meant to force preemption");
    }
    let solo_engine = Engine::start(config(path, 256)).expect("engine");
    let mut triggered = 0;
    for (i, ((prompt, decoding), out)) in prompts.iter().zip(&decodings).zip(&outputs).enumerate() {
        assert_eq!(out.error, None, "request {i}");
        let p = params(SamplingParams::greedy(), decoding.clone(), N);
        let solo = solo_engine.generate(vec![Prompt::TokenIds(prompt.clone())], &p).expect("solo").remove(0);
        if *decoding == Decoding::Plain {
            assert_eq!(out.token_ids, solo.token_ids, "plain request {i} changed by its MTI neighbours");
            assert!(out.tokens.iter().all(|t| t.metrics.is_none()));
        } else {
            assert_eq!(out.token_ids, solo.token_ids, "MTI request {i} differs from its solo run");
            let stats = TriggerStats::from_tokens(&out.tokens);
            assert_eq!(stats, TriggerStats::from_tokens(&solo.tokens));
            assert_eq!(stats.tokens, N);
            let reported = out.strategy_stats.as_ref().expect("MTI requests report their trigger rate");
            assert_eq!(reported["triggered"], stats.triggered as u64, "request {i}: reported trigger count");
            assert_eq!(reported["tokens"], N as u64);
            triggered += stats.triggered;
        }
    }
    assert_eq!(EngineMetrics::get(&metrics.mti_tokens), 4 * N as u64);
    assert_eq!(EngineMetrics::get(&metrics.mti_triggered_tokens), triggered as u64);
    assert!(triggered >= 2 * N, "tau = -1 requests guide every token");
}

#[test]
fn smollm2_mti_batched_with_plain_leaves_plain_tokens_exact() {
    batched_with_plain(&common::smollm2_path(), 256, false);
}

/// The tiny model stays bit-exact under preemption, so recomputed MTI sequences (whose kept
/// rows are dropped on preemption) must still match their solo runs.
#[test]
fn tiny_model_mti_batched_with_plain_under_preemption() {
    let path = tiny_model(&TinyModelSpec::llama(), "mti-batched");
    batched_with_plain(&path, 12, true);
}
