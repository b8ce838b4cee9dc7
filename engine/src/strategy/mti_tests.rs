//! `MtiStrategy`'s step logic on hand-made rows: deferred and fused unconditional rows,
//! trigger prediction, preemption, and tau = 0.

use super::*;
use entrobatch_sampler::SamplingParams;

const FLAT: [f32; 4] = [1.0, 1.0, 1.0, 0.9];

fn input<'a>(logits: Vec<&'a [f32]>, sampling: &'a SamplingParams, output: &'a [u32]) -> StrategyInput<'a> {
    StrategyInput {
        logits,
        attn_metrics: None,
        prompt_token_ids: &[1, 2],
        output_token_ids: output,
        sampling,
        seed: 3,
        return_metrics: false,
        mask: None,
    }
}

fn plan(context_len: usize, token_ids: &[u32], scratch_rows: usize) -> SpanPlan<'_> {
    SpanPlan { context_len, token_ids, scratch_rows, needs_sample: true }
}

#[test]
fn triggered_row_waits_for_its_scratch_rows_and_preemption_drops_it() {
    let sampling = SamplingParams::greedy();
    let config = MtiConfig { entropy_threshold: 0.5, ..MtiConfig::default() };
    let mut s = MtiStrategy::new(&config, vec![7, 8, 9]).with_trigger_prediction(false);
    assert!(s.scratch_rows(&plan(0, &[1, 2], 0)).is_empty());
    let out = s.process(input(vec![&FLAT], &sampling, &[])).unwrap();
    assert!(out.tokens.is_empty());
    assert_eq!(out.next_scratch_rows, 3);
    // Not granted this step: nothing to run.
    assert!(s.scratch_rows(&plan(2, &[], 0)).is_empty());
    let rows = s.scratch_rows(&plan(2, &[], 3));
    let positions: Vec<u32> = rows.iter().map(|r| r.position).collect();
    assert_eq!(positions, [2, 3, 4]);
    assert_eq!(s.logits_rows(&plan(2, &[], 3), 3), [2]);
    // The unconditional row favours token 3, so the blend (w = 1.5) moves away from it.
    let uncond = [0.0f32, 0.0, 0.0, 5.0];
    let out = s.process(input(vec![&uncond], &sampling, &[])).unwrap();
    assert_eq!(out.next_scratch_rows, 0);
    assert_eq!(out.tokens[0].token_id, 0);
    assert_eq!(out.tokens[0].metrics.as_ref().and_then(|m| m.guided), Some(true));

    let _ = s.scratch_rows(&plan(3, &[0], 0));
    assert!(s.process(input(vec![&FLAT], &sampling, &[0])).unwrap().tokens.is_empty());
    s.on_preempted();
    // Recomputed: the last row is sampled afresh, and triggers afresh.
    assert!(s.scratch_rows(&plan(0, &[1, 2, 0], 0)).is_empty());
    let out = s.process(input(vec![&FLAT], &sampling, &[0])).unwrap();
    assert_eq!(out.next_scratch_rows, 3);
    assert_eq!(s.summary().unwrap()["triggered"], 1);
}

#[test]
fn negative_threshold_runs_scratch_rows_beside_the_decode_row() {
    let sampling = SamplingParams::greedy();
    let config = MtiConfig { entropy_threshold: -1.0, ..MtiConfig::default() };
    let mut s = MtiStrategy::new(&config, vec![7, 8]);
    let rows = s.scratch_rows(&plan(5, &[4], 2));
    assert_eq!(rows, [ScratchRow { token_id: 7, position: 6 }, ScratchRow { token_id: 8, position: 7 }]);
    assert_eq!(s.logits_rows(&plan(5, &[4], 2), 2), [0, 2]);
    let peaked = [0.0f32, 0.0, 9.0, 0.0];
    let out = s.process(input(vec![&peaked, &FLAT], &sampling, &[4])).unwrap();
    assert_eq!(out.tokens.len(), 1, "fused rows emit at once");
    assert_eq!(out.next_scratch_rows, 2, "and ask for the next token's rows");
}

#[test]
fn after_a_guided_token_the_next_decode_row_brings_its_scratch_rows() {
    let sampling = SamplingParams::greedy();
    let config = MtiConfig { entropy_threshold: 0.5, ..MtiConfig::default() };
    let mut s = MtiStrategy::new(&config, vec![7, 8]);
    // First token: deferred, as without prediction.
    assert!(s.scratch_rows(&plan(0, &[1, 2], 2)).is_empty());
    assert!(s.process(input(vec![&FLAT], &sampling, &[])).unwrap().tokens.is_empty());
    assert_eq!(s.scratch_rows(&plan(2, &[], 2)).len(), 2);
    let uncond = [0.0f32, 0.0, 0.0, 5.0];
    let out = s.process(input(vec![&uncond], &sampling, &[])).unwrap();
    assert_eq!(out.tokens[0].metrics.as_ref().and_then(|m| m.guided), Some(true));
    assert_eq!(out.next_scratch_rows, 2, "a guided token predicts another");
    // Predicted and right: the blend is emitted in the same step.
    let rows = s.scratch_rows(&plan(3, &[0], 2));
    assert_eq!(rows, [ScratchRow { token_id: 7, position: 4 }, ScratchRow { token_id: 8, position: 5 }]);
    let out = s.process(input(vec![&FLAT, &uncond], &sampling, &[0])).unwrap();
    assert_eq!(out.tokens.len(), 1);
    assert_eq!(out.tokens[0].token_id, 0, "drawn from the blend, away from the unconditional favourite");
    assert_eq!(out.tokens[0].metrics.as_ref().and_then(|m| m.guided), Some(true));
    // Predicted and wrong: a confident row ignores the unconditional one.
    assert_eq!(s.scratch_rows(&plan(4, &[0], 2)).len(), 2);
    let peaked = [0.0f32, 0.0, 0.0, 30.0];
    let out = s.process(input(vec![&peaked, &[9.0, 0.0, 0.0, 0.0]], &sampling, &[0, 0])).unwrap();
    assert_eq!(out.tokens[0].token_id, 3);
    assert_eq!(out.tokens[0].metrics.as_ref().and_then(|m| m.guided), Some(false));
    assert_eq!(out.next_scratch_rows, 0, "an unguided token predicts none");
    assert!(s.scratch_rows(&plan(5, &[3], 2)).is_empty());
    assert_eq!(s.summary().unwrap()["triggered"], 2);
}

#[test]
fn tau_zero_guides_even_a_row_of_entropy_exactly_zero() {
    // The reference's `tau or -1`: tau = 0 is "always", so the unconditional rows ride with
    // the decode row (as for tau < 0) and a one-hot row, H = 0, is still blended.
    let sampling = SamplingParams::greedy();
    let config = MtiConfig { entropy_threshold: 0.0, ..MtiConfig::default() };
    let mut s = MtiStrategy::new(&config, vec![7, 8]);
    let rows = s.scratch_rows(&plan(5, &[4], 2));
    assert_eq!(rows.len(), 2, "tau = 0 fuses like a negative tau");
    // Finite (model logits always are) but one-hot in f32: exp(-200) underflows to 0.
    let one_hot = [0.0f32, -200.0, -200.0, -200.0];
    let out = s.process(input(vec![&one_hot, &FLAT], &sampling, &[4])).unwrap();
    assert_eq!(out.tokens.len(), 1);
    let metrics = out.tokens[0].metrics.as_ref().unwrap();
    assert_eq!(metrics.entropy, 0.0);
    assert_eq!(metrics.guided, Some(true));
    assert_eq!(s.summary().unwrap()["triggered"], 1);
}
