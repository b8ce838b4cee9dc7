//! Prefill beside decodes under both latency targets: no faster than the prompts waiting for
//! their first token need to make the TTFT target. While they are on time, a step carrying
//! prompts stays within a few decode-only steps, so tokens stream evenly instead of in bursts
//! (inter-token latency); when they are not, prefill gets everything the TPOT plan allows.

use crate::latency::ttft_plan;
use crate::prefill_order::PrefillAllowance;
use crate::scheduler::Scheduler;
use crate::sequence::Sequence;
use crate::step_cost::{CostModel, StepWork};

/// While the queue is on time, a step carrying prompts takes at most this many decode-only
/// steps: the inter-token latency's tail within three times its median.
const EVEN_STEP_RATIO: f64 = 3.0;

impl Scheduler {
    /// `allowance` (what the TPOT plan leaves beside `decodes`) cut to the larger of an even
    /// step and what the waiting prompts need. Unchanged without a TPOT target or with a
    /// waiting prompt that has no TTFT target (its own or the server's), in a step with no
    /// decodes (nobody's tokens wait for it), and while a prompt is late.
    pub(crate) fn paced(&self, allowance: PrefillAllowance, decodes: StepWork) -> PrefillAllowance {
        let PrefillAllowance::Seconds { left, model, max_tokens, min_tokens } = allowance else {
            return allowance;
        };
        if decodes.rows == 0 || self.config.latency_targets.tpot.is_none() {
            return allowance;
        }
        let decode_seconds = model.seconds(decodes);
        let even = (EVEN_STEP_RATIO - 1.0) * decode_seconds;
        // The even pace already buys the whole plan: nothing to cut, no queue to read.
        if even >= left {
            return allowance;
        }
        let needed = match self.prefill_share_needed(&model) {
            // Prefill's share of a step of `decode_seconds + p` is `p / (decode_seconds + p)`.
            Some(share) if share < 1.0 => share / (1.0 - share) * decode_seconds,
            _ => return allowance,
        };
        PrefillAllowance::Seconds { left: left.min(even.max(needed)), model, max_tokens, min_tokens }
    }

    /// The share of the time ahead that prefill needs for every prompt waiting for its first
    /// token to have it within the plan of its TTFT target (`ttft_plan`) from being added:
    /// over the prompts in arrival order, the largest ratio of the prefill up to and including
    /// one to the time left until it is due. `None` when one is due already or has no target,
    /// or when a preempted sequence recomputes (a client is waiting on its next token).
    fn prefill_share_needed(&self, model: &CostModel) -> Option<f64> {
        let mut queued: Vec<&Sequence> = self
            .running
            .iter()
            .chain(self.waiting.iter())
            .filter_map(|id| self.sequences.get(id))
            .filter(|s| s.awaits_prefill() && !s.is_fork_child)
            .collect();
        queued.sort_unstable_by_key(|s| s.arrival);
        let (mut ahead, mut share) = (0.0, 0.0f64);
        for seq in queued {
            if seq.num_output_tokens() > 0 {
                return None;
            }
            ahead += model.chunk_seconds(seq.num_computed_tokens, seq.num_uncomputed_tokens());
            let plan = ttft_plan(seq.ttft_target.or(self.config.latency_targets.ttft)?);
            let due = (seq.added_at + plan).checked_sub(self.clock).filter(|d| !d.is_zero())?;
            share = share.max(ahead / due.as_secs_f64());
        }
        Some(share)
    }
}
