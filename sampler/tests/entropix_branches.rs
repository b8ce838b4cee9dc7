//! Every entropix branch reached from hand-made logits and attention scores, checked against
//! the v1 formulas computed here by hand (f64), plus the fixed behaviours: min-p removes
//! tokens, top-p keeps the head, the pause token never comes twice in a row, the RNG advances.

use entrobatch_sampler::entropix::{
    attention_stats, candidate_score, entropix_sample, AdaptiveScore, AttentionStats, Branch, EntropixConfig,
    EntropixInput,
};
use entrobatch_sampler::SamplerError;

/// Logits whose softmax is exactly `probs` (up to f32 rounding).
fn logits_of(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|&p| p.ln() as f32).collect()
}

/// H and VH in bits, f64, straight from the definition.
fn ent_vent(logits: &[f32]) -> (f64, f64) {
    let p = softmax(logits, 1.0);
    let h: f64 = p.iter().filter(|&&x| x > 0.0).map(|&x| -x * x.log2()).sum();
    let v: f64 = p.iter().filter(|&&x| x > 0.0).map(|&x| x * (-x.log2() - h).powi(2)).sum();
    (h, v)
}

fn softmax(logits: &[f32], t: f64) -> Vec<f64> {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(f64::from(l)));
    let w: Vec<f64> = logits.iter().map(|&l| ((f64::from(l) - max) / t).exp()).collect();
    let z: f64 = w.iter().sum();
    w.iter().map(|x| x / z).collect()
}

fn input(logits: &[f32], attention: AttentionStats, step: u64) -> EntropixInput<'_> {
    EntropixInput {
        logits,
        penalised: None,
        attention: Some(attention),
        previous_token: Some(1),
        pause_token: Some(7),
        seed: 99,
        step,
    }
}

/// Hand-made attention: 4 heads over 6 keys with different sharpness.
fn hand_attention() -> AttentionStats {
    let scores: Vec<f32> = (0..4).flat_map(|h| (0..6).map(move |k| (h as f32 + 1.0) * 0.4 * k as f32 - 0.5)).collect();
    attention_stats(&scores, 4, 6)
}

fn assert_near(got: f32, want: f64, what: &str) {
    assert!((f64::from(got) - want).abs() < 1e-4 * want.abs().max(1.0), "{what}: {got} vs {want}");
}

#[test]
fn attention_stats_match_hand_values() {
    // Head 0 uniform over 4 keys (2 bits), head 1 all on key 0 (0 bits): scores 0 and -1e4.
    let scores = [0.0, 0.0, 0.0, 0.0, 0.0, -1e4, -1e4, -1e4];
    let a = attention_stats(&scores, 2, 4);
    assert_near(a.entropy, 1.0, "mean entropy");
    assert_near(a.varentropy, 1.0, "variance of {2, 0}");
    // Head-mean P = (0.625, 0.125, 0.125, 0.125); |dev| sums to 4 * 0.375 = 1.5 over 8 cells.
    assert_near(a.agreement, 1.5 / 8.0, "agreement");
    assert_near(a.interaction_strength, 3e4 / 8.0, "interaction strength");
}

#[test]
fn low_entropy_low_varentropy_takes_the_argmax() {
    let mut logits = vec![-10.0f32; 100];
    logits[42] = 10.0;
    let (h, v) = ent_vent(&logits);
    assert!(h < 0.1 && v < 0.1, "H {h} VH {v}");
    for step in 0..50 {
        let d = entropix_sample(&input(&logits, hand_attention(), step), &EntropixConfig::default()).unwrap();
        assert_eq!((d.token_id, d.branch), (42, Branch::Argmax));
        assert_near(d.logit.entropy, h, "H");
    }
}

