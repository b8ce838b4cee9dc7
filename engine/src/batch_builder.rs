use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use entrobatch_model_runner::{ForwardBatch, SeqSpan};
use entrobatch_scheduler::{Scheduler, SchedulerOutput, SeqId};

use crate::request_state::RequestState;
use crate::strategy::SpanPlan;

/// Where one sequence's results sit in the forward's output.
pub struct SpanResult {
    pub seq_id: SeqId,
    pub span_index: usize,
    /// Indices into the forward's logits rows, in the order the strategy asked for them.
    pub logits_indices: Vec<usize>,
    /// Draft tokens verified in this span (`Scheduler::accept_draft` follows).
    pub num_draft_tokens: usize,
    pub context_len: usize,
    /// Query rows whose logits score prompt tokens, and the index of the first of their
    /// logits rows (the rest follow in order).
    pub prompt_rows: Option<(Range<usize>, usize)>,
    /// A scoring-only request whose whole prompt is now computed: it ends without sampling.
    pub scoring_done: bool,
}

/// Packs the scheduler's plan and each strategy's scratch rows into the model runner's
/// varlen batch: the one place where the scheduler's and the runner's vocabularies meet. Query
/// tokens, slots and block tables are read in place from the scheduler's sequences and copied
/// once, into the batch.
/// Each request that gets a span is marked scheduled at `step_started` (its queue time ends).
/// `branch_owners`: the request each branch continuation's sequence belongs to.
pub fn build_batch(
    plan: &SchedulerOutput,
    scheduler: &Scheduler,
    requests: &mut HashMap<SeqId, RequestState>,
    branch_owners: &HashMap<SeqId, SeqId>,
    step_started: Instant,
) -> (ForwardBatch, Vec<SpanResult>) {
    let num_groups = scheduler.config().kv_group_windows.len();
    let mut batch = ForwardBatch { slot_mappings: vec![Vec::new(); num_groups], ..ForwardBatch::default() };
    let mut results = Vec::with_capacity(plan.scheduled.len());
    for scheduled in &plan.scheduled {
        // A branch's continuation runs under its request's strategy (which adds no rows).
        let owner = branch_owners.get(&scheduled.seq_id).unwrap_or(&scheduled.seq_id);
        let (Some(state), Some(seq)) = (requests.get_mut(owner), scheduler.get(scheduled.seq_id)) else {
            continue;
        };
        let token_ids = scheduler.query_token_ids(scheduled);
        let draft = scheduler.draft_token_ids(scheduled);
        let span_plan = SpanPlan {
            context_len: scheduled.context_len,
            token_ids,
            scratch_rows: scheduled.scratch_rows,
            needs_sample: scheduled.needs_sample,
        };
        let scratch = state.strategy.scratch_rows(&span_plan);
        let token_rows = token_ids.len() + draft.len();
        let query_len = token_rows + scratch.len();
        if query_len == 0 {
            continue;
        }
        let query_start = batch.input_ids.len();
        batch.input_ids.extend_from_slice(token_ids);
        batch.input_ids.extend_from_slice(draft);
        let token_positions = scheduled.positions().chain(scheduled.draft_positions());
        batch.positions.extend(token_positions.clone().map(|p| p as u32));
        // The scheduler grew every group's table over every query and draft position.
        for (group, mapping) in batch.slot_mappings.iter_mut().enumerate() {
            mapping.extend(token_positions.clone().map(|p| seq.slot(group, p).unwrap_or(-1)));
            mapping.extend(std::iter::repeat_n(-1, scratch.len()));
        }
        for row in &scratch {
            batch.input_ids.push(row.token_id);
            batch.positions.push(row.position);
        }
        // A draft is verified on the last token's row and every draft row after it.
        let local_rows = if draft.is_empty() {
            state.strategy.logits_rows(&span_plan, scratch.len())
        } else {
            (token_ids.len() - 1..token_rows).collect()
        };
        let mut logits_indices = Vec::with_capacity(local_rows.len());
        for row in local_rows.into_iter().filter(|&r| r < query_len) {
            logits_indices.push(batch.logits_rows.len());
            batch.logits_rows.push(query_start + row);
        }
        let want_attn_metrics = state.strategy.wants_attn_metrics() && !logits_indices.is_empty();
        let prompt_rows = state
            .prompt_scoring
            .as_ref()
            .map(|s| s.rows(scheduled.context_len, token_ids.len(), seq.num_prompt_tokens()))
            .filter(|rows| !rows.is_empty())
            .map(|rows| {
                let first = batch.logits_rows.len();
                batch.logits_rows.extend(rows.clone().map(|r| query_start + r));
                (rows, first)
            });
        state.times.on_scheduled(step_started);
        results.push(SpanResult {
            seq_id: scheduled.seq_id,
            span_index: batch.seqs.len(),
            logits_indices,
            num_draft_tokens: draft.len(),
            context_len: scheduled.context_len,
            prompt_rows,
            scoring_done: state.params.is_scoring_only() && scheduled.needs_sample,
        });
        batch.seqs.push(SeqSpan {
            query_start,
            query_len,
            context_len: scheduled.context_len,
            block_tables: (0..num_groups).map(|g| seq.block_table_ids(g).to_vec()).collect(),
            want_attn_metrics,
            attn_pad_to: state.strategy.attn_pad_to(),
        });
    }
    (batch, results)
}
