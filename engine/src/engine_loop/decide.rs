//! One sequence's decision after the forward, in the loop's parallel phase: the grammar's
//! mask (structured outputs), the strategy's choice under it, or the verification of a draft,
//! and the next draft for a speculating request.

use entrobatch_scheduler::{DraftOdds, SeqId};

use crate::event::GeneratedToken;
use crate::logits_check::check_logits_finite;
use crate::speculative::{verify, DraftVerdict, SharedAcceptance, Speculation, SuffixIndex};
use crate::strategy::{SequenceStrategy, StrategyInput, StrategyOutput};
use crate::structured::Constraint;

/// What one sequence's step decided.
pub(super) struct Decision {
    pub output: StrategyOutput,
    /// Draft tokens verified in this step, and how many of them were kept.
    pub num_draft: usize,
    pub num_accepted: usize,
    /// The verified draft's verdict, for the engine's pooled acceptance rate.
    pub verdict: Option<DraftVerdict>,
    /// The draft for the next step and the odds its tokens are kept.
    pub next_draft: Option<(Vec<u32>, DraftOdds)>,
    /// At a branch point of a structured output: the grammar after each candidate, in order.
    pub fork_constraints: Vec<Constraint>,
}

/// A sequence's share of the parallel phase.
pub(super) struct Work<'a> {
    pub id: SeqId,
    pub strategy: &'a mut dyn SequenceStrategy,
    pub constraint: Option<&'a mut Constraint>,
    pub input: StrategyInput<'a>,
    /// The draft this span verifies (empty: none).
    pub draft: &'a [u32],
    pub speculation: Option<&'a mut Speculation>,
    pub suffix: Option<&'a SuffixIndex>,
    pub shared_acceptance: &'a SharedAcceptance,
    /// The sequence's tokens so far (prompt and output), before this step's.
    pub token_ids: &'a [u32],
}

pub(super) fn decide(work: Work<'_>) -> Result<Decision, String> {
    let Work { strategy, mut constraint, input, draft, speculation, suffix, shared_acceptance, token_ids, .. } = work;
    // Sampling from NaN/inf would emit arbitrary tokens: fail just this request.
    check_logits_finite(&input.logits)?;
    // Forced tokens carry no distribution, so a request that asked for logprobs samples them
    // one by one instead of jumping forward.
    let fast_forward = input.sampling.logprobs.is_none();
    // Only a speculating request looks at a row again after its draw (the next draft's entropy).
    let rows = speculation.as_ref().map(|_| input.logits.clone());
    let num_prompt = input.prompt_token_ids.len();
    let mut fork_constraints = Vec::new();
    let (mut output, num_accepted) = if draft.is_empty() {
        (choose_tokens(strategy, constraint.as_deref_mut(), input, &mut fork_constraints)?, 0)
    } else {
        let verdict = verify(strategy, constraint.as_deref_mut(), input, draft)?;
        (verdict.output, verdict.num_accepted)
    };
    // A branch point's candidates go on one by one; only the kept one's grammar jumps ahead.
    let fast_forward = fast_forward && output.fork.is_none();
    if let (Some(constraint), true) = (constraint, fast_forward && !output.tokens.is_empty()) {
        // Jump-forward: what the grammar forces next is appended without a forward each; the
        // next step computes their KV as one chunk and samples after them.
        for token_id in constraint.forced_tokens() {
            constraint.commit(token_id).map_err(|e| e.to_string())?;
            output.tokens.push(GeneratedToken { token_id, logprob: None, metrics: None });
        }
    }
    let (mut next_draft, mut verdict) = (None, None);
    // The row the last drawn token came from (a span with no draft has one row).
    let last_row = rows.and_then(|r| r.get(num_accepted).copied()).filter(|_| !output.tokens.is_empty());
    if let (Some(speculation), Some(row)) = (speculation, last_row) {
        verdict = speculation.observe(draft.len(), num_accepted, shared_acceptance);
        let mut context = Vec::with_capacity(token_ids.len() + output.tokens.len());
        context.extend_from_slice(token_ids);
        context.extend(output.tokens.iter().map(|t| t.token_id));
        next_draft = speculation
            .propose(&context, num_prompt, suffix, shared_acceptance, || entrobatch_sampler::entropy_nats(row));
    }
    Ok(Decision { output, num_draft: draft.len(), num_accepted, verdict, next_draft, fork_constraints })
}

/// The strategy's choice for a span with no draft, under the grammar's mask; at a branch
/// point, also the grammar after each candidate (`fork_constraints`).
fn choose_tokens(
    strategy: &mut dyn SequenceStrategy,
    constraint: Option<&mut Constraint>,
    input: StrategyInput<'_>,
    fork_constraints: &mut Vec<Constraint>,
) -> Result<StrategyOutput, String> {
    let Some(constraint) = constraint else {
        return strategy.process(input).map_err(|e| e.to_string());
    };
    let mask = constraint.mask().map_err(|e| e.to_string())?;
    let out = strategy.process(StrategyInput { mask: Some(mask), ..input }).map_err(|e| e.to_string())?;
    for (candidate, _) in out.fork.iter().flat_map(|f| &f.candidates) {
        let mut fork = constraint.fork();
        fork.commit(candidate.token_id).map_err(|e| e.to_string())?;
        fork_constraints.push(fork);
    }
    for token in &out.tokens {
        constraint.commit(token.token_id).map_err(|e| e.to_string())?;
    }
    Ok(out)
}
