//! MTI's unconditional rows against an independent model: the real scheduler, the MTI
//! strategy and the model runner are stepped the way the engine loop steps them, and at
//! every guided token the scratch rows' logits must equal candle-transformers' own model run
//! over `context + negative prompt`, the sequence's KV blocks and cache contents must be the
//! same before and after, and the token must be the argmax of the blend computed here.

use entrobatch_testkit::common;

use std::path::Path;

use common::{reference_logits, tiny_model, RefArch};
use entrobatch::model_runner::testing::TinyModelSpec;
use entrobatch::model_runner::{load_gguf, ForwardBatch, KvDtype, MatmulMode, ModelRunner, SeqSpan, Tokenizer};
use entrobatch::scheduler::{NewSequence, Scheduler, SchedulerConfig};
use entrobatch::strategy::{MtiConfig, MtiStrategy, SequenceStrategy, SpanPlan, StrategyInput, StrategyOutput};
use entrobatch::SamplingParams;

const ID: u64 = 1;
const BLOCK: usize = 16;

struct Harness {
    runner: ModelRunner,
    scheduler: Scheduler,
    strategy: MtiStrategy,
    sampling: SamplingParams,
}

/// One engine step of the single sequence: its span and what the strategy made of it.
struct Step {
    context: Vec<u32>,
    token_ids: Vec<u32>,
    slot_mapping: Vec<i64>,
    num_scratch: usize,
    logits: Vec<Vec<f32>>,
    output: StrategyOutput,
}

impl Harness {
    fn new(path: &Path, prompt: &[u32], config: &MtiConfig, predict: bool) -> (Self, Vec<u32>) {
        let (mut model, tokenizer): (_, Tokenizer) = load_gguf(path, MatmulMode::Quantized).expect("load");
        // Bit-comparable with candle-transformers' model: mirror its attention ops.
        model.set_attention_kernel(entrobatch::model_runner::AttentionKernel::CandleMirror);
        let runner = ModelRunner::new(model, 32, BLOCK, KvDtype::F32).expect("runner");
        let mut scheduler = Scheduler::new(SchedulerConfig {
            max_num_batched_tokens: 64,
            max_prefill_tokens_with_decodes: 64,
            max_num_seqs: 4,
            block_size: BLOCK,
            num_blocks: 32,
            max_model_len: 256,
            kv_group_windows: vec![None],
            enable_prefix_caching: false,
            latency_targets: Default::default(),
            branch_row_share: SchedulerConfig::default().branch_row_share,
        })
        .expect("scheduler");
        scheduler
            .add(NewSequence {
                id: ID,
                prompt_token_ids: prompt.to_vec(),
                max_tokens: 64,
                skip_prefix_cache: false,
                ttft_target: None,
            })
            .expect("add");
        let strategy = MtiStrategy::build(config, &tokenizer).expect("strategy").with_trigger_prediction(predict);
        let negative = config.negative_prompt_ids(&tokenizer).expect("negative prompt");
        let sampling = SamplingParams::greedy();
        (Self { runner, scheduler, strategy, sampling }, negative)
    }

