//! Speculative drafts: granted from the rows a step has left, verified in place, rolled back.

mod common;

use common::{config, new_seq, step};
use entrobatch_scheduler::{DraftOdds, NewSequence, Scheduler};

const BS: usize = 4;

/// A running sequence with `prompt_len` tokens of prompt and one sampled token, decoding.
fn decoding(s: &mut Scheduler, id: u64, prompt_len: usize) {
    let max_tokens = (s.config().num_blocks * BS - prompt_len).min(32);
    s.add(new_seq(id, prompt_len, max_tokens)).unwrap();
    while s.get(id).unwrap().is_prefilling() {
        step(s);
    }
}

#[test]
fn a_draft_rides_after_the_decode_token_with_its_own_slots() {
    let mut s = Scheduler::new(config(64, 4, BS, 16)).unwrap();
    decoding(&mut s, 1, 6);
    let before = s.get(1).unwrap().num_computed_tokens();
    s.set_draft(1, vec![11, 12, 13], DraftOdds::uniform(0.9)).unwrap();
    let out = s.schedule();
    let row = out.scheduled[0];
    assert_eq!((row.num_query_tokens, row.num_draft_tokens), (1, 3));
    assert_eq!(s.draft_token_ids(&row), &[11, 12, 13]);
    assert_eq!(row.draft_positions(), before + 1..before + 4);
    assert_eq!(out.num_batched_tokens, 4);
    let seq = s.get(1).unwrap();
    assert_eq!(seq.num_computed_tokens(), before + 4, "draft rows' KV is being written");
    for p in row.draft_positions() {
        assert!(s.slot(1, 0, p).is_some(), "draft position {p} has a slot");
    }
    // Two of three kept: they and the decode token are computed, the third is not.
    s.accept_draft(1, 2).unwrap();
    assert_eq!(s.get(1).unwrap().num_computed_tokens(), before + 3);
    for t in [11, 12, 99] {
        s.append_token(1, t).unwrap();
    }
    s.check_invariants().unwrap();
    let out = s.schedule();
    assert_eq!((out.scheduled[0].context_len, out.scheduled[0].num_query_tokens), (before + 3, 1));
    assert_eq!(out.scheduled[0].num_draft_tokens, 0, "a verified draft is not proposed again");
}

#[test]
fn a_rejected_draft_gives_back_the_blocks_it_alone_filled_and_is_never_cached() {
    let mut cfg = config(64, 4, BS, 16);
    cfg.enable_prefix_caching = true;
    let mut s = Scheduler::new(cfg).unwrap();
    // 7 prompt tokens + 1 sampled: the decode token sits at position 7, the end of block 1.
    decoding(&mut s, 1, 7);
    let free_before = s.num_free_blocks();
    s.set_draft(1, vec![50, 51, 52, 53, 54, 55, 56, 57], DraftOdds::uniform(1.0)).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled[0].num_draft_tokens, 8);
    assert_eq!(s.num_free_blocks(), free_before - 2, "two more blocks for the draft");
    s.accept_draft(1, 0).unwrap();
    assert_eq!(s.num_free_blocks(), free_before, "rejected: both blocks back in the pool");
    s.append_token(1, 60).unwrap();
    step(&mut s);
    s.check_invariants().unwrap();
    // A newcomer whose prompt is the first sequence's tokens followed by the rejected draft
    // finds only the verified blocks in the cache.
    let mut prompt = s.get(1).unwrap().token_ids()[..8].to_vec();
    prompt.extend([50, 51, 52, 53, 54]);
    s.add(NewSequence { id: 2, prompt_token_ids: prompt, max_tokens: 4, skip_prefix_cache: false, ttft_target: None })
        .unwrap();
    let out = step(&mut s);
    let newcomer = out.scheduled.iter().find(|r| r.seq_id == 2).unwrap();
    assert_eq!(newcomer.context_len, 8, "the two verified blocks hit, the draft's never");
}

#[test]
fn drafts_take_only_the_rows_prefill_left() {
    let mut s = Scheduler::new(config(10, 4, BS, 32)).unwrap();
    decoding(&mut s, 1, 4);
    s.add(new_seq(2, 40, 4)).unwrap();
    s.set_draft(1, vec![1; 8], DraftOdds::uniform(1.0)).unwrap();
    let out = s.schedule();
    let draft = out.scheduled.iter().find(|r| r.seq_id == 1).unwrap().num_draft_tokens;
    let prefill = out.scheduled.iter().find(|r| r.seq_id == 2).unwrap().num_query_tokens;
    assert_eq!((prefill, draft), (9, 0), "the prompt takes what the decode leaves");
    s.accept_draft(1, 0).unwrap();
}

#[test]
fn a_draft_never_runs_past_max_tokens() {
    let mut s = Scheduler::new(config(64, 4, BS, 16)).unwrap();
    s.add(new_seq(1, 4, 3)).unwrap();
    step(&mut s);
    // One output token of 3: a draft of 1 plus the bonus token reaches the limit.
    s.set_draft(1, vec![1, 2, 3, 4], DraftOdds::uniform(1.0)).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled[0].num_draft_tokens, 1);
    s.accept_draft(1, 1).unwrap();
}

#[test]
fn accepting_more_than_was_verified_is_an_error_and_rolls_back() {
    let mut s = Scheduler::new(config(64, 4, BS, 16)).unwrap();
    decoding(&mut s, 1, 4);
    let before = s.get(1).unwrap().num_computed_tokens();
    s.set_draft(1, vec![1, 2], DraftOdds::uniform(1.0)).unwrap();
    s.schedule();
    assert!(s.accept_draft(1, 3).is_err());
    assert_eq!(s.get(1).unwrap().num_computed_tokens(), before + 1);
}

#[test]
fn a_draft_nobody_reported_on_is_rolled_back_at_the_next_step() {
    let mut s = Scheduler::new(config(64, 4, BS, 16)).unwrap();
    decoding(&mut s, 1, 4);
    let before = s.get(1).unwrap().num_computed_tokens();
    s.set_draft(1, vec![1, 2], DraftOdds::uniform(1.0)).unwrap();
    s.schedule();
    s.append_token(1, 5).unwrap();
    let out = s.schedule();
    assert_eq!(out.scheduled[0].context_len, before + 1);
    s.check_invariants().unwrap();
}

#[test]
fn a_draft_never_preempts_and_waits_for_free_blocks() {
    let mut s = Scheduler::new(config(64, 4, BS, 5)).unwrap();
    s.add(new_seq(1, 7, 8)).unwrap();
    s.add(new_seq(2, 7, 8)).unwrap();
    step(&mut s);
    // Both hold two blocks; the decode tokens' slots are in them, and one block is free.
    assert_eq!(s.num_free_blocks(), 1);
    s.set_draft(1, vec![1; 8], DraftOdds::uniform(1.0)).unwrap();
    s.set_draft(2, vec![1; 8], DraftOdds::uniform(1.0)).unwrap();
    let out = s.schedule();
    assert!(out.preempted.is_empty());
    // Six draft tokens (room for the bonus token kept) need two blocks; the one free block is not enough for either.
    assert_eq!(out.scheduled.iter().map(|r| (r.num_query_tokens, r.num_draft_tokens)).collect::<Vec<_>>(), [(1, 0); 2]);
    assert_eq!(s.num_free_blocks(), 1);
    s.check_invariants().unwrap();
}
