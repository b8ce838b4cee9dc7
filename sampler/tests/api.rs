//! Greedy choice, logprobs, penalties, per-row errors and batch determinism,
//! through the public `sample_row` API, row by row as the engine calls it.

use entrobatch_sampler::{
    apply_penalties, argmax, hash_counter, sample_filtered, sample_row, FilterConfig, SampleInput, SampleOutput,
    SamplerError, SamplingParams,
};

fn row<'a>(logits: &'a [f32], params: &'a SamplingParams) -> SampleInput<'a> {
    SampleInput { logits, params, prompt_token_ids: &[], output_token_ids: &[], seed: 0, step: 0, mask: None }
}

fn sample_one(input: SampleInput<'_>) -> Result<SampleOutput, SamplerError> {
    sample_row(&input)
}

/// Every row of one step, as the engine samples them (each row on its own).
fn sample_all(rows: &[SampleInput<'_>]) -> Vec<Result<SampleOutput, SamplerError>> {
    rows.iter().map(sample_row).collect()
}

#[test]
fn greedy_picks_argmax_and_lowest_id_on_ties() {
    let p = SamplingParams::greedy();
    assert_eq!(sample_one(row(&[0.1, 2.0, -3.0, 1.9], &p)).unwrap().token_id, 1);
    assert_eq!(sample_one(row(&[1.0, 5.0, 2.0, 5.0, 5.0], &p)).unwrap().token_id, 1);
    assert_eq!(argmax(&[-1.0, -1.0]), 0);
    assert_eq!(argmax(&[f32::NAN, 0.5, f32::NEG_INFINITY]), 1);
    // Penalised greedy goes through the processing copy and keeps the tie rule.
    let biased = SamplingParams { logit_bias: vec![(2, -1.0)], ..SamplingParams::greedy() };
    // [1, 2, 3] + bias -> [1, 2, 2]: id 1 wins the tie (id 2 without the bias).
    assert_eq!(sample_one(row(&[1.0, 2.0, 3.0], &biased)).unwrap().token_id, 1);
}

#[test]
fn logprob_is_raw_log_softmax_even_when_penalties_change_the_choice() {
    // lse([1,2,3]) = 3.4076059; log p = [-2.4076, -1.4076, -0.4076].
    let p = SamplingParams { logprobs: Some(2), logit_bias: vec![(0, 10.0)], ..SamplingParams::greedy() };
    let out = sample_one(row(&[1.0, 2.0, 3.0], &p)).unwrap();
    assert_eq!(out.token_id, 0, "bias moves the choice");
    let logprob = out.logprob.expect("logprobs were asked for");
    assert!((logprob - (-2.407_606)).abs() < 1e-5, "logprob {logprob}");
    assert_eq!(out.top_logprobs.len(), 2);
    assert_eq!(out.top_logprobs[0].0, 2);
    assert_eq!(out.top_logprobs[1].0, 1);
    assert!((out.top_logprobs[0].1 - (-0.407_606)).abs() < 1e-5);
    assert!((out.top_logprobs[1].1 - (-1.407_606)).abs() < 1e-5);
    let plain = sample_one(row(&[1.0, 2.0, 3.0], &SamplingParams::greedy())).unwrap();
    assert!(plain.top_logprobs.is_empty());
    assert_eq!(plain.logprob, None, "not asked for, not computed");
}

#[test]
fn repetition_penalty_divides_positive_and_multiplies_negative() {
    let p = SamplingParams { repetition_penalty: 2.0, ..Default::default() };
    let mut logits = [2.0, -1.0, 0.5, 3.0];
    // Token 0 from the prompt, token 1 twice in the output: each penalised once.
    apply_penalties(&mut logits, &p, &[0, 99], &[1, 1]);
    assert_eq!(logits, [1.0, -2.0, 0.5, 3.0]);
    // Through the sampler: 2.0 / 2 = 1.0 falls below 1.5, so greedy switches.
    let g = SamplingParams { repetition_penalty: 2.0, ..SamplingParams::greedy() };
    let input = SampleInput { prompt_token_ids: &[0], ..row(&[2.0, 1.5], &g) };
    assert_eq!(sample_one(input).unwrap().token_id, 1);
}

#[test]
fn presence_and_frequency_count_output_tokens_only() {
    let p = SamplingParams { presence_penalty: 0.5, frequency_penalty: 0.25, ..Default::default() };
    let mut logits = [0.0f32; 6];
    apply_penalties(&mut logits, &p, &[3, 3], &[2, 5, 2, 2]);
    // id 2: 0.5 + 3 * 0.25 = 1.25; id 5: 0.5 + 0.25 = 0.75; prompt id 3 untouched.
    assert_eq!(logits, [0.0, 0.0, -1.25, 0.0, 0.0, -0.75]);
}

#[test]
fn logit_bias_is_added_before_repetition_penalty() {
    let p = SamplingParams { logit_bias: vec![(0, -3.0)], repetition_penalty: 2.0, ..Default::default() };
    let mut logits = [1.0f32, 1.0];
    apply_penalties(&mut logits, &p, &[0], &[]);
    // (1 - 3) is negative, so the penalty multiplies: -4. The reverse order would give -2.5.
    assert_eq!(logits, [-4.0, 1.0]);
}

#[test]
fn no_repeat_ngram_bans_exactly_the_completing_token() {
    let p = SamplingParams { no_repeat_ngram_size: 2, ..SamplingParams::greedy() };
    let mut logits = [0.0f32; 8];
    apply_penalties(&mut logits, &p, &[5, 6, 7], &[5]);
    let banned: Vec<usize> = (0..8).filter(|&i| logits[i] == f32::NEG_INFINITY).collect();
    assert_eq!(banned, vec![6]);
    // Greedy would repeat "5 6"; the ban forces the runner-up.
    let raw = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 8.0];
    let input = SampleInput { prompt_token_ids: &[5, 6, 7], output_token_ids: &[5], ..row(&raw, &p) };
    assert_eq!(sample_one(input).unwrap().token_id, 7);
}

