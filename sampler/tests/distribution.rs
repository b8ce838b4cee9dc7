//! Statistical behaviour of temperature, top-k, top-p and min-p: each test
//! draws over many `step` values with a fixed seed and checks frequencies
//! against hand-computed probabilities.

use entrobatch_sampler::{sample_row, SampleInput, SamplingParams};

const DRAWS: u64 = 20_000;

fn frequencies(logits: &[f32], params: &SamplingParams) -> Vec<f64> {
    let mut counts = vec![0u64; logits.len()];
    for step in 0..DRAWS {
        let row =
            SampleInput { logits, params, prompt_token_ids: &[], output_token_ids: &[], seed: 1234, step, mask: None };
        let out = sample_row(&row).expect("valid row");
        counts[out.token_id as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / DRAWS as f64).collect()
}

fn softmax(logits: &[f32], t: f32) -> Vec<f64> {
    let w: Vec<f64> = logits.iter().map(|&l| f64::from(l / t).exp()).collect();
    let z: f64 = w.iter().sum();
    w.iter().map(|x| x / z).collect()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() < tol, "token {i}: freq {g:.4} vs expected {w:.4} (all: {got:?})");
    }
}

fn with(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams::default();
    f(&mut p);
    p
}

#[test]
fn temperature_one_matches_softmax() {
    let logits = [1.0, 2.0, 0.5, -1.0];
    let freq = frequencies(&logits, &SamplingParams::default());
    assert_close(&freq, &softmax(&logits, 1.0), 0.02);
}

#[test]
fn temperature_reshapes_the_distribution() {
    let logits = [1.0, 2.0, 0.5, -1.0];
    // T = 2 flattens: p = softmax(l / 2) = [0.2635, 0.4344, 0.2052, 0.0969].
    let hot = frequencies(&logits, &with(|p| p.temperature = 2.0));
    assert_close(&hot, &[0.2635, 0.4344, 0.2052, 0.0969], 0.02);
    // T = 0.5 sharpens: p = softmax(2 l) = [0.1140, 0.8420, 0.0419, 0.0021].
    let cold = frequencies(&logits, &with(|p| p.temperature = 0.5));
    assert_close(&cold, &[0.1140, 0.8420, 0.0419, 0.0021], 0.02);
}

#[test]
fn tiny_temperature_approaches_greedy() {
    // Gap of 0.1 at T = 0.01 leaves e^-10 ≈ 4.5e-5 for the runner-up.
    let freq = frequencies(&[1.0, 1.1, 0.9], &with(|p| p.temperature = 0.01));
    assert_eq!(freq, vec![0.0, 1.0, 0.0]);
}

#[test]
fn top_k_keeps_only_the_k_best_renormalised() {
    let logits = [1.0, 3.0, 2.0, 0.5];
    let freq = frequencies(&logits, &with(|p| p.top_k = 2));
    assert_eq!(freq[0], 0.0);
    assert_eq!(freq[3], 0.0);
    // e^3 / (e^3 + e^2) = 0.7311
    assert_close(&freq, &[0.0, 0.7311, 0.2689, 0.0], 0.02);
}

#[test]
fn top_p_keeps_the_head_not_the_tail() {
    // Probabilities 0.1, 0.4, 0.2, 0.3 (ids scrambled so id order is not rank order).
    let logits = [0.1f32.ln(), 0.4f32.ln(), 0.2f32.ln(), 0.3f32.ln()];
    // Nucleus 0.3: the single most likely token (0.4) already reaches it. An
    // ascending-cumsum bug would keep {0.1, 0.2} instead and never draw id 1.
    let tight = frequencies(&logits, &with(|p| p.top_p = 0.3));
    assert_eq!(tight, vec![0.0, 1.0, 0.0, 0.0]);
    // Nucleus 0.65: {0.4, 0.3} renormalised to 4/7, 3/7; the tail is never drawn.
    let wide = frequencies(&logits, &with(|p| p.top_p = 0.65));
    assert_eq!(wide[0], 0.0);
    assert_eq!(wide[2], 0.0);
    assert_close(&wide, &[0.0, 4.0 / 7.0, 0.0, 3.0 / 7.0], 0.02);
}

#[test]
fn min_p_cuts_just_below_the_threshold() {
    // Relative to the max: 1, 0.26, 0.24, 0.10. With min_p = 0.25 only ids 0, 1 survive.
    let logits = [0.0, 0.26f32.ln(), 0.24f32.ln(), 0.10f32.ln()];
    let freq = frequencies(&logits, &with(|p| p.min_p = 0.25));
    assert_eq!(freq[2], 0.0, "just below the cut must never be drawn");
    assert_eq!(freq[3], 0.0);
    assert_close(&freq, &[1.0 / 1.26, 0.26 / 1.26, 0.0, 0.0], 0.02);
}

#[test]
fn min_p_is_measured_on_the_tempered_distribution() {
    // At T = 2 the ratios become sqrt(0.26) = 0.51 and sqrt(0.24) = 0.49, so
    // min_p = 0.5 keeps id 1 and drops id 2.
    let logits = [0.0, 0.26f32.ln(), 0.24f32.ln()];
    let freq = frequencies(
        &logits,
        &with(|p| {
            p.temperature = 2.0;
            p.min_p = 0.5;
        }),
    );
    assert_eq!(freq[2], 0.0);
    let r = 0.26f64.sqrt();
    assert_close(&freq, &[1.0 / (1.0 + r), r / (1.0 + r), 0.0], 0.02);
}

#[test]
fn filters_compose_min_p_then_top_k_then_top_p() {
    // Probabilities 0.35, 0.3, 0.2, 0.1, 0.05 (ratios to max 1, .857, .571, .286, .143).
    let logits: Vec<f32> = [0.35f32, 0.3, 0.2, 0.1, 0.05].iter().map(|p| p.ln()).collect();
    // min_p 0.2 drops id 4; top_k 3 drops id 3; top_p 0.6 over {.35,.3,.2}/.85:
    // 0.4118 < 0.6, 0.7647 >= 0.6 -> keep ids 0, 1 with 0.35/0.65 and 0.3/0.65.
    let freq = frequencies(
        &logits,
        &with(|p| {
            p.min_p = 0.2;
            p.top_k = 3;
            p.top_p = 0.6;
        }),
    );
    assert_close(&freq, &[0.35 / 0.65, 0.3 / 0.65, 0.0, 0.0, 0.0], 0.02);
    assert_eq!(freq[2], 0.0);
}
