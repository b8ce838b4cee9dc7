#![allow(dead_code)]

use entrobatch_scheduler::{NewSequence, Scheduler, SchedulerConfig, SchedulerOutput, SeqId};

pub mod fake_runner;

pub fn config(budget: usize, max_num_seqs: usize, block_size: usize, num_blocks: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: budget,
        // Off unless a test sets it: most tests reason about the whole budget.
        max_prefill_tokens_with_decodes: budget,
        max_num_seqs,
        block_size,
        num_blocks,
        max_model_len: 1 << 16,
        kv_group_windows: vec![None],
        enable_prefix_caching: false,
        latency_targets: Default::default(),
        branch_row_share: SchedulerConfig::default().branch_row_share,
    }
}

/// Distinct tokens per id so unrelated prompts never share cache blocks.
pub fn prompt(id: SeqId, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| id as u32 * 1000 + i).collect()
}

pub fn new_seq(id: SeqId, prompt_len: usize, max_tokens: usize) -> NewSequence {
    NewSequence {
        id,
        prompt_token_ids: prompt(id, prompt_len),
        max_tokens,
        skip_prefix_cache: false,
        ttft_target: None,
    }
}

/// Schedules once, checks the output against the scheduler, and appends a token to
/// every sampled row (then finishing with Length at max_tokens), like an engine would.
pub fn step(s: &mut Scheduler) -> SchedulerOutput {
    let out = s.schedule();
    check_output(s, &out);
    for row in out.scheduled.iter().filter(|r| r.needs_sample) {
        s.append_token(row.seq_id, 7).unwrap();
        let seq = s.get(row.seq_id).unwrap();
        if seq.num_output_tokens() == seq.max_tokens() {
            s.finish(row.seq_id, entrobatch_scheduler::FinishReason::Length).unwrap();
        }
    }
    s.check_invariants().unwrap();
    out
}

/// What a step takes on a modelled machine: `base` seconds a step, `per_row` a row (scratch
/// rows included), `per_kilo_key` per thousand keys attended, as the scheduler counts them.
pub fn modelled_step_seconds(out: &SchedulerOutput, base: f64, per_row: f64, per_kilo_key: f64) -> f64 {
    let mut work = entrobatch_scheduler::StepWork::default();
    for r in &out.scheduled {
        work.add(entrobatch_scheduler::StepWork::span(r.context_len, r.num_query_tokens + r.scratch_rows));
    }
    base + per_row * work.rows as f64 + per_kilo_key * work.kilo_keys
}

pub fn check_output(s: &Scheduler, out: &SchedulerOutput) {
    let bs = s.config().block_size;
    assert!(out.num_batched_tokens <= s.config().max_num_batched_tokens);
    let rows: usize = out.scheduled.iter().map(|r| r.num_token_rows() + r.scratch_rows).sum();
    assert_eq!(rows, out.num_batched_tokens);
    for row in &out.scheduled {
        let seq = s.get(row.seq_id).expect("scheduled sequence is live");
        let n = row.num_query_tokens;
        // A caught-up sequence may run only strategy scratch rows (MTI, WeDLM).
        assert!(n >= 1 || row.scratch_rows > 0, "empty row for {}", row.seq_id);
        assert_eq!(&seq.token_ids()[row.context_len..row.context_len + n], s.query_token_ids(row));
        assert_eq!(row.needs_sample, row.context_len + n == seq.num_tokens());
        assert!(row.num_draft_tokens == 0 || (row.needs_sample && row.scratch_rows == 0), "draft beside scratch rows");
        assert_eq!(s.draft_token_ids(row), &seq.draft_token_ids()[..row.num_draft_tokens]);
        assert!(seq.num_output_tokens() + row.num_draft_tokens < seq.max_tokens(), "draft past max_tokens");
        for (group, window) in s.config().kv_group_windows.iter().enumerate() {
            let slot_mapping = s.slot_mapping(row, group).expect("the table covers every query token");
            assert_eq!(slot_mapping.len(), n);
            let block_table = seq.block_table_ids(group);
            assert!(block_table.len() * bs >= row.context_len + row.num_token_rows() + seq.lookahead_slots());
            for (i, &slot) in slot_mapping.iter().enumerate() {
                let pos = row.context_len + i;
                assert_eq!(slot, (block_table[pos / bs] as usize * bs + pos % bs) as i64);
                assert_eq!(Some(slot), s.slot(row.seq_id, group, pos));
            }
            // Every key the step's first row attends to is still held.
            let first_key = window.map_or(0, |w| (row.context_len + 1).saturating_sub(w));
            for key in first_key..row.context_len {
                assert!(s.slot(row.seq_id, group, key).is_some(), "group {group} released key {key} still attended");
            }
        }
    }
}
