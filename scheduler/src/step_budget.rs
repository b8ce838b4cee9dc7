//! What is left of one step's rows, and of the share of them prefill may take.

pub(crate) struct StepBudget {
    /// Query tokens plus scratch rows still free in this forward.
    rows: usize,
    /// Prefill tokens still allowed; never above `rows`' share once decodes are in the step.
    prefill_tokens: usize,
}

impl StepBudget {
    /// `prefill_cap`: the most prefill tokens this step may carry (`PrefillAllowance`).
    pub(crate) fn new(rows: usize, prefill_cap: usize) -> Self {
        Self { rows, prefill_tokens: prefill_cap.min(rows) }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Prefill tokens still allowed this step.
    pub(crate) fn prefill_tokens(&self) -> usize {
        self.prefill_tokens.min(self.rows)
    }

    /// How many of `wanted` prefill tokens fit in this step, leaving `spared` of them for
    /// someone else.
    pub(crate) fn prefill_grant(&self, wanted: usize, spared: usize) -> usize {
        wanted.min(self.prefill_tokens().saturating_sub(spared))
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