#[test]
fn banning_every_token_is_an_error_not_a_panic() {
    let p = SamplingParams { no_repeat_ngram_size: 1, ..Default::default() };
    let input = SampleInput { prompt_token_ids: &[0, 1], ..row(&[1.0, 2.0], &p) };
    assert_eq!(sample_one(input), Err(SamplerError::AllTokensMasked));
}

#[test]
fn bad_rows_fail_alone() {
    let p = SamplingParams::greedy();
    let good = [0.0, 1.0, 0.5];
    let nan = [0.0, 1.0, f32::NAN];
    let inf = [f32::INFINITY, 1.0];
    let bad_param = SamplingParams { top_p: 0.0, ..Default::default() };
    let rows = [row(&good, &p), row(&nan, &p), row(&[], &p), row(&inf, &p), row(&good, &bad_param), row(&good, &p)];
    let out = sample_all(&rows);
    assert_eq!(out.len(), 6);
    assert_eq!(out[0].as_ref().map(|o| o.token_id), Ok(1));
    assert_eq!(out[1], Err(SamplerError::NonFiniteLogits { index: 2 }));
    assert_eq!(out[2], Err(SamplerError::EmptyLogits));
    assert_eq!(out[3], Err(SamplerError::NonFiniteLogits { index: 0 }));
    assert!(matches!(out[4], Err(SamplerError::InvalidParam { field: "top_p", .. })));
    assert_eq!(out[5].as_ref().map(|o| o.token_id), Ok(1));
}

/// Pseudo-random logits from the crate's own hash, so the test needs no RNG crate.
fn random_logits(salt: u64, vocab: usize) -> Vec<f32> {
    (0..vocab as u64).map(|i| (hash_counter(salt, i, 9) >> 40) as f32 / (1u64 << 22) as f32).collect()
}

#[test]
fn same_seed_and_step_give_the_same_token_in_any_batch() {
    let vocab = 5000;
    let params = SamplingParams { top_k: 200, top_p: 0.9, temperature: 0.8, ..Default::default() };
    let target_logits = random_logits(1, vocab);
    let target = SampleInput { seed: 77, step: 5, ..row(&target_logits, &params) };
    let alone = sample_one(target).unwrap();

    let others: Vec<Vec<f32>> = (2..12).map(|s| random_logits(s, vocab)).collect();
    let mut rows: Vec<SampleInput<'_>> =
        others.iter().enumerate().map(|(i, l)| SampleInput { seed: i as u64, step: 5, ..row(l, &params) }).collect();
    for position in [0, 4, 10] {
        rows.insert(position, target);
        let out = sample_all(&rows);
        assert_eq!(out[position].as_ref(), Ok(&alone), "position {position}");
        rows.remove(position);
        rows.reverse();
    }
    // Different steps actually change the draw, so the equality above is not vacuous.
    let tokens: std::collections::HashSet<u32> =
        (0..20).map(|step| sample_one(SampleInput { step, ..target }).unwrap().token_id).collect();
    assert!(tokens.len() > 5, "only {} distinct tokens", tokens.len());
}

#[test]
fn sample_filtered_uses_the_given_uniform_as_an_inverse_cdf() {
    // Weights 1 : 3 after temperature 1 -> id 0 for u < 0.25, id 1 above.
    let logits = [0.0, 3f32.ln()];
    let cfg = FilterConfig { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0 };
    assert_eq!(sample_filtered(&logits, &cfg, 0.24), 0);
    assert_eq!(sample_filtered(&logits, &cfg, 0.26), 1);
    let greedy = FilterConfig { temperature: 0.0, ..cfg };
    assert_eq!(sample_filtered(&logits, &greedy, 0.0), 1);
}

/// Vocabulary-sized rows (the scan goes chunk by chunk): greedy picks the first index of the
/// maximum, wherever the ties fall across chunks, and a non-finite value anywhere is named by
/// its own index. The reference is a plain scalar scan.
#[test]
fn long_rows_pick_the_first_maximum_and_name_the_bad_index() {
    let p = SamplingParams::greedy();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for len in [255, 256, 257, 1000, 4099] {
        for trial in 0..20 {
            // Few distinct levels, so the maximum repeats in several chunks.
            let logits: Vec<f32> = (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    (s % 7) as f32 - 3.0
                })
                .collect();
            let want = (0..len).fold(0, |best, i| if logits[i] > logits[best] { i } else { best });
            assert_eq!(sample_one(row(&logits, &p)).map(|o| o.token_id), Ok(want as u32), "len {len}");
            let bad = (s as usize) % len;
            let mut broken = logits.clone();
            broken[bad] = if trial % 3 == 0 { f32::NAN } else { f32::NEG_INFINITY };
            assert_eq!(sample_one(row(&broken, &p)), Err(SamplerError::NonFiniteLogits { index: bad }), "len {len}");
        }
    }
}