#[test]
fn high_entropy_low_varentropy_pauses_once_then_samples_hotter() {
    let logits = vec![0.0f32; 64]; // uniform: H = 6 bits, VH = 0
    let cfg = EntropixConfig::default();
    let attn = hand_attention();
    let d = entropix_sample(&input(&logits, attn, 0), &cfg).unwrap();
    assert_eq!((d.token_id, d.branch), (7, Branch::Pause));
    let mut seen = std::collections::HashSet::new();
    for step in 0..400 {
        let after_pause = EntropixInput { previous_token: Some(7), ..input(&logits, attn, step) };
        let d = entropix_sample(&after_pause, &cfg).unwrap();
        assert_eq!(d.branch, Branch::PauseSample);
        assert_ne!(d.token_id, 7, "pause emitted twice in a row at step {step}");
        let t = (cfg.temp as f64 * (1.3 + 0.2 * f64::from(attn.entropy))).min(1.5);
        assert_near(d.filter.unwrap().temperature, t, "HELV temperature");
        seen.insert(d.token_id);
    }
    // Ties rank by id: top-k 27 keeps ids 0..=27 minus the pause token, and the 0.9
    // nucleus of 27 equal tokens is the first 25 of them (ids 0..=25 minus 7).
    assert!(seen.iter().all(|&t| t <= 25), "{seen:?}");
    assert_eq!(seen.len(), 25);
    // No pause token in the vocabulary: HELV samples instead.
    let no_pause = EntropixInput { pause_token: None, ..input(&logits, attn, 3) };
    assert_eq!(entropix_sample(&no_pause, &cfg).unwrap().branch, Branch::PauseSample);
}

#[test]
fn low_entropy_high_varentropy_explores_with_attention_driven_top_k() {
    // p = 0.8 on one token, 0.2 spread over 10,000: H ~ 3.4 bits, VH ~ 37.
    let mut probs = vec![0.2 / 10_000.0; 10_001];
    probs[5] = 0.8;
    let logits = logits_of(&probs);
    let (h, v) = ent_vent(&logits);
    assert!(h < 5.0 && v > 5.0, "H {h} VH {v}");
    let attn = hand_attention();
    let cfg = EntropixConfig::default();
    let d = entropix_sample(&input(&logits, attn, 0), &cfg).unwrap();
    assert_eq!(d.branch, Branch::Explore);
    let f = d.filter.unwrap();
    let t = (0.666 * (1.2 + 0.3 * f64::from(attn.interaction_strength))).min(1.5);
    let k = ((27.0 * (1.0 + 0.5 * (1.0 - f64::from(attn.agreement)))).floor() as usize).max(5);
    assert_near(f.temperature, t, "LEHV temperature");
    assert_eq!(f.top_k, k);
    assert_near(f.top_p, 0.9, "base top_p");
}

#[test]
fn high_entropy_high_varentropy_resamples_hot_with_a_shrunk_nucleus() {
    // Half the mass on 16 tokens, half over 100,000: H ~ 11 bits, VH ~ 40.
    let mut probs = vec![0.5 / 100_000.0; 100_016];
    probs[..16].fill(0.5 / 16.0);
    let logits = logits_of(&probs);
    let (h, v) = ent_vent(&logits);
    assert!(h > 5.0 && v > 5.0, "H {h} VH {v}");
    let attn = AttentionStats { entropy: 2.0, varentropy: 0.5, agreement: 0.1, interaction_strength: 1.0 };
    let cfg = EntropixConfig::default();
    for step in 0..300 {
        let d = entropix_sample(&input(&logits, attn, step), &cfg).unwrap();
        assert_eq!(d.branch, Branch::Resample);
        let f = d.filter.unwrap();
        assert_near(f.temperature, (0.666f64 * (2.0 + 0.5 * 0.5)).max(2.0), "HEHV temperature");
        assert_near(f.top_p, (0.9f64 - 0.2 * 2.0).max(0.5), "HEHV top_p");
        // top-k 27 keeps the 16 head tokens and 11 tail ones; at T = 2 the head holds
        // ~98% of that mass, so a 0.5 nucleus is 8 head tokens (ids 0..8 by tie order).
        assert!(d.token_id < 8, "step {step}: drew {} outside the nucleus head", d.token_id);
    }
}

