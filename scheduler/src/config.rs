//! Scheduler limits and the arithmetic derived from them.

use crate::error::{NeverFitsReason, SchedulerError};
use crate::latency::LatencyTargets;
use crate::sequence::SeqId;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Rows per forward pass: query tokens plus scratch rows, over all sequences.
    pub max_num_batched_tokens: usize,
    /// Prefill tokens (prompt chunks, recomputation after preemption) a step may carry while
    /// sequences decode in it. Every decode waits for the whole forward, so an arrival's long
    /// chunk would stall every stream (Sarathi-Serve's stall-free batching); a step with no
    /// decode in it uses all of `max_num_batched_tokens`. Both are rows of an ordinary prompt:
    /// deep in a long one, a cap buys the time its rows take there. A TPOT target replaces both
    /// with what the target leaves (`Scheduler::prefill_allowance`).
    pub max_prefill_tokens_with_decodes: usize,
    /// Most sequences running (holding blocks) at once.
    pub max_num_seqs: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Blocks (pages) in the KV pool, shared by every KV cache group.
    pub num_blocks: usize,
    /// One entry per KV cache group of the model's layers: the keys its layers attend to
    /// (`None`: all of them). A sequence holds one block table per group; a windowed group's
    /// table gives back the blocks that left its window.
    pub kv_group_windows: Vec<Option<usize>>,
    /// Longest `prompt + max_tokens` accepted.
    pub max_model_len: usize,
    pub enable_prefix_caching: bool,
    /// TTFT and TPOT targets; off by default (`LatencyTargets`).
    pub latency_targets: LatencyTargets,
    /// Rows a step gives branch continuations (the children of `fork`), as a share of the rows
    /// of the other sequences decoding in it, while any of those has never forked (a request
    /// that does not branch): on a few cores a step costs about in proportion to its rows, so
    /// this bounds what branching requests cost the others' time per token. At least one
    /// continuation decodes each step; with only branching requests running, all do.
    pub branch_row_share: f64,
}

/// The one default of the limits: `EngineConfig::new` and the CLI's flags take theirs from here.
/// Sized for a 2-core CPU and a sub-1B model: a 512-row step keeps one forward within a few
/// hundred milliseconds, and 64 sequences fill it with decodes. 64 prefill tokens beside
/// decodes bound SmolLM2's p99 inter-token latency under Poisson load below saturation, at some
/// cost in TTFT and none in throughput (docs/benchmarks/notebook.md, "Served latency: prefill
/// beside decodes").
impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_num_batched_tokens: 512,
            max_prefill_tokens_with_decodes: 64,
            max_num_seqs: 64,
            block_size: 16,
            num_blocks: 1024,
            kv_group_windows: vec![None],
            max_model_len: 4096,
            enable_prefix_caching: true,
            latency_targets: LatencyTargets::default(),
            branch_row_share: 0.15,
        }
    }
}

impl SchedulerConfig {
    pub fn validate(&self) -> Result<(), SchedulerError> {
        let positive = [
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_prefill_tokens_with_decodes", self.max_prefill_tokens_with_decodes),
            ("max_num_seqs", self.max_num_seqs),
            ("block_size", self.block_size),
            ("num_blocks", self.num_blocks),
            ("max_model_len", self.max_model_len),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(SchedulerError::InvalidConfig(format!("{name} must be > 0")));
        }
        let targets = [self.latency_targets.ttft, self.latency_targets.tpot];
        if targets.iter().flatten().any(|t| t.is_zero()) {
            return Err(SchedulerError::InvalidConfig("a latency target must be above zero".into()));
        }
        if !(self.branch_row_share.is_finite() && self.branch_row_share > 0.0) {
            return Err(SchedulerError::InvalidConfig(format!(
                "branch_row_share must be a number above 0, not {}",
                self.branch_row_share
            )));
        }
        if self.kv_group_windows.is_empty() || self.kv_group_windows.contains(&Some(0)) {
            return Err(SchedulerError::InvalidConfig(
                "kv_group_windows needs one entry per KV cache group, and a window of at least one key".into(),
            ));
        }
        // Block ids are u32 and slots are i64 on the wire to the model runner.
        if u32::try_from(self.num_blocks).is_err() {
            return Err(SchedulerError::InvalidConfig(format!(
                "num_blocks = {} does not fit a u32 block id",
                self.num_blocks
            )));
        }
        let slots = (self.num_blocks as u128) * (self.block_size as u128);
        if slots > i64::MAX as u128 {
            return Err(SchedulerError::InvalidConfig("num_blocks * block_size overflows an i64 slot".into()));
        }
        Ok(())
    }

    /// Blocks needed to hold `num_tokens` KV slots in one group's table.
    pub fn blocks_for(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    /// The most pages a sequence of `num_tokens` tokens holds at once, over every group: a
    /// full-attention group all its blocks, a windowed one at most its window plus one step's
    /// tokens (it gives the rest back once each step is committed).
    pub fn pages_for(&self, num_tokens: usize) -> usize {
        let all = self.blocks_for(num_tokens);
        self.kv_group_windows
            .iter()
            .map(|w| match w {
                None => all,
                Some(w) => all.min(self.blocks_for(w + self.max_num_batched_tokens) + 2),
            })
            .sum()
    }

    /// The longest sequence the whole pool holds (`usize::MAX` when every group is windowed
    /// and one sequence's windows fit).
    pub fn max_tokens_in_cache(&self) -> usize {
        let fits = |tokens: usize| self.pages_for(tokens) <= self.num_blocks;
        let mut hi = self.num_blocks.saturating_mul(self.block_size).saturating_add(1);
        if fits(hi) {
            return usize::MAX;
        }
        let mut lo = 0;
        // fits(lo) and !fits(hi); pages_for only grows with the length.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Free blocks kept back at admission so running sequences can keep decoding
    /// for a while before anyone has to be preempted.
    pub fn watermark_blocks(&self) -> usize {
        (self.num_blocks / 100).max(1)
    }

    /// Rejects a request that could not run even alone in an empty engine, so it
    /// can never sit in the waiting queue forever.
    pub fn check_fits(
        &self,
        seq_id: SeqId,
        prompt_len: usize,
        max_tokens: usize,
        lookahead_slots: usize,
    ) -> Result<(), SchedulerError> {
        let total = prompt_len.saturating_add(max_tokens);
        if total > self.max_model_len {
            return Err(SchedulerError::NeverFits {
                seq_id,
                needed_tokens: total,
                limit: self.max_model_len,
                reason: NeverFitsReason::MaxModelLen,
            });
        }
        let slots = total.saturating_add(lookahead_slots);
        if self.pages_for(slots) > self.num_blocks {
            return Err(SchedulerError::NeverFits {
                seq_id,
                needed_tokens: slots,
                limit: self.max_tokens_in_cache(),
                reason: NeverFitsReason::KvCacheCapacity,
            });
        }
        Ok(())
    }

    /// A step must carry at least one real token next to the scratch rows.
    pub fn check_scratch_rows(&self, seq_id: SeqId, rows: usize) -> Result<(), SchedulerError> {
        let needed = rows.saturating_add(1);
        if needed > self.max_num_batched_tokens {
            return Err(SchedulerError::NeverFits {
                seq_id,
                needed_tokens: needed,
                limit: self.max_num_batched_tokens,
                reason: NeverFitsReason::TokenBudget,
            });
        }
        Ok(())
    }
}