    /// Schedule, pack (as `batch_builder` does), forward, process, apply.
    fn step(&mut self) -> Step {
        let plan = self.scheduler.schedule();
        assert_eq!(plan.scheduled.len(), 1, "the sequence must be scheduled every step");
        let s = &plan.scheduled[0];
        let token_ids = self.scheduler.query_token_ids(s).to_vec();
        let slot_mapping = self.scheduler.slot_mapping(s, 0).expect("slots");
        let block_table = self.scheduler.get(ID).expect("sequence").block_table_ids(0).to_vec();
        let span_plan = SpanPlan {
            context_len: s.context_len,
            token_ids: &token_ids,
            scratch_rows: s.scratch_rows,
            needs_sample: s.needs_sample,
        };
        let scratch = self.strategy.scratch_rows(&span_plan);
        let mut batch = ForwardBatch {
            input_ids: token_ids.clone(),
            positions: s.positions().map(|p| p as u32).collect(),
            slot_mappings: vec![slot_mapping.clone()],
            ..ForwardBatch::default()
        };
        for row in &scratch {
            batch.input_ids.push(row.token_id);
            batch.positions.push(row.position);
            batch.slot_mappings[0].push(-1);
        }
        batch.logits_rows = self.strategy.logits_rows(&span_plan, scratch.len());
        batch.seqs.push(SeqSpan {
            query_start: 0,
            query_len: batch.input_ids.len(),
            context_len: s.context_len,
            block_tables: vec![block_table],
            want_attn_metrics: false,
            attn_pad_to: None,
        });
        let out = self.runner.execute(&batch).expect("forward");
        let logits: Vec<Vec<f32>> = (0..batch.logits_rows.len()).map(|i| out.row(i).to_vec()).collect();
        let seq = self.scheduler.get(ID).expect("sequence");
        let context = seq.token_ids()[..s.context_len].to_vec();
        let num_prompt = seq.num_prompt_tokens();
        let output = self
            .strategy
            .process(StrategyInput {
                logits: logits.iter().map(Vec::as_slice).collect(),
                attn_metrics: None,
                prompt_token_ids: &seq.token_ids()[..num_prompt],
                output_token_ids: seq.output_token_ids(),
                sampling: &self.sampling,
                seed: 7,
                return_metrics: false,
                mask: None,
            })
            .expect("process");
        for t in &output.tokens {
            self.scheduler.append_token(ID, t.token_id).expect("append");
        }
        if output.next_scratch_rows > 0 {
            self.scheduler.request_scratch_rows(ID, output.next_scratch_rows).expect("scratch rows");
        }
        Step { context, token_ids, slot_mapping, num_scratch: scratch.len(), logits, output }
    }