#[test]
fn top_p_keeps_the_head_of_a_graded_flat_distribution() {
    // Spec A.3: 27 graded-flat logits, T 0.666, top-p 0.9: the reference's ascending cut
    // never drew the most likely token. Route them to LEHV (IS = 0, agreement = 1 gives
    // T = 0.666 * 1.2 and top-k 27) by moving the thresholds.
    let logits: Vec<f32> = (0..27).map(|i| -0.02 * i as f32).collect();
    let cfg =
        EntropixConfig { low_ent_thresh: -1.0, high_vent_thresh: -1.0, high_ent_thresh: 100.0, ..Default::default() };
    let attn = AttentionStats { agreement: 1.0, ..Default::default() };
    let t = 0.666 * 1.2;
    let p = softmax(&logits, t);
    // Nucleus over descending probabilities: the smallest head with mass >= 0.9.
    let mut mass = 0.0;
    let keep = p
        .iter()
        .take_while(|&&x| {
            let before = mass;
            mass += x;
            before < 0.9
        })
        .count();
    assert!(keep < 27);
    let mut counts = vec![0usize; 27];
    for step in 0..4000 {
        let d = entropix_sample(&input(&logits, attn, step), &cfg).unwrap();
        assert_eq!(d.branch, Branch::Explore);
        counts[d.token_id as usize] += 1;
    }
    assert!(counts[0] > 4000 / 40, "most likely token drawn {} times", counts[0]);
    assert!(counts[keep..].iter().all(|&c| c == 0), "tail drawn: {counts:?} (keep {keep})");
}

#[test]
fn adaptive_min_p_removes_tokens() {
    // Route to the adaptive branch and pin min_p at 0.5 (ada_min_p 0 keeps the base).
    let mut logits = vec![-6.0f32; 40];
    logits[0] = 0.0;
    logits[1] = -0.3;
    let cfg = EntropixConfig {
        low_ent_thresh: -1.0,
        high_vent_thresh: 1e9,
        min_p: 0.5,
        ada_min_p: 0.0,
        ..Default::default()
    };
    let attn = AttentionStats::default();
    let mut drawn = std::collections::HashSet::new();
    for step in 0..500 {
        let d = entropix_sample(&input(&logits, attn, step), &cfg).unwrap();
        assert_eq!(d.branch, Branch::Adaptive);
        let f = d.filter.unwrap();
        assert_near(f.min_p, 0.5, "adaptive min_p");
        // Under the adapted temperature token 1 passes the 0.5 * p_max cut, the -6 tail never.
        let p = softmax(&logits, f64::from(f.temperature));
        assert!(p[1] >= 0.5 * p[0] && p[2] < 0.5 * p[0]);
        drawn.extend(d.candidates.iter().map(|c| c.token_id));
    }
    assert_eq!(drawn, [0u32, 1].into_iter().collect());
    // The same row without the min-p cut does draw from the tail.
    let open = EntropixConfig { min_p: 0.0, ada_min_min_p: 0.0, ..cfg };
    let tail = (0..500)
        .flat_map(|s| entropix_sample(&input(&logits, attn, s), &open).unwrap().candidates)
        .filter(|c| c.token_id >= 2)
        .count();
    assert!(tail > 0);
}

#[test]
fn surprisal_score_keeps_the_best_scoring_candidate_and_the_score_depends_on_it() {
    // The opt-in `adaptive_score = "surprisal"` rule (the default is the reference's, tested
    // in `entropix_reference_pick.rs`). One token at 0.25, three at 0.2/3, fifty sharing 0.55: H ~ 4.9 bits, VH ~ 3.7, so
    // the typical middle tokens (s ~ H) outscore the atypically likely head.
    let mut probs = vec![0.55 / 50.0; 54];
    probs[0] = 0.25;
    probs[1..4].fill(0.2 / 3.0);
    let logits = logits_of(&probs);
    let (h, v) = ent_vent(&logits);
    assert!(h > 0.1 && h < 5.0 && v < 5.0, "H {h} VH {v}");
    let attn = hand_attention();
    let cfg = EntropixConfig { adaptive_score: AdaptiveScore::Surprisal, ..EntropixConfig::default() };
    let lp: Vec<f64> = softmax(&logits, 1.0).iter().map(|p| p.ln()).collect();
    let mut not_most_likely = 0;
    for step in 0..300 {
        let d = entropix_sample(&input(&logits, attn, step), &cfg).unwrap();
        assert_eq!(d.branch, Branch::Adaptive);
        assert_eq!(d.candidates.len(), 5);
        for c in &d.candidates {
            // The documented formula, by hand.
            let s = -lp[c.token_id as usize] / std::f64::consts::LN_2;
            let a = |x: f32| f64::from(x);
            let want = lp[c.token_id as usize]
                + 0.1 * (1.0 - s)
                + 0.3 * (1.0 - (s - h).powi(2))
                + 0.2 * (1.0 - a(attn.entropy))
                + 0.4 * (1.0 - a(attn.varentropy))
                + 0.5 * a(attn.agreement)
                + 0.6 * a(attn.interaction_strength);
            assert!((f64::from(c.score) - want).abs() < 1e-3, "score {} vs {want}", c.score);
        }
        let best = d.candidates.iter().map(|c| c.score).fold(f32::NEG_INFINITY, f32::max);
        let chosen = d.candidates.iter().find(|c| c.token_id == d.token_id).unwrap();
        assert_eq!(chosen.score, best);
        let max_lp = d.candidates.iter().map(|c| c.logprob).fold(f32::NEG_INFINITY, f32::max);
        if chosen.logprob < max_lp {
            not_most_likely += 1;
        }
    }
    // A sample-independent bonus would always keep the most likely draw.
    assert!(not_most_likely > 10, "{not_most_likely}");
    let logit = entrobatch_sampler::entropix::logit_stats(&logits);
    let head = candidate_score(&cfg, lp[0] as f32, &logit, &attn);
    let middle = candidate_score(&cfg, lp[1] as f32, &logit, &attn);
    assert!(middle > head + 0.5, "middle {middle} vs head {head}");
    let low = candidate_score(&cfg, -0.1, &Default::default(), &attn);
    let high = candidate_score(&cfg, -3.0, &Default::default(), &attn);
    assert!(low > high, "with H = 0 the most likely candidate must win");
}

