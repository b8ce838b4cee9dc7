//! What is left of one step's rows, and of the share of them prefill may take.

use crate::config::SchedulerConfig;

pub(crate) struct StepBudget {
    /// Query tokens plus scratch rows still free in this forward.
    rows: usize,
    /// Prefill tokens still allowed; never above `rows`' share once decodes are in the step.
    prefill_tokens: usize,
}

impl StepBudget {
    /// `with_decodes`: some running sequence decodes this step, so prefill is capped to keep
    /// its inter-token latency bounded.
    pub(crate) fn new(config: &SchedulerConfig, with_decodes: bool) -> Self {
        let rows = config.max_num_batched_tokens;
        let prefill_tokens = if with_decodes { config.max_prefill_tokens_with_decodes.min(rows) } else { rows };
        Self { rows, prefill_tokens }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// How many of `wanted` prefill tokens fit in this step.
    pub(crate) fn prefill_grant(&self, wanted: usize) -> usize {
        wanted.min(self.rows).min(self.prefill_tokens)
    }

    /// Spends `n` prefill tokens; `n` came from `prefill_grant`.
    pub(crate) fn take_prefill(&mut self, n: usize) {
        self.rows -= n;
        self.prefill_tokens -= n;
    }

    /// Spends `rows` decode rows (tokens and scratch rows); `rows` fit in `rows()`.
    pub(crate) fn take(&mut self, rows: usize) {
        self.rows -= rows;
    }
}
