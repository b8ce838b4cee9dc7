//! The adaptive branch's pick against the reference's own rule, written out here from the
//! source rather than from our code: xjdr-alt/entropix `entropix/sampler.py` @ cceeb84,
//! `adaptive_sample` (spec: shared/specs/entropix_mti.md A.5):
//!
//! ```python
//! def score_sample(sample):
//!     log_prob = jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(sample, logits.shape[-1]))
//!     confidence_score = (
//!         (1 - metrics["logits_entropy"]) * cfg.ada_score_logits_ent +
//!         (1 - metrics["attn_entropy"]) * cfg.ada_score_attn_ent +
//!         (1 - metrics["logits_varentropy"]) * cfg.ada_score_logits_vent +
//!         (1 - metrics["attn_varentropy"]) * cfg.ada_score_attn_vent +
//!         metrics["agreement"] * cfg.ada_score_agree +
//!         metrics["interaction_strength"] * cfg.ada_score_int)
//!     return log_prob + confidence_score
//! sample_scores = jnp.array([score_sample(s) for s in samples])
//! best_sample_idx = jnp.argmax(sample_scores)
//! ```
//!
//! with weights 0.1 / 0.2 / 0.3 / 0.4 / 0.5 / 0.6, `log_softmax` of the raw logits (nats),
//! logit entropy / varentropy in bits (`calculate_varentropy_logsoftmax`), and `argmax`
//! keeping the first maximum. Given the draws our sampler made (the candidates it reports),
//! the reference's choice among them is computed below in f64.

use entrobatch_sampler::entropix::{
    attention_stats, entropix_sample, AdaptiveScore, AttentionStats, Branch, EntropixConfig, EntropixInput,
};

/// ln softmax, f64, from the definition.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &l| m.max(f64::from(l)));
    let z: f64 = logits.iter().map(|&l| (f64::from(l) - max).exp()).sum();
    logits.iter().map(|&l| f64::from(l) - max - z.ln()).collect()
}

/// `calculate_varentropy_logsoftmax`: H = -sum p lp / ln2, VH = sum p (lp / ln2 + H)^2.
fn entropy_varentropy_bits(lp: &[f64]) -> (f64, f64) {
    let ln2 = std::f64::consts::LN_2;
    let h: f64 = -lp.iter().map(|&l| l.exp() * l / ln2).sum::<f64>();
    let v: f64 = lp.iter().map(|&l| l.exp() * (l / ln2 + h).powi(2)).sum();
    (h, v)
}

/// The reference's `best_sample_idx` for these draws.
fn reference_pick(draws: &[u32], logits: &[f32], attn: &AttentionStats) -> usize {
    let lp = log_softmax(logits);
    let (h, v) = entropy_varentropy_bits(&lp);
    let a = |x: f32| f64::from(x);
    let confidence = (1.0 - h) * 0.1
        + (1.0 - a(attn.entropy)) * 0.2
        + (1.0 - v) * 0.3
        + (1.0 - a(attn.varentropy)) * 0.4
        + a(attn.agreement) * 0.5
        + a(attn.interaction_strength) * 0.6;
    let scores: Vec<f64> = draws.iter().map(|&t| lp[t as usize] + confidence).collect();
    // jnp.argmax: the first index of the maximum.
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s > scores[best] {
            best = i;
        }
    }
    best
}

/// A row in the adaptive quadrant (H ~ 4.9 bits, VH ~ 3.7 bits^2): one token at 0.25, three
/// at 0.2/3, fifty sharing 0.55, so the draws are varied and often not the head.
fn adaptive_row() -> Vec<f32> {
    let mut probs = vec![0.55 / 50.0; 54];
    probs[0] = 0.25;
    probs[1..4].fill(0.2 / 3.0);
    probs.iter().map(|p: &f64| p.ln() as f32).collect()
}

fn attention() -> AttentionStats {
    let scores: Vec<f32> = (0..4).flat_map(|h| (0..6).map(move |k| (h as f32 + 1.0) * 0.4 * k as f32 - 0.5)).collect();
    attention_stats(&scores, 4, 6)
}

fn decide(
    logits: &[f32],
    attn: AttentionStats,
    step: u64,
    cfg: &EntropixConfig,
) -> entrobatch_sampler::entropix::EntropixDecision {
    let input = EntropixInput {
        logits,
        penalised: None,
        attention: Some(attn),
        previous_token: Some(1),
        pause_token: None,
        seed: 2024,
        step,
    };
    entropix_sample(&input, cfg).unwrap()
}

#[test]
fn default_adaptive_pick_is_the_references() {
    let logits = adaptive_row();
    let attn = attention();
    let cfg = EntropixConfig::default();
    assert_eq!(cfg.adaptive_score, AdaptiveScore::Reference);
    let surprisal = EntropixConfig { adaptive_score: AdaptiveScore::Surprisal, ..EntropixConfig::default() };
    let mut differs = 0;
    for step in 0..400 {
        let d = decide(&logits, attn, step, &cfg);
        assert_eq!(d.branch, Branch::Adaptive);
        let draws: Vec<u32> = d.candidates.iter().map(|c| c.token_id).collect();
        assert_eq!(draws.len(), 5);
        let want = draws[reference_pick(&draws, &logits, &attn)];
        assert_eq!(d.token_id, want, "step {step}: draws {draws:?}");
        // The same draws under the surprisal rule (the draws do not depend on the rule).
        let s = decide(&logits, attn, step, &surprisal);
        let s_draws: Vec<u32> = s.candidates.iter().map(|c| c.token_id).collect();
        assert_eq!(s_draws, draws);
        if s.token_id != want {
            differs += 1;
        }
    }
    // Otherwise this row could not tell the two rules apart.
    assert!(differs > 20, "the rules disagreed on only {differs} of 400 steps");
}

#[test]
fn adaptive_score_is_named_in_json() {
    let c: EntropixConfig = serde_json::from_str(r#"{"adaptive_score": "surprisal"}"#).unwrap();
    assert_eq!(c.adaptive_score, AdaptiveScore::Surprisal);
    let c: EntropixConfig = serde_json::from_str(r#"{"adaptive_score": "reference"}"#).unwrap();
    assert_eq!(c.adaptive_score, AdaptiveScore::Reference);
    assert_eq!(serde_json::from_str::<EntropixConfig>("{}").unwrap().adaptive_score, AdaptiveScore::Reference);
    assert!(serde_json::from_str::<EntropixConfig>(r#"{"adaptive_score": "best"}"#).is_err());
}