    /// The block table, and the K/V (all layers) of every slot of the whole cache.
    fn snapshot(&self) -> (Vec<u32>, Vec<Vec<f32>>) {
        let table = self.scheduler.get(ID).expect("sequence").block_table_ids(0).to_vec();
        let cache = self.runner.cache();
        let layers = self.runner.model().config().num_layers;
        let kv = (0..cache.num_slots())
            .map(|slot| {
                (0..layers)
                    .flat_map(|layer| {
                        let (k, v) = cache.read_slot(layer, slot);
                        k.into_iter().chain(v).collect::<Vec<f32>>()
                    })
                    .collect()
            })
            .collect();
        (table, kv)
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// `log_softmax(u) + w (log_softmax(c) - log_softmax(u))` in f64, and its top two.
fn blended_top2(cond: &[f32], uncond: &[f32], w: f64) -> ((usize, f64), f64) {
    let lse = |x: &[f32]| {
        let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln()
    };
    let (zc, zu) = (lse(cond), lse(uncond));
    let mut best = (0usize, f64::NEG_INFINITY);
    let mut second = f64::NEG_INFINITY;
    for (i, (&c, &u)) in cond.iter().zip(uncond).enumerate() {
        let (lc, lu) = (c as f64 - zc, u as f64 - zu);
        let l = lu + w * (lc - lu);
        if l > best.1 {
            second = best.1;
            best = (i, l);
        } else if l > second {
            second = l;
        }
    }
    (best, second)
}

/// Steps until `guided` tokens were guided, checking each against the reference.
fn check_guided_steps(
    path: &Path,
    arch: RefArch,
    prompt: &[u32],
    config: MtiConfig,
    predict: bool,
    guided: usize,
    tol: f32,
) {
    let (mut h, negative) = Harness::new(path, prompt, &config, predict);
    assert!(!negative.is_empty());
    let mut pending_cond: Option<Vec<f32>> = None;
    let (mut seen, mut steps) = (0, 0);
    while seen < guided {
        steps += 1;
        assert!(steps < 8 * guided + 8, "too few guided tokens");
        let before = h.snapshot();
        let step = h.step();
        let after = h.snapshot();
        let mut full = step.context.clone();
        full.extend(&step.token_ids);
        if step.num_scratch == 0 {
            // A conditional row: it must be the reference's, whatever came before.
            let cond = &step.logits[0];
            let diff = max_diff(cond, &reference_logits(path, arch, &full));
            assert!(diff <= tol, "conditional logits differ by {diff}");
            if step.output.tokens.is_empty() {
                assert_eq!(step.output.next_scratch_rows, negative.len());
                pending_cond = Some(cond.clone());
            }
            continue;
        }
        assert_eq!(step.num_scratch, negative.len());
        // Only the step's token rows (a fused decode row) may write K/V or need blocks.
        assert!(after.0.starts_with(&before.0), "a guided step replaced blocks");
        assert_eq!(after.0.len(), full.len().div_ceil(BLOCK), "blocks allocated for scratch rows");
        for (slot, (b, a)) in before.1.iter().zip(&after.1).enumerate() {
            if !step.slot_mapping.contains(&(slot as i64)) {
                assert!(a == b, "slot {slot}: K/V changed by a guided step");
            }
        }
        let cond = match step.token_ids.len() {
            0 => pending_cond.take().expect("scratch-only step without a kept row"),
            _ => step.logits[0].clone(),
        };
        let uncond = step.logits.last().expect("unconditional row");
        let mut with_np = full.clone();
        with_np.extend(&negative);
        let reference = reference_logits(path, arch, &with_np);
        let diff = max_diff(uncond, &reference);
        assert!(diff <= tol, "unconditional logits differ from the reference by {diff}");
        assert!(max_diff(uncond, &cond) > 100.0 * tol, "unconditional row indistinguishable from the conditional one");
        eprintln!("guided token {seen}: unconditional diff {diff}, context {} + {} rows", full.len(), negative.len());
        let [token] = step.output.tokens.as_slice() else { panic!("a guided step emits one token") };
        let metrics = token.metrics.as_ref().expect("MTI tokens carry metrics");
        assert_eq!(metrics.guided, Some(true));
        let ((best, top), second) = blended_top2(&cond, &reference, config.guidance_scale as f64);
        if top - second > 1e-3 {
            assert_eq!(token.token_id as usize, best, "guided token is not the blend's argmax");
        }
        seen += 1;
    }
}

fn smollm2_prompt(path: &Path) -> Vec<u32> {
    let (_, tokenizer) = load_gguf(path, MatmulMode::Quantized).expect("load");
    tokenizer.encode("The three most important inventions in history are", true).expect("encode")
}

#[test]
fn smollm2_unconditional_rows_match_reference_deferred() {
    let path = common::smollm2_path();
    let prompt = smollm2_prompt(&path);
    // The smallest positive tau: (nearly) every token triggers, through the two-step (kept
    // row, then scratch rows) path; tau = 0 itself means "always" and fuses like tau < 0.
    let config = MtiConfig { entropy_threshold: f32::MIN_POSITIVE, guidance_scale: 1.5, ..MtiConfig::default() };
    check_guided_steps(&path, RefArch::Llama, &prompt, config, false, 4, 2e-3);
}

#[test]
fn smollm2_unconditional_rows_match_reference_fused() {
    let path = common::smollm2_path();
    let prompt = smollm2_prompt(&path);
    // tau = -1: after the first token the scratch rows ride with each decode row.
    let config = MtiConfig { entropy_threshold: -1.0, guidance_scale: 3.0, ..MtiConfig::default() };
    check_guided_steps(&path, RefArch::Llama, &prompt, config, false, 4, 2e-3);
    // A positive tau with trigger prediction: the first token is deferred, the next ones fused.
    let config = MtiConfig { entropy_threshold: f32::MIN_POSITIVE, guidance_scale: 1.5, ..MtiConfig::default() };
    check_guided_steps(&path, RefArch::Llama, &prompt, config, true, 4, 2e-3);
}

#[test]
fn tiny_model_unconditional_rows_match_reference() {
    let path = tiny_model(&TinyModelSpec::llama(), "mti-reference");
    let prompt: Vec<u32> = (0..21).map(|i| 40 + (i * 7) % 50).collect();
    // The smallest positive tau defers (two steps per guided token); 0 and -1 always fuse.
    for tau in [f32::MIN_POSITIVE, 0.0, -1.0] {
        let config = MtiConfig { entropy_threshold: tau, guidance_scale: 2.0, ..MtiConfig::default() };
        check_guided_steps(&path, RefArch::Llama, &prompt, config.clone(), false, 3, 1e-4);
        check_guided_steps(&path, RefArch::Llama, &prompt, config, true, 3, 1e-4);
    }
}