#[test]
fn draws_advance_every_step_and_repeat_for_the_same_seed() {
    let logits: Vec<f32> = (0..40).map(|i| -0.15 * i as f32).collect();
    let cfg = EntropixConfig::default();
    let tokens: Vec<u32> =
        (0..64).map(|s| entropix_sample(&input(&logits, hand_attention(), s), &cfg).unwrap().token_id).collect();
    let again: Vec<u32> =
        (0..64).map(|s| entropix_sample(&input(&logits, hand_attention(), s), &cfg).unwrap().token_id).collect();
    assert_eq!(tokens, again);
    let distinct: std::collections::HashSet<_> = tokens.iter().collect();
    assert!(distinct.len() > 3, "the same noise every step: {tokens:?}");
}

#[test]
fn penalised_logits_are_drawn_from_but_metrics_use_the_raw_row() {
    let mut logits = vec![-10.0f32; 100];
    logits[42] = 10.0;
    let mut banned = logits.clone();
    banned[42] = f32::NEG_INFINITY;
    let d = entropix_sample(
        &EntropixInput { penalised: Some(&banned), ..input(&logits, hand_attention(), 0) },
        &EntropixConfig::default(),
    )
    .unwrap();
    assert_eq!(d.branch, Branch::Argmax);
    assert_ne!(d.token_id, 42);
    assert!(d.logit.entropy < 0.1);
}

/// A NaN or infinite raw logit is an error naming its index, wherever it falls in the row
/// (the scan goes a chunk at a time, so one in a later chunk must be found too), never a token.
#[test]
fn non_finite_logits_are_rejected_with_their_index() {
    for (bad, value) in [(0, f32::NAN), (300, f32::INFINITY), (999, f32::NEG_INFINITY)] {
        let mut logits = vec![0.5f32; 1000];
        logits[bad] = value;
        let got = entropix_sample(&input(&logits, hand_attention(), 0), &EntropixConfig::default());
        assert_eq!(got.map(|d| d.token_id), Err(SamplerError::NonFiniteLogits { index: bad }), "{value} at {bad}");
    }
}

#[test]
fn config_rejects_nonsense_and_round_trips_through_json() {
    assert!(EntropixConfig::default().validate().is_ok());
    assert!(EntropixConfig { n_adaptive_samples: 13, ..Default::default() }.validate().is_err());
    assert!(EntropixConfig { n_adaptive_samples: 12, ..Default::default() }.validate().is_ok());
    assert!(EntropixConfig { top_p: 1.5, ..Default::default() }.validate().is_err());
    assert!(EntropixConfig { temp: f32::NAN, ..Default::default() }.validate().is_err());
    let partial: EntropixConfig =
        serde_json::from_str(r#"{"high_ent_thresh": 4.0, "n_adaptive_samples": 12}"#).unwrap();
    assert_eq!(partial.high_ent_thresh, 4.0);
    assert_eq!(partial.n_adaptive_samples, 12);
    assert_eq!(partial.temp, 0.666);
}
