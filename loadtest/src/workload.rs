//! What the load test sends: per client session, one request or the turns of one
//! conversation, with seeded prompt and output lengths (fixed, or drawn from a log-normal
//! around the configured medians, the shape of ShareGPT's lengths).

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use super::arrivals::synthetic_prompt;

/// How request lengths vary.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lengths {
    /// Every request has the configured prompt and output length.
    Fixed,
    /// `median * exp(sigma * z)`, z standard normal, clamped to [1, 8 x median]: the clamp
    /// keeps one draw from the tail from exceeding the model's context.
    LogNormal { sigma: f64 },
}

/// One request of a conversation: the user message and how many tokens it asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// The request's index in the run (conversation-major).
    pub index: usize,
    pub user: String,
    pub output_len: usize,
}

/// The requests one client sends in order, each after the previous one ended.
#[derive(Clone, Debug)]
pub struct Conversation {
    /// Chat requests resending the conversation so far; otherwise one completion request.
    pub chat: bool,
    pub session: Option<String>,
    pub turns: Vec<Turn>,
}

/// The run's conversations: `requests` requests in conversations of `turns` turns (the last
/// one shorter when `turns` does not divide `requests`). Single-turn requests carry
/// `s{i % sessions}` when `sessions` is given; every multi-turn conversation is its own
/// session, as a chat client's would be.
pub fn plan(
    requests: usize,
    turns: usize,
    prompt_len: usize,
    output_len: usize,
    lengths: Lengths,
    sessions: Option<usize>,
    seed: u64,
) -> Vec<Conversation> {
    let turns = turns.max(1);
    let multi_turn = turns > 1;
    let mut rng = SplitMix64::seed_from_u64(seed ^ 0x5DEE_CE66_D1CE_4E5B);
    let mut draw = |median: usize| match lengths {
        Lengths::Fixed => median,
        Lengths::LogNormal { sigma } => {
            let z = standard_normal(&mut rng);
            ((median as f64 * (sigma * z).exp()).round() as usize).clamp(1, 8 * median.max(1))
        }
    };
    (0..requests.div_ceil(turns))
        .map(|c| {
            let session = match (turns, sessions) {
                (1, Some(n)) if n > 0 => Some(format!("s{}", c % n)),
                (1, _) => None,
                _ => Some(format!("c{c}")),
            };
            let turns = (c * turns..((c + 1) * turns).min(requests))
                .map(|index| {
                    let user = synthetic_prompt(draw(prompt_len), seed, index);
                    Turn { index, user, output_len: draw(output_len) }
                })
                .collect();
            Conversation { chat: multi_turn, session, turns }
        })
        .collect()
}

/// Box-Muller from two uniforms in (0, 1].
fn standard_normal(rng: &mut SplitMix64) -> f64 {
    let mut unit = || ((rng.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let (u1, u2) = (unit(), unit());
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversations_cover_every_request_once_in_order() {
        let plan = plan(10, 4, 8, 16, Lengths::Fixed, None, 3);
        assert_eq!(plan.len(), 3);
        let indices: Vec<usize> = plan.iter().flat_map(|c| c.turns.iter().map(|t| t.index)).collect();
        assert_eq!(indices, (0..10).collect::<Vec<_>>());
        assert_eq!(plan[2].turns.len(), 2);
        assert_eq!(plan[1].session.as_deref(), Some("c1"));
        assert!(plan.iter().flat_map(|c| &c.turns).all(|t| t.output_len == 16 && t.user.split(' ').count() == 8));
        let single = super::plan(5, 1, 8, 16, Lengths::Fixed, Some(2), 3);
        let sessions: Vec<_> = single.iter().map(|c| c.session.clone().unwrap_or_default()).collect();
        assert_eq!(sessions, ["s0", "s1", "s0", "s1", "s0"]);
        assert!(super::plan(2, 1, 8, 16, Lengths::Fixed, None, 3).iter().all(|c| c.session.is_none()));
    }

    #[test]
    fn log_normal_lengths_have_the_configured_median_and_spread() {
        let sigma = 0.8;
        let plan = plan(4000, 1, 200, 150, Lengths::LogNormal { sigma }, None, 11);
        let mut out: Vec<f64> = plan.iter().map(|c| c.turns[0].output_len as f64).collect();
        out.sort_by(f64::total_cmp);
        let median = out[out.len() / 2];
        assert!((median - 150.0).abs() < 12.0, "median {median}");
        // log-normal: the 84th percentile is median * e^sigma (one standard deviation of z).
        let p84 = out[(out.len() as f64 * 0.8413) as usize];
        assert!((p84 / 150.0 - sigma.exp()).abs() < 0.15, "p84 {p84}");
        assert!(out.iter().all(|&n| (1.0..=1200.0).contains(&n)));
        let logs: Vec<f64> = out.iter().map(|n| n.ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!((sd - sigma).abs() < 0.05, "sd of ln {sd}");
    }
}
